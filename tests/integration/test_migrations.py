"""The migrations: the models' schema, all of it, and the way back.

The chain is one ``0001_initial`` (squashed before the first release).
What must hold whatever migrations come later: ``makemigrations`` finds
nothing to do; every index and constraint the models declare exists in the
database under its name (the SQL of ``db/`` names them); the pieces no model
declares (the throttle's rate-window columns, the extended statistics)
exist too; ``migrate durable_jobs zero`` removes every table and migrating
forward again builds the same schema; and the claim reads its index.
"""

from __future__ import annotations

import json
import re
from io import StringIO
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connections
from django.db.migrations.loader import MigrationLoader
from django.test.utils import CaptureQueriesContext

from django_durable_jobs import db
from django_durable_jobs.constants import (
    CLAIM_INDEX,
    CLAIM_QUEUE_INDEX,
    CREATED_INDEX,
    HELD_INDEX,
    IDEMPOTENCY_CONSTRAINT,
    LEASE_INDEX,
    QUEUE_HELD_INDEX,
    QUEUE_STATUS_STATISTICS,
)
from django_durable_jobs.models import Job
from tests.factories import queue_connection

pytestmark = pytest.mark.django_db

APP = "durable_jobs"


def _tables() -> list[str]:
    models = apps.get_app_config(APP).get_models()
    return sorted(m._meta.db_table for m in models if not m._meta.proxy)


def _schema() -> dict[str, Any]:
    """The app's tables as the catalog describes them: columns, indexes, constraints, statistics."""
    with queue_connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT table_name, column_name, data_type, is_nullable, column_default
            FROM information_schema.columns
            WHERE table_schema = current_schema() AND table_name LIKE 'durable\\_jobs\\_%%'
            ORDER BY table_name, ordinal_position
            """
        )
        columns = cursor.fetchall()
        cursor.execute(
            """
            SELECT indexname, indexdef FROM pg_indexes
            WHERE schemaname = current_schema() AND tablename LIKE 'durable\\_jobs\\_%%'
            ORDER BY indexname
            """
        )
        indexes = dict(cursor.fetchall())
        cursor.execute(
            """
            SELECT c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c
            JOIN pg_class t ON t.oid = c.conrelid
            WHERE t.relname LIKE 'durable\\_jobs\\_%%' ORDER BY c.conname
            """
        )
        constraints = dict(cursor.fetchall())
        cursor.execute(
            "SELECT stxname, stxkind FROM pg_statistic_ext WHERE stxname LIKE 'durable\\_jobs\\_%%'"
        )
        statistics = dict(cursor.fetchall())
        cursor.execute(
            """
            SELECT p.proname, pg_get_function_identity_arguments(p.oid), p.provolatile,
                p.proconfig
            FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = current_schema() AND p.proname LIKE 'durable\\_jobs\\_%%'
            ORDER BY p.proname
            """
        )
        functions = {row[0]: row[1:] for row in cursor.fetchall()}
    return {
        "tables": sorted({row[0] for row in columns}),
        "columns": columns,
        "indexes": indexes,
        "constraints": constraints,
        "statistics": statistics,
        "functions": functions,
    }


# With a router (the queue on its own database), makemigrations checks the
# migration history of every database a model may migrate to: "listen" (a
# mirror) too, and "sqlite", which no test sets up (its migrations are
# PostgreSQL's), so its check is left out.
@pytest.mark.django_db(databases=["default", "listen"])
def test_no_missing_migrations(monkeypatch: pytest.MonkeyPatch) -> None:
    check = MigrationLoader.check_consistent_history

    def but_not_on_sqlite(self: MigrationLoader, connection: Any) -> None:
        if connection.alias != "sqlite":
            check(self, connection)

    monkeypatch.setattr(MigrationLoader, "check_consistent_history", but_not_on_sqlite)
    out = StringIO()
    call_command("makemigrations", APP, "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_the_chain_starts_with_one_initial_migration() -> None:
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    roots = [node for node in graph.root_nodes() if node[0] == APP]
    assert roots == [(APP, "0001_initial")]
    # Built in the migration's transaction: the table it creates is empty,
    # so nothing waits for CREATE INDEX (later migrations on a big table
    # use AddIndexConcurrently and atomic = False).
    assert graph.nodes[(APP, "0001_initial")].atomic


#: Tables of the gateway's own, without a model: the workers' marks that
#: enqueues read (migration 0006, ``worker/wakefulness.py``).
def _model_tables(tables: list[str]) -> list[str]:
    """``tables`` without the job table's partitions (``db/partitions.py``)."""
    return [t for t in tables if not t.startswith("durable_jobs_job_")]


