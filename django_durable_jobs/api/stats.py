"""Job counts and queue lag, for ``GET /api/jobs/stats``.

Free of DRF so that other front ends (the ``jobs`` CLI) can reuse it.
Two grouped queries: counts by queue and status, and, per queue, how long
the oldest runnable ``pending`` job has been waiting since it became
available (a delayed job is not late before its ``available_at``).
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.db.models import Count, DurationField, ExpressionWrapper, Min
from django.db.models.functions import Now

from .. import db
from ..models import Job, JobStatus


def _counts() -> dict[str, int]:
    return dict.fromkeys(JobStatus.values, 0)


def job_stats(using: str | None = None) -> dict[str, Any]:
    """Counts by status and by queue, and the oldest runnable pending job's wait.

    Returns ``{"total", "statuses", "queues", "oldest_pending_age_seconds"}``.
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
    return {
        "total": sum(statuses.values()),
        "statuses": statuses,
        "queues": dict(sorted(queues.items())),
        "oldest_pending_age_seconds": oldest,
    }


#: A worker is live while its last heartbeat is younger than its lease
#: (three heartbeat intervals: one or two missed beats are not a death).
HEALTH_SQL = """
SELECT
    (SELECT count(*) FROM durable_jobs_worker
     WHERE last_heartbeat > now() - make_interval(secs => lease_seconds)),
    (SELECT EXTRACT(EPOCH FROM now() - min(available_at)) FROM durable_jobs_job
     WHERE status = 'pending' AND available_at <= now())
"""


def health_stats(using: str | None = None) -> dict[str, Any]:
    """Live workers and the oldest runnable pending job's age, in one query.

    Raises ``DatabaseError`` when the database does not answer.
    """
    with connections[db.database_alias(using)].cursor() as cursor:
        cursor.execute(HEALTH_SQL)
        live, age = cursor.fetchone()
    return {
        "live_workers": int(live),
        "oldest_pending_age_seconds": None if age is None else max(float(age), 0.0),
    }
