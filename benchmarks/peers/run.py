"""Side by side: the same no-op workload for ours, pgqueuer, procrastinate and django-tasks-db.

Run on demand, never in the test suite, with the project's virtual environment:

    .venv/bin/python benchmarks/peers/run.py [--jobs 20000] [--repeat 3]
        [--peers pgqueuer,procrastinate,django-tasks-db] [--database-prefix peers]
        [--finished-rows 10000000] [--output FILE]

On first use it creates one virtual environment per peer under
``benchmarks/peers/`` (``.venv-pgqueuer``, ``.venv-procrastinate``,
``.venv-django-tasks-db``; git-ignored) with this Python and installs the
peer from PyPI into it (``--<peer>-spec``); none of their code is in this
repository. Each side has its own database, ``<prefix>_<side>``, created
when missing, with a fresh schema made by the peer's own tools (see each
``*_peer.py``).

The workload, identical for all (side after side, configuration by
configuration, so that all meet the same machine):

- *enqueue*: N single jobs, each its own transaction, then N jobs in one
  call (or one transaction, for django-tasks-db, which has no bulk call),
  after a warm-up; payload ``{"i": i}``.
- *throughput*: N jobs enqueued in bulk, ANALYZE, CHECKPOINT, a quiet second,
  then K worker processes that exit when the queue is empty. *wall* runs
  from starting the processes (start-up included) to the poll (every 50 ms)
  that sees every job done. CPU seconds of the workers and of PostgreSQL
  (the backends of that database and the shared processes) come from /proc,
  peak RSS from VmHWM, with benchmarks/worker.py's functions. One and two
  processes at the defaults, then one and two at each sweep value; the
  best by wall wins.
- *latency*: one idle worker at default settings; single jobs enqueued at
  ``--rate`` per second for ``--seconds``; enqueue-to-start per job from
  the peer's own timestamps.
- *big table* (ours only): one worker at the defaults on an empty table,
  then with ``--finished-rows`` finished jobs in it.

Every throughput and enqueue figure is the median of ``--repeat`` runs,
latency the median of ``--latency-repeat``. A run during which the rest of
the machine used over 5 % of it is rerun (``--retries``), as in worker.py.
The tables are printed and written to ``--output``.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import itertools
import os
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django_tasks_db_peer
import pgqueuer_peer
import procrastinate_peer
from django_tasks_db_peer import DjangoTasksDb
from harness import PEERS_DIR, Peer, Result, Setting, median_of, ours, say
from ours_peer import DEFAULT_SWEEP as OURS_SWEEP
from ours_peer import Ours
from pgqueuer_peer import Pgqueuer
from procrastinate_peer import Procrastinate
from report import chart, headline_rows, render

PEERS: dict[str, Any] = {
    "pgqueuer": (Pgqueuer, pgqueuer_peer),
    "procrastinate": (Procrastinate, procrastinate_peer),
    "django-tasks-db": (DjangoTasksDb, django_tasks_db_peer),
}
SERVER = "postgres://postgres@127.0.0.1:5432"


def sweep(value: str) -> list[Setting]:
    return [int(x) if x.isdigit() else x for x in value.split(",") if x]


def count(value: str) -> int:
    return int(value.replace("_", "").replace(",", ""))


@contextlib.contextmanager
def section(title: str) -> Iterator[None]:
    say(f"\n== {title} ({ours.loadavg()})")
    start = time.monotonic()
    yield
    say(f"   ({time.monotonic() - start:.0f}s)")


def describe(label: str, n: int, med: Result) -> None:
    pg = med["pg_cpu"] + med["pg_shared_cpu"]
    say(
        f"  {label:<52}{n / med['wall']:>9,.0f} jobs/s wall{n / med['span']:>9,.0f} span"
        f"  start {med['startup']:.2f}s  wrk {med['worker_cpu']:.2f} pg {pg:.2f} CPU s"
        f"  busy {med['busy']:.0%}  RSS {med['rss_max']:.1f} MB"
        f"  claim {med['claim_batch']:.1f} finish {med['finish_batch']:.1f}"
        + (f"  ({med['noisy']:.0f} noisy)" if med["noisy"] else "")
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", "-n", type=count, default=20_000, help="default: %(default)s")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument(
        "--peers", default=",".join(PEERS),
        help="comma-separated, among %(default)s (default: all); ours always runs",
    )  # fmt: skip
    parser.add_argument(
        "--database-prefix", default="peers",
        help="each side's database is <prefix>_<side> on --server (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument("--server", default=SERVER, help="PostgreSQL (default: %(default)s)")
    parser.add_argument(
        "--ours-sweep", type=sweep, default=OURS_SWEEP, help="-c values (default: 8,...,128)"
    )
    for name, (_cls, module) in PEERS.items():
        default = ",".join(str(s) for s in module.DEFAULT_SWEEP)
        parser.add_argument(
            f"--{name}-sweep", type=sweep, default=module.DEFAULT_SWEEP,
            help=f"settings besides the defaults (default: {default})",
        )  # fmt: skip
        parser.add_argument(
            f"--{name}-spec", nargs="+", default=module.DEFAULT_SPECS,
            help=f"what pip installs into .venv-{name} (default: %(default)s)",
        )  # fmt: skip
    parser.add_argument("--rate", type=float, default=200.0, help="latency: jobs per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency: how long")
    parser.add_argument("--latency-repeat", type=int, default=3)
    parser.add_argument(
        "--finished-rows", type=count, default=10_000_000,
        help="ours' big-table run: finished jobs in the table (0: skip; default: %(default)s)",
    )  # fmt: skip
    parser.add_argument("--retries", type=int, default=2, help="reruns of a noisy run")
    parser.add_argument(
        "--quiet-timeout", type=float, default=30.0,
        help="longest wait for a quiet second before a run (default: %(default)s s)",
    )  # fmt: skip
    parser.add_argument("--skip-enqueue", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--output", default=str(PEERS_DIR / "results.md"))
    args = parser.parse_args()
    unknown = set(args.peers.split(",")) - set(PEERS)
    if unknown:
        parser.error(f"unknown peers {sorted(unknown)}: choose among {', '.join(PEERS)}")
    return args


def make_sides(args: argparse.Namespace) -> list[Peer]:
    def url(side: str) -> str:
        return f"{args.server.rstrip('/')}/{args.database_prefix}_{side.replace('-', '_')}"

    sides: list[Peer] = [Ours(url("ours"), args.ours_sweep)]
    for name in args.peers.split(","):
        cls, _module = PEERS[name]
        key = name.replace("-", "_")
        sides.append(cls(url(name), getattr(args, f"{key}_spec"), getattr(args, f"{key}_sweep")))
    return sides


def main() -> None:
    args = parse_args()
    n = args.jobs
    started = time.monotonic()
    # worker.py waits up to 5 minutes for a quiet machine; on a shared one that
    # would dominate the run.
    ours.QUIET_TIMEOUT_SECONDS = args.quiet_timeout

    # Each peer is pip-installed, which byte-compiles it; ours runs from its source
    # tree (an editable install), which nothing compiles, with its dependencies in
    # this venv, which uv installs without compiling. Where PYTHONDONTWRITEBYTECODE
    # is set, every worker process would then compile ours, or Django, from source
    # at start-up.
    for tree in ("django_durable_jobs", "example_project", "benchmarks"):
        compileall.compile_dir(ours.ROOT / tree, quiet=1)
    compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=1, workers=0)
    sides = make_sides(args)
    for side in sides:
        side.prepare()
    ((pg_version,),) = ours.sql("SHOW server_version")
    say(
        f"PostgreSQL {pg_version}; {os.cpu_count()} CPUs; python {sys.version.split()[0]};"
        f" {n:,} jobs, median of {args.repeat}"
    )
    for side in sides:
        say(f"  {side.title}: {side.about} ({side.db.name if side.name != 'ours' else side.url})")

    results: dict[str, Any] = {"enqueue": {}, "latency": {}, "runs": {}, "big": {}}
    try:
        if not args.skip_enqueue:
            with section(f"Enqueue: {n:,} one per transaction, then {n:,} in one call"):
                for side in sides:
                    runs = [side.enqueue(n) for _ in range(args.repeat)]
                    results["enqueue"][side.name] = med = median_of(runs)
                    say(
                        f"  {side.title:<26}{med['single']:>9,.0f} one per txn"
                        f"{med['bulk']:>10,.0f} bulk"
                    )
        if not args.skip_latency:
            with section(f"Latency: single jobs at {args.rate:g}/s for {args.seconds:g}s"):
                for side in sides:
                    runs = [
                        side.latency_run(args.rate, args.seconds)
                        for _ in range(args.latency_repeat)
                    ]
                    results["latency"][side.name] = med = median_of(runs)
                    say(
                        f"  {side.title:<26} p50 {med['p50']:.2f} ms  p90 {med['p90']:.2f}"
                        f"  p99 {med['p99']:.2f}  max {med['max']:.2f}  ({med['count']:.0f} jobs)"
                    )
        with section(f"Throughput: {n:,} no-op jobs, workers exit when the queue is empty"):
            results["runs"] = throughput(sides, n, args)
        if args.finished_rows:
            with section(f"Ours with {args.finished_rows:,} finished jobs in the table"):
                big = sides[0]
                assert isinstance(big, Ours)
                results["big"] = big.big_table(n, args.finished_rows, args.repeat, args.retries)
    finally:
        for side in sides:
            side.reset()

    table = render(args, n, str(pg_version), sides, results)
    elapsed = time.monotonic() - started
    footer = f"\n({elapsed / 60:.1f} minutes; {ours.loadavg()})\n"
    say("\n" + table + footer)
    Path(args.output).write_text(table + footer)
    say(f"written to {args.output}")
    # The same run as a chart, beside the table (docs/benchmarks.md shows both).
    picture = str(Path(args.output).with_suffix(".png"))
    title = f"Side by side: {n:,} no-op jobs, PostgreSQL {pg_version}, median of {args.repeat}"
    if chart(headline_rows(args, n, sides, results), sides, title, picture):
        say(f"chart written to {picture}")
    else:
        say("no chart: matplotlib is missing (pip install -e '.[benchmark]')")


def throughput(
    sides: list[Peer], n: int, args: argparse.Namespace
) -> dict[str, dict[tuple[int, Setting], Result]]:
    """Every configuration of every side, configuration by configuration across sides."""
    runs: dict[str, dict[tuple[int, Setting], Result]] = {side.name: {} for side in sides}

    def measure(side: Peer, processes: int, setting: Setting) -> None:
        med = median_of(
            [
                ours.rerun_if_noisy(
                    lambda: side.throughput_run(n, processes, setting), args.retries
                )
                for _ in range(args.repeat)
            ]
        )
        runs[side.name][(processes, setting)] = med
        describe(f"{side.title} {processes} x {side.setting_label(setting)}", n, med)

    # Warm-up: the databases' caches, the page cache of every venv's files.
    for side in sides:
        side.throughput_run(min(n, 5_000), 1, None)
    for processes in (1, 2):
        for side in sides:
            measure(side, processes, None)
    for processes in (1, 2):
        for settings in itertools.zip_longest(*(side.sweep for side in sides)):
            for side, setting in zip(sides, settings, strict=True):
                if setting is not None:
                    measure(side, processes, setting)
    return runs


if __name__ == "__main__":
    main()
