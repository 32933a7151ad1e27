"""Property-based tests of the parsers: durations, seconds, rate limits, queues, schedules.

Each parser either returns a value or raises its own error (a ``ValueError``
subclass, or ``ValueError`` itself where that is the documented error) with
a message; never another exception. What it returns reads back the same
through the formatter that goes with it. No database.
"""

from __future__ import annotations

import string
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_durable_jobs.durations import (
    MAX_DURATION,
    MAX_SECONDS,
    SecondsError,
    format_duration,
    parse_duration,
    parse_seconds,
    seconds,
)
from django_durable_jobs.exceptions import InvalidSchedule
from django_durable_jobs.flow import (
    RATE_LIMIT_MAX,
    FlowError,
    RateLimit,
    parse_queues,
    parse_rate_limit,
)
from django_durable_jobs.schedules import (
    parse_cron,
    parse_every,
    parse_timezone,
    schedule_for_job,
    schedule_from_entry,
)

from .strategies import anything

#: Text near what each parser reads: its own characters, mixed with anything.
duration_like = st.text(string.digits + "smhdwSMHDW \u0663\n\t-+.") | st.text()
rate_like = st.text(string.digits + "/smhSMH \t\n\u0661+-.") | st.text()
cron_like = st.text(
    string.digits + "*/,-LW#? @abcdefghijklmnopqrstuvwxyzJANFEBMON\t\n", max_size=40
)


def message_of(exc: BaseException) -> str:
    text = str(exc).strip()
    assert text, f"{type(exc).__name__} without a message"
    return text


# --- durations ----------------------------------------------------------------------


@given(text=duration_like | anything)
def test_parse_duration_returns_a_duration_or_a_value_error(text: Any) -> None:
    try:
        value = parse_duration(text)
    except ValueError as exc:
        message_of(exc)
    else:
        assert isinstance(value, timedelta)
        assert timedelta(0) <= value <= MAX_DURATION


@given(count=st.integers(0, MAX_DURATION.days), unit=st.sampled_from("smhdw"))
def test_durations_round_trip_through_format_duration(count: int, unit: str) -> None:
    size = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}[unit]
    if count * size > MAX_SECONDS:
        with pytest.raises(ValueError, match="longer than"):
            parse_duration(f"{count}{unit}")
        return
    value = parse_duration(f"{count}{unit}")
    assert value == timedelta(seconds=count * size)
    assert parse_duration(format_duration(value)) == value


@given(
    value=anything | st.floats() | st.integers(-(10**400), 10**400) | st.timedeltas(),
    allow_zero=st.booleans(),
    maximum=st.none() | st.floats(0, MAX_SECONDS),
)
def test_seconds_returns_a_number_or_says_which_rule_failed(
    value: Any, allow_zero: bool, maximum: float | None
) -> None:
    try:
        number = seconds(value, allow_zero=allow_zero, maximum=maximum)
    except SecondsError as exc:
        assert exc.reason in {"type", "not_finite", "negative", "zero", "too_long"}
        message_of(exc)
    else:
        assert isinstance(number, float)
        assert number >= 0 and (allow_zero or number > 0)
        assert maximum is None or number <= maximum


@given(text=st.text() | st.floats().map(str) | st.integers().map(str), allow_zero=st.booleans())
def test_parse_seconds_reads_a_number_or_raises_value_error(text: str, allow_zero: bool) -> None:
    try:
        number = parse_seconds(text, allow_zero=allow_zero)
    except ValueError as exc:
        message_of(exc)
    else:
        assert number >= 0 and (allow_zero or number > 0)


# --- rate limits and QUEUES -----------------------------------------------------------


@given(text=rate_like | anything)
def test_parse_rate_limit_returns_a_rate_or_a_flow_error(text: Any) -> None:
    try:
        rate = parse_rate_limit(text)
    except FlowError as exc:
        message_of(exc)
    else:
        assert 1 <= rate.count <= RATE_LIMIT_MAX
        assert parse_rate_limit(str(rate)) == rate


@given(count=st.integers(1, RATE_LIMIT_MAX), unit=st.sampled_from("smh"))
def test_rate_limits_round_trip_through_str(count: int, unit: str) -> None:
    rate = parse_rate_limit(f"{count}/{unit}")
    assert rate == RateLimit(count, {"s": 1.0, "m": 60.0, "h": 3600.0}[unit])
    assert str(rate) == f"{count}/{unit}"


queue_options = st.dictionaries(
    st.sampled_from(["rate_limit", "concurrency"]) | st.text(max_size=5),
    rate_like | st.integers(-5, 20_000) | anything,
    max_size=3,
)


hashables = st.text(max_size=8) | st.integers() | st.none() | st.booleans() | st.binary(max_size=4)


@given(value=st.dictionaries(hashables, queue_options | anything, max_size=3) | anything)
def test_parse_queues_returns_limits_or_a_flow_error(value: Any) -> None:
    try:
        limits = parse_queues(value)
    except FlowError as exc:
        message_of(exc)
    else:
        assert set(limits) == set(value)


# --- schedules ------------------------------------------------------------------------


@given(text=cron_like | anything)
def test_parse_cron_returns_an_expression_or_an_invalid_schedule(text: Any) -> None:
    try:
        expression = parse_cron("fuzz", text)
    except InvalidSchedule as exc:
        message_of(exc)
    else:
        assert len(expression.split(" ")) == 5
        assert parse_cron("fuzz", expression) == expression


@given(value=duration_like | anything | st.integers(-(10**30), 10**400) | st.timedeltas())
def test_parse_every_returns_an_interval_or_an_invalid_schedule(value: Any) -> None:
    try:
        every = parse_every("fuzz", value)
    except InvalidSchedule as exc:
        message_of(exc)
    else:
        assert timedelta(seconds=1) <= every <= MAX_DURATION
        assert every % timedelta(seconds=1) == timedelta(0)


@given(value=st.timezones().map(str) | st.text(max_size=40) | anything)
def test_parse_timezone_returns_a_zone_name_or_an_invalid_schedule(value: Any) -> None:
    try:
        zone = parse_timezone("fuzz", value)
    except InvalidSchedule as exc:
        message_of(exc)
    else:
        assert zone is None or zone == value


entries = st.fixed_dictionaries(
    {},
    optional={
        "type": st.text(max_size=10) | anything,
        "cron": cron_like | anything,
        "every": duration_like | anything,
        "payload": st.dictionaries(st.text(max_size=4), st.integers()) | anything,
        "queue": st.text(max_size=8) | anything,
        "priority": st.integers(-40_000, 40_000) | anything,
        "timezone": st.timezones().map(str) | anything,
        "missed": st.sampled_from(["latest", "skip"]) | anything,
        "enabled": st.booleans() | anything,
        "unknown": anything,
    },
)


@given(name=st.text(max_size=300) | hashables, entry=entries | anything)
def test_a_schedules_entry_is_a_schedule_or_an_invalid_schedule(name: Any, entry: Any) -> None:
    try:
        schedule = schedule_from_entry(name, entry)
    except InvalidSchedule as exc:
        message_of(exc)
    else:
        assert (schedule.cron is None) != (schedule.every is None)


@given(type_name=st.text(max_size=20) | anything, value=cron_like | duration_like | anything)
def test_job_schedule_is_a_schedule_or_an_invalid_schedule(type_name: Any, value: Any) -> None:
    try:
        schedule_for_job(type_name, value)
    except InvalidSchedule as exc:
        message_of(exc)
