from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from django.db import connections

from django_durable_jobs import db

from .helpers import MANAGE, ROOT, Workers, queue_database_env, test_database_url
from .pgbouncer import PACKAGE, PgBouncer, find_binary


@pytest.fixture
def worker_env() -> dict[str, str]:
    """What a module's worker processes get on top of ``Workers``' environment.

    Nothing here; a module whose workers need other settings overrides this
    fixture (``DJANGO_SETTINGS_MODULE``, ``E2E_LOG_LEVEL``, ...).
    """
    return {}


@pytest.fixture
def workers(tmp_path: Path, worker_env: dict[str, str]) -> Iterator[Workers]:
    """Worker processes on the test database, their logs in ``tmp_path``; killed at the end."""
    running = Workers(tmp_path)
    running.env.update(worker_env)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def manage(transactional_db: None):  # type: ignore[no-untyped-def]
    """Run ``python example_project/manage.py ...`` as a real process on the test database."""
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        **queue_database_env(),
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "PYTHONWARNINGS": "error",
    }

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(MANAGE), *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


#: "1": a PgBouncer that is missing or cannot start fails its tests instead of
#: skipping them (CI, once .ci/run has installed the package).
REQUIRE_PGBOUNCER_ENV = "DURABLE_JOBS_REQUIRE_PGBOUNCER"


def _pgbouncer_unavailable(reason: str) -> NoReturn:
    message = f"PgBouncer tests skipped: {reason}"
    if os.environ.get(REQUIRE_PGBOUNCER_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_PGBOUNCER_ENV}=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup: None) -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode in front of the test database, for the session.

    After ``django_db_setup``, so it stops (closing its server connections)
    before pytest-django drops the test database.
    """
    binary = find_binary()
    if binary is None:
        _pgbouncer_unavailable(
            f"pgbouncer not found: install the Debian package '{PACKAGE}' "
            f"(apt-get install {PACKAGE})"
        )
    # The queue's database: the one whose single pool a test uses.
    s = connections[db.database_alias()].settings_dict
    bouncer = PgBouncer(
        binary,
        host=s["HOST"],
        port=int(s["PORT"] or 5432),
        user=s["USER"],
        password=s["PASSWORD"],
        single=s["NAME"],
    )
    try:
        bouncer.start()
    except (RuntimeError, OSError) as exc:
        _pgbouncer_unavailable(f"pgbouncer could not start: {exc}")
    try:
        yield bouncer
    finally:
        bouncer.stop()
