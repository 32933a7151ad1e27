"""Per-queue limits (DURABLE_JOBS["QUEUES"]): cluster-wide, over several workers, on PostgreSQL.

Every check reads the rows' own ``started_at``/``completed_at``: a job counts
as running from its claim to its outcome's commit, which is what the limit
counts too.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.test import override_settings
from prometheus_client import REGISTRY

from django_durable_jobs import db, enqueue, enqueue_many
from django_durable_jobs.flow import QueueLimits, RateLimit
from django_durable_jobs.models import Job, JobStatus
from tests.factories import (
    RunningWorker,
    claim_directly,
    most_running_at_once,
    most_starts_in_a_window,
    queue_connection,
    wait_until,
    worker_config,
)

from .helpers import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def limits(**queues: dict[str, object]) -> override_settings:
    return override_settings(DURABLE_JOBS={"QUEUES": queues})


def run_workers(count: int, queue: str, until: int, **config: object) -> list[Job]:
    """``count`` workers of ``queue`` until ``until`` of its jobs completed; its jobs."""
    workers = [
        RunningWorker(worker_config(burst=False, queues=frozenset({queue}), **config))
        for _ in range(count)
    ]
    try:
        wait_until(
            lambda: Job.objects.filter(queue=queue, status=JobStatus.COMPLETED).count() >= until,
            timeout=60,
            what=f"{until} jobs of {queue} to complete",
        )
    finally:
        for worker in workers:
            worker.stop()
    return list(Job.objects.filter(queue=queue))


def test_a_queue_s_concurrency_holds_over_three_workers() -> None:
    with limits(narrow={"concurrency": 2}):
        enqueue_many([{"type": "tests.record", "queue": "narrow", "payload": {"sleep": 0.2}}] * 12)
        jobs = run_workers(3, "narrow", until=12, concurrency=4)
    assert all(job.status == JobStatus.COMPLETED and job.attempts == 1 for job in jobs)
    # Never more than 2 over the three workers, and the limit is used, not 1 at a time.
    assert most_running_at_once(jobs) == 2


def test_a_queue_s_rate_limit_holds_over_two_workers() -> None:
    with limits(throttled={"rate_limit": "5/s"}):
        enqueue_many([{"type": "tests.record", "queue": "throttled"}] * 25)
        jobs = run_workers(2, "throttled", until=25, concurrency=4)
    starts = [job.started_at for job in jobs]
    assert most_starts_in_a_window(starts, timedelta(seconds=1)) <= 5
    # 25 starts at 5 per second: the first 5 at once, the last 4 s later at least.
    assert max(starts) - min(starts) >= timedelta(seconds=3.9)


def test_a_rate_limit_does_not_slow_other_queues() -> None:
    with limits(throttled={"rate_limit": "1/m"}):
        enqueue_many([{"type": "tests.record", "queue": "throttled"}] * 3)
        enqueue_many([{"type": "tests.record"}] * 20)
        running = RunningWorker(worker_config(burst=False, concurrency=4))
        try:
            wait_until(
                lambda: Job.objects.filter(queue="default", status="completed").count() == 20,
                what="the default queue's jobs",
            )
        finally:
            running.stop()
    assert Job.objects.filter(queue="throttled", status="completed").count() == 1
    assert Job.objects.filter(queue="throttled", status="pending", attempts=0).count() == 2
    sample = REGISTRY.get_sample_value(
        "durable_jobs_throttled_total", {"queue": "throttled", "reason": "rate_limit"}
    )
    assert sample is not None and sample >= 1


def test_a_dead_worker_s_job_holds_its_concurrency_slot_only_until_its_lease_expires() -> None:
    with limits(narrow={"concurrency": 1}):
        orphan = enqueue("tests.record", queue="narrow", priority=10).job
        claim_directly(worker_id="dead-worker", lease_seconds=1.0)  # never finished
        waiting = enqueue("tests.record", queue="narrow").job
        running = RunningWorker(
            worker_config(burst=False, queues=frozenset({"narrow"}), lease_seconds=30)
        )
        try:
            wait_until(
                lambda: Job.objects.get(pk=waiting.pk).status == JobStatus.COMPLETED,
                what="the waiting job to run once the dead worker's lease expired",
            )
        finally:
            running.stop()
    orphan.refresh_from_db()
    started = Job.objects.get(pk=waiting.pk).started_at
    assert orphan.started_at is not None and started is not None
    assert started - orphan.started_at >= timedelta(seconds=1)


def test_racing_claims_of_a_limited_queue_never_start_more_than_its_limit() -> None:
    enqueue_many([{"type": "tests.record", "queue": "narrow"}] * 20)

    def claim(i: int) -> int:
        got = db.claim_limited(
            db.database_alias(),
            worker_id=f"racer-{i}",
            lease_seconds=30,
            queue="narrow",
            limits=QueueLimits(concurrency=3),
            want=5,
        )
        return len(got.jobs)

    for _ in range(3):  # a round; the first may only create the throttle row
        run_in_threads(8, claim)
    assert Job.objects.filter(queue="narrow", status=JobStatus.RUNNING).count() == 3


def test_racing_claims_never_exceed_a_rate_limit() -> None:
    enqueue_many([{"type": "tests.record", "queue": "throttled"}] * 50)
    rate = QueueLimits(rate_limit=RateLimit(7, 60.0))

    def claim(i: int) -> int:
        return len(
            db.claim_limited(
                db.database_alias(),
                worker_id=f"racer-{uuid.uuid4().hex[:4]}",
                lease_seconds=30,
                queue="throttled",
                limits=rate,
                want=4,
            ).jobs
        )

    for _ in range(4):
        run_in_threads(8, claim)
    assert Job.objects.filter(queue="throttled", status=JobStatus.RUNNING).count() == 7


def test_a_burst_worker_waits_for_a_rate_limit_instead_of_exiting_with_jobs_left() -> None:
    from tests.factories import burst

    with limits(throttled={"rate_limit": "4/s", "concurrency": 100}):
        enqueue_many([{"type": "tests.record", "queue": "throttled"}] * 9)
        burst(queues=frozenset({"throttled"}), concurrency=4)
    jobs = list(Job.objects.all())
    assert all(job.status == JobStatus.COMPLETED for job in jobs)
    assert most_starts_in_a_window([job.started_at for job in jobs], timedelta(seconds=1)) <= 4


def window_entries(queue: str) -> tuple[int, int]:
    """The rate window's (entries, starts counted) in the queue's throttle row."""
    with queue_connection.cursor() as cursor:
        cursor.execute(
            "SELECT cardinality(starts), (SELECT COALESCE(sum(n), 0) FROM unnest(counts) AS n)"
            " FROM durable_jobs_throttle WHERE queue = %s",
            [queue],
        )
        entries, counted = cursor.fetchone()
    return entries, counted


def test_claims_close_together_share_one_window_entry_and_the_limit_still_holds() -> None:
    enqueue_many([{"type": "tests.record", "queue": "throttled"}] * 40)
    hourly = QueueLimits(rate_limit=RateLimit(30, 3600.0))  # entries merge within 18 s

    def claim_one() -> int:
        return len(
            db.claim_limited(
                db.database_alias(),
                worker_id="one-at-a-time",
                lease_seconds=30,
                queue="throttled",
                limits=hourly,
                want=1,
            ).jobs
        )

    claimed = sum(claim_one() for _ in range(45))  # the first only creates the row
    assert claimed == 30
    # 30 claims of one job each, a few ms apart: one entry, every start counted.
    assert window_entries("throttled") == (1, 30)


def test_claims_further_apart_than_the_merge_interval_keep_entries_of_their_own() -> None:
    enqueue_many([{"type": "tests.record", "queue": "throttled"}] * 5)
    # A 2 s window merges claims within 10 ms of the last entry. Long enough
    # that a slow machine's four claims stay in it (a 0.2 s one lost an entry
    # to the window's end on a loaded CI).
    fast = QueueLimits(rate_limit=RateLimit(100, 2.0))
    got = 0
    for _ in range(4):
        got += len(
            db.claim_limited(
                db.database_alias(),
                worker_id="w",
                lease_seconds=30,
                queue="throttled",
                limits=fast,
                want=1,
            ).jobs
        )
        time.sleep(0.05)
    entries, counted = window_entries("throttled")
    assert got == 3 and counted == 3 and entries == 3
