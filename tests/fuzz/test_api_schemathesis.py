"""schemathesis against the live example server, from the committed OpenAPI schema.

``docs/reference/openapi.yaml`` (what ``manage.py spectacular`` writes, and
what ``tests/unit/test_openapi_schema.py`` keeps current) drives every
request: each operation with examples, coverage and random cases
(``@schema.parametrize()``), then the stateful phase, which follows the
schema's OpenAPI links from a created or listed job to its detail, cancel
and requeue, and from a queue to its pause and resume. Every built-in check
runs on every answer: no 5xx, status codes, headers, content types and
bodies as documented, a value the schema allows accepted, one it forbids
refused, authentication not ignored.

The server is pytest-django's ``live_server`` (the example project's
settings and URLs, with the test handlers), as a superuser over HTTP
Basic, with three settings of the fuzz run: ``API_ALLOW_UNREGISTERED_TYPES``
(any valid type name is accepted, as the schema says; the registered-types
rule has its tests in tests/integration/test_api.py), no
``API_FAILED_AUTH_RATE`` (schemathesis tries wrong credentials on every
operation; the limit is tested in test_api_throttling.py), and ``?wait=``
cut to 10 ms (a case waits no longer; the long poll is tested in
test_api_wait.py).

Some rules a JSON Schema cannot state; positive cases (those that should be
accepted) are brought within them before they are sent, and the rules are
in the schema's descriptions: ``depends_on`` names jobs that exist (ids
the server answered), one idempotency key is given (body or header, equal
if both), no NUL in a payload's keys and strings, a ``cursor`` is one a
page gave, a pause's ``until`` is in the future, an event's key is not one
emitted before with another payload (a 409), a requeue's ``from_step`` is
a step the job has (the seeded jobs have none: positive cases send none).

Examples per operation and stateful scenarios come from the hypothesis
profile (tests/conftest.py): ``ci`` by default, ``HYPOTHESIS_PROFILE=long``
for the long run (docs/development.md). The number of requests sent is
printed at the end of the run (tests/fuzz/conftest.py).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from hypothesis import Phase
from hypothesis import settings as hypothesis_settings
from schemathesis import Case, GenerationMode, Response

from django_durable_jobs.api import long_poll
from django_durable_jobs.models import Job, JobDependency, JobStatus, QueueState
from tests.factories import make_job

from .conftest import api_requests

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "openapi.yaml"
schema = schemathesis.openapi.from_path(SCHEMA_FILE)

USER, PASSWORD = "fuzz", "fuzz-password"
AUTH = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}
#: How long a ``?wait=`` request waits here, whatever it asks.
WAIT_SECONDS = 0.01
#: Examples per operation, and stateful scenarios: a third of the profile's
#: (ci: 20, long: 1,000), so that the API's share of a CI run stays near a minute.
EXAMPLES = max(10, hypothesis_settings.default.max_examples // 3)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # pytest-timeout's 300 s per test stopped the long mode's stateful test
    # after 700 of its 1,000 scenarios (about 0.4 s each on a busy machine).
    pytest.mark.timeout(max(300, 2 * EXAMPLES)),
]


class Seen:
    """Job ids and page cursors the server has answered: what positive cases may name."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.cursors: set[str] = set()

    def clear(self) -> None:
        self.jobs.clear()
        self.cursors.clear()

    def remember(self, response: Response) -> None:
        try:
            body = response.json()
        except ValueError:
            return
        if isinstance(body, dict):
            if isinstance(body.get("id"), str) and isinstance(body.get("status"), str):
                self.jobs.append(body["id"])
            for link in ("next", "previous"):
                url = body.get(link)
                if isinstance(url, str) and "cursor=" in url:
                    self.cursors.add(url.split("cursor=", 1)[1].split("&", 1)[0])


seen = Seen()


