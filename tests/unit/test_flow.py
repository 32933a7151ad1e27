"""The QUEUES setting: what a limit reads as, and what is refused with which message."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_durable_jobs.checks import check_queue_limits
from django_durable_jobs.flow import (
    THROTTLE_REASONS,
    FlowError,
    QueueLimits,
    RateLimit,
    describe_limits,
    parse_queues,
    parse_rate_limit,
    queue_limits,
)
from django_durable_jobs.held_back import HELD_BACK_REASONS, describe_held_back, nothing_held


@pytest.mark.parametrize(
    ("text", "count", "seconds"),
    [("10/s", 10, 1.0), ("100/m", 100, 60.0), (" 5 / h ", 5, 3600.0), ("10000/s", 10000, 1.0)],
)
def test_a_rate_limit_reads_n_per_second_minute_or_hour(
    text: str, count: int, seconds: float
) -> None:
    assert parse_rate_limit(text) == RateLimit(count, seconds)


@pytest.mark.parametrize(
    "text",
    [
        *("10", "10/d", "0/s", "1000001/s", "-1/s", "1.5/s", 10, None),
        # More digits than int() reads (a plain ValueError before), other scripts' digits.
        "9" * 5000 + "/s",
        "\u0661\u0660/s",
    ],
)
def test_anything_else_is_refused_with_the_form_it_should_take(text: object) -> None:
    with pytest.raises(FlowError, match=r"rate_limit must"):
        parse_rate_limit(text)


def test_queues_read_as_limits_per_queue() -> None:
    limits = parse_queues(
        {"emails": {"rate_limit": "10/s", "concurrency": 4}, "narrow": {"concurrency": 2}}
    )
    assert limits == {
        "emails": QueueLimits(RateLimit(10, 1.0), 4),
        "narrow": QueueLimits(None, 2),
    }
    assert limits["emails"].as_dict() == {"rate_limit": "10/s", "concurrency": 4}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"bad name": {}}, "not a valid queue name"),
        ({"emails": 4}, r"QUEUES\['emails'\] must be a dict"),
        ({"emails": {"rate": "1/s"}}, "unknown option"),
        ({"emails": {"concurrency": 0}}, r"QUEUES\['emails'\]: concurrency must be an integer"),
        ({"emails": {"concurrency": True}}, "concurrency must be an integer"),
        ({"emails": {"rate_limit": "fast"}}, r"QUEUES\['emails'\]: rate_limit must"),
    ],
)
def test_a_bad_entry_is_named_with_its_problem(value: object, message: str) -> None:
    with pytest.raises(FlowError, match=message):
        parse_queues(value)


def test_the_system_check_reports_a_bad_entry_as_e008() -> None:
    with override_settings(DURABLE_JOBS={"QUEUES": {"emails": {"rate_limit": "10 per second"}}}):
        # The check itself: run_checks() would run Django 6.1's model checks,
        # which ask the database (not allowed in a unit test).
        errors = [e for e in check_queue_limits() if e.id == "durable_jobs.E008"]
    assert len(errors) == 1
    assert "QUEUES['emails']: rate_limit must read N/s" in errors[0].msg


def test_queue_limits_lists_only_the_limited_queues() -> None:
    with override_settings(DURABLE_JOBS={"QUEUES": {"emails": {"concurrency": 1}, "plain": {}}}):
        assert queue_limits() == {"emails": QueueLimits(None, 1)}


def test_describe_limits_for_people() -> None:
    assert describe_limits(None) == ""
    assert describe_limits(QueueLimits(concurrency=4).as_dict()) == "concurrency 4"
    both = QueueLimits(rate_limit=RateLimit(10, 1.0), concurrency=4)
    assert describe_limits(both.as_dict()) == "rate_limit 10/s, concurrency 4"


def test_held_back_counts_every_throttle_reason_and_nothing_else() -> None:
    # The API's held_back object and the metric's reason label name the same things.
    assert sorted(HELD_BACK_REASONS) == sorted(THROTTLE_REASONS)
    assert list(nothing_held()) == ["paused", "concurrency", "rate_limit", "key"]
    assert describe_held_back(nothing_held()) == ""
    assert describe_held_back({**nothing_held(), "concurrency": 12}) == "12 (concurrency)"
