from __future__ import annotations

import argparse
import re

import pytest
from django.core.management import CommandError, call_command

from django_durable_jobs.management.commands.runjobworker import concurrency, queue_list, seconds
from django_durable_jobs.worker.pool import Slots


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
        ("emails:0", "between 1 and 1000"),
        ("emails:x", "not a number of slots"),
        (":4", "no queue name"),
        ("emails:4,emails:2", "listed twice"),
        ("emails,emails", "listed twice"),
        ("emails:4,default", "not to default"),
        ("emails:8-2", "more than the maximum"),
        ("emails:", "not a number of slots"),
        ("a:600,b:600", "add up to 1200"),
        ("bad queue", "not a valid queue name"),
        ("x" * 101, "not a valid queue name"),
    ],
)
def test_bad_queue_lists(value: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        queue_list(value)


def test_slots_per_queue() -> None:
    assert queue_list("emails:4,default:8") == {"emails": Slots(4, 4), "default": Slots(8, 8)}
    assert queue_list(" emails : 1-4 ") == {"emails": Slots(1, 4)}


@pytest.mark.parametrize(
    ("value", "ok"),
    [("1", True), ("1000", True), ("0", False), ("1001", False), ("-2", False), ("four", False)],
)
def test_concurrency(value: str, ok: bool) -> None:
    if ok:
        assert concurrency(value) == Slots(int(value), int(value))
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            concurrency(value)


def test_elastic_concurrency() -> None:
    assert concurrency("2-16") == Slots(2, 16)
    assert concurrency("3-3") == Slots(3, 3)
    assert not concurrency("3-3").elastic and concurrency("2-16").elastic


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("16-2", "minimum 16 is more than the maximum 2"),
        ("0-4", "between 1 and 1000"),
        ("2-", "not a number of slots"),
        ("-4", "not a number of slots"),
        ("2-1001", "between 1 and 1000"),
        ("2-x", "not a number of slots"),
    ],
)
def test_bad_elastic_concurrency(value: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        concurrency(value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queues", "emails:0"], "between 1 and 1000"),
        (["--queues", "emails:x"], "not a number of slots"),
        (["--queues", ":4"], "no queue name"),
        (["--queues", "emails:4,emails:2"], "listed twice"),
        (["--concurrency", "16-2"], "more than the maximum"),
        (["--concurrency", "0-4"], "between 1 and 1000"),
        (["--concurrency", "2-"], "not a number of slots"),
        (["--scale-down-after", "0"], "seconds > 0"),
    ],
)
def test_the_command_line_rejects_bad_slots_with_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from django_durable_jobs.management.commands.runjobworker import Command

    command = Command()
    command._called_from_command_line = True  # as manage.py does: argparse exits 2
    parser = command.create_parser("manage.py", "runjobworker")
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(args)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queues": "emails:0"}, "--queues: 'emails:0': must be between 1 and 1000"),
        ({"queues": "emails:x"}, "not a number of slots"),
        ({"queues": ":4"}, "no queue name"),
        ({"queues": "emails:4,emails:2"}, "listed twice"),
        ({"queues": "emails:4,default"}, "not to default"),
        ({"concurrency": "16-2"}, "--concurrency: 16-2: the minimum 16"),
        ({"concurrency": "0-4"}, "--concurrency: must be between"),
        ({"concurrency": "2-"}, "not a number of slots"),
        ({"queues": "emails:4", "concurrency": "8"}, "cannot be combined"),
        ({"scale_down_after": -1}, "--scale-down-after"),
    ],
)
def test_call_command_rejects_bad_slots_with_command_errors(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("runjobworker", **options)


def test_seconds() -> None:
    assert seconds(allow_zero=True)("0") == 0.0
    assert seconds(allow_zero=False)("0.5") == 0.5
    for bad in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            seconds(allow_zero=False)(bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency: must be between 1"),
        (["--grace-period", "-1"], "--grace-period: must be a number of seconds >= 0"),
        (["--poll-interval", "0"], "--poll-interval: must be a number of seconds > 0"),
        (["--lease-seconds", "-5"], "--lease-seconds"),
        (["--lease-seconds", "soon"], "--lease-seconds: 'soon' is not a number"),
        (["--queues", "emails:4,default"], "gives slots to some queues but not to default"),
        (["--concurrency", "16-2"], "the minimum 16 is more than the maximum 2"),
        (["--queues", "a,,b"], "not a comma-separated list"),
        (["--reload", "--burst"], "--reload cannot be combined with --burst"),
        (["--reload", "--metrics-port", "9100"], "--reload cannot be combined with --metrics"),
        (["--processes", "0"], "--processes: must be from 1 to 256, got 0"),
        (["--processes", "257"], "--processes: must be from 1 to 256, got 257"),
        (["--processes", "two"], "--processes: 'two' is not a number of processes"),
        (["--processes", "2", "--reload"], "--processes cannot be combined with --reload"),
        (
            ["--processes", "3", "--metrics-port", "65534"],
            "the processes serve on ports 65534 to 65536, past 65535",
        ),
    ],
)
def test_call_command_reports_bad_flags_as_command_errors(args: list[str], message: str) -> None:
    # The messages a real process prints (tests/e2e/test_worker_processes.py runs two).
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("runjobworker", *args)


def test_call_command_takes_slots_as_python_values_too() -> None:
    from django_durable_jobs.management.commands.runjobworker import _as_text

    assert _as_text({"emails": 4, "webhooks": (1, 8)}) == "emails:4,webhooks:1-8"
    assert _as_text({"emails": Slots(2, 3)}) == "emails:2-3"
    assert _as_text((2, 16)) == "2-16"
    assert _as_text(frozenset({"emails"})) == "emails"
    with pytest.raises(CommandError, match="--concurrency: 16-2: the minimum 16"):
        call_command("runjobworker", concurrency=(16, 2))
    with pytest.raises(CommandError, match="--queues: 'emails:0'"):
        call_command("runjobworker", queues={"emails": 0})
