"""Bad enqueue arguments fail before the database is touched.

These tests have no ``django_db`` mark: pytest-django makes any query
raise, so an ``InvalidJob`` here proves that nothing reached PostgreSQL.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest
from django.test import override_settings

from django_durable_jobs import InvalidJob, enqueue, enqueue_many, job
from django_durable_jobs.validation import build_spec


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"type": ""}, "type", "must not be empty"),
        ({"type": "   "}, "type", "must not be empty"),
        ({"type": None}, "type", "must be a string"),
        ({"type": "x" * 256}, "type", "at most 255"),
        ({"type": "a\x00b"}, "type", "NUL"),
        ({"type": " padded "}, "type", "whitespace"),
        ({"type": "t", "payload": [1, 2]}, "payload", "JSON object"),
        ({"type": "t", "payload": "text"}, "payload", "JSON object"),
        ({"type": "t", "payload": {"when": datetime.now(timezone.utc)}}, "payload", "JSON"),
        ({"type": "t", "payload": {"x": math.nan}}, "payload", "JSON"),
        ({"type": "t", "payload": {"x": "a\x00"}}, "payload", "NUL"),
        ({"type": "t", "delay": -1}, "delay", "negative"),
        ({"type": "t", "delay": timedelta(seconds=-1)}, "delay", "negative"),
        ({"type": "t", "delay": math.inf}, "delay", "finite"),
        ({"type": "t", "delay": 1e12}, "delay", "at most"),
        ({"type": "t", "delay": timedelta(days=365 * 200)}, "delay", "at most"),
        ({"type": "t", "delay": "5"}, "delay", "timedelta or a number"),
        ({"type": "t", "delay": True}, "delay", "timedelta or a number"),
        ({"type": "t", "run_at": datetime(2030, 1, 1)}, "run_at", "timezone-aware"),
        ({"type": "t", "run_at": "2030-01-01"}, "run_at", "must be a datetime"),
        (
            {"type": "t", "delay": 1, "run_at": datetime(2030, 1, 1, tzinfo=timezone.utc)},
            "run_at",
            "not both",
        ),
        ({"type": "t", "max_attempts": 0}, "max_attempts", "between 1"),
        ({"type": "t", "max_attempts": -3}, "max_attempts", "between 1"),
        ({"type": "t", "max_attempts": 2.5}, "max_attempts", "integer"),
        ({"type": "t", "max_attempts": True}, "max_attempts", "integer"),
        ({"type": "t", "priority": 40000}, "priority", "between"),
        ({"type": "t", "priority": "high"}, "priority", "integer"),
        ({"type": "t", "queue": ""}, "queue", "must not be empty"),
        ({"type": "t", "queue": "emails:4"}, "queue", "not a valid queue name"),
        ({"type": "t", "queue": "a,b"}, "queue", "not a valid queue name"),
        ({"type": "t", "idempotency_key": ""}, "idempotency_key", "must not be empty"),
        ({"type": "t", "idempotency_key": 42}, "idempotency_key", "must be a string"),
        ({"type": "t", "idempotency_key": "k" * 256}, "idempotency_key", "at most 255"),
        # Found by the property tests (tests/fuzz/): each was an exception other than
        # InvalidJob (OverflowError, UnicodeEncodeError, DataError) or, for the queue,
        # a name accepted with a trailing newline.
        ({"type": "t", "delay": 10**400}, "delay", "at most"),
        ({"type": "t", "delay": -(10**400)}, "delay", "negative"),
        ({"type": "t", "timeout": 10**400}, "timeout", "at most"),
        ({"type": "t.\ud800"}, "type", "surrogate"),
        ({"type": "t", "queue": "q\udfff"}, "queue", "surrogate"),
        ({"type": "t", "queue": "default\n"}, "queue", "not a valid queue name"),
        ({"type": "t", "idempotency_key": "\ud800"}, "idempotency_key", "surrogate"),
        ({"type": "t", "concurrency_key": "k\ud800"}, "concurrency_key", "surrogate"),
        ({"type": "t", "payload": {"a": "\ud800"}}, "payload", "surrogate"),
        ({"type": "t", "payload": {"\udc00": 1}}, "payload", "surrogate"),
        (
            {"type": "t", "run_at": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))},
            "run_at",
            "out of range",
        ),
        (
            {
                "type": "t",
                "run_at": datetime(9999, 12, 31, 23, tzinfo=timezone(-timedelta(hours=5))),
            },
            "run_at",
            "out of range",
        ),
    ],
)
def test_enqueue_rejects_bad_arguments_before_the_database(
    kwargs: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(InvalidJob) as excinfo:
        enqueue(**kwargs)  # type: ignore[arg-type]
    assert excinfo.value.field == field
    assert message in str(excinfo.value)
    assert isinstance(excinfo.value, ValueError)


def test_settings_defaults_are_validated_when_read() -> None:
    from django.core.exceptions import ImproperlyConfigured

    with (
        override_settings(DURABLE_JOBS={"DEFAULT_QUEUE": "bad queue"}),
        pytest.raises(ImproperlyConfigured, match="DEFAULT_QUEUE"),
    ):
        enqueue("t")


def test_a_payload_nested_too_deeply_is_invalid_not_a_crash() -> None:
    payload: dict[str, object] = {}
    inner = payload
    # Deep enough for RecursionError on every supported Python (3.13's
    # C stack allows more depth than 3.11's recursion limit).
    for _ in range(200_000):
        inner["x"] = inner = {}
    with pytest.raises(InvalidJob, match="nested too deeply"):
        enqueue("t", payload)


def test_run_at_is_kept_in_utc() -> None:
    # PostgreSQL refuses offsets past 15:59 and fractions of a second, which
    # Python allows; the instant is the same in UTC (a DataError before).
    for offset in (timedelta(hours=20), -timedelta(hours=23), timedelta(microseconds=1)):
        when = datetime(2030, 1, 1, tzinfo=timezone(offset))
        spec = build_spec("t", run_at=when)
        assert spec.run_at == when
        assert spec.run_at is not None and spec.run_at.utcoffset() == timedelta(0)


def test_a_backslash_before_u0000_in_a_payload_string_is_no_nul() -> None:
    # The text \u0000 (six characters) is JSON-encoded as \\u0000: no NUL, and
    # was refused as one.
    spec = build_spec("t", {"a": "\\u0000", "b": "\\\\u0000"})
    assert spec.stored_payload() == {"a": "\\u0000", "b": "\\\\u0000"}
    with pytest.raises(InvalidJob, match="NUL"):
        build_spec("t", {"a": "\\\x00"})


def test_payloads_equal_as_json_numbers_replay() -> None:
    from types import SimpleNamespace

    spec = build_spec("t", {"f": 1.2345678901234567e30, "g": 0.1})
    # What jsonb gives back: the float's decimal value, as an int.
    stored = SimpleNamespace(
        **{**spec._asdict(), "payload": {"f": 1234567890123456700000000000000, "g": 0.1}}
    )
    assert spec.differences(stored) == []
    stored.payload = {"f": 1234567890123456700000000000001, "g": 0.1}
    assert spec.differences(stored) == ["payload"]


def test_naive_run_at_is_accepted_without_use_tz() -> None:
    with override_settings(USE_TZ=False):
        spec = build_spec("t", run_at=datetime(2030, 1, 1))
    assert spec.run_at == datetime(2030, 1, 1)


@pytest.mark.parametrize(
    ("jobs", "field"),
    [
        ([{"type": "ok"}, {"type": ""}], "jobs[1].type"),
        ([{"type": "ok"}, {"payload": {}}], "jobs[1].type"),
        ([{"type": "ok", "colour": "red"}], "jobs[0]"),
        (["not a dict"], "jobs[0]"),
        ([{"type": "ok", "payload": {"x": {1, 2}}}], "jobs[0].payload"),
        # Keys that are not strings: a TypeError from sorting them, before.
        ([{"type": "ok", 1: "a", (2,): "b"}], "jobs[0]"),
        # Not a list of dicts at all: a TypeError from iterating it, before.
        (None, "jobs"),
        (42, "jobs"),
        ("type", "jobs"),
        ({"type": "ok"}, "jobs"),
    ],
)
def test_enqueue_many_names_the_bad_item(jobs: list[object], field: str) -> None:
    with pytest.raises(InvalidJob) as excinfo:
        enqueue_many(jobs)  # type: ignore[arg-type]
    assert excinfo.value.field == field


def test_enqueue_many_of_nothing_does_nothing() -> None:
    assert enqueue_many([]) == []


def test_defaults_come_from_the_handler_then_the_settings(clean_registry: None) -> None:
    @job("unit.defaults", queue="emails", priority=7, max_attempts=9)
    def handler(ctx: object) -> None: ...

    spec = build_spec("unit.defaults", {"a": 1})
    assert (spec.queue, spec.priority, spec.max_attempts) == ("emails", 7, 9)
    spec = build_spec("unit.defaults", queue="other", priority=1, max_attempts=2)
    assert (spec.queue, spec.priority, spec.max_attempts) == ("other", 1, 2)
    with override_settings(
        DURABLE_JOBS={"DEFAULT_QUEUE": "q", "DEFAULT_PRIORITY": 3, "DEFAULT_MAX_ATTEMPTS": 4}
    ):
        spec = build_spec("unit.unregistered")
    assert (spec.queue, spec.priority, spec.max_attempts) == ("q", 3, 4)
    assert spec.payload == {}


def test_delay_accepts_seconds_and_timedelta_in_whole_microseconds() -> None:
    assert build_spec("t", delay=1.5).delay_us == 1_500_000
    assert build_spec("t", delay=timedelta(minutes=2)).delay_us == 120_000_000
    assert build_spec("t", delay=timedelta(microseconds=7)).delay == timedelta(microseconds=7)
    assert build_spec("t", delay=0.0000004).delay_us == 0
    assert build_spec("t", delay=0.0000016).delay_us == 2
    assert build_spec("t").delay_us is None
