"""Bulk requeue by filter (``django_durable_jobs.bulk``) on a table of millions of jobs.

Run on demand, never in the test suite (machines here are shared and noisy):

    .venv/bin/python benchmarks/bulk.py [--database-url URL] [--rows 1000000]
        [--dead-every 5] [--batch 1000]

Fills the job table with ``--rows`` jobs (one in ``--dead-every`` dead, the
others completed, 7 types, created one second apart), then times
``bulk.requeue_matching`` for each filter below, putting the jobs back to
dead (and ``VACUUM ANALYZE``) between runs:

- every dead job;
- the dead jobs of one type (a seventh of them);
- the dead jobs whose last error contains a word that a tenth of them have
  (checked on each batch's rows, see ``bulk.JobFilter.range_condition``).

Reported per run: jobs requeued, batches, the total time and jobs per
second, and each batch's time (median, 99th percentile, the first, which
includes the count at the start, and the last): the walk goes on from
where it stopped, so the last batch should take no longer than the first
however far into the table it is.

The database is a dedicated one, ``durable_jobs_bench`` by default, created
when missing and migrated; its job table is truncated first and left
filled at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from worker import (  # benchmarks/ is not a package: its directory is on sys.path
    DEFAULT_URL,
    ensure_database,
    reset,
    setup_django,
    sql,
)


def fill(rows: int, dead_every: int) -> int:
    """``rows`` jobs, one in ``dead_every`` dead; the number of dead ones."""
    sql(
        """
        INSERT INTO durable_jobs_job (
            id, type, queue, payload, status, priority, attempts, max_attempts,
            available_at, created_at, updated_at, completed_at, last_error, errors,
            dependent_count, parent_count, waiting_on, on_parent_failure
        )
        SELECT gen_random_uuid(), 'bench.type' || (i %% 7), 'default', '{}'::jsonb,
            CASE WHEN i %% %s = 0 THEN 'dead' ELSE 'completed' END,
            0, 5, 5, now(), now() - i * interval '1 second', now(), now(),
            CASE WHEN i %% (%s * 10) = 0 THEN 'ConnectionError: SMTP down'
                ELSE 'ValueError: boom' END || chr(10) || repeat('traceback line ', 20),
            '[]'::jsonb, 0, 0, 0, 'cancel'
        FROM generate_series(1, %s) AS i
        """,
        [dead_every, dead_every, rows],
    )
    sql("VACUUM ANALYZE durable_jobs_job")
    ((dead,),) = sql("SELECT count(*) FROM durable_jobs_job WHERE status = 'dead'")
    return int(dead)  # type: ignore[call-overload]


def back_to_dead() -> None:
    sql("UPDATE durable_jobs_job SET status = 'dead', attempts = 5 WHERE status = 'pending'")
    sql("VACUUM ANALYZE durable_jobs_job")


def timed_run(label: str, batch: int, **filters: Any) -> None:
    from django_durable_jobs import bulk

    durations: list[float] = []
    last = [time.perf_counter()]

    def on_batch(progress: bulk.BulkProgress) -> None:
        now = time.perf_counter()
        durations.append(now - last[0])
        last[0] = now

    started = time.perf_counter()
    progress = bulk.requeue_matching(batch_size=batch, on_batch=on_batch, **filters)
    total = time.perf_counter() - started
    ms = sorted(d * 1000 for d in durations) or [0.0]
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    print(
        f"| {label} | {progress.changed:,} | {progress.batches:,} | {total:.1f} s | "
        f"{progress.changed / total:,.0f} | {statistics.median(ms):.1f} | {p99:.1f} | "
        f"{durations[0] * 1000 if durations else 0:.1f} | "
        f"{durations[-1] * 1000 if durations else 0:.1f} | {os.getloadavg()[0]:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dead-every", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1_000)
    args = parser.parse_args()
    ensure_database(args.database_url)
    setup_django(args.database_url)
    import logging

    # operations logs one line per job requeued: a million lines would time the terminal.
    logging.getLogger("django_durable_jobs").setLevel(logging.WARNING)
    reset()
    started = time.perf_counter()
    dead = fill(args.rows, args.dead_every)
    print(f"filled {args.rows:,} rows ({dead:,} dead) in {time.perf_counter() - started:.1f} s")
    print(
        "| filter | requeued | batches | total | jobs/s | batch p50 ms | batch p99 ms | "
        "first batch ms | last batch ms | load average |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    timed_run("every dead job", args.batch)
    back_to_dead()
    timed_run("one type", args.batch, type="bench.type0")
    back_to_dead()
    timed_run("error contains", args.batch, error_contains="smtp")
    back_to_dead()


if __name__ == "__main__":
    main()
