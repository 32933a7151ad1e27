"""The job table's partitions (db/partitions.py): where rows live, ranges, drops, keys.

The migration makes the table as it was the past partition, covering every
time up to when it ran (the test database's creation); range partitions
come after. Each test starts without ranges (DDL outlives a test) and makes
the ones it needs from now on. To drop ranges, the tests use a retention
period below zero (a "before" that is in the future): the same code path as
a range that has aged past its retention, without waiting days.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from django_durable_jobs import db, enqueue, pruning
from django_durable_jobs.backoff import RetryPolicy
from django_durable_jobs.db import partitions
from django_durable_jobs.db.records import Outcome, Transition
from django_durable_jobs.models import IdempotencyKey, Job, JobDependency, JobStatus
from django_durable_jobs.worker.maintenance import PARTITIONS_LOCK_KEY, Maintenance
from tests.factories import claim_directly, make_job, queue_connection

from .helpers import new_connection

pytestmark = pytest.mark.django_db(transaction=True)

DAY = timedelta(days=1)


def drop_ranges() -> None:
    """Drop every range partition: DDL outlives a test (a flush only empties tables)."""
    with queue_connection.cursor() as cursor:
        for partition in partitions.partitions(cursor):
            if partition.name.startswith(partitions.RANGE_PREFIX):
                cursor.execute(f"DROP TABLE {partition.name}")


@pytest.fixture(autouse=True)
def _no_ranges() -> Iterator[None]:
    drop_ranges()
    yield
    drop_ranges()


def where(job_id: Any) -> str:
    """The partition that holds the job's row."""
    with queue_connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM durable_jobs_job WHERE id = %s", [job_id]
        )
        (name,) = cursor.fetchone()
    return str(name)


def covering(moment: Any) -> str:
    """The range partition whose range holds ``moment``."""
    with queue_connection.cursor() as cursor:
        (found,) = [
            p.name
            for p in partitions.partitions(cursor)
            if p.name.startswith(partitions.RANGE_PREFIX) and p.start <= moment < p.end
        ]
    return found


def names() -> list[str]:
    with queue_connection.cursor() as cursor:
        return [p.name for p in partitions.partitions(cursor)]


def ranges(days: int = 3) -> list[str]:
    """Create the range partitions of the next ``days`` days; their names."""
    created = partitions.ensure_ranges(db.database_alias(), interval=DAY, ahead=days)
    assert created is not None
    return created


def dead_tuples(table: str) -> int:
    with queue_connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = %s", [table])
        row = cursor.fetchone()
    return 0 if row is None else int(row[0])


def test_the_migration_makes_the_active_past_and_default_partitions() -> None:
    with queue_connection.cursor() as cursor:
        assert partitions.is_partitioned(cursor)
        found = {p.name: p for p in partitions.partitions(cursor)}
    assert {partitions.ACTIVE, partitions.PAST, partitions.OTHER} <= set(found)
    past = found[partitions.PAST]
    assert past.start is None
    # The cutover: when the migration ran.
    assert past.end is not None and past.end < timezone.now()
    assert found[partitions.OTHER].end is None


def test_jobs_in_flight_and_dead_stay_active_and_finished_ones_move_to_their_range() -> None:
    created = ranges()
    pending = make_job()
    dead = make_job(status=JobStatus.DEAD, completed_at=timezone.now())
    tomorrow = timezone.now() + DAY
    completed = make_job(status=JobStatus.COMPLETED, completed_at=tomorrow)
    cancelled = make_job(status=JobStatus.CANCELLED, completed_at=tomorrow)
    today = make_job(status=JobStatus.COMPLETED, completed_at=timezone.now())

    assert where(pending.pk) == where(dead.pk) == partitions.ACTIVE
    expected = partitions.range_name(partitions.floor(tomorrow, DAY))
    assert expected in created
    assert where(completed.pk) == where(cancelled.pk) == expected
    assert where(today.pk) == covering(timezone.now())
    # Before the migration's cutover: the past partition.
    yesterday = make_job(status=JobStatus.COMPLETED, completed_at=timezone.now() - DAY)
    assert where(yesterday.pk) == partitions.PAST
    # A requeue brings a finished job back to the active partition.
    Job.objects.filter(pk=completed.pk).update(status=JobStatus.PENDING, completed_at=None)
    assert where(completed.pk) == partitions.ACTIVE


