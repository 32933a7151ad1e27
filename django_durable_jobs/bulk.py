"""Requeue or cancel every job matching a filter, in batches, without a list of ids.

"Requeue every dead job of type X from last night" may mean millions of
rows: reading their ids into memory, or changing them in one transaction
(locks held for minutes, a rollback that throws it all away), is not an
option. Here the matching jobs are walked newest first, a batch at a time,
by keyset on ``(created_at, id)``, the order of the job table's listing
indexes (the history partitions' by status, type, queue and creation; the
active partition's ``durable_jobs_created_idx`` and, for waiting and dead
jobs, ``durable_jobs_held_idx``), so each batch resumes where the last one stopped and
the whole run reads the matching range once. Each batch is its own
transaction: it locks its jobs in id order (the order an enqueue locks its
parents and a worker writes its outcomes, so none of them deadlocks with
it), checking the whole filter on the locked rows (the error text only
there: no index serves it), then changes them through
``operations.requeue_many`` / ``cancel_many``, the path of the admin's
actions, the REST API and the CLI, so dependents are re-waited or
cancelled and workers and waiters NOTIFYed exactly as there.

A job that changes state before its batch (claimed, requeued, finished by
hand) no longer matches and is left alone; jobs created after the run
started, and jobs that die again after their batch, are above the cursor
and are not visited either, so a run always ends. ``matched`` is the count
at the start (the planner's estimate beyond ``EXACT_COUNT_LIMIT`` rows), so
it may differ from what was changed.

Three doors: ``requeue_matching`` / ``cancel_matching`` (Python, with a
progress callback), ``manage.py jobs requeue --all`` / ``cancel --all``,
and the admin, which must not hold a web request for minutes: it enqueues
a job of a built-in type (``durable_jobs.bulk_requeue``,
``durable_jobs.bulk_cancel``, registered by ``django_durable_jobs/jobs.py``)
whose handler is ``run_job``: it stores its progress in its own ``result``
in each batch's transaction (the operator watches it on the job's page),
resumes from there when retried, and, cancelled, stops before committing
the batch in hand.
Bulk operations never touch jobs of those two types unless the filter
names the type: requeuing "all cancelled jobs" must not bring back an
earlier, cancelled bulk cancel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from . import audit, db, operations
from .authorization import Actor
from .exceptions import Discard, DurableJobsError
from .models import AuditEntry, Job, JobStatus

if TYPE_CHECKING:
    from .context import JobContext
    from .enqueueing import EnqueueResult

logger = logging.getLogger(__name__)

__all__ = [
    "BULK_CANCEL",
    "BULK_REQUEUE",
    "BULK_TYPES",
    "DEFAULT_BATCH_SIZE",
    "BulkProgress",
    "InvalidFilter",
    "JobFilter",
    "cancel_matching",
    "count_or_estimate",
    "requeue_matching",
    "run",
    "run_job",
    "search_condition",
    "start",
]

#: The built-in job types the admin enqueues (``django_durable_jobs/jobs.py``).
BULK_REQUEUE = "durable_jobs.bulk_requeue"
BULK_CANCEL = "durable_jobs.bulk_cancel"
BULK_TYPES = (BULK_REQUEUE, BULK_CANCEL)
#: Jobs changed per transaction: short row locks, and workers start on the
#: first batch while the rest is being changed.
DEFAULT_BATCH_SIZE = 1_000
MAX_BATCH_SIZE = 10_000
#: Matching jobs counted exactly up to this many; beyond, the planner's estimate.
EXACT_COUNT_LIMIT = 10_000

#: Operation -> (statuses it applies to, default status, the operations function).
_OPERATIONS: dict[str, tuple[tuple[str, ...], str, Callable[..., operations.BulkResult]]] = {
    "requeue": (tuple(operations.REQUEUE_FROM), JobStatus.DEAD, operations.requeue_many),
    # Running jobs are left out: a cancel of one is only a request (it ends
    # when its handler stops), not a change this count could report.
    "cancel": (tuple(operations.CANCEL_AT_ONCE), JobStatus.PENDING, operations.cancel_many),
}
_PAST = {"requeue": "requeued", "cancel": "cancelled"}
_TYPE_FOR = {"requeue": BULK_REQUEUE, "cancel": BULK_CANCEL}
_TEXT_FIELDS = ("status", "queue", "type", "error_contains", "search")
_TIME_FIELDS = ("created_after", "created_before")


class InvalidFilter(DurableJobsError, ValueError):
    """A bulk filter or option is invalid; nothing was changed. ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def search_condition(term: str) -> Q:
    """The admin's search: an exact job id, type or idempotency key, each served by an index.

    (Django's ``=field`` search is ``UPPER(field) = UPPER(term)``, which no
    index serves.) A UUID may be a job id or an idempotency key.
    """
    term = term.strip()
    condition = Q(type=term) | Q(idempotency_key=term)
    with contextlib.suppress(ValueError):
        condition |= Q(pk=uuid.UUID(term))
    return condition


