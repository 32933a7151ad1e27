"""Layouts A and BP with 10M finished jobs: the claim, the admin's reads, pruning, migration.

Run on demand, never in the test suite (it writes about 10 GB for the
default 10,000,000 rows, and takes 15-25 minutes on a 2-core machine):

    .venv/bin/python benchmarks/storage/scale.py [--database-url URL] [--rows 10000000]
        [--seconds 20] [--repeats 3] [--skip-migration]

For layout A (today's table) and layout BP (hot table + history partitioned
by day), in databases of their own:

1. fill: ``--rows`` completed jobs spread over the 10 days before today
   (time-ordered ids, 4 types, 3 queues, a few cancelled), by INSERT ...
   SELECT generate_series with the secondary indexes built afterwards; then
   VACUUM ANALYZE. Prints the table + index sizes.
2. the lifecycle (lifecycle.py's clients, 2 of them) on the filled database
   and on an empty one of the same layout, back to back, ``--repeats`` times:
   jobs/s and PostgreSQL CPU per job (clients' and vacuumer's backends).
3. the admin's reads: the job list's first page (newest first), filtered by
   status, queue or type; the paginator's capped count; a full count by
   status and queue; the Queues page (queue_overview) - through the view
   ``durable_jobs_all`` (hot UNION ALL history) for BP.
4. pruning one day (1/10 of the rows): A with the package's prune_jobs
   statement (DELETE, then the VACUUM it needs); BP by DROP of that day's
   partition, and by DETACH ... CONCURRENTLY of the next one.
5. migration (A only): today's table attached as the first partition of a
   partitioned history without rewriting it (the unfinished rows moved out to
   a hot table first), each step timed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import lifecycle
from layouts import (
    DEFAULT_URL,
    LAYOUTS,
    B,
    Layout,
    create_partitions,
    drop_database,
    ensure_template,
    make_layout_db,
    on_table,
    relation_sizes,
)

from django_durable_jobs.db.queries import QUERIES

DAYS = 10

# Time-ordered (version 7 like) ids made in SQL from the row's created_at.
FILL = """
INSERT INTO {table} (id, type, queue, payload, idempotency_key, status, priority, attempts,
    max_attempts, available_at, created_at, updated_at, started_at, completed_at, last_error,
    errors, result, on_parent_failure, parent_count, waiting_on, dependent_count)
SELECT
    (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0') || '7'
        || substr(md5(g::text), 1, 3) || '8' || substr(md5(g::text), 4, 15))::uuid,
    (ARRAY['mail.send', 'billing.charge', 'report.build', 'rare.type'])[
        CASE WHEN g %% 1000 = 0 THEN 4 ELSE 1 + g %% 3 END],
    (ARRAY['default', 'mail', 'billing'])[1 + g %% 3],
    jsonb_build_object('user_id', g, 'template', 'welcome', 'locale', 'en'),
    NULL,
    CASE WHEN g %% 500 = 0 THEN 'cancelled' ELSE 'completed' END,
    0, 1, 5, t, t, t + interval '2 ms', t + interval '1 ms', t + interval '2 ms', '',
    '[]'::jsonb, NULL, 'cancel', 0, 0, 0
FROM generate_series(1, %(rows)s) AS g,
    LATERAL (SELECT %(start)s::timestamptz
        + (g - 1) * (%(span)s::interval / %(rows)s) AS t) AS times
