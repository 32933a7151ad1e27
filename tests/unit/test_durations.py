from __future__ import annotations

from datetime import timedelta

import pytest

from django_durable_jobs.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("45s", timedelta(seconds=45)),
        ("15m", timedelta(minutes=15)),
        ("12h", timedelta(hours=12)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("0s", timedelta(0)),
        (" 30D ", timedelta(days=30)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        *("", "7", "d", "7 d", "1.5h", "-1d", "1d12h", "7days", "7y", "99999999d"),
        # More than the 4,300 digits int() reads: a ValueError of int()'s, before.
        "9" * 5000 + "s",
        # Other scripts' digits, which \\d matched.
        "\u0663d",
    ],
)
def test_parse_duration_rejects_malformed_input(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|longer than"):
        parse_duration(text)


def test_leading_zeros_are_no_longer_a_duration() -> None:
    assert parse_duration("0" * 30 + "5m") == timedelta(minutes=5)


def test_parse_duration_rejects_non_strings() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(7)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["45s", "15m", "12h", "7d", "2w", "90m"])
def test_format_duration_round_trips(text: str) -> None:
    assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)
    assert format_duration(timedelta(hours=36)) == "36h"
    assert format_duration(timedelta(days=7)) == "7d"
