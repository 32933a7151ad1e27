"""Traces across processes: this test enqueues under a span, a real ``runjobworker``
(``tests/e2e/settings_tracing.py``) exports its spans to a file, and the
trace joins up: the worker's attempt under the test's ``send`` span, the
handler's own span under the attempt, a retry linked back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus
from tests.spans import captured_spans, named, tracer

from .helpers import Workers, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SYSTEM = "django_durable_jobs"
ATTEMPT = f"{SYSTEM}.job.attempt"


@pytest.fixture
def worker_env(tmp_path: Path) -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": "tests.e2e.settings_tracing",
        "E2E_SPANS_FILE": str(tmp_path / "spans.jsonl"),
    }


def exported(workers: Workers) -> list[dict[str, Any]]:
    path = Path(workers.env["E2E_SPANS_FILE"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_worker_process_continues_the_trace_of_the_enqueue(workers: Workers) -> None:
    with captured_spans() as spans:
        with tracer().start_as_current_span("request"):
            once = enqueue("tests.traced", queue="emails").job
            flaky = enqueue("tests.atraced", {"succeed_on": 2}, max_attempts=2).job
        (send_once,) = named(spans.get_finished_spans(), "send emails")
        (send_flaky,) = named(spans.get_finished_spans(), "send default")
    proc = workers.start("--concurrency", "2", "--poll-interval", "0.2")
    wait_for(
        lambda: (
            Job.objects.filter(pk__in=[once.pk, flaky.pk], status=JobStatus.COMPLETED).count() == 2
        ),
        60,
        "both jobs to complete",
    )
    proc.terminate()
    assert proc.wait(60) == 0, workers.output()
    found = exported(workers)
    process = {
        (span["attributes"]["messaging.message.id"], span["attributes"][ATTEMPT]): span
        for span in found
        if span["kind"] == "CONSUMER"
    }
    assert set(process) == {(str(once.pk), 1), (str(flaky.pk), 1), (str(flaky.pk), 2)}

    def ids(span: Any) -> tuple[str, str]:
        context = span.get_span_context()
        return f"{context.trace_id:032x}", f"{context.span_id:016x}"

    # The sync job: one attempt, the child of the send span in this process.
    first = process[str(once.pk), 1]
    assert (first["trace_id"], first["parent_span_id"]) == ids(send_once)
    assert first["name"] == "process emails"
    assert first["attributes"][f"{SYSTEM}.job.outcome"] == "completed"
    # The async job: attempt 1 under its send span, failed; attempt 2 a
    # trace of its own, linked to the send span.
    failed, retried = process[str(flaky.pk), 1], process[str(flaky.pk), 2]
    assert (failed["trace_id"], failed["parent_span_id"]) == ids(send_flaky)
    assert (failed["status"], failed["events"]) == ("ERROR", ["exception"])
    assert failed["attributes"][f"{SYSTEM}.job.outcome"] == "retry"
    assert retried["parent_span_id"] is None
    assert retried["trace_id"] != failed["trace_id"]
    assert retried["links"] == [dict(zip(("trace_id", "span_id"), ids(send_flaky), strict=True))]
    assert retried["attributes"][f"{SYSTEM}.job.outcome"] == "completed"
    # Each handler's own span nests under its attempt's span.
    works = [span for span in found if span["name"] == "handler work"]
    assert sorted(span["parent_span_id"] for span in works) == sorted(
        span["span_id"] for span in process.values()
    )
