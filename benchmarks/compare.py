"""Two commits back to back: enqueue, worker throughput and latency, medians and ratios.

Run on demand, never in the test suite, with the project's virtual environment:

    .venv/bin/python benchmarks/compare.py BASE [HEAD] [-n 20000] [--rounds 3]
        [--only enqueue,worker,latency] [--workers 1x8,2x8] [--rate 200] [--seconds 10]
        [--database-url URL] [--markdown] [--cache-dir DIR | --no-cache]

BASE and HEAD are any commits git knows (HEAD defaults to this checkout's
HEAD: commit what you want measured; uncommitted changes are not). Each
side gets:

- its own git worktree of the commit, ``<cache>/<sha>/src`` (detached);
- its own venv, ``<cache>/<sha>/venv``, with the commit's ``[example]``
  extra installed (uv where it is on PATH, else pip); both are kept, keyed
  by the commit hash, so the next run with that commit starts at once
  (``--no-cache``: a temporary directory, removed at the end);
- its own database, ``<prefix><side>_<sha>_<pid>`` on ``--database-url``'s
  server (``--database-prefix``, ``cmp_`` by default), created fresh,
  migrated by the commit's own migrations, dropped at
  the end.

The measurements are the commit's own harnesses, imported by
``benchmarks/compare_side.py`` in the side's venv (nothing parses their
printed output):

- *enqueue* (benchmarks/enqueue.py): ``enqueue()`` one job per transaction,
  then ``enqueue_many`` in batches of ``--batch``; jobs/s;
- *worker* (benchmarks/worker.py's ``throughput_run``), for each of
  ``--workers`` (``PxC``: P processes at ``--concurrency C``, with
  ``--burst``): jobs/s by wall and by span, and the workers' and
  PostgreSQL's CPU per job;
- *latency* (worker.py's ``latency_run``): one idle worker at the defaults,
  ``enqueue()`` paced at ``--rate`` for ``--seconds``; p50 and p99 of
  started_at - created_at.

Each round runs every measurement once per side, in the order A B B A
A B B A ...: a side that goes first in one pair goes second in the next,
and each measurement alternates which side runs first from round to round,
so that a machine getting busier or quieter over the run weighs on both.
The first run of each kind on each side warms up first, as the harnesses
do. The table shows, per metric, the median of each side's runs, the ratio
HEAD/BASE and the runs themselves (``*``: still noisy after ``--retries``
reruns, as worker.py marks them). docs/benchmarks.md says how to read it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
SIDE_SCRIPT = Path(__file__).resolve().parent / "compare_side.py"
KINDS = ("enqueue", "worker", "latency")
SIDES = ("BASE", "HEAD")
DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432/postgres"
#: Not passed on to the sides (the harnesses set what they need).
LEFT_OUT_OF_SIDES = ("VIRTUAL_ENV", "PYTHONPATH", "DJANGO_SETTINGS_MODULE", "DJANGO_DEBUG")


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


# -- what is measured (pure) ---------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """One run of one harness on one side: ``enqueue``, ``worker`` (P x -c C) or ``latency``."""

    kind: str
    processes: int = 0
    concurrency: int = 0

    @property
    def label(self) -> str:
        if self.kind == "worker":
            return f"worker {self.processes} x -c {self.concurrency}"
        return self.kind


@dataclass(frozen=True)
class Metric:
    """One row of the table: its name, unit, which way is better and how to print it."""

    name: str
    unit: str
    better: str  # "higher" or "lower"
    fmt: str

    def show(self, value: float) -> str:
        return format(value, self.fmt)


def metrics_of(measurement: Measurement, result: dict[str, Any], n: int) -> dict[Metric, float]:
    """The table's figures from one run's JSON answer (compare_side.py's)."""
    if measurement.kind == "enqueue":
        return {
            Metric("enqueue, one per transaction", "jobs/s", "higher", ",.0f"): result["single"],
            Metric("enqueue_many, in batches", "jobs/s", "higher", ",.0f"): result["bulk"],
        }
    if measurement.kind == "worker":
        label = measurement.label
        return {
            Metric(f"{label}, by wall", "jobs/s", "higher", ",.0f"): n / result["wall"],
            Metric(f"{label}, by span", "jobs/s", "higher", ",.0f"): n / result["span"],
            Metric(f"{label}, worker CPU", "us/job", "lower", ",.0f"): (
                result["worker_cpu"] / n * 1e6
            ),
            Metric(f"{label}, PostgreSQL CPU", "us/job", "lower", ",.0f"): (
                result["pg_cpu"] / n * 1e6
            ),
        }
    if measurement.kind == "latency":
        return {
            Metric("latency p50", "ms", "lower", ".2f"): result["p50"],
            Metric("latency p99", "ms", "lower", ".2f"): result["p99"],
        }
    raise ValueError(f"unknown measurement kind {measurement.kind!r}")


def measurements(only: Sequence[str], workers: Sequence[tuple[int, int]]) -> list[Measurement]:
    """What one round runs on each side, in order."""
    found: list[Measurement] = []
    for kind in KINDS:
        if kind not in only:
            continue
        if kind == "worker":
            found += [Measurement("worker", p, c) for p, c in workers]
        else:
            found.append(Measurement(kind))
    return found


@dataclass(frozen=True)
class Step:
    """One entry of the schedule: in round ``round``, ``measurement`` on ``side``."""

    round: int
    measurement: Measurement
    side: str
    warm_up: bool


def schedule(rounds: int, plan: Sequence[Measurement]) -> list[Step]:
    """Every (round, measurement) pair runs both sides, in the order A B B A A B B A ...

    Which side goes first alternates from one measurement to the next within
    a round, and for each measurement from one round to the next: over an
    even number of rounds each side goes first equally often in every
    measurement, and a slow drift of the machine weighs on both. The first
    ``enqueue`` and the first ``worker`` run of each side warm up first
    (``latency_run`` has a warm-up second of its own).
    """
    steps: list[Step] = []
    warmed: set[tuple[str, str]] = set()
    for round_ in range(rounds):
        for index, measurement in enumerate(plan):
            order = SIDES if (round_ + index) % 2 == 0 else SIDES[::-1]
            for side in order:
                key = (side, measurement.kind)
                warm = measurement.kind != "latency" and key not in warmed
                warmed.add(key)
                steps.append(Step(round_, measurement, side, warm))
    return steps


@dataclass
class Sample:
    value: float
    noisy: bool = False


@dataclass
class Row:
    metric: Metric
    runs: dict[str, list[Sample]] = field(default_factory=lambda: {side: [] for side in SIDES})

    def median(self, side: str) -> float | None:
        values = [sample.value for sample in self.runs[side]]
        return statistics.median(values) if values else None

    @property
    def ratio(self) -> float | None:
        base, head = self.median("BASE"), self.median("HEAD")
        if base is None or head is None or base == 0:
            return None
        return head / base


def collect(rows: dict[Metric, Row], side: str, figures: dict[Metric, float], noisy: bool) -> None:
    """Add one run's figures to the table's rows (kept in first-seen order)."""
    for metric, value in figures.items():
        rows.setdefault(metric, Row(metric)).runs[side].append(Sample(value, noisy))


def runs_text(metric: Metric, samples: Iterable[Sample]) -> str:
    return " ".join(metric.show(s.value) + ("*" if s.noisy else "") for s in samples) or "-"


def table(rows: Iterable[Row], base: str, head: str, markdown: bool = False) -> str:
    """The comparison: metric, better, BASE median, HEAD median, HEAD/BASE, runs of each."""
    header = [
        "metric",
        "better",
        f"BASE {base}",
        f"HEAD {head}",
        "HEAD/BASE",
        "runs BASE",
        "runs HEAD",
    ]
    lines: list[list[str]] = []
    for row in rows:
        medians = [row.median(side) for side in SIDES]
        lines.append(
            [
                f"{row.metric.name} ({row.metric.unit})",
                row.metric.better,
                *("-" if m is None else row.metric.show(m) for m in medians),
                "-" if row.ratio is None else f"{row.ratio:.3f}",
                runs_text(row.metric, row.runs["BASE"]),
                runs_text(row.metric, row.runs["HEAD"]),
            ]
        )
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|---|---|--:|--:|--:|---|---|"]
        out += ["| " + " | ".join(line) + " |" for line in lines]
        return "\n".join(out)
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines, strict=True)]
    # Text left-aligned, the numbers right-aligned.
    aligns = ["<", "<", ">", ">", ">", "<", "<"]
    return "\n".join(
        "  ".join(
            format(cell, f"{a}{w}") for cell, a, w in zip(line, aligns, widths, strict=True)
        ).rstrip()
        for line in [header, *lines]
    )


