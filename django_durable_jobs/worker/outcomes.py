"""The verbs that end an attempt: complete, retry, dead, release, cancel.

Each builds the ``Outcome`` that ``db.record_outcomes`` writes; the
``Transition`` it carries is the same word. ``after_failure`` holds the
one rule of a failed attempt (retry with backoff while attempts are left,
else dead), for every kind of failure: an exception from the handler, a
time limit, an error of the worker's own, and an expired lease (the reaper).
"""

from __future__ import annotations

import math
import traceback
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from json.encoder import encode_basestring as _json_str
from typing import Protocol

from django.conf import settings
from django.utils import timezone

from ..backoff import RetryPolicy
from ..constants import MAX_DELAY_SECONDS
from ..db.records import Outcome, Transition

__all__ = [
    "MAX_ERROR_CHARS",
    "MAX_TRACEBACK_CHARS",
    "Failure",
    "Outcome",
    "Transition",
    "after_failure",
    "cancel",
    "cancelled_failure",
    "complete",
    "dead",
    "describe",
    "release",
    "requested_schedule",
]

# Bounds on what one failure stores, so a huge message cannot bloat a row.
MAX_ERROR_CHARS = 2_000
MAX_TRACEBACK_CHARS = 20_000


class AttemptOf(Protocol):
    """What the verbs need of a job: a ``ClaimedJob`` or an ``ExpiredLease``."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def queue(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def lease_token(self) -> uuid.UUID: ...
    @property
    def attempt(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def dependent_count(self) -> int: ...


class Failure:
    """What went wrong in one attempt, as the error history stores it."""

    __slots__ = ("exception", "message", "traceback")

    def __init__(self, message: str, exception: str, traceback: str) -> None:
        self.message = message
        self.exception = exception
        self.traceback = traceback


def describe(exc: BaseException, traceback_text: str | None = None) -> Failure:
    """``exc`` as a ``Failure``, each part bounded in size.

    ``traceback_text`` stands in for the exception's own traceback (a time
    limit: where the handler's thread was, since it raised nothing).
    """
    kind = type(exc)
    path = f"{kind.__module__}.{kind.__qualname__}"
    message = f"{path}: {exc}"[:MAX_ERROR_CHARS]
    if traceback_text is not None:
        tb = f"{traceback_text[-MAX_TRACEBACK_CHARS:]}{path}: {exc}"
    else:
        tb = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
        if len(tb) > MAX_TRACEBACK_CHARS:
            tb = "...\n" + tb[-MAX_TRACEBACK_CHARS:]
    return Failure(message, path, tb)


def _error_entry(job: AttemptOf, worker_id: str, failure: Failure) -> str:
    now = datetime.now(dt_timezone.utc).isoformat()
    return (
        f'{{"attempt":{job.attempt},"at":"{now}","error":{_json_str(failure.message)},'
        f'"exception":{_json_str(failure.exception)},"traceback":{_json_str(failure.traceback)},'
        f'"worker":{_json_str(worker_id)}}}'
    )


def _last_error(failure: Failure) -> str:
    return f"{failure.message}\n\n{failure.traceback}" if failure.traceback else failure.message


def complete(job: AttemptOf, result_json: str) -> Outcome:
    """The handler returned: ``completed``, with its result (JSON text)."""
    return Outcome(
        job.id,
        job.lease_token,
        Transition.COMPLETE,
        result_json=result_json,
        dependent_count=job.dependent_count,
        queue=job.queue,
        type=job.type,
    )


def dead(job: AttemptOf, worker_id: str, failure: Failure, *, announce: bool = False) -> Outcome:
    """No attempt left, or ``Discard``: ``dead``, with the failure in the history."""
    return Outcome(
        job.id,
        job.lease_token,
        Transition.DEAD,
        last_error=_last_error(failure),
        error_entry_json=_error_entry(job, worker_id, failure),
        announce=announce,
        dependent_count=job.dependent_count,
        queue=job.queue,
        type=job.type,
    )


def retry(
    job: AttemptOf,
    worker_id: str,
    failure: Failure,
    *,
    delay: float | None = None,
    run_at: datetime | None = None,
) -> Outcome:
    """``pending`` again after ``delay`` seconds (or at ``run_at``), the failure in the history."""
    return Outcome(
        job.id,
        job.lease_token,
        Transition.RETRY,
        delay_us=None if delay is None else round(delay * 1_000_000),
        run_at=run_at,
        last_error=_last_error(failure),
        error_entry_json=_error_entry(job, worker_id, failure),
        dependent_count=job.dependent_count,
        queue=job.queue,
        type=job.type,
    )


def release(
    job_id: uuid.UUID,
    lease_token: uuid.UUID,
    *,
    delay: float = 0.0,
    queue: str = "",
    type: str = "",
) -> Outcome:
    """Give the job back: pending, the attempt not counted.

    At shutdown (no ``delay``): available as it was, at once. With a
    ``delay`` (a type this worker has no handler for): available again that
    many seconds later, so that this worker does not claim it back at once.
    Without the job's ``dependent_count``: a job with dependents is written
    on the second try (``db.record_outcomes``), which releases can afford.
    """
    return Outcome(
        job_id,
        lease_token,
        Transition.RELEASE,
        delay_us=round(delay * 1_000_000),
        queue=queue,
        type=type,
    )


def cancelled_failure(detail: str = "") -> Failure:
    """The error history's entry of an attempt ended by a cancel of its job."""
    message = "django_durable_jobs.exceptions.JobCancelled: the job was cancelled while it ran"
    if detail:
        message = f"{message} ({detail})"
    return Failure(message[:MAX_ERROR_CHARS], "django_durable_jobs.exceptions.JobCancelled", "")


