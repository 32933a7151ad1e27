"""Worker throughput, enqueue-to-start latency, memory and a profile, on the local PostgreSQL.

Run on demand, never in the test suite (machines here are shared and noisy):

    .venv/bin/python benchmarks/worker.py [--database-url URL] [-n 20000] [--repeat 3]
        [--concurrency 1,4,16,32,64] [--include-8] [--two-process-concurrency C]
        [--finished-rows 1000000,10000000] [--flow] [--async-handlers] [--steps]
        [--skip-throughput] [--skip-latency] [--profile]

Workers are real ``runjobworker`` subprocesses of the example project, run with
``benchmarks/bench_settings.py`` (the example settings, logging WARNING and up:
one INFO line per job would cost more than a no-op job). The database is a
dedicated one, ``durable_jobs_bench`` by default, created when missing and
migrated; its job table is truncated before every run. Nothing is written to
any other database.

Throughput: ``enqueue_many`` N ``example.noop`` jobs, start K workers with
``--burst``, and time until all N are completed, two ways: the wall clock from
starting the processes (so it includes their start-up) to the poll that sees
N completed jobs (every 50 ms), and the table's span, max(completed_at) -
min(started_at). Each configuration runs ``--repeat`` times; the median is
shown. Peak RSS per worker is VmHWM from /proc, read every poll. Configurations:
one process at the default concurrency, one at each ``--concurrency``, then
two at the best of those (by span) unless ``--two-process-concurrency``.

The machine is shared: each run waits for a quiet second first, and accounts
for the CPU used meanwhile by the workers, by PostgreSQL and by everything
else (from /proc); a run during which everything else used over 5% of the
machine is discarded and rerun (``--retries``), and said so in the output.

Async handlers (``--async-handlers``): N ``example.noop`` jobs, then N
``example.anoop`` (``async def``, does nothing), one worker at the defaults,
back to back; then 20 ``example.asleep`` of 0.5 s on ``--concurrency 4`` (the
span, ideally 2.5 s).

Durable steps (``--steps``): back to back, N ``example.noop`` jobs, then jobs
of ``example.steps`` with 1, 10 and 100 no-op steps (N, N/10 and N/100 of
them: about as many statements each run), one worker at the defaults.

Big table (``--finished-rows``): the same throughput run, one worker at the
default concurrency, first on an empty table, then with each given number of
finished jobs (``bench.finished``, filled by SQL, finished over the five
days before today in a history range a day, one in 500 cancelled) left in
the table between runs: a queue must not slow down as its history grows.

Latency: one worker at default settings, not in burst mode; the benchmark
enqueues single jobs with ``enqueue()`` (autocommit) at ``--rate`` per second
for ``--seconds``, paced by the clock; then ``started_at - created_at`` per
job (both database timestamps: created_at is now() of the enqueue
transaction, started_at now() of the claim).

Profile (``--profile``): one worker, concurrency 8, N jobs, under py-spy
(``pip install py-spy``): once sampling every thread, idle or not, to show
what each kind of thread waits on; once sampling only the thread holding the
GIL, to show where the worker's CPU goes per job. Raw stacks stay in
``--profile-dir`` (flamegraph-ready "collapsed" format).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "benchmarks"
MANAGE = ROOT / "example_project" / "manage.py"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/durable_jobs_bench"
TYPE = "example.noop"
#: --flow's keyed runs: jobs of this type (concurrency_limit=1), KEYS distinct keys.
KEYED_TYPE = "example.serial"
KEYS = 0
#: --async-handlers: the no-op async handler, and the sleeping one.
ASYNC_TYPE = "example.anoop"
ASLEEP_TYPE = "example.asleep"
#: --steps: jobs of this type run payload["steps"] no-op durable steps.
STEPS_TYPE = "example.steps"
#: Added to every job's payload (the sleeping handler's seconds).
PAYLOAD: dict[str, object] = {}
POLL_SECONDS = 0.05


# -- set-up ------------------------------------------------------------------


def ensure_database(url: str) -> None:
    """Create the benchmark database if it does not exist (connecting to `postgres`)."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"created database {name}")


def setup_django(url: str, others: dict[str, str] | None = None) -> None:
    """Django on ``url`` (alias "default"), migrated; ``others`` ({alias: url}) as more
    aliases beside it, with the same settings but the database's name, migrated too."""
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench_settings"
    os.environ["DJANGO_DEBUG"] = "0"
    sys.path[:0] = [str(BENCH_DIR), str(ROOT / "example_project"), str(ROOT)]
    from django.conf import settings

    for alias, other in (others or {}).items():
        name = urlsplit(other).path.lstrip("/")
        settings.DATABASES[alias] = {**settings.DATABASES["default"], "NAME": name}
    import django

    django.setup()
    from django.core.management import call_command

    for alias in ["default", *(others or {})]:
        call_command("migrate", database=alias, verbosity=0)


def worker_env(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="bench_settings",
        DJANGO_DEBUG="0",
        PYTHONPATH=os.pathsep.join([str(BENCH_DIR), str(ROOT / "example_project"), str(ROOT)]),
    )
    return env


def sql(
    query: str, params: list[object] | None = None, using: str = "default"
) -> list[tuple[object, ...]]:
    from django.db import connections

    with connections[using].cursor() as cursor:
        cursor.execute(query, params or [])
        return cursor.fetchall() if cursor.description else []


