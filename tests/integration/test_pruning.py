"""Pruning: the batch query, its index, the workers' retention and its lock."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from django_durable_jobs import db, pruning
from django_durable_jobs.backoff import RetryPolicy
from django_durable_jobs.checks import check_settings
from django_durable_jobs.constants import FINISHED_INDEX
from django_durable_jobs.db.queries import QUERIES
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker import maintenance as maintenance_module
from django_durable_jobs.worker.maintenance import PRUNER_LOCK_KEY, Maintenance
from tests.factories import make_job, queue_connection, wait_until

from .helpers import new_connection

pytestmark = pytest.mark.django_db(transaction=True)


def make(status: str, age: timedelta, **fields: Any) -> Job:
    return make_job("tests.prune", status=status, completed_at=timezone.now() - age, **fields)


def maintenance(on_heartbeat: Callable[[], None] | None = None) -> Maintenance:
    return Maintenance(
        db.database_alias(), "tests-worker", 30.0, dict, lambda lost: None,
        RetryPolicy(1.0, 60.0, 0.0), 20, on_heartbeat=on_heartbeat,
    )  # fmt: skip


def test_retention_defaults_to_7_days_and_30_for_dead_jobs() -> None:
    with override_settings(DURABLE_JOBS={}):
        assert maintenance().retention == {
            "completed": timedelta(days=7),
            "cancelled": timedelta(days=7),
            "dead": timedelta(days=30),
        }
    with override_settings(DURABLE_JOBS={"RETENTION": None}):
        assert maintenance().retention == {}


def test_the_maintenance_prune_follows_retention() -> None:
    day = timedelta(days=1)
    gone = [
        make(JobStatus.COMPLETED, 8 * day),
        make(JobStatus.CANCELLED, 8 * day),
        make(JobStatus.DEAD, 31 * day),
    ]
    kept = [
        make(JobStatus.COMPLETED, 6 * day),
        make(JobStatus.DEAD, 8 * day),
        make(JobStatus.PENDING, 90 * day),
        make(JobStatus.RUNNING, 90 * day),
    ]
    with override_settings(DURABLE_JOBS={}):
        assert maintenance().prune() == 3
    remaining = set(Job.objects.values_list("pk", flat=True))
    assert remaining == {job.pk for job in kept}
    assert not remaining & {job.pk for job in gone}


def test_a_status_left_out_of_retention_is_kept() -> None:
    old = timedelta(days=365)
    dead = make(JobStatus.DEAD, old)
    make(JobStatus.COMPLETED, old)
    with override_settings(DURABLE_JOBS={"RETENTION": {"completed": "1h", "dead": None}}):
        assert maintenance().prune() == 1
    assert list(Job.objects.values_list("pk", flat=True)) == [dead.pk]


def test_the_maintenance_prune_is_capped_per_round(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(maintenance_module, "PRUNE_BATCH", 2)
    monkeypatch.setattr(maintenance_module, "PRUNE_MAX_BATCHES", 3)
    for _ in range(8):
        make(JobStatus.COMPLETED, timedelta(days=8))
    with override_settings(DURABLE_JOBS={}):
        worker = maintenance()
        assert worker.prune() == 6  # three batches of two, then the round ends
        assert worker.prune() == 2
        assert worker.prune() == 0
    assert not Job.objects.exists()


def test_a_second_pruner_skips_while_one_holds_the_lock() -> None:
    make(JobStatus.COMPLETED, timedelta(days=8))
    other = new_connection(autocommit=False)
    try:
        # Another worker's prune statement, mid-transaction.
        other.execute("SELECT pg_advisory_xact_lock(%s)", [PRUNER_LOCK_KEY])
        with override_settings(DURABLE_JOBS={}):
            assert maintenance().prune() is None
        assert Job.objects.count() == 1
    finally:
        other.rollback()
        other.close()
    with override_settings(DURABLE_JOBS={}):
        assert maintenance().prune() == 1


def test_prune_skips_rows_locked_by_someone_else() -> None:
    locked = make(JobStatus.COMPLETED, timedelta(days=8))
    free = make(JobStatus.COMPLETED, timedelta(days=8))
    other = new_connection(autocommit=False)
    try:
        other.execute("SELECT 1 FROM durable_jobs_job WHERE id = %s FOR UPDATE", [locked.pk])
        deleted, batches = pruning.prune(["completed"], timedelta(days=7), batch_size=10)
    finally:
        other.rollback()
        other.close()
    assert (deleted, batches) == (1, 1)
    assert list(Job.objects.values_list("pk", flat=True)) == [locked.pk]
    assert not Job.objects.filter(pk=free.pk).exists()


def test_prune_reports_each_batch() -> None:
    for _ in range(5):
        make(JobStatus.DEAD, timedelta(hours=2))
    seen: list[tuple[int, int]] = []
    result = pruning.prune(
        ["dead"], timedelta(hours=1), batch_size=2, on_batch=lambda *a: seen.append(a)
    )
    assert result == (5, 3)
    assert seen == [(1, 2), (2, 4), (3, 5)]


def test_prune_is_served_by_the_finished_index() -> None:
    with queue_connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO durable_jobs_job (id, type, queue, payload, status, priority, attempts,
                max_attempts, available_at, created_at, updated_at, completed_at,
                last_error, errors)
            SELECT gen_random_uuid(), 'tests.plan', 'default', '{}',
                (ARRAY['pending', 'completed', 'dead', 'cancelled'])[1 + i % 4], 0, 0, 5,
                now(), now(), now(),
                CASE WHEN i % 4 <> 0 THEN now() - i * interval '1 minute' END, '', '[]'
            FROM generate_series(1, 20000) AS i
            """
        )
        cursor.execute("ANALYZE durable_jobs_job")
    # Bound as the gateway binds it (server-side, binary), so the planner
    # sees the parameters the way production queries pass them.
    server = db._cursor(queue_connection)
    server.execute(
        "EXPLAIN (FORMAT JSON) " + QUERIES["prune_jobs"],
        {
            "statuses": ["completed", "cancelled"],
            "older_than_seconds": 86400.0,
            "limit": 1000,
            "lock_key": pruning.PRUNER_LOCK_KEY,
        },
        binary=True,
    )
    plan = json.dumps(server.fetchone()[0])
    assert FINISHED_INDEX in plan, plan
    assert "Seq Scan on durable_jobs_job" not in plan, plan


