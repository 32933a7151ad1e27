"""A user's project runs its own tests with the testing helpers: ``tests/userproject/``.

A small shop (a model, a view that enqueues in a transaction, a handler)
whose tests are the examples of ``docs/guides/testing.md``: a ``TestCase``,
pytest with the ``durable_jobs`` fixture that the package's ``pytest11``
entry point registers, and the immediate mode in both. They run here as
the shop's developers run them: ``pytest`` in its directory, a process of
its own, its settings its own, on a database of its own (pytest-django
makes ``test_<name>`` beside this run's test database, and drops it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

pytestmark = pytest.mark.e2e

USERPROJECT = Path(__file__).resolve().parents[1] / "userproject"
#: Tests the shop has (tests.py, test_signup.py, test_immediate.py, test_tasks.py): fewer
#: passed is a test that stopped being collected.
AT_LEAST = 6


def shop_environment() -> dict[str, str]:
    """This process's environment, less what would make the shop's run ours.

    Our settings module (pytest-django's environment variable beats the
    shop's pytest.ini), our pytest options and xdist worker's name; the
    database server is ours, found through libpq's variables, as the
    shop's settings say.
    """
    s = connection.settings_dict
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "PYTEST_ADDOPTS"}
        and not key.startswith("PYTEST_XDIST")
    }
    env.update(
        PGHOST=s["HOST"] or "",
        PGPORT=str(s["PORT"] or 5432),
        PGUSER=s["USER"] or "",
        PGPASSWORD=s["PASSWORD"] or "",
        SHOP_DATABASE=f"{s['NAME']}_shop",
    )
    return {key: value for key, value in env.items() if value != ""}


def run_shop_tests(*args: str) -> int:
    """``pytest -q *args`` in the shop; the number of tests passed, failing unless all did."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args],
        cwd=USERPROJECT,
        env=shop_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    summary = result.stdout.strip().splitlines()[-1]
    passed = re.fullmatch(r"(\d+) passed in [\d.]+s", summary)
    assert passed, f"not only passes: {summary!r}\n{output}"
    return int(passed.group(1))


def test_the_shops_own_tests_pass(django_db_setup: None) -> None:
    assert run_shop_tests() >= AT_LEAST


def test_a_module_whose_only_database_fixture_is_durable_jobs_gets_its_database(
    django_db_setup: None,
) -> None:
    # Alone, no TestCase and no `db` of its own: the plugin marks its tests for
    # pytest-django, which creates only the databases that tests ask for.
    assert run_shop_tests("signups/test_signup.py") == 2