def test_the_listeners_table_is_unlogged() -> None:
    """Nothing in it is worth WAL: a crash empties it, and workers write it again."""
    with connections[db.database_alias()].cursor() as cursor:
        cursor.execute(
            "SELECT relpersistence FROM pg_class WHERE relname = 'durable_jobs_listener'"
        )
        assert cursor.fetchone() == ("u",)


def test_every_declared_index_and_constraint_exists_by_name() -> None:
    schema = _schema()
    assert _model_tables(schema["tables"]) == _tables()
    for model in apps.get_app_config(APP).get_models():
        if model._meta.proxy:
            continue
        for index in model._meta.indexes:
            assert index.name in schema["indexes"], (model.__name__, index.name)
        for constraint in model._meta.constraints:
            # A partial unique constraint is a unique index in PostgreSQL's catalog.
            found = constraint.name in schema["constraints"] or constraint.name in schema["indexes"]
            assert found, (model.__name__, constraint.name)


def test_indexes_exist_with_their_definitions() -> None:
    indexes = _schema()["indexes"]
    assert "priority DESC, available_at, created_at" in indexes[CLAIM_INDEX]
    assert "WHERE ((status)::text = 'pending'::text)" in indexes[CLAIM_INDEX]
    assert "WHERE ((status)::text = 'running'::text)" in indexes[LEASE_INDEX]
    # The active partition's lists of jobs in flight: newest first, and the
    # waiting and dead jobs by status (migration 0005); no index by status,
    # type or queue of every row (each would take an entry from every enqueue
    # and claim), while each history partition has those.
    assert (
        "ON public.durable_jobs_job_active USING btree (created_at DESC)" in indexes[CREATED_INDEX]
    )
    assert "(status, created_at DESC) WHERE" in indexes[HELD_INDEX]
    for gone in ("durable_jobs_status_idx", "durable_jobs_type_idx", "durable_jobs_queue_idx"):
        assert gone not in indexes, gone
    assert "queue, priority DESC, available_at, created_at" in indexes[CLAIM_QUEUE_INDEX]
    # The claim's indexes are the active partition's, under the models' names.
    assert "ON public.durable_jobs_job_active " in indexes[CLAIM_INDEX]
    # The table as it was is the past partition; its unique key index stays there.
    past_key = indexes[IDEMPOTENCY_CONSTRAINT + "_past"]
    assert past_key.startswith("CREATE UNIQUE INDEX")
    assert "idempotency_key IS NOT NULL" in past_key
    assert "(queue, status, created_at DESC)" in indexes[QUEUE_HELD_INDEX]
    # Recreated on the active partition from pg_get_indexdef(): the same
    # predicate, its constants spelled with one cast more.
    assert "'waiting'::character varying" in indexes[QUEUE_HELD_INDEX]
    assert "'dead'::character varying" in indexes[QUEUE_HELD_INDEX]


def test_what_no_model_declares_exists_too() -> None:
    schema = _schema()
    assert schema["statistics"] == {
        QUEUE_STATUS_STATISTICS: ["m"],  # on the active partition
        QUEUE_STATUS_STATISTICS + "_past": ["m"],
    }
    throttle = {row[1]: row for row in schema["columns"] if row[0] == "durable_jobs_throttle"}
    assert throttle["starts"][2:] == ("ARRAY", "NO", "'{}'::timestamp with time zone[]")
    assert throttle["counts"][2:] == ("ARRAY", "NO", "'{}'::integer[]")
    # Database defaults, so that a worker of the previous release still inserts.
    job = {row[1]: row[4] for row in schema["columns"] if row[0] == "durable_jobs_job"}
    assert job["on_parent_failure"] == "'cancel'::character varying"
    assert job["waiting_on"] == job["parent_count"] == job["dependent_count"] == "0"
    # The keyed claim (migration 0004): VOLATILE, so each of its statements
    # takes a new snapshot; its plans made for each call's values.
    arguments, volatility, config = schema["functions"]["durable_jobs_claim_keyed"]
    assert volatility == "v"
    assert config == ["plan_cache_mode=force_custom_plan"]
    assert arguments.startswith("p_types text[], p_limits integer[]")