# -- arguments (pure) ------------------------------------------------------------


def positive_int(value: str) -> int:
    try:
        number = int(value.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value!r}")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0: {value!r}")
    return number


def kinds(value: str) -> list[str]:
    """``enqueue,latency`` -> the kinds, each known, at least one."""
    chosen = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [kind for kind in chosen if kind not in KINDS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(KINDS)}: {value!r}"
        )
    return chosen


def worker_settings(value: str) -> list[tuple[int, int]]:
    """``1x8,2x8`` -> [(1, 8), (2, 8)]: processes x concurrency."""
    settings = []
    for part in value.split(","):
        processes, sep, concurrency = part.strip().lower().partition("x")
        try:
            setting = (int(processes), int(concurrency))
        except ValueError:
            setting = (0, 0)
        if not sep or min(setting) < 1:
            raise argparse.ArgumentTypeError(
                f"expected PROCESSESxCONCURRENCY[,...], e.g. 1x8,2x8: {value!r}"
            )
        settings.append(setting)
    return settings


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "django-durable-jobs" / "compare"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/compare.py",
        description=(__doc__ or "").splitlines()[0],
        epilog="A quick check: -n 5000 --rounds 2 --seconds 5. docs/benchmarks.md: how to read it.",
    )
    parser.add_argument("base", metavar="BASE", help="the commit to compare against")
    parser.add_argument(
        "head", metavar="HEAD", nargs="?", default="HEAD", help="default: %(default)s"
    )
    parser.add_argument(
        "-n", type=positive_int, default=20_000, help="jobs per run (default: %(default)r)"
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=3,
        help="runs of each measurement per side; the median is shown (default: %(default)r)",
    )
    parser.add_argument(
        "--only",
        type=kinds,
        default=list(KINDS),
        help="a comma-separated subset of enqueue, worker, latency (default: all three)",
    )
    parser.add_argument(
        "--workers",
        type=worker_settings,
        default=[(1, 8), (2, 8)],
        help="worker settings, PROCESSESxCONCURRENCY, comma-separated (default: 1x8,2x8)",
    )
    parser.add_argument(
        "--batch",
        type=positive_int,
        default=5_000,
        help="enqueue_many's batch size (default: %(default)r)",
    )
    parser.add_argument(
        "--rate", type=positive_float, default=200.0, help="latency: jobs/s (default: %(default)r)"
    )
    parser.add_argument(
        "--seconds",
        type=positive_float,
        default=10.0,
        help="latency: how long (default: %(default)r)",
    )
    parser.add_argument(
        "--database-url",
        default=None,
        help="the server for the sides' cmp_* databases, and the database to connect to "
        f"while creating and dropping them (default: $DATABASE_URL, else {DEFAULT_SERVER})",
    )
    parser.add_argument(
        "--quiet-timeout",
        type=float,
        default=30.0,
        help="seconds a run waits at most for a quiet second (worker.py waits 300) "
        "(default: %(default)r)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=1,
        help="reruns of a worker run disturbed by other processes (default: %(default)r)",
    )
    parser.add_argument(
        "--database-prefix",
        default="cmp_",
        help="the start of the sides' database names, so that runs sharing a server can "
        "tell theirs apart (default: %(default)r)",
    )
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument(
        "--cache-dir",
        type=Path,
        default=default_cache(),
        help="where each commit's worktree and venv are kept (default: %(default)s)",
    )
    cache.add_argument(
        "--no-cache",
        action="store_true",
        help="build the worktrees and venvs in a temporary directory, removed at the end",
    )
    args = parser.parse_args(argv)
    if args.retries < 0:
        parser.error("--retries must be 0 or more")
    args.database_url = args.database_url or os.environ.get("DATABASE_URL") or DEFAULT_SERVER
    return args


