"""A job whose type this worker has no handler for: given back, not killed.

Not knowing a type says more about the worker than about the job. In a
rolling deploy the new web code enqueues a type that the old workers do not
know yet; in development a handler is added while the worker runs. Such a
job is given back uncounted (the attempt is not counted, as at a shutdown),
available again ``GIVE_BACK_DELAY_SECONDS`` later so that this worker does
not claim it back at once, for a worker that knows the type. Only once the
job is older than ``UNKNOWN_TYPE_DEAD_AFTER_SECONDS`` (from its creation) is
it sent ``dead``, the reason naming the missing handler.

The claim does not leave out the types a worker found no handler for: that
would put a per-worker list into the one query every claim runs, for a case
that a deploy ends within minutes. The delay bounds the cost instead: each
such job is claimed at most once per delay, cluster-wide.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from .. import metrics
from ..db.records import Outcome
from .outcomes import AttemptOf, Failure, dead, release

logger = logging.getLogger("django_durable_jobs.worker")

#: How long a job given back for its unknown type stays out of every claim.
#: Short, so that a worker that knows the type (just deployed) gets it soon;
#: long enough that the workers that do not know it are not kept busy by it.
GIVE_BACK_DELAY_SECONDS = 5.0
#: The warning for one type is logged at most this often per worker (with a
#: count of the jobs given back since), so a backlog of them cannot flood the log.
WARN_EVERY_SECONDS = 60.0
#: The exception recorded in the error history of a job that went dead for it.
EXCEPTION = "django_durable_jobs.UnknownJobType"

WHAT_TO_DO = (
    "deploy the handler to the workers, or check that the app declaring it with @job "
    "(a Django task: @task) is in INSTALLED_APPS and its jobs (tasks) module is imported; "
    "a worker imports no module just because a job's type names it"
)


class UnknownJob(AttemptOf, Protocol):
    @property
    def created_at(self) -> datetime | None: ...


def outcome(job: UnknownJob, worker_id: str, *, now: datetime, dead_after: float) -> Outcome:
    """Give ``job`` back for another worker, or, once it is older than ``dead_after``
    seconds, send it ``dead`` with the reason."""
    age = None if job.created_at is None else (now - job.created_at).total_seconds()
    if dead_after <= 0 or (age is not None and age >= dead_after):
        waited = (
            f", nor in any worker that claimed it in the {_duration(dead_after)} since it was "
            "enqueued (DURABLE_JOBS['UNKNOWN_TYPE_DEAD_AFTER_SECONDS'])"
            if dead_after > 0
            else ""
        )
        message = (
            f"No handler is registered for job type {job.type!r} in worker {worker_id}"
            f"{waited}: to run it, {WHAT_TO_DO}."
        )
        return dead(job, worker_id, Failure(message, EXCEPTION, ""))
    return release(
        job.id, job.lease_token, delay=GIVE_BACK_DELAY_SECONDS, queue=job.queue, type=job.type
    )


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


class Warnings:
    """One WARNING per type and ``every`` seconds, each saying how many jobs were
    given back since the last one; a job sent dead is logged each time (ERROR)."""

    def __init__(
        self, every: float = WARN_EVERY_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._every = every
        self._clock = clock
        self._lock = threading.Lock()
        # type -> (when it was last logged, jobs given back since)
        self._last: dict[str, tuple[float, int]] = {}

    def given_back(self, job: UnknownJob, worker_id: str, dead_after: float) -> None:
        metrics.record_unknown_type(job.queue, job.type)
        now = self._clock()
        with self._lock:
            last = self._last.get(job.type)
            if last is not None and now - last[0] < self._every:
                self._last[job.type] = (last[0], last[1] + 1)
                return
            since = 0 if last is None else last[1]
            self._last[job.type] = (now, 0)
        more = f" ({since} more job(s) of this type given back since the last warning)"
        logger.warning(
            "No handler for job type %s in worker=%s: job %s given back (its attempt not "
            "counted) for a worker that has one, available again in %gs; it goes dead "
            "%s after it was enqueued (UNKNOWN_TYPE_DEAD_AFTER_SECONDS). To run it, %s.%s",
            job.type, worker_id, job.id, GIVE_BACK_DELAY_SECONDS, _duration(dead_after),
            WHAT_TO_DO, more if since else "",
            extra={"job_id": str(job.id), "job_type": job.type, "queue": job.queue,
                   "worker_id": worker_id},
        )  # fmt: skip

    @staticmethod
    def dead(job: UnknownJob, worker_id: str) -> None:
        logger.error(
            "Job dead id=%s type=%s attempt=%s/%s worker=%s duration=0.000: no handler "
            "(none in any worker since it was enqueued, UNKNOWN_TYPE_DEAD_AFTER_SECONDS)",
            job.id, job.type, job.attempt, job.max_attempts, worker_id,
            extra={"job_id": str(job.id), "job_type": job.type, "queue": job.queue,
                   "worker_id": worker_id},
        )  # fmt: skip


#: The worker process's: one per process, as the log it rate-limits.
warnings = Warnings()
