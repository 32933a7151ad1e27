"""The database's health against the real PostgreSQL: who holds the vacuum horizon, dead
tuples, `jobs doctor`'s words and exit status, the metrics, the Queues page's notice.

A held horizon is a transaction on a queue_connection of its own that holds a snapshot
(REPEATABLE READ and a SELECT). Statistics counters reach the shared views
asynchronously: ``flush_stats`` makes them arrive (``pg_stat_force_next_flush()``,
PostgreSQL >= 15) or waits until they have (older servers). No assertion is about time:
the thresholds are set so that any age passes them, or none does.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings

from django_durable_jobs import doctor
from django_durable_jobs.models import Job, JobStatus
from tests.factories import queue_connection, wait_until

from .helpers import make_jobs, messages_of, new_connection, scrape, value

QUEUES = "/admin/durable_jobs/queuestate/"
#: Any age passes these; a dead tuple is "high" at one.
EVERYTHING = {
    "HEALTH_HORIZON_AGE_SECONDS": 1e-6,
    "HEALTH_MIN_DEAD_TUPLES": 1,
    "HEALTH_DEAD_TUPLE_RATIO": 0.0,
}
#: No dead tuples are "high" (other tests' rolled-back rows are dead tuples too).
NO_DEAD_TUPLES = {"HEALTH_MIN_DEAD_TUPLES": 10**12}
#: Any horizon passes its threshold; no dead tuples are high.
HORIZON_ONLY = {**EVERYTHING, **NO_DEAD_TUPLES}


@pytest.fixture
def holder() -> Iterator[psycopg.Connection[Any]]:
    """A session that holds back the horizon: REPEATABLE READ, one SELECT, left open."""
    conn = new_connection(autocommit=False)
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    conn.execute("SELECT count(*) FROM durable_jobs_job").fetchone()
    doctor.forget_cached_readings()
    try:
        yield conn
    finally:
        conn.close()
        doctor.forget_cached_readings()


def doctor_json(**settings: Any) -> tuple[int, dict[str, Any]]:
    """``jobs doctor --json``: (its exit status, its JSON)."""
    out = io.StringIO()
    with override_settings(DURABLE_JOBS=settings):
        try:
            call_command("jobs", "doctor", "--json", stdout=out)
            status = 0
        except CommandError as exc:
            status = exc.returncode
    return status, json.loads(out.getvalue())


def doctor_text(**settings: Any) -> tuple[int, str]:
    out = io.StringIO()
    with override_settings(DURABLE_JOBS=settings):
        try:
            call_command("jobs", "doctor", stdout=out)
            status = 0
        except CommandError as exc:
            status = exc.returncode
    return status, out.getvalue()


def flush_stats() -> None:
    """Make this connection's table counters visible in pg_stat_user_tables."""
    with queue_connection.cursor() as cursor:
        if queue_connection.pg_version >= 150000:
            # Flushed when the backend next goes idle, before the next statement runs.
            cursor.execute("SELECT pg_stat_force_next_flush()")
            return
    wait_until(lambda: dead_tuples() > 0)  # the stats collector sends them every 500 ms


def dead_tuples(table: str = "durable_jobs_job") -> int:
    (row,) = [t for t in doctor.read(jobs=False).tables if t.table == table]
    return row.dead


def make_dead_tuples(count: int) -> None:
    Job.objects.filter(pk__in=make_jobs(count, JobStatus.COMPLETED)).delete()
    flush_stats()


# -- the horizon -------------------------------------------------------------------


@pytest.mark.django_db
def test_the_doctor_names_the_session_that_holds_the_horizon(
    holder: psycopg.Connection[Any],
) -> None:
    pid = holder.info.backend_pid
    status, data = doctor_json(**HORIZON_ONLY)
    assert status == 1
    assert data["needs_operator"] is True
    oldest = data["horizon"]["oldest_holder"]
    assert oldest["pid"] == pid and oldest["kind"] == "session"
    assert oldest["state"] == "idle in transaction"
    assert data["horizon"]["age_seconds"] > 0
    (finding,) = [f for f in data["findings"] if f["code"] == "horizon"]
    assert finding["severity"] == "operator" and finding["subject"] == str(pid)
    assert f"SELECT pg_terminate_backend({pid});" in finding["advice"]
    assert "idle_in_transaction_session_timeout" in finding["advice"]

    status, text = doctor_text(**HORIZON_ONLY)
    assert status == 1
    assert f"session pid {pid} (" in text
    assert "has held a transaction open for" in text
    assert "Something needs an operator." in text


@pytest.mark.django_db
def test_a_horizon_younger_than_its_threshold_is_listed_but_needs_no_one(
    holder: psycopg.Connection[Any],
) -> None:
    pid = holder.info.backend_pid
    status, data = doctor_json(HEALTH_HORIZON_AGE_SECONDS=10**9, **NO_DEAD_TUPLES)
    assert status == 0 and data["needs_operator"] is False
    assert pid in [h["pid"] for h in data["horizon"]["holders"]]
    assert not [f for f in data["findings"] if f["code"] == "horizon"]


@pytest.mark.django_db
def test_nothing_held_and_few_dead_tuples_exit_0() -> None:
    status, text = doctor_text(**NO_DEAD_TUPLES)
    assert status == 0
    assert "Vacuum horizon: not held back" in text
    assert "durable_jobs_job" in text  # the tables' table
    assert text.rstrip().endswith("Nothing needs an operator.")


