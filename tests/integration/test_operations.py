from __future__ import annotations

import uuid

import pytest

from django_durable_jobs import enqueue, operations
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.operations import JobStateError
from tests.factories import make_job

from .helpers import new_connection

pytestmark = pytest.mark.django_db(transaction=True)


def make(status: str, **fields: object) -> Job:
    return make_job("tests.ops", status=status, **fields)


def test_requeue_resets_a_dead_job_and_keeps_its_history() -> None:
    history = [{"attempt": 1, "error": "boom"}]
    job = make(JobStatus.DEAD, attempts=5, errors=history, last_error="boom")
    listener = new_connection()
    try:
        listener.execute("LISTEN durable_jobs")
        requeued = operations.requeue(job.pk)
        assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["default"]
    finally:
        listener.close()
    assert (requeued.status, requeued.attempts) == (JobStatus.PENDING, 0)
    assert requeued.errors == history
    assert requeued.completed_at is None
    assert requeued.available_at <= requeued.updated_at


@pytest.mark.parametrize(
    ("operation", "allowed", "refused"),
    [
        (
            "requeue",
            [JobStatus.DEAD, JobStatus.CANCELLED],
            [JobStatus.PENDING, JobStatus.RUNNING, JobStatus.COMPLETED],
        ),
        (
            "cancel",
            [JobStatus.PENDING, JobStatus.WAITING, JobStatus.RUNNING],
            [JobStatus.COMPLETED, JobStatus.DEAD, JobStatus.CANCELLED],
        ),
        ("run_now", [JobStatus.PENDING], [JobStatus.RUNNING, JobStatus.DEAD, JobStatus.CANCELLED]),
    ],
)
def test_operations_apply_only_to_their_states(
    operation: str, allowed: list[str], refused: list[str]
) -> None:
    do = getattr(operations, operation)
    for status in allowed:
        do(make(status).pk)
    for status in refused:
        job = make(status)
        with pytest.raises(JobStateError) as excinfo:
            do(job.pk)
        assert excinfo.value.job.pk == job.pk
        assert status in str(excinfo.value)
        assert Job.objects.get(pk=job.pk).status == status


def test_cancel_and_run_now() -> None:
    cancelled = operations.cancel(make(JobStatus.PENDING).pk)
    assert cancelled.status == JobStatus.CANCELLED
    assert cancelled.completed_at is not None
    later = enqueue("tests.ops", delay=3600).job
    now = operations.run_now(later.pk)
    assert now.available_at < later.available_at


def test_unknown_ids_raise_does_not_exist() -> None:
    with pytest.raises(Job.DoesNotExist):
        operations.requeue(uuid.uuid4())


def test_bulk_operations_count_changed_and_skipped() -> None:
    dead = [make(JobStatus.DEAD).pk for _ in range(3)]
    others = [make(JobStatus.COMPLETED).pk, make(JobStatus.PENDING).pk]
    result = operations.requeue_many([*dead, *others, uuid.uuid4()])
    assert sorted(result.changed) == sorted(dead)
    assert result.skipped == 2
