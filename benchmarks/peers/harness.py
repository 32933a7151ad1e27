"""What every side of the side-by-side benchmark shares: venvs, databases, runs and medians.

``Peer`` is one job queue measured by ``run.py``: it prepares its virtual
environment and database, enqueues, fills the queue, starts worker
processes and reads its own tables. The throughput and latency runs are
written once here, for every peer, on top of ``benchmarks/worker.py``'s
machinery (its /proc accounting and its process watcher), so that every
side, ours included, is measured the same way. Each external peer lives in
its own ``*_peer.py`` module (run in the project's venv) with a ``*_side``
counterpart that runs in the peer's own venv.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PEERS_DIR = Path(__file__).resolve().parent
ROOT = PEERS_DIR.parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import worker as ours  # noqa: E402  benchmarks/worker.py: its /proc and run machinery

Result = dict[str, float]
#: A worker setting of a sweep: None is the peer's defaults.
Setting = int | str | None


def say(message: str) -> None:
    print(message, flush=True)


def median_of(runs: list[Result]) -> Result:
    """The median of each figure; peak RSS is the highest; noisy runs are counted."""
    keys = [k for k in runs[0] if k != "noisy"]
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    med["rss_max"] = max(r["rss_mb"] for r in runs) if "rss_mb" in runs[0] else 0.0
    med["noisy"] = float(sum(1 for r in runs if r.get("noisy")))
    med["runs"] = float(len(runs))
    return med


def ensure_venv(venv: Path, specs: list[str]) -> Path:
    """Create ``venv`` with this Python and install ``specs`` from PyPI into it, once.

    The project's Python (the one running run.py), so that every side runs
    on the same interpreter. Returns the venv's python.
    """
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    wanted = "\n".join(specs)
    if not marker.exists() or marker.read_text() != wanted:
        say(f"creating {venv.relative_to(ROOT)} and installing {', '.join(specs)} from PyPI")
        if not python.exists():
            # From a venv, venv builds on the base interpreter: the same Python.
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *specs], check=True)
        marker.write_text(wanted)
    return python


def versions(python: Path, dists: list[str]) -> dict[str, str]:
    """The installed versions of ``dists`` in a venv."""
    code = (
        "import importlib.metadata as m, json, sys;"
        " print(json.dumps({d: m.version(d) for d in sys.argv[1:]}))"
    )
    out = subprocess.run(
        [str(python), "-c", code, *dists], check=True, capture_output=True, text=True
    ).stdout
    return dict(json.loads(out))


class Database:
    """A peer's own database, read and reset from this process with psycopg."""

    def __init__(self, url: str) -> None:
        import psycopg

        ours.ensure_database(url)
        self.url = url
        self.conn = psycopg.connect(url, autocommit=True)
        ((self.name,),) = self.sql("SELECT current_database()")

    def sql(self, query: str, params: list[object] | None = None) -> list[tuple[Any, ...]]:
        cursor = self.conn.execute(query, params or [])  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []

    def exists(self, table: str) -> bool:
        ((found,),) = self.sql("SELECT to_regclass(%s) IS NOT NULL", [table])
        return bool(found)

    def settle(self, tables: tuple[str, ...]) -> None:
        """As ours' fill: fresh statistics and no dirty pages left over."""
        for table in tables:
            self.sql(f"ANALYZE {table}")
        self.sql("CHECKPOINT")


