"""Bulk requeue and cancel by filter (``django_durable_jobs.bulk``) on a real PostgreSQL.

A few thousand rows and small batches: the counts, one transaction per
batch, jobs that change state mid-run, dependents, the filters, resuming,
and the validation of bad input.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from django_durable_jobs import bulk, db, enqueue, enqueue_many
from django_durable_jobs.bulk import BulkProgress, InvalidFilter, JobFilter
from django_durable_jobs.constants import PRIORITY_MAX
from django_durable_jobs.db.records import ClaimedJob
from django_durable_jobs.enqueueing import enqueue_own
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker.outcomes import Failure, dead
from tests.factories import WAIT_SECONDS, queue_connection

from .helpers import new_connection, wait_for_lock_waiters

pytestmark = pytest.mark.django_db(transaction=True)

T = "tests.record"


def make_jobs(count: int, status: str, **fields: Any) -> list[uuid.UUID]:
    """``count`` jobs (one enqueue_many: they share one created_at) set to ``status``."""
    queue = fields.pop("queue", "default")
    job_type = fields.pop("type", T)
    results = enqueue_many([{"type": job_type, "payload": {}, "queue": queue}] * count)
    ids = [result.job.pk for result in results]
    Job.objects.filter(pk__in=ids).update(status=status, **fields)
    return ids


def statuses(ids: list[uuid.UUID]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in Job.objects.filter(pk__in=ids).values_list("status", flat=True):
        counts[value] = counts.get(value, 0) + 1
    return counts


# -- counts and batches ------------------------------------------------------------------


def test_requeue_matching_requeues_every_match_in_batches_of_their_own_transaction() -> None:
    dead_ids = make_jobs(2_500, JobStatus.DEAD, attempts=5, last_error="boom")
    # Created at other instants, so the walk crosses created_at ties and steps.
    for _ in range(3):
        dead_ids += make_jobs(10, JobStatus.DEAD, attempts=5)
    others = make_jobs(300, JobStatus.COMPLETED) + make_jobs(200, JobStatus.PENDING)
    seen: list[tuple[int, int, int]] = []

    def on_batch(progress: BulkProgress) -> None:
        assert queue_connection.in_atomic_block  # inside the batch's transaction
        with queue_connection.cursor() as cursor:
            cursor.execute("SELECT txid_current()")
            (txid,) = cursor.fetchone()
        # What another session sees: the batches before this one, committed.
        with new_connection() as other:
            ((pending,),) = other.execute(
                "SELECT count(*) FROM durable_jobs_job WHERE status = 'pending' AND attempts = 0 "
                "AND id = ANY(%s)",
                [dead_ids],
            ).fetchall()
        seen.append((txid, progress.changed, pending))

    progress = bulk.requeue_matching(batch_size=300, on_batch=on_batch)
    assert progress.done
    assert (progress.matched, progress.matched_is_estimate) == (2_530, False)
    assert progress.changed == 2_530
    assert progress.batches == 9  # 2,530 / 300, rounded up
    assert statuses(dead_ids) == {JobStatus.PENDING: 2_530}
    assert statuses(others) == {JobStatus.COMPLETED: 300, JobStatus.PENDING: 200}
    assert len({txid for txid, _, _ in seen}) == 9, "one transaction per batch"
    for index, (_txid, changed, visible) in enumerate(seen):
        assert changed == min(300 * (index + 1), 2_530)
        assert visible == 300 * index  # the earlier batches committed, not this one yet
    requeued = Job.objects.get(pk=dead_ids[0])
    assert (requeued.attempts, requeued.last_error) == (0, "boom")  # history kept


def test_cancel_matching_cancels_pending_jobs_and_leaves_the_others() -> None:
    pending = make_jobs(1_200, JobStatus.PENDING, queue="q")
    other_queue = make_jobs(50, JobStatus.PENDING, queue="other")
    running = make_jobs(20, JobStatus.RUNNING, queue="q")
    progress = bulk.cancel_matching(queue="q", batch_size=500)
    assert (progress.changed, progress.batches, progress.verb) == (1_200, 3, "cancelled")
    assert statuses(pending) == {JobStatus.CANCELLED: 1_200}
    assert statuses(other_queue) == {JobStatus.PENDING: 50}
    # Running jobs are never bulk cancelled, not even asked to stop.
    assert statuses(running) == {JobStatus.RUNNING: 20}
    assert not Job.objects.filter(pk__in=running, cancel_requested_at__isnull=False).exists()


def test_nothing_matching_is_one_empty_batch_read() -> None:
    make_jobs(5, JobStatus.COMPLETED)
    progress = bulk.requeue_matching(batch_size=2)
    assert (progress.matched, progress.changed, progress.batches, progress.done) == (0, 0, 0, True)


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"type": "tests.other"}, "other_type"),
        ({"queue": "emails"}, "emails"),
        ({"error_contains": "smtp TIMEOUT"}, "smtp"),
        ({"status": JobStatus.CANCELLED}, "cancelled"),
        ({"created_before": "old_cutoff"}, "old"),
        ({"created_after": "old_cutoff"}, "new"),
    ],
)
def test_each_filter_selects_its_jobs(filters: dict[str, Any], expected: str) -> None:
    now = timezone.now()
    groups = {
        "other_type": make_jobs(30, JobStatus.DEAD, type="tests.other"),
        "emails": make_jobs(30, JobStatus.DEAD, queue="emails"),
        "smtp": make_jobs(30, JobStatus.DEAD, last_error="ConnectionError: SMTP timeout\n..."),
        "cancelled": make_jobs(30, JobStatus.CANCELLED),
        "old": make_jobs(30, JobStatus.DEAD, created_at=now - timedelta(days=3)),
    }
    new = set(
        Job.objects.filter(created_at__gte=now - timedelta(days=1)).values_list("pk", flat=True)
    )
    groups["new"] = [pk for pk in new if pk not in set(groups["cancelled"])]
    cutoff = now - timedelta(days=1)
    filters = {k: cutoff if v == "old_cutoff" else v for k, v in filters.items()}
    progress = bulk.requeue_matching(batch_size=7, **filters)
    changed = set(Job.objects.filter(status=JobStatus.PENDING).values_list("pk", flat=True))
    assert changed == set(groups[expected])
    assert progress.changed == len(groups[expected])


def test_bulk_jobs_are_left_alone_unless_the_filter_names_their_type() -> None:
    payload = {"filter": {"status": "pending"}}
    earlier = enqueue_own(bulk.BULK_CANCEL, payload, idempotency_key="test:earlier").job
    Job.objects.filter(pk=earlier.pk).update(status=JobStatus.CANCELLED)
    other = make_jobs(3, JobStatus.CANCELLED)
    assert bulk.requeue_matching(status=JobStatus.CANCELLED).changed == 3
    assert Job.objects.get(pk=earlier.pk).status == JobStatus.CANCELLED
    assert statuses(other) == {JobStatus.PENDING: 3}
    assert bulk.requeue_matching(status=JobStatus.CANCELLED, type=bulk.BULK_CANCEL).changed == 1


# -- jobs that change meanwhile ------------------------------------------------------------


def test_a_job_that_changes_state_before_its_batch_is_skipped() -> None:
    ids = make_jobs(100, JobStatus.DEAD)
    moved: list[uuid.UUID] = []

    def on_batch(progress: BulkProgress) -> None:
        if progress.batches == 1:
            # A job the walk has not reached yet is requeued and completes meanwhile.
            remaining = Job.objects.filter(pk__in=ids, status=JobStatus.DEAD)
            moved.append(remaining.values_list("pk", flat=True)[0])
            Job.objects.filter(pk=moved[0]).update(status=JobStatus.COMPLETED)

    progress = bulk.requeue_matching(batch_size=30, on_batch=on_batch)
    assert progress.matched == 100
    assert progress.changed == 99
    assert Job.objects.get(pk=moved[0]).status == JobStatus.COMPLETED
    assert statuses(ids) == {JobStatus.PENDING: 99, JobStatus.COMPLETED: 1}


def test_a_locked_job_that_changes_state_is_waited_for_then_skipped() -> None:
    """The batch waits for a row another session holds, then re-checks the filter on it."""
    ids = make_jobs(50, JobStatus.PENDING)
    held = ids[10]
    outcome: dict[str, Any] = {}

    def cancel_all() -> None:
        try:
            outcome["progress"] = bulk.cancel_matching(batch_size=20)
        except BaseException as exc:  # re-raised below
            outcome["error"] = exc
        finally:
            connections.close_all()

    with new_connection(autocommit=False) as holder:
        holder.execute("SELECT 1 FROM durable_jobs_job WHERE id = %s FOR UPDATE", [held])
        thread = threading.Thread(target=cancel_all)
        thread.start()
        wait_for_lock_waiters(1)
        # A worker claimed it while the bulk cancel waited.
        holder.execute("UPDATE durable_jobs_job SET status = 'running' WHERE id = %s", [held])
        holder.commit()
        thread.join(WAIT_SECONDS)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["progress"].changed == 49
    assert Job.objects.get(pk=held).status == JobStatus.RUNNING
    assert Job.objects.get(pk=held).cancel_requested_at is None
    assert statuses(ids) == {JobStatus.CANCELLED: 49, JobStatus.RUNNING: 1}


def test_jobs_that_die_again_or_are_created_during_the_run_are_not_visited() -> None:
    ids = make_jobs(40, JobStatus.DEAD)
    late: list[uuid.UUID] = []

    def on_batch(progress: BulkProgress) -> None:
        if progress.batches == 1:
            # A requeued job dies again, and a new job dies: both after the walk started.
            again = Job.objects.filter(pk__in=ids, status=JobStatus.PENDING).values_list(
                "pk", flat=True
            )[0]
            Job.objects.filter(pk=again).update(status=JobStatus.DEAD)
            late.extend([again, *make_jobs(1, JobStatus.DEAD)])

    progress = bulk.requeue_matching(batch_size=10, on_batch=on_batch)
    assert progress.changed == 40
    assert progress.batches == 4
    assert statuses(late) == {JobStatus.DEAD: 2}


# -- dependents ---------------------------------------------------------------------------


def _claim(job: Job) -> ClaimedJob:
    Job.objects.filter(pk=job.pk).update(priority=PRIORITY_MAX)
    (claimed,) = db.claim(db.database_alias(), worker_id="w", lease_seconds=30, limit=1)
    assert claimed.id == job.pk
    return claimed


def test_a_bulk_requeue_makes_the_dependents_wait_for_their_parents_again() -> None:
    parents = [enqueue(T).job for _ in range(3)]
    other = enqueue(T).job
    children = [
        enqueue(T, depends_on=[parent, other], on_parent_failure="run").job for parent in parents
    ]
    for parent in parents:
        db.record_outcomes(
            db.database_alias(),
            [dead(_claim(parent), "w", Failure("boom", "ValueError", ""))],
            history_limit=20,
        )
    assert {Job.objects.get(pk=c.pk).waiting_on for c in children} == {1}
    progress = bulk.requeue_matching(batch_size=2)
    assert progress.changed == 3
    assert {Job.objects.get(pk=c.pk).waiting_on for c in children} == {2}
    assert statuses([c.pk for c in children]) == {JobStatus.WAITING: 3}


def test_a_bulk_cancel_cancels_the_waiting_dependents() -> None:
    parents = [enqueue(T, queue="q").job for _ in range(5)]
    children = [enqueue(T, queue="q", depends_on=[parent]).job for parent in parents]
    grandchildren = [enqueue(T, queue="q", depends_on=[child]).job for child in children]
    progress = bulk.cancel_matching(queue="q", batch_size=2)
    assert progress.changed == 5  # the parents; their dependents follow in each transaction
    assert statuses([j.pk for j in children + grandchildren]) == {JobStatus.CANCELLED: 10}
    assert Job.objects.get(pk=children[0].pk).last_error.startswith("Cancelled: parent job")


# -- resuming and the JSON form ---------------------------------------------------------------


def test_a_run_stopped_by_its_callback_rolls_back_that_batch_and_resumes() -> None:
    ids = make_jobs(25, JobStatus.DEAD)
    saved: list[dict[str, Any]] = []

    class Stop(Exception):
        pass

    def stop_at_third(progress: BulkProgress) -> None:
        if progress.batches == 3:
            raise Stop
        saved.append(progress.as_dict())

    with pytest.raises(Stop):
        bulk.requeue_matching(batch_size=5, on_batch=stop_at_third)
    assert statuses(ids) == {JobStatus.PENDING: 10, JobStatus.DEAD: 15}  # batch 3 rolled back
    resume = BulkProgress.from_dict(saved[-1])
    assert (resume.changed, resume.batches, resume.done) == (10, 2, False)
    final = bulk.run("requeue", JobFilter(status="dead"), batch_size=5, resume=resume)
    assert (final.changed, final.batches, final.matched) == (25, 5, 25)
    assert statuses(ids) == {JobStatus.PENDING: 25}


def test_progress_and_filters_round_trip_through_json() -> None:
    job_filter = JobFilter(
        status="dead",
        queue="q",
        type="t",
        created_after=timezone.now() - timedelta(days=2),
        created_before=timezone.now(),
        error_contains="boom",
        search="key-1",
    )
    assert JobFilter.from_dict(job_filter.as_dict()) == job_filter
    progress = BulkProgress("requeue", job_filter, 12_345, True, 2_000, 2)
    progress.cursor = (timezone.now(), uuid.uuid4())
    data = progress.as_dict()
    assert data["requeued"] == 2_000 and data["matched_is_estimate"] is True
    assert BulkProgress.from_dict(data) == progress
    assert progress.describe() == "requeued 2000 of about 12345 matching job(s) in 2 batch(es)"


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: bulk.requeue_matching(status="pending"), "status"),
        (lambda: bulk.cancel_matching(status="dead"), "status"),
        (lambda: bulk.cancel_matching(status="running"), "status"),
        (lambda: bulk.requeue_matching(status="finished"), "status"),
        (lambda: bulk.requeue_matching(batch_size=0), "batch_size"),
        (lambda: bulk.requeue_matching(batch_size=bulk.MAX_BATCH_SIZE + 1), "batch_size"),
        (lambda: bulk.requeue_matching(queue=""), "queue"),
        (lambda: bulk.requeue_matching(created_after="2025-01-01"), "created_after"),  # type: ignore[arg-type]
        (
            lambda: bulk.requeue_matching(created_before=timezone.datetime(2025, 1, 1)),
            "created_before",
        ),
        (
            lambda: bulk.requeue_matching(
                created_after=timezone.now(), created_before=timezone.now() - timedelta(days=1)
            ),
            "created_before",
        ),
        (lambda: JobFilter.from_dict({"status": "dead", "colour": "red"}), "filter"),
        (lambda: JobFilter.from_dict({"queue": "q"}), "status"),
        (lambda: JobFilter.from_dict({"status": "dead", "created_after": "soon"}), "created_after"),
    ],
)
def test_bad_input_is_an_invalid_filter_and_changes_nothing(call: Any, field: str) -> None:
    ids = make_jobs(3, JobStatus.DEAD)
    with pytest.raises(InvalidFilter) as excinfo:
        call()
    assert excinfo.value.field == field
    assert isinstance(excinfo.value, ValueError)
    assert statuses(ids) == {JobStatus.DEAD: 3}


def test_the_count_is_exact_up_to_the_limit_then_an_estimate() -> None:
    make_jobs(30, JobStatus.DEAD)
    with queue_connection.cursor() as cursor:
        cursor.execute("ANALYZE durable_jobs_job")
    queryset = JobFilter(status="dead").queryset()
    assert bulk.count_or_estimate(queryset, limit=100) == (30, False)
    count, estimate = bulk.count_or_estimate(queryset, limit=10)
    assert estimate and count >= 11