def side_database_url(server_url: str, side: str, sha: str, pid: int, prefix: str = "cmp_") -> str:
    """The URL of a side's own database: ``<prefix><side>_<sha[:10]>_<pid>`` on the same server."""
    name = f"{prefix}{side.lower()}_{sha[:10]}_{pid}"
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))


# -- git, venvs, databases ---------------------------------------------------------


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass
class Side:
    label: str
    ref: str
    sha: str
    subject: str
    src: Path
    python: Path
    url: str
    about: dict[str, str] = field(default_factory=dict)

    @property
    def short(self) -> str:
        return self.sha[:7]


def resolve(ref: str) -> tuple[str, str]:
    try:
        sha = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"compare.py: git does not know the commit {ref!r}") from None
    return sha, git("log", "-1", "--format=%s", sha)


def ensure_worktree(cache: Path, sha: str) -> Path:
    """``<cache>/<sha>/src``: a detached worktree of ``sha``, reused when it is intact."""
    src = cache / sha / "src"
    if (src / ".git").exists():
        try:
            if git("rev-parse", "HEAD", cwd=src) == sha and not git(
                "status", "--porcelain", "--untracked-files=no", cwd=src
            ):
                return src
        except subprocess.CalledProcessError:
            pass
        say(f"{src} is not a clean checkout of {sha[:7]}: making it again")
        subprocess.run(["git", "worktree", "remove", "--force", str(src)], cwd=ROOT)
        shutil.rmtree(src, ignore_errors=True)
    # A worktree removed by hand stays registered until pruned.
    git("worktree", "prune")
    say(f"git worktree add {src} {sha[:7]}")
    git("worktree", "add", "--detach", "--force", str(src), sha)
    return src