"""


def timed(conn: Any, query: str, params: Any = None, repeat: int = 5) -> float:
    """Median wall milliseconds of ``query`` (after one warm-up run)."""
    conn.execute(query, params).fetchall()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        conn.execute(query, params).fetchall()
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def secondary_indexes(conn: Any, table: str) -> list[tuple[str, str]]:
    return conn.execute(
        """
        SELECT i.indexname, i.indexdef FROM pg_indexes AS i
        WHERE i.tablename = %s AND NOT EXISTS (
            SELECT 1 FROM pg_constraint AS c WHERE c.conname = i.indexname)
        """,
        [table],
    ).fetchall()


def fill(conn: Any, layout: Layout, rows: int, start: datetime) -> None:
    table = layout.history or layout.hot
    indexes = secondary_indexes(conn, table)
    for name, _ in indexes:
        conn.execute(f"DROP INDEX {name}")
    t0 = time.monotonic()
    conn.execute(
        FILL.format(table=table),
        {"rows": rows, "start": start, "span": timedelta(days=DAYS) - timedelta(seconds=1)},
    )
    for _, definition in indexes:
        # pg_indexes gives a partitioned index as "ON ONLY parent", which would
        # create it on the parent alone (invalid, no partition's index built).
        conn.execute(definition.replace(" ON ONLY ", " ON "))
    conn.execute("VACUUM ANALYZE")
    size = relation_sizes(conn, [table])
    print(
        f"{layout.name}: filled {rows:,} finished jobs in {time.monotonic() - t0:.0f} s: "
        f"heap {size['heap'] / 2**30:.2f} GiB, indexes {size['index'] / 2**30:.2f} GiB",
        flush=True,
    )


def reset_filled(conn: Any, layout: Layout, cutoff: datetime) -> None:
    """Remove what the last lifecycle run added, keeping the filled history."""
    if layout.history:
        conn.execute(f"TRUNCATE {layout.hot}")
        conn.execute(f"TRUNCATE durable_jobs_history_{datetime.now(UTC):%Y%m%d}")
    else:
        conn.execute("DELETE FROM durable_jobs_job WHERE created_at >= %s", [cutoff])
    cur = conn.cursor()
    for _ in range(lifecycle.BACKLOG // 1000):
        lifecycle.enqueue(cur, layout, 1000)
    conn.execute(f"VACUUM ANALYZE {', '.join(layout.tables)}")
    conn.execute("CHECKPOINT")


def compare_claim(urls: dict[str, str], layout: Layout, args: Any, cutoff: datetime) -> None:
    import psycopg

    runs: dict[str, list[dict[str, float]]] = {"empty": [], "filled": []}
    original_reset = lifecycle.reset
    for repeat in range(args.repeats):
        for which in ("empty", "filled") if repeat % 2 == 0 else ("filled", "empty"):
            if which == "filled":
                lifecycle.reset = lambda conn, lay: reset_filled(conn, lay, cutoff)
            else:
                lifecycle.reset = original_reset
            r = lifecycle.one_run(urls[which], layout, 2, args.seconds)
            runs[which].append(r)
            print(
                f"  {layout.name} {which:>6} repeat {repeat + 1}: {r['jobs_s']:.0f} jobs/s "
                f"{r['cpu_us']:.1f} us/job",
                flush=True,
            )
    lifecycle.reset = original_reset
    for which, rs in runs.items():
        print(
            f"{layout.name} {which}: jobs/s {lifecycle.spread([r['jobs_s'] for r in rs])}, "
            f"PG CPU us/job {lifecycle.spread([r['cpu_us'] for r in rs])}",
            flush=True,
        )
    with psycopg.connect(urls["filled"], autocommit=True) as conn:
        conn.execute(f"DELETE FROM {layout.hot} WHERE status <> 'completed'")


def admin_reads(conn: Any, layout: Layout) -> None:
    if layout.history:
        source, newest = "durable_jobs_all", "id DESC"
        overview = on_table(QUERIES["queue_overview"], layout.hot)
    else:
        source, newest = "durable_jobs_job", "created_at DESC"
        overview = QUERIES["queue_overview"]
    cols = "id, type, queue, status, created_at, completed_at"
    reads = {
        "list, newest first": f"SELECT {cols} FROM {source} ORDER BY {newest} LIMIT 50",
        "list, status=cancelled": f"SELECT {cols} FROM {source} WHERE status = 'cancelled' "
        f"ORDER BY {newest} LIMIT 50",
        "list, queue=mail": f"SELECT {cols} FROM {source} WHERE queue = 'mail' "
        f"ORDER BY {newest} LIMIT 50",
        "list, type=rare.type": f"SELECT {cols} FROM {source} WHERE type = 'rare.type' "
        f"ORDER BY {newest} LIMIT 50",
        "list, page 200 (offset 10,000)": f"SELECT {cols} FROM {source} "
        f"ORDER BY {newest} LIMIT 50 OFFSET 10000",
        "paginator count (capped at 1,001)": f"SELECT count(*) FROM (SELECT 1 FROM {source} "
        "LIMIT 1001) AS capped",
        "count by status and queue (all rows)": f"SELECT status, queue, count(*) FROM {source} "
        "GROUP BY 1, 2",
    }
    for label, query in reads.items():
        print(
            f"{layout.name} {label}: {timed(conn, query, repeat=3 if 'all' in label else 5):.2f} ms"
        )
    ms = timed(
        conn,
        overview,
        {"queues": ["default", "mail", "billing"], "cap": 10_000, "max_priorities": 10},
    )
    print(f"{layout.name} Queues page (queue_overview): {ms:.2f} ms", flush=True)


def dead_tuples(conn: Any, table: str) -> int:
    time.sleep(1.1)
    (n,) = conn.execute(
        "SELECT COALESCE(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relname LIKE %s",
        [table + "%"],
    ).fetchone()
    return int(n)


def prune(conn: Any, layout: Layout, start: datetime) -> None:
    day_end = start.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    if layout.history:
        name = f"durable_jobs_history_{start:%Y%m%d}"
        (n,) = conn.execute(f"SELECT count(*) FROM {name}").fetchone()
        t0 = time.perf_counter()
        conn.execute(f"DROP TABLE {name}")
        print(
            f"BP prune: DROP TABLE of a partition of {n:,} rows: "
            f"{1e3 * (time.perf_counter() - t0):.0f} ms; dead tuples left "
            f"{dead_tuples(conn, 'durable_jobs_history')}"
        )
        nxt = f"durable_jobs_history_{start + timedelta(days=1):%Y%m%d}"
        t0 = time.perf_counter()
        conn.execute(f"ALTER TABLE durable_jobs_history DETACH PARTITION {nxt} CONCURRENTLY")
        t1 = time.perf_counter()
        conn.execute(f"DROP TABLE {nxt}")
        print(
            f"BP prune: DETACH CONCURRENTLY {1e3 * (t1 - t0):.0f} ms, then DROP "
            f"{1e3 * (time.perf_counter() - t1):.0f} ms",
            flush=True,
        )
        return
    older = (datetime.now(UTC) - day_end).total_seconds()
    t0 = time.perf_counter()
    (_, n) = conn.execute(
        QUERIES["prune_jobs"],
        {
            "lock_key": None,
            "statuses": ["completed", "cancelled", "dead"],
            "older_than_seconds": older,
            "limit": 10 * 1_000_000,
        },
    ).fetchone()
    t1 = time.perf_counter()
    dead = dead_tuples(conn, "durable_jobs_job")
    conn.execute("VACUUM durable_jobs_job")
    t2 = time.perf_counter()
    print(
        f"A prune: prune_jobs DELETE of {n:,} rows {t1 - t0:.1f} s, leaving {dead:,} dead "
        f"tuples; the VACUUM that removes them {t2 - t1:.1f} s",
        flush=True,
    )


HOT_COLUMNS = (
    "id, type, queue, payload, idempotency_key, status, priority, attempts, max_attempts, "
    "available_at, created_at, updated_at, started_at, last_error, errors, lease_holder, "
    "lease_expires_at, lease_token, timeout, concurrency_key, cancel_requested_at, "
    "dependent_count, on_parent_failure, parent_count, waiting_on, trace_context, waiting_for"
)
DROP_FOREIGN_KEYS = """
DO $$
DECLARE fk record;
BEGIN
    FOR fk IN SELECT conrelid::regclass AS tbl, conname FROM pg_constraint
              WHERE confrelid = 'durable_jobs_job'::regclass AND contype = 'f' LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.tbl, fk.conname);
    END LOOP;