@pytest.mark.django_db
def test_the_horizon_metric_is_the_holders_age(holder: psycopg.Connection[Any]) -> None:
    samples = scrape()
    assert value(samples, "durable_jobs_db_horizon_age_seconds") > 0
    assert ("durable_jobs_db_dead_tuples", frozenset({("table", "durable_jobs_job")})) in samples
    assert value(samples, "durable_jobs_db_hidden_sessions") == 0  # a superuser sees all


@pytest.mark.django_db
def test_a_prepared_transaction_is_named_by_its_gid() -> None:
    with queue_connection.cursor() as cursor:
        cursor.execute("SHOW max_prepared_transactions")
        allowed = int(cursor.fetchone()[0])
    if allowed == 0:
        pytest.skip(
            "max_prepared_transactions is 0 on this server: PREPARE TRANSACTION is refused "
            "(set it > 0 in postgresql.conf and restart to run this test)"
        )
    gid = f"durable-jobs-doctor-{os.getpid()}"
    conn = new_connection(autocommit=False)
    try:
        conn.execute("SELECT count(*) FROM durable_jobs_job")
        conn.execute(f"PREPARE TRANSACTION '{gid}'")
        conn.commit()  # psycopg: the transaction block is over
        status, data = doctor_json(**HORIZON_ONLY)
    finally:
        conn.autocommit = True
        conn.execute(f"ROLLBACK PREPARED '{gid}'")
        conn.close()
    assert status == 1
    (finding,) = [f for f in data["findings"] if f["code"] == "prepared"]
    assert finding["subject"] == gid and f"ROLLBACK PREPARED '{gid}';" in finding["advice"]


@pytest.mark.django_db
def test_a_role_without_pg_read_all_stats_sees_the_sessions_hidden(
    holder: psycopg.Connection[Any],
) -> None:
    role = f"durable_jobs_doctor_reader_{os.getpid()}"
    with queue_connection.cursor() as cursor:
        # Rolled back with the test's transaction, as SET LOCAL is.
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")
        cursor.execute(f"SET LOCAL ROLE {role}")
        try:
            reading = doctor.read(jobs=False)
        finally:
            cursor.execute("RESET ROLE")
    pid = holder.info.backend_pid
    assert pid in reading.hidden
    assert pid not in [h.pid for h in reading.holders]
    assert reading.settings.reads_all_stats is False
    assert "durable_jobs_job" in [t.table for t in reading.tables]  # the statistics still read
    (finding,) = [f for f in doctor.diagnose(reading) if f.code == "hidden_sessions"]
    assert finding.severity == "info" and "pg_read_all_stats" in finding.advice


# -- dead tuples -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_deleted_rows_are_dead_tuples_in_the_doctor_and_the_metrics() -> None:
    make_dead_tuples(40)
    assert dead_tuples() >= 40
    status, data = doctor_json(HEALTH_MIN_DEAD_TUPLES=40, HEALTH_DEAD_TUPLE_RATIO=0.5)
    assert status == 1
    (table,) = [t for t in data["tables"] if t["table"] == "durable_jobs_job"]
    assert table["dead_tuples"] >= 40 and table["dead_ratio"] > 0.5
    finding = next(
        f
        for f in data["findings"]
        if f["code"] == "dead_tuples" and f["subject"] == "durable_jobs_job"
    )
    assert finding["severity"] == "operator" and "VACUUM" in finding["advice"]
    doctor.forget_cached_readings()
    samples = scrape()
    assert value(samples, "durable_jobs_db_dead_tuples", table="durable_jobs_job") >= 40
    assert value(samples, "durable_jobs_db_dead_tuple_ratio", table="durable_jobs_job") > 0.5


# -- the Queues page -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_queues_page_blames_a_held_horizon_for_dead_tuples(
    holder: psycopg.Connection[Any], admin_client: Client
) -> None:
    make_dead_tuples(20)  # deleted while the holder's snapshot may still see them
    pid = holder.info.backend_pid
    with override_settings(DURABLE_JOBS=EVERYTHING):
        notices = messages_of(admin_client.get(QUEUES))
    (notice,) = [m for m in notices if "vacuum horizon" in m]
    assert f"session pid {pid} (" in notice and "durable_jobs_job" in notice
    assert "jobs doctor" in notice

    # Under the thresholds (the defaults: 2 minutes, 10,000 dead tuples): no notice.
    assert not [m for m in messages_of(admin_client.get(QUEUES)) if "vacuum horizon" in m]


@pytest.mark.django_db
def test_the_queues_page_says_nothing_when_nothing_holds_the_horizon(
    admin_client: Client,
) -> None:
    with override_settings(DURABLE_JOBS=EVERYTHING):
        notices = messages_of(admin_client.get(QUEUES))
    assert not [m for m in notices if "vacuum horizon" in m]


# -- the tables --------------------------------------------------------------------


def test_the_tables_come_from_the_models() -> None:
    from django.apps import apps

    tables = doctor.job_tables()
    assert "durable_jobs_job" in tables and "durable_jobs_step" in tables
    models = apps.get_app_config("durable_jobs").get_models()
    # And the job table's active partition, on its own (its dead tuples).
    expected = {m._meta.db_table for m in models if not m._meta.proxy} | {"durable_jobs_job_active"}
    assert expected == set(tables)


# -- a worker's /healthz -------------------------------------------------------------


@pytest.mark.django_db
def test_a_workers_healthz_names_the_holder(holder: psycopg.Connection[Any]) -> None:
    from django_durable_jobs.worker import health

    with override_settings(DURABLE_JOBS=HORIZON_ONLY):
        notes = health.health_notes(None, 1.0)
    (line,) = [n for n in notes if n.startswith("vacuum horizon:")]
    assert f"session pid {holder.info.backend_pid} (" in line and "jobs doctor" in line
