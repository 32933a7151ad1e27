"""Where PostgreSQL's time goes, per job: pg_stat_statements over one burst run.

Run on demand, never in the test suite:

    .venv/bin/python benchmarks/statements.py [-n 20000] [--concurrency 8] [--port 5439]

pg_stat_statements must be preloaded, which the machine's shared server is
not (and a benchmark must not restart it), so this starts a throwaway
cluster of its own: ``initdb`` into a temporary directory, with
``shared_preload_libraries = 'pg_stat_statements'`` and
``track_io_timing = on``, listening on 127.0.0.1:``--port``. PostgreSQL
refuses to run as root: run as root, the cluster runs as the ``postgres``
OS user. The cluster is stopped and removed at the end.

Then: migrate, ``enqueue_many`` N ``example.noop`` jobs, reset the
statistics, run one ``runjobworker --burst`` (``benchmarks/worker.py``'s
settings and command) until it exits, and print each statement the worker
ran: calls, rows, execution time, buffers and WAL, in total and per job.
``--explain`` also prints ``EXPLAIN (ANALYZE, BUFFERS)`` of a claim and of
a batch of completions on a fresh backlog.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import worker as bench  # noqa: E402  (benchmarks/worker.py: its set-up and worker command)

STATEMENTS = """
SELECT calls, rows, total_exec_time, shared_blks_hit + shared_blks_read,
       shared_blks_dirtied + shared_blks_written, wal_bytes, wal_fpi,
       regexp_replace(query, '\\s+', ' ', 'g')
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT ILIKE '%%pg_stat_statements%%'
ORDER BY total_exec_time DESC
LIMIT %s
"""


def bin_dir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise SystemExit("no PostgreSQL server binaries under /usr/lib/postgresql")
    return found[-1].parent


@contextlib.contextmanager
def throwaway_cluster(port: int) -> Iterator[str]:
    """A PostgreSQL cluster of our own with pg_stat_statements; yields its URL."""
    as_root = os.geteuid() == 0
    owner = pwd.getpwnam("postgres") if as_root else None
    directory = Path(tempfile.mkdtemp(prefix="durable-jobs-statements-"))
    data = directory / "data"

    def run(*cmd: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
        subprocess.run([*prefix, *cmd], check=True, stdout=subprocess.DEVNULL)

    try:
        if owner is not None:
            os.chown(directory, owner.pw_uid, owner.pw_gid)
        binaries = bin_dir()
        run(str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust")
        with open(data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(
                "shared_preload_libraries = 'pg_stat_statements'\n"
                "pg_stat_statements.track = all\n"
                "track_io_timing = on\n"
                f"port = {port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{directory}'\n"
            )
        run(str(binaries / "pg_ctl"), "-D", str(data), "-w", "-l", str(directory / "log"), "start")
        try:
            yield f"postgres://postgres@127.0.0.1:{port}/durable_jobs_statements"
        finally:
            run(str(binaries / "pg_ctl"), "-D", str(data), "-w", "-m", "fast", "stop")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def report(n: int, top: int) -> None:
    rows = bench.sql(STATEMENTS, [top])
    total_ms = sum(float(r[2]) for r in rows)  # type: ignore[arg-type]
    print(
        f"\n{'calls':>7} {'rows':>7} {'ms':>8} {'us/job':>7} {'buf/job':>7} "
        f"{'dirty/job':>9} {'WAL B/job':>9} {'FPI':>5}  statement"
    )
    for calls, nrows, ms, buffers, dirtied, wal, fpi, query in rows:
        print(
            f"{calls:>7} {nrows:>7} {float(ms):>8.1f} {1000 * float(ms) / n:>7.1f} "  # type: ignore[arg-type]
            f"{int(buffers) / n:>7.2f} {int(dirtied) / n:>9.3f} {int(wal) / n:>9.0f} "  # type: ignore[call-overload]
            f"{fpi:>5}  {str(query)[:90]}"
        )
    print(
        f"\nexecution time of these statements: {total_ms:.0f} ms, {1000 * total_ms / n:.1f} us/job"
    )


def explain(n: int, limit: int) -> None:
    bench.reset()
    bench.fill(n)
    from django.db import connection, transaction

    from django_durable_jobs import db
    from django_durable_jobs.db.queries import QUERIES
    from django_durable_jobs.worker import outcomes

    # The claim's parameters as db.claim() passes them (no queue excluded or keyed).
    params = {
        "worker_id": "explain",
        "lease_seconds": 30.0,
        "limit": limit,
        "excluded": [],
        "keyed_types": [],
    }
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, WAL) " + QUERIES["claim_jobs"], params)
        print(f"\nclaim_jobs, limit {limit}:\n" + "\n".join(r[0] for r in cursor.fetchall()))
        transaction.set_rollback(True)
    jobs = db.claim("default", worker_id="explain", lease_seconds=30.0, limit=limit)
    done = [outcomes.complete(job, "null") for job in jobs]
    with transaction.atomic(), connection.cursor() as cursor:
        document = db._outcomes_params(done, 20)
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, WAL) " + QUERIES["record_outcomes"], document)
        print(
            f"\nrecord_outcomes, {len(done)} completions:\n"
            + "\n".join(r[0] for r in cursor.fetchall())
        )
        transaction.set_rollback(True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="jobs (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=None, help="default: the worker's")
    parser.add_argument("--port", type=int, default=5439, help="default: %(default)s")
    parser.add_argument("--top", type=int, default=15, help="default: %(default)s")
    parser.add_argument("--explain", action="store_true")
    parser.add_argument(
        "--explain-limit", type=int, default=256, help="jobs a claim (default: %(default)s)"
    )
    args = parser.parse_args()
    with throwaway_cluster(args.port) as url:
        bench.ensure_database(url)
        bench.setup_django(url)
        bench.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        bench.reset()
        bench.fill(args.n)
        bench.sql("SELECT pg_stat_statements_reset()")
        started = time.perf_counter()
        subprocess.run(
            bench.worker_command(args.concurrency, burst=True),
            env=bench.worker_env(url),
            stdin=subprocess.DEVNULL,
            check=True,
        )
        wall = time.perf_counter() - started
        ((completed,),) = bench.sql(
            "SELECT count(*) FROM durable_jobs_job WHERE status = 'completed'"
        )
        print(f"{completed} of {args.n} jobs completed in {wall:.2f} s (one burst worker)")
        report(args.n, args.top)
        if args.explain:
            explain(min(args.n, 5_000), args.explain_limit)


if __name__ == "__main__":
    main()
