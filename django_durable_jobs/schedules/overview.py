"""Each declared schedule next to what the workers recorded of it.

What ``manage.py jobs schedules`` prints and the admin's schedule list
shows: the declaration (from code and settings), the last tick and its job
(from ``durable_jobs_schedule`` and the job table), and the next tick.
Two queries whatever the number of schedules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from ..conf import jobs_settings
from ..handlers import registry
from ..models import Job, ScheduleState
from .declarations import load_schedules
from .ticks import Schedule


def effective_queue(schedule: Schedule) -> str:
    """The queue its jobs go to: the schedule's, else the handler's, else the default."""
    if schedule.queue is not None:
        return schedule.queue
    handler = registry.get(schedule.type)
    if handler is not None and handler.queue is not None:
        return handler.queue
    return str(jobs_settings.DEFAULT_QUEUE)


def describe(schedule: Schedule, state: ScheduleState | None, now: datetime) -> dict[str, Any]:
    """One schedule as a JSON-ready dict (``state`` None: no worker has seen it yet)."""
    return {
        "name": schedule.name,
        "type": schedule.type,
        "cron": schedule.cron,
        "every_seconds": None if schedule.every is None else int(schedule.every.total_seconds()),
        "timing": schedule.timing,
        "timezone": str(schedule.zone()) if schedule.cron is not None else "UTC",
        "queue": effective_queue(schedule),
        "missed": schedule.missed,
        "enabled": schedule.enabled,
        "origin": schedule.origin,
        "handler_registered": schedule.type in registry,
        "first_seen": None if state is None else state.first_seen,
        "last_tick": None if state is None else state.last_tick,
        "last_job_id": None if state is None or state.last_job_id is None else state.last_job_id,
        "last_job_status": None,
        "next_tick": schedule.next_tick(now) if schedule.enabled else None,
    }


def schedule_overview(now: datetime | None = None) -> list[dict[str, Any]]:
    """Every valid declared schedule, by name, with its state and next tick."""
    now = timezone.now() if now is None else now
    schedules, _errors = load_schedules()  # invalid ones: durable_jobs.E007
    states = {
        state.name: state
        for state in ScheduleState.objects.filter(name__in=[s.name for s in schedules])
    }
    rows = [describe(schedule, states.get(schedule.name), now) for schedule in schedules]
    job_ids = [row["last_job_id"] for row in rows if row["last_job_id"] is not None]
    statuses = dict(Job.objects.filter(pk__in=job_ids).values_list("pk", "status"))
    for row in rows:
        if row["last_job_id"] is not None:
            # A job pruned by retention is gone; the tick is still recorded.
            row["last_job_status"] = statuses.get(row["last_job_id"], "pruned")
    return rows
