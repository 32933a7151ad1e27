from __future__ import annotations

from typing import Any

import pytest
from django.core import checks
from django.test import override_settings

from django_durable_jobs.checks import check_database, check_settings


def error_ids(messages: list[checks.CheckMessage]) -> list[str]:
    return [m.id for m in messages if m.id is not None]


class ToSqlite:
    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "sqlite" if model._meta.app_label == "durable_jobs" else None

    db_for_write = db_for_read


def test_postgresql_passes() -> None:
    assert check_database() == []


def test_e001_when_the_job_table_is_not_on_postgresql() -> None:
    with override_settings(DATABASE_ROUTERS=[f"{__name__}.ToSqlite"]):
        messages = check_database()
    assert error_ids(messages) == ["durable_jobs.E001"]
    assert "'sqlite'" in messages[0].msg and "sqlite" in messages[0].msg
    assert messages[0].level == checks.ERROR


# databases=[]: what run_checks() did by default before Django 6.1, which opens
# every database alias (the tests' in-memory sqlite one too) for model checks.
def test_e001_is_reported_by_manage_py_check() -> None:
    with override_settings(DATABASE_ROUTERS=[f"{__name__}.ToSqlite"]):
        assert "durable_jobs.E001" in error_ids(checks.run_checks(databases=[]))


def test_valid_settings_pass() -> None:
    with override_settings(DURABLE_JOBS={"LEASE_SECONDS": 10, "BACKOFF_JITTER": 0.2}):
        assert check_settings() == []


@pytest.mark.parametrize(
    ("value", "ids"),
    [
        ({"LEASE_SECOND": 10}, ["durable_jobs.E002"]),
        ({"LEASE_SECONDS": "10"}, ["durable_jobs.E003"]),
        ({"LEASE_SECONDS": -1}, ["durable_jobs.E003"]),
        ({"DEFAULT_MAX_ATTEMPTS": 0}, ["durable_jobs.E003"]),
        ({"DEFAULT_MAX_ATTEMPTS": True}, ["durable_jobs.E003"]),
        ({"BACKOFF_JITTER": 1.5}, ["durable_jobs.E003"]),
        ({"NOTIFY_CHANNEL": ""}, ["durable_jobs.E003"]),
        ({"NOTIFY_CHANNEL": "c" * 64}, ["durable_jobs.E003"]),
        # With "_finished" appended (the finished jobs' channel), over 63 bytes.
        ({"NOTIFY_CHANNEL": "c" * 55}, ["durable_jobs.E003"]),
        ({"DEFAULT_QUEUE": "bad queue"}, ["durable_jobs.E003"]),
        ({"DEFAULT_PRIORITY": 10**6}, ["durable_jobs.E003"]),
        ({"DEFAULT_MAX_ATTEMPTS": 10**7}, ["durable_jobs.E003"]),
        ({"NOPE": 1, "POLL_INTERVAL_SECONDS": 0}, ["durable_jobs.E002", "durable_jobs.E003"]),
        (["LEASE_SECONDS"], ["durable_jobs.E004"]),
    ],
)
def test_bad_settings_are_errors(value: object, ids: list[str]) -> None:
    with override_settings(DURABLE_JOBS=value):
        messages = check_settings()
    assert error_ids(messages) == ids
    assert all(m.level == checks.ERROR for m in messages)


# -- durable_jobs.E010 / W011: what REST callers may enqueue (rest_policy.py) -----------


def rest_policy_ids(setting: dict[str, Any]) -> list[str]:
    from django_durable_jobs.checks import check_rest_enqueue_policy

    with override_settings(DURABLE_JOBS=setting):
        return error_ids(check_rest_enqueue_policy())


