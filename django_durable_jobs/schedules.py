"""Periodic jobs: schedules declared in code, and the ticks they produce.

A schedule names a job type and when to run it: a cron expression
(evaluated by cronsim in the schedule's time zone) or a fixed interval.
Every worker computes the same ticks from the same declaration, and
enqueues each due tick with the idempotency key ``schedule:<name>:<tick>``:
the database's unique constraint, not a leader process, makes it one job
per tick however many workers race for it.

This module is pure (no database): declaring, validating and computing
ticks. ``worker/scheduler.py`` does the enqueueing; ``models.ScheduleState``
remembers each schedule's last tick.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .constants import IDEMPOTENCY_KEY_MAX_LENGTH
from .durations import MAX_DURATION, format_duration, parse_duration
from .exceptions import InvalidJob, InvalidSchedule
from .validation import dump_payload, validate_priority, validate_queue, validate_type

#: Run the most recent missed tick once after downtime (the default).
MISSED_LATEST = "latest"
#: Run no missed tick: only a tick that is at most ``MISSED_TICK_GRACE`` old.
MISSED_SKIP = "skip"
MISSED_POLICIES = (MISSED_LATEST, MISSED_SKIP)
#: How late a tick may be enqueued and still count as on time: covers a busy
#: host, a short database outage, a worker restart. Beyond it, a tick is
#: "missed" and the schedule's policy decides.
MISSED_TICK_GRACE = timedelta(seconds=60)
#: The shortest interval: the scheduler is not a sub-second timer.
MIN_INTERVAL = timedelta(seconds=1)

KEY_PREFIX = "schedule:"
# Ticks are whole seconds in UTC, so the key's tail has a fixed length
# (20 characters) and can be parsed back by ``tick_from_key``.
_TICK_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_TICK_LENGTH = 20
#: A schedule name leaves room in the key for the prefix, a colon and the tick.
NAME_MAX_LENGTH = IDEMPOTENCY_KEY_MAX_LENGTH - len(KEY_PREFIX) - 1 - _TICK_LENGTH

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
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Schedule:
    """One declared schedule: which job to enqueue, and when.

    Exactly one of ``cron`` and ``every`` is set. ``queue`` and ``priority``
    left at ``None`` take the handler's defaults, then ``DURABLE_JOBS``'.
    ``timezone`` ``None`` means ``settings.TIME_ZONE``, read when ticks are
    computed (so ``override_settings`` reaches it).
    """

    name: str
    type: str
    cron: str | None = None
    every: timedelta | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    timezone: str | None = None
    missed: str = MISSED_LATEST
    enabled: bool = True
    #: Where it was declared, for messages: ``@job`` or ``DURABLE_JOBS['SCHEDULES']``.
    origin: str = "@job"

    def zone(self) -> ZoneInfo:
        from django.conf import settings

        return ZoneInfo(self.timezone or getattr(settings, "TIME_ZONE", None) or "UTC")

    @property
    def timing(self) -> str:
        """When it runs, as text: ``cron */5 * * * *`` or ``every 2s``.

        Stored with the schedule's state: when it changes, the schedule
        counts as new, so an edited expression does not trigger a catch-up.
        """
        if self.cron is not None:
            return f"cron {self.cron}"
        assert self.every is not None
        return f"every {format_duration(self.every)}"

    def latest_tick(self, now: datetime) -> datetime | None:
        """The last tick at or before ``now`` (UTC), or None if there is none."""
        now = _utc(now)
        if self.every is not None:
            step = int(self.every.total_seconds())
            elapsed = math.floor((now - _EPOCH).total_seconds())
            return _EPOCH + timedelta(seconds=elapsed - elapsed % step)
        assert self.cron is not None
        # Reverse iteration first steps one second back: start one second
        # past `now` (whole seconds) so that a tick exactly at `now` counts.
        start = (now.replace(microsecond=0) + timedelta(seconds=1)).astimezone(self.zone())
        try:
            return _utc(next(CronSim(self.cron, start, reverse=True)))
        except StopIteration:
            return None

    def next_tick(self, now: datetime) -> datetime | None:
        """The first tick strictly after ``now`` (UTC), or None if there is none."""
        now = _utc(now)
        if self.every is not None:
            latest = self.latest_tick(now)
            assert latest is not None
            return latest + self.every
        assert self.cron is not None
        try:
            return _utc(next(CronSim(self.cron, now.astimezone(self.zone()))))
        except StopIteration:
            return None

    def idempotency_key(self, tick: datetime) -> str:
        """``schedule:<name>:<tick in UTC>``: the same on every host for the same tick."""
        return f"{KEY_PREFIX}{self.name}:{_utc(tick).strftime(_TICK_FORMAT)}"


def tick_from_key(key: str | None) -> datetime | None:
    """The tick a scheduled job was enqueued for, from its idempotency key.

    A handler can call ``tick_from_key(ctx.idempotency_key)`` to know which
    period it covers; None for a job the scheduler did not enqueue.
    """
    if not key or not key.startswith(KEY_PREFIX) or len(key) <= len(KEY_PREFIX) + _TICK_LENGTH:
        return None
    try:
        return datetime.strptime(key[-_TICK_LENGTH:], _TICK_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


#: ``missed_tick_count`` stops counting cron ticks here (then says ``"1000+"``).
MISSED_COUNT_LIMIT = 1000


def missed_tick_count(schedule: Schedule, first: datetime, before: datetime) -> str:
    """How many ticks fall in ``[first, before)``, as text for a log line.

    Exact by arithmetic for intervals; cron ticks are counted one by one,
    up to ``MISSED_COUNT_LIMIT`` (a week of every-minute ticks is 10,080).
    """
    if first >= before:
        return "0"
    if schedule.every is not None:
        step = schedule.every.total_seconds()
        return str(math.ceil((before - first).total_seconds() / step))
    count, tick = 0, first
    while tick is not None and tick < before:
        count += 1
        if count >= MISSED_COUNT_LIMIT:
            return f"{MISSED_COUNT_LIMIT}+"
        tick = schedule.next_tick(tick)
    return str(count)


def due_tick(
    latest: datetime | None,
    *,
    now: datetime,
    last_tick: datetime | None,
    first_seen: datetime,
    missed: str,
    grace: timedelta = MISSED_TICK_GRACE,
) -> datetime | None:
    """The tick to enqueue now, or None: the missed-tick policy, as a pure function.

    ``latest`` is the schedule's last tick at or before ``now``; only that
    one is ever a candidate, so downtime never produces a burst. It is due
    when it is newer than the last tick enqueued and

    - ``"latest"``: it falls after the schedule was first seen by a worker
      (less ``grace``): a tick missed while no worker ran is run once;
    - ``"skip"``: it is at most ``grace`` old: a missed tick is not run.
    """
    if latest is None or latest > now:
        return None
    if last_tick is not None and latest <= last_tick:
        return None
    if missed == MISSED_SKIP:
        return latest if now - latest <= grace else None
    return latest if latest >= first_seen - grace else None


# -- declaring -------------------------------------------------------------


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{value!r} is naive: ticks are computed from aware datetimes")
    return value.astimezone(timezone.utc)


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
    if isinstance(value, timedelta):
        every = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InvalidSchedule(name, f"every must be finite, got {value!r}.")
        every = timedelta(seconds=value)
    elif isinstance(value, str):
        try:
            every = parse_duration(value)
        except ValueError as exc:
            raise InvalidSchedule(name, f"every: {exc}.") from None
    else:
        raise InvalidSchedule(
            name,
            "every must be a timedelta, a number of seconds or a duration such as '5m', "
            f"not {type(value).__name__}.",
        )
    if every < MIN_INTERVAL:
        raise InvalidSchedule(name, f"every must be at least 1 second, got {value!r}.")
    if every > MAX_DURATION:
        raise InvalidSchedule(name, f"every must be at most {MAX_DURATION.days} days.")
    if every % timedelta(seconds=1):
        raise InvalidSchedule(name, f"every must be a whole number of seconds, got {value!r}.")
    return every


def parse_timezone(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidSchedule(name, f"timezone must be a zone name such as 'Europe/Berlin', "
                              f"got {value!r}.")  # fmt: skip
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
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
    from .conf import jobs_settings
    from .registry import registry

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
    from .conf import jobs_settings
    from .registry import registry

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
