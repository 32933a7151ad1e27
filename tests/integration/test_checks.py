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
