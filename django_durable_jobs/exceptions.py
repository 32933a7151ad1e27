"""Every error the queue raises on purpose derives from ``DurableJobsError``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import Job


class DurableJobsError(Exception):
    """Base class of the queue's own errors."""


class InvalidJob(DurableJobsError, ValueError):
    """An argument to ``enqueue`` is invalid; nothing was written.

    ``field`` names the offending argument so the REST API can report it
    against the right field; ``code`` says which rule it broke, so that a
    front end (the REST API) can word or place the error without matching
    the message's text. It is a ``ValueError`` so that callers who catch
    the builtin keep working.
    """

    #: The rule most errors break: the value itself is not acceptable.
    INVALID = "invalid"
    #: Both ``delay`` and ``run_at`` were given; a job has one start time.
    DELAY_AND_RUN_AT = "delay_and_run_at"
    #: A job named in ``depends_on`` does not exist.
    UNKNOWN_PARENT = "unknown_parent"

    def __init__(self, field: str, message: str, *, code: str = INVALID) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code


class IdempotencyConflict(DurableJobsError):
    """The idempotency key already belongs to a job with other parameters.

    Never a second job: the caller must pick a new key or send the same
    parameters again.
    """

    def __init__(self, key: str, existing: Job, differences: list[str]) -> None:
        super().__init__(
            f"Idempotency key {key!r} already belongs to job {existing.pk} "
            f"with a different {', '.join(differences)}."
        )
        self.key = key
        self.existing = existing
        self.differences = differences


class HandlerAlreadyRegistered(DurableJobsError):
    """Two handlers claim the same job type."""


class Discard(DurableJobsError):
    """Raised by a handler to send its job to ``dead`` at once, without retries."""


