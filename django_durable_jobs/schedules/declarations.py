"""Declaring schedules: ``@job(schedule=...)`` and ``DURABLE_JOBS["SCHEDULES"]``.

Checks what is declared and builds the ``Schedule`` objects (``ticks.py``)
from it; an invalid declaration is an ``InvalidSchedule`` naming the
schedule and the problem, raised by ``@job`` at import time and reported
by the system check ``durable_jobs.E007`` for settings entries. The job
fields of an entry (type, queue, priority, payload) follow ``enqueue()``'s
own rules (``validation``); its interval is a number of seconds or a
duration text (``durations``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..conf import jobs_settings
from ..durations import MAX_DURATION, SecondsError, parse_duration, seconds
from ..exceptions import InvalidJob, InvalidSchedule
from ..handlers import registry
from ..names import validate_queue, validate_type
from ..validation import dump_payload, validate_priority
from .ticks import MISSED_LATEST, MISSED_POLICIES, NAME_MAX_LENGTH, Schedule

#: The shortest interval: the scheduler is not a sub-second timer.
MIN_INTERVAL = timedelta(seconds=1)

#: The keys a ``DURABLE_JOBS["SCHEDULES"]`` entry may have.
ENTRY_KEYS = frozenset(
    {"type", "cron", "every", "payload", "queue", "priority", "timezone", "missed", "enabled"}
)
_CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def parse_cron(name: str, value: Any) -> str:
    """A valid five-field cron expression (or an ``@daily``-style alias), normalised."""
    if not isinstance(value, str):
        raise InvalidSchedule(
            name, f"cron must be a string such as '*/5 * * * *', not {type(value).__name__}."
        )
    text = " ".join(value.split())
    text = _CRON_ALIASES.get(text.lower(), text)
    fields = text.split(" ")
    if len(fields) != 5:
        raise InvalidSchedule(
            name,
            f"{value!r} is not a cron expression: it needs 5 fields (minute hour "
            f"day-of-month month day-of-week), got {len(fields) if text else 0}. "
            "For an interval, give a timedelta or a number of seconds.",
        )
    try:
        next(CronSim(text, datetime.now(timezone.utc)))
    except CronSimError as exc:
        raise InvalidSchedule(name, f"{value!r} is not a valid cron expression: {exc}.") from None
    except StopIteration:
        raise InvalidSchedule(name, f"{value!r} never matches a date.") from None
    return text


def parse_every(name: str, value: Any) -> timedelta:
    """An interval: a ``timedelta``, a number of seconds, or a duration such as ``"5m"``."""
    if isinstance(value, str):
        try:
            every = parse_duration(value)
        except ValueError as exc:
            raise InvalidSchedule(name, f"every: {exc}.") from None
    else:
        try:
            number = seconds(value)
        except SecondsError as exc:
            raise InvalidSchedule(name, _every_error(exc)) from None
        every = value if isinstance(value, timedelta) else timedelta(seconds=number)
    if every < MIN_INTERVAL:
        raise InvalidSchedule(name, f"every must be at least 1 second, got {value!r}.")
    if every % timedelta(seconds=1):
        raise InvalidSchedule(name, f"every must be a whole number of seconds, got {value!r}.")
    return every


def _every_error(exc: SecondsError) -> str:
    if exc.reason == SecondsError.TYPE:
        return (
            "every must be a timedelta, a number of seconds or a duration such as '5m', "
            f"not {type(exc.value).__name__}."
        )
    if exc.reason == SecondsError.NOT_FINITE:
        return f"every must be finite, got {exc.value!r}."
    if exc.reason == SecondsError.TOO_LONG:
        return f"every must be at most {MAX_DURATION.days} days."
    return f"every must be at least 1 second, got {exc.value!r}."


def parse_timezone(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidSchedule(name, f"timezone must be a zone name such as 'Europe/Berlin', "
                              f"got {value!r}.")  # fmt: skip
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # OSError: a name that is a directory of the zone database ('America').
        raise InvalidSchedule(name, f"unknown timezone {value!r}.") from None
    return value


def _name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise InvalidSchedule(str(name), "the name must be a non-empty string without "
                              "surrounding whitespace.")  # fmt: skip
    if len(name) > NAME_MAX_LENGTH:
        raise InvalidSchedule(name, f"the name must be at most {NAME_MAX_LENGTH} characters.")
    return name


def _job_field(name: str, validate: Any, value: Any) -> Any:
    try:
        return validate(value)
    except InvalidJob as exc:
        raise InvalidSchedule(name, f"{exc.field} {exc.message}") from None


def schedule_for_job(type_name: str, value: Any) -> Schedule:
    """The schedule ``@job(type_name, schedule=value)`` declares.

    A string is a cron expression; a ``timedelta`` or a number of seconds an
    interval. Options beyond that (payload, time zone, missed-tick policy)
    go in a ``DURABLE_JOBS["SCHEDULES"]`` entry.
    """
    name = _name(type_name)
    if isinstance(value, str):
        return Schedule(name, type_name, cron=parse_cron(name, value))
    if isinstance(value, Mapping):
        raise InvalidSchedule(
            name,
            "@job(schedule=...) takes a cron string or an interval; declare a schedule with "
            "options in DURABLE_JOBS['SCHEDULES'].",
        )
    return Schedule(name, type_name, every=parse_every(name, value))


def schedule_from_entry(name: Any, entry: Any) -> Schedule:
    """A ``DURABLE_JOBS["SCHEDULES"]`` entry, validated; ``InvalidSchedule`` otherwise."""
    name = _name(name)
    if not isinstance(entry, Mapping):
        raise InvalidSchedule(name, f"the entry must be a dict, not {type(entry).__name__}.")
    unknown = set(entry) - ENTRY_KEYS
    if unknown:
        raise InvalidSchedule(
            name,
            f"unknown key(s) {', '.join(sorted(map(repr, unknown)))}; "
            f"known: {', '.join(sorted(ENTRY_KEYS))}.",
        )
    if ("cron" in entry) == ("every" in entry):
        raise InvalidSchedule(name, "give exactly one of 'cron' and 'every'.")
    type_name = _job_field(name, validate_type, entry.get("type", name))
    payload = entry.get("payload", {})
    try:
        dump_payload(payload)
    except InvalidJob as exc:
        raise InvalidSchedule(name, f"payload {exc.message}") from None
    queue = entry.get("queue")
    priority = entry.get("priority")
    missed = entry.get("missed", MISSED_LATEST)
    if missed not in MISSED_POLICIES:
        raise InvalidSchedule(
            name, f"missed must be {' or '.join(map(repr, MISSED_POLICIES))}, got {missed!r}."
        )
    enabled = entry.get("enabled", True)
    if not isinstance(enabled, bool):
        raise InvalidSchedule(name, f"enabled must be True or False, got {enabled!r}.")
    return Schedule(
        name,
        type_name,
        cron=parse_cron(name, entry["cron"]) if "cron" in entry else None,
        every=parse_every(name, entry["every"]) if "every" in entry else None,
        payload=dict(payload),
        queue=None if queue is None else _job_field(name, validate_queue, queue),
        priority=None if priority is None else _job_field(name, validate_priority, priority),
        timezone=parse_timezone(name, entry.get("timezone")),
        missed=missed,
        enabled=enabled,
        origin="DURABLE_JOBS['SCHEDULES']",
    )


def load_schedules() -> tuple[list[Schedule], list[InvalidSchedule]]:
    """Every declared schedule, by name, and the errors of the invalid ones.

    ``@job`` schedules come first; a ``SCHEDULES`` entry may not reuse the
    name of one (the job type), since both would enqueue under the same keys.
    """
    schedules: dict[str, Schedule] = {}
    errors: list[InvalidSchedule] = []
    for handler in registry:
        if handler.schedule is not None:
            schedules[handler.schedule.name] = handler.schedule
    entries = jobs_settings.SCHEDULES
    for name, entry in entries.items():
        try:
            schedule = schedule_from_entry(name, entry)
        except InvalidSchedule as exc:
            errors.append(exc)
            continue
        if name in schedules:
            errors.append(
                InvalidSchedule(
                    name,
                    "this name is already the schedule of @job handler "
                    f"{name!r}; give the SCHEDULES entry another name.",
                )
            )
            continue
        schedules[name] = schedule
    return sorted(schedules.values(), key=lambda s: s.name), errors


def find_schedule(name: str) -> Schedule | None:
    """The valid schedule declared under ``name``, or None (cheaper than ``load_schedules``)."""
    handler = registry.get(name)
    if handler is not None and handler.schedule is not None:
        return handler.schedule
    entry = jobs_settings.SCHEDULES.get(name)
    if entry is None:
        return None
    try:
        return schedule_from_entry(name, entry)
    except InvalidSchedule:
        return None