#: The finished jobs of ``--finished-rows``: a type no worker serves, kept between runs.
FILLER_TYPE = "bench.finished"


#: The days the finished jobs of ``--finished-rows`` are spread over, a history range
#: each: within the default retention (7 days), which the workers apply during the runs.
FILLER_DAYS = 5


def reset(keep_finished: bool = False) -> None:
    if keep_finished:
        import history

        # The run's own jobs are in the active partition and today's range; the
        # filler's in the ranges of the days before (a DELETE would read them all).
        history.truncate_all_but(history.ranges_before(today()))
    else:
        sql("TRUNCATE durable_jobs_job CASCADE")


def today() -> datetime:
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def fill_finished(rows: int) -> None:
    """Make the table hold ``rows`` finished jobs (completed and, one in 500, cancelled).

    Written by SQL in chunks (10 M jobs through ``enqueue_many`` would take
    far longer than the runs): the same columns a real finished job has, with
    time-ordered ids and a short result, in four queues as ``admin_pages.py``
    spreads them (it measures the admin's pages over this fill too, with
    ``--in-flight-beside-history``), finished in order over the
    ``FILLER_DAYS`` days before today, each day in its history range
    (``benchmarks/history.py``), as a queue that has run that long keeps
    them; retention (7 days) drops none of them during the runs. The
    runs' own jobs go to the active partition and today's range: the filler
    is read by no claim, by design; what this measures is that nothing else
    (the planning over the ranges, the statistics) makes it cost.
    """
    ((have,),) = sql("SELECT count(*) FROM durable_jobs_job WHERE type = %s", [FILLER_TYPE])
    if have == rows:
        return
    sql("TRUNCATE durable_jobs_job CASCADE")
    if not rows:
        return
    import history

    first = history.daily_ranges(FILLER_DAYS)
    seconds = (today() - first).total_seconds()
    chunk = 500_000
    have = 0
    while have < rows:
        count = min(chunk, rows - have)
        sql(
            """
            INSERT INTO durable_jobs_job (
                id, type, queue, payload, status, priority, attempts, max_attempts,
                available_at, created_at, updated_at, started_at, completed_at,
                last_error, errors, result
            )
            SELECT (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0')
                    || substr(md5(g::text), 1, 20))::uuid,
                %s, CASE WHEN (g / 1000) %% 20 < 12 THEN 'default'
                    WHEN (g / 1000) %% 20 < 17 THEN 'emails'
                    WHEN (g / 1000) %% 20 < 19 THEN 'reports' ELSE 'webhooks' END,
                jsonb_build_object('i', g),
                CASE WHEN g %% 500 = 0 THEN 'cancelled' ELSE 'completed' END, 0, 1, 5,
                t, t, t + interval '1 ms', t, t + interval '1 ms',
                '', '[]'::jsonb, '{"ok": true}'::jsonb
            FROM generate_series(%s::bigint, %s::bigint) AS g,
                LATERAL (SELECT %s::timestamptz + make_interval(secs => %s * g / %s) AS t) AS x
            """,
            [FILLER_TYPE, have, have + count - 1, first, seconds, rows],
        )
        have += count
        print(f"  {have:,} finished jobs in the table", flush=True)
    sql("VACUUM ANALYZE durable_jobs_job")


def fill(n: int) -> None:
    from django_durable_jobs import enqueue_many

    for offset in range(0, n, 5_000):
        batch = range(offset, min(n, offset + 5_000))
        if KEYS:
            rows = [
                {"type": TYPE, "payload": {"i": i, "seconds": 0}, "concurrency_key": f"k{i % KEYS}"}
                for i in batch
            ]
        else:
            rows = [{"type": TYPE, "payload": {"i": i, **PAYLOAD}} for i in batch]
        enqueue_many(rows)
    # Fresh statistics and no dirty pages left over from the fill: every run
    # starts from the same state.
    sql("ANALYZE durable_jobs_job")
    sql("CHECKPOINT")


# -- /proc -------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM in kB (empty once the process is gone)."""
    values: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    values[key] = int(value.split()[0])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return values


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])
    return total - idle, total


def loadavg() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


TICK = os.sysconf("SC_CLK_TCK")


