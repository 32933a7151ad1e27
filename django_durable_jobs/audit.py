"""The audit trail: who did what to which job or queue, when, through which door.

``record`` is called by the operations themselves, inside the transaction
of the change: ``operations`` (requeue, cancel, run now) and ``bulk`` when a
door passes an ``Actor`` (the admin, the REST API and ``manage.py jobs``
always do; the package's own bulk batches pass none, the run being
recorded once as a whole); ``pausing`` always, a call from Python code
without an actor being recorded as door ``python``, actor ``os:<login>``.
The worker never records (its claims and outcomes are the jobs' own
history), so the trail costs the hot path nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from django.db.models import QuerySet

from .authorization import Actor
from .models import AuditEntry

#: Rows per INSERT when an action touches many jobs (an admin selection).
_BATCH = 1_000


def record(
    actor: Actor,
    action: str,
    *,
    using: str,
    jobs: Iterable[uuid.UUID] = (),
    queue: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> list[AuditEntry]:
    """Write one entry per job in ``jobs`` (or one for the queue, or one alone).

    Call it inside the change's transaction: the entries commit with it.
    """
    base = {
        "action": action,
        "door": actor.door,
        "actor": actor.name[:200],
        "user_pk": actor.user_pk,
        "address": actor.address,
        "queue": queue,
        "details": dict(details or {}),
    }
    ids = list(jobs)
    entries = [AuditEntry(job_id=job_id, **base) for job_id in ids] or [AuditEntry(**base)]
    return AuditEntry.objects.using(using).bulk_create(entries, batch_size=_BATCH)


def entries(
    *,
    using: str,
    job: uuid.UUID | None = None,
    queue: str | None = None,
    action: str | None = None,
    actor: str | None = None,
) -> QuerySet[AuditEntry]:
    """The trail, newest first, narrowed by job, queue, action or actor (exact matches)."""
    rows = AuditEntry.objects.using(using).all()
    if job is not None:
        rows = rows.filter(job_id=job)
    if queue is not None:
        rows = rows.filter(queue=queue)
    if action is not None:
        rows = rows.filter(action=action)
    if actor is not None:
        rows = rows.filter(actor=actor)
    return rows.order_by("-at", "-id")


def as_dict(entry: AuditEntry) -> dict[str, Any]:
    """An entry as JSON-ready data (the CLI's ``--json``; the API has its serializer)."""
    return {
        "id": entry.id,
        "at": entry.at.isoformat(),
        "action": entry.action,
        "door": entry.door,
        "actor": entry.actor,
        "address": entry.address,
        "job_id": None if entry.job_id is None else str(entry.job_id),
        "queue": entry.queue,
        "details": entry.details,
    }