def test_a_completion_written_by_the_worker_moves_the_row() -> None:
    ranges()
    make_job()
    claimed = claim_directly()
    assert where(claimed.id) == partitions.ACTIVE
    db.record_outcomes(
        db.database_alias(),
        [Outcome(claimed.id, claimed.lease_token, Transition.COMPLETE, json.dumps(1))],
        history_limit=20,
    )
    job = Job.objects.get(pk=claimed.id)
    assert job.status == JobStatus.COMPLETED and job.result == 1
    assert where(claimed.id) == covering(job.completed_at)


def test_ranges_are_created_ahead_once_and_by_one_worker_at_a_time() -> None:
    first = ranges(3)
    assert len(first) == 4  # now's range (from the cutover) and 3 more
    assert ranges(3) == []
    assert ranges(4) == [partitions.range_name(partitions.floor(timezone.now() + 4 * DAY, DAY))]
    holder = new_connection(autocommit=False)
    try:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [PARTITIONS_LOCK_KEY])
        skipped = partitions.ensure_ranges(
            db.database_alias(), interval=DAY, ahead=6, lock_key=PARTITIONS_LOCK_KEY
        )
        assert skipped is None
    finally:
        holder.rollback()
        holder.close()
    assert partitions.ensure_ranges(
        db.database_alias(), interval=DAY, ahead=6, lock_key=PARTITIONS_LOCK_KEY
    )


def test_hour_ranges_follow_day_ranges_without_overlap() -> None:
    ranges(1)
    created = partitions.ensure_ranges(db.database_alias(), interval=timedelta(hours=1), ahead=60)
    assert created
    with queue_connection.cursor() as cursor:
        found = [
            p for p in partitions.partitions(cursor) if p.name.startswith("durable_jobs_job_h")
        ]
    for before, after in itertools.pairwise(found):
        assert before.end == after.start, (before, after)


def test_a_drop_removes_whole_ranges_with_their_keys_and_edges_and_leaves_no_dead_tuple() -> None:
    created = ranges(3)
    soon = timezone.now() + DAY
    keyed = enqueue("tests.record", {}, idempotency_key="kept-while-the-job-exists").job
    parent = make_job()
    child = enqueue("tests.record", {}, depends_on=[parent]).job
    for job in (keyed, parent):
        Job.objects.filter(pk=job.pk).update(status=JobStatus.COMPLETED, completed_at=soon)
    Job.objects.filter(pk=child.pk).update(status=JobStatus.CANCELLED, completed_at=soon)
    others = [make_job(status=JobStatus.COMPLETED, completed_at=soon) for _ in range(20)]
    name = where(keyed.pk)
    assert name in created and where(others[0].pk) == name
    # The key is held while its job exists, in its range.
    assert (
        enqueue("tests.record", {}, idempotency_key="kept-while-the-job-exists").job.pk == keyed.pk
    )
    assert IdempotencyKey.objects.filter(job_id=keyed.pk).exists()
    assert JobDependency.objects.filter(child_id=child.pk).exists()
    untouched = make_job(status=JobStatus.DEAD)
    kept = [p for p in names() if p != name]
    dead_before = {p: dead_tuples(p) for p in kept}

    dropped = pruning.drop_expired(timedelta(days=-3))

    assert dropped is not None and dropped[1] >= 1
    assert name not in names()
    assert not Job.objects.filter(pk__in=[keyed.pk, parent.pk, child.pk]).exists()
    assert not Job.objects.filter(pk__in=[job.pk for job in others]).exists()
    assert Job.objects.filter(pk=untouched.pk).exists()
    assert not IdempotencyKey.objects.filter(job_id=keyed.pk).exists()
    assert not JobDependency.objects.filter(child_id=child.pk).exists()
    # No row of the job table was deleted: nothing more for VACUUM in the
    # partitions left (the dropped ones are gone with their files).
    assert {p: dead_tuples(p) for p in kept if p in names()} == {
        p: n for p, n in dead_before.items() if p in names()
    }
    # The key is free again: a new job.
    again = enqueue("tests.record", {}, idempotency_key="kept-while-the-job-exists")
    assert again.created and again.job.pk != keyed.pk


