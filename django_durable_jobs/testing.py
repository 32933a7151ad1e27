"""Helpers for a project's own tests of its jobs: what was enqueued, and running jobs here.

They work where a project's tests run: inside Django's ``TestCase`` and
pytest-django's ``db`` fixture, on the test's connection and in its
transaction, so they see the data the test made and leave it uncommitted.
A worker process (``runjobworker --burst``) cannot: its connection sees none
of a ``TestCase``'s rows.

``run_jobs()`` runs jobs through the worker's own path (the handler, the
retry policy, dead and cancelled outcomes, dependencies released, durable
steps recorded, ``result`` stored), one attempt at a time, on this thread.
Its clock passes over the waits a test should not sit through: a retry's
delay and a ``ctx.sleep`` end at once. What it does not simulate: time
limits (no watchdog runs: a handler runs to its end), cancelling a running
job (``ctx.check()`` never raises; a job cancelled before ``run_jobs`` is not
run), queue limits, rate limits and per-key concurrency (each job runs when
its turn comes), and paused queues are left alone (their jobs are not run).
An event wait ends when the test emits the event (``emit_event``), or at its
timeout, which the clock does not pass over (the wait would time out).

See ``docs/guides/testing.md``.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import F, Q, QuerySet
from django.db.models.functions import Least, Now

from . import db
from .backoff import RetryPolicy
from .conf import jobs_settings
from .models import Job, JobStatus, JobStep, StepKind, StepStatus

__all__ = [
    "RanJob",
    "assert_enqueued",
    "assert_not_enqueued",
    "enqueued_jobs",
    "run_jobs",
]

#: The worker id that ``run_jobs()`` writes (``lease_holder``, error entries, logs).
WORKER_ID = "testing.run_jobs"
#: What "enqueued" means here: jobs that have not run to an end yet.
ENQUEUED_STATUSES = (JobStatus.PENDING, JobStatus.WAITING)
#: Jobs listed in a failed assertion's message.
LISTED = 20


@dataclass(frozen=True)
class RanJob:
    """One attempt ``run_jobs()`` ran, and where it left the job."""

    id: uuid.UUID
    type: str
    queue: str
    #: The attempt's number (1 for the first).
    attempt: int
    #: The job's status after it: ``completed``, ``dead``, ``cancelled``; ``pending``
    #: for a retry to come or a suspension (a sleep, a wait), ``waiting`` for a child.
    status: str
    result: Any
    last_error: str

    @property
    def job(self) -> Job:
        """The job's row as it is now."""
        return Job.objects.get(pk=self.id)


def enqueued_jobs(
    *,
    type: str | None = None,
    queue: str | None = None,
    payload: Mapping[str, Any] | None = None,
    using: str | None = None,
    **filters: Any,
) -> list[Job]:
    """Jobs enqueued and not run to an end yet (pending or waiting), oldest first.

    ``payload`` matches a subset: every key given has that value in the job's
    payload (dicts compared the same way, recursively); other keys may be
    there too. ``filters`` are Django lookups on ``Job`` (``priority=5``,
    ``idempotency_key="order:1"``, ``status="dead"`` to look at others).
    """
    jobs = _jobs(type, queue, using, filters)
    if payload is None:
        return jobs
    return [job for job in jobs if _matches(payload, job.payload)]


def assert_enqueued(
    *,
    type: str | None = None,
    queue: str | None = None,
    payload: Mapping[str, Any] | None = None,
    count: int | None = None,
    using: str | None = None,
    **filters: Any,
) -> list[Job]:
    """Fail unless a job like this is enqueued (exactly ``count`` of them, if given).

    Returns the matching jobs. The failure's message lists what is enqueued
    instead (type, queue, payload), so a wrong payload shows at once.
    """
    found = enqueued_jobs(type=type, queue=queue, payload=payload, using=using, **filters)
    if (count is None and found) or len(found) == count:
        return found
    wanted = _describe_wanted(type, queue, payload, filters)
    expected = "at least one" if count is None else str(count)
    raise AssertionError(
        f"Expected {expected} enqueued job(s) {wanted}, found {len(found)}.\n"
        + _listing(using, filters)
    )


def assert_not_enqueued(
    *,
    type: str | None = None,
    queue: str | None = None,
    payload: Mapping[str, Any] | None = None,
    using: str | None = None,
    **filters: Any,
) -> None:
    """Fail if a job like this is enqueued; the message lists the ones found."""
    found = enqueued_jobs(type=type, queue=queue, payload=payload, using=using, **filters)
    if found:
        wanted = _describe_wanted(type, queue, payload, filters)
        raise AssertionError(
            f"Expected no enqueued job {wanted}, found {len(found)}:\n"
            + "\n".join(_line(job) for job in found[:LISTED])
        )


