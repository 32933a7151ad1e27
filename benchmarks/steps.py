"""Durable steps: what a step costs, and what 100,000 suspended jobs cost the rest of the queue.

Run on demand, never in the test suite (machines here are shared and noisy):

    .venv/bin/python benchmarks/steps.py [--database-url URL] [-n 5000] [--repeat 3]
        [--suspended 100000] [--wakeups 100] [--statements] [--port 5439]
        [--skip-steps] [--skip-suspended]

Workers are real ``runjobworker`` subprocesses of the example project, with
``benchmarks/steps_bench_settings.py`` (``benchmarks/worker.py``'s quiet
settings and the ``steps_bench`` handlers: ``bench.steps``, ``bench.nap``,
``bench.wait``). The database is a dedicated one (``bench_steps`` by
default), created when missing and migrated. The harness is
``benchmarks/worker.py``'s: each run waits for a quiet second first (at most
``--quiet-timeout`` s: the machine is shared), accounts the CPU of the
workers, of PostgreSQL and of everything else, and a run during which the
rest of the machine used over 5 % of it is rerun once (``*`` marks one
still noisy); medians of ``--repeat`` runs, back to back.

1. **Steps**: ``-n`` jobs of ``example.noop`` (no step), then of
   ``bench.steps`` with 1, 10 and 100 no-op steps (``ctx.step(f"s{i}",
   fn)``; fewer jobs for 10 and 100 steps: ``n / 2`` and ``n / 20``), one
   burst worker at the defaults: jobs/s (wall, from starting the process, and
   span, max(completed_at) - min(started_at)), steps/s, and the span's cost
   per step beside the no-step jobs: (span/job(k) - span/job(0)) / k.
2. **Statements per step** (``--statements``): the same runs of 0 and 10
   steps on a throwaway cluster with pg_stat_statements
   (``benchmarks/statements.py``'s), counting every statement the worker ran:
   (statements(10 steps) - statements(0 steps)) / (jobs x 10), of the
   statements the worker sent (``pg_stat_statements.track = all`` also lists
   the foreign key's check that the checkpoint's INSERT runs in the server:
   listed, not counted),
   and the calls of the checkpoint statement itself. The difference includes
   what a slower job costs besides its steps: smaller claim and outcome
   batches, and the one read of the job's records per attempt.
3. **100,000 suspended jobs** (``--suspended``): half sleeping (pending,
   available in 30 days, ``waiting_for`` an ``until``), half waiting for an
   event that never comes (``waiting``, with their ``event_waiter`` rows),
   written by SQL. Claim throughput of ``-n`` ``example.noop`` jobs, one burst
   worker, on an empty table and then beside them. Then, one worker at the
   defaults (not burst) beside them: ``--wakeups`` ``bench.nap`` jobs of 1 s
   (enqueued 20 a second): a timed wake-up's latency, the job's last
   ``started_at`` minus its ``nap`` record's ``wake_at``; ``--wakeups``
   ``bench.wait`` jobs, each woken by ``emit_event`` (20 a second): the event's
   latency, ``started_at`` minus the event's ``created_at``; and ``--wakeups``
   ``example.noop`` jobs enqueued one by one (20 a second): a new job's,
   ``started_at - created_at``. All three are database timestamps.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import worker as bench  # noqa: E402  (benchmarks/worker.py: its harness)

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_steps"
SETTINGS = "steps_bench_settings"
STEP_COUNTS = (1, 10, 100)
#: The suspended filler's type: no worker serves it, and the runs leave its rows alone.
FILLER_TYPE = "bench.suspended"
PACE = 20.0  # wake-ups (and enqueues) a second, in the latency runs
#: The query PostgreSQL's foreign key trigger runs for an INSERT into the step table.
RI_CHECK = '%FROM ONLY "public"."durable_jobs_job" x%'


def setup(url: str) -> dict[str, str]:
    bench.ensure_database(url)
    _setup(url)
    env = bench.worker_env(url)
    env["DJANGO_SETTINGS_MODULE"] = SETTINGS
    return env


def _setup(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    os.environ["DJANGO_DEBUG"] = "0"
    sys.path[:0] = [str(BENCH_DIR), str(bench.ROOT / "example_project"), str(bench.ROOT)]
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def clear() -> None:
    """Every job but the suspended filler (and their step records, by cascade)."""
    bench.sql("DELETE FROM durable_jobs_step WHERE job_id IN "
              "(SELECT id FROM durable_jobs_job WHERE type <> %s)", [FILLER_TYPE])  # fmt: skip
    bench.sql("DELETE FROM durable_jobs_job WHERE type <> %s", [FILLER_TYPE])
    bench.sql("DELETE FROM durable_jobs_event")


def fill(type_: str, n: int, payload: dict[str, object]) -> None:
    from django_durable_jobs import enqueue_many

    for offset in range(0, n, 5_000):
        enqueue_many(
            [{"type": type_, "payload": {"i": i, **payload}}
             for i in range(offset, min(n, offset + 5_000))]
        )  # fmt: skip
    bench.sql("ANALYZE durable_jobs_job")
    bench.sql("CHECKPOINT")


def burst_run(type_: str, n: int, payload: dict[str, object], env: dict[str, str]) -> dict:
    """``n`` jobs of ``type_``, one burst worker at the defaults, until all completed."""
    clear()
    fill(type_, n, payload)
    quiet_wait = bench.wait_until_quiet()
    ((database,),) = bench.sql("SELECT current_database()")

    def done() -> bool:
        ((left,),) = bench.sql(
            "SELECT count(*) FROM durable_jobs_job WHERE type = %s AND status <> 'completed'",
            [type_],
        )
        return left == 0

    watched = bench.watch_processes(
        [bench.worker_command(None, burst=True)],
        env,
        database,
        done,
        left=lambda: bench.sql("SELECT type, status, count(*) FROM durable_jobs_job GROUP BY 1, 2"),
    )
    ((span, completed, attempts),) = bench.sql(
        "SELECT extract(epoch FROM max(completed_at) - min(started_at)),"
        " count(*) FILTER (WHERE status = 'completed'), max(attempts)"
        " FROM durable_jobs_job WHERE type = %s",
        [type_],
    )
    assert completed == n, completed
    assert attempts == 1, attempts  # a suspension never counts as an attempt
    return {**watched, "span": float(span), "quiet_wait": quiet_wait}


def median_runs(label: str, type_: str, n: int, payload: dict, env: dict, args) -> dict:  # type: ignore[type-arg,no-untyped-def]
    runs = [
        bench.rerun_if_noisy(lambda: burst_run(type_, n, payload, env), args.retries)
        for _ in range(args.repeat)
    ]
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "noisy"}
    med["detail"] = ", ".join(  # type: ignore[assignment]
        f"{n / r['wall']:,.0f}|{n / r['span']:,.0f}{'*' if r.get('noisy') else ''}" for r in runs
    )
    med["n"] = n
    return med


# -- 1. steps ------------------------------------------------------------------


def steps_table(args: argparse.Namespace, env: dict[str, str]) -> None:
    n = args.n
    print(f"\n== Steps: no-op steps per job, one burst worker at the defaults, median of "
          f"{args.repeat} ({bench.loadavg()})")  # fmt: skip
    header = (
        f"{'handler':<28}{'jobs':>7}{'jobs/s wall':>12}{'jobs/s span':>12}{'steps/s':>9}"
        f"{'us/step':>9}{'wrk CPU':>8}{'pg CPU':>7}{'other':>6}  runs (jobs/s wall|span)"
    )
    print(header)
    burst_run("example.noop", min(n, 2_000), {}, env)  # warm-up
    base = median_runs("noop", "example.noop", n, {}, env, args)
    rows = [("example.noop (no step)", 0, base)]
    for k in STEP_COUNTS:
        jobs = max(100, n // {1: 1, 10: 2, 100: 20}[k])
        measured = median_runs(str(k), "bench.steps", jobs, {"steps": k}, env, args)
        rows.append((f"bench.steps, {k} step{'s' if k > 1 else ''}", k, measured))
    per_job_0 = base["span"] / base["n"]
    for label, k, r in rows:
        per_job = r["span"] / r["n"]
        us_step = f"{1e6 * (per_job - per_job_0) / k:>9.0f}" if k else f"{'-':>9}"
        steps_s = f"{k * r['n'] / r['span']:>9,.0f}" if k else f"{'-':>9}"
        print(f"{label:<28}{r['n']:>7,}{r['n'] / r['wall']:>12,.0f}{r['n'] / r['span']:>12,.0f}"
              f"{steps_s}{us_step}{r['worker_cpu']:>8.2f}"
              f"{r['pg_cpu'] + r['pg_shared_cpu']:>7.2f}{r['other_cpu']:>6.2f}  {r['detail']}",
              flush=True)  # fmt: skip
    print("us/step: (span per job - the no-step jobs' span per job) / steps.")


# -- 2. statements per step ------------------------------------------------------


def statements(args: argparse.Namespace) -> None:
    import statements as pgss  # benchmarks/statements.py: its throwaway cluster

    n = min(args.n, 2_000)
    with pgss.throwaway_cluster(args.port) as url:
        env = setup(url)
        bench.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        print(f"\n== Statements per step (pg_stat_statements, throwaway cluster), {n:,} jobs")
        counted = {}
        for k in (0, 10):
            clear()
            fill("bench.steps", n, {"steps": k})
            bench.sql("SELECT pg_stat_statements_reset()")
            subprocess.run(bench.worker_command(None, burst=True), env=env,
                           stdin=subprocess.DEVNULL, check=True)  # fmt: skip
            ((total, checkpoints),) = bench.sql(
                "SELECT sum(calls), sum(calls) FILTER (WHERE query ILIKE %s)"
                " FROM pg_stat_statements"
                " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND query NOT ILIKE %s AND query NOT ILIKE %s",
                ["%INSERT INTO durable_jobs_step%", "%pg_stat_statements%", RI_CHECK],
            )
            counted[k] = (int(total), int(checkpoints or 0))
            top = bench.sql(
                "SELECT calls, CASE WHEN query ILIKE %s THEN '(foreign key check) ' ELSE '' END"
                " || regexp_replace(left(query, 200), '\\s+', ' ', 'g')"
                " FROM pg_stat_statements"
                " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND query NOT ILIKE %s ORDER BY calls DESC LIMIT 7",
                [RI_CHECK, "%pg_stat_statements%"],
            )
            for calls, query in top:
                print(f"  {calls:>8,}  {str(query)[:110]}")
            print(f"  {k:>3} steps a job: {int(total):,} statements ({int(total) / n:.2f} a job), "
                  f"{int(checkpoints or 0):,} checkpoint statements")  # fmt: skip
        extra = (counted[10][0] - counted[0][0]) / (n * 10)
        print(f"  statements the worker sent, per step: {extra:.2f} (checkpoint statements per "
              f"step: {counted[10][1] / (n * 10):.2f}); the foreign key's check that the "
              "checkpoint's INSERT runs inside the server is listed, not counted")  # fmt: skip


# -- 3. suspended jobs -----------------------------------------------------------


def fill_suspended(rows: int) -> None:
    """``rows`` suspended jobs: half sleeping for 30 days, half waiting for an event."""
    ((have,),) = bench.sql("SELECT count(*) FROM durable_jobs_job WHERE type = %s", [FILLER_TYPE])
    if have == rows:
        return
    bench.sql("DELETE FROM durable_jobs_job WHERE type = %s", [FILLER_TYPE])
    half = rows // 2
    bench.sql(
        """
        INSERT INTO durable_jobs_job (
            id, type, queue, payload, status, priority, attempts, max_attempts,
            available_at, created_at, updated_at, last_error, errors, waiting_for, waiting_on,
            dependent_count
        )
        SELECT gen_random_uuid(), %s, 'default', jsonb_build_object('i', g),
            CASE WHEN g <= %s THEN 'pending' ELSE 'waiting' END, 0, 0, 5,
            now() + interval '30 days', now(), now(), '', '[]'::jsonb,
            CASE WHEN g <= %s
                THEN jsonb_build_object('until', now() + interval '30 days')
                ELSE jsonb_build_object('event', 'never:' || g) END,
            0, 0
        FROM generate_series(1, %s) AS g
        """,
        [FILLER_TYPE, half, half, rows],
    )
    bench.sql(
        "INSERT INTO durable_jobs_event_waiter (job_id, key, since)"
        " SELECT id, waiting_for->>'event', now() FROM durable_jobs_job"
        " WHERE type = %s AND status = 'waiting'",
        [FILLER_TYPE],
    )
    bench.sql("VACUUM ANALYZE durable_jobs_job")
    bench.sql("VACUUM ANALYZE durable_jobs_event_waiter")
    print(f"  {rows:,} suspended jobs in the table ({half:,} sleeping, {rows - half:,} waiting)")


def percentiles(values: list[float]) -> str:
    values = sorted(values)

    def at(q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return (f"p50 {at(0.5):7.1f}  p90 {at(0.9):7.1f}  p99 {at(0.99):7.1f}  "
            f"max {values[-1]:7.1f} ms  (n={len(values)})")  # fmt: skip


def wait_done(type_: str, n: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ((left,),) = bench.sql(
            "SELECT count(*) FROM durable_jobs_job WHERE type = %s AND status <> 'completed'",
            [type_],
        )
        if left == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{type_}: jobs not completed after {timeout}s")


def latencies(args: argparse.Namespace, env: dict[str, str]) -> None:
    from django_durable_jobs import emit_event, enqueue

    clear()
    k = args.wakeups
    proc = subprocess.Popen(bench.worker_command(None, burst=False), env=env,
                            stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        bench.wait_for_listener()
        # Timed wake-ups: enqueued at PACE a second, each sleeping 1 s.
        start = time.perf_counter()
        for i in range(k):
            time.sleep(max(0.0, start + i / PACE - time.perf_counter()))
            enqueue("bench.nap", {"seconds": 1, "i": i})
        wait_done("bench.nap", k)
        sleeps = [float(v) for (v,) in bench.sql(
            "SELECT extract(epoch FROM job.started_at - step.wake_at) * 1000"
            " FROM durable_jobs_job AS job JOIN durable_jobs_step AS step"
            " ON step.job_id = job.id AND step.name = 'nap' WHERE job.type = 'bench.nap'"
        )]  # fmt: skip
        # Event wake-ups: k waiters, then an emit each at PACE a second.
        keys = [f"bench:{uuid.uuid4().hex}" for _ in range(k)]
        for key in keys:
            enqueue("bench.wait", {"key": key})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ((waiting,),) = bench.sql(
                "SELECT count(*) FROM durable_jobs_job WHERE type = 'bench.wait'"
                " AND status = 'waiting'"
            )
            if waiting == k:
                break
            time.sleep(0.1)
        start = time.perf_counter()
        for i, key in enumerate(keys):
            time.sleep(max(0.0, start + i / PACE - time.perf_counter()))
            emit_event(key, {"i": i})
        wait_done("bench.wait", k)
        events = [float(v) for (v,) in bench.sql(
            "SELECT extract(epoch FROM job.started_at - event.created_at) * 1000"
            " FROM durable_jobs_job AS job JOIN durable_jobs_event AS event"
            " ON event.key = job.payload->>'key' WHERE job.type = 'bench.wait'"
        )]  # fmt: skip
        # New jobs, for comparison: enqueued one by one at PACE a second.
        start = time.perf_counter()
        for i in range(k):
            time.sleep(max(0.0, start + i / PACE - time.perf_counter()))
            enqueue("example.noop", {"phase": "latency", "i": i})
        wait_done("example.noop", k)
        news = [float(v) for (v,) in bench.sql(
            "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM durable_jobs_job"
            " WHERE type = 'example.noop'"
        )]  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    print(f"  timed wake-up (started_at - wake_at):      {percentiles(sleeps)}")
    print(f"  event wake-up (started_at - emitted at):   {percentiles(events)}")
    print(f"  new job (started_at - created_at):         {percentiles(news)}")


def suspended(args: argparse.Namespace, env: dict[str, str]) -> None:
    n = args.n
    print(f"\n== {args.suspended:,} suspended jobs: claim throughput and wake-ups, median of "
          f"{args.repeat} ({bench.loadavg()})")  # fmt: skip
    # The filler of an earlier run: its waiters and steps first (their foreign keys).
    for table in ("durable_jobs_event_waiter", "durable_jobs_step"):
        bench.sql(f"DELETE FROM {table} WHERE job_id IN"  # noqa: S608 (our own table names)
                  " (SELECT id FROM durable_jobs_job WHERE type = %s)", [FILLER_TYPE])  # fmt: skip
    bench.sql("DELETE FROM durable_jobs_job WHERE type = %s", [FILLER_TYPE])
    bench.sql("VACUUM ANALYZE durable_jobs_job")
    if args.latencies_only:
        fill_suspended(args.suspended)
        print(f"\n  latencies, one worker at the defaults, {args.suspended:,} suspended beside:")
        latencies(args, env)
        return
    burst_run("example.noop", min(n, 2_000), {}, env)  # warm-up
    empty = median_runs("empty", "example.noop", n, {}, env, args)
    fill_suspended(args.suspended)
    burst_run("example.noop", min(n, 2_000), {}, env)  # warm-up
    beside = median_runs("beside", "example.noop", n, {}, env, args)
    print(f"{'table':<36}{'jobs/s wall':>12}{'jobs/s span':>12}{'pg CPU':>7}{'other':>6}"
          "  runs (jobs/s wall|span)")  # fmt: skip
    for label, r in (("empty", empty), (f"{args.suspended:,} suspended beside", beside)):
        print(f"{label:<36}{n / r['wall']:>12,.0f}{n / r['span']:>12,.0f}"
              f"{r['pg_cpu'] + r['pg_shared_cpu']:>7.2f}{r['other_cpu']:>6.2f}  {r['detail']}",
              flush=True)  # fmt: skip
    print(f"\n  latencies, one worker at the defaults, {args.suspended:,} suspended jobs beside:")
    latencies(args, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL, help="default: %(default)s")
    parser.add_argument("-n", type=int, default=5_000, help="jobs per throughput run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--retries", type=int, default=1, help="reruns of a noisy run")
    parser.add_argument("--quiet-timeout", type=float, default=15.0,
                        help="longest wait for a quiet second before a run (s)")  # fmt: skip
    parser.add_argument("--suspended", type=int, default=100_000)
    parser.add_argument("--wakeups", type=int, default=100)
    parser.add_argument("--statements", action="store_true", help="pg_stat_statements counts")
    parser.add_argument("--port", type=int, default=5439, help="--statements' cluster")
    parser.add_argument("--skip-steps", action="store_true")
    parser.add_argument("--skip-suspended", action="store_true")
    parser.add_argument("--latencies-only", action="store_true",
                        help="of the suspended part, only the wake-up latencies")  # fmt: skip
    args = parser.parse_args()
    bench.QUIET_TIMEOUT_SECONDS = args.quiet_timeout
    print(f"{os.cpu_count()} CPUs, {bench.loadavg()}, python {sys.version.split()[0]}")
    if args.statements:
        statements(args)
        return
    env = setup(args.database_url)
    ((version,),) = bench.sql("SELECT version()")
    print(version)
    if not args.skip_steps:
        steps_table(args, env)
    if not args.skip_suspended:
        suspended(args, env)


if __name__ == "__main__":
    main()
