"""Run one job's handler and turn what happened into an ``Outcome``.

The only place that catches broad exceptions: a handler's exception is a
failed attempt, never a crash of the worker. ``KeyboardInterrupt`` and
``SystemExit`` are not failures: the job is given back and the worker
shuts down, as the handler asked.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
from datetime import datetime
from typing import Any, Protocol

from django.db import connections
from django.db.backends.signals import connection_created
from django.utils import timezone

from .. import db, hooks, signals, tracing
from ..backoff import RetryPolicy
from ..conf import jobs_settings
from ..constants import MAX_DELAY_SECONDS
from ..context import JobContext, _current_job
from ..db.records import ClaimedJob, Outcome, Transition
from ..exceptions import Discard, JobCancelled, JobTimeout, LeaseLost, Retry, Suspended
from ..registry import Handler, registry
from . import outcomes, unknown_types
from .attempts import Attempt, State
from .event_loop import EventLoop, run_once
from .outcomes import describe, release


class AttemptStarter(Protocol):
    """What ``execute`` needs of the watchdog: begin an attempt under its time limit."""

    def begin(self, job: ClaimedJob, handler_timeout: float | None) -> Attempt | None: ...


__all__ = ["RetryPolicy", "StopWorker", "execute", "internal_error", "timed_out"]

logger = logging.getLogger("django_durable_jobs.worker")

_RESULT_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))

# Whether the thread may hold a database connection (absent: it may).
_thread = threading.local()


def _connection_opened(sender: object, connection: object, **kwargs: object) -> None:
    # Sent in the thread that opened the connection, whatever the database.
    _thread.may_hold_connection = True


connection_created.connect(_connection_opened, dispatch_uid="django_durable_jobs.executor")


def close_old_connections() -> None:
    """Django's ``close_old_connections()``, skipped on a thread that holds no connection.

    Django runs it before each request; a handler thread runs it before each
    job, and for handlers that never touch the ORM (a webhook, an email
    through an API) its look-up of each alias in the thread-local storage
    was a tenth of the thread's Python per job, to find nothing. Once a
    check finds no connection open, the next ones are skipped until one is
    opened on this thread (``connection_created``, sent by every backend's
    ``connect()``); a thread that keeps one (``CONN_MAX_AGE``) checks it
    before every job, as before.
    """
    if not getattr(_thread, "may_hold_connection", True):
        return
    holds = False
    for connection in connections.all(initialized_only=True):
        connection.close_if_unusable_or_obsolete()
        holds = holds or connection.connection is not None
    _thread.may_hold_connection = holds


class StopWorker(Exception):
    """Raised by ``execute`` after giving back a job whose handler raised
    ``KeyboardInterrupt`` or ``SystemExit``: the worker must shut down."""

    def __init__(self, outcome: Outcome, cause: BaseException) -> None:
        super().__init__(f"handler raised {type(cause).__name__}")
        self.outcome = outcome
        self.cause = cause


def _log_fields(job: ClaimedJob, worker_id: str) -> dict[str, object]:
    return {
        "job_id": str(job.id),
        "job_type": job.type,
        "queue": job.queue,
        "attempt": job.attempt,
        "worker_id": worker_id,
    }


def execute(
    job: ClaimedJob,
    worker_id: str,
    policy: RetryPolicy,
    watchdog: AttemptStarter | None = None,
    event_loop: EventLoop | None = None,
    *,
    lease_seconds: float | None = None,
    using: str | None = None,
    fresh_connection: bool = True,
    give_back_unknown: bool = True,
) -> Outcome | None:
    """Run ``job``'s handler once; return the outcome to record.

    None as well when the handler suspended the job (a durable sleep or
    wait, ``Suspended``): the suspension wrote the job's new state itself,
    and the attempt is marked ``suspended`` so that the attempt table lets
    it go without an outcome. ``lease_seconds`` and ``using`` are what the
    handler's durable steps need to extend the lease and reach the jobs'
    database (defaults: ``LEASE_SECONDS``, the jobs' database).

    With a ``watchdog``, the attempt is begun with it before the handler
    starts (its time limit then counts from there) and the context carries
    its deadline and cancel flag; None when the attempt was no longer this
    worker's to run (released, or its lease lost, while it waited). An
    ``async def`` handler runs on ``event_loop`` (the worker's), this
    thread waiting for it; without one, on a loop of its own.
    ``fresh_connection=False`` keeps this thread's connection as it is
    (``testing.run_jobs``: the test's, inside its transaction).

    A job of a type with no handler here is given back for a worker that
    has one (``unknown_types.py``); ``give_back_unknown=False`` sends it
    ``dead`` at once instead (``run_jobs``: a test has no other worker).
    """
    # Not a @job type: maybe an integration's (a Django Tasks @task).
    handler = registry.get(job.type) or hooks.resolve_handler(job.type, job.payload)
    if handler is None:
        return _no_handler(job, worker_id, give_back_unknown)

    attempt = None
    if watchdog is not None:
        attempt = watchdog.begin(job, handler.timeout)
        if attempt is None:
            return None
        if attempt.cancel.requested:  # cancelled while it waited for a thread
            return _cancelled(
                job, worker_id, time.perf_counter(), _log_fields(job, worker_id), None, ran=False
            )
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
        _parent_count=job.parent_count,
        _lease_token=job.lease_token,
        _lease_seconds=float(
            jobs_settings.LEASE_SECONDS if lease_seconds is None else lease_seconds
        ),
        _using=db.database_alias(using),
    )
    # One constant's test without OpenTelemetry (see tracing.py).
    traced = tracing.start_attempt(job, worker_id) if tracing.AVAILABLE else None
    run = (job, worker_id, policy, handler, ctx, attempt, event_loop, fresh_connection)
    if traced is None:
        return _run(*run, None)
    try:
        outcome = _run(*run, traced)
    except BaseException as exc:
        traced.end(*_span_ending_by_error(job, exc), error=exc)
        raise
    if outcome is None:
        traced.end("suspended", None)
    else:
        traced.end(*_span_ending(job, outcome, attempt))
    return outcome


def _no_handler(job: ClaimedJob, worker_id: str, give_back: bool) -> Outcome:
    """No handler for ``job``'s type here: given back, or dead (see ``unknown_types``)."""
    dead_after = float(jobs_settings.UNKNOWN_TYPE_DEAD_AFTER_SECONDS) if give_back else 0.0
    outcome = unknown_types.outcome(job, worker_id, now=timezone.now(), dead_after=dead_after)
    if outcome.transition is Transition.DEAD:
        unknown_types.warnings.dead(job, worker_id)
    else:
        unknown_types.warnings.given_back(job, worker_id, dead_after)
    return outcome


def _run(
    job: ClaimedJob,
    worker_id: str,
    policy: RetryPolicy,
    handler: Handler,
    ctx: JobContext,
    attempt: Attempt | None,
    event_loop: EventLoop | None,
    fresh_connection: bool,
    traced: tracing.AttemptSpan | None,
) -> Outcome | None:
    """The attempt, from its handler's call to the outcome (``execute``'s second half);
    None when the handler suspended the job. The log lines' fields are built
    only for a line that is written: a completed attempt's INFO line is the
    one on every job's path, and a worker often logs at WARNING."""
    started = time.perf_counter()
    # Handlers that use the ORM get this thread's own connection; drop it if
    # it is broken or past CONN_MAX_AGE, as Django does before a request.
    # Once per job, before it: the connection then serves the whole job. Not
    # for testing.run_jobs(): its connection is the test's, in the test's
    # transaction, which this would close.
    if fresh_connection:
        close_old_connections()
    signals.send_started(job.id, job.type, job.queue, job.attempt, worker_id)
    try:
        try:
            value = _call(handler, ctx, attempt, event_loop, traced)
        except Exception as exc:
            # After a cancel of the job, whatever the handler raised (JobCancelled
            # from ctx.check(), or anything else) ends the attempt cancelled.
            if attempt is not None and attempt.cancel.requested:
                return _cancelled(job, worker_id, started, _log_fields(job, worker_id), exc)
            raise
    except Discard as exc:
        outcome = outcomes.dead(job, worker_id, describe(exc))
        logger.error(
            "Job discarded id=%s type=%s attempt=%s/%s worker=%s duration=%.3f: %s",
            job.id, job.type, job.attempt, job.max_attempts, worker_id,
            time.perf_counter() - started, exc,
            extra={**_log_fields(job, worker_id), "duration": time.perf_counter() - started},
        )  # fmt: skip
        return outcome
    except Retry as exc:
        requested = outcomes.requested_schedule(exc.after)
        if requested is None:
            logger.error(
                "Job %s type=%s: Retry(after=%r) is not a delay from 0 to %s s or a datetime; "
                "using the normal backoff",
                job.id, job.type, exc.after, MAX_DELAY_SECONDS,
            )  # fmt: skip
            requested = (None, None)
        return _failed(
            job, worker_id, policy, exc, started, _log_fields(job, worker_id), requested=requested
        )
    except Exception as exc:
        # The worker gave up on the attempt before the handler stopped (time
        # limit, lost lease, end of the shutdown grace): the job was taken
        # first, so this outcome is dropped; the watchdog or the shutdown
        # logged and recorded what happened to the job. No "Job retry" line.
        # Or a durable step found the lease taken over (LeaseLost): this
        # outcome's write is fenced by the same token and will be refused.
        quiet = (attempt is not None and attempt.cancel.is_set()) or isinstance(exc, LeaseLost)
        if quiet:
            logger.info(
                "Handler of job %s type=%s stopped after the worker gave up on attempt %s: %s",
                job.id, job.type, job.attempt, type(exc).__name__,
                extra=_log_fields(job, worker_id),
            )  # fmt: skip
        return _failed(
            job, worker_id, policy, exc, started, _log_fields(job, worker_id), quiet=quiet
        )
    except Suspended as exc:
        # Written and committed by the handler's thread (steps.py): nothing
        # to record. The attempt table lets the attempt go (no outcome, no
        # lease to extend) and the loop wakes when the job falls due.
        if attempt is not None:
            attempt.suspended = exc.reason
            attempt.wakes_at = exc.wakes_at
        duration = time.perf_counter() - started
        logger.info(
            "Job suspended id=%s type=%s attempt=%s/%s worker=%s duration=%.3f reason=%s%s",
            job.id, job.type, job.attempt, job.max_attempts, worker_id, duration, exc.reason,
            f" until={exc.wakes_at.isoformat()}" if exc.wakes_at is not None else "",
            extra={**_log_fields(job, worker_id), "duration": duration, "reason": exc.reason},
        )  # fmt: skip
        return None
    except BaseException as exc:  # KeyboardInterrupt, SystemExit: not the job's failure
        logger.warning(
            "Handler raised %s id=%s type=%s attempt=%s worker=%s: giving the job back and "
            "shutting down",
            type(exc).__name__, job.id, job.type, job.attempt, worker_id,
            extra=_log_fields(job, worker_id),
        )  # fmt: skip
        raise StopWorker(release(job.id, job.lease_token), exc) from exc

    if attempt is not None and attempt.cancel.requested:
        return _cancelled(job, worker_id, started, _log_fields(job, worker_id), None)
    duration = time.perf_counter() - started
    try:
        # None, what most handlers return, without the encoder's call.
        result_json = "null" if value is None else _RESULT_ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        # The work is done; running it again to get a storable result would
        # repeat its side effects. Keep the job completed, say why no result.
        logger.warning(
            "Job result not stored id=%s type=%s: not JSON-serialisable (%s)",
            job.id, job.type, exc, extra=_log_fields(job, worker_id),
        )  # fmt: skip
        result_json = "null"
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "Job completed id=%s type=%s attempt=%s/%s worker=%s duration=%.3f",
            job.id, job.type, job.attempt, job.max_attempts, worker_id, duration,
            extra={**_log_fields(job, worker_id), "duration": duration},
        )  # fmt: skip
    return outcomes.complete(job, result_json)


def _call(
    handler: Handler,
    ctx: JobContext,
    attempt: Attempt | None,
    event_loop: EventLoop | None,
    traced: tracing.AttemptSpan | None = None,
) -> Any:
    """The handler's return value: called here, or awaited on the event loop if it is async.

    With ``traced``, the attempt's span is current while the handler runs
    (in its task, for an async one) and hears what it raised.
    """
    if traced is None:
        return _call_handler(handler, handler.func, ctx, attempt, event_loop)
    func = traced.bind(handler.func) if handler.is_async else handler.func
    with traced.current():
        return _call_handler(handler, func, ctx, attempt, event_loop)


def _call_handler(
    handler: Handler,
    func: Any,
    ctx: JobContext,
    attempt: Attempt | None,
    event_loop: EventLoop | None,
) -> Any:
    if handler.is_async:
        if event_loop is None:
            return run_once(func, ctx, attempt)
        return event_loop.run(func, ctx, attempt)
    # For code that gets no ctx (a Django task: tasks.current_job()); an
    # async handler's task sets it in its own context (event_loop.py).
    reset = _current_job.set(ctx)
    try:
        value = func(ctx)
    finally:
        _current_job.reset(reset)
    if inspect.iscoroutine(value):
        # Not awaited, the work would never be done and the job still count
        # as completed: a failed attempt that says why.
        value.close()
        raise TypeError(
            f"The handler of {ctx.type!r} returned a coroutine without being an async function: "
            "declare it with `async def` (or mark it with asgiref's markcoroutinefunction) "
            "so that the worker awaits it."
        )
    return value


def _span_ending(
    job: ClaimedJob, outcome: Outcome, attempt: Attempt | None
) -> tuple[str, tuple[str, str] | None]:
    """``(outcome, failure)`` for the attempt's span (``AttemptSpan.end``).

    The executor's ``outcome``, unless the worker took the attempt from its
    handler first (``_finished`` then drops that outcome): the span says
    what the worker recorded instead.
    """
    state = None if attempt is None else attempt.state
    if state is State.TIMED_OUT:
        assert attempt is not None  # noqa: S101 (narrows for mypy: state came from it)
        if attempt.cancel_requested is not None:
            return "cancelled", None
        return (
            "dead" if outcomes.exhausted(job) else "retry",
            (_TIMEOUT_PATH, "the attempt ran past its time limit"),
        )
    if state is State.LEASE_LOST:
        return "lease_lost", (_LEASE_LOST, "the worker lost the job's lease while it ran")
    if state is State.RELEASED:
        return "released", None
    name = _SPAN_OUTCOMES[outcome.transition]
    if outcome.transition in (Transition.RETRY, Transition.DEAD):
        message = (outcome.last_error or "").partition("\n")[0]
        return name, (message.partition(":")[0], message)
    return name, None


def _span_ending_by_error(
    job: ClaimedJob, exc: BaseException
) -> tuple[str, tuple[str, str] | None]:
    """``(outcome, failure)`` for the span of an attempt ``execute`` raised out of."""
    if isinstance(exc, StopWorker):
        return "released", None  # the handler's KeyboardInterrupt or SystemExit
    # An error of the worker's own: the loop records a failed attempt (internal_error).
    kind = type(exc)
    return (
        "dead" if outcomes.exhausted(job) else "retry",
        (f"{kind.__module__}.{kind.__qualname__}", str(exc)),
    )


_SPAN_OUTCOMES = {
    Transition.COMPLETE: "completed",
    Transition.RETRY: "retry",
    Transition.DEAD: "dead",
    Transition.CANCEL: "cancelled",
    Transition.RELEASE: "released",
}
_TIMEOUT_PATH = f"{JobTimeout.__module__}.{JobTimeout.__qualname__}"
#: ``error.type`` of an attempt whose lease was lost (no exception says it).
_LEASE_LOST = "django_durable_jobs.lease_lost"


def internal_error(job: ClaimedJob, worker_id: str, policy: RetryPolicy, exc: Exception) -> Outcome:
    """An error in the worker itself while running ``job``: a counted failed attempt.

    Counted (unlike a release), so that a job that trips a bug cannot loop.
    """
    return _failed(job, worker_id, policy, exc, time.perf_counter(), {})


def timed_out(
    job: ClaimedJob,
    worker_id: str,
    policy: RetryPolicy,
    timeout: float | None,
    elapsed: float,
    stack: str = "",
    what: str = "thread",
) -> Outcome:
    """The attempt ran past its deadline: a failed attempt with a ``JobTimeout`` error.

    Retried with backoff, or dead when it was the last attempt, exactly like
    an exception from the handler. ``stack`` (where the handler's ``what``,
    its thread or its coroutine, was at the deadline) stands in for the
    traceback, which does not exist: the handler raised nothing. A dead one
    is announced (``hooks.jobs_finished``) once written: its handler never
    said how it ended.
    """
    tb = f"Handler {what} at the deadline (most recent call last):\n{stack}" if stack else None
    return _failed(
        job, worker_id, policy, JobTimeout(timeout), time.perf_counter() - elapsed,
        _log_fields(job, worker_id), traceback_text=tb, announce_if_dead=True,
    )  # fmt: skip


def _cancelled(
    job: ClaimedJob,
    worker_id: str,
    started: float,
    log_fields: dict[str, object],
    exc: Exception | None,
    *,
    ran: bool = True,
) -> Outcome:
    """The job was cancelled while this attempt ran: the ``cancel`` outcome, logged.

    ``exc`` is what the handler raised after the request (None: it returned,
    and its result is not stored); ``ran`` is False when the request came
    before a thread began the attempt.
    """
    duration = time.perf_counter() - started
    if not ran:
        detail, tb = "before its handler started", ""
    elif exc is None:
        detail, tb = "its handler returned after the request; no result stored", ""
    elif isinstance(exc, JobCancelled):
        detail, tb = "its handler stopped", describe(exc).traceback
    else:
        raised = describe(exc)
        detail, tb = f"its handler then raised {raised.message}", raised.traceback
    failure = outcomes.cancelled_failure(detail)
    failure.traceback = tb
    logger.info(
        "Job cancelled id=%s type=%s attempt=%s/%s worker=%s duration=%.3f: %s",
        job.id, job.type, job.attempt, job.max_attempts, worker_id, duration, detail,
        extra={**log_fields, "duration": duration},
    )  # fmt: skip
    return outcomes.cancel(job, worker_id, failure)


def _failed(
    job: ClaimedJob,
    worker_id: str,
    policy: RetryPolicy,
    exc: Exception,
    started: float,
    log_fields: dict[str, object],
    requested: tuple[datetime | None, float | None] = (None, None),
    traceback_text: str | None = None,
    quiet: bool = False,
    announce_if_dead: bool = False,
) -> Outcome:
    """A failed attempt: ``outcomes.after_failure``'s retry or dead, logged."""
    duration = time.perf_counter() - started
    failure = describe(exc, traceback_text)
    outcome = outcomes.after_failure(
        job, worker_id, policy, failure, requested=requested, announce_if_dead=announce_if_dead
    )
    if quiet:
        return outcome
    fields = {**log_fields, "duration": duration, "error": failure.message}
    if outcome.transition is Transition.DEAD:
        logger.error(
            "Job dead id=%s type=%s attempt=%s/%s worker=%s duration=%.3f: %s",
            job.id, job.type, job.attempt, job.max_attempts, worker_id, duration,
            failure.message, extra=fields,
        )  # fmt: skip
    else:
        due = (
            outcome.run_at.isoformat()
            if outcome.run_at is not None
            else f"{(outcome.delay_us or 0) / 1_000_000:.3f}s"
        )
        logger.warning(
            "Job retry id=%s type=%s attempt=%s/%s worker=%s duration=%.3f in=%s: %s",
            job.id, job.type, job.attempt, job.max_attempts, worker_id, duration, due,
            failure.message, extra=fields,
        )  # fmt: skip
    return outcome
