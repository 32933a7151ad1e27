"""docs/tutorial.md, run as written in a new project (see tests/e2e/tutorial.py for how)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from psycopg import sql

from tests.ports import free_port

from .helpers import ROOT, wait_for
from .tutorial import Tutorial

pytestmark = pytest.mark.e2e

TUTORIAL = ROOT / "docs" / "tutorial.md"


@pytest.fixture
def tutorial_database(django_db_setup: None) -> Iterator[dict[str, str]]:
    """A database of its own beside the test database (the tutorial's ``createdb``)."""
    s = connection.settings_dict
    server = {
        "host": s["HOST"] or "",
        "port": str(s["PORT"] or 5432),
        "user": s["USER"] or "",
        "password": s["PASSWORD"] or "",
    }
    name = f"{s['NAME']}_tutorial"
    statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(statement)
    yield {**server, "name": name}
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(statement)


def test_the_tutorial_runs_as_written(tmp_path: Path, tutorial_database: dict[str, str]) -> None:
    db = tutorial_database
    server = {k: db[k] for k in ("host", "port", "user", "password")}

    def createdb() -> None:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["name"])))

    def settle() -> None:
        """Wait until no job of the tutorial is pending or running."""

        def idle() -> bool:
            with psycopg.connect(dbname=db["name"], **server) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM durable_jobs_job WHERE status IN ('pending', 'running')"
                ).fetchone()
            return row is not None and row[0] == 0

        wait_for(idle, 60, "no pending or running job")

    # The settings shown use database `tutorial` on 127.0.0.1:5432; here, the test's.
    database_settings = (
        "\n# Added by the tutorial test: its own database on the test server.\n"
        'DATABASES["default"].update('
        f"NAME={db['name']!r}, HOST={db['host']!r}, PORT={db['port']!r}, "
        f"USER={db['user']!r}, PASSWORD={db['password']!r})\n"
    )
    bin_dir = str(Path(sys.executable).parent)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_URL", "PYTHON"))
    }
    env.update(PATH=os.pathsep.join([bin_dir, env.get("PATH", "")]), PYTHONUNBUFFERED="1")
    tutorial = Tutorial(tmp_path, env, free_port(), createdb, database_settings, settle)
    try:
        tutorial.run(TUTORIAL.read_text())
    finally:
        tutorial.close()