def test_the_job_permissions_are_declared_for_every_door() -> None:
    codenames = {codename for codename, _ in Job._meta.permissions}
    assert codenames == {"requeue_job", "cancel_job", "run_job_now", "pause_queue", "emit_event"}


def _without_the_cutover(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without what the migration's time decides: the range partitions
    (named by their start) and the past partition's bound (the cutover)."""

    def timeless(name: str) -> bool:
        return not name.startswith("durable_jobs_job_h")

    constraints = {
        name: re.sub(r"'[0-9-]+ [0-9:.+]+'", "'<cutover>'", definition)
        for name, definition in schema["constraints"].items()
        if timeless(name)
    }
    return {
        **schema,
        "tables": [t for t in schema["tables"] if timeless(t)],
        "columns": [c for c in schema["columns"] if timeless(c[0])],
        "indexes": {k: v for k, v in schema["indexes"].items() if timeless(k)},
        "constraints": constraints,
    }


def test_migrating_to_zero_and_back_rebuilds_the_same_schema() -> None:
    before = _schema()
    try:
        call_command("migrate", APP, "zero", verbosity=0, database=db.database_alias())
        zero = _schema()
        assert zero["tables"] == []
        assert zero["functions"] == {}
    finally:
        call_command("migrate", APP, verbosity=0, database=db.database_alias())
    assert _without_the_cutover(_schema()) == _without_the_cutover(before)


def test_the_database_rejects_invalid_rows() -> None:
    from django.db import IntegrityError, transaction

    for bad in ({"status": "lost"}, {"max_attempts": 0}, {"idempotency_key": ""}, {"type": ""}):
        with pytest.raises(IntegrityError), transaction.atomic(using=db.database_alias()):
            Job.objects.create(**{"type": "t", **bad})


def test_the_claim_order_reads_the_claim_index() -> None:
    # The claim's own SQL is checked on a big table in test_claim_plan.py;
    # here, the same filter and order on the migrated table: no sort, no
    # sequential scan, however many finished jobs it holds.
    with queue_connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO durable_jobs_job (
                id, type, queue, payload, status, priority, attempts, max_attempts,
                available_at, created_at, updated_at, last_error, errors
            )
            SELECT gen_random_uuid(), 'tests.plan', 'default', '{}',
                   CASE WHEN i % 20 = 0 THEN 'pending' ELSE 'completed' END,
                   i % 5, 0, 5, now() - interval '1 minute', now(), now(), '', '[]'
            FROM generate_series(1, 20000) AS i
            """
        )
        cursor.execute("ANALYZE durable_jobs_job")
        cursor.execute(
            """
            EXPLAIN (FORMAT JSON) SELECT id FROM durable_jobs_job
            WHERE status = 'pending' AND available_at <= now()
            ORDER BY priority DESC, available_at, created_at LIMIT 10
            FOR UPDATE SKIP LOCKED
            """
        )
        plan = json.dumps(cursor.fetchone()[0])
    assert CLAIM_INDEX in plan, plan
    assert '"Seq Scan"' not in plan, plan
    assert '"Sort"' not in plan, plan


@pytest.mark.django_db(databases=["default", "listen"])
def test_0003_moves_the_jobs_in_flight_and_dead_and_keeps_the_finished_ones_and_their_keys() -> (
    None
):
    """A table as 0002 left it, with a job of each status: the ones in flight and the dead
    one move to the active partition (found through the status index), the finished ones
    stay where they were (the past partition), and every key is in the key table."""
    alias = db.database_alias()
    statuses = ["pending", "running", "waiting", "dead", "completed", "cancelled"]
    try:
        call_command("migrate", APP, "0002", verbosity=0, database=alias)
        with queue_connection.cursor() as cursor:
            cursor.execute("DELETE FROM durable_jobs_job")
            cursor.execute(
                """
                INSERT INTO durable_jobs_job (
                    id, type, queue, payload, idempotency_key, status, priority, attempts,
                    max_attempts, available_at, created_at, updated_at, completed_at,
                    last_error, errors, parent_count, dependent_count
                )
                SELECT gen_random_uuid(), 'tests.migrated', 'default', '{}', 'key-' || s, s, 0,
                    0, 5, now(), now(), now(),
                    CASE WHEN s IN ('completed', 'cancelled', 'dead') THEN now() END,
                    '', '[]', 0, 0
                FROM unnest(%s::text[]) AS s
                """,
                [statuses],
            )
        call_command("migrate", APP, verbosity=0, database=alias)
        with queue_connection.cursor() as cursor:
            cursor.execute(
                "SELECT status, tableoid::regclass::text FROM durable_jobs_job ORDER BY status"
            )
            where = dict(cursor.fetchall())
            cursor.execute("SELECT key FROM durable_jobs_idempotency ORDER BY key")
            keys = [row[0] for row in cursor.fetchall()]
    finally:
        call_command("migrate", APP, verbosity=0, database=alias)
        with queue_connection.cursor() as cursor:
            cursor.execute("DELETE FROM durable_jobs_idempotency")
            cursor.execute("DELETE FROM durable_jobs_job")
        # The mirror alias's session (makemigrations' check of every database
        # opens it): open, it keeps the test database from being dropped.
        connections["listen"].close()
    assert where == {
        "pending": "durable_jobs_job_active",
        "running": "durable_jobs_job_active",
        "waiting": "durable_jobs_job_active",
        "dead": "durable_jobs_job_active",
        "completed": "durable_jobs_job_past",
        "cancelled": "durable_jobs_job_past",
    }
    assert keys == sorted(f"key-{s}" for s in statuses)


@pytest.mark.django_db(transaction=True)
def test_0005_builds_and_drops_concurrently_where_migrate_runs_outside_a_transaction() -> None:
    """A live queue keeps writing while 0005 runs: each index is built and dropped
    ``CONCURRENTLY``, which only autocommit allows (a test's transaction has the plain
    statements: the schema tests above)."""
    alias = db.database_alias()
    try:
        with CaptureQueriesContext(connections[alias]) as back:
            call_command("migrate", APP, "0004", verbosity=0, database=alias)
        restored = _schema()["indexes"]
        for name in ("durable_jobs_status_idx", "durable_jobs_type_idx", "durable_jobs_queue_idx"):
            assert "ON public.durable_jobs_job_active " in restored[name], name
        assert HELD_INDEX not in restored
    finally:
        with CaptureQueriesContext(connections[alias]) as forth:
            call_command("migrate", APP, verbosity=0, database=alias)
    statements = [query["sql"] for query in back.captured_queries + forth.captured_queries]
    index_statements = [sql for sql in statements if " INDEX " in sql]
    assert len(index_statements) == 8, statements
    assert all(" INDEX CONCURRENTLY IF " in sql for sql in index_statements), index_statements
    indexes = _schema()["indexes"]
    assert "WHERE ((status)::text = ANY" in indexes[HELD_INDEX]
    assert "durable_jobs_type_idx" not in indexes


@pytest.mark.django_db(transaction=True)
def test_0005_run_again_rebuilds_an_index_that_an_interrupted_concurrent_build_left_invalid() -> (
    None
):
    """An interrupted ``CREATE INDEX CONCURRENTLY`` leaves its index behind, invalid;
    ``IF NOT EXISTS`` alone would keep it, and the Dead jobs list would read no index."""
    alias = db.database_alias()
    try:
        call_command("migrate", APP, "0004", verbosity=0, database=alias)
        with connections[alias].cursor() as cursor:
            cursor.execute(
                f"CREATE INDEX {HELD_INDEX} ON durable_jobs_job_active (status, created_at DESC)"
                " WHERE status IN ('waiting', 'dead')"
            )
            # What the interrupted build leaves (PostgreSQL marks it so until it ends).
            cursor.execute(
                "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass",
                [HELD_INDEX],
            )
    finally:
        with CaptureQueriesContext(connections[alias]) as forth:
            call_command("migrate", APP, verbosity=0, database=alias)
    statements = [query["sql"] for query in forth.captured_queries]
    assert f"DROP INDEX CONCURRENTLY {HELD_INDEX}" in statements, statements
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = %s::regclass", [HELD_INDEX]
        )
        assert cursor.fetchone() == (True,)