class CpuAccount:
    """CPU seconds used during a run, split into ours and everybody else's.

    The machine is shared: another test suite on the same PostgreSQL makes a
    run meaningless. Ours: the worker processes, this process, and the
    PostgreSQL backends of the benchmark database; PostgreSQL's shared
    processes (WAL writer, checkpointer, autovacuum...) are counted apart;
    the rest is "other". Processes are sampled from /proc at each ``scan()``:
    one that starts and ends between two scans is missed (its CPU still shows
    in the machine's total busy time).
    """

    def __init__(self, database: str) -> None:
        self.database = database
        self.kind: dict[int, str] = {}
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.scan(initial=True)

    def _classify(self, pid: int) -> str:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return "gone"
        if pid == os.getpid():
            return "benchmark"
        if cmd.startswith("postgres:"):
            if f" {self.database} " in cmd:
                return "pg-bench"
            # Backends of other databases look like "postgres: 15/main: user db host(port) ..."
            if re.match(r"postgres: \S+: \S+ \S+ \S+\(\d+\)", cmd) or "[local]" in cmd:
                return "other"
            return "pg-shared"
        return "other"

    def scan(self, initial: bool = False) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            seconds = (int(fields[11]) + int(fields[12])) / TICK  # utime + stime
            if pid not in self.kind:
                # A process a worker forked (runjobworker --processes) is a worker.
                parent = int(fields[1])
                forked = self.kind.get(parent) == "workers"
                self.kind[pid] = "workers" if forked else self._classify(pid)
                self.first[pid] = seconds if initial else 0.0
            self.last[pid] = seconds

    def add_workers(self, pids: list[int]) -> None:
        for pid in pids:
            self.kind[pid] = "workers"
            self.first.setdefault(pid, 0.0)

    def workers(self) -> list[int]:
        """The worker processes seen so far: those started, and those they forked."""
        return [pid for pid, kind in self.kind.items() if kind == "workers"]

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = collections.defaultdict(float)
        for pid, kind in self.kind.items():
            out[kind] += self.last.get(pid, 0.0) - self.first.get(pid, 0.0)
        return out


#: How long ``wait_until_quiet`` waits at most (``benchmarks/peers/`` sets it lower).
QUIET_TIMEOUT_SECONDS = 300.0


def wait_until_quiet(max_busy: float = 0.12, timeout: float | None = None) -> float:
    """Wait for a second in which the machine is at most ``max_busy`` busy; return the wait."""
    timeout = QUIET_TIMEOUT_SECONDS if timeout is None else timeout
    start = time.monotonic()
    while True:
        a = cpu_times()
        time.sleep(1.0)
        b = cpu_times()
        busy = (b[0] - a[0]) / max(1, b[1] - a[1])
        waited = time.monotonic() - start
        if busy <= max_busy:
            return waited
        if waited > timeout:
            print(
                f"  (machine still {busy:.0%} busy after {timeout:.0f}s; running anyway)",
                flush=True,
            )
            return waited


# -- throughput --------------------------------------------------------------


def worker_command(concurrency: int | None, burst: bool) -> list[str]:
    cmd = [sys.executable, str(MANAGE), "runjobworker"]
    if burst:
        cmd.append("--burst")
    if concurrency is not None:
        cmd += ["--concurrency", str(concurrency)]
    return cmd


def watch_processes(
    commands: list[list[str]],
    env: dict[str, str],
    database: str,
    done: Callable[[], bool],
    left: Callable[[], object],
    cwd: Path | None = None,
) -> dict[str, float]:
    """Start the worker processes and watch them until ``done()`` and they exit.

    Every ``POLL_SECONDS``: their peak RSS (VmHWM) and, until done, ``done()``
    (timed) and a CPU scan. Returns wall (start to done) and exit seconds,
    the machine's busy share, CPU seconds by kind (``CpuAccount``), peak RSS
    in MB and the mean poll time. Raises, with ``left()`` in the message, if
    they exit before done or with an error. Shared by this benchmark and by
    ``benchmarks/peers/``, so both sides are measured the same way.
    """
    account = CpuAccount(database)
    cpu0 = cpu_times()
    start = time.perf_counter()
    procs = [
        subprocess.Popen(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
        for command in commands
    ]
    account.add_workers([p.pid for p in procs])
    hwm = {p.pid: 0 for p in procs}
    polls: list[float] = []
    done_at = None
    try:
        for tick in itertools.count():
            for pid in account.workers():
                kb = proc_status(pid).get("VmHWM")
                if kb:
                    hwm[pid] = max(hwm.get(pid, 0), kb)
            if done_at is None:
                t = time.perf_counter()
                finished = done()
                polls.append(time.perf_counter() - t)
                if finished:
                    done_at = time.perf_counter()
                    cpu1 = cpu_times()
                    account.scan()
                elif tick % 4 == 0:
                    account.scan()
            if all(p.poll() is not None for p in procs):
                break
            if time.perf_counter() - start > 600:
                raise RuntimeError("run took over 10 minutes")
            time.sleep(POLL_SECONDS)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
    exited_at = time.perf_counter()
    codes = [p.returncode for p in procs]
    if done_at is None or any(codes):
        raise RuntimeError(f"workers exited {codes} with jobs left: {left()}")
    cpu = account.totals()
    return {
        "wall": done_at - start,
        "exit": exited_at - start,
        "busy": (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1]),
        "worker_cpu": cpu["workers"],
        "pg_cpu": cpu["pg-bench"],
        "pg_shared_cpu": cpu["pg-shared"],
        "bench_cpu": cpu["benchmark"],
        "other_cpu": cpu["other"],
        "rss_mb": max(hwm.values()) / 1024,
        "poll_ms": statistics.mean(polls) * 1000,
    }


