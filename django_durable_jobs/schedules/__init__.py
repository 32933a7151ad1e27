"""Periodic jobs: schedules declared in code and settings, and the ticks they produce.

- ``ticks.py``: a ``Schedule`` and its ticks (pure: which tick is due, the
  tick's idempotency key, the missed-tick policy);
- ``declarations.py``: ``@job(schedule=...)`` and ``DURABLE_JOBS["SCHEDULES"]``,
  checked and loaded;
- ``overview.py``: each schedule next to what the workers recorded of it
  (needs the models: import it from ``django_durable_jobs.schedules.overview``).

``worker/scheduler.py`` does the enqueueing. The names below are the ones
``django_durable_jobs.schedules`` has always offered.
"""

from __future__ import annotations

from .declarations import (
    ENTRY_KEYS,
    MIN_INTERVAL,
    find_schedule,
    load_schedules,
    parse_cron,
    parse_every,
    parse_timezone,
    schedule_for_job,
    schedule_from_entry,
)
from .ticks import (
    KEY_PREFIX,
    MISSED_COUNT_LIMIT,
    MISSED_LATEST,
    MISSED_POLICIES,
    MISSED_SKIP,
    MISSED_TICK_GRACE,
    NAME_MAX_LENGTH,
    Schedule,
    due_tick,
    missed_tick_count,
    tick_from_key,
)

__all__ = [
    "ENTRY_KEYS",
    "KEY_PREFIX",
    "MIN_INTERVAL",
    "MISSED_COUNT_LIMIT",
    "MISSED_LATEST",
    "MISSED_POLICIES",
    "MISSED_SKIP",
    "MISSED_TICK_GRACE",
    "NAME_MAX_LENGTH",
    "Schedule",
    "due_tick",
    "find_schedule",
    "load_schedules",
    "missed_tick_count",
    "parse_cron",
    "parse_every",
    "parse_timezone",
    "schedule_for_job",
    "schedule_from_entry",
    "tick_from_key",
]
