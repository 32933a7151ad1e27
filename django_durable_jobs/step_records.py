"""What the doors show of a job's durable steps: its step records, and why it waits.

One reading for every door (the REST job detail, ``manage.py jobs show``,
the admin's job page), so they agree. Bounded: at most ``STEPS_SHOWN``
records (the first ones, by position) and ``PARENTS_SHOWN`` parents; the
records' results are never read, only their size.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from django.utils import timezone

from . import db
from .models import DependencyKind, Job, JobDependency, JobStatus, JobStep

#: Step records a door shows at most (``steps_truncated`` says there are more).
STEPS_SHOWN = 1_000
#: Unfinished parents ``waiting_for`` lists at most.
PARENTS_SHOWN = 1_000
#: The columns a door shows; never ``result``.
STEP_FIELDS = (
    "name",
    "kind",
    "attempt",
    "started_at",
    "finished_at",
    "status",
    "error",
    "result_bytes",
)

#: The statuses in which ``Job.waiting_for`` means something.
SUSPENDED_STATUSES = (JobStatus.PENDING, JobStatus.WAITING)


class Steps(NamedTuple):
    rows: list[JobStep]
    truncated: bool


def job_steps(job: Job, *, limit: int | None = None) -> Steps:
    """The job's first ``limit`` (``STEPS_SHOWN``) records, by position then id, without results."""
    limit = STEPS_SHOWN if limit is None else limit
    rows = list(
        JobStep.objects.using(job._state.db or db.database_alias())
        .filter(job_id=job.pk)
        .only("id", "position", *STEP_FIELDS)
        .order_by("position", "id")[: limit + 1]
    )
    return Steps(rows[:limit], len(rows) > limit)


def step_names(job: Job, *, limit: int = STEPS_SHOWN) -> list[str]:
    """The job's step names, by position (what "retry from step" offers)."""
    return list(
        JobStep.objects.using(job._state.db or db.database_alias())
        .filter(job_id=job.pk)
        .order_by("position", "id")
        .values_list("name", flat=True)[:limit]
    )


def step_as_dict(step: JobStep) -> dict[str, Any]:
    """A record as JSON-ready data (the CLI's ``--json``; the API has its serializer)."""
    return {
        "name": step.name,
        "kind": step.kind,
        "attempt": step.attempt,
        "started_at": step.started_at.isoformat() if step.started_at else None,
        "finished_at": step.finished_at.isoformat() if step.finished_at else None,
        "status": step.status,
        "error": step.error,
        "result_bytes": step.result_bytes,
    }


def waiting_for(job: Job) -> dict[str, Any] | None:
    """Why the job waits, or ``None`` when it does not.

    ``{"until": time}`` (a sleep), ``{"event": key}`` (with ``"deadline"``
    when the wait has a timeout), ``{"job": id}`` (a child job): the
    suspension's own ``Job.waiting_for``, while the job is pending or
    waiting. ``{"parents": [ids]}``: a job waiting for the ``depends_on``
    parents not finished yet (the first ``PARENTS_SHOWN``, oldest first).

    A pending job already due (``available_at`` passed: a sleep, or an event
    wait's deadline, that is over) waits for nothing: it is runnable, and
    ``None`` is shown, though its column keeps the suspension's reason until
    its next run's first step call clears it (the claim does not pay for it).
    """
    if job.status not in SUSPENDED_STATUSES:
        return None
    if job.waiting_for:
        if job.status == JobStatus.PENDING and job.available_at <= timezone.now():
            return None
        return dict(job.waiting_for)
    if job.status != JobStatus.WAITING:
        return None
    parents = (
        JobDependency.objects.using(job._state.db or db.database_alias())
        .filter(child_id=job.pk, kind=DependencyKind.DEPENDS_ON, resolved=False)
        .order_by("id")
        .values_list("parent_id", flat=True)[:PARENTS_SHOWN]
    )
    return {"parents": [str(pk) for pk in parents]}


def describe_waiting_for(reason: dict[str, Any] | None) -> str:
    """``waiting_for`` in words: what ``jobs show`` and the admin print."""
    if not reason:
        return ""
    if "until" in reason:
        return f"sleeping until {reason['until']}"
    if "event" in reason:
        deadline = reason.get("deadline")
        text = f"waiting for event {reason['event']!r}"
        return f"{text} (until {deadline})" if deadline else text
    if "job" in reason:
        return f"waiting for child job {reason['job']}"
    if "parents" in reason:
        parents = reason["parents"]
        return f"waiting for {len(parents)} parent job(s)" + (
            f": {', '.join(map(str, parents[:10]))}" + (", ..." if len(parents) > 10 else "")
            if parents
            else ""
        )
    return str(reason)


def child_id(reason: dict[str, Any] | None) -> uuid.UUID | None:
    """The child job's id of a ``{"job": id}`` reason (for a link), or ``None``."""
    if not reason or "job" not in reason:
        return None
    try:
        return uuid.UUID(str(reason["job"]))
    except ValueError:
        return None