def cancel(job: AttemptOf, worker_id: str, failure: Failure, *, announce: bool = True) -> Outcome:
    """The job was cancelled while it ran: ``cancelled``, never retried.

    Whatever the handler returned or raised after the request: ``failure``
    says why it ended (``cancelled_failure``) and goes into the history.
    Announced (``hooks.jobs_finished``) once written, since no handler's
    return says how the job ended.
    """
    return Outcome(
        job.id,
        job.lease_token,
        Transition.CANCEL,
        last_error=_last_error(failure),
        error_entry_json=_error_entry(job, worker_id, failure),
        announce=announce,
        dependent_count=job.dependent_count,
        queue=job.queue,
        type=job.type,
    )


def exhausted(job: AttemptOf) -> bool:
    """The rule: a failed attempt with none left makes the job ``dead``."""
    return job.attempt >= job.max_attempts


def after_failure(
    job: AttemptOf,
    worker_id: str,
    policy: RetryPolicy,
    failure: Failure,
    *,
    requested: tuple[datetime | None, float | None] = (None, None),
    announce_if_dead: bool = False,
) -> Outcome:
    """A failed attempt: retry after the policy's backoff (or ``requested``), or dead.

    ``requested`` is ``(run_at, delay)`` from ``Retry(after=...)``, see
    ``requested_schedule``; ``(None, None)`` means the policy's backoff.
    """
    if exhausted(job):
        return dead(job, worker_id, failure, announce=announce_if_dead)
    run_at, delay = requested
    if run_at is None and delay is None:
        delay = policy.delay(job.attempt)
    return retry(job, worker_id, failure, delay=delay, run_at=run_at)


def requested_schedule(
    requested: timedelta | float | datetime | None,
) -> tuple[datetime | None, float | None] | None:
    """``Retry(after=...)`` as ``(run_at, delay)``; ``(None, None)`` for the normal backoff.

    None when ``requested`` is not a delay from 0 to ``MAX_DELAY_SECONDS``
    or a datetime (the caller logs it and uses the normal backoff).
    """
    if requested is None:
        return None, None
    if isinstance(requested, datetime):
        if settings.USE_TZ and timezone.is_naive(requested):
            requested = timezone.make_aware(requested)
        return requested, None
    if isinstance(requested, timedelta):
        seconds = requested.total_seconds()
    elif isinstance(requested, (int, float)) and not isinstance(requested, bool):
        seconds = float(requested)
    else:
        seconds = math.nan
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_DELAY_SECONDS:
        return None
    return None, seconds
