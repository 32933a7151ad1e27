"""Fixtures of the chaos suite: a throwaway cluster, a database per scenario, worker fleets.

Selection: the scenarios are marked ``chaos`` and run only when asked for,
by path (``./dev test tests/chaos``) or by marker (``-m chaos``); a plain
``./dev test`` deselects them. ``CHAOS=long`` runs the long mode (the issue's
sizes: 20,000 jobs, 30 s storms); the default is the short mode CI runs.

Every scenario runs on one PostgreSQL cluster that the session starts for
itself (``cluster.py``), never on ``DATABASE_URL``'s server: the scenarios
restart it, terminate its backends and fill its connection slots. Each
scenario gets a database of its own, cloned from a migrated template, and a
Django alias for it in this process (``database.alias``): the test's ORM
calls name it with ``using=``. pytest-django's test database is not used.

Each scenario prints one summary line; the terminal summary repeats them
all at the end of the run (``tally.py``).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .cluster import APP_ROLE, Cluster
from .fleet import MANAGE, ROOT, Fleet
from .scenario import TEMPLATE, Database, Mode, chaos_mode, process_env
from .tally import SUMMARIES
from .web import Server

HERE = Path(__file__).resolve().parent
#: pytest-timeout per scenario, by mode (the long mode's biggest runs take minutes).
TIMEOUTS = {"short": 300, "long": 1800}


def _selected(config: pytest.Config) -> bool:
    """Whether this run asked for the chaos suite: a path inside it, or a marker naming it."""
    if "chaos" in (config.option.markexpr or ""):
        return True
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chaos = [item for item in items if item.get_closest_marker("chaos")]
    if not chaos:
        return
    if not _selected(config):
        config.hook.pytest_deselected(items=chaos)
        items[:] = [item for item in items if not item.get_closest_marker("chaos")]
        return
    timeout = TIMEOUTS[chaos_mode().name]
    for item in chaos:
        item.add_marker(pytest.mark.timeout(timeout))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SUMMARIES:
        terminalreporter.section(f"chaos summary ({chaos_mode().name} mode)")
        for line in SUMMARIES:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def mode() -> Mode:
    return chaos_mode()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The session's throwaway cluster, with a migrated template database."""
    server = Cluster()
    try:
        server.create()
        with server.admin() as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE} OWNER {APP_ROLE}")
        migrate = subprocess.run(
            [sys.executable, str(MANAGE), "migrate", "--run-syncdb", "-v", "0"],
            cwd=ROOT,
            env=process_env(server.url(TEMPLATE)),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert migrate.returncode == 0, migrate.stdout + migrate.stderr
        yield server
    finally:
        server.destroy()


@pytest.fixture
def database(cluster: Cluster, django_db_blocker: Any) -> Iterator[Database]:
    db = Database(cluster, f"chaos_{uuid.uuid4().hex[:8]}")
    with django_db_blocker.unblock():
        db.create()
        try:
            yield db
        finally:
            db.drop()


@pytest.fixture
def fleet(database: Database, tmp_path: Path) -> Iterator[Fleet]:
    workers = Fleet(database.alias, process_env(database.url), tmp_path)
    try:
        yield workers
    finally:
        workers.close()


@pytest.fixture
def server(database: Database, tmp_path: Path) -> Iterator[Server]:
    """The example project's REST API (``runserver``) on the scenario's database."""
    web = Server(database, tmp_path / "runserver.log")
    try:
        web.wait_up()
        yield web
    finally:
        web.stop()
