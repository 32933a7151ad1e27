"""Chains end to end: enqueue ``chain()`` after ``chain()`` while real workers drain them.

Run on demand, never in the test suite (machines here are shared and noisy):

    .venv/bin/python benchmarks/chains.py [--database-url URL] [-n 10000] [--length 3]
        [--clients 1] [--workers 1] [--repeat 3] [--enqueue-only]

Each run: ``--workers`` real ``runjobworker`` processes at the default
settings start and wait (LISTENing); ``--clients`` threads then call
``chain()`` with ``--length`` ``example.noop`` jobs, ``-n`` chains in all,
one call per chain, as a web view enqueueing a workflow would. The run ends
when every job is completed. Reported: chains per minute from the first
enqueue to the last ``completed_at``, the enqueue rate alone (chains per
minute of the clients' own time), the mean ``chain()`` call, and the order
check: within each chain, every job started after its parent completed.

``--enqueue-only`` measures ``chain()`` without workers (nothing drains).
The database is a dedicated one, ``durable_jobs_bench`` by default, created
when missing and migrated; its job table is truncated before every run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from worker import (  # benchmarks/ is not a package: its directory is on sys.path
    DEFAULT_URL,
    ensure_database,
    loadavg,
    reset,
    setup_django,
    sql,
    wait_for_listener,
    wait_until_quiet,
    worker_command,
    worker_env,
)

TYPE = "example.noop"


def enqueue_chains(n: int, length: int, clients: int) -> list[float]:
    """``n`` chains from ``clients`` threads; the duration of each ``chain()`` call."""
    from django.db import connections

    from django_durable_jobs import chain

    spec = {"type": TYPE, "payload": {}}
    durations: list[float] = []
    lock = threading.Lock()

    def client(count: int) -> None:
        mine = []
        try:
            for _ in range(count):
                started = time.perf_counter()
                chain(*([spec] * length))
                mine.append(time.perf_counter() - started)
        finally:
            connections.close_all()
        with lock:
            durations.extend(mine)

    shares = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]
    threads = [threading.Thread(target=client, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return durations


def wait_all_completed(timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ((left,),) = sql("SELECT count(*) FROM durable_jobs_job WHERE status <> 'completed'")
        if not left:
            return
        time.sleep(0.2)
    raise RuntimeError(f"jobs still not completed after {timeout:.0f}s")


def out_of_order() -> int:
    """Edges whose child started before its parent completed (0 when correct)."""
    ((count,),) = sql(
        """
        SELECT count(*) FROM durable_jobs_dependency AS edge
        JOIN durable_jobs_job AS parent ON parent.id = edge.parent_id
        JOIN durable_jobs_job AS child ON child.id = edge.child_id
        WHERE child.started_at < parent.completed_at
        """
    )
    return int(count)  # type: ignore[call-overload]


def run(args: argparse.Namespace, url: str) -> dict[str, float]:
    reset()
    sql("VACUUM ANALYZE durable_jobs_job")
    wait_until_quiet()
    procs = []
    if not args.enqueue_only:
        procs = [
            subprocess.Popen(
                worker_command(None, burst=False), env=worker_env(url), stdin=subprocess.DEVNULL
            )
            for _ in range(args.workers)
        ]
    try:
        if procs:
            wait_for_listener()
        started = time.time()
        durations = enqueue_chains(args.n, args.length, args.clients)
        enqueued = time.time() - started
        result = {
            "enqueue_s": enqueued,
            "enqueue_per_min": args.n / enqueued * 60,
            "call_ms": statistics.mean(durations) * 1000,
        }
        if procs:
            wait_all_completed(timeout=max(120.0, args.n * args.length / 100))
            ((last,),) = sql("SELECT extract(epoch FROM max(completed_at)) FROM durable_jobs_job")
            wall = float(last) - started  # type: ignore[arg-type]
            result.update(wall_s=wall, chains_per_min=args.n / wall * 60, late=out_of_order())
        return result
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("-n", type=int, default=10_000, help="chains per run")
    parser.add_argument("--length", type=int, default=3, help="jobs per chain")
    parser.add_argument("--clients", type=int, default=1, help="enqueueing threads")
    parser.add_argument("--workers", type=int, default=1, help="runjobworker processes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--enqueue-only", action="store_true")
    args = parser.parse_args()
    ensure_database(args.database_url)
    setup_django(args.database_url)
    print(f"{args.n:,} chains of {args.length} {TYPE}, {args.clients} client thread(s), "
          f"{0 if args.enqueue_only else args.workers} worker process(es) at the defaults, "
          f"median of {args.repeat} ({loadavg()})")  # fmt: skip
    runs = [run(args, args.database_url) for _ in range(args.repeat)]
    for key in runs[0]:
        values = [r[key] for r in runs]
        shown = ", ".join(f"{v:,.1f}" for v in values)
        print(f"  {key:<16} median {statistics.median(values):>10,.1f}   runs: {shown}")
    print(f"({loadavg()})")


if __name__ == "__main__":
    main()
