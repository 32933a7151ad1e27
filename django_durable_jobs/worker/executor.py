"""Run one job's handler and turn what happened into an ``Outcome``.

The only place that catches broad exceptions: a handler's exception is a
failed attempt, never a crash of the worker. ``KeyboardInterrupt`` and
``SystemExit`` are not failures: the job is given back and the worker
shuts down, as the handler asked.
"""

from __future__ import annotations

import json
import logging
import math
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from json.encoder import encode_basestring as _json_str
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from ..backoff import retry_delay
from ..constants import MAX_DELAY_SECONDS
from ..context import JobContext
from ..exceptions import Discard, JobTimeout, Retry
from ..models import JobStatus
from ..registry import registry
from ..tasks_bridge import task_handler
from .claimed import ClaimedJob
from .outcomes import Outcome, release

if TYPE_CHECKING:
    from .timeouts import Watchdog

logger = logging.getLogger("django_durable_jobs.worker")

_RESULT_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
# Bounds on what one failure stores, so a huge message cannot bloat a row.
MAX_ERROR_CHARS = 2_000
MAX_TRACEBACK_CHARS = 20_000


@dataclass(frozen=True)
class RetryPolicy:
    base: float
    cap: float
    jitter: float


class StopWorker(Exception):
    """Raised by ``execute`` after giving back a job whose handler raised
    ``KeyboardInterrupt`` or ``SystemExit``: the worker must shut down."""

    def __init__(self, outcome: Outcome, cause: BaseException) -> None:
        super().__init__(f"handler raised {type(cause).__name__}")
        self.outcome = outcome
        self.cause = cause


def execute(
    job: ClaimedJob, worker_id: str, policy: RetryPolicy, watchdog: Watchdog | None = None
) -> Outcome:
    """Run ``job``'s handler once; return the outcome to record.

    With a ``watchdog``, the attempt is registered with it before the
    handler starts (its time limit then counts from there) and the context
    carries its deadline; the caller ends the attempt (``watchdog.end``).
    """
    log_fields = {
        "job_id": str(job.id),
        "job_type": job.type,
        "queue": job.queue,
        "attempt": job.attempt,
        "worker_id": worker_id,
    }
    handler = registry.get(job.type)
    if handler is None:
        # Not a @job type: maybe a Django Tasks @task enqueued by our backend.
        handler = task_handler(job.type, job.payload)
    if handler is None:
        message = (
            f"No handler is registered for job type {job.type!r} in worker {worker_id}: "
            "declare it with @job in an installed app's jobs module."
        )
        logger.error(
            "Job dead id=%s type=%s attempt=%s/%s worker=%s duration=0.000: no handler",
            job.id, job.type, job.attempt, job.max_attempts, worker_id, extra=log_fields,
        )  # fmt: skip
        return _dead(job, worker_id, message, "django_durable_jobs.UnknownJobType", "")

    attempt = watchdog.begin(job, handler.timeout) if watchdog is not None else None
    ctx = JobContext(
        id=job.id,
        type=job.type,
        queue=job.queue,
        payload=job.payload,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        worker_id=worker_id,
        idempotency_key=job.idempotency_key,
        timeout=None if attempt is None else attempt.timeout,
        deadline=None if attempt is None else attempt.deadline_at,
        _deadline_monotonic=None if attempt is None else attempt.deadline,
        _cancel=None if attempt is None else attempt.cancel,
    )
    started = time.perf_counter()
    # Handlers that use the ORM get this thread's own connection; drop it if
    # it is broken or past CONN_MAX_AGE, as Django does before a request.
    # Once per job, before it: the connection then serves the whole job.
    close_old_connections()
    try:
        value = handler.func(ctx)
    except Discard as exc:
        outcome = _dead(job, worker_id, *_describe(exc))
        logger.error(
            "Job discarded id=%s type=%s attempt=%s/%s worker=%s duration=%.3f: %s",
            job.id, job.type, job.attempt, job.max_attempts, worker_id,
            time.perf_counter() - started, exc,
            extra={**log_fields, "duration": time.perf_counter() - started},
        )  # fmt: skip
        return outcome
    except Retry as exc:
        return _retry(job, worker_id, policy, exc, started, log_fields, requested=exc.after)
    except Exception as exc:
        # The worker gave up on the attempt before the handler stopped (time
        # limit, lost lease, end of the shutdown grace): the job was taken
        # first, so this outcome is dropped; the watchdog or the shutdown
        # logged and recorded what happened to the job. No "Job retry" line.
        quiet = attempt is not None and attempt.cancel.is_set()
        if quiet:
            logger.info(
                "Handler of job %s type=%s stopped after the worker gave up on attempt %s: %s",
                job.id, job.type, job.attempt, type(exc).__name__, extra=log_fields,
            )  # fmt: skip
        return _retry(job, worker_id, policy, exc, started, log_fields, requested=None, quiet=quiet)
    except BaseException as exc:  # KeyboardInterrupt, SystemExit: not the job's failure
        logger.warning(
            "Handler raised %s id=%s type=%s attempt=%s worker=%s: giving the job back and "
            "shutting down",
            type(exc).__name__, job.id, job.type, job.attempt, worker_id, extra=log_fields,
        )  # fmt: skip
        raise StopWorker(release(job.id, job.lease_token), exc) from exc

    duration = time.perf_counter() - started
    try:
        result_json = _RESULT_ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        # The work is done; running it again to get a storable result would
        # repeat its side effects. Keep the job completed, say why no result.
        logger.warning(
            "Job result not stored id=%s type=%s: not JSON-serialisable (%s)",
            job.id, job.type, exc, extra=log_fields,
        )  # fmt: skip
        result_json = "null"
    logger.info(
        "Job completed id=%s type=%s attempt=%s/%s worker=%s duration=%.3f",
        job.id, job.type, job.attempt, job.max_attempts, worker_id, duration,
        extra={**log_fields, "duration": duration},
    )  # fmt: skip
    return Outcome(job.id, job.lease_token, JobStatus.COMPLETED, result_json=result_json)


