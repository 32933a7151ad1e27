"""A job's attempts, one row each, from its error history and its own columns.

The ``errors`` column keeps one entry per failed attempt (oldest first,
the newest ``ERROR_HISTORY_LIMIT``): ``attempt``, ``at`` (when it ended),
``worker``, ``exception``, ``error`` and ``traceback``, written by
``worker/outcomes.py``. A completed attempt leaves no entry, and an entry
does not say how the job went on, so the rows read the rest from the job:
the next entry (a retry is the next attempt number; a smaller one means a
requeue in between), and for the newest, the job's status, ``attempts``,
``started_at`` and ``completed_at``. When an attempt started is known for
the latest claim only (``started_at``); the entries do not record it.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from django.utils import formats, timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..models import Job, JobStatus

#: The ``exception`` of the entry an attempt ended by a cancel writes (outcomes.cancelled_failure).
CANCELLED_EXCEPTION = "django_durable_jobs.exceptions.JobCancelled"


@dataclasses.dataclass
class TimelineRow:
    """One row: an attempt (``kind="attempt"``), a requeue, or what comes next."""

    kind: str
    outcome: str
    attempt: int | None = None
    worker: str = ""
    started: datetime | None = None
    ended: datetime | None = None
    error: str = ""
    exception: str = ""
    traceback: str = ""

    @property
    def duration(self) -> timedelta | None:
        if self.started is None or self.ended is None or self.ended < self.started:
            return None
        return self.ended - self.started

    @property
    def duration_text(self) -> str:
        """``"0.25 s"``, ``"12.0 s"``, ``"3 min 4 s"``, ``"2 h 5 min"``; empty when unknown."""
        duration = self.duration
        if duration is None:
            return ""
        seconds = duration.total_seconds()
        if seconds < 10:
            return f"{seconds:.2f} s"
        if seconds < 60:
            return f"{seconds:.1f} s"
        minutes, seconds = divmod(round(seconds), 60)
        if minutes < 60:
            return f"{minutes} min {seconds} s"
        hours, minutes = divmod(minutes, 60)
        return f"{hours} h {minutes} min"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_datetime(value)
    except ValueError:
        return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else ""


def _requeued() -> TimelineRow:
    return TimelineRow("requeue", _("requeued: attempts reset to 0"))


def attempt_timeline(job: Job) -> list[TimelineRow]:
    """The job's attempts, oldest first, then its current attempt or what comes next."""
    entries = [entry for entry in (job.errors or []) if isinstance(entry, dict)]
    rows: list[TimelineRow] = []
    for index, entry in enumerate(entries):
        attempt = _int(entry.get("attempt"))
        following = _int(entries[index + 1].get("attempt")) if index + 1 < len(entries) else None
        newest = index == len(entries) - 1
        row = TimelineRow(
            "attempt",
            _outcome(job, entry, attempt, following, newest),
            attempt=attempt,
            worker=_text(entry.get("worker")),
            ended=_time(entry.get("at")),
            error=_text(entry.get("error")),
            exception=_text(entry.get("exception")),
            traceback=_text(entry.get("traceback")),
        )
        # The latest claim's start, if that claim is this attempt (it began
        # before the entry's end: a released claim since would not).
        started = job.started_at
        if newest and attempt is not None and attempt == job.attempts and started is not None:
            row.started = started if row.ended is None or started <= row.ended else None
        rows.append(row)
        if attempt is not None and following is not None and following <= attempt:
            rows.append(_requeued())
    newest_attempt = _int(entries[-1].get("attempt")) if entries else None
    if newest_attempt is not None and job.attempts < newest_attempt:
        rows.append(_requeued())
    current = _current(job, entries, newest_attempt)
    if current is not None:
        rows.append(current)
    return rows


def _outcome(
    job: Job, entry: dict[str, Any], attempt: int | None, following: int | None, newest: bool
) -> str:
    if entry.get("exception") == CANCELLED_EXCEPTION:
        return _("cancelled while running")
    if attempt is None:
        return _("failed")
    if not newest:
        return _("failed, retried") if following == attempt + 1 else _("failed")
    if attempt == job.attempts:
        if job.status == JobStatus.DEAD:
            return _("failed, dead")
        if job.status == JobStatus.PENDING:
            return _("failed, retry scheduled")
    if attempt + 1 == job.attempts:
        return _("failed, retried")
    return _("failed")


def _current(job: Job, entries: list[dict[str, Any]], newest: int | None) -> TimelineRow | None:
    """The row of the attempt running or completed now, or of the next one, if any."""
    status = job.status
    if status == JobStatus.RUNNING:
        outcome = _("running")
        if job.cancel_requested_at is not None:
            outcome = _("running, cancel requested")
        return TimelineRow(
            "attempt",
            outcome,
            attempt=job.attempts,
            worker=job.lease_holder or "",
            started=job.started_at,
        )
    if status == JobStatus.COMPLETED:
        return TimelineRow(
            "attempt",
            _("completed"),
            attempt=job.attempts,
            started=job.started_at,
            ended=job.completed_at,
        )
    if status == JobStatus.PENDING:
        return TimelineRow(
            "next",
            _("next attempt, runnable from %(time)s") % {"time": _when(job.available_at)},
            attempt=job.attempts + 1,
        )
    if status == JobStatus.WAITING:
        waiting_on = job.waiting_on
        return TimelineRow(
            "next",
            ngettext(
                "waiting for %(count)d parent job",
                "waiting for %(count)d parent jobs",
                waiting_on,
            )
            % {"count": waiting_on},
            attempt=job.attempts + 1,
        )
    # Dead or cancelled: the newest entry is that end, unless the job ended
    # without an attempt (cancelled while pending or waiting, or set by hand).
    last = entries[-1] if entries else None
    ended_by_entry = last is not None and newest == job.attempts and newest is not None
    if status == JobStatus.CANCELLED and ended_by_entry and last is not None:
        ended_by_entry = last.get("exception") == CANCELLED_EXCEPTION
    if ended_by_entry:
        return None
    outcome = _("cancelled") if status == JobStatus.CANCELLED else _("dead")
    # The reason, when it is not the newest failure's (a parent's end, say).
    reason = _first_line(job.last_error)
    if last is not None and reason == _first_line(_text(last.get("error"))):
        reason = ""
    return TimelineRow("end", outcome, ended=job.completed_at, error=reason)


def _when(value: datetime | None) -> str:
    """A time as the admin shows its fields: in the current time zone, localised."""
    if value is None:
        return ""
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return str(formats.localize(value))