def ensure_venv(cache: Path, sha: str, src: Path) -> Path:
    """``<cache>/<sha>/venv`` with the commit's ``[example]`` extra, installed once."""
    venv = cache / sha / "venv"
    python = venv / "bin" / "python"
    stamp = venv / ".compare-installed"
    wanted = f"{sha} {sys.version}"
    if stamp.exists() and stamp.read_text() == wanted and python.exists():
        byte_compile(python, src)
        return python
    uv = shutil.which("uv")
    if venv.exists():
        shutil.rmtree(venv)
    say(f"creating {venv} with {'uv' if uv else 'pip'}")
    if uv:
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        install = [uv, "pip", "install", "-q", "--python", str(python)]
    else:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        install = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*install, "-e", f"{src}[example]"], check=True)
    byte_compile(python, src)
    stamp.write_text(wanted)
    return python


def byte_compile(python: Path, src: Path) -> None:
    """Byte-compile the side's venv and source tree, as a user's ``pip install`` leaves them.

    uv installs without compiling, and nothing compiles an editable tree:
    where PYTHONDONTWRITEBYTECODE is set, every worker process then compiled
    Django, psycopg and ours from source at start-up (0.55 s of CPU a
    process on this machine, against 0.36 s for the whole start of a
    compiled one), which both sides paid and which made every ratio read
    nearer 1. Quick once done: compileall skips what is up to date.
    """
    code = (
        "import compileall, sys, sysconfig; "
        "ok = all(compileall.compile_dir(d, quiet=1, workers=0) "
        "for d in [sysconfig.get_paths()['purelib'], *sys.argv[1:]]); "
        "sys.exit(0 if ok else 1)"
    )
    trees = [str(src / tree) for tree in ("django_durable_jobs", "example_project", "benchmarks")]
    subprocess.run([str(python), "-c", code, *trees], check=True)


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def admin_sql(server_url: str, template: str, url: str, prefix: str = "cmp_") -> None:
    """Run ``template`` (with ``{}`` for the side's database name) on the server's URL."""
    import psycopg
    from psycopg import sql

    name = database_name(url)
    # Only ever the sides' own databases.
    assert name.startswith(prefix), name
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL(template).format(sql.Identifier(name)))  # type: ignore[arg-type]


def create_database(server_url: str, url: str, prefix: str = "cmp_") -> None:
    admin_sql(server_url, "DROP DATABASE IF EXISTS {} WITH (FORCE)", url, prefix)
    admin_sql(server_url, "CREATE DATABASE {}", url, prefix)


def drop_database(server_url: str, url: str, prefix: str = "cmp_") -> None:
    admin_sql(server_url, "DROP DATABASE IF EXISTS {} WITH (FORCE)", url, prefix)


# -- running -----------------------------------------------------------------------


