"""Side by side with pgqueuer: the same no-op workload for ours and for it, in one command.

Run on demand, never in the test suite, with the project's virtual environment:

    .venv/bin/python benchmarks/peers/run.py [--jobs 20000] [--repeat 3]
        [--database-url postgres://postgres@127.0.0.1:5432/peers_ours]
        [--pgqueuer-database-url postgres://postgres@127.0.0.1:5432/peers_pgqueuer]
        [--ours-sweep 8,16,32,64,128] [--pgqueuer-sweep 10,50,100,200,500,1000] [--output FILE]

On first use it creates ``benchmarks/peers/.venv-pgqueuer`` (git-ignored) and
installs pgqueuer with asyncpg from PyPI into it (``--pgqueuer-spec``); none
of pgqueuer's code is in this repository. Each side has its own database,
created when missing: ours is migrated, pgqueuer's schema is reinstalled with
its CLI (``pgq uninstall``, ``pgq install``, durable: logged tables).

The workload, identical for both (ours first, then pgqueuer, configuration by
configuration so that both meet the same machine):

- *enqueue*: N single jobs, each its own transaction (ours ``enqueue()`` in
  autocommit; pgqueuer ``Queries.enqueue`` with scalars), then N jobs in one
  call (``enqueue_many``; ``Queries.enqueue`` with lists), after a warm-up.
- *throughput*: N jobs enqueued in bulk, ANALYZE, CHECKPOINT, a quiet second,
  then K worker processes that exit when the queue is empty (ours
  ``runjobworker --burst``; pgqueuer ``pgqueuer.run(factory, mode=drain)``, what
  ``pgq run --mode drain`` runs; see pgqueuer_side.py). *wall* runs from
  starting the processes (start-up included) to the poll (every 50 ms) that
  sees every job done: ours ``completed``, pgqueuer's queue table empty
  (a finished job is deleted from it and logged). CPU seconds of the workers
  and of PostgreSQL (the backends of that database and the shared processes)
  come from /proc, peak RSS from VmHWM, exactly as benchmarks/worker.py does
  for ours (its functions are reused here). One process at the defaults,
  one at each sweep value, two at each sweep value; the best by wall wins.
- *latency*: one idle worker at default settings; single jobs enqueued at
  ``--rate`` per second for ``--seconds``; enqueue-to-start per job from
  database timestamps (ours ``started_at - created_at``; pgqueuer the
  ``picked`` log row's ``created`` minus the ``queued`` one's: both are now()
  of the enqueue and of the claim transaction).

Every throughput and enqueue figure is the median of ``--repeat`` runs,
latency the median of ``--latency-repeat``. A run during which the rest of
the machine used over 5 % of it is rerun (``--retries``), as in worker.py.
The table is printed and written to ``--output``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PEERS_DIR = Path(__file__).resolve().parent
ROOT = PEERS_DIR.parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import worker as ours  # noqa: E402  benchmarks/worker.py: its /proc and run machinery

VENV = PEERS_DIR / ".venv-pgqueuer"
PGQ_PYTHON = VENV / "bin" / "python"
PGQ_CLI = VENV / "bin" / "pgq"
PGQ_SIDE = PEERS_DIR / "pgqueuer_side.py"
DEFAULT_PGQ_SPEC = "pgqueuer[asyncpg]>=1.6,<1.7"
OURS_URL = "postgres://postgres@127.0.0.1:5432/peers_ours"
PGQ_URL = "postgres://postgres@127.0.0.1:5432/peers_pgqueuer"
PGQ_DEFAULT_BATCH = 10  # pgqueuer.run's and `pgq run`'s batch_size default, pgqueuer 1.6
PGQ_TABLES = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics")  # default prefix, no schema

Result = dict[str, float]


def ints(value: str) -> list[int]:
    return [int(x) for x in value.split(",") if x]


def say(message: str) -> None:
    print(message, flush=True)


def median_of(runs: list[Result]) -> Result:
    keys = [k for k in runs[0] if k != "noisy"]
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    med["rss_max"] = max(r["rss_mb"] for r in runs) if "rss_mb" in runs[0] else 0.0
    med["noisy"] = float(sum(1 for r in runs if r.get("noisy")))
    med["runs"] = float(len(runs))
    return med


# -- pgqueuer's environment and database --------------------------------------


def ensure_pgqueuer_venv(spec: str) -> str:
    """Create the peers venv and install pgqueuer into it, once; return its version."""
    if not PGQ_CLI.exists():
        say(f"creating {VENV.relative_to(ROOT)} and installing {spec!r} from PyPI")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [str(PGQ_PYTHON), "-m", "pip", "install", "--quiet", spec],
            check=True,
        )
    return subprocess.run(
        [str(PGQ_PYTHON), "-c", "import pgqueuer; print(pgqueuer.__version__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def pgq_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUER_")}
    env.update(PGDSN=url, PYTHONPATH=str(PEERS_DIR))
    return env


class PgqDatabase:
    """pgqueuer's database, read and reset from this process with psycopg."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        self.conn = psycopg.connect(url, autocommit=True)

    def sql(self, query: str, params: list[object] | None = None) -> list[tuple[Any, ...]]:
        cursor = self.conn.execute(query, params or [])
        return cursor.fetchall() if cursor.description else []

    def install(self, env: dict[str, str]) -> None:
        """A fresh pgqueuer schema, made by its own CLI."""
        ((installed,),) = self.sql("SELECT to_regclass('pgqueuer') IS NOT NULL")
        if installed:
            subprocess.run([str(PGQ_CLI), "uninstall"], env=env, check=True)
        subprocess.run([str(PGQ_CLI), "install"], env=env, check=True)

    def reset(self) -> None:
        self.sql(f"TRUNCATE {', '.join(PGQ_TABLES)}")

    def settle(self) -> None:
        """As ours' fill: fresh statistics and no dirty pages left over."""
        for table in PGQ_TABLES:
            self.sql(f"ANALYZE {table}")
        self.sql("CHECKPOINT")

    def left(self) -> int:
        ((count,),) = self.sql("SELECT count(*) FROM pgqueuer")
        return int(count)


