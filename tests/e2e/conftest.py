from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "example_project" / "manage.py"


def test_database_url() -> str:
    """A DATABASE_URL for the test database pytest-django created."""
    s = connection.settings_dict
    user = quote(s["USER"] or "", safe="")
    password = f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else ""
    auth = f"{user}{password}@" if user else ""
    host = quote(s["HOST"] or "", safe="")
    port = f":{s['PORT']}" if s["PORT"] else ""
    return f"postgres://{auth}{host}{port}/{quote(s['NAME'], safe='')}"


test_database_url.__test__ = False  # type: ignore[attr-defined]


@pytest.fixture
def manage(transactional_db: None):  # type: ignore[no-untyped-def]
    """Run ``python example_project/manage.py ...`` as a real process on the test database."""
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
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