@dataclasses.dataclass(frozen=True)
class JobFilter:
    """Which jobs a bulk operation applies to: every field given must match.

    ``created_after`` is inclusive, ``created_before`` exclusive (the admin's
    date drill-down is such a range). ``error_contains`` matches the last
    error's text, case-insensitively; ``search`` is the admin's exact search
    (``search_condition``). Times must be aware when ``USE_TZ`` is on.
    """

    status: str
    queue: str | None = None
    type: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    error_contains: str | None = None
    search: str | None = None

    def __post_init__(self) -> None:
        if self.status not in JobStatus.values:
            raise InvalidFilter(
                "status",
                f"unknown status {self.status!r}; choose from {', '.join(JobStatus.values)}",
            )
        # A plain str, not a JobStatus member: the filter is compared and shown.
        object.__setattr__(self, "status", JobStatus(self.status).value)
        for name in _TEXT_FIELDS[1:]:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidFilter(name, f"must be a non-empty string, not {value!r}")
        for name in _TIME_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, datetime):
                raise InvalidFilter(name, f"must be a datetime, not {value!r}")
            if settings.USE_TZ and timezone.is_naive(value):
                raise InvalidFilter(name, f"{value.isoformat()} has no time zone (ambiguous)")
        if (
            self.created_after is not None
            and self.created_before is not None
            and self.created_after >= self.created_before
        ):
            raise InvalidFilter("created_before", "must be later than created_after")

    def condition(self) -> Q:
        """Every field's condition: what a job must match to be changed."""
        condition = self.range_condition()
        if self.error_contains is not None:
            condition &= Q(last_error__icontains=self.error_contains)
        return condition

    def range_condition(self) -> Q:
        """The fields an index serves (all but ``error_contains``): what a batch walks.

        The planner cannot estimate a ``LIKE '%text%'``; with it in the
        batch's read, it guessed a few rows, chose to read every matching
        row and sort them for each batch, and a run over a million rows
        read the range again for every batch. Without it the read walks an
        index in order, and the text is checked on the locked rows.
        """
        condition = Q(status=self.status)
        if self.queue is not None:
            condition &= Q(queue=self.queue)
        if self.type is not None:
            condition &= Q(type=self.type)
        else:
            condition &= ~Q(type__in=BULK_TYPES)
        if self.created_after is not None:
            condition &= Q(created_at__gte=self.created_after)
        if self.created_before is not None:
            condition &= Q(created_at__lt=self.created_before)
        if self.search is not None:
            condition &= search_condition(self.search)
        return condition

    def queryset(self, using: str | None = None) -> QuerySet[Job]:
        """The matching jobs (no order)."""
        return Job.objects.using(db.database_alias(using)).filter(self.condition())

    def as_dict(self) -> dict[str, str]:
        """JSON-ready: the fields given, times as ISO 8601 (``from_dict`` reads it back)."""
        data: dict[str, str] = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if value is not None:
                data[item.name] = value.isoformat() if isinstance(value, datetime) else value
        return data

    @classmethod
    def from_dict(cls, data: Any) -> JobFilter:
        """A filter from ``as_dict``'s form (a bulk job's payload); ``InvalidFilter`` if bad."""
        if not isinstance(data, Mapping):
            raise InvalidFilter("filter", f"must be an object, not {data!r}")
        unknown = sorted(set(data) - set(_TEXT_FIELDS) - set(_TIME_FIELDS))
        if unknown:
            raise InvalidFilter("filter", f"unknown field(s) {', '.join(unknown)}")
        if "status" not in data:
            raise InvalidFilter("status", "is required")
        values = dict(data)
        for name in _TIME_FIELDS:
            text = values.get(name)
            if text is None:
                continue
            parsed = parse_datetime(text) if isinstance(text, str) else None
            if parsed is None:
                raise InvalidFilter(name, f"{text!r} is not an ISO 8601 date and time")
            values[name] = parsed
        return cls(**values)

    def describe(self) -> str:
        """In words, for messages and the CLI: "dead jobs of type t in queue q, ..."."""
        parts = [f"{self.status} jobs"]
        if self.type is not None:
            parts.append(f"of type {self.type}")
        if self.queue is not None:
            parts.append(f"in queue {self.queue}")
        if self.created_after is not None:
            parts.append(f"created from {self.created_after.isoformat()}")
        if self.created_before is not None:
            parts.append(f"created before {self.created_before.isoformat()}")
        if self.error_contains is not None:
            parts.append(f"whose last error contains {self.error_contains!r}")
        if self.search is not None:
            parts.append(f"matching {self.search!r}")
        return " ".join(parts)