@pytest.mark.parametrize(
    "value",
    [
        "7d",
        {"completed": "7 days"},
        {"completed": "0s"},
        {"running": "7d"},
        {"completed": 7},
        ["completed"],
    ],
)
def test_a_bad_retention_is_e003(value: object) -> None:
    with override_settings(DURABLE_JOBS={"RETENTION": value}):
        assert [m.id for m in check_settings()] == ["durable_jobs.E003"]


@pytest.mark.parametrize(
    "value", [None, {}, {"dead": None}, {"completed": "12h", "cancelled": "1w", "dead": "90d"}]
)
def test_a_good_retention_passes(value: object) -> None:
    with override_settings(DURABLE_JOBS={"RETENTION": value}):
        assert check_settings() == []


def test_the_maintenance_thread_prunes_on_its_schedule() -> None:
    make(JobStatus.COMPLETED, timedelta(days=8))
    with override_settings(DURABLE_JOBS={}):
        worker = maintenance()
    worker.prune_interval = 0.05
    worker.start()
    try:
        wait_until(lambda: not Job.objects.exists(), what="the round to prune the old job")
    finally:
        worker.stop()
    assert not Job.objects.exists()


def test_no_retention_means_no_pruning_round() -> None:
    make(JobStatus.COMPLETED, timedelta(days=800))
    beats: list[None] = []
    with override_settings(DURABLE_JOBS={"RETENTION": None}):
        worker = maintenance(on_heartbeat=lambda: beats.append(None))
    worker.prune_interval = 0.01
    worker.heartbeat_interval = 0.01
    worker.start()
    try:
        # Twenty rounds of the thread's loop, each a chance to prune (were it due).
        wait_until(lambda: len(beats) >= 20, what="twenty heartbeats")
    finally:
        worker.stop()
    assert Job.objects.count() == 1
