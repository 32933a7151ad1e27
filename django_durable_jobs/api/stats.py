"""Job counts and queue lag, for ``GET /api/jobs/stats``.

Free of DRF so that other front ends (the ``jobs`` CLI) can reuse it.
``job_stats`` reads what the admin's Queues page reads
(``queue_overview.py``: capped counts of each queue's unfinished and dead
jobs, the oldest runnable ``pending`` job's wait since it became available),
plus capped counts of the finished history, each replaced by the
planner's estimate past its cap: its cost does not grow with the history.
``health_stats``,
for ``/api/health``, counts the live workers and that oldest wait.
``queue_overview``, for ``GET /api/queues``, lists each queue with its
counts, its limits and its paused state. Both tell, per queue, how many
runnable jobs its flow control holds back now, and why (``held_back.py``).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.db.models import DurationField, ExpressionWrapper, Min
from django.db.models.functions import Now
from django.utils import timezone

from .. import db, metrics
from ..conf import jobs_settings
from ..flow import QueueLimits, parse_queues, queue_limits
from ..held_back import held_back, nothing_held
from ..models import Job, JobStatus, QueueState, WorkerProcess
from ..queue_overview import CHART_MINUTES, Count, estimate
from ..queue_overview import queue_overview as overview_of_queues

#: Finished jobs of one status counted exactly up to this many; past it, estimated.
FINISHED_COUNT_LIMIT = 10_000
#: The statuses of the history, which only pruning bounds.
_HISTORY = (JobStatus.COMPLETED, JobStatus.CANCELLED)
#: What ``queue_overview`` counts per queue (capped, or all of the running).
_UNFINISHED = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.WAITING, JobStatus.DEAD)
#: The key of a whole-table estimate in ``_finished_counts``' answer.
_ALL = ""


def _counts() -> dict[str, int]:
    return dict.fromkeys(JobStatus.values, 0)


def job_stats(using: str | None = None) -> dict[str, Any]:
    """Counts by status and by queue, and the oldest runnable pending job's wait.

    Returns ``{"total", "statuses", "queues", "oldest_pending_age_seconds",
    "estimated"}``; each queue also has its ``limits`` (``None``: none), whether
    it is paused, the runnable jobs its flow control holds back now
    (``held_back.py``), and its own ``estimated``.

    Bounded work, whatever the history, as the admin's Queues page: the
    queues are those ``db.active_queues`` finds by index probes (holding
    unfinished or dead jobs, or with outcomes in the last hour), the paused
    ones, and, while they are counted exactly, those with finished jobs;
    their pending, waiting and dead jobs are counted exactly up to
    ``EXACT_COUNT_CAP`` each, then estimated by the planner, their running
    jobs in full (at most the workers' slots). Completed and
    cancelled jobs, the history, are counted exactly while there are at most
    ``FINISHED_COUNT_LIMIT`` of a status (the newest of them, read through
    each history partition's status index); past that, each number of that status is the
    planner's estimate. ``estimated`` lists the statuses whose numbers are
    estimates.
    """
    alias = db.database_alias(using)
    paused = _paused(alias)
    finished = {status: _finished_counts(alias, status) for status in _HISTORY}
    since = timezone.now() - timedelta(minutes=CHART_MINUTES)
    names = db.active_queues(alias, since) | set(paused)
    for counts, is_estimate in finished.values():
        if not is_estimate:
            # Exact: every queue with such jobs is known (no more than the limit of them).
            names |= set(counts)
    overview = overview_of_queues(names, alias)
    queues: dict[str, dict[str, Any]] = {}
    statuses = _counts()
    estimated: set[str] = set()
    oldest: float | None = None
    for queue in sorted(names):
        row = overview.get(queue)
        entry: dict[str, Any] = {**_counts(), "estimated": []}
        for status in _UNFINISHED:
            count = row.count(status) if row is not None else Count(0)
            entry[status] = count.value
            if count.estimated:
                entry["estimated"].append(status)
        for status, (counts, is_estimate) in finished.items():
            if is_estimate:
                entry[status] = estimate(alias, queue, status)
                entry["estimated"].append(status)
            else:
                entry[status] = counts.get(queue, 0)
        if row is None or row.oldest_pending is None:
            entry["oldest_pending_age_seconds"] = None
        else:
            seconds = max(row.oldest_pending.total_seconds(), 0.0)
            entry["oldest_pending_age_seconds"] = seconds
            oldest = seconds if oldest is None else max(oldest, seconds)
        entry["total"] = sum(entry[name] for name in JobStatus.values)
        for name in JobStatus.values:
            statuses[name] += entry[name]
        estimated.update(entry["estimated"])
        queues[queue] = entry
    for status, (counts, is_estimate) in finished.items():
        if is_estimate:
            # The whole table's estimate: it also counts the queues not listed.
            statuses[status] = max(statuses[status], counts[_ALL])
    limits = queue_limits()
    held = held_back(alias, paused)
    for queue, entry in queues.items():
        entry["limits"] = _limits_of(queue, limits)
        entry["paused"] = queue in paused
        entry["paused_until"] = paused.get(queue)
        entry["held_back"] = held.get(queue, nothing_held())
        entry["estimated"] = [s for s in JobStatus.values if s in entry["estimated"]]
    return {
        "total": sum(statuses.values()),
        "statuses": statuses,
        "queues": queues,
        "oldest_pending_age_seconds": oldest,
        "estimated": [s for s in JobStatus.values if s in estimated],
    }


def _finished_counts(alias: str, status: str) -> tuple[dict[str, int], bool]:
    """``({queue: count}, False)`` of the ``status`` jobs if there are at most
    ``FINISHED_COUNT_LIMIT``; else ``({_ALL: the planner's estimate}, True)``.

    The newest first (``ORDER BY created_at DESC``), so that the status index
    serves the LIMIT: at most the limit's entries read, never a scan of the history.
    """
    jobs = Job.objects.using(alias).filter(status=status).order_by("-created_at")
    queues = list(jobs.values_list("queue", flat=True)[: FINISHED_COUNT_LIMIT + 1])
    if len(queues) <= FINISHED_COUNT_LIMIT:
        return dict(Counter(queues)), False
    plan = json.loads(Job.objects.using(alias).filter(status=status).explain(format="json"))
    return {_ALL: max(int(plan[0]["Plan"]["Plan Rows"]), len(queues))}, True


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
