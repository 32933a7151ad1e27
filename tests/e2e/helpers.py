"""Shared tools of the e2e tier: worker processes on the test database, and their HTTP side.

The ``workers`` fixture (``tests/e2e/conftest.py``) hands out a ``Workers``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from django.db import connections
from prometheus_client.parser import text_string_to_metric_families

from django_durable_jobs.models import Job
from tests.factories import wait_until

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "example_project" / "manage.py"


#: ``E2E=long``: the long e2e tests at the sizes their issues asked for; else CI's
#: smaller ones (the same code paths and assertions), as the chaos suite's short mode.
LONG = os.environ.get("E2E") == "long"


def size(short: int, long: int) -> int:
    """A test's size: ``long`` with ``E2E=long``, else ``short`` (see ``LONG``)."""
    return long if LONG else short


def test_database_url(
    alias: str = "default",  # noqa: PT028 (not a test: __test__ is False below)
    *,
    host: str | None = None,  # noqa: PT028
    port: int | None = None,  # noqa: PT028
) -> str:
    """A DATABASE_URL for the test database pytest-django created (for ``alias``).

    ``host`` and ``port``: through something else than the server (a proxy).
    """
    s = connections[alias].settings_dict
    user = quote(s["USER"] or "", safe="")
    password = f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else ""
    auth = f"{user}{password}@" if user else ""
    host = quote(host if host is not None else s["HOST"] or "", safe="")
    port_part = f":{port}" if port is not None else f":{s['PORT']}" if s["PORT"] else ""
    return f"postgres://{auth}{host}{port_part}/{quote(s['NAME'], safe='')}"


test_database_url.__test__ = False  # type: ignore[attr-defined]


def queue_database_env() -> dict[str, str]:
    """``QUEUE_DATABASE_URL`` for a process's environment, with the queue on its own database.

    The example project (and so ``tests.e2e_settings``) then puts the queue
    on its ``queue`` alias (tests/queue_database.py); without the mode,
    nothing, and a ``QUEUE_DATABASE_URL`` of the caller's is not passed on.
    """
    from tests import queue_database

    if not queue_database.enabled():
        return {"QUEUE_DATABASE_URL": ""}
    return {"QUEUE_DATABASE_URL": test_database_url(queue_database.ALIAS)}


def database_urls_through(host: str, port: int) -> dict[str, str]:
    """``DATABASE_URL``, and ``QUEUE_DATABASE_URL`` in the queue-database mode, through a proxy.

    The test databases, reached at ``host:port``: a test that takes "the
    database" away from a worker (``proxy.cut()``) takes the queue's too.
    """
    from tests import queue_database

    urls = {"DATABASE_URL": test_database_url(host=host, port=port)}
    if queue_database.enabled():
        urls["QUEUE_DATABASE_URL"] = test_database_url(queue_database.ALIAS, host=host, port=port)
    return urls


def queue_database_url_variable() -> str:
    """The environment variable of the worker processes' queue database (the mode's or not)."""
    from tests import queue_database

    return "QUEUE_DATABASE_URL" if queue_database.enabled() else "DATABASE_URL"


class Workers:
    """Starts worker processes on the test database; kills leftovers at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            "DATABASE_URL": test_database_url(),
            "DJANGO_SETTINGS_MODULE": "tests.e2e_settings",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "example_project")]),
            **queue_database_env(),
        }

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        with open(self.logs / f"worker-{len(self.procs)}.log", "wb") as log:
            # The child has its own copy of the descriptor.
            proc = subprocess.Popen(
                [sys.executable, str(MANAGE), "runjobworker", *args],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def output(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.logs.glob("worker-*.log")))

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def status(job: Job) -> str:
    """The job's status in the database now."""
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    wait_until(condition, timeout, what, interval=0.05)


def get(port: int, path: str) -> tuple[int, str]:
    """GET a worker's metrics server: (status, body), or (0, "") when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def sample(port: int, name: str, **labels: str) -> float:
    """One sample of a worker's /metrics (0.0 when absent)."""
    status, text = get(port, "/metrics")
    assert status == 200
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return 0.0