@dataclasses.dataclass
class BulkProgress:
    """Where a bulk run is: what it matched at the start, what it changed so far.

    ``cursor`` is the ``(created_at, id)`` of the last job of the last batch
    read: the run goes on below it. ``as_dict``/``from_dict`` are the JSON
    form a bulk job keeps in its ``result``.
    """

    operation: str
    job_filter: JobFilter
    #: Matching jobs when the run started (an estimate if ``matched_is_estimate``).
    matched: int
    matched_is_estimate: bool = False
    #: Jobs requeued (or cancelled) so far.
    changed: int = 0
    batches: int = 0
    cursor: tuple[datetime, uuid.UUID] | None = None
    done: bool = False

    @property
    def verb(self) -> str:
        """``requeued`` or ``cancelled``: the key of ``changed`` in the JSON form."""
        return _PAST[self.operation]

    def as_dict(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "filter": self.job_filter.as_dict(),
            "matched": self.matched,
            "matched_is_estimate": self.matched_is_estimate,
            self.verb: self.changed,
            "batches": self.batches,
            "cursor": None
            if self.cursor is None
            else [self.cursor[0].isoformat(), str(self.cursor[1])],
            "done": self.done,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BulkProgress:
        """``as_dict``'s form read back; ``ValueError`` (or ``InvalidFilter``) if malformed."""
        operation = data["operation"]
        if operation not in _OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}")
        cursor = data.get("cursor")
        position = None
        if cursor is not None:
            created = parse_datetime(cursor[0])
            if created is None:
                raise ValueError(f"bad cursor {cursor!r}")
            position = (created, uuid.UUID(cursor[1]))
        return cls(
            operation=operation,
            job_filter=JobFilter.from_dict(data["filter"]),
            matched=int(data["matched"]),
            matched_is_estimate=bool(data.get("matched_is_estimate", False)),
            changed=int(data[_PAST[operation]]),
            batches=int(data["batches"]),
            cursor=position,
            done=bool(data.get("done", False)),
        )

    def describe(self) -> str:
        """``"requeued 2000 of 5000 matching jobs in 2 batch(es)"`` (about, for an estimate)."""
        about = "about " if self.matched_is_estimate else ""
        return (
            f"{self.verb} {self.changed} of {about}{self.matched} matching job(s) "
            f"in {self.batches} batch(es)"
        )


def count_or_estimate(queryset: QuerySet[Any], limit: int = EXACT_COUNT_LIMIT) -> tuple[int, bool]:
    """``(count, is_estimate)``: exact up to ``limit`` rows, else the planner's estimate.

    A ``COUNT(*)`` of millions of rows takes seconds; this one counts with
    ``LIMIT limit + 1`` (bounded work) and, when there are more rows, asks
    PostgreSQL's planner (``EXPLAIN``, which reads statistics, not rows).
    """
    queryset = queryset.order_by()
    exact = queryset.values("pk")[: limit + 1].count()
    if exact <= limit:
        return exact, False
    plan = json.loads(queryset.explain(format="json"))
    return max(int(plan[0]["Plan"]["Plan Rows"]), exact), True


def _check_operation(operation: str, job_filter: JobFilter) -> Callable[..., operations.BulkResult]:
    try:
        allowed, _default, apply = _OPERATIONS[operation]
    except KeyError:
        raise ValueError(f"unknown bulk operation {operation!r}") from None
    if job_filter.status not in allowed:
        raise InvalidFilter(
            "status",
            f"a bulk {operation} applies to {' or '.join(allowed)} jobs, not {job_filter.status}",
        )
    return apply


