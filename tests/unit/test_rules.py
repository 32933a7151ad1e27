"""Each rule is written once, and every door it guards agrees on it.

Queue names, numbers of seconds, slot ranges and "delay or run_at" are
each checked in one place (``names``, ``durations``, ``worker/slots.py``,
``validation``); these tests feed the same values through every door that
reads them (``enqueue()``, ``@job``, ``runjobworker``, ``WorkerConfig``,
the settings, schedules) and check that all accept or all refuse, each
with its own error type. The REST door is in tests/integration/test_rules.py.
No database: pytest-django would make any query fail.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_durable_jobs import InvalidJob, job
from django_durable_jobs.api.errors import invalid_job_error
from django_durable_jobs.conf import SETTINGS, jobs_settings
from django_durable_jobs.durations import SecondsError, is_seconds, seconds
from django_durable_jobs.exceptions import InvalidSchedule
from django_durable_jobs.management.commands.runjobworker import concurrency, queue_list
from django_durable_jobs.management.commands.runjobworker import seconds as cli_seconds
from django_durable_jobs.schedules import schedule_from_entry
from django_durable_jobs.validation import (
    build_spec,
    validate_delay,
    validate_delay_or_run_at,
    validate_timeout,
)
from django_durable_jobs.worker import WorkerConfig
from django_durable_jobs.worker.slots import Slots, check_queue_slots, parse_queues
from tests.factories import BAD_QUEUES, GOOD_QUEUES

# --- queue names ------------------------------------------------------------------


def _enqueue_door(name: str) -> None:
    build_spec("t", queue=name)


def _job_door(name: str) -> None:
    job("rules.queue_door", queue=name)


def _cli_door(name: str) -> None:
    queue_list(name)
    queue_list(f"{name}:2")


def _worker_config_door(name: str) -> None:
    WorkerConfig(queue_slots={name: 1}, install_signal_handlers=False)


def _worker_queues_door(name: str) -> None:
    WorkerConfig(queues=frozenset({name}), install_signal_handlers=False)


def _setting_door(name: str) -> None:
    with override_settings(DURABLE_JOBS={"DEFAULT_QUEUE": name}):
        assert name == jobs_settings.DEFAULT_QUEUE


def _schedule_door(name: str) -> None:
    schedule_from_entry("rules.every", {"type": "t", "every": 5, "queue": name})


QUEUE_DOORS: dict[str, tuple[Callable[[str], None], type[Exception]]] = {
    "enqueue": (_enqueue_door, InvalidJob),
    "@job": (_job_door, InvalidJob),
    "runjobworker --queues": (_cli_door, argparse.ArgumentTypeError),
    "WorkerConfig(queue_slots)": (_worker_config_door, ValueError),
    "WorkerConfig(queues)": (_worker_queues_door, ValueError),
    "DEFAULT_QUEUE": (_setting_door, ImproperlyConfigured),
    "SCHEDULES queue": (_schedule_door, InvalidSchedule),
}


@pytest.mark.parametrize("door", QUEUE_DOORS)
@pytest.mark.parametrize("name", GOOD_QUEUES)
def test_every_door_accepts_the_same_queue_names(door: str, name: str) -> None:
    call, _error = QUEUE_DOORS[door]
    call(name)


@pytest.mark.parametrize("door", QUEUE_DOORS)
@pytest.mark.parametrize("name", BAD_QUEUES, ids=repr)
def test_every_door_refuses_the_same_queue_names(door: str, name: str) -> None:
    call, error = QUEUE_DOORS[door]
    with pytest.raises(error):
        call(name)


@pytest.mark.parametrize("name", ["", "a,b", "emails:4", 5], ids=repr)
def test_the_python_doors_refuse_what_the_command_line_reads_as_syntax(name: Any) -> None:
    for door in ("enqueue", "@job", "WorkerConfig(queue_slots)", "DEFAULT_QUEUE"):
        call, error = QUEUE_DOORS[door]
        with pytest.raises(error):
            call(name)


def test_each_door_keeps_its_own_message() -> None:
    with pytest.raises(InvalidJob, match=r"^queue: 'a b' is not a valid queue name: use"):
        build_spec("t", queue="a b")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^'a b' is not a valid queue name \("):
        queue_list("a b")
    with pytest.raises(ValueError, match=r"^'a b' is not a valid queue name \("):
        check_queue_slots({"a b": 1})


# --- numbers of seconds -----------------------------------------------------------

# (value, a number of seconds >= 0?, > 0?)
SECONDS_CASES: list[tuple[Any, bool, bool]] = [
    (0, True, False),
    (0.0, True, False),
    (1, True, True),
    (1.5, True, True),
    (-1, False, False),
    (-0.5, False, False),
    (math.inf, False, False),
    (-math.inf, False, False),
    (math.nan, False, False),
]


def _refuses(call: Callable[[], Any], error: type[Exception]) -> bool:
    try:
        call()
    except error:
        return True
    return False


@pytest.mark.parametrize(("value", "non_negative", "positive"), SECONDS_CASES, ids=repr)
def test_every_door_reads_a_number_of_seconds_the_same_way(
    value: Any, non_negative: bool, positive: bool
) -> None:
    text = repr(float(value))
    refused = {
        "validate_delay": _refuses(lambda: validate_delay(value), InvalidJob),
        "validate_timeout": _refuses(lambda: validate_timeout(value), InvalidJob),
        "--grace-period": _refuses(
            lambda: cli_seconds(allow_zero=True)(text), argparse.ArgumentTypeError
        ),
        "--lease-seconds": _refuses(
            lambda: cli_seconds(allow_zero=False)(text), argparse.ArgumentTypeError
        ),
        "GRACE_PERIOD_SECONDS": not SETTINGS["GRACE_PERIOD_SECONDS"].is_valid(value),
        "LEASE_SECONDS": not SETTINGS["LEASE_SECONDS"].is_valid(value),
        "TIMEOUT_SECONDS": not SETTINGS["TIMEOUT_SECONDS"].is_valid(value),
    }
    expected = {
        "validate_delay": not non_negative,
        "validate_timeout": not positive,
        "--grace-period": not non_negative,
        "--lease-seconds": not positive,
        "GRACE_PERIOD_SECONDS": not non_negative,
        "LEASE_SECONDS": not positive,
        "TIMEOUT_SECONDS": not positive,
    }
    assert refused == expected


@pytest.mark.parametrize("value", [True, False, "5", None, [1]], ids=repr)
def test_no_door_takes_a_bool_or_a_string_for_seconds(value: Any) -> None:
    assert _refuses(lambda: validate_delay(value), InvalidJob) or value is None
    assert _refuses(lambda: validate_timeout(value), InvalidJob)
    assert not SETTINGS["LEASE_SECONDS"].is_valid(value)
    assert not SETTINGS["GRACE_PERIOD_SECONDS"].is_valid(value)
    assert not is_seconds(value)


def test_the_bounded_doors_share_the_100_year_bound() -> None:
    century = 100 * 365 * 86400
    for value in (century, timedelta(seconds=century)):
        assert validate_timeout(value) == century
        assert validate_delay(value) == century * 1_000_000
    for value in (century + 1, timedelta(seconds=century + 1)):
        with pytest.raises(InvalidJob, match="at most 3153600000 s"):
            validate_timeout(value)
        with pytest.raises(InvalidJob, match="at most 3153600000 s"):
            validate_delay(value)
    assert SETTINGS["TIMEOUT_SECONDS"].is_valid(century)
    assert not SETTINGS["TIMEOUT_SECONDS"].is_valid(century + 1)
    assert not SETTINGS["API_MAX_TIMEOUT_SECONDS"].is_valid(century + 1)
    with pytest.raises(InvalidSchedule, match="at most 36500 days"):
        schedule_from_entry("rules.every", {"type": "t", "every": century + 1})


def test_settings_take_numbers_not_timedeltas() -> None:
    # The code reads the *_SECONDS settings with float().
    assert not SETTINGS["LEASE_SECONDS"].is_valid(timedelta(seconds=30))
    assert validate_timeout(timedelta(seconds=30)) == 30.0


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("1", SecondsError.TYPE),
        (True, SecondsError.TYPE),
        (math.nan, SecondsError.NOT_FINITE),
        (-1, SecondsError.NEGATIVE),
        (timedelta(seconds=-1), SecondsError.NEGATIVE),
        (1e12, SecondsError.TOO_LONG),
    ],
    ids=repr,
)
def test_a_refusal_says_which_part_of_the_rule_failed(value: Any, reason: str) -> None:
    with pytest.raises(SecondsError) as caught:
        seconds(value)
    assert caught.value.reason == reason
    with pytest.raises(SecondsError) as caught:
        seconds(0, allow_zero=False)
    assert caught.value.reason == SecondsError.ZERO


# --- slot ranges ------------------------------------------------------------------


# (text, the slots it means or None when the rule refuses it)
SLOT_CASES: list[tuple[str, tuple[int, int] | None]] = [
    ("1", (1, 1)),
    ("8", (8, 8)),
    ("1000", (1000, 1000)),
    ("2-16", (2, 16)),
    ("3-3", (3, 3)),
    ("0", None),
    ("1001", None),
    ("16-2", None),
    ("0-4", None),
    ("2-1001", None),
]


@pytest.mark.parametrize(("text", "slots"), SLOT_CASES)
def test_every_door_reads_a_slot_range_the_same_way(
    text: str, slots: tuple[int, int] | None
) -> None:
    minimum, _, maximum = text.partition("-")
    low, high = int(minimum), int(maximum or minimum)
    doors: dict[str, tuple[Callable[[], Any], type[Exception]]] = {
        "--concurrency": (lambda: concurrency(text), argparse.ArgumentTypeError),
        "--queues q:N": (lambda: queue_list(f"q:{text}"), argparse.ArgumentTypeError),
        "Slots": (lambda: Slots(low, high), ValueError),
        "WorkerConfig(concurrency)": (
            lambda: WorkerConfig(concurrency=low, max_concurrency=high),
            ValueError,
        ),
        "WorkerConfig(queue_slots)": (
            lambda: WorkerConfig(queue_slots={"q": (low, high)}),
            ValueError,
        ),
    }
    refused = {name: _refuses(call, error) for name, (call, error) in doors.items()}
    assert refused == dict.fromkeys(doors, slots is None)
    if slots is not None:
        assert concurrency(text) == Slots(*slots) == Slots.parse(text)
        assert parse_queues(f"q:{text}") == {"q": Slots(*slots)}


def test_the_slot_total_is_one_rule_for_both_doors() -> None:
    message = "the queues' slots add up to 1001, over the limit of 1000"
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        queue_list("a:999,b:2")
    with pytest.raises(ValueError, match=message):
        WorkerConfig(queue_slots={"a": 999, "b": 2})


# --- delay or run_at --------------------------------------------------------------


def test_delay_and_run_at_together_is_one_rule_with_a_code() -> None:
    when = datetime(2030, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(InvalidJob) as caught:
        build_spec("t", delay=5, run_at=when)
    assert (caught.value.field, caught.value.code) == ("run_at", InvalidJob.DELAY_AND_RUN_AT)
    assert caught.value.message == "give either delay or run_at, not both."
    validate_delay_or_run_at(5, None)
    validate_delay_or_run_at(None, when)
    assert build_spec("t").delay_us is None


def test_the_rest_api_places_errors_by_code_never_by_their_text() -> None:
    coded = InvalidJob("run_at", "any wording", code=InvalidJob.DELAY_AND_RUN_AT)
    assert invalid_job_error(coded).detail == {
        "delay_seconds": ["give either delay_seconds or run_at, not both."]
    }
    # The same words without the code are an ordinary error of their field.
    plain = InvalidJob("run_at", "give either delay or run_at, not both.")
    assert plain.code == InvalidJob.INVALID
    assert invalid_job_error(plain).detail == {"run_at": ["give either delay or run_at, not both."]}
    assert invalid_job_error(InvalidJob("delay", "must be finite.")).detail == {
        "delay_seconds": ["must be finite."]
    }
