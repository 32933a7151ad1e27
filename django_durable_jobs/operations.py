"""What operators do to jobs: requeue (from a step, too), cancel, run now.

The REST API, the admin and the CLI all call these, so a rule (which
states a job may leave, what is reset) lives in one place. Each one is a
single conditional UPDATE: the state check and the change cannot be
separated by a worker's claim.

The doors pass an ``actor`` (``authorization.Actor``): its permission for
the operation is checked here, and each job changed gets an audit entry in
the same transaction. Without one (the package's own bulk runs, which
record their run as a whole), nothing is checked or recorded.
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

from . import audit, db, hooks
from .authorization import Actor
from .exceptions import DurableJobsError
from .models import EventWaiter, Job, JobStatus, JobStep

logger = logging.getLogger(__name__)

REQUEUE_FROM = (JobStatus.DEAD, JobStatus.CANCELLED)
#: Pending and waiting jobs are cancelled at once; running ones are asked to stop.
CANCEL_AT_ONCE = (JobStatus.PENDING, JobStatus.WAITING)
CANCEL_FROM = (*CANCEL_AT_ONCE, JobStatus.RUNNING)
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


class UnknownStep(DurableJobsError, ValueError):
    """A retry from a step named a step the job has no record of (the API answers 400)."""

    def __init__(self, job: Job, name: str, known: Iterable[str]) -> None:
        known = list(known)
        listed = ", ".join(repr(n) for n in known[:20]) + (", ..." if len(known) > 20 else "")
        super().__init__(
            f"Job {job.pk} has no step {name!r}"
            + (f"; its steps: {listed}." if known else ": it has no recorded steps.")
        )
        self.job = job
        self.name = name


_PAST = {"requeue": "requeued", "cancel": "cancelled", "run now": "run now"}
#: Operation -> its action in authorization.py and the audit trail.
ACTIONS = {"requeue": "requeue", "cancel": "cancel", "run now": "run_now"}


@dataclass
class BulkResult:
    """How many jobs an operation changed, and how many it skipped for their state.

    For a cancel, ``changed`` are the jobs cancelled at once (pending) and
    ``requested`` the running ones asked to stop (they end ``cancelled`` when
    their handler stops, see ``cancel``).
    """

    changed: list[uuid.UUID] = field(default_factory=list)
    skipped: int = 0
    requested: list[uuid.UUID] = field(default_factory=list)


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
            "cancel_requested_at": None,
            # It runs from the top: whatever it waited for when it ended
            # (a cancelled sleeper) is no longer so.
            "waiting_for": None,
            "updated_at": Now(),
        }
    if operation == "cancel":
        # Running ones are _apply's (request_cancel).
        return CANCEL_AT_ONCE, {
            "status": JobStatus.CANCELLED,
            "completed_at": Now(),
            "updated_at": Now(),
        }
    if operation == "run now":
        return RUN_NOW_FROM, {"available_at": Now(), "updated_at": Now()}
    raise ValueError(f"unknown operation {operation!r}")


def _apply(
    operation: str,
    job_ids: Iterable[uuid.UUID | str],
    using: str | None,
    actor: Actor | None = None,
) -> BulkResult:
    ids = list(job_ids)
    allowed, changes = _changes(operation)
    alias = db.database_alias(using)
    if actor is not None:
        actor.require(ACTIONS[operation])

    def apply_once() -> tuple[list[uuid.UUID], list[uuid.UUID], int]:
        """The change in one transaction (a savepoint inside the caller's)."""
        with transaction.atomic(using=alias):
            matching = Job.objects.using(alias).filter(pk__in=ids)
            # Locked before the change: an enqueue of a child then either came
            # first (release_dependents, a later statement, sees it) or waits,
            # and sees the job cancelled.
            locked = dict(
                matching.filter(status__in=allowed)
                .values_list("pk", "dependent_count")
                .select_for_update()
            )
            changed = list(locked)
            requested: list[uuid.UUID] = []
            descendants: set[uuid.UUID] = set()
            if operation == "cancel":
                # Running jobs: one UPDATE fenced on status='running' sets
                # cancel_requested_at and NOTIFYs their workers at commit; a job
                # that finished meanwhile is not matched (and so is skipped).
                running = set(_uuids(ids)) - set(changed)
                if running:
                    requested = sorted(db.request_cancel(alias, sorted(running)))
            if changed:
                Job.objects.using(alias).filter(pk__in=changed).update(**changes)
                if operation == "cancel":
                    # Their waiting children are cancelled (or, with "run", counted
                    # done), and theirs, in this transaction.
                    descendants = db.release_dependents(
                        alias, {pk: JobStatus.CANCELLED for pk, count in locked.items() if count}
                    )
                    # A job cancelled while suspended in wait_for_event: its waiter
                    # row goes with the wait (by primary key; no emit will wake it).
                    EventWaiter.objects.using(alias).filter(job_id__in=changed).delete()
                    # Wake their waiters (wait(), ?wait=) at commit, as
                    # record_outcomes does for the jobs a worker finishes.
                    db.notify_finished(alias, changed)
                else:
                    if operation == "requeue":
                        db.rewait_dependents(alias, [pk for pk, count in locked.items() if count])
                        # A job cancelled while it waited for an event: its next
                        # run waits (or not) afresh.
                        EventWaiter.objects.using(alias).filter(job_id__in=changed).delete()
                    queues = set(
                        Job.objects.using(alias)
                        .filter(pk__in=changed)
                        .values_list("queue", flat=True)
                    )
                    db.notify(alias, queues)
            if actor is not None:
                # In the change's transaction: the change and its entries commit together.
                audit.record(actor, ACTIONS[operation], using=alias, jobs=changed)
                if requested:
                    audit.record(
                        actor,
                        ACTIONS[operation],
                        using=alias,
                        jobs=requested,
                        details={"running": True},
                    )
            done = [*changed, *requested]
            skipped = matching.filter(~Q(pk__in=done)).count() if len(done) < len(ids) else 0
            if operation == "cancel" and changed:
                # Tell the finished listeners (a cancelled Django task reads as
                # FAILED), once the cancel is committed (the caller's, if any).
                # Their descendants cancelled with them too: they never ran.
                finished = [*changed, *sorted(descendants)]
                transaction.on_commit(
                    functools.partial(hooks.jobs_finished, finished, alias), alias
                )
        return changed, requested, skipped

    # Again when a job it waited for was finished meanwhile by its worker
    # (its row moved to a history partition: db.retrying_moves).
    changed, requested, skipped = db.retrying_moves(alias, apply_once)
    for job_id in changed:
        logger.info("Job %s id=%s", _PAST[operation], job_id, extra={"job_id": str(job_id)})
    for job_id in requested:
        logger.info("Job cancel requested id=%s", job_id, extra={"job_id": str(job_id)})
    return BulkResult(changed=changed, skipped=skipped, requested=requested)


def _uuids(values: Iterable[uuid.UUID | str]) -> list[uuid.UUID]:
    """Ids as UUIDs (a malformed one matches no job, as with the ORM's filter)."""
    result = []
    for value in values:
        try:
            result.append(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except ValueError:
            continue
    return result


def _one(operation: str, job_id: uuid.UUID | str, using: str | None, actor: Actor | None) -> Job:
    alias = db.database_alias(using)
    result = _apply(operation, [job_id], alias, actor)
    job = Job.objects.using(alias).get(pk=job_id)  # Job.DoesNotExist for an unknown id
    if not result.changed and not result.requested:
        allowed = CANCEL_FROM if operation == "cancel" else _changes(operation)[0]
        raise JobStateError(job, operation, allowed)
    return job


def requeue(
    job_id: uuid.UUID | str,
    *,
    from_step: str | None = None,
    using: str | None = None,
    actor: Actor | None = None,
) -> Job:
    """Put a ``dead`` or ``cancelled`` job back to ``pending`` with attempts reset to 0.

    Its dependents still waiting (those with ``on_parent_failure="run"``
    had counted its end as done) wait for it again, and proceed when it
    completes; the ones cancelled when it ended stay cancelled (requeue
    them too). It runs at once, whatever its own parents: a requeue is an
    operator's decision. Its recorded steps are kept: the next run replays
    them.

    ``from_step``: retry from that step (a name of the job's steps, as the
    job's page lists them): its record and every record written after it
    (by position, then id) are deleted in the requeue's transaction, so the
    next run calls those steps again and replays the ones before. The
    actor needs ``durable_jobs.requeue_job``; the trail records action
    ``retry_from_step`` with ``{"from_step": name}``.

    Raises ``Job.DoesNotExist``, ``JobStateError`` (not dead or cancelled)
    or ``UnknownStep``.
    """
    if from_step is None:
        return _one("requeue", job_id, using, actor)
    alias = db.database_alias(using)
    if actor is not None:
        actor.require("retry_from_step")
    with transaction.atomic(using=alias):
        # The row lock first: no other requeue (or retry) of this job
        # interleaves with the steps' delete below.
        job = Job.objects.using(alias).select_for_update().get(pk=job_id)
        if job.status not in REQUEUE_FROM:
            raise JobStateError(job, "requeue", REQUEUE_FROM)
        steps = JobStep.objects.using(alias).filter(job_id=job.pk)
        step = steps.filter(name=from_step).only("id", "position").first()
        if step is None:
            raise UnknownStep(job, from_step, steps.values_list("name", flat=True)[:21])
        forgotten, _ = steps.filter(
            Q(position__gt=step.position) | Q(position=step.position, id__gte=step.id)
        ).delete()
        _apply("requeue", [job.pk], alias)
        if actor is not None:
            audit.record(
                actor,
                "retry_from_step",
                using=alias,
                jobs=[job.pk],
                details={"from_step": from_step},
            )
        job.refresh_from_db(using=alias)
    logger.info(
        "Job retried from step id=%s step=%s forgotten=%s", job.pk, from_step, forgotten,
        extra={"job_id": str(job.pk)},
    )  # fmt: skip
    return job


def cancel(job_id: uuid.UUID | str, *, using: str | None = None, actor: Actor | None = None) -> Job:
    """Cancel a ``pending`` or ``waiting`` job at once, or ask a ``running`` one to stop.

    The waiting jobs that depend on a job cancelled at once are cancelled
    too, down to their own dependents, in the same transaction (or, those
    enqueued with ``on_parent_failure="run"``, count it as done).

    A running job gets ``cancel_requested_at`` (kept if already set) and its
    worker is notified at commit: the handler's ``ctx.cancelled`` turns True
    within about a second and the attempt ends ``cancelled`` (never retried)
    when the handler stops, or when the watchdog takes it after the time
    limit's grace (``TIMEOUT_GRACE_SECONDS``). The job returned is then still
    ``running``, with ``cancel_requested_at`` set. Raises ``Job.DoesNotExist``,
    or ``JobStateError`` for a finished job.
    """
    return _one("cancel", job_id, using, actor)


def run_now(
    job_id: uuid.UUID | str, *, using: str | None = None, actor: Actor | None = None
) -> Job:
    """Make a ``pending`` job (delayed, or waiting for a retry) runnable at once."""
    return _one("run now", job_id, using, actor)


def requeue_many(
    job_ids: Iterable[uuid.UUID | str], *, using: str | None = None, actor: Actor | None = None
) -> BulkResult:
    return _apply("requeue", job_ids, using, actor)


def cancel_many(
    job_ids: Iterable[uuid.UUID | str], *, using: str | None = None, actor: Actor | None = None
) -> BulkResult:
    return _apply("cancel", job_ids, using, actor)


def run_now_many(
    job_ids: Iterable[uuid.UUID | str], *, using: str | None = None, actor: Actor | None = None
) -> BulkResult:
    return _apply("run now", job_ids, using, actor)