END $$
"""


def migrate(conn: Any) -> None:
    """Today's table becomes the history's first partition, without a rewrite; timed steps."""
    cutover = datetime.now(UTC)
    steps = [
        ("create the hot table", B["b_hot_table"]),
        (
            "create the partitioned history (no partitions yet)",
            B["b_history_partitioned"].replace("durable_jobs_history", "new_history"),
        ),
        (
            "CHECK constraint NOT VALID (instant)",
            "ALTER TABLE durable_jobs_job ADD CONSTRAINT legacy_finished "
            "CHECK (completed_at IS NOT NULL AND completed_at < '{c}' "
            "AND status IN ('completed', 'cancelled')) NOT VALID",
        ),
        (
            "indexes matching the history's, CONCURRENTLY: (id, completed_at) unique",
            "CREATE UNIQUE INDEX CONCURRENTLY legacy_pk ON durable_jobs_job (id, completed_at)",
        ),
        (
            "  (status, id DESC)",
            "CREATE INDEX CONCURRENTLY legacy_status ON durable_jobs_job (status, id DESC)",
        ),
        (
            "  (type, id DESC)",
            "CREATE INDEX CONCURRENTLY legacy_type ON durable_jobs_job (type, id DESC)",
        ),
        (
            "  (queue, id DESC)",
            "CREATE INDEX CONCURRENTLY legacy_queue ON durable_jobs_job (queue, id DESC)",
        ),
        (
            "cutover, one transaction: move the unfinished and dead rows to the hot table",
            "BEGIN; LOCK durable_jobs_job IN SHARE ROW EXCLUSIVE MODE; "
            f"INSERT INTO durable_jobs_hot ({HOT_COLUMNS}) SELECT {HOT_COLUMNS} "
            "FROM durable_jobs_job WHERE status IN ('pending', 'running', 'waiting', 'dead'); "
            "DELETE FROM durable_jobs_job "
            "WHERE status IN ('pending', 'running', 'waiting', 'dead'); "
            "COMMIT",
        ),
        (
            "drop the foreign keys to the job table (steps, dependencies, event waiters)",
            DROP_FOREIGN_KEYS,
        ),
        (
            "VALIDATE the CHECK constraint (reads the table, blocks no writer)",
            "ALTER TABLE durable_jobs_job VALIDATE CONSTRAINT legacy_finished",
        ),
        (
            "SET NOT NULL completed_at (uses the valid CHECK: no scan)",
            "ALTER TABLE durable_jobs_job ALTER COLUMN completed_at SET NOT NULL",
        ),
        (
            "swap the primary key for the (id, completed_at) index (no build)",
            "ALTER TABLE durable_jobs_job DROP CONSTRAINT durable_jobs_job_pkey, "
            "ADD CONSTRAINT legacy_pkey PRIMARY KEY USING INDEX legacy_pk",
        ),
        (
            "ATTACH PARTITION (uses the CHECK and the indexes: no scan, no build)",
            "ALTER TABLE new_history ATTACH PARTITION durable_jobs_job "
            "FOR VALUES FROM (MINVALUE) TO ('{c}')",
        ),
    ]
    for label, statement in steps:
        t0 = time.perf_counter()
        conn.execute(statement.replace("{c}", cutover.isoformat()))
        print(f"A migrate: {label}: {1e3 * (time.perf_counter() - t0):,.0f} ms", flush=True)


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL, help="default: %(default)s")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layouts", default="A,BP")
    parser.add_argument("--skip-migration", action="store_true")
    args = parser.parse_args()
    ensure_template(args.database_url)
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(
        days=DAYS
    )
    for name in args.layouts.split(","):
        layout = LAYOUTS[name]
        urls = {
            "empty": make_layout_db(args.database_url, layout, "_empty"),
            "filled": make_layout_db(args.database_url, layout, "_filled"),
        }
        try:
            with psycopg.connect(urls["filled"], autocommit=True) as conn:
                if layout.partitioned:
                    create_partitions(conn, start, DAYS + 2)
                fill(conn, layout, args.rows, start)
            cutoff = datetime.now(UTC)
            compare_claim(urls, layout, args, cutoff)
            with psycopg.connect(urls["filled"], autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
                admin_reads(conn, layout)
                prune(conn, layout, start)
                if not layout.history and not args.skip_migration:
                    migrate(conn)
        finally:
            for url in urls.values():
                drop_database(url)


if __name__ == "__main__":
    main()