def throughput_run(
    n: int,
    processes: int,
    concurrency: int | None,
    env: dict[str, str],
    keep_finished: bool = False,
) -> dict[str, float]:
    reset(keep_finished)
    fill(n)
    quiet_wait = wait_until_quiet()
    ((db_start, database),) = sql("SELECT clock_timestamp(), current_database()")

    def done() -> bool:
        # No pending or running job left (the claim and lease indexes answer
        # this at once, however many finished jobs the table holds).
        ((left,),) = sql(
            "SELECT count(*) FROM durable_jobs_job WHERE status IN ('pending', 'running')"
        )
        return left == 0

    watched = watch_processes(
        [worker_command(concurrency, burst=True)] * processes,
        env,
        database,
        done,
        left=lambda: sql("SELECT status, count(*) FROM durable_jobs_job GROUP BY 1"),
    )
    ((span, first_claim_delay, completed),) = sql(
        "SELECT extract(epoch FROM max(completed_at) - min(started_at)),"
        " extract(epoch FROM min(started_at) - %s), count(*) FILTER (WHERE status = 'completed')"
        " FROM durable_jobs_job WHERE type = %s",
        [db_start, TYPE],
    )
    assert completed == n, completed
    # Every claim (and every record_outcomes batch) is one transaction, whose
    # now() all its rows share: distinct timestamps count the statements.
    ((claims, finishes),) = sql(
        "SELECT count(DISTINCT started_at), count(DISTINCT completed_at) FROM durable_jobs_job"
        " WHERE type = %s",
        [TYPE],
    )
    return {
        **watched,
        "span": float(span),
        "startup": float(first_claim_delay),
        "quiet_wait": quiet_wait,
        "claim_batch": n / claims,
        "finish_batch": n / finishes,
    }


def rerun_if_noisy(run: Callable[[], dict[str, float]], retries: int) -> dict[str, float]:
    """A run during which the rest of the machine used under 5% of it; retried otherwise."""
    for _attempt in range(retries + 1):
        r = run()
        capacity = r["wall"] * (os.cpu_count() or 1)
        if r["other_cpu"] <= 0.05 * capacity:
            return r
        print(
            f"  (noisy run discarded: other processes used {r['other_cpu']:.2f} CPU s in "
            f"{r['wall']:.2f}s; {loadavg()})",
            flush=True,
        )
    r["noisy"] = 1.0
    return r


def clean_run(
    n: int, processes: int, concurrency: int | None, env: dict[str, str], retries: int
) -> dict[str, float]:
    """``throughput_run``, retried while the rest of the machine was busy."""
    return rerun_if_noisy(lambda: throughput_run(n, processes, concurrency, env), retries)


def throughput(args: argparse.Namespace, env: dict[str, str]) -> None:
    n = args.n
    print(f"\n== Throughput: {n:,} {TYPE} jobs, median of {args.repeat} ({loadavg()})")
    header = (
        f"{'workers':<24}{'jobs/s wall':>12}{'jobs/s span':>12}{'wall s':>7}{'span s':>7}"
        f"{'start s':>8}{'exit s':>7}{'wrk CPU':>8}{'pg CPU':>7}{'other':>6}{'busy':>6}"
        f"{'RSS MB':>7}"
        f"{'claim':>6}{'finish':>7}"
        "  runs (jobs/s wall|span)"
    )
    print(header)
    results: dict[tuple[int, int | None], dict[str, float]] = {}

    def measure(processes: int, concurrency: int | None) -> dict[str, float]:
        runs = [clean_run(n, processes, concurrency, env, args.retries) for _ in range(args.repeat)]
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "noisy"}
        label = f"{processes} x " + (f"-c {concurrency}" if concurrency else "default (-c 8)")
        detail = ", ".join(
            f"{n / r['wall']:,.0f}|{n / r['span']:,.0f}{'*' if r.get('noisy') else ''}"
            for r in runs
        )
        print(
            f"{label:<24}{n / med['wall']:>12,.0f}{n / med['span']:>12,.0f}{med['wall']:>7.2f}"
            f"{med['span']:>7.2f}{med['startup']:>8.2f}{med['exit']:>7.2f}{med['worker_cpu']:>8.2f}"
            f"{med['pg_cpu'] + med['pg_shared_cpu']:>7.2f}{med['other_cpu']:>6.2f}"
            f"{med['busy']:>6.0%}{max(r['rss_mb'] for r in runs):>7.1f}"
            f"{med['claim_batch']:>6.1f}{med['finish_batch']:>7.1f}  {detail}",
            flush=True,
        )
        results[(processes, concurrency)] = med
        return med

    # Warm-up: the database's caches, the page cache of Python's files.
    throughput_run(min(n, 5_000), 1, None, env)
    measure(1, None)
    for c in args.concurrency:
        if c != 8 or args.include_8:
            measure(1, c)
    singles = {c: r for (p, c), r in results.items() if p == 1}
    best = min(singles, key=lambda c: singles[c]["span"])
    best_c = args.two_process_concurrency or (best or 8)
    measure(2, best_c)
    print(f"(best single-process concurrency by span: {best or 'default (8)'}; {loadavg()})")
    print(
        "wall: from starting the processes (start-up included) to the poll that sees all jobs\n"
        "completed; span: max(completed_at) - min(started_at); start: first claim after Popen;\n"
        "exit: all workers exited (--burst), from Popen; claim / finish: mean jobs per claim\n"
        "statement / per record_outcomes statement (distinct started_at / completed_at);\n"
        "wrk/pg CPU: CPU seconds of the workers / of PostgreSQL (its backends of the bench\n"
        "database and its shared processes) until done; other: the rest of the machine (a run\n"
        "where it exceeds 5% of the machine is rerun; * marks one still noisy); busy: the whole\n"
        f"machine during wall; RSS: peak VmHWM of one worker. The count poll took "
        f"{statistics.mean(r['poll_ms'] for r in results.values()):.1f} ms on average."
    )