class Peer:
    """One external job queue: its venv, its database, its workers and its tables.

    Subclasses name the venv's packages, the worker command of each setting,
    and the SQL that reads their own tables; the runs are the same for all.
    """

    #: The column heading's name and the venv's directory name.
    name = ""
    #: The distributions whose versions describe this side (the first is the peer).
    dists: list[str] = []
    #: The tables emptied before each run and analysed after each fill.
    tables: tuple[str, ...] = ()
    #: Where the side's scripts run from.
    cwd = PEERS_DIR
    #: The side script (run with the venv's python) with enqueue, fill and paced.
    side_script: list[str] = []

    def __init__(self, url: str, specs: list[str], sweep: list[Setting]) -> None:
        self.url = url
        self.specs = specs
        self.sweep = sweep
        self.venv = PEERS_DIR / f".venv-{self.name}"
        self.python = self.venv / "bin" / "python"
        self.version = ""
        self.about = ""

    # -- set-up ---------------------------------------------------------------

    def prepare(self) -> None:
        ensure_venv(self.venv, self.specs)
        found = versions(self.python, self.dists)
        self.version = found[self.dists[0]]
        self.about = ", ".join(f"{d} {v}" for d, v in found.items())
        self.db = Database(self.url)
        self.install()

    def install(self) -> None:
        """Put a fresh schema into the peer's database, with the peer's own tools."""
        raise NotImplementedError

    @property
    def title(self) -> str:
        return f"{self.name} {self.version}"

    def env(self, setting: Setting = None) -> dict[str, str]:
        return dict(os.environ)

    # -- the peer's commands and tables ---------------------------------------

    def side(self, *args: str) -> dict[str, Any]:
        """Run a command of the side script in the peer's venv; its JSON answer."""
        out = subprocess.run(
            [str(self.python), *self.side_script, *args],
            env=self.env(),
            cwd=self.cwd,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return dict(json.loads(out.strip().splitlines()[-1]))

    def worker_command(self, setting: Setting, drain: bool) -> list[str]:
        raise NotImplementedError

    def setting_label(self, setting: Setting) -> str:
        raise NotImplementedError

    def reset(self) -> None:
        self.db.sql(f"TRUNCATE {', '.join(self.tables)} CASCADE")

    def left(self) -> int:
        """Jobs not finished yet."""
        raise NotImplementedError

    def run_stats(self, n: int, db_start: object) -> Result:
        """span, startup, claim_batch and finish_batch of a drained queue of n jobs."""
        raise NotImplementedError

    def latency_stats(self, paced: dict[str, Any]) -> tuple[float, ...]:
        """p50, p90, p99, max (ms) and count of the paced jobs' enqueue-to-start."""
        raise NotImplementedError

    # -- the runs -------------------------------------------------------------

    def enqueue(self, n: int) -> Result:
        return self.side("enqueue", "-n", str(n))

    def throughput_run(self, n: int, processes: int, setting: Setting) -> Result:
        """worker.py's throughput_run for this peer's tables and workers."""
        self.reset()
        self.side("fill", "-n", str(n))
        self.db.settle(self.tables)
        quiet_wait = ours.wait_until_quiet()
        ((db_start,),) = self.db.sql("SELECT clock_timestamp()")
        watched = ours.watch_processes(
            [self.worker_command(setting, drain=True)] * processes,
            self.env(setting),
            self.db.name,
            done=lambda: self.left() == 0,
            left=self.left,
            cwd=self.cwd,
        )
        return {**watched, **self.run_stats(n, db_start), "quiet_wait": quiet_wait}

    def wait_empty(self, proc: subprocess.Popen[bytes], timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while self.left():
            if proc.poll() is not None:
                raise RuntimeError(f"{self.name} worker exited {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} jobs still queued after {timeout}s")
            time.sleep(0.1)

    def latency_run(self, rate: float, seconds: float) -> Result:
        """worker.py's latency_run: one worker at defaults, single jobs paced by the clock."""
        self.reset()
        proc = subprocess.Popen(
            self.worker_command(None, drain=False),
            env=self.env(None),
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
        )
        try:
            # The warm-up second also waits for the worker: its jobs are done
            # only once the worker has started and claimed them.
            self.side("paced", "--rate", str(rate), "--count", str(int(rate)))
            self.wait_empty(proc)
            time.sleep(0.5)
            ours.wait_until_quiet()
            paced = self.side("paced", "--rate", str(rate), "--count", str(int(rate * seconds)))
            enqueued = time.monotonic()
            self.wait_empty(proc)
            drain = time.monotonic() - enqueued
            p50, p90, p99, mx, count = self.latency_stats(paced)
            rss = ours.proc_status(proc.pid).get("VmHWM", 0) / 1024
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
        if code:
            raise RuntimeError(f"{self.name} worker exited {code}")
        return {
            "p50": p50, "p90": p90, "p99": p99, "max": mx, "count": count, "rss_mb": rss,
            "drain": drain,
            "enqueue_p50": paced["enqueue_p50"], "enqueue_p99": paced["enqueue_p99"],
        }  # fmt: skip


def batches(n: int, statements: int) -> float:
    """Jobs per statement: n jobs over so many distinct statement timestamps."""
    return n / max(1, statements)
