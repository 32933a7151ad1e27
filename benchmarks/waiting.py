"""wait() latency, and what the finished jobs' NOTIFY costs the engine, on the local PostgreSQL.

Run on demand, never in the test suite (machines here are shared and noisy):

    .venv/bin/python benchmarks/waiting.py [--database-url URL] [-n 200] [--job-seconds 0.05]
        [--rounds 30] [--batch 1,256] [--skip-latency] [--skip-cost]

Latency: one real ``runjobworker`` process at default settings; the benchmark
enqueues one ``example.sleep`` job (``--job-seconds``, so that ``wait()``
looks at the job before it finishes and must be woken), calls ``wait()`` on
it, and notes when it returned; then the next, ``-n`` times, one waiter at a
time. The figure is the return time minus the job's ``completed_at``, both
read from this machine's clock (``completed_at`` is the database's ``now()``
of the statement that records the outcome, so the figure includes that
statement and its commit). ``WAIT_POLL_INTERVAL_SECONDS`` is set to 60 in
this process: every return is the NOTIFY's doing, not the poll's.

Cost: ``record_outcomes`` of ``--batch`` completions, timed (statement and
commit, autocommit) as the worker's completer runs it, in ``--rounds``
interleaved rounds of three variants: the statement as shipped with nobody
listening on the finished channel, the same with one connection LISTENing
there (the notifications are then delivered), and the statement without its
NOTIFY (its final ``CROSS JOIN finished_notified`` removed, so PostgreSQL
skips the CTEs). Medians per variant.

The database is a dedicated one, ``durable_jobs_bench`` by default, created
when missing and migrated; its job table is truncated first.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from worker import (  # benchmarks/ is not a package: its directory is on sys.path
    DEFAULT_URL,
    ensure_database,
    loadavg,
    reset,
    setup_django,
    sql,
    wait_for_listener,
    worker_command,
    worker_env,
)

SLEEP_TYPE = "example.sleep"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def latency(n: int, job_seconds: float, url: str) -> None:
    from django.conf import settings

    from django_durable_jobs import enqueue, wait
    from django_durable_jobs.waiting.listener import close_listeners

    settings.DURABLE_JOBS = {**settings.DURABLE_JOBS, "WAIT_POLL_INTERVAL_SECONDS": 60.0}
    reset()
    proc = subprocess.Popen(
        worker_command(None, burst=False), env=worker_env(url), stdin=subprocess.DEVNULL
    )
    try:
        wait_for_listener()  # the worker's, before ours starts
        wait(enqueue(SLEEP_TYPE, {"seconds": 0}).job, timeout=30)  # warm up both sides
        delays = []
        for _ in range(n):
            job = enqueue(SLEEP_TYPE, {"seconds": job_seconds}).job
            finished = wait(job, timeout=30)
            returned = datetime.now(timezone.utc)
            assert finished.completed_at is not None
            delays.append((returned - finished.completed_at).total_seconds() * 1000)
    finally:
        proc.terminate()
        proc.wait(60)
        # Our LISTEN connection goes too: the cost runs measure "nobody listens".
        close_listeners()
    print(
        f"\n== wait(): completion (completed_at) to return, {n} jobs of {job_seconds:g} s, "
        f"one waiter at a time, one worker at default settings ({loadavg()})"
    )
    print(
        f"p50 {percentile(delays, 0.5):.2f} ms  p90 {percentile(delays, 0.9):.2f} ms  "
        f"p99 {percentile(delays, 0.99):.2f} ms  max {max(delays):.2f} ms  "
        f"mean {statistics.mean(delays):.2f} ms"
    )


def complete_later(claimed: Any, seconds: float, committed: list[float]) -> None:
    """Sleep, complete the claimed job as a worker's completer does, note when it committed."""
    from django.db import connections

    from django_durable_jobs import db
    from django_durable_jobs.db.records import Outcome, Transition

    time.sleep(seconds)
    db.record_outcomes(
        "default",
        [Outcome(claimed.id, claimed.lease_token, Transition.COMPLETE)],
        history_limit=20,
    )
    committed.append(time.perf_counter())
    connections.close_all()