def internal_error(job: ClaimedJob, worker_id: str, policy: RetryPolicy, exc: Exception) -> Outcome:
    """An error in the worker itself while running ``job``: a counted failed attempt.

    Counted (unlike a release), so that a job that trips a bug cannot loop.
    """
    return _retry(job, worker_id, policy, exc, time.perf_counter(), {}, requested=None)


def timed_out(
    job: ClaimedJob,
    worker_id: str,
    policy: RetryPolicy,
    timeout: float | None,
    elapsed: float,
    stack: str = "",
) -> Outcome:
    """The attempt ran past its deadline: a failed attempt with a ``JobTimeout`` error.

    Retried with backoff, or dead when it was the last attempt, exactly like
    an exception from the handler. ``stack`` (where the handler thread was
    at the deadline) stands in for the traceback, which does not exist: the
    handler raised nothing.
    """
    fields = {
        "job_id": str(job.id),
        "job_type": job.type,
        "queue": job.queue,
        "attempt": job.attempt,
        "worker_id": worker_id,
    }
    exc = JobTimeout(timeout)
    tb = f"Handler thread at the deadline (most recent call last):\n{stack}" if stack else None
    outcome = _retry(
        job, worker_id, policy, exc, time.perf_counter() - elapsed, fields, requested=None,
        traceback_text=tb,
    )  # fmt: skip
    if outcome.kind == "dead" and job.type not in registry:
        # Perhaps a Django task: it is told once the row says dead.
        outcome = outcome._replace(announce=True)
    return outcome


def _requested_schedule(
    requested: timedelta | float | datetime | None, job: ClaimedJob
) -> tuple[datetime | None, float | None]:
    """``Retry(after=...)`` as (run_at, delay); (None, None) means the normal backoff."""
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
        logger.error(
            "Job %s type=%s: Retry(after=%r) is not a delay from 0 to %s s or a datetime; "
            "using the normal backoff",
            job.id, job.type, requested, MAX_DELAY_SECONDS,
        )  # fmt: skip
        return None, None
    return None, seconds


def _describe(exc: BaseException) -> tuple[str, str, str]:
    """(message, exception class path, traceback), each bounded in size."""
    kind = type(exc)
    path = f"{kind.__module__}.{kind.__qualname__}"
    message = f"{path}: {exc}"[:MAX_ERROR_CHARS]
    tb = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
    if len(tb) > MAX_TRACEBACK_CHARS:
        tb = "...\n" + tb[-MAX_TRACEBACK_CHARS:]
    return message, path, tb


def _error_entry(job: ClaimedJob, worker_id: str, message: str, path: str, tb: str) -> str:
    now = datetime.now(dt_timezone.utc).isoformat()
    return (
        f'{{"attempt":{job.attempt},"at":"{now}","error":{_json_str(message)},'
        f'"exception":{_json_str(path)},"traceback":{_json_str(tb)},'
        f'"worker":{_json_str(worker_id)}}}'
    )


def _dead(job: ClaimedJob, worker_id: str, message: str, path: str, tb: str) -> Outcome:
    return Outcome(
        job.id,
        job.lease_token,
        JobStatus.DEAD,
        last_error=f"{message}\n\n{tb}" if tb else message,
        error_entry_json=_error_entry(job, worker_id, message, path, tb),
        kind="dead",
    )


def _retry(
    job: ClaimedJob,
    worker_id: str,
    policy: RetryPolicy,
    exc: Exception,
    started: float,
    log_fields: dict[str, object],
    requested: timedelta | float | datetime | None,
    traceback_text: str | None = None,
    quiet: bool = False,
) -> Outcome:
    duration = time.perf_counter() - started
    message, path, tb = _describe(exc)
    if traceback_text is not None:
        tb = f"{traceback_text[-MAX_TRACEBACK_CHARS:]}{path}: {exc}"
    fields = {**log_fields, "duration": duration, "error": message}
    if job.attempt >= job.max_attempts:
        if quiet:
            return _dead(job, worker_id, message, path, tb)
        logger.error(
            "Job dead id=%s type=%s attempt=%s/%s worker=%s duration=%.3f: %s",
            job.id, job.type, job.attempt, job.max_attempts, worker_id, duration, message,
            extra=fields,
        )  # fmt: skip
        return _dead(job, worker_id, message, path, tb)
    run_at, delay = _requested_schedule(requested, job)
    if run_at is None and delay is None:
        delay = retry_delay(job.attempt, base=policy.base, cap=policy.cap, jitter=policy.jitter)
    if not quiet:
        logger.warning(
            "Job retry id=%s type=%s attempt=%s/%s worker=%s duration=%.3f in=%s: %s",
            job.id, job.type, job.attempt, job.max_attempts, worker_id, duration,
            run_at.isoformat() if run_at else f"{delay:.3f}s", message, extra=fields,
        )  # fmt: skip
    return Outcome(
        job.id,
        job.lease_token,
        JobStatus.PENDING,
        delay_us=None if delay is None else round(delay * 1_000_000),
        run_at=run_at,
        last_error=f"{message}\n\n{tb}",
        error_entry_json=_error_entry(job, worker_id, message, path, tb),
        kind="failed",
    )