def side(env: dict[str, str], *args: str) -> dict[str, float]:
    """Run a pgqueuer_side.py command in the peers venv; its JSON answer."""
    out = subprocess.run(
        [str(PGQ_PYTHON), str(PGQ_SIDE), *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def pgq_worker_command(batch: int | None, drain: bool) -> list[str]:
    cmd = [str(PGQ_PYTHON), str(PGQ_SIDE), "worker"]
    if batch is not None:
        cmd += ["--batch-size", str(batch)]
    if drain:
        cmd.append("--drain")
    return cmd


# -- pgqueuer throughput: worker.py's throughput_run, for pgqueuer's tables ---


def pgq_throughput_run(
    n: int, processes: int, batch: int | None, db: PgqDatabase, env: dict[str, str]
) -> Result:
    db.reset()
    side(env, "fill", "-n", str(n))
    db.settle()
    quiet_wait = ours.wait_until_quiet()
    ((db_start, database),) = db.sql("SELECT clock_timestamp(), current_database()")
    watched = ours.watch_processes(
        [pgq_worker_command(batch, drain=True)] * processes,
        env,
        database,
        done=lambda: db.left() == 0,
        left=db.left,
        cwd=PEERS_DIR,
    )
    ((span, first_claim_delay, completed, claims, finishes),) = db.sql(
        "SELECT extract(epoch FROM max(created) FILTER (WHERE status = 'successful')"
        "                        - min(created) FILTER (WHERE status = 'picked')),"
        " extract(epoch FROM min(created) FILTER (WHERE status = 'picked') - %s),"
        " count(*) FILTER (WHERE status = 'successful'),"
        " count(DISTINCT created) FILTER (WHERE status = 'picked'),"
        " count(DISTINCT created) FILTER (WHERE status = 'successful')"
        " FROM pgqueuer_log",
        [db_start],
    )
    assert completed == n, completed
    return {
        **watched,
        "span": float(span),
        "startup": float(first_claim_delay),
        "quiet_wait": quiet_wait,
        "claim_batch": n / claims,
        "finish_batch": n / finishes,
    }


# -- latency ------------------------------------------------------------------


def pgq_wait_empty(db: PgqDatabase, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while db.left():
        if proc.poll() is not None:
            raise RuntimeError(f"pgqueuer worker exited {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"pgqueuer jobs still queued after {timeout}s")
        time.sleep(0.1)


def pgq_latency_run(rate: float, seconds: float, db: PgqDatabase, env: dict[str, str]) -> Result:
    """worker.py's latency_run for pgqueuer: one worker at defaults, paced single enqueues."""
    db.reset()
    proc = subprocess.Popen(
        pgq_worker_command(None, drain=False), env=env, cwd=PEERS_DIR, stdin=subprocess.DEVNULL
    )
    try:
        # The warm-up second also waits for the worker: its jobs are done
        # only once the worker has started, listened and claimed.
        side(env, "paced", "--rate", str(rate), "--count", str(int(rate)))
        pgq_wait_empty(db, proc)
        time.sleep(0.5)
        ours.wait_until_quiet()
        paced = side(env, "paced", "--rate", str(rate), "--count", str(int(rate * seconds)))
        pgq_wait_empty(db, proc)
        ((p50, p90, p99, mx, count),) = db.sql(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d),"
            " percentile_cont(0.9) WITHIN GROUP (ORDER BY d),"
            " percentile_cont(0.99) WITHIN GROUP (ORDER BY d), max(d), count(*)"
            " FROM (SELECT extract(epoch FROM picked.created - queued.created) * 1000 AS d"
            "       FROM pgqueuer_log queued JOIN pgqueuer_log picked"
            "         ON picked.job_id = queued.job_id AND picked.status = 'picked'"
            "       WHERE queued.status = 'queued' AND queued.job_id BETWEEN %s AND %s) AS l",
            [int(paced["first_id"]), int(paced["last_id"])],
        )
        rss = ours.proc_status(proc.pid).get("VmHWM", 0) / 1024
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    if code:
        raise RuntimeError(f"pgqueuer worker exited {code}")
    return {
        "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(mx),
        "count": float(count), "rss_mb": rss,
        "enqueue_p50": paced["enqueue_p50"], "enqueue_p99": paced["enqueue_p99"],
    }  # fmt: skip


# -- enqueue ------------------------------------------------------------------


def ours_enqueue(n: int) -> Result:
    """benchmarks/enqueue.py's single and bulk, on the benchmark database."""
    from django_durable_jobs import enqueue, enqueue_many

    def single(count: int) -> float:
        start = time.perf_counter()
        for i in range(count):
            enqueue(ours.TYPE, {"i": i})
        return count / (time.perf_counter() - start)

    def bulk(count: int) -> float:
        jobs = [{"type": ours.TYPE, "payload": {"i": i}} for i in range(count)]
        start = time.perf_counter()
        enqueue_many(jobs)
        return count / (time.perf_counter() - start)

    ours.reset()
    single(1_000)  # warm up, as pgqueuer_side.py does
    bulk(5_000)
    ours.reset()
    one = single(n)
    ours.reset()
    many = bulk(n)
    ours.reset()
    return {"single": one, "bulk": many}


# -- the run ------------------------------------------------------------------


@contextlib.contextmanager
def section(title: str) -> Iterator[None]:
    say(f"\n== {title} ({ours.loadavg()})")
    start = time.monotonic()
    yield
    say(f"   ({time.monotonic() - start:.0f}s)")


def describe(label: str, n: int, med: Result) -> None:
    pg = med["pg_cpu"] + med["pg_shared_cpu"]
    say(
        f"  {label:<30}{n / med['wall']:>9,.0f} jobs/s wall{n / med['span']:>9,.0f} span"
        f"  start {med['startup']:.2f}s  wrk {med['worker_cpu']:.2f} pg {pg:.2f} CPU s"
        f"  busy {med['busy']:.0%}  RSS {med['rss_max']:.1f} MB"
        f"  claim {med['claim_batch']:.1f} finish {med['finish_batch']:.1f}"
        + (f"  ({med['noisy']:.0f} noisy)" if med["noisy"] else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", "-n", type=int, default=20_000, help="default: %(default)s")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--database-url", default=OURS_URL, help="ours (default: %(default)s)")
    parser.add_argument("--pgqueuer-database-url", default=PGQ_URL, help="default: %(default)s")
    parser.add_argument("--pgqueuer-spec", default=DEFAULT_PGQ_SPEC, help="default: %(default)s")
    parser.add_argument("--ours-sweep", type=ints, default=[8, 16, 32, 64, 128], help="-c values")
    parser.add_argument("--pgqueuer-sweep", type=ints, default=[10, 50, 100, 200, 500, 1000])
    parser.add_argument("--rate", type=float, default=200.0, help="latency: jobs per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency: how long")
    parser.add_argument("--latency-repeat", type=int, default=3)
    parser.add_argument("--retries", type=int, default=2, help="reruns of a noisy run")
    parser.add_argument(
        "--quiet-timeout", type=float, default=30.0,
        help="longest wait for a quiet second before a run (default: %(default)s s)",
    )  # fmt: skip
    parser.add_argument("--skip-enqueue", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--output", default=str(PEERS_DIR / "results.md"))
    args = parser.parse_args()
    if not args.ours_sweep or not args.pgqueuer_sweep:
        parser.error("each side needs at least one sweep value (its two-process runs use them)")
    n = args.jobs
    started = time.monotonic()

    # worker.py waits up to 5 minutes for a quiet machine; on a shared one that
    # would dominate the run.
    ours.QUIET_TIMEOUT_SECONDS = args.quiet_timeout

    version = ensure_pgqueuer_venv(args.pgqueuer_spec)
    ours.ensure_database(args.database_url)
    ours.ensure_database(args.pgqueuer_database_url)
    ours.setup_django(args.database_url)
    env = ours.worker_env(args.database_url)
    penv = pgq_env(args.pgqueuer_database_url)
    db = PgqDatabase(args.pgqueuer_database_url)
    db.install(penv)
    ((pg_version,),) = ours.sql("SHOW server_version")
    say(
        f"PostgreSQL {pg_version}; {os.cpu_count()} CPUs; python {sys.version.split()[0]};"
        f" pgqueuer {version}; {n:,} jobs, median of {args.repeat}"
    )

    results: dict[str, Any] = {}
    if not args.skip_enqueue:
        with section(f"Enqueue: {n:,} one per transaction, then {n:,} in one call"):
            for name, run in (
                ("ours", lambda: ours_enqueue(n)),
                ("pgqueuer", lambda: side(penv, "enqueue", "-n", str(n), "--batch", str(n))),
            ):
                runs = [run() for _ in range(args.repeat)]
                results[f"{name}_enqueue"] = med = median_of(runs)
                say(f"  {name:<10}{med['single']:>9,.0f} one per txn{med['bulk']:>10,.0f} bulk")

    if not args.skip_latency:
        with section(f"Latency: single jobs at {args.rate:g}/s for {args.seconds:g}s"):
            for name, run in (
                ("ours", lambda: ours.latency_run(args.rate, args.seconds, env)),
                ("pgqueuer", lambda: pgq_latency_run(args.rate, args.seconds, db, penv)),
            ):
                runs = [run() for _ in range(args.latency_repeat)]
                results[f"{name}_latency"] = med = median_of(runs)
                say(
                    f"  {name:<10} p50 {med['p50']:.2f} ms  p90 {med['p90']:.2f}"
                    f"  p99 {med['p99']:.2f}  max {med['max']:.2f}  ({med['count']:.0f} jobs)"
                )

    def ours_measure(processes: int, concurrency: int | None) -> Result:
        runs = [
            ours.clean_run(n, processes, concurrency, env, args.retries) for _ in range(args.repeat)
        ]
        med = median_of(runs)
        setting = f"-c {concurrency}" if concurrency else "defaults"
        describe(f"ours {processes} x {setting}", n, med)
        return med

    def pgq_measure(processes: int, batch: int | None) -> Result:
        runs = [
            ours.rerun_if_noisy(
                lambda: pgq_throughput_run(n, processes, batch, db, penv), args.retries
            )
            for _ in range(args.repeat)
        ]
        med = median_of(runs)
        describe(f"pgqueuer {processes} x " + (f"batch {batch}" if batch else "defaults"), n, med)
        return med

    ours_runs: dict[tuple[int, int | None], Result] = {}
    pgq_runs: dict[tuple[int, int | None], Result] = {}
    with section(f"Throughput: {n:,} no-op jobs, workers exit when the queue is empty"):
        # Warm-up: the databases' caches, the page cache of both venvs' files.
        ours.throughput_run(min(n, 5_000), 1, None, env)
        pgq_throughput_run(min(n, 5_000), 1, None, db, penv)
        ours_runs[(1, None)] = ours_measure(1, None)
        pgq_runs[(1, None)] = pgq_measure(1, None)
        for processes in (1, 2):
            for c, b in itertools.zip_longest(args.ours_sweep, args.pgqueuer_sweep):
                if c is not None:
                    ours_runs[(processes, c)] = ours_measure(processes, c)
                if b is not None:
                    pgq_runs[(processes, b)] = pgq_measure(processes, b)
    results["ours"] = ours_runs
    results["pgqueuer"] = pgq_runs

    table = render(args, n, version, str(pg_version), results)
    elapsed = time.monotonic() - started
    footer = f"\n({elapsed / 60:.1f} minutes; {ours.loadavg()})\n"
    say("\n" + table + footer)
    Path(args.output).write_text(table + footer)
    say(f"written to {args.output}")
    ours.reset()
    db.reset()


def best(runs: dict[tuple[int, int | None], Result], processes: int) -> tuple[int | None, Result]:
    """The setting with the highest wall throughput (start-up included)."""
    candidates = {s: r for (p, s), r in runs.items() if p == processes}
    setting = min(candidates, key=lambda s: candidates[s]["wall"])
    return setting, candidates[setting]


def render(
    args: argparse.Namespace, n: int, version: str, pg_version: str, results: dict[str, Any]
) -> str:
    def rate(r: Result) -> str:
        return f"{n / r['wall']:,.0f}"

    def cpu_ms(r: Result) -> str:
        return f"{(r['worker_cpu'] + r['pg_cpu'] + r['pg_shared_cpu']) / n * 1000:.3f}"

    def split(r: Result) -> str:
        pg = r["pg_cpu"] + r["pg_shared_cpu"]
        return f"{r['worker_cpu'] / n * 1000:.3f} + {pg / n * 1000:.3f}"

    o, q = results["ours"], results["pgqueuer"]
    o_def, q_def = o[(1, None)], q[(1, None)]
    o1, o_best1 = best(o, 1)
    q1, q_best1 = best(q, 1)
    o2, o_best2 = best(o, 2)
    q2, q_best2 = best(q, 2)

    def c(s: int | None) -> str:
        return f"`-c {s}`" if s else "defaults"

    def b(s: int | None) -> str:
        return f"batch {s}" if s else f"batch {PGQ_DEFAULT_BATCH} (default)"

    rows = [
        ("process, defaults (ours `runjobworker` defaults; pgqueuer `run()` defaults, "
         f"batch {PGQ_DEFAULT_BATCH})", rate(o_def), rate(q_def)),
        (f"process, best one process (ours {c(o1)}; pgqueuer {b(q1)})",
         rate(o_best1), rate(q_best1)),
        (f"process, best two processes (ours 2 x {c(o2)}; pgqueuer 2 x {b(q2)})",
         rate(o_best2), rate(q_best2)),
        ("CPU per job, worker + PostgreSQL (ms), at the best two-process setting",
         f"{cpu_ms(o_best2)} ({split(o_best2)})", f"{cpu_ms(q_best2)} ({split(q_best2)})"),
        ("machine busy during the best one-process run",
         f"{o_best1['busy']:.0%}", f"{q_best1['busy']:.0%}"),
    ]  # fmt: skip
    if "ours_enqueue" in results:
        oe, qe = results["ours_enqueue"], results["pgqueuer_enqueue"]
        rows.append(
            (f"enqueue one per transaction / bulk {n:,} (jobs/s)",
             f"{oe['single']:,.0f} / {oe['bulk']:,.0f}", f"{qe['single']:,.0f} / {qe['bulk']:,.0f}")
        )  # fmt: skip
    if "ours_latency" in results:
        ol, ql = results["ours_latency"], results["pgqueuer_latency"]
        rows.append(
            (f"enqueue-to-start p50 / p99 at {args.rate:g} jobs/s (ms)",
             f"{ol['p50']:.2f} / {ol['p99']:.2f}", f"{ql['p50']:.2f} / {ql['p99']:.2f}")
        )  # fmt: skip
    rows.append(
        ("worker peak RSS (MB), defaults / best one process",
         f"{o_def['rss_max']:.1f} / {o_best1['rss_max']:.1f}",
         f"{q_def['rss_max']:.1f} / {q_best1['rss_max']:.1f}")
    )  # fmt: skip
    today = datetime.date.today().isoformat()
    lines = [
        f"Side by side, {today}: {n:,} no-op jobs, PostgreSQL {pg_version}, "
        f"{os.cpu_count()} CPUs, pgqueuer {version} (asyncpg); jobs/s wall (start-up included), "
        f"median of {args.repeat}.",
        "",
        f"| | ours | pgqueuer {version} |",
        "|---|---|---|",
        *(f"| {label} | {a} | {z} |" for label, a, z in rows),
        "",
        "Every throughput configuration (median of each; CPU: seconds for the whole run; "
        "claim / finish: mean jobs per claim / per outcome statement):",
        "",
        "| side | processes | setting | jobs/s wall | jobs/s span | start-up s | worker CPU s "
        "| PostgreSQL CPU s | busy | peak RSS MB | claim / finish |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs, setting in (("ours", o, c), (f"pgqueuer {version}", q, b)):
        for (processes, s), r in runs.items():
            noisy = f" ({r['noisy']:.0f} of {r['runs']:.0f} noisy)" if r["noisy"] else ""
            lines.append(
                f"| {name} | {processes} | {setting(s)}{noisy} | {rate(r)} | {n / r['span']:,.0f} "
                f"| {r['startup']:.2f} | {r['worker_cpu']:.2f} "
                f"| {r['pg_cpu'] + r['pg_shared_cpu']:.2f} | {r['busy']:.0%} | {r['rss_max']:.1f} "
                f"| {r['claim_batch']:.1f} / {r['finish_batch']:.1f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
