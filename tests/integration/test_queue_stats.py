"""The per-minute outcome counts behind the Queues chart: a worker writes them with its
heartbeat, concurrent upserts add up, the reaper's outcomes count, old rows are pruned."""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.utils import timezone

from django_durable_jobs import db, enqueue
from django_durable_jobs.db.records import QueueMinuteCounts
from django_durable_jobs.models import Job, JobStatus, QueueMinuteStats
from django_durable_jobs.worker import Worker
from django_durable_jobs.worker.outcomes import complete
from django_durable_jobs.worker.throughput import QUEUE_STATS_KEEP, OutcomeCounts
from tests.factories import (
    claim_directly,
    expire,
    queue_connection,
    reaper,
    run_worker_until,
    worker_config,
)

from .helpers import run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)


def totals() -> dict[str, tuple[int, int, int]]:
    found: dict[str, tuple[int, int, int]] = {}
    for row in QueueMinuteStats.objects.all():
        c, f, d = found.get(row.queue, (0, 0, 0))
        found[row.queue] = (c + row.completed, f + row.failed, d + row.dead)
    return found


def test_a_worker_counts_what_it_recorded_per_queue() -> None:
    for _ in range(3):
        enqueue("tests.record", {}, queue="emails")
    enqueue("tests.record", {}, queue="reports")
    # Fails twice (two retries), then completes; and one discarded: dead at once.
    enqueue("tests.fail_until", {"succeed_on": 3}, queue="emails")
    enqueue("tests.discard", {}, queue="reports")
    run_worker_until(
        lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == 5,
        what="five jobs completed",
        queues=frozenset({"emails", "reports"}),
    )
    # Stopped gracefully: the last counts went out with the maintenance's stop.
    assert totals() == {"emails": (4, 2, 0), "reports": (1, 1, 1)}
    minute = QueueMinuteStats.objects.values_list("minute", flat=True).first()
    assert minute is not None and minute.second == 0 and minute.microsecond == 0
    assert abs(timezone.now() - minute) < timedelta(minutes=3)


def test_the_counts_go_out_with_the_heartbeat_in_one_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enqueue("tests.record", {}, queue="emails")
    enqueue("tests.record", {}, queue="reports")
    enqueue("tests.record", {}, queue="reports")
    worker = Worker(worker_config(burst=False))
    worker.completer.start()
    try:
        for _ in range(3):
            worker.completer.submit(complete(claim_directly(worker.config.worker_id), "null"))
        assert worker.completer.flush(10)
    finally:
        worker.completer.stop(10)
    assert not QueueMinuteStats.objects.exists()  # nothing written per job
    calls: list[list[QueueMinuteCounts]] = []
    add = db.add_queue_stats

    def spy(using: str, counts: list[QueueMinuteCounts]) -> None:
        calls.append(list(counts))
        add(using, counts)

    monkeypatch.setattr(db, "add_queue_stats", spy)
    worker.maintenance.heartbeat()
    assert not calls  # the leases and the workers table: not the counts
    assert worker.maintenance.flush_counts() == 2
    assert [[(row.queue, row.completed) for row in call] for call in calls] == [
        [("emails", 1), ("reports", 2)]
    ]
    assert totals() == {"emails": (1, 0, 0), "reports": (2, 0, 0)}
    assert worker.maintenance.flush_counts() == 0  # nothing new: no statement
    assert len(calls) == 1
    worker.presence.remove()


def test_the_reapers_outcomes_count_as_failed() -> None:
    enqueue("tests.record", {}, queue="emails")
    job = claim_directly()
    expire(job.id)
    maintenance = reaper()
    maintenance.counts = OutcomeCounts()
    assert maintenance.reap() == 1
    maintenance.flush_counts()
    assert totals() == {"emails": (0, 1, 0)}


def test_two_writers_racing_on_the_same_rows_add_up() -> None:
    minute = datetime(2030, 1, 1, 12, 0, tzinfo=dt_timezone.utc)
    rows = [
        QueueMinuteCounts(queue, minute + timedelta(minutes=m), 1, 2, 1)
        for queue in ("a", "b", "c")
        for m in range(3)
    ]

    def write(index: int) -> None:
        # Each writer in its own order: the statement sorts, so no deadlock.
        mine = rows if index % 2 else list(reversed(rows))
        for _ in range(25):
            db.add_queue_stats(db.database_alias(), mine)

    run_in_threads(4, write)
    assert QueueMinuteStats.objects.count() == len(rows)
    assert {(r.completed, r.failed, r.dead) for r in QueueMinuteStats.objects.all()} == {
        (100, 200, 100)
    }


def test_old_rows_are_pruned_by_the_maintenance() -> None:
    now = timezone.now().replace(second=0, microsecond=0)
    QueueMinuteStats.objects.bulk_create(
        [
            QueueMinuteStats(queue="q", minute=now, completed=1),
            QueueMinuteStats(queue="q", minute=now - QUEUE_STATS_KEEP + timedelta(minutes=2)),
            QueueMinuteStats(queue="q", minute=now - QUEUE_STATS_KEEP - timedelta(minutes=2)),
            QueueMinuteStats(queue="r", minute=now - timedelta(days=3)),
        ]
    )
    assert reaper().prune_counts() == 2
    assert QueueMinuteStats.objects.count() == 2


def test_counts_survive_a_failed_write() -> None:
    counts = OutcomeCounts()
    counts.put_back([QueueMinuteCounts("q", timezone.now().replace(second=0), 2, 1, 0)])
    with queue_connection.cursor() as cursor:
        cursor.execute("ALTER TABLE durable_jobs_queue_stats RENAME TO durable_jobs_queue_stats_x")
    try:
        with pytest.raises(Exception, match="durable_jobs_queue_stats"):
            counts.flush(db.database_alias())
    finally:
        with queue_connection.cursor() as cursor:
            cursor.execute(
                "ALTER TABLE durable_jobs_queue_stats_x RENAME TO durable_jobs_queue_stats"
            )
    assert counts.flush(db.database_alias()) == 1
    assert totals() == {"q": (2, 1, 0)}
