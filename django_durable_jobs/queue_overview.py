"""Each queue at a glance: its jobs by status, its oldest pending job, its last hour.

What the admin's Queues page shows, kept fast on a job table of tens of
millions of rows:

- pending, waiting and dead jobs are counted exactly up to
  ``EXACT_COUNT_CAP`` (a LIMITed read of a partial index, so bounded work);
  a count that reaches the cap is replaced by PostgreSQL's estimate
  (``EXPLAIN``, from the table's statistics, which the migration's
  extended statistics on (queue, status) make per-queue), marked as such;
- running jobs are counted in full: there are at most as many as the
  workers' slots;
- the oldest pending job's age is one index probe per priority level;
- the last hour comes from the per-minute counts the workers keep
  (``QueueMinuteStats``), never from the job table.

One statement for the counts of every queue on the page, one for the last
hour, and one ``EXPLAIN`` per count past the cap.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from . import db
from .conf import jobs_settings
from .flow import parse_queues
from .models import Job, JobStatus, QueueMinuteStats

#: Counts up to this many jobs are exact; a queue with more shows an estimate.
EXACT_COUNT_CAP = 1_000
#: The oldest pending job is looked for among at most this many priority levels.
MAX_PRIORITIES = 64
#: Minutes of throughput the chart shows.
CHART_MINUTES = 60

_CAPPED = ("pending", "waiting", "dead")


@dataclass(frozen=True)
class Count:
    """A number of jobs: exact, or PostgreSQL's estimate (at least ``EXACT_COUNT_CAP``)."""

    value: int
    estimated: bool = False

    def __str__(self) -> str:
        return f"~{compact(self.value)}" if self.estimated else f"{self.value:,}"


@dataclass(frozen=True)
class QueueOverview:
    queue: str
    pending: Count
    running: Count
    waiting: Count
    dead: Count
    #: How long the oldest runnable pending job has waited; None: none is runnable.
    oldest_pending: timedelta | None
    #: ``(completed, failed)`` per minute, oldest first, ``CHART_MINUTES`` of them,
    #: the current minute last.
    minutes: list[tuple[int, int]] = field(default_factory=list)

    @property
    def completed_last_hour(self) -> int:
        return sum(completed for completed, _ in self.minutes)

    @property
    def failed_last_hour(self) -> int:
        return sum(failed for _, failed in self.minutes)

    def count(self, status: str) -> Count:
        """The count of ``status`` (pending, running, waiting or dead)."""
        value: Count = getattr(self, status)
        return value


def compact(number: int) -> str:
    """``1234`` as ``1.2k``, ``1234567`` as ``1.2M``: for estimates, whose digits mean little."""
    for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if number >= size:
            scaled = number / size
            text = f"{scaled:.1f}".removesuffix(".0") if scaled < 10 else f"{round(scaled):,}"
            return f"{text}{suffix}"
    return str(number)


def known_queues(using: str | None = None) -> set[str]:
    """Queues worth a row: declared in ``QUEUES``, holding unfinished or dead jobs, or with
    outcomes counted within the last ``CHART_MINUTES``. A few index probes."""
    alias = db.database_alias(using)
    since = timezone.now() - timedelta(minutes=CHART_MINUTES)
    return db.active_queues(alias, since) | set(parse_queues(jobs_settings.QUEUES))


def queue_overview(
    queues: Iterable[str], using: str | None = None, *, now: datetime | None = None
) -> dict[str, QueueOverview]:
    """``{queue: its overview}`` for each of ``queues``."""
    alias = db.database_alias(using)
    names = sorted(set(queues))
    if not names:
        return {}
    rows = db.queue_overview(alias, names, cap=EXACT_COUNT_CAP, max_priorities=MAX_PRIORITIES)
    minutes = per_minute(names, alias, now=now)
    overview = {}
    for row in rows:
        counts = {
            status: _count(alias, row.queue, status, getattr(row, status)) for status in _CAPPED
        }
        overview[row.queue] = QueueOverview(
            queue=row.queue,
            running=Count(row.running),
            oldest_pending=(
                None
                if row.oldest_pending_seconds is None
                else timedelta(seconds=row.oldest_pending_seconds)
            ),
            minutes=minutes[row.queue],
            **counts,
        )
    return overview


def _count(alias: str, queue: str, status: str, counted: int) -> Count:
    if counted < EXACT_COUNT_CAP:
        return Count(counted)
    return Count(max(estimate(alias, queue, status), counted), estimated=True)


def estimate(alias: str, queue: str, status: str) -> int:
    """PostgreSQL's estimate of the jobs of ``queue`` in ``status`` (reads no rows)."""
    queryset = Job.objects.using(alias).filter(queue=queue, status=JobStatus(status)).order_by()
    plan = json.loads(queryset.values("pk").explain(format="json"))
    return int(plan[0]["Plan"]["Plan Rows"])


def per_minute(
    queues: Sequence[str], using: str | None = None, *, now: datetime | None = None
) -> dict[str, list[tuple[int, int]]]:
    """``{queue: [(completed, failed), ...]}``: the last ``CHART_MINUTES`` minutes, oldest
    first and the current one last, 0 for a minute without a row."""
    alias = db.database_alias(using)
    current = (now or timezone.now()).replace(second=0, microsecond=0)
    first = current - timedelta(minutes=CHART_MINUTES - 1)
    series = {queue: [(0, 0)] * CHART_MINUTES for queue in queues}
    rows = (
        QueueMinuteStats.objects.using(alias)
        .filter(
            queue__in=list(queues), minute__gte=first, minute__lt=current + timedelta(minutes=1)
        )
        .values_list("queue", "minute", "completed", "failed")
    )
    for queue, minute, completed, failed in rows:
        index = int((minute - first).total_seconds() // 60)
        if 0 <= index < CHART_MINUTES:
            series[queue][index] = (completed, failed)
    return series
