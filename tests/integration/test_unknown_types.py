"""A job whose type the worker has no handler for: given back uncounted, dead only late.

A worker in this process, real commits (its threads use their own connections).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.db.models import F
from django.test import override_settings
from django.utils import timezone

from django_durable_jobs import enqueue, job
from django_durable_jobs.db.records import Transition
from django_durable_jobs.handlers import registry
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker import unknown_types
from django_durable_jobs.worker.outcomes import release
from tests.factories import burst, claim_directly, finish

pytestmark = pytest.mark.django_db(transaction=True)

TYPE = "deploy.next_release"


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees its own first warning (the process's rate limit is per type)."""
    monkeypatch.setattr(unknown_types, "warnings", unknown_types.Warnings())


@pytest.fixture
def deploy() -> Iterator[Callable[[], None]]:
    """Call it to "deploy" the handler of ``TYPE`` into this process (gone after the test)."""

    def deploy() -> None:
        @job(TYPE)
        def next_release(ctx: object) -> dict[str, str]:
            return {"ran": "new code"}

    yield deploy
    registry.unregister(TYPE)


def test_a_job_of_an_unknown_type_is_given_back_uncounted_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    created = enqueue(TYPE, {"n": 1}).job
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.worker"):
        worker = burst()
    row = Job.objects.get(pk=created.pk)
    assert worker.claimed == 1
    assert (row.status, row.attempts, row.errors) == (JobStatus.PENDING, 0, [])
    assert row.lease_token is None and row.lease_holder is None
    # Out of every claim for a while: the worker that gave it back does not spin on it.
    assert row.available_at - row.updated_at >= timedelta(
        seconds=unknown_types.GIVE_BACK_DELAY_SECONDS - 0.5
    )
    (warning,) = [r for r in caplog.records if "No handler for job type" in r.getMessage()]
    message = warning.getMessage()
    assert warning.levelno == logging.WARNING
    assert TYPE in message and str(created.pk) in message
    assert "deploy the handler to the workers" in message and "INSTALLED_APPS" in message


def test_a_job_given_back_completes_once_a_worker_that_knows_its_type_claims_it(
    deploy: Callable[[], None],
) -> None:
    created = enqueue(TYPE).job
    burst()  # the "old" worker: no handler yet
    assert Job.objects.get(pk=created.pk).status == JobStatus.PENDING
    deploy()
    # Its delay passed (the database's clock moved on, in effect).
    Job.objects.filter(pk=created.pk).update(available_at=F("available_at") - timedelta(minutes=1))
    burst()
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.attempts, row.result) == (JobStatus.COMPLETED, 1, {"ran": "new code"})


def test_a_job_older_than_the_setting_goes_dead_naming_the_missing_handler() -> None:
    created = enqueue(TYPE).job
    Job.objects.filter(pk=created.pk).update(created_at=timezone.now() - timedelta(hours=2))
    burst()
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.attempts) == (JobStatus.DEAD, 1)
    assert row.last_error.startswith(f"No handler is registered for job type '{TYPE}' in worker ")
    assert "in the 1 h since it was enqueued" in row.last_error
    assert "UNKNOWN_TYPE_DEAD_AFTER_SECONDS" in row.last_error
    assert row.errors[0]["exception"] == "django_durable_jobs.UnknownJobType"


@override_settings(DURABLE_JOBS={"UNKNOWN_TYPE_DEAD_AFTER_SECONDS": 600})
def test_the_wait_is_the_setting_counted_from_creation() -> None:
    young, old = enqueue(TYPE).job, enqueue(TYPE).job
    Job.objects.filter(pk=young.pk).update(created_at=timezone.now() - timedelta(seconds=500))
    Job.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(seconds=700))
    burst()
    assert Job.objects.get(pk=young.pk).status == JobStatus.PENDING
    assert Job.objects.get(pk=old.pk).status == JobStatus.DEAD
    assert "in the 10 min since" in Job.objects.get(pk=old.pk).last_error


def test_a_delayed_release_is_fenced_by_the_lease_token() -> None:
    created = enqueue(TYPE).job
    claimed = claim_directly()
    assert claimed.created_at is not None  # the claim returns it: no query to decide
    stale = release(claimed.id, created.pk, delay=5.0)  # a token that is not the lease's
    assert stale.transition is Transition.RELEASE
    assert finish(stale) == set()
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.attempts) == (JobStatus.RUNNING, 1)
    assert finish(release(claimed.id, claimed.lease_token, delay=5.0)) == {created.pk}
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.attempts) == (JobStatus.PENDING, 0)
    assert row.available_at - row.updated_at >= timedelta(seconds=4.5)


def test_a_release_at_shutdown_keeps_its_available_at() -> None:
    created = enqueue(TYPE).job
    before = Job.objects.get(pk=created.pk).available_at
    claimed = claim_directly()
    assert finish(release(claimed.id, claimed.lease_token)) == {created.pk}
    assert Job.objects.get(pk=created.pk).available_at == before
