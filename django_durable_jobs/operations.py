"""What operators do to jobs: requeue, cancel, run now.

The REST API, the admin and the CLI all call these, so a rule (which
states a job may leave, what is reset) lives in one place. Each one is a
single conditional UPDATE: the state check and the change cannot be
separated by a worker's claim.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from . import db, hooks
from .exceptions import DurableJobsError
from .models import Job, JobStatus

logger = logging.getLogger(__name__)

REQUEUE_FROM = (JobStatus.DEAD, JobStatus.CANCELLED)
CANCEL_FROM = (JobStatus.PENDING,)
RUN_NOW_FROM = (JobStatus.PENDING,)


class JobStateError(DurableJobsError):
    """The job is not in a state this operation applies to (the API answers 409)."""

    def __init__(self, job: Job, operation: str, allowed: Iterable[str]) -> None:
        allowed = list(allowed)
        super().__init__(
            f"Cannot {operation} job {job.pk}: it is {job.status}; only "
            f"{' or '.join(allowed)} jobs can be {_PAST[operation]}."
        )
        self.job = job
        self.operation = operation
        self.allowed = allowed


_PAST = {"requeue": "requeued", "cancel": "cancelled", "run now": "run now"}


@dataclass
class BulkResult:
    """How many jobs an operation changed, and how many it skipped for their state."""

    changed: list[uuid.UUID] = field(default_factory=list)
    skipped: int = 0


def _changes(operation: str) -> tuple[tuple[str, ...], dict[str, Any]]:
    if operation == "requeue":
        # Back to the start: attempts 0, runnable now; the error history
        # stays, so the next failure reads as the story's continuation.
        return REQUEUE_FROM, {
            "status": JobStatus.PENDING,
            "attempts": 0,
            "available_at": Now(),
            "completed_at": None,
            "result": None,
            "lease_holder": None,
            "lease_expires_at": None,
            "lease_token": None,
            "updated_at": Now(),
        }
    if operation == "cancel":
        return CANCEL_FROM, {
            "status": JobStatus.CANCELLED,
            "completed_at": Now(),
            "updated_at": Now(),
        }
    if operation == "run now":
        return RUN_NOW_FROM, {"available_at": Now(), "updated_at": Now()}
    raise ValueError(f"unknown operation {operation!r}")


def _apply(operation: str, job_ids: Iterable[uuid.UUID | str], using: str | None) -> BulkResult:
    ids = list(job_ids)
    allowed, changes = _changes(operation)
    alias = db.database_alias(using)
    with transaction.atomic(using=alias):
        matching = Job.objects.using(alias).filter(pk__in=ids)
        changed = list(
            matching.filter(status__in=allowed).values_list("pk", flat=True).select_for_update()
        )
        if changed:
            Job.objects.using(alias).filter(pk__in=changed).update(**changes)
            if operation != "cancel":
                queues = set(
                    Job.objects.using(alias).filter(pk__in=changed).values_list("queue", flat=True)
                )
                db.notify(alias, queues)
        skipped = matching.filter(~Q(pk__in=changed)).count() if len(changed) < len(ids) else 0
        if operation == "cancel" and changed:
            # Tell the finished listeners (a cancelled Django task reads as
            # FAILED), once the cancel is committed (the caller's, if any).
            transaction.on_commit(functools.partial(hooks.jobs_finished, changed, alias), alias)
    for job_id in changed:
        logger.info("Job %s id=%s", _PAST[operation], job_id, extra={"job_id": str(job_id)})
    return BulkResult(changed=changed, skipped=skipped)


def _one(operation: str, job_id: uuid.UUID | str, using: str | None) -> Job:
    alias = db.database_alias(using)
    result = _apply(operation, [job_id], alias)
    job = Job.objects.using(alias).get(pk=job_id)  # Job.DoesNotExist for an unknown id
    if not result.changed:
        allowed, _ = _changes(operation)
        raise JobStateError(job, operation, allowed)
    return job


def requeue(job_id: uuid.UUID | str, *, using: str | None = None) -> Job:
    """Put a ``dead`` or ``cancelled`` job back to ``pending`` with attempts reset to 0.

    Raises ``Job.DoesNotExist`` or ``JobStateError``.
    """
    return _one("requeue", job_id, using)


def cancel(job_id: uuid.UUID | str, *, using: str | None = None) -> Job:
    """Cancel a ``pending`` job. A running job cannot be cancelled (yet)."""
    return _one("cancel", job_id, using)


def run_now(job_id: uuid.UUID | str, *, using: str | None = None) -> Job:
    """Make a ``pending`` job (delayed, or waiting for a retry) runnable at once."""
    return _one("run now", job_id, using)


def requeue_many(job_ids: Iterable[uuid.UUID | str], *, using: str | None = None) -> BulkResult:
    return _apply("requeue", job_ids, using)


def cancel_many(job_ids: Iterable[uuid.UUID | str], *, using: str | None = None) -> BulkResult:
    return _apply("cancel", job_ids, using)


def run_now_many(job_ids: Iterable[uuid.UUID | str], *, using: str | None = None) -> BulkResult:
    return _apply("run now", job_ids, using)
