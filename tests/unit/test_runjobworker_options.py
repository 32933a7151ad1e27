from __future__ import annotations

import argparse

import pytest
from django.core.management import CommandError, call_command

from django_durable_jobs.management.commands.runjobworker import concurrency, queue_list, seconds


def test_queue_lists() -> None:
    assert queue_list("emails") == frozenset({"emails"})
    assert queue_list("emails, default,reports.v2") == frozenset(
        {"emails", "default", "reports.v2"}
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "comma-separated"),
        ("a,,b", "comma-separated"),
        ("emails:4", "per-queue slots"),
        ("bad queue", "not a valid queue name"),
        ("x" * 101, "not a valid queue name"),
    ],
)
def test_bad_queue_lists(value: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        queue_list(value)


@pytest.mark.parametrize(
    ("value", "ok"),
    [("1", True), ("1000", True), ("0", False), ("1001", False), ("-2", False), ("four", False)],
)
def test_concurrency(value: str, ok: bool) -> None:
    if ok:
        assert concurrency(value) == int(value)
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            concurrency(value)


def test_seconds() -> None:
    assert seconds(allow_zero=True)("0") == 0.0
    assert seconds(allow_zero=False)("0.5") == 0.5
    for bad in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            seconds(allow_zero=False)(bad)


def test_call_command_reports_bad_flags_as_command_errors() -> None:
    with pytest.raises(CommandError, match="--concurrency"):
        call_command("runjobworker", "--concurrency", "0")
    with pytest.raises(CommandError, match="--lease-seconds"):
        call_command("runjobworker", "--lease-seconds", "-5")
