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
