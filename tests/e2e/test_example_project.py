"""The example project, run as users run it: `python example_project/manage.py ...`."""

from __future__ import annotations

import pytest

from django_durable_jobs.models import Job

pytestmark = pytest.mark.e2e


def test_check_passes(manage) -> None:  # type: ignore[no-untyped-def]
    result = manage("check", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_no_missing_migrations(manage) -> None:  # type: ignore[no-untyped-def]
    result = manage("makemigrations", "--check", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr


def test_migrate_is_up_to_date(manage) -> None:  # type: ignore[no-untyped-def]
    result = manage("migrate", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_seed_demo_enqueues_once(manage) -> None:  # type: ignore[no-untyped-def]
    first = manage("seed_demo")
    assert first.returncode == 0, first.stderr
    assert "7 new job(s)" in first.stdout
    assert Job.objects.count() == 7
    assert set(Job.objects.values_list("type", flat=True)) == {
        "example.noop",
        "example.echo",
        "example.sleep",
        "example.flaky",
        "example.fail",
    }
    again = manage("seed_demo")
    assert again.returncode == 0, again.stderr
    assert "0 new job(s)" in again.stdout
    assert Job.objects.count() == 7


def test_a_non_postgresql_database_fails_the_check(manage, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    from .conftest import MANAGE, ROOT

    settings = tmp_path / "sqlite_settings.py"
    settings.write_text(
        "from example_project.settings import *\n"
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}}\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "sqlite_settings",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT / 'example_project'}",
        "DATABASE_URL": "postgres://unused@127.0.0.1:1/unused",
    }
    result = subprocess.run(
        [sys.executable, str(MANAGE), "check"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "durable_jobs.E001" in result.stderr
    assert "sqlite" in result.stderr


def test_direct_database_url_is_the_listen_database(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """DIRECT_DATABASE_URL (a pooler in DATABASE_URL): the alias `direct`, LISTEN_DATABASE on it."""
    import os
    import subprocess
    import sys

    from .conftest import MANAGE

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": "postgres://app@pooler.example:6543/jobs",
        "DIRECT_DATABASE_URL": "postgres://app@db.example:5432/jobs",
    }
    code = (
        "from django.conf import settings\n"
        "from django_durable_jobs import db\n"
        "print(db.listen_alias('default'), settings.DATABASES['direct']['HOST'],\n"
        "      settings.DATABASES['default']['DISABLE_SERVER_SIDE_CURSORS'])\n"
    )
    result = subprocess.run(
        [sys.executable, str(MANAGE), "shell", "-c", code], env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-3:] == ["direct", "db.example", "True"]
    check = subprocess.run(
        [sys.executable, str(MANAGE), "check", "--fail-level", "WARNING"], env=env,
        capture_output=True, text=True,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
