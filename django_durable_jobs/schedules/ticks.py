"""A schedule and its ticks: when it runs, and which tick is due now.

A schedule names a job type and when to run it: a cron expression
(evaluated by cronsim in the schedule's time zone) or a fixed interval.
Every worker computes the same ticks from the same declaration, and
enqueues each due tick with the idempotency key ``schedule:<name>:<tick>``:
the database's unique constraint, not a leader process, makes it one job
per tick however many workers race for it.

Pure (no database, no validation): ``declarations.py`` checks what is
declared and builds ``Schedule`` objects, ``worker/scheduler.py`` enqueues
the ticks, ``models.ScheduleState`` remembers each schedule's last tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from cronsim import CronSim
from django.conf import settings

from ..constants import IDEMPOTENCY_KEY_MAX_LENGTH
from ..durations import format_duration

#: Run the most recent missed tick once after downtime (the default).
MISSED_LATEST = "latest"
#: Run no missed tick: only a tick that is at most ``MISSED_TICK_GRACE`` old.
MISSED_SKIP = "skip"
MISSED_POLICIES = (MISSED_LATEST, MISSED_SKIP)
#: How late a tick may be enqueued and still count as on time: covers a busy
#: host, a short database outage, a worker restart. Beyond it, a tick is
#: "missed" and the schedule's policy decides.
MISSED_TICK_GRACE = timedelta(seconds=60)
KEY_PREFIX = "schedule:"
# Ticks are whole seconds in UTC, so the key's tail has a fixed length
# (20 characters) and can be parsed back by ``tick_from_key``.
_TICK_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_TICK_LENGTH = 20
#: A schedule name leaves room in the key for the prefix, a colon and the tick.
NAME_MAX_LENGTH = IDEMPOTENCY_KEY_MAX_LENGTH - len(KEY_PREFIX) - 1 - _TICK_LENGTH

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
        return ZoneInfo(self.timezone or getattr(settings, "TIME_ZONE", None) or "UTC")

    @property
    def timing(self) -> str:
        """When it runs, as text: ``cron */5 * * * *`` or ``every 2s``.

        Stored with the schedule's state: when it changes, the schedule
        counts as new, so an edited expression does not trigger a catch-up.
        """
        if self.cron is not None:
            return f"cron {self.cron}"
        assert self.every is not None  # noqa: S101 (exactly one of cron, every is set)
        return f"every {format_duration(self.every)}"

    def latest_tick(self, now: datetime) -> datetime | None:
        """The last tick at or before ``now`` (UTC), or None if there is none."""
        now = _utc(now)
        if self.every is not None:
            step = int(self.every.total_seconds())
            elapsed = math.floor((now - _EPOCH).total_seconds())
            return _EPOCH + timedelta(seconds=elapsed - elapsed % step)
        assert self.cron is not None  # noqa: S101 (exactly one of cron, every is set)
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
            assert latest is not None  # noqa: S101 (an interval always has a latest tick)
            return latest + self.every
        assert self.cron is not None  # noqa: S101 (exactly one of cron, every is set)
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
    count = 0
    tick: datetime | None = first
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


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{value!r} is naive: ticks are computed from aware datetimes")
    return value.astimezone(timezone.utc)