def in_process(n: int, job_seconds: float) -> None:
    """The same wait, the completion written by a thread of this process: exact clocks.

    The thread claims the job, sleeps ``job_seconds`` (the waiter looks and
    sleeps meanwhile), writes the completion with ``record_outcomes`` as a
    worker's completer does, and notes when that call returned (committed);
    the figure is ``wait()``'s return minus that, and the moment the
    listener woke the waiter, both on ``perf_counter``.
    """
    import threading

    from django.conf import settings

    from django_durable_jobs import db, enqueue, wait
    from django_durable_jobs.waiting import listener as listening

    settings.DURABLE_JOBS = {**settings.DURABLE_JOBS, "WAIT_POLL_INTERVAL_SECONDS": 60.0}
    reset()
    woken_at: list[float] = []
    wake = listening.ThreadWaiter.wake

    def noted_wake(self: listening.ThreadWaiter) -> None:
        woken_at.append(time.perf_counter())
        wake(self)

    listening.ThreadWaiter.wake = noted_wake  # type: ignore[method-assign]
    returns, wakes = [], []
    try:
        for _ in range(n + 1):  # the first warms up
            job = enqueue("example.noop").job
            (claimed,) = db.claim("default", worker_id="bench", lease_seconds=60.0, limit=1)
            committed: list[float] = []
            woken_at.clear()
            thread = threading.Thread(target=complete_later, args=(claimed, job_seconds, committed))
            thread.start()
            wait(job, timeout=30)
            returned = time.perf_counter()
            thread.join()
            returns.append((returned - committed[0]) * 1000)
            wakes.append((woken_at[-1] - committed[0]) * 1000)
    finally:
        listening.ThreadWaiter.wake = wake  # type: ignore[method-assign]
        listening.close_listeners()
    returns, wakes = returns[1:], wakes[1:]
    print(
        f"\n== wait(), in process: record_outcomes' return (its commit) to wait()'s return, "
        f"{n} jobs, one waiter at a time ({loadavg()})"
    )
    print(
        f"return p50 {percentile(returns, 0.5):.2f} ms  p90 {percentile(returns, 0.9):.2f} ms  "
        f"p99 {percentile(returns, 0.99):.2f} ms  max {max(returns):.2f} ms"
    )
    print(
        f"(the listener woke the waiter: p50 {percentile(wakes, 0.5):.2f} ms  "
        f"p99 {percentile(wakes, 0.99):.2f} ms after the commit; negative: the notification "
        "came before record_outcomes' caller had its answer)"
    )


def cost(rounds: int, batches: list[int]) -> None:
    import psycopg
    from django.db import connection

    from django_durable_jobs import db, enqueue_many
    from django_durable_jobs.db import QUERIES
    from django_durable_jobs.db.records import Outcome, Transition

    shipped = QUERIES["record_outcomes"]
    without = shipped.replace("FROM recorded CROSS JOIN finished_notified", "FROM recorded")
    assert without != shipped, "record_outcomes no longer ends as this benchmark expects"
    params = db.connection_params("default")

    def timed(batch: int, query: str) -> float:
        enqueue_many([{"type": "example.noop"} for _ in range(batch)])
        claimed = db.claim("default", worker_id="bench", lease_seconds=60.0, limit=batch)
        assert len(claimed) == batch
        outcomes = [Outcome(c.id, c.lease_token, Transition.COMPLETE) for c in claimed]
        QUERIES["record_outcomes"] = query
        try:
            started = time.perf_counter()
            written = db.record_outcomes("default", outcomes, history_limit=20)
            seconds = time.perf_counter() - started
        finally:
            QUERIES["record_outcomes"] = shipped
        assert len(written) == batch
        return seconds * 1000

    print(
        f"\n== record_outcomes of N completions, statement and commit, ms; median of "
        f"{rounds} interleaved rounds ({loadavg()})"
    )
    print(f"{'N':>6}{'no NOTIFY':>12}{'NOTIFY, nobody listens':>25}{'NOTIFY, 1 listener':>21}")
    for batch in batches:
        reset()
        runs: dict[str, list[float]] = {"without": [], "quiet": [], "heard": []}
        with psycopg.connect(**params, autocommit=True) as listener:
            for _ in range(3):  # warm-up
                timed(batch, shipped)
            for _ in range(rounds):
                runs["without"].append(timed(batch, without))
                runs["quiet"].append(timed(batch, shipped))
                db.listen(listener, db.finished_channel())
                runs["heard"].append(timed(batch, shipped))
                listener.execute("UNLISTEN *")
                list(listener.notifies(timeout=0))  # drain what it heard
        connection.close()
        print(
            f"{batch:>6}{statistics.median(runs['without']):>12.3f}"
            f"{statistics.median(runs['quiet']):>25.3f}{statistics.median(runs['heard']):>21.3f}",
            flush=True,
        )
    sql("TRUNCATE durable_jobs_job")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("-n", type=int, default=200, help="latency: jobs waited for")
    parser.add_argument("--job-seconds", type=float, default=0.05, help="latency: each job's sleep")
    parser.add_argument("--rounds", type=int, default=30, help="cost: rounds per batch size")
    parser.add_argument("--batch", default="1,256", help="cost: completions per statement")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    args = parser.parse_args()
    ensure_database(args.database_url)
    setup_django(args.database_url)
    if not args.skip_latency:
        latency(args.n, args.job_seconds, args.database_url)
        in_process(args.n, args.job_seconds)
    if not args.skip_cost:
        cost(args.rounds, [int(b) for b in args.batch.split(",")])


if __name__ == "__main__":
    main()
