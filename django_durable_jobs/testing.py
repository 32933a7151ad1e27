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

``run_enqueued()`` is the same run for the immediate mode
(``RUN_IMMEDIATELY``, ``immediate.py``): the jobs an enqueue created, and
those that they release or enqueue.

See ``docs/guides/testing.md``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Collection, Mapping
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


class _Runs(threading.local):
    """The run in progress on this thread: its database alias, and the set that
    jobs enqueued during it join (``enqueued_during_run``); None: no run.

    Per thread, not a context variable: an async handler runs in a fresh
    context, but its thread-sensitive ``sync_to_async`` calls (the ORM's)
    run on this thread, where the run is.
    """

    current: tuple[str, set[uuid.UUID]] | None = None


_runs = _Runs()


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
    alias = db.database_alias(using)
    runnable = _runnable(alias, queue, type, with_retries, with_scheduled)
    if until_empty:
        return _run(alias, runnable, max_attempts)
    # Each job runnable now, once: not the jobs they enqueue, nor a retry.
    now = set(runnable.values_list("id", flat=True))
    return _run(alias, runnable, max_attempts, only=now, once=True)


def run_enqueued(
    job_ids: Collection[uuid.UUID], *, using: str | None = None, max_attempts: int = 1_000
) -> list[RanJob]:
    """Run ``job_ids`` as ``run_jobs()`` runs jobs, until none of them is runnable.

    The immediate mode's run (``django_durable_jobs.immediate``): retries and
    sleeps passed over, the children that their completion releases run
    next, and the jobs that they enqueue join the run (``enqueued_during_run``).
    Jobs for later and event waits stay as they are.
    """
    alias = db.database_alias(using)
    runnable = _runnable(alias, None, None, with_retries=True, with_scheduled=False)
    return _run(alias, runnable, max_attempts, only=set(job_ids))


def enqueued_during_run(alias: str) -> set[uuid.UUID] | None:
    """The ids a run in progress on this thread (on ``alias``) takes, to add jobs to; or None.

    Inside ``run_jobs()`` a job's handler that enqueues (in the immediate
    mode) must not start a second run in the middle of this one: the run in
    progress takes the new jobs if its own rules say so.
    """
    current = _runs.current
    if current is None or current[0] != alias:
        return None
    return current[1]


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
    alias: str, queue: str | None, type: str | None, with_retries: bool, with_scheduled: bool
) -> QuerySet[Job]:
    """The pending jobs ``run_jobs`` may run now, in claim order."""
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
    else:
        # A job that failed here waits for its retry: not run again in this call.
        jobs = jobs.exclude(retrying & ~sleeping)
    if with_scheduled:
        due |= Q(attempts=0, waiting_for__isnull=True)
    return jobs.filter(due).order_by(F("priority").desc(), "available_at", "created_at")


def _run(
    alias: str,
    runnable: QuerySet[Job],
    max_attempts: int,
    *,
    only: set[uuid.UUID] | None = None,
    once: bool = False,
) -> list[RanJob]:
    """Run the first of ``runnable`` (among ``only``) until none is left; what ran, in order.

    One query per attempt picks the next job, so a job that the last one
    released, enqueued or gave a retry is seen. ``only`` may grow while the
    run goes on: jobs enqueued in the immediate mode join it. ``once``: a
    job that ran is not picked again (nor is its retry).
    """
    from .worker.executor import execute  # the worker's package, loaded on first use

    policy = RetryPolicy.from_settings()
    history = int(jobs_settings.ERROR_HISTORY_LIMIT)
    lease = float(jobs_settings.LEASE_SECONDS)
    passed: set[uuid.UUID] = set()  # not to pick again: not claimable (a paused queue), or once
    ran: list[RanJob] = []
    # The immediate mode's run takes the jobs enqueued during it; run_jobs()
    # keeps to its own rules (its filters, until_empty), so they join nothing.
    joining = only if only is not None and not once else set()
    outer, _runs.current = _runs.current, (alias, joining)
    try:
        while (job_id := _next(runnable, only, passed)) is not None:
            if len(ran) >= max_attempts:
                raise RuntimeError(
                    f"run_jobs() ran {max_attempts} attempts and jobs are still runnable "
                    f"(next: {job_id}): a job that enqueues itself, or a retry that never "
                    "ends? Pass max_attempts= for more."
                )
            _pass_over_sleeps(alias, job_id)
            claimed = db.claim_ids(alias, [job_id], worker_id=WORKER_ID, lease_seconds=lease)
            if not claimed:
                passed.add(job_id)
                continue
            (job,) = claimed
            outcome = execute(
                job, WORKER_ID, policy, using=alias, fresh_connection=False, give_back_unknown=False
            )
            if outcome is not None:  # None: the handler suspended the job (written already)
                db.record_outcomes(alias, [outcome], history_limit=history)
            if once:
                passed.add(job_id)
            ran.append(_ran(alias, job_id, job.attempt))
    finally:
        _runs.current = outer
    return ran


def _next(
    runnable: QuerySet[Job], only: Collection[uuid.UUID] | None, passed: Collection[uuid.UUID]
) -> uuid.UUID | None:
    """The id of the first job of ``runnable`` that is in ``only`` and not ``passed``."""
    if only is not None:
        runnable = runnable.filter(pk__in=list(only))
    if passed:
        runnable = runnable.exclude(pk__in=list(passed))
    job_id: uuid.UUID | None = runnable.values_list("id", flat=True).first()
    return job_id


def _ran(alias: str, job_id: uuid.UUID, attempt: int) -> RanJob:
    """The attempt's ``RanJob``, read from the job's row as the attempt left it."""
    row = Job.objects.using(alias).get(pk=job_id)
    return RanJob(
        id=row.pk,
        type=row.type,
        queue=row.queue,
        attempt=attempt,
        status=row.status,
        result=row.result,
        last_error=row.last_error,
    )


def _pass_over_sleeps(alias: str, job_id: uuid.UUID) -> None:
    """The clock jumps to the end of the job's sleeps: they are due now, by the database."""
    JobStep.objects.using(alias).filter(
        job_id=job_id, kind=StepKind.SLEEP, status=StepStatus.SUSPENDED
    ).update(wake_at=Least(F("wake_at"), Now()))
