"""What PostgreSQL does per job, for each storage layout considered in issue 12.

Run on demand, never in the test suite:

    .venv/bin/python benchmarks/storage.py [--database-url URL] [-n 20000] [--batch 256]

No worker and no Python handler: this drives the claim and the completion
statements straight from one psycopg connection, in batches of ``--batch``
(what a worker claiming ahead sends), and reads the CPU time of that
connection's PostgreSQL backend from ``/proc`` (so the server must run on
this machine) and the WAL it wrote. Each layout is a database of its own,
``<name>_<layout>``, copied from the migrated benchmark database
(``durable_jobs_bench`` by default, created and migrated when missing) and
dropped at the end:

- ``as shipped``: the job table with its ten indexes, the claim and
  ``record_outcomes`` statements of ``db/claims.sql``;
- ``arrays``: the same, completions sent as uuid[] arrays instead of one
  JSON document (does parsing JSON cost PostgreSQL anything that matters?);
- ``no status index`` / ``no listing indexes`` / ``no listing, lease or
  finished indexes``: what each index costs the two transitions;
- ``fillfactor 70``: room on each page, for updates that stay on it;
- ``queue table``: a sketch of the "small hot table" design: a narrow
  ``queue`` table (pending and running entries, with the claim and lease
  indexes) beside a job table whose indexes name no column the claim
  changes, so the claim's update of the job row can be HOT; completion
  deletes the entry. Only the statements, not a product.

Each layout runs twice, and the second run is printed (the first warms the
caches). Numbers are CPU microseconds per job in the backend, WAL bytes per
job, and for the job table the share of updates that were HOT.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))

import worker as bench  # noqa: E402  (benchmarks/worker.py: its database set-up)

from django_durable_jobs.db.queries import QUERIES  # noqa: E402

FILL = """
INSERT INTO {table} (id, type, queue, payload, status, priority, attempts, max_attempts,
    available_at, created_at, updated_at, last_error, errors)
SELECT gen_random_uuid(), 'example.noop', 'default', jsonb_build_object('i', g), 'pending',
    0, 0, 5, now(), clock_timestamp(), now(), '', '[]'::jsonb
FROM generate_series(1, %s) AS g
"""

COMPLETE_ARRAYS = """
UPDATE durable_jobs_job AS job
SET status = 'completed', completed_at = now(), lease_holder = NULL,
    lease_expires_at = NULL, lease_token = NULL, updated_at = now()
FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS done(id, token)
WHERE job.id = done.id AND job.lease_token = done.token AND job.status = 'running'
RETURNING job.id
"""

QUEUE_TABLE = """
CREATE TABLE split_job (LIKE durable_jobs_job INCLUDING DEFAULTS) WITH (fillfactor = 70);
ALTER TABLE split_job ADD PRIMARY KEY (id);
ALTER TABLE split_job ADD COLUMN outcome varchar(16);
CREATE INDEX ON split_job (created_at DESC);
CREATE INDEX ON split_job (type, created_at DESC);
CREATE INDEX ON split_job (queue, created_at DESC);
CREATE INDEX ON split_job (outcome, created_at DESC) WHERE outcome IS NOT NULL;
CREATE INDEX ON split_job (completed_at) WHERE completed_at IS NOT NULL;
CREATE UNIQUE INDEX ON split_job (idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE TABLE split_queue (
    job_id uuid PRIMARY KEY, queue varchar(100), priority smallint,
    available_at timestamptz, created_at timestamptz, state varchar(8),
    lease_expires_at timestamptz
) WITH (fillfactor = 70);
CREATE INDEX ON split_queue (priority DESC, available_at, created_at) WHERE state = 'pending';
CREATE INDEX ON split_queue (lease_expires_at) WHERE state = 'running';
"""

SPLIT_CLAIM = """
WITH candidates AS MATERIALIZED (
    SELECT job_id FROM split_queue
    WHERE state = 'pending' AND available_at <= now()
    ORDER BY priority DESC, available_at, created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
entries AS (
    UPDATE split_queue AS q SET state = 'running', lease_expires_at = now() + interval '30 s'
    FROM candidates WHERE q.job_id = candidates.job_id
    RETURNING q.job_id
)
UPDATE split_job AS job
SET status = 'running', attempts = job.attempts + 1, started_at = now(), updated_at = now(),
    lease_holder = %(worker_id)s, lease_expires_at = now() + interval '30 s',
    lease_token = gen_random_uuid()
FROM entries WHERE job.id = entries.job_id
RETURNING job.id, job.type, job.queue, job.payload, job.attempts, job.max_attempts,
    job.lease_token, job.available_at, job.started_at, job.idempotency_key, job.timeout
"""

SPLIT_COMPLETE = """
WITH gone AS (
    DELETE FROM split_queue AS q USING unnest(%(ids)s::uuid[]) AS done(id)
    WHERE q.job_id = done.id
)
UPDATE split_job AS job
SET status = 'completed', outcome = 'completed', completed_at = now(), lease_holder = NULL,
    lease_expires_at = NULL, lease_token = NULL, updated_at = now()
FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS done(id, token)
WHERE job.id = done.id AND job.lease_token = done.token
RETURNING job.id
"""


class Layout:
    def __init__(
        self,
        name: str,
        setup: str = "",
        table: str = "durable_jobs_job",
        claim: str = QUERIES["claim_jobs"],
        complete: Callable[[list[tuple[Any, Any]]], tuple[str, dict[str, Any]]] | None = None,
        after_fill: str = "",
    ) -> None:
        self.name = name
        self.setup = setup
        self.table = table
        self.claim = claim
        self.complete = complete or _complete_json
        self.after_fill = after_fill


def _complete_json(chunk: list[tuple[Any, Any]]) -> tuple[str, dict[str, Any]]:
    doc = ",".join(f'["{i}","{t}","complete",null,null,null,null,null]' for i, t in chunk)
    return QUERIES["record_outcomes"], {"outcomes": f"[{doc}]", "history_limit": 10}


def _complete_arrays(chunk: list[tuple[Any, Any]]) -> tuple[str, dict[str, Any]]:
    return COMPLETE_ARRAYS, {"ids": [i for i, _ in chunk], "tokens": [t for _, t in chunk]}


def _complete_split(chunk: list[tuple[Any, Any]]) -> tuple[str, dict[str, Any]]:
    return SPLIT_COMPLETE, {"ids": [i for i, _ in chunk], "tokens": [t for _, t in chunk]}


LISTING = "durable_jobs_created_idx, durable_jobs_type_idx, durable_jobs_queue_idx"
LAYOUTS = [
    Layout("as shipped"),
    Layout("arrays", complete=_complete_arrays),
    Layout("no status index", "DROP INDEX durable_jobs_status_idx"),
    Layout("no listing indexes", f"DROP INDEX durable_jobs_status_idx, {LISTING}"),
    Layout(
        "no listing, lease or finished indexes",
        f"DROP INDEX durable_jobs_status_idx, {LISTING}, durable_jobs_lease_idx, "
        "durable_jobs_finished_idx",
    ),
    Layout("fillfactor 70", "ALTER TABLE durable_jobs_job SET (fillfactor = 70)"),
    Layout(
        "queue table",
        QUEUE_TABLE,
        table="split_job",
        claim=SPLIT_CLAIM,
        complete=_complete_split,
        after_fill="INSERT INTO split_queue SELECT id, queue, priority, available_at, "
        "created_at, 'pending', NULL FROM split_job",
    ),
]


def backend_cpu(conn: Any) -> float:
    """CPU seconds of this connection's backend so far (utime + stime, from /proc)."""
    fields = Path(f"/proc/{conn.info.backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100


def one_run(conn: Any, layout: Layout, n: int, batch: int) -> dict[str, float]:
    conn.execute(f"TRUNCATE {layout.table}")
    if layout.after_fill:
        conn.execute("TRUNCATE split_queue")
    conn.execute(FILL.format(table=layout.table), [n])
    if layout.after_fill:
        conn.execute(layout.after_fill)
    conn.execute("VACUUM ANALYZE")
    conn.execute("SELECT pg_stat_reset()")
    cursor = conn.cursor()
    (wal_start,) = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
    started = backend_cpu(conn)
    held: list[tuple[Any, Any]] = []
    while True:
        cursor.execute(layout.claim, {"worker_id": "w", "lease_seconds": 30.0, "limit": batch})
        rows = cursor.fetchall()
        if not rows:
            break
        held += [(row[0], row[6]) for row in rows]
    claimed = backend_cpu(conn)
    for offset in range(0, len(held), batch):
        query, params = layout.complete(held[offset : offset + batch])
        cursor.execute(query, params)
        assert len(cursor.fetchall()) == len(held[offset : offset + batch])
    completed = backend_cpu(conn)
    (wal,) = conn.execute(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [wal_start]
    ).fetchone()
    time.sleep(0.6)  # the statistics collector's flush
    (hot, updates) = conn.execute(
        "SELECT n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables WHERE relname = %s",
        [layout.table],
    ).fetchone()
    assert len(held) == n, len(held)
    return {
        "claim": 1e6 * (claimed - started) / n,
        "complete": 1e6 * (completed - claimed) / n,
        "wal": float(wal) / n,
        "hot": hot / updates if updates else 0.0,
    }


def main() -> None:
    import psycopg
    from psycopg import sql

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=bench.DEFAULT_URL, help="default: %(default)s")
    parser.add_argument("-n", type=int, default=20_000, help="jobs per run")
    parser.add_argument("--batch", type=int, default=256, help="jobs per claim and completion")
    args = parser.parse_args()
    bench.ensure_database(args.database_url)
    bench.setup_django(args.database_url)  # migrates the template database
    from django.db import connections

    connections.close_all()
    parts = urlsplit(args.database_url)
    template = parts.path.lstrip("/")
    admin = psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True)
    print(f"{args.n:,} jobs per run, claimed and completed {args.batch} at a time")
    print(f"{'layout':<40}{'claim us':>9}{'complete us':>12}{'total us':>9}{'WAL B':>7}{'HOT':>6}")
    for layout in LAYOUTS:
        name = f"{template}_{layout.name.replace(' ', '_').replace(',', '')}"[:63]
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
        try:
            url = urlunsplit(parts._replace(path=f"/{name}"))
            with psycopg.connect(url, autocommit=True) as conn:
                if layout.setup:
                    conn.execute(layout.setup)
                one_run(conn, layout, args.n, args.batch)  # warm-up
                r = one_run(conn, layout, args.n, args.batch)
            print(
                f"{layout.name:<40}{r['claim']:>9.1f}{r['complete']:>12.1f}"
                f"{r['claim'] + r['complete']:>9.1f}{r['wal']:>7.0f}{r['hot']:>6.0%}",
                flush=True,
            )
        finally:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    print(
        "claim / complete us: CPU microseconds per job of the backend running the statements\n"
        "(/proc, 10 ms ticks); WAL B: WAL bytes per job, both transitions; HOT: share of the\n"
        "job table's updates that were HOT."
    )


if __name__ == "__main__":
    main()