@pytest.fixture
def fuzz_server(live_server: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The live server's URL, a superuser for AUTH, the fuzz run's settings."""
    settings.DURABLE_JOBS = {
        **settings.DURABLE_JOBS,
        "API_ALLOW_UNREGISTERED_TYPES": True,
        # schemathesis' ignored_auth check sends wrong Basic and Token credentials
        # to every operation, all from 127.0.0.1: with the failed-authentication
        # throttle on, the run's own requests would soon be answered 429.
        "API_FAILED_AUTH_RATE": None,
    }
    real_wait = long_poll.wait

    def short_wait(job_id: uuid.UUID, timeout: float) -> Any:
        return real_wait(job_id, timeout=min(timeout, WAIT_SECONDS))

    monkeypatch.setattr(long_poll, "wait", short_wait)
    # A superuser: every endpoint, every action (is_staff alone grants nothing at REST).
    User.objects.create_superuser(USER, f"{USER}@example.com", PASSWORD)
    yield live_server.url
    seen.clear()


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {_without_nul(key): _without_nul(item) for key, item in value.items()}
    return value


def satisfy_unstated_rules(case: Case) -> None:
    """Bring a positive case within the rules the schema states only in words."""
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return
    label = case.operation.label
    if label == "POST /api/jobs/" and isinstance(case.body, dict):
        body = dict(case.body)
        headers = dict(case.headers or {})
        if "idempotency_key" in body:
            headers.pop("Idempotency-Key", None)
        elif "Idempotency-Key" not in headers:
            body["idempotency_key"] = f"fuzz-{uuid.uuid4()}"
        if "depends_on" in body:
            parents = seen.jobs[-len(body["depends_on"]) :] if body["depends_on"] else []
            if parents:
                body["depends_on"] = parents
            else:
                del body["depends_on"]
        if "payload" in body:
            body["payload"] = _without_nul(body["payload"])
        case.body = body
        case.headers = headers
    elif label == "POST /api/events/" and isinstance(case.body, dict):
        body = dict(case.body)
        if isinstance(body.get("key"), str):
            # Unique per case: a key emitted before with another payload is a 409.
            body["key"] = f"{body['key'][:160]}.{uuid.uuid4().hex}"
        if "payload" in body:
            body["payload"] = _without_nul(body["payload"])
        case.body = body
    elif label == "POST /api/jobs/{id}/requeue/" and isinstance(case.body, dict):
        case.body = {k: v for k, v in case.body.items() if k != "from_step"}
    elif label in ("GET /api/jobs/", "GET /api/audit/") and case.query and "cursor" in case.query:
        if case.query["cursor"] not in seen.cursors:
            case.query = {k: v for k, v in case.query.items() if k != "cursor"}
    elif label == "POST /api/queues/{name}/pause/" and isinstance(case.body, dict):
        until = case.body.get("until")
        when = parse_datetime(until.upper()) if isinstance(until, str) else None
        if when is not None and when <= timezone.now() + timedelta(seconds=5):
            case.body = {k: v for k, v in case.body.items() if k != "until"}


#: The jobs each stateful scenario starts with, oldest first: the list's first
#: job (its links' target) is the last, a dead one, which requeue takes.
SEEDED = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.CANCELLED, JobStatus.DEAD)


def seed_jobs() -> None:
    for status in SEEDED:
        job = make_job("fuzz.seeded", {"status": status}, status=status)
        seen.jobs.append(str(job.pk))


#: Seconds a request may take: schemathesis' default (10 s) read-timed-out once in CI
#: on a two-core machine running the other lanes beside this one (no answer was
#: wrong, none was a 5xx: the live server was slow to be scheduled).
REQUEST_TIMEOUT = 60


def send(case: Case, base_url: str) -> Response:
    satisfy_unstated_rules(case)
    api_requests["parametrized"] += 1
    response = case.call_and_validate(base_url=base_url, headers=AUTH, timeout=REQUEST_TIMEOUT)
    seen.remember(response)
    return response


@schema.parametrize()
@hypothesis_settings(max_examples=EXAMPLES)
def test_every_operation_matches_the_schema(case: Case, fuzz_server: str) -> None:
    send(case, fuzz_server)


def test_sequences_of_calls_along_the_links_match_the_schema(fuzz_server: str) -> None:
    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            # Each scenario from the same empty queue: hypothesis replays draws
            # and expects them to lead where they led (FlakyStrategyDefinition
            # otherwise), and which links apply depends on what the server holds.
            JobDependency.objects.all().delete()
            Job.objects.all().delete()
            QueueState.objects.all().delete()
            seen.clear()
            seed_jobs()
            api_requests["scenarios"] += 1

        def before_call(self, case: Case) -> None:
            satisfy_unstated_rules(case)
            api_requests["stateful"] += 1

        def get_call_kwargs(self, case: Case) -> dict[str, Any]:
            return {"base_url": fuzz_server, "headers": AUTH, "timeout": REQUEST_TIMEOUT}

        def after_call(self, response: Response, case: Case) -> None:
            super().after_call(response, case)
            seen.remember(response)
            api_requests[f"{case.operation.label} {response.status_code}"] += 1

    Workflow.run(
        settings=hypothesis_settings(
            Workflow.TestCase.settings,
            max_examples=EXAMPLES,
            # No shrinking: a scenario replayed meets new ids and times, and
            # the failing scenario is reported as it ran.
            phases=[Phase.explicit, Phase.generate],
        )
    )
