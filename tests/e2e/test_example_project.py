"""The example project, run as users run it: `python example_project/manage.py ...`."""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from django_durable_jobs.models import Job

from .helpers import MANAGE, ROOT

pytestmark = pytest.mark.e2e

#: What decides the example project's security settings; each test sets its own.
SECURITY_ENV = ("DJANGO_DEBUG", "DJANGO_SECRET_KEY", "DJANGO_HTTPS", "DJANGO_ALLOWED_HOSTS")


def example_env(**values: str) -> dict[str, str]:
    """This process's environment without the security variables, then ``values``."""
    env = {k: v for k, v in os.environ.items() if k not in SECURITY_ENV}
    return {**env, "DJANGO_SETTINGS_MODULE": "example_project.settings", **values}


def run_manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(MANAGE), *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


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

    from .helpers import MANAGE, ROOT

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

    from .helpers import MANAGE

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


def test_check_deploy_is_clean_in_production_mode() -> None:
    """DEBUG off (the default), a key from the environment, HTTPS: nothing to warn of."""
    env = example_env(DJANGO_SECRET_KEY=secrets.token_urlsafe(50), DJANGO_HTTPS="1")
    result = run_manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stderr


#: A login attempt while the database is down: the review's way to a debug page.
LOGIN_DURING_AN_OUTAGE = """
import json
from django.conf import settings
from django.test import Client
response = Client(raise_request_exception=False, HTTP_HOST="localhost").post(
    "/admin/login/", {"username": "admin", "password": "guess"}
)
text = response.content.decode()
print(json.dumps({
    "debug": settings.DEBUG,
    "status": response.status_code,
    "debug_page": "DEBUG = True" in text or "Traceback" in text,
}))
"""


@pytest.mark.parametrize(("debug", "debug_page"), [(None, False), ("1", True)])
def test_an_error_shows_no_debug_page_unless_debug_is_asked_for(
    debug: str | None, debug_page: bool
) -> None:
    env = example_env(DATABASE_URL="postgres://app:hunter2-db-password@127.0.0.1:1/app")
    if debug is not None:
        env["DJANGO_DEBUG"] = debug
    result = run_manage(env, "shell", "-c", LOGIN_DURING_AN_OUTAGE)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"debug": debug_page, "status": 500, "debug_page": debug_page}


def test_without_djangos_secret_key_the_key_is_generated_once_and_kept_private() -> None:
    code = "from django.conf import settings; print(settings.SECRET_KEY)"

    def key(env: dict[str, str]) -> str:
        return run_manage(env, "shell", "-c", code).stdout.splitlines()[-1]

    keys = {key(example_env()) for _ in range(2)}
    stored = Path(ROOT, "example_project", ".secret_key")
    assert keys == {stored.read_text().strip()}
    assert len(next(iter(keys))) >= 50
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    ignored = subprocess.run(["git", "check-ignore", "-q", str(stored)], cwd=ROOT)
    assert ignored.returncode == 0, "the generated key must not be committed"
    assert key(example_env(DJANGO_SECRET_KEY="k" * 60)) == "k" * 60