@pytest.mark.parametrize(
    "types",
    [
        ["durable_jobs.bulk_cancel"],
        ["durable_jobs.*"],
        ["durable_jobs.bulk_cancel.*"],
        ["example.echo", "durable_jobs.bulk_requeue"],
    ],
)
def test_e010_when_api_enqueue_types_names_the_package_s_own_types(types: list[str]) -> None:
    from django_durable_jobs.checks import check_rest_enqueue_policy

    with override_settings(DURABLE_JOBS={"API_ENQUEUE_TYPES": types}):
        messages = check_rest_enqueue_policy()
    assert error_ids(messages) == ["durable_jobs.E010"]
    assert messages[0].level == checks.ERROR
    assert "own job types" in messages[0].msg and "never" in messages[0].msg
    assert messages[0].hint and "API_ENQUEUE_TYPES" in messages[0].hint


@pytest.mark.parametrize(
    "setting",
    [
        {"API_ENQUEUE_TYPES": [" spaced "]},
        {"API_ENQUEUE_TYPES": [""]},
        {"API_ENQUEUE_QUEUES": ["bad queue"]},
        {"API_ENQUEUE_QUEUES": ["a,b"]},
    ],
)
def test_e010_for_a_name_no_job_or_queue_can_have(setting: dict[str, Any]) -> None:
    assert rest_policy_ids(setting) == ["durable_jobs.E010"]


def test_w011_for_a_listed_type_without_a_handler() -> None:
    from django_durable_jobs.checks import check_rest_enqueue_policy

    with override_settings(DURABLE_JOBS={"API_ENQUEUE_TYPES": ["example.echo", "nobody.runs"]}):
        messages = check_rest_enqueue_policy()
    assert error_ids(messages) == ["durable_jobs.W011"]
    assert messages[0].level == checks.WARNING and "'nobody.runs'" in messages[0].msg
    # Unregistered types allowed: no warning; a pattern is never warned about.
    setting = {"API_ENQUEUE_TYPES": ["nobody.runs"], "API_ALLOW_UNREGISTERED_TYPES": True}
    assert rest_policy_ids(setting) == []
    assert rest_policy_ids({"API_ENQUEUE_TYPES": ["nobody.*"]}) == []


@pytest.mark.parametrize(
    "setting",
    [
        {},
        {"API_ENQUEUE_TYPES": None, "API_ENQUEUE_QUEUES": None},
        {"API_ENQUEUE_TYPES": ["example.echo", "example.*"], "API_ENQUEUE_QUEUES": ["emails"]},
    ],
)
def test_the_default_and_a_sound_policy_pass(setting: dict[str, Any]) -> None:
    assert rest_policy_ids(setting) == []


def test_e010_is_reported_by_manage_py_check() -> None:
    with override_settings(DURABLE_JOBS={"API_ENQUEUE_TYPES": ["durable_jobs.bulk_cancel"]}):
        assert "durable_jobs.E010" in error_ids(checks.run_checks(databases=[]))


DURABLE_TASKS = {"default": {"BACKEND": "django_durable_jobs.tasks.backend.DurableJobsBackend"}}


def test_e108_when_tasks_names_the_backend_but_there_is_no_tasks_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As on Django 5.2 without the django-tasks backport (tasks/compat.py's decision).
    from django_durable_jobs.tasks import compat
    from django_durable_jobs.tasks.checks import check_tasks_api

    # Another backend is not this check's business (one of the API in use,
    # which Django's Tasks check also instantiates).
    other = {"BACKEND": f"{compat.TASKS_MODULE}.backends.immediate.ImmediateBackend"}
    monkeypatch.setattr(compat, "TASKS_AVAILABLE", False)
    with override_settings(TASKS={**DURABLE_TASKS, "other": other}):
        messages = check_tasks_api()
        assert error_ids(messages) == ["durable_jobs.E108"]
        assert messages[0].msg.startswith("TASKS['default'] uses DurableJobsBackend, but ")
        assert "pip install 'django-durable-jobs[tasks]'" in str(messages[0].hint)
        # Registered with the app's checks, so `manage.py check` reports it.
        assert "durable_jobs.E108" in error_ids(checks.run_checks(databases=[]))
    monkeypatch.setattr(compat, "TASKS_AVAILABLE", True)
    with override_settings(TASKS=DURABLE_TASKS):
        assert check_tasks_api() == []
