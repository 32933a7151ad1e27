"""Retention by partition: dropping N finished jobs, and the migration of a live table.

Run on demand, never in the test suite (issue 27):

    .venv/bin/python benchmarks/partitions.py [--rows 10000000] [--days 10]
        [--keyed-every 100] [--database-url URL] [--migration]

Prune (the default): a dedicated database (``durable_jobs_partitions``,
recreated), migrated, whose past partition is re-bounded to end ``--days``
days ago so that the days since can be range partitions, one a day, as the
workers' maintenance makes them (``HISTORY_PARTITION = "1d"``). ``--rows``
completed jobs (one in 500 cancelled, one in ``--keyed-every`` with an
idempotency key, in ``durable_jobs_idempotency`` too) are filled by SQL,
spread evenly over those days, then VACUUM ANALYZE. Then what the workers'
retention runs (``pruning.drop_expired``: ``partitions.detach`` for each
range that ended before now, then ``partitions.drop_detached``), each timed:
the time it takes, the rows
it dropped, and the dead tuples it left in the job table's partitions and
in the key table (``pg_stat_user_tables``, flushed).

Migration (``--migration``): the same rows in the table as it was before
partitioning (migrated to 0002 only), plus a backlog of pending, running and
dead jobs (one in 1,000 rows), then ``migrate durable_jobs 0003`` timed as a
whole: what a team's deploy waits for, with the table locked.

PostgreSQL here runs with autovacuum off: the dead tuples are what a run
leaves, not what autovacuum has cleaned since.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/durable_jobs_partitions"
CHUNK = 500_000


def setup(url: str) -> None:
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")
    sys.path[:0] = [str(ROOT), str(ROOT / "example_project"), str(ROOT / "benchmarks")]
    import django

    django.setup()


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def fill(rows: int, start: datetime, end: datetime, keyed_every: int, extra: str = "") -> None:
    """``rows`` completed jobs (and cancelled ones) finished evenly from ``start`` to ``end``."""
    seconds = (end - start).total_seconds()
    done = 0
    while done < rows:
        count = min(CHUNK, rows - done)
        sql(
            """
            INSERT INTO durable_jobs_job (
                id, type, queue, payload, idempotency_key, status, priority, attempts,
                max_attempts, available_at, created_at, updated_at, started_at, completed_at,
                last_error, errors, result
            )
            SELECT gen_random_uuid(), 'bench.finished', 'default', jsonb_build_object('i', g),
                CASE WHEN %s > 0 AND g %% GREATEST(%s, 1) = 0 THEN 'bench-key-' || g END,
                CASE WHEN g %% 500 = 0 THEN 'cancelled' ELSE 'completed' END, 0, 1, 5,
                t, t, t, t, t + interval '1 ms', '', '[]'::jsonb, '{"ok": true}'::jsonb
            FROM generate_series(%s, %s) AS g,
                LATERAL (SELECT %s::timestamptz + make_interval(secs => %s * g / %s) AS t) AS x
            """,
            [keyed_every, keyed_every, done, done + count - 1, start, seconds, rows],
        )
        done += count
        print(f"  {done:,} finished jobs{extra}", flush=True)


def dead_tuples() -> dict[str, int]:
    sql("SELECT pg_stat_force_next_flush()")
    return dict(
        sql(
            "SELECT relname, n_dead_tup FROM pg_stat_user_tables"
            " WHERE relname LIKE 'durable\\_jobs\\_job%%' OR relname = 'durable_jobs_idempotency'"
            " ORDER BY relname"
        )
    )


def prune(args: argparse.Namespace) -> None:
    from django.core.management import call_command
    from django.db import connection

    from django_durable_jobs.db import partitions

    call_command("migrate", verbosity=0)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first = today - timedelta(days=args.days)
    # A new database: drop the migration's ranges, and end the (empty) past
    # partition where the benchmark's ranges start.
    with connection.cursor() as cursor:
        for partition in partitions.partitions(cursor):
            if partition.name.startswith(partitions.RANGE_PREFIX):
                cursor.execute(f"DROP TABLE {partition.name}")
    sql(f"ALTER TABLE durable_jobs_job DETACH PARTITION {partitions.PAST}")
    sql(f"ALTER TABLE {partitions.PAST} DROP CONSTRAINT {partitions.PAST}_finished")
    sql(
        f"ALTER TABLE durable_jobs_job ATTACH PARTITION {partitions.PAST}"
        " FOR VALUES FROM (MINVALUE) TO (%s)",
        [first],
    )
    with connection.cursor() as cursor:
        for day in range(args.days + 2):
            start = first + timedelta(days=day)
            partitions.create_range(cursor, start, start + timedelta(days=1))
    started = time.monotonic()
    fill(args.rows, first, today, args.keyed_every)
    sql(
        "INSERT INTO durable_jobs_idempotency (key, job_id) SELECT idempotency_key, id"
        " FROM durable_jobs_job WHERE idempotency_key IS NOT NULL"
    )
    print(f"filled in {time.monotonic() - started:.0f} s; VACUUM ANALYZE", flush=True)
    sql("VACUUM ANALYZE durable_jobs_job")
    sql("VACUUM ANALYZE durable_jobs_idempotency")
    (size,) = sql(
        "SELECT pg_size_pretty(sum(pg_total_relation_size(inhrelid)))"
        " FROM pg_inherits WHERE inhparent = 'durable_jobs_job'::regclass"
    )[0]
    ((count,),) = sql("SELECT count(*) FROM durable_jobs_job")
    ((keys,),) = sql("SELECT count(*) FROM durable_jobs_idempotency")
    print(f"job table: {count:,} rows, {size} with indexes; {keys:,} idempotency keys")
    before = dead_tuples()
    print("dead tuples before:", {k: v for k, v in before.items() if v})
    # What the workers' retention runs (pruning.drop_expired), a partition at
    # a time, each timed.
    expired = partitions.expired_before("default", timedelta(0))
    started = time.monotonic()
    dropped = 0
    for partition in expired:
        one = time.monotonic()
        dropped += partitions.detach("default", partition) or 0
        print(f"  detach {partition.name}: {(time.monotonic() - one) * 1000:.0f} ms")
    took = time.monotonic() - started
    result = (dropped, len(expired))
    started = time.monotonic()
    files = partitions.drop_detached("default")
    print(
        f"then DROP of the {len(files)} detached tables (their files; no lock of the job"
        f" table): {(time.monotonic() - started) * 1000:.0f} ms"
    )
    ((left,),) = sql("SELECT count(*) FROM durable_jobs_job")
    ((keys_left,),) = sql("SELECT count(*) FROM durable_jobs_idempotency")
    after = dead_tuples()
    print(
        f"detach (the jobs gone from the table): {took * 1000:.0f} ms,"
        f" {result[1]} partitions, about {result[0]:,} jobs;"
        f" {left:,} jobs and {keys_left:,} keys left"
    )
    print(
        "dead tuples after (job partitions):",
        {k: v for k, v in after.items() if k != "durable_jobs_idempotency"},
    )
    print("dead tuples after (key table):", after.get("durable_jobs_idempotency", 0))


def migration(args: argparse.Namespace) -> None:
    from django.core.management import call_command

    call_command("migrate", "durable_jobs", "0002", verbosity=0)
    call_command("migrate", verbosity=0, skip_checks=True)
    call_command("migrate", "durable_jobs", "0002", verbosity=0)
    now = datetime.now(UTC)
    fill(args.rows, now - timedelta(days=args.days), now, args.keyed_every, " (before 0003)")
    sql(
        """
        UPDATE durable_jobs_job
        SET status = (ARRAY['pending', 'running', 'dead'])[1 + (random() * 2)::int],
            completed_at = NULL
        WHERE (payload->>'i')::bigint % 1000 = 1
        """
    )
    sql("VACUUM ANALYZE durable_jobs_job")
    ((count,),) = sql("SELECT count(*) FROM durable_jobs_job")
    ((active,),) = sql(
        "SELECT count(*) FROM durable_jobs_job WHERE status IN ('pending', 'running', 'dead')"
    )
    print(f"before: {count:,} jobs, {active:,} pending, running or dead")
    started = time.monotonic()
    call_command("migrate", "durable_jobs", "0003", verbosity=0)
    took = time.monotonic() - started
    rows = sql(
        "SELECT tableoid::regclass::text, count(*) FROM durable_jobs_job GROUP BY 1 ORDER BY 1"
    )
    print(f"migrate durable_jobs 0003: {took:.1f} s; rows by partition: {rows}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument(
        "--keyed-every", type=int, default=100, help="one job in N has an idempotency key (0: none)"
    )
    parser.add_argument("--migration", action="store_true")
    args = parser.parse_args()
    setup(args.database_url)
    (migration if args.migration else prune)(args)


if __name__ == "__main__":
    main()
