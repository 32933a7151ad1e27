"""Real ``manage.py runjobworker`` processes that a scenario starts, kills and replaces.

Each worker has an id of its own (``--worker-id``), so the rows it holds
are known by their ``lease_holder``: right after a SIGKILL, the jobs
``running`` under the victim's id are exactly what it had in flight (a dead
worker's rows change only when their lease expires, seconds later).

A worker may run on a "host" of its own: in a UTS namespace with that host
name (``socket.gethostname()``, which the workers table records) and, when
``network`` is asked for, a network namespace with nothing but a loopback
of its own, reaching PostgreSQL through the cluster's Unix socket. Both need
root and ``unshare``; ``namespaces_available()`` says whether they work here.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from django_durable_jobs.models import Job, JobStatus, WorkerProcess

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "example_project" / "manage.py"


@cache
def namespaces_available() -> bool:
    """Whether ``unshare --uts --net`` works (root, and a kernel and container that allow it)."""
    try:
        probe = subprocess.run(
            ["unshare", "--uts", "--net", "sh", "-c", "hostname chaos-probe && hostname"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0 and probe.stdout.strip() == "chaos-probe"


@dataclass
class Worker:
    id: str
    args: tuple[str, ...]
    proc: subprocess.Popen[bytes]
    log: Path
    host: str | None = None
    network: bool = False
    env: dict[str, str] = field(default_factory=dict)
    #: Stopped or killed by the scenario, or a crash already accounted for.
    accounted: bool = False

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class Fleet:
    """The workers of one scenario, on its database (``alias`` in this process)."""

    def __init__(self, alias: str, env: dict[str, str], logs: Path) -> None:
        self.alias = alias
        self.env = env
        self.logs = logs
        self.workers: list[Worker] = []
        #: Job id -> how many SIGKILLs (or crashes) found it in flight.
        self.in_flight: Counter[uuid.UUID] = Counter()
        self.kills = 0

    # -- starting ------------------------------------------------------------

    def start(
        self,
        *args: str,
        prefix: str = "w",
        host: str | None = None,
        network: bool = False,
        env: dict[str, str] | None = None,
    ) -> Worker:
        """Start a worker (``args`` for runjobworker); ``host``: in namespaces of its own."""
        worker_id = f"{host or prefix}-{len(self.workers)}"
        command = [sys.executable, str(MANAGE), "runjobworker", "--worker-id", worker_id, *args]
        if host is not None:
            # unshare execs sh, which sets the host name and execs the worker: one pid.
            namespaces = ["--uts", "--net"] if network else ["--uts"]
            command = ["unshare", *namespaces, "sh", "-c", 'hostname "$0" && exec "$@"', host,
                       *command]  # fmt: skip
        log = self.logs / f"{worker_id}.log"
        process_env = {**self.env, **(env or {})}
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                command, cwd=ROOT, env=process_env, stdout=out, stderr=subprocess.STDOUT
            )
        worker = Worker(worker_id, tuple(args), proc, log, host, network, env or {})
        self.workers.append(worker)
        return worker

    def replace(self, worker: Worker) -> Worker:
        """A new worker like ``worker`` (same arguments, host and environment)."""
        prefix = worker.id.rsplit("-", 1)[0]
        return self.start(
            *worker.args, prefix=prefix, host=worker.host, network=worker.network, env=worker.env
        )

    def wait_up(self, *workers: Worker, timeout: float = 60) -> None:
        """Until each worker has written its first heartbeat (its row in the workers table)."""
        ids = {worker.id for worker in workers}

        def up() -> bool:
            dead = [w.id for w in workers if not w.alive]
            assert not dead, f"workers exited: {dead}\n{self.tails()}"
            rows = WorkerProcess.objects.using(self.alias).filter(id__in=ids).count()
            return rows == len(ids)

        wait_until(up, timeout, f"workers {sorted(ids)} to start", self.tails)

    # -- faults --------------------------------------------------------------

    def held_by(self, worker: Worker) -> list[uuid.UUID]:
        return list(
            Job.objects.using(self.alias)
            .filter(status=JobStatus.RUNNING, lease_holder=worker.id)
            .values_list("pk", flat=True)
        )

    def kill(self, *workers: Worker) -> list[uuid.UUID]:
        """SIGKILL ``workers`` at once; the jobs they had in flight (counted in ``in_flight``)."""
        for worker in workers:
            worker.proc.send_signal(signal.SIGKILL)
        held = []
        for worker in workers:
            worker.proc.wait(30)
            held += self.died(worker)
        return held

    def crashed(self) -> list[Worker]:
        """The workers that died by themselves since the last call (a poison job's SIGKILL)."""
        return [w for w in self.workers if not w.accounted and not w.alive]

    def died(self, worker: Worker) -> list[uuid.UUID]:
        """Record what ``worker``, found dead just now, had in flight."""
        worker.accounted = True
        held = self.held_by(worker)
        self.in_flight.update(held)
        self.kills += 1
        return held

    def stop(self, worker: Worker, timeout: float = 90) -> int:
        """SIGTERM (a graceful stop); its exit code."""
        worker.accounted = True
        worker.proc.send_signal(signal.SIGTERM)
        try:
            return worker.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            message = f"{worker.id} did not stop in {timeout} s\n{self.tails()}"
            raise AssertionError(message) from None

    def stop_all(self, timeout: float = 90) -> dict[str, int]:
        """Stop every live worker gracefully; their exit codes (all 0 is a clean stop)."""
        live = self.alive()
        for worker in live:
            worker.accounted = True
            worker.proc.send_signal(signal.SIGTERM)
        codes = {}
        for worker in live:
            try:
                codes[worker.id] = worker.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                codes[worker.id] = -999
        return codes

    def alive(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.alive]

    def close(self) -> None:
        for worker in self.workers:
            if worker.alive:
                worker.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.proc.wait(10)

    # -- reading the logs --------------------------------------------------

    def output(self) -> str:
        return "\n".join(w.log.read_text(errors="replace") for w in self.workers if w.log.exists())

    def tails(self, lines: int = 15) -> str:
        parts = []
        for worker in self.workers:
            text = worker.log.read_text(errors="replace") if worker.log.exists() else ""
            tail = "\n".join(text.splitlines()[-lines:])
            parts.append(f"--- {worker.id} (exit {worker.proc.poll()}) ---\n{tail}")
        return "\n".join(parts)


def wait_until(
    condition: Callable[[], object],
    timeout: float,
    what: str,
    details: Callable[[], str] | None = None,
    interval: float = 0.1,
) -> None:
    """Poll ``condition`` until true; an ``AssertionError`` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{extra}")
        time.sleep(interval)