def run(
    operation: str,
    job_filter: JobFilter,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[BulkProgress], object] | None = None,
    using: str | None = None,
    resume: BulkProgress | None = None,
    actor: Actor | None = None,
) -> BulkProgress:
    """Apply ``operation`` (``"requeue"`` or ``"cancel"``) to every job ``job_filter`` matches.

    Batches of ``batch_size`` jobs, newest first, each in its own
    transaction (call it outside ``transaction.atomic()``, or the batches
    become savepoints of the caller's one transaction). ``on_batch(progress)``
    is called after each batch's change, inside its transaction: what it
    writes commits with the batch, and an exception from it rolls the batch
    back and ends the run (a bulk job stores its progress and checks for a
    cancel there). ``resume`` continues a run from its progress. Returns the
    final progress (``done`` True). ``InvalidFilter`` for a status the
    operation does not apply to or a bad ``batch_size``.

    ``actor`` (``manage.py jobs ... --all``): needs the operation's
    permission; the run is recorded in the audit trail when it starts
    (filter, matched) and its entry completed when it ends (changed).
    """
    apply = _check_operation(operation, job_filter)
    if actor is not None:
        actor.require(f"bulk_{operation}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise InvalidFilter("batch_size", f"must be an integer, not {batch_size!r}")
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise InvalidFilter("batch_size", f"must be from 1 to {MAX_BATCH_SIZE}, got {batch_size}")
    alias = db.database_alias(using)
    matching = job_filter.queryset(alias)
    walked = Job.objects.using(alias).filter(job_filter.range_condition())
    if resume is not None:
        if resume.operation != operation or resume.job_filter != job_filter:
            raise ValueError("resume: the progress of another operation or filter")
        progress = resume
    else:
        matched, estimate = count_or_estimate(matching)
        progress = BulkProgress(operation, job_filter, matched, estimate)
    entry = None
    if actor is not None:
        # Committed before the first batch: a run that dies half way is on the trail.
        (entry,) = audit.record(
            actor, f"bulk_{operation}", using=alias, details=_audit_details(progress)
        )
    while True:
        page = walked
        if progress.cursor is not None:
            created, pk = progress.cursor
            # created_at__lte, redundant beside the OR, is the index's range.
            below = Q(created_at__lt=created) | Q(created_at=created, pk__lt=pk)
            page = page.filter(below, created_at__lte=created)
        with transaction.atomic(using=alias):
            newest_first = page.order_by("-created_at", "-pk")
            rows = list(newest_first.values_list("created_at", "pk")[:batch_size])
            if not rows:
                break
            # Locked in id order, with the whole filter checked on the locked
            # rows: a job that moved on since the read above is left out, as
            # is one whose error does not match.
            locked = list(
                matching.filter(pk__in=[pk for _, pk in rows])
                .order_by("pk")
                .select_for_update()
                .values_list("pk", flat=True)
            )
            result = apply(locked, using=alias) if locked else operations.BulkResult()
            progress.changed += len(result.changed)
            progress.batches += 1
            progress.cursor = rows[-1]
            if on_batch is not None:
                on_batch(progress)
    progress.done = True
    if entry is not None:
        entry.details = _audit_details(progress)
        entry.save(using=alias, update_fields=["details"])
    logger.info(
        "Bulk %s done filter=%s %s",
        operation,
        json.dumps(job_filter.as_dict(), sort_keys=True),
        progress.describe(),
        extra={"bulk_operation": operation, "changed": progress.changed},
    )
    return progress


def requeue_matching(
    *,
    status: str = JobStatus.DEAD,
    queue: str | None = None,
    type: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    error_contains: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[BulkProgress], object] | None = None,
    using: str | None = None,
) -> BulkProgress:
    """Requeue every ``dead`` (or, with ``status="cancelled"``, cancelled) job matching.

    As ``operations.requeue_many`` does for each: ``pending``, attempts 0,
    runnable now, the error history kept, dependents waiting again. See
    ``run`` for the batches and ``on_batch``.
    """
    job_filter = JobFilter(
        status=status,
        queue=queue,
        type=type,
        created_after=created_after,
        created_before=created_before,
        error_contains=error_contains,
    )
    return run("requeue", job_filter, batch_size=batch_size, on_batch=on_batch, using=using)


def cancel_matching(
    *,
    status: str = JobStatus.PENDING,
    queue: str | None = None,
    type: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    error_contains: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_batch: Callable[[BulkProgress], object] | None = None,
    using: str | None = None,
) -> BulkProgress:
    """Cancel every ``pending`` (or, with ``status="waiting"``, waiting) job matching.

    As ``operations.cancel_many`` does for each: ``cancelled``, and the
    waiting jobs that depend on them too. Running jobs are not bulk
    cancelled (cancel them one by one: that only asks them to stop). See
    ``run`` for the batches and ``on_batch``.
    """
    job_filter = JobFilter(
        status=status,
        queue=queue,
        type=type,
        created_after=created_after,
        created_before=created_before,
        error_contains=error_contains,
    )
    return run("cancel", job_filter, batch_size=batch_size, on_batch=on_batch, using=using)


