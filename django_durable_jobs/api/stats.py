"""Job counts and queue lag, for ``GET /api/jobs/stats``.

Free of DRF so that other front ends (the ``jobs`` CLI) can reuse it, and
of SQL: the ORM builds every query. ``job_stats`` runs two grouped
queries: counts by queue and status, and, per queue, how long the oldest
runnable ``pending`` job has been waiting since it became available (a
delayed job is not late before its ``available_at``). ``health_stats``,
for ``/api/health``, counts the live workers and that oldest wait.
``queue_overview``, for ``GET /api/queues``, lists each queue with its
counts, its limits and its paused state. Both tell, per queue, how many
runnable jobs its flow control holds back now, and why (``held_back.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, DurationField, ExpressionWrapper, Min
from django.db.models.functions import Now

from .. import db, metrics
from ..conf import jobs_settings
from ..flow import QueueLimits, parse_queues, queue_limits
from ..held_back import held_back, nothing_held
from ..models import Job, JobStatus, QueueState, WorkerProcess


def _counts() -> dict[str, int]:
    return dict.fromkeys(JobStatus.values, 0)


def job_stats(using: str | None = None) -> dict[str, Any]:
    """Counts by status and by queue, and the oldest runnable pending job's wait.

    Returns ``{"total", "statuses", "queues", "oldest_pending_age_seconds"}``; each
    queue also has its ``limits`` (``None``: none), whether it is paused, and
    the runnable jobs its flow control holds back now (``held_back.py``).
    """
    jobs = Job.objects.using(db.database_alias(using))
    statuses = _counts()
    queues: dict[str, dict[str, Any]] = {}
    rows = jobs.order_by().values_list("queue", "status").annotate(n=Count("*"))
    for queue, status, n in rows:
        entry = queues.setdefault(
            queue, {**_counts(), "total": 0, "oldest_pending_age_seconds": None}
        )
        entry[status] = n
        entry["total"] += n
        statuses[status] = statuses.get(status, 0) + n
    # Measured by the database's clock, the one available_at was set with.
    waiting = (
        jobs.runnable()
        .order_by()
        .values_list("queue")
        .annotate(age=ExpressionWrapper(Now() - Min("available_at"), output_field=DurationField()))
    )
    oldest: float | None = None
    for queue, age in waiting:
        seconds = max(age.total_seconds(), 0.0)
        if queue in queues:
            queues[queue]["oldest_pending_age_seconds"] = seconds
        oldest = seconds if oldest is None else max(oldest, seconds)
    alias = db.database_alias(using)
    paused = _paused(alias)
    for queue in paused:
        # A paused queue is listed even when it holds no job.
        queues.setdefault(queue, {**_counts(), "total": 0, "oldest_pending_age_seconds": None})
    limits = queue_limits()
    held = held_back(alias, paused)
    for queue, entry in queues.items():
        entry["limits"] = _limits_of(queue, limits)
        entry["paused"] = queue in paused
        entry["paused_until"] = paused.get(queue)
        entry["held_back"] = held.get(queue, nothing_held())
    return {
        "total": sum(statuses.values()),
        "statuses": statuses,
        "queues": dict(sorted(queues.items())),
        "oldest_pending_age_seconds": oldest,
    }


def health_stats(using: str | None = None) -> dict[str, Any]:
    """Live workers (``WorkerProcess.objects.alive()``) and the oldest runnable pending
    job's age, by the database's clock: two small queries.

    Raises ``DatabaseError`` when the database does not answer.
    """
    alias = db.database_alias(using)
    live = WorkerProcess.objects.using(alias).alive().count()
    age = (
        Job.objects.using(alias)
        .runnable()
        .aggregate(age=ExpressionWrapper(Now() - Min("available_at"), output_field=DurationField()))
    )["age"]
    return {
        "live_workers": live,
        "oldest_pending_age_seconds": None if age is None else max(age.total_seconds(), 0.0),
    }


def _limits_of(queue: str, limits: dict[str, QueueLimits]) -> dict[str, Any] | None:
    return limits[queue].as_dict() if queue in limits else None


def _paused(alias: str) -> dict[str, datetime | None]:
    """``{queue: paused_until}`` of the queues paused now (one small query)."""
    return dict(QueueState.objects.using(alias).paused().values_list("name", "paused_until"))


def _depth_counts() -> dict[str, int]:
    """A queue's counts in ``queue_overview``: the statuses of the queue-depth metric."""
    return dict.fromkeys(metrics.DEPTH_STATUSES, 0)


def queue_overview(using: str | None = None, *, only: str | None = None) -> list[dict[str, Any]]:
    """Each queue (declared in ``QUEUES``, holding pending, running or dead jobs, or
    paused), by name: its counts, its limits (``None``: none), whether it is paused,
    and the runnable jobs its flow control holds back now.

    Two queries: the queue-depth metric's (grouped over the pending, running
    and dead jobs only, never the finished history) and the paused queues;
    ``held_back`` adds at most four small ones, none when nothing is paused
    or limited.
    ``only``: that queue alone, listed whatever it holds.
    """
    alias = db.database_alias(using)
    counts: dict[str, dict[str, int]] = {}
    ages: dict[str, float | None] = {}
    for queue, status, count, age in db.queue_depth(alias):
        if only is not None and queue != only:
            continue
        entry = counts.setdefault(queue, _depth_counts())
        entry[status] = count
        if status == JobStatus.PENDING:
            ages[queue] = age
    paused = _paused(alias)
    limits = queue_limits()
    held = held_back(alias, paused)
    names = set(counts) | set(parse_queues(jobs_settings.QUEUES)) | set(paused)
    if only is not None:
        names = {only}
    return [
        {
            "name": name,
            "counts": counts.get(name, _depth_counts()),
            "oldest_pending_age_seconds": ages.get(name),
            "limits": _limits_of(name, limits),
            "paused": name in paused,
            "paused_until": paused.get(name),
            "held_back": held.get(name, nothing_held()),
        }
        for name in sorted(names)
    ]