class Retry(DurableJobsError):
    """Raised by a handler to run its job again later.

    ``after`` is a delay (``timedelta`` or seconds) or an aware ``datetime``;
    ``None`` uses the normal backoff.
    """

    def __init__(self, after: timedelta | float | datetime | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry requested by the handler")
        self.after = after
        self.reason = reason


class JobTimeout(DurableJobsError):
    """The attempt ran past its time limit (``@job(timeout=...)``).

    Recorded as the failed attempt's error when the worker's watchdog fails
    a job at its deadline, and raised by ``ctx.check()`` once the attempt is
    cancelled. The worker never raises it inside a running handler: a
    handler stops at its deadline only if it checks ``ctx.cancelled`` (or
    calls ``ctx.check()``). ``timeout`` is the limit in seconds, ``None``
    when unknown. An ordinary exception, so a handler's ``except Exception``
    can swallow it: see docs/guides/time-limits.md for what then happens.
    """

    def __init__(self, timeout: float | None = None, message: str = "") -> None:
        if not message:
            message = (
                f"the attempt ran past its time limit of {timeout:g} s"
                if timeout is not None
                else "the attempt ran past its time limit"
            )
        super().__init__(message)
        self.timeout = timeout


class JobCancelled(DurableJobsError):
    """Someone cancelled the running job (REST, CLI, admin or ``operations.cancel``).

    Raised by ``ctx.check()`` once the worker that runs the job has heard of
    the request (within about a second), and recorded as the error of the
    attempt, which ends ``cancelled`` and is not retried, whatever the
    handler does after the request. Like ``JobTimeout``, the worker never
    raises it inside a running handler: a handler stops early only if it
    checks ``ctx.cancelled`` (or calls ``ctx.check()``); one that never does
    is treated like one past its time limit (see docs/guides/time-limits.md).
    """

    def __init__(self, message: str = "") -> None:
        super().__init__(message or "the job was cancelled while it ran")


class InvalidSchedule(DurableJobsError, ValueError):
    """A schedule (``@job(schedule=...)`` or a ``SCHEDULES`` entry) is invalid.

    Raised at declaration time by ``@job`` and reported by the system check
    ``durable_jobs.E007`` for ``DURABLE_JOBS["SCHEDULES"]``, so that a typo
    in a cron expression is an error at startup, not a job that never runs.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"Schedule {name!r}: {message}")
        self.name = name
        self.message = message


class InvalidPause(DurableJobsError, ValueError):
    """``pause_queue`` or ``resume_queue`` was given a bad queue name or end time.

    ``field`` is ``"queue"`` or ``"until"``, so the REST API reports the
    error against that field; nothing was written.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class EventTimeout(DurableJobsError):
    """``ctx.wait_for_event(key, timeout=...)``'s deadline passed before the event came.

    Raised in the handler at the run that finds the deadline passed, and
    again at every later run of the job (the timeout is recorded as the
    wait's step, so a retry does not wait again). ``key`` is the event's key.
    """

    def __init__(self, key: str) -> None:
        super().__init__(f"no event {key!r} came before the wait's deadline")
        self.key = key


class ChildJobFailed(DurableJobsError):
    """The child job of ``ctx.run_job`` ended ``dead`` or ``cancelled``.

    ``child_id`` is the child's id and ``status`` how it ended; raised in
    the parent's handler when it runs again after the child ended (and at
    every later run, as long as the child keeps that end).
    """

    def __init__(self, child_id: object, status: str, last_error: str = "") -> None:
        detail = f": {last_error.splitlines()[0]}" if last_error.strip() else ""
        super().__init__(f"child job {child_id} ended {status}{detail}")
        self.child_id = child_id
        self.status = status


class StepResultError(DurableJobsError, ValueError):
    """A step's result cannot be recorded: not JSON, or larger than
    ``DURABLE_JOBS["STEP_RESULT_MAX_BYTES"]``. The message names the step;
    the attempt fails (the step is not recorded, so a retry runs it again)."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"step {step!r}: {message}")
        self.step = step


class LeaseLost(DurableJobsError):
    """This worker no longer holds the job's lease (it was reaped, or claimed elsewhere):
    a checkpoint or a suspension found the lease token gone and wrote nothing.

    Raised inside the handler so that it stops; the attempt's outcome is
    dropped too (its write is fenced by the same token).
    """

    def __init__(self, job_id: object) -> None:
        super().__init__(f"the lease of job {job_id} was lost: nothing was recorded")
        self.job_id = job_id


class Suspended(BaseException):
    """Raised by ``ctx.sleep``, ``ctx.wait_for_event`` and ``ctx.run_job`` once the job's
    suspension is committed: the handler stops here, the worker frees its slot
    and records no outcome, and the job runs again from the top when it is due.

    A ``BaseException`` (like ``KeyboardInterrupt``), so that a handler's
    ``except Exception:`` cannot swallow it: do not catch it (nor a bare
    ``except:``) around those calls, or the handler goes on with a job that
    is no longer its own (whatever it records after is refused by the fence).
    ``reason`` is ``"sleep"``, ``"event"`` or ``"child"``.
    """

    def __init__(self, reason: str, detail: str = "", wakes_at: datetime | None = None) -> None:
        super().__init__(f"suspended ({reason}{': ' + detail if detail else ''})")
        self.reason = reason
        self.detail = detail
        #: When the job becomes runnable by itself (a sleep's end, a wait's deadline).
        self.wakes_at = wakes_at


class InvalidEvent(DurableJobsError, ValueError):
    """``emit_event`` (or a wait) was given a bad event key or payload; nothing was written.

    ``field`` is ``"key"`` or ``"payload"``, so the REST API reports the
    error against that field.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class EventConflict(DurableJobsError):
    """The event ``key`` was already emitted with another payload.

    The first emit wins and never changes: emitting the same payload again
    is no error (``EmitResult.created`` is ``False``), another one is this.
    ``existing`` is the stored ``Event``.
    """

    def __init__(self, key: str, existing: Any) -> None:
        super().__init__(
            f"Event {key!r} was already emitted with a different payload "
            "(the first emit wins and never changes)."
        )
        self.key = key
        self.existing = existing