def test_a_drop_skips_while_another_pruner_holds_the_lock() -> None:
    ranges(2)
    make_job(status=JobStatus.COMPLETED, completed_at=timezone.now() + DAY)
    holder = new_connection(autocommit=False)
    try:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [pruning.PRUNER_LOCK_KEY])
        assert pruning.drop_expired(timedelta(days=-3), lock_key=pruning.PRUNER_LOCK_KEY) is None
    finally:
        holder.rollback()
        holder.close()
    assert pruning.drop_expired(timedelta(days=-3), lock_key=pruning.PRUNER_LOCK_KEY)


def test_the_past_partition_is_emptied_not_dropped() -> None:
    job = make_job(status=JobStatus.COMPLETED, completed_at=timezone.now() - DAY)
    assert where(job.pk) == partitions.PAST
    dropped = pruning.drop_expired(timedelta(days=-3))
    assert dropped is not None
    assert partitions.PAST in names()
    assert not Job.objects.filter(pk=job.pk).exists()
    # And the row-by-row pruning of the past and default partitions still runs.
    assert pruning.prune_batch(["completed"], DAY, limit=10, other_only=True).acquired


def test_a_finished_job_without_a_range_goes_to_the_default_partition_and_is_pruned() -> None:
    far = timezone.now() + 40 * DAY
    stray = make_job(status=JobStatus.COMPLETED, completed_at=far)
    assert where(stray.pk) == partitions.OTHER
    # A range created later must not cover it: the default partition's rows
    # would make the ATTACH fail. Ranges are made from now, so they do not.
    assert ranges(3)
    result = pruning.prune_batch(["completed"], -41 * DAY, limit=10, other_only=True)
    assert result.deleted == 1
    assert not Job.objects.filter(pk=stray.pk).exists()


def test_a_lease_extension_that_waits_on_a_finishing_job_runs_again() -> None:
    # The completer's UPDATE moves a finished job to another partition; a
    # statement that waited for that row fails in PostgreSQL with a
    # serialization error instead of reading the new row. extend_leases
    # runs again, and finds the job finished.
    make_job()
    make_job()
    first, second = claim_directly(), claim_directly()
    held = {first.id: first.lease_token, second.id: second.lease_token}
    mover = new_connection(autocommit=False)
    extended: list[set[Any]] = []
    try:
        mover.execute(
            "UPDATE durable_jobs_job SET status = 'completed', completed_at = now(),"
            " lease_token = NULL WHERE id = %s",
            [first.id],
        )

        def extend() -> None:
            try:
                extended.append(db.extend_leases(db.database_alias(), held, lease_seconds=60.0))
            finally:
                connections.close_all()

        thread = threading.Thread(target=extend)
        thread.start()
        with new_connection() as watcher:
            for _ in range(500):
                waiting = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND datname = current_database()"
                ).fetchone()[0]
                if waiting:
                    break
                time.sleep(0.01)
            assert waiting, "the lease extension never waited for the row"
        mover.commit()
        thread.join(30)
    finally:
        mover.close()
    assert extended == [{second.id}]


def analyze_count() -> int:
    with queue_connection.cursor() as cursor:
        cursor.execute(
            "SELECT analyze_count FROM pg_stat_user_tables"
            " WHERE relid = 'durable_jobs_job'::regclass"
        )
        return int(cursor.fetchone()[0])


def test_the_maintenance_analyzes_the_partitioned_table_at_most_once_an_interval() -> None:
    """Each ANALYZE of the parent reads every partition too (before PostgreSQL 17): after a
    round that changed the partitions, the parent is analyzed unless any session did
    within the interval (ten minutes at least)."""
    maintenance = Maintenance(
        db.database_alias(), "tests-worker", 30.0, dict, lambda lost: None,
        RetryPolicy(1.0, 60.0, 0.0), 20,
    )  # fmt: skip
    maintenance.history_interval = timedelta(hours=1)
    with queue_connection.cursor() as cursor:
        # As if never analyzed: the statistics of the test database's earlier runs.
        cursor.execute("SELECT pg_stat_reset_single_table_counters('durable_jobs_job'::regclass)")
    before = analyze_count()
    assert maintenance.create_partitions()  # the ranges of the next ten hours: analyzed
    assert analyze_count() == before + 1
    drop_ranges()
    assert maintenance.create_partitions()  # changed again, within the interval: not
    assert analyze_count() == before + 1
    assert partitions.analyze(db.database_alias()) is True  # without the bound: always
    assert analyze_count() == before + 2
    assert partitions.analyze_interval(timedelta(minutes=1)) == timedelta(minutes=10)
    assert partitions.analyze_interval(timedelta(days=1)) == timedelta(days=1)