def run_jobs(
    queue: str | None = None,
    type: str | None = None,
    *,
    with_retries: bool = True,
    with_scheduled: bool = False,
    until_empty: bool = True,
    max_attempts: int = 1_000,
    using: str | None = None,
) -> list[RanJob]:
    """Run pending jobs here, one attempt at a time, in claim order; what ran, in order.

    ``until_empty`` (the default) goes on until nothing runnable is left: jobs
    the ones run enqueued, children their parents' completion released,
    retries (``with_retries``: a failed job runs again until it completes or
    ends dead, its delay passed over) and sleeps (passed over too). Without
    it, only the jobs runnable when the call began run, once each.
    ``with_scheduled`` runs jobs enqueued for later (``run_at``, ``delay``)
    now too. ``max_attempts`` bounds the call: more attempts than that is an
    error (a job that enqueues itself for ever, say), not a hang.
    """
    from .worker.executor import execute  # the worker's package, loaded on first use

    alias = db.database_alias(using)
    policy = RetryPolicy.from_settings()
    history = int(jobs_settings.ERROR_HISTORY_LIMIT)
    lease = float(jobs_settings.LEASE_SECONDS)
    only: set[uuid.UUID] | None = None
    if not until_empty:
        only = set(_runnable(alias, queue, type, with_retries, with_scheduled, None, all_=True))
    skipped: set[uuid.UUID] = set()  # picked but not claimable (a paused queue)
    ran: list[RanJob] = []
    while True:
        picked = _runnable(alias, queue, type, with_retries, with_scheduled, only, skipped)
        if not picked:
            return ran
        if len(ran) >= max_attempts:
            raise RuntimeError(
                f"run_jobs() ran {max_attempts} attempts and jobs are still runnable "
                f"(next: {picked[0]}): a job that enqueues itself, or a retry that never "
                "ends? Pass max_attempts= for more."
            )
        job_id = picked[0]
        _pass_over_sleeps(alias, job_id)
        claimed = db.claim_ids(alias, [job_id], worker_id=WORKER_ID, lease_seconds=lease)
        if not claimed:
            skipped.add(job_id)
            continue
        (job,) = claimed
        outcome = execute(
            job, WORKER_ID, policy, using=alias, fresh_connection=False, give_back_unknown=False
        )
        if outcome is not None:  # None: the handler suspended the job (written already)
            db.record_outcomes(alias, [outcome], history_limit=history)
        if only is not None:
            only.discard(job_id)
        row = Job.objects.using(alias).get(pk=job_id)
        ran.append(
            RanJob(
                id=row.pk,
                type=row.type,
                queue=row.queue,
                attempt=job.attempt,
                status=row.status,
                result=row.result,
                last_error=row.last_error,
            )
        )


# -- helpers ---------------------------------------------------------------


def _jobs(
    type: str | None, queue: str | None, using: str | None, filters: Mapping[str, Any]
) -> list[Job]:
    jobs: QuerySet[Job] = Job.objects.using(db.database_alias(using))
    if "status" not in filters and "status__in" not in filters:
        jobs = jobs.filter(status__in=ENQUEUED_STATUSES)
    if type is not None:
        jobs = jobs.filter(type=type)
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    return list(jobs.filter(**filters).order_by("created_at", "id"))


def _matches(wanted: Any, actual: Any) -> bool:
    """``wanted`` is a subset of ``actual``: dicts by their keys, recursively; else equal."""
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and _matches(value, actual[key]) for key, value in wanted.items()
        )
    return bool(wanted == actual)


def _describe_wanted(
    type: str | None, queue: str | None, payload: Any, filters: Mapping[str, Any]
) -> str:
    parts = [
        f"{name}={value!r}"
        for name, value in (("type", type), ("queue", queue), ("payload", payload))
        if value is not None
    ]
    parts += [f"{name}={value!r}" for name, value in sorted(filters.items())]
    return f"with {', '.join(parts)}" if parts else "(any)"


def _line(job: Job) -> str:
    return f"  {job.type} queue={job.queue!r} status={job.status} payload={job.payload!r}"


def _listing(using: str | None, filters: Mapping[str, Any]) -> str:
    """What is enqueued, for a failed assertion (in the statuses it looked at)."""
    status = {key: filters[key] for key in ("status", "status__in") if key in filters}
    jobs = _jobs(None, None, using, status)
    if not jobs:
        return "Nothing is enqueued."
    more = f"\n  ... and {len(jobs) - LISTED} more" if len(jobs) > LISTED else ""
    return "Enqueued:\n" + "\n".join(_line(job) for job in jobs[:LISTED]) + more


def _runnable(
    alias: str,
    queue: str | None,
    type: str | None,
    with_retries: bool,
    with_scheduled: bool,
    only: Collection[uuid.UUID] | None,
    skipped: Collection[uuid.UUID] = (),
    *,
    all_: bool = False,
) -> Sequence[uuid.UUID]:
    """The next pending job ``run_jobs`` may run now (a list of its id, or none); with
    ``all_``, every one of them, in claim order."""
    jobs = Job.objects.using(alias).filter(status=JobStatus.PENDING)
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    if type is not None:
        jobs = jobs.filter(type=type)
    # Due by the database's clock, or a wait the clock passes over: a sleep,
    # and (with_retries) a retry's delay; never an event wait's timeout.
    sleeping = Q(waiting_for__has_key="until")
    retrying = Q(attempts__gt=0) & ~Q(waiting_for__has_key="event")
    due = Q(available_at__lte=Now()) | sleeping
    if with_retries:
        due |= retrying
    if with_scheduled:
        due |= Q(attempts=0, waiting_for__isnull=True)
    if not with_retries:
        # A job that failed here waits for its retry: not run again in this call.
        jobs = jobs.exclude(retrying & ~sleeping)
    if only is not None:
        jobs = jobs.filter(pk__in=list(only))
    ids = jobs.filter(due).order_by(F("priority").desc(), "available_at", "created_at")
    if all_:
        return list(ids.values_list("id", flat=True))
    # The first one not skipped is what the caller runs next.
    first = ids.values_list("id", flat=True)[: len(skipped) + 1]
    return [pk for pk in first if pk not in skipped]


def _pass_over_sleeps(alias: str, job_id: uuid.UUID) -> None:
    """The clock jumps to the end of the job's sleeps: they are due now, by the database."""
    JobStep.objects.using(alias).filter(
        job_id=job_id, kind=StepKind.SLEEP, status=StepStatus.SUSPENDED
    ).update(wake_at=Least(F("wake_at"), Now()))