# -- flow control: limits configured but not binding, keys ---------------------


def back_to_back(
    n: int, env: dict[str, str], args: argparse.Namespace
) -> tuple[dict[str, float], str]:
    """A warm-up, then ``args.repeat`` runs of one worker at the defaults on ``n`` jobs
    of ``TYPE``: the medians, and each run's rates (wall|span, * for a noisy run)."""
    throughput_run(min(n, 5_000), 1, None, env)
    runs = [
        rerun_if_noisy(lambda: throughput_run(n, 1, None, env), args.retries)
        for _ in range(args.repeat)
    ]
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "noisy"}
    detail = ", ".join(
        f"{n / r['wall']:,.0f}|{n / r['span']:,.0f}{'*' if r.get('noisy') else ''}" for r in runs
    )
    return med, detail


def flow(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Back to back: no limits; limits on the queue that never bind; 1,000 keys."""
    global TYPE, KEYS
    n = args.n
    print(f"\n== Flow control: {n:,} jobs, one worker at the defaults, median of {args.repeat}"
          f" ({loadavg()})")  # fmt: skip
    print(f"{'configuration':<52}{'jobs/s wall':>12}{'jobs/s span':>12}{'vs none':>8}"
          f"{'claim':>7}  runs (jobs/s wall|span)")  # fmt: skip
    not_binding = {"default": {"concurrency": 10_000, "rate_limit": "100000/s"}}
    configurations = [
        ("no limits", {}, TYPE, 0),
        ("queue concurrency 10,000 (not binding)", {"default": {"concurrency": 10_000}}, TYPE, 0),
        ("queue concurrency 10,000 + rate 100,000/s (not binding)", not_binding, TYPE, 0),
        (f"{KEYED_TYPE}, concurrency_limit=1, 1,000 keys", {}, KEYED_TYPE, 1_000),
    ]
    base = None
    for label, queues, job_type, keys in configurations:
        TYPE, KEYS = job_type, keys
        med, detail = back_to_back(n, {**env, "BENCH_QUEUES": json.dumps(queues)}, args)
        rate = n / med["wall"]
        base = base or rate
        print(
            f"{label:<52}{rate:>12,.0f}{n / med['span']:>12,.0f}{rate / base:>8.0%}"
            f"{med['claim_batch']:>7.1f}  {detail}",
            flush=True,
        )
    TYPE, KEYS = "example.noop", 0


def async_handlers(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Back to back: no-op sync and no-op ``async def`` handlers, one worker at the
    defaults; then 20 async handlers sleeping 0.5 s on ``--concurrency 4``."""
    global TYPE, PAYLOAD
    n = args.n
    print(f"\n== Async handlers: {n:,} jobs, one worker at the defaults, median of {args.repeat}"
          f" ({loadavg()})")  # fmt: skip
    print(f"{'handler':<36}{'jobs/s wall':>12}{'jobs/s span':>12}{'vs sync':>8}{'wrk CPU':>8}"
          f"{'claim':>7}  runs (jobs/s wall|span)")  # fmt: skip
    base = None
    handlers = [("example.noop (def)", TYPE), (f"{ASYNC_TYPE} (async def)", ASYNC_TYPE)]
    for label, job_type in handlers:
        TYPE = job_type
        med, detail = back_to_back(n, env, args)
        rate = n / med["wall"]
        base = base or rate
        print(
            f"{label:<36}{rate:>12,.0f}{n / med['span']:>12,.0f}{rate / base:>8.0%}"
            f"{med['worker_cpu']:>8.2f}{med['claim_batch']:>7.1f}  {detail}",
            flush=True,
        )
    TYPE, PAYLOAD = ASLEEP_TYPE, {"seconds": 0.5}
    spans = [throughput_run(20, 1, 4, env)["span"] for _ in range(args.repeat)]
    print(f"20 x {ASLEEP_TYPE} 0.5 s, --concurrency 4: span (first claim to last outcome) "
          f"median {statistics.median(spans):.3f} s, runs "
          f"{', '.join(f'{s:.3f}' for s in spans)} (ideal 2.5 s)", flush=True)  # fmt: skip
    TYPE, PAYLOAD = "example.noop", {}


def durable_steps(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Back to back: no-op jobs, then jobs of 1, 10 and 100 no-op durable steps (each
    step one statement: its record, fenced by the lease), one worker at the defaults."""
    global TYPE, PAYLOAD
    n = args.n
    print(f"\n== Durable steps: one worker at the defaults, median of {args.repeat}"
          f" ({loadavg()})")  # fmt: skip
    print(f"{'handler':<36}{'jobs':>7}{'jobs/s wall':>12}{'jobs/s span':>12}"
          f"{'steps/s':>9}{'wrk CPU':>8}{'pg CPU':>7}  runs (jobs/s wall|span)")  # fmt: skip
    for label, job_type, steps in [
        ("example.noop (no step)", TYPE, 0),
        ("example.steps, 1 step", STEPS_TYPE, 1),
        ("example.steps, 10 steps", STEPS_TYPE, 10),
        ("example.steps, 100 steps", STEPS_TYPE, 100),
    ]:
        TYPE, PAYLOAD = job_type, ({"steps": steps} if steps else {})
        jobs = max(100, n // max(1, steps))  # about the same number of statements a run
        med, detail = back_to_back(jobs, env, args)
        rate = jobs / med["span"]
        print(
            f"{label:<36}{jobs:>7,}{jobs / med['wall']:>12,.0f}{rate:>12,.0f}"
            f"{rate * steps:>9,.0f}{med['worker_cpu']:>8.2f}{med['pg_cpu']:>7.2f}  {detail}",
            flush=True,
        )
        TYPE, PAYLOAD = "example.noop", {}


# -- a big table of finished jobs ---------------------------------------------


def big_table(args: argparse.Namespace, env: dict[str, str]) -> None:
    """Throughput at the default concurrency with 0, then each of ``--finished-rows``
    finished jobs already in the table (filled once, kept between runs)."""
    n = args.n
    print(f"\n== With finished jobs in the table: {n:,} {TYPE} jobs, one worker at the defaults,"
          f" median of {args.repeat} ({loadavg()})")  # fmt: skip
    print(f"{'finished rows':>14}{'jobs/s wall':>12}{'jobs/s span':>12}{'wrk CPU':>8}{'pg CPU':>7}"
          f"{'claim':>6}{'finish':>7}  runs (jobs/s wall|span)")  # fmt: skip
    for rows in [0, *args.finished_rows]:
        started = time.monotonic()
        fill_finished(rows)
        if rows:
            print(f"  (filled in {time.monotonic() - started:.0f} s)", flush=True)
        throughput_run(min(n, 5_000), 1, None, env, keep_finished=True)  # warm-up
        runs = [
            rerun_if_noisy(
                lambda: throughput_run(n, 1, None, env, keep_finished=True), args.retries
            )
            for _ in range(args.repeat)
        ]
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "noisy"}
        detail = ", ".join(
            f"{n / r['wall']:,.0f}|{n / r['span']:,.0f}{'*' if r.get('noisy') else ''}"
            for r in runs
        )
        print(
            f"{rows:>14,}{n / med['wall']:>12,.0f}{n / med['span']:>12,.0f}"
            f"{med['worker_cpu']:>8.2f}{med['pg_cpu'] + med['pg_shared_cpu']:>7.2f}"
            f"{med['claim_batch']:>6.1f}{med['finish_batch']:>7.1f}  {detail}",
            flush=True,
        )


# -- latency -----------------------------------------------------------------


def wait_for_listener(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query ILIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
        )
        if rows[0][0]:
            return
        time.sleep(0.05)
    raise RuntimeError(f"the worker did not LISTEN within {timeout}s")


def paced_enqueue(rate: float, count: int, phase: str) -> list[float]:
    from django_durable_jobs import enqueue

    durations = []
    start = time.perf_counter()
    for i in range(count):
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        t = time.perf_counter()
        enqueue(TYPE, {"phase": phase, "i": i})
        durations.append(time.perf_counter() - t)
    return durations


def wait_all_done(timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ((left,),) = sql("SELECT count(*) FROM durable_jobs_job WHERE status <> 'completed'")
        if not left:
            return
        time.sleep(0.1)
    raise RuntimeError(f"jobs still not completed after {timeout}s")


def latency_run(rate: float, seconds: float, env: dict[str, str]) -> dict[str, float]:
    reset()
    proc = subprocess.Popen(worker_command(None, burst=False), env=env, stdin=subprocess.DEVNULL)
    try:
        wait_for_listener()
        paced_enqueue(rate, int(rate), "warmup")  # one second
        wait_all_done()
        time.sleep(0.5)
        wait_until_quiet()
        ((database,),) = sql("SELECT current_database()")
        account = CpuAccount(database)
        account.add_workers([proc.pid])
        durations = paced_enqueue(rate, int(rate * seconds), "measure")
        enqueued = time.monotonic()
        wait_all_done()
        # How long the worker took to catch up after the last enqueue: about
        # zero when it kept up with the rate, the backlog's length otherwise.
        drain = time.monotonic() - enqueued
        account.scan()
        cpu = account.totals()
        ((p50, p90, p99, p999, mx, mean, count),) = sql(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d),"
            " percentile_cont(0.9) WITHIN GROUP (ORDER BY d),"
            " percentile_cont(0.99) WITHIN GROUP (ORDER BY d),"
            " percentile_cont(0.999) WITHIN GROUP (ORDER BY d),"
            " max(d), avg(d), count(*)"
            " FROM (SELECT extract(epoch FROM started_at - created_at) * 1000 AS d"
            "       FROM durable_jobs_job WHERE payload->>'phase' = 'measure') AS latencies"
        )
        rss = proc_status(proc.pid).get("VmHWM", 0) / 1024
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    if code:
        raise RuntimeError(f"worker exited {code}")
    durations.sort()
    return {
        "p50": float(p50), "p90": float(p90), "p99": float(p99), "p99.9": float(p999),
        "max": float(mx), "mean": float(mean), "count": float(count),
        "enqueue_p50": durations[len(durations) // 2] * 1000,
        "enqueue_p99": durations[int(len(durations) * 0.99)] * 1000,
        "rss_mb": rss, "drain": drain,
        "worker_cpu": cpu["workers"], "other_cpu": cpu["other"],
    }  # fmt: skip


def latency(args: argparse.Namespace, env: dict[str, str]) -> None:
    print(
        f"\n== Latency: enqueue() at {args.rate:g}/s for {args.seconds:g}s, one worker at "
        f"default settings, started_at - created_at in ms ({loadavg()})"
    )
    keys = ["p50", "p90", "p99", "p99.9", "max", "mean", "enqueue_p50", "enqueue_p99"]
    print(
        f"{'run':<8}"
        + "".join(f"{k:>12}" for k in keys)
        + f"{'jobs':>7}{'RSS MB':>8}{'wrk CPU':>8}{'other':>7}"
    )
    runs = []
    for index in range(args.latency_repeat):
        r = latency_run(args.rate, args.seconds, env)
        runs.append(r)
        print(
            f"{index + 1:<8}"
            + "".join(f"{r[k]:>12.2f}" for k in keys)
            + f"{r['count']:>7.0f}{r['rss_mb']:>8.1f}{r['worker_cpu']:>8.2f}{r['other_cpu']:>7.2f}",
            flush=True,
        )
    if len(runs) > 1:
        print(
            f"{'median':<8}"
            + "".join(f"{statistics.median(r[k] for r in runs):>12.2f}" for k in keys)
        )
    print(f"(enqueue_*: duration of the enqueue() call in the benchmark process; {loadavg()})")


# -- profile -----------------------------------------------------------------


def profile(args: argparse.Namespace, env: dict[str, str]) -> None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("\n== Profile: py-spy not found (pip install py-spy); skipped")
        return
    print(
        f"\n== Profile: one worker, --concurrency 8, {args.n:,} jobs, py-spy at "
        f"{args.profile_rate} Hz ({loadavg()})"
    )
    for mode in ("wall", "gil"):
        reset()
        fill(args.n)
        wait_until_quiet()
        out = Path(args.profile_dir) / f"worker-{mode}.txt"
        cmd = [py_spy, "record", "--format", "raw", "--threads", "--rate", str(args.profile_rate)]
        # Wall: every thread, without pausing the process at each sample (which,
        # with a dozen threads, would slow it down several times over).
        cmd += ["--idle", "--nonblocking"] if mode == "wall" else ["--gil"]
        start = time.perf_counter()
        subprocess.run(
            [*cmd, "-o", str(out), "--", *worker_command(8, burst=True)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        elapsed = time.perf_counter() - start
        ((span,),) = sql(
            "SELECT extract(epoch FROM max(completed_at) - min(started_at)) FROM durable_jobs_job"
        )
        what = "every thread, idle or not" if mode == "wall" else "the thread holding the GIL"
        print(
            f"\n-- {mode}: samples of {what}; {args.n / float(span):,.0f} jobs/s under the "
            f"profiler (span {float(span):.2f}s), {elapsed:.1f}s in all; raw stacks: {out}"
        )
        summarize(out, mode, args.profile_top, args.profile_rate)


def _handler_get_line() -> int:
    """The line of loop.py where a handler thread waits for its next job."""
    from django_durable_jobs.worker import loop

    for number, text in enumerate(Path(loop.__file__).read_text().splitlines(), 1):
        if "self._jobs.get()" in text:
            return number
    return -1


def thread_kind(label: str) -> str:
    name = label.partition("): ")[2] or label
    if name.startswith("durable-jobs-handler"):
        return "handler"
    for kind in ("completer", "maintenance", "listener"):
        if kind in name:
            return kind
    return "main"


# Frames that say nothing about where the time goes.
_BORING = ("Thread.run", "Thread._bootstrap", "Thread._bootstrap_inner", "<module>", "main",
           "execute_from_command_line", "ManagementUtility.execute", "BaseCommand.run_from_argv",
           "BaseCommand.execute", "Command.handle", "Worker.run")  # fmt: skip


def state_of(kind: str, leaf: str, get_line: int) -> str:
    func = leaf.partition(" (")[0]
    if func in ("Connection.wait", "Connection.notifies", "wait", "wait_c", "wait_select"):
        return "waiting on PostgreSQL"
    if func in ("Condition.wait", "Event.wait", "Thread.join", "sleep"):
        return "waiting (lock, event, sleep)"
    if kind == "handler" and func == "Worker._handler_thread" and leaf.endswith(f":{get_line})"):
        return "waiting (lock, event, sleep)"  # SimpleQueue.get(), a C call
    return "running Python (or waiting for the GIL)"


def summarize(path: Path, mode: str, top: int, rate: int) -> None:
    get_line = _handler_get_line()
    samples = []  # (kind, thread, serving, frames, count)
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        label, *frames = stack.split(";")
        frames = [f for f in frames if f]
        kind = thread_kind(label)
        serving = kind != "main" or any(f.startswith("Worker._loop ") for f in frames)
        samples.append((kind, label.partition(")")[0], serving, frames, int(count_text)))
    total = sum(s[4] for s in samples)
    if not total:
        print("no samples")
        return
    if mode == "wall":
        # Per thread kind, how its time splits (averaged over the threads of that kind),
        # while the worker serves jobs (the main thread's start-up and exit are left out).
        threads: dict[str, set[str]] = collections.defaultdict(set)
        states: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for kind, thread, serving, frames, count in samples:
            threads[kind].add(thread)
            if serving and frames:
                states[kind][state_of(kind, short(frames[-1]), get_line)] += count
        order = ["running Python (or waiting for the GIL)", "waiting on PostgreSQL",
                 "waiting (lock, event, sleep)"]  # fmt: skip
        print(f"  {'thread':<22}" + "".join(f"{o[:26]:>28}" for o in order))
        for kind in ("main", "handler", "completer", "maintenance", "listener"):
            if kind not in states:
                continue
            n = sum(states[kind].values())
            label = f"{kind} (x{len(threads[kind])})" if len(threads[kind]) > 1 else kind
            print(f"  {label:<22}" + "".join(f"{states[kind][o] / n:>28.0%}" for o in order))
        print(
            "  (main: samples inside Worker._loop only; 'running' includes waiting for the GIL; "
            "handler rows are the mean of the handler threads)"
        )
        return
    # GIL: who holds it, and doing what, while serving.
    by_kind: collections.Counter[str] = collections.Counter()
    self_counts: collections.Counter[str] = collections.Counter()
    incl_counts: collections.Counter[str] = collections.Counter()
    serving_total = 0
    for kind, _thread, serving, frames, count in samples:
        by_kind[kind if serving else "main: start-up and exit"] += count
        if not serving:
            continue
        serving_total += count
        if frames:
            self_counts[f"[{kind}] {short(frames[-1])}"] += count
        for frame in {short(f) for f in frames}:
            if frame.partition(" (")[0] not in _BORING:
                incl_counts[frame] += count
    print(
        f"  GIL held in {total} samples ({total / rate:.2f}s at {rate} Hz): "
        + ", ".join(f"{k} {v / total:.0%}" for k, v in by_kind.most_common())
    )
    print(f"  while serving ({serving_total} samples), top frames by self time:")
    for frame, c in self_counts.most_common(top):
        print(f"    {c / serving_total:6.1%}  {frame}")
    print("  while serving, top frames by inclusive time:")
    for frame, c in incl_counts.most_common(top * 2):
        print(f"    {c / serving_total:6.1%}  {frame}")


def short(frame: str) -> str:
    """`func (path/to/module.py:12)` -> `func (dir/module.py:12)`; the line is kept."""
    func, _, where = frame.partition(" (")
    where = where.rstrip(")")
    file, _, line = where.rpartition(":")
    parts = Path(file).parts
    keep = "/".join(parts[-2:]) if parts else where
    return f"{func} ({keep}:{line})" if line else f"{func} ({keep})"


# -- main --------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL, help="default: %(default)s")
    parser.add_argument("-n", type=int, default=20_000, help="jobs per throughput run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per throughput configuration")
    parser.add_argument(
        "--concurrency", default="1,4,16,32,64",
        type=lambda v: [int(x) for x in v.split(",") if x],
        help="single-process concurrencies to try besides the default (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--include-8", action="store_true", help="also run --concurrency 8 explicitly"
    )
    parser.add_argument(
        "--two-process-concurrency",
        type=int,
        default=None,
        help="default: the best single-process one",
    )
    parser.add_argument(
        "--retries", type=int, default=3, help="reruns of a run disturbed by other processes"
    )
    parser.add_argument("--rate", type=float, default=200.0, help="latency: jobs per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency: how long")
    parser.add_argument("--latency-repeat", type=int, default=3)
    parser.add_argument(
        "--finished-rows", default=[],
        type=lambda v: [int(x.replace("_", "")) for x in v.split(",") if x],
        help="also measure with these many finished jobs in the table, e.g. 1000000,10000000",
    )  # fmt: skip
    parser.add_argument(
        "--flow", action="store_true",
        help="also measure flow control: limits that do not bind, and 1,000 concurrency keys",
    )  # fmt: skip
    parser.add_argument(
        "--async-handlers", action="store_true",
        help="also measure async def handlers: no-op async against no-op sync, and 20 x 0.5 s",
    )  # fmt: skip
    parser.add_argument(
        "--steps", action="store_true",
        help="also measure durable steps: jobs of 1, 10 and 100 no-op steps against no-op jobs",
    )  # fmt: skip
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--profile", action="store_true", help="profile one worker with py-spy")
    parser.add_argument("--profile-rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--profile-top", type=int, default=15)
    parser.add_argument("--profile-dir", default=tempfile.gettempdir())
    args = parser.parse_args()

    ensure_database(args.database_url)
    setup_django(args.database_url)
    env = worker_env(args.database_url)
    ((version,),) = sql("SELECT version()")
    print(version)
    print(f"{os.cpu_count()} CPUs, {loadavg()}, python {sys.version.split()[0]}")
    try:
        if not args.skip_throughput:
            throughput(args, env)
        if args.finished_rows:
            big_table(args, env)
        if args.flow:
            flow(args, env)
        if args.async_handlers:
            async_handlers(args, env)
        if args.steps:
            durable_steps(args, env)
        if not args.skip_latency:
            latency(args, env)
        if args.profile:
            profile(args, env)
    finally:
        reset()


if __name__ == "__main__":
    main()
