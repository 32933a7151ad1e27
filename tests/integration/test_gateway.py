"""The gateway (``db``): what users' query instrumentation sees; the reaper's rules."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs import db, enqueue, enqueue_many
from django_durable_jobs.backoff import RetryPolicy
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker.maintenance import REAPER_LOCK_KEY, reaped
from tests.factories import queue_connection

from .helpers import new_connection, wait_for_lock_waiters

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_single_enqueue_goes_through_djangos_cursor() -> None:
    """Debug Toolbar, Sentry, OpenTelemetry and CaptureQueriesContext hook Django's cursor."""
    with CaptureQueriesContext(queue_connection) as queries:
        job = enqueue("tests.record", {"n": 1}).job
    (query,) = queries.captured_queries
    assert "INSERT INTO durable_jobs_job" in query["sql"]
    assert job.pk.hex in query["sql"]  # with its parameters, as Django logs them


def test_a_wrapper_on_djangos_execution_sees_a_single_enqueue() -> None:
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        seen.append(sql)
        return execute(sql, params, many, context)

    with queue_connection.execute_wrapper(wrapper):
        enqueue("tests.record")
    assert len(seen) == 1 and "INSERT INTO durable_jobs_job" in seen[0]


def test_enqueue_many_keeps_the_fast_path() -> None:
    """Measured: a 20,000-job batch is about a third faster on the binary cursor."""
    with CaptureQueriesContext(queue_connection) as queries:
        results = enqueue_many([{"type": "tests.record"}] * 3)
    assert len(results) == 3
    # The transaction's SAVEPOINT/RELEASE go through Django; the INSERT does not.
    assert not [q for q in queries.captured_queries if "durable_jobs_job" in q["sql"]]


def claim(worker_id: str = "ghost") -> uuid.UUID:
    (job,) = db.claim(db.database_alias(), worker_id=worker_id, lease_seconds=30.0, limit=1)
    return job.id


def expire(job_id: uuid.UUID) -> None:
    Job.objects.filter(pk=job_id).update(
        lease_expires_at=Job.objects.get(pk=job_id).started_at - timedelta(seconds=1)
    )


def test_the_reaper_backs_off_exactly_as_a_failed_attempt_does() -> None:
    """One backoff definition: the reaper's delay is RetryPolicy.delay of the attempt."""
    policy = RetryPolicy(base=40.0, cap=1_000.0, jitter=0.0)
    job = enqueue("tests.record", max_attempts=5).job
    for attempt in (1, 2, 3):
        expire(claim())
        (lease, outcome), *_ = db.reap(
            db.database_alias(),
            lock_key=REAPER_LOCK_KEY,
            limit=10,
            history_limit=20,
            decide=lambda lease: reaped(lease, policy),
        )
        row = Job.objects.get(pk=job.pk)
        assert (lease.attempt, row.status, row.attempts) == (attempt, JobStatus.PENDING, attempt)
        # Both timestamps are the database's now() of the reaping transaction's statements.
        waited = (row.available_at - row.updated_at).total_seconds()
        assert waited == pytest.approx(policy.delay(attempt), abs=0.5)
        assert outcome.delay_us == round(policy.delay(attempt) * 1_000_000)
        Job.objects.filter(pk=job.pk).update(available_at=row.created_at)


def test_the_reaper_kills_a_job_with_no_attempt_left_by_the_same_rule() -> None:
    job = enqueue("tests.record", max_attempts=1).job
    expire(claim())
    [(_, outcome)] = db.reap(
        db.database_alias(),
        lock_key=REAPER_LOCK_KEY,
        limit=10,
        history_limit=20,
        decide=lambda lease: reaped(lease, RetryPolicy(1, 1, 0)),
    )
    assert outcome.announce  # nothing else will say how it ended
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.lease_token) == (JobStatus.DEAD, 1, None)
    assert row.last_error.startswith("Abandoned: the lease of worker ghost expired at ")
    assert row.errors[-1]["exception"] == "django_durable_jobs.LeaseExpired"
    assert row.errors[-1]["worker"] == "ghost"


def test_next_available_at_reads_the_soonest_pending_job() -> None:
    assert db.next_available_at(db.database_alias(), None) is None
    soon = enqueue("tests.record", queue="a", delay=timedelta(seconds=30)).job
    enqueue("tests.record", queue="b", delay=timedelta(seconds=10))
    assert db.next_available_at(db.database_alias(), {"a"}) == soon.available_at
    assert db.next_available_at(db.database_alias(), None) < soon.available_at  # type: ignore[operator]


@pytest.mark.parametrize("queues", [None, ["default", "emails"]])
def test_a_claimed_batch_comes_back_in_claim_order(queues: list[str] | None) -> None:
    # An UPDATE returns rows in join order; the worker starts a claimed-ahead
    # batch in the order the claim returns it, so the claim sorts it.
    past = timezone.now() - timedelta(minutes=1)
    rows = [
        {
            "type": "tests.record",
            "priority": i % 3,
            "queue": ("default", "emails")[i % 2],
            # Distinct times: one enqueue_many gives its rows one now().
            "run_at": past + timedelta(milliseconds=i * 7 % 60),
        }
        for i in range(60)
    ]
    ids = [result.job.pk for result in enqueue_many(rows)]
    expected = list(
        Job.objects.filter(pk__in=ids)
        .order_by("-priority", "available_at", "created_at")
        .values_list("pk", flat=True)
    )
    if queues is None:
        claimed = db.claim(db.database_alias(), worker_id="w", lease_seconds=30, limit=60)
        assert [job.id for job in claimed] == expected
    else:
        claimed = db.claim_per_queue(
            db.database_alias(), worker_id="w", lease_seconds=30, limits=[(q, 30) for q in queues]
        )
        assert [job.id for job in claimed] == expected


def test_a_heartbeat_locks_its_jobs_in_id_order_as_outcomes_do() -> None:
    # The completer writes a batch of outcomes in id order while the
    # heartbeat extends the same worker's leases: in any other order the two
    # statements deadlock (the chains benchmark saw 'deadlock detected').
    enqueue_many([{"type": "tests.record"} for _ in range(2)])
    jobs = sorted(
        db.claim(db.database_alias(), worker_id="w", lease_seconds=30, limit=2), key=lambda j: j.id
    )
    first, second = jobs
    held = {second.id: second.lease_token, first.id: first.lease_token}  # the higher id first
    result: list[object] = []

    def heartbeat() -> None:
        try:
            result.append(db.extend_leases(db.database_alias(), held, lease_seconds=60))
        finally:
            connections.close_all()

    holder = new_connection(autocommit=False)
    try:
        holder.execute("SELECT id FROM durable_jobs_job WHERE id = %s FOR UPDATE", [first.id])
        thread = threading.Thread(target=heartbeat)
        thread.start()
        wait_for_lock_waiters(1)
        # Waiting for the first job, the heartbeat must not hold the second.
        with new_connection(autocommit=False) as probe:
            probe.execute(
                "SELECT id FROM durable_jobs_job WHERE id = %s FOR UPDATE NOWAIT", [second.id]
            )
            probe.rollback()
    finally:
        holder.rollback()
        holder.close()
    thread.join(30)
    assert result == [{first.id, second.id}]