def run_side(side: Side, what: str, options: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """compare_side.py in the side's venv; its JSON answer. Its own output is indented."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [
            str(side.python), str(SIDE_SCRIPT), "--root", str(side.src),
            "--database-url", side.url, "--out", out.name,
            "--quiet-timeout", str(args.quiet_timeout), "--retries", str(args.retries),
            *options, what,
        ]  # fmt: skip
        # The harnesses choose their settings; this shell's must not leak into one side.
        env = {k: v for k, v in os.environ.items() if k not in LEFT_OUT_OF_SIDES}
        done = subprocess.run(command, cwd=side.src, env=env, capture_output=True, text=True)
        for line in (done.stdout + done.stderr).splitlines():
            if line.strip():
                print(f"      {side.label}: {line}", flush=True)
        if done.returncode:
            raise SystemExit(f"compare.py: {side.label} {what} failed (exit {done.returncode})")
        return dict(json.loads(Path(out.name).read_text()))


def options_for(step: Step, args: argparse.Namespace) -> list[str]:
    options = ["-n", str(args.n), "--batch", str(args.batch)]
    if step.measurement.kind == "worker":
        options += ["--processes", str(step.measurement.processes)]
        options += ["--concurrency", str(step.measurement.concurrency)]
    if step.measurement.kind == "latency":
        options += ["--rate", str(args.rate), "--seconds", str(args.seconds)]
    if step.warm_up:
        options.append("--warm-up")
    return options


def measure(sides: dict[str, Side], args: argparse.Namespace) -> dict[Metric, Row]:
    plan = measurements(args.only, args.workers)
    steps = schedule(args.rounds, plan)
    rows: dict[Metric, Row] = {}
    for index, step in enumerate(steps, 1):
        side = sides[step.side]
        started = time.monotonic()
        result = run_side(side, step.measurement.kind, options_for(step, args), args)
        figures = metrics_of(step.measurement, result, args.n)
        noisy = bool(result.get("noisy"))
        collect(rows, step.side, figures, noisy)
        shown = ", ".join(
            f"{metric.show(value)} {metric.unit}" for metric, value in list(figures.items())[:2]
        )
        print(
            f"  [{index}/{len(steps)}] round {step.round + 1} {step.measurement.label:<18} "
            f"{step.side} {side.short}{' (warmed up)' if step.warm_up else ''}: {shown}"
            f"{' (noisy)' if noisy else ''}  {time.monotonic() - started:.0f} s  "
            f"load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
    return rows


def prepare(args: argparse.Namespace, cache: Path) -> dict[str, Side]:
    sides = {}
    for label, ref in zip(SIDES, (args.base, args.head), strict=True):
        sha, subject = resolve(ref)
        src = ensure_worktree(cache, sha)
        python = ensure_venv(cache, sha, src)
        url = side_database_url(args.database_url, label, sha, os.getpid(), args.database_prefix)
        sides[label] = Side(label, ref, sha, subject, src, python, url)
    return sides


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    cache = Path(tempfile.mkdtemp(prefix="compare-")) if args.no_cache else args.cache_dir
    cache.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    load_before = os.getloadavg()
    sides = prepare(args, cache)
    created: list[Side] = []
    try:
        for side in sides.values():
            create_database(args.database_url, side.url, args.database_prefix)
            created.append(side)
            side.about = run_side(side, "migrate", [], args)
            say(
                f"{side.label} {side.short} ({side.ref}): {side.subject[:60]}; "
                f"database {database_name(side.url)}, Django {side.about['django']}"
            )
        rows = measure(sides, args)
    finally:
        for side in created:
            drop_database(args.database_url, side.url, args.database_prefix)
        if args.no_cache:
            for side in sides.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(side.src)], cwd=ROOT)
            shutil.rmtree(cache, ignore_errors=True)
    base, head = sides["BASE"], sides["HEAD"]
    print()
    print(
        f"BASE {base.short} {base.subject[:70]}\nHEAD {head.short} {head.subject[:70]}\n"
        f"{args.n:,} jobs per run, {args.rounds} round(s), sides alternating A B B A; "
        f"PostgreSQL {base.about['postgresql']}, Python {base.about['python']}, "
        f"{os.cpu_count()} CPUs; load average {load_before[0]:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; {time.monotonic() - started:.0f} s in all"
    )
    print()
    print(table(rows.values(), base.short, head.short, markdown=args.markdown))
    print("\nmedians of the runs; HEAD/BASE above 1 is better where higher is better")
    if any(s.noisy for row in rows.values() for runs in row.runs.values() for s in runs):
        print("* a worker run during which other processes used over 5 % of the machine")


if __name__ == "__main__":
    main()