def _audit_details(progress: BulkProgress) -> dict[str, Any]:
    """A bulk run as its audit entry tells it: the filter, matched at the start, changed."""
    data = progress.as_dict()
    return {
        "filter": data["filter"],
        "matched": progress.matched,
        "matched_is_estimate": progress.matched_is_estimate,
        "changed": progress.changed,
        "done": progress.done,
    }


def start(
    operation: str,
    job_filter: JobFilter,
    *,
    actor: Actor,
    token: uuid.UUID,
    batch_size: int = DEFAULT_BATCH_SIZE,
    using: str | None = None,
) -> EnqueueResult:
    """Start a bulk ``operation`` as a durable job (the admin's door); one job per ``token``.

    ``actor`` needs the operation's permission (``PermissionDenied``). The
    job and its audit entry (who, the filter, how many matched) commit
    together; the job completes the entry with the count it changed.
    ``token`` becomes the idempotency key, so a form sent twice starts one
    run (``created`` False the second time).
    """
    from .enqueueing import enqueue_own

    actor.require(f"bulk_{operation}")
    job_type, payload = bulk_job_payload(
        operation, job_filter, batch_size=batch_size, requested_by=actor.name
    )
    alias = db.database_alias(using)
    with transaction.atomic(using=alias):
        result = enqueue_own(
            job_type, payload, idempotency_key=f"durable_jobs.bulk:{token}", using=alias
        )
        if result.created:
            matched, estimate = count_or_estimate(job_filter.queryset(alias))
            progress = BulkProgress(operation, job_filter, matched, estimate)
            audit.record(
                actor,
                f"bulk_{operation}",
                using=alias,
                jobs=[result.job.pk],
                details=_audit_details(progress),
            )
    return result


def _complete_audit_entry(job_id: uuid.UUID, progress: BulkProgress, alias: str) -> None:
    """The bulk job's entry gets the final count (the run's outcome, once)."""
    entry = (
        AuditEntry.objects.using(alias)
        .filter(job_id=job_id, action=f"bulk_{progress.operation}")
        .order_by("at", "id")
        .first()
    )
    if entry is not None:
        entry.details = {**entry.details, **_audit_details(progress)}
        entry.save(using=alias, update_fields=["details"])


def bulk_job_payload(
    operation: str,
    job_filter: JobFilter,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    requested_by: str = "",
) -> tuple[str, dict[str, Any]]:
    """The type and payload of a bulk job for ``operation`` on ``job_filter`` (checked now)."""
    _check_operation(operation, job_filter)
    payload: dict[str, Any] = {"filter": job_filter.as_dict(), "batch_size": batch_size}
    if requested_by:
        payload["requested_by"] = requested_by
    return _TYPE_FOR[operation], payload


def run_job(ctx: JobContext, operation: str) -> dict[str, Any]:
    """The handler of a bulk job: ``run`` with its progress in the job's own ``result``.

    Each batch's transaction also writes the progress (``as_dict``) to the
    job's row, so what the job page shows is exactly what is committed, and
    a retry (the worker died, or was stopped) resumes from it. Before each
    batch's commit it checks ``ctx``: a cancel of the bulk job rolls back
    the batch in hand and ends the job ``cancelled``. A payload that cannot
    be a filter makes the job ``dead`` at once (``Discard``).
    """
    try:
        job_filter = JobFilter.from_dict(ctx.payload.get("filter"))
        _check_operation(operation, job_filter)
    except InvalidFilter as exc:
        raise Discard(f"invalid bulk {operation} payload: {exc}") from None
    batch_size = ctx.payload.get("batch_size", DEFAULT_BATCH_SIZE)
    alias = db.database_alias()
    own = Job.objects.using(alias).filter(pk=ctx.id)
    resume = None
    stored = own.values_list("result", flat=True).first()
    if isinstance(stored, dict) and not stored.get("done"):
        try:
            resume = BulkProgress.from_dict(stored)
        except (KeyError, TypeError, ValueError):
            resume = None
        if resume is not None and (resume.operation, resume.job_filter) != (operation, job_filter):
            resume = None

    def save(progress: BulkProgress) -> None:
        ctx.check()
        own.filter(status=JobStatus.RUNNING).update(result=progress.as_dict(), updated_at=Now())

    try:
        final = run(
            operation, job_filter, batch_size=batch_size, on_batch=save, using=alias, resume=resume
        )
    except InvalidFilter as exc:
        raise Discard(f"invalid bulk {operation} payload: {exc}") from None
    _complete_audit_entry(ctx.id, final, alias)
    return final.as_dict()
