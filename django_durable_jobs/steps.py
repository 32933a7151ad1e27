"""Durable steps: what runs behind ``ctx.step``, ``ctx.sleep``, ``ctx.wait_for_event``
and ``ctx.run_job`` (and their async twins).

One ``StepRuntime`` per attempt, made at the attempt's first step call (a
job that calls none makes none and runs no query for them). It reads the
job's step records once (one query), then:

- a step whose record is ``completed`` returns the recorded result without
  calling ``fn`` (replayed); any other runs ``fn`` and writes the record in
  one fenced statement (``db.record_step``), which also extends the lease
  and says whether a cancel was requested;
- a sleep, an event wait or a child wait that cannot end now *suspends*
  the job: one transaction, on the handler's connection, fenced by the
  lease, writes the step's record and the job's new state (pending at a
  time, or waiting), gives the lease and the attempt back, then raises
  ``Suspended`` (a ``BaseException``): the worker frees the slot and
  records no outcome, and the job runs again from the top when due.

Names, never call order, key the records: the n-th use of a name in one
run is ``name#n`` (the first is ``name``), counted when the call is made,
so ``asyncio.gather`` of distinctly named steps replays whatever order
they finish in.

What is exactly once: an ``atomic=True`` step's writes to the jobs'
database commit in the transaction of its record, so they happen once per
job or not at all. Anything else a step does (an HTTP call, an email) is
at least once: a worker killed after the effect and before the record runs
the step again; give such calls an idempotency key made of the job id and
the step's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any, NoReturn

from asgiref.sync import sync_to_async
from django.db import connections, transaction

from . import db, metrics
from .conf import jobs_settings
from .constants import IDEMPOTENCY_KEY_MAX_LENGTH, STEP_NAME_MAX_LENGTH
from .exceptions import (
    ChildJobFailed,
    EventTimeout,
    JobCancelled,
    LeaseLost,
    StepResultError,
    Suspended,
)
from .names import validate_event_key
from .transactions import in_own_transaction

__all__ = ["StepRetry", "StepRuntime"]

logger = logging.getLogger("django_durable_jobs.steps")

_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
#: A step's record statuses and kinds (models.StepStatus, models.StepKind).
COMPLETED, FAILED, SUSPENDED = "completed", "failed", "suspended"
STEP, SLEEP, EVENT, CHILD = "step", "sleep", "event", "child"
#: What a wait that timed out records (an event's record is {"event": payload}).
_TIMED_OUT = {"timed_out": True}


@dataclass(frozen=True)
class StepRetry:
    """A step's own retry policy: ``ctx.step(name, fn, retry=StepRetry(...))``.

    ``fn`` is called up to ``attempts`` times in the same attempt of the job
    while it raises one of ``on``; the n-th retry waits ``delay * backoff **
    (n - 1)`` seconds, at most ``max_delay``. The last failure fails the
    job's attempt as usual (its retries then follow the job's rules).
    """

    attempts: int = 3
    delay: float = 0.5
    backoff: float = 2.0
    max_delay: float = 60.0
    on: tuple[type[BaseException], ...] = (Exception,)

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or isinstance(self.attempts, bool):
            raise TypeError("StepRetry.attempts must be an integer")
        if self.attempts < 1:
            raise ValueError("StepRetry.attempts must be >= 1")
        if self.delay < 0 or self.max_delay < 0:
            raise ValueError("StepRetry delays must be >= 0")
        if self.backoff < 1:
            raise ValueError("StepRetry.backoff must be >= 1")
        if isinstance(self.on, type):
            object.__setattr__(self, "on", (self.on,))

    def wait_before(self, retry: int) -> float:
        """Seconds before the ``retry``-th retry (1: the second call of ``fn``)."""
        return float(min(self.max_delay, self.delay * self.backoff ** (retry - 1)))

    def retries(self, exc: BaseException, calls: int) -> bool:
        return calls < self.attempts and isinstance(exc, Exception) and isinstance(exc, self.on)


def _seconds(value: float | timedelta, what: str) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or a timedelta, got {value!r}")
    return float(value)


def _aware(when: datetime) -> datetime:
    if not isinstance(when, datetime):
        raise TypeError(f"sleep_until needs a datetime, got {when!r}")
    if when.tzinfo is None:
        raise ValueError("sleep_until needs an aware datetime (with a time zone)")
    return when


def _now() -> datetime:
    return datetime.now(dt_timezone.utc)


def _failure_text(exc: BaseException) -> str:
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}: {exc}"[:4000]


class StepRuntime:
    """One attempt's steps (see the module docstring); made by ``JobContext`` on first use."""

    def __init__(
        self,
        *,
        job_id: uuid.UUID,
        type: str,
        queue: str,
        attempt: int,
        token: uuid.UUID,
        lease_seconds: float,
        using: str,
        cancel: Any = None,
    ) -> None:
        self.job_id = job_id
        self.type = type
        self.queue = queue
        self.attempt = attempt
        self.token = token
        self.lease_seconds = lease_seconds
        self.using = using
        self._cancel = cancel
        self._records: dict[str, db.StepRecord] | None = None
        self._seen: dict[str, int] = {}
        # Names are counted where the calls are made: one thread, or the event
        # loop's; a lock all the same, for a handler that starts threads.
        self._lock = threading.Lock()

    # -- names and records -------------------------------------------------

    def occurrence(self, name: str) -> str:
        """The record's name for this use of ``name``: ``name``, then ``name#2``, ..."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a step's name must be a non-empty string, got {name!r}")
        if "#" in name:
            raise ValueError(f"a step's name cannot contain '#' (it counts repeats): {name!r}")
        with self._lock:
            count = self._seen[name] = self._seen.get(name, 0) + 1
        key = name if count == 1 else f"{name}#{count}"
        if len(key) > STEP_NAME_MAX_LENGTH:
            raise ValueError(f"step name {key[:40]!r}... is longer than {STEP_NAME_MAX_LENGTH}")
        return key

    def records(self) -> dict[str, db.StepRecord]:
        """The job's records, read at the first use (one query)."""
        records = self._records
        if records is None:
            _not_on_an_event_loop()
            records = self._records = db.load_steps(self.using, self.job_id, self.token)
        return records

    async def arecords(self) -> dict[str, db.StepRecord]:
        if self._records is not None:
            return self._records
        return await sync_to_async(self.records)()

    def _count(self, result: str) -> None:
        if metrics.ENABLED:
            metrics.record_step(self.queue, self.type, result)

    # -- fenced writes -----------------------------------------------------

    def _seen_cancel(self) -> None:
        flag = self._cancel
        if flag is not None:
            flag.request_cancel()

    def _checkpoint(self, name: str, **fields: Any) -> None:
        """Write the record (one statement); ``LeaseLost`` when the lease is gone."""
        fenced = db.record_step(
            self.using,
            job_id=self.job_id,
            token=self.token,
            lease_seconds=self.lease_seconds,
            name=name,
            attempt=self.attempt,
            **fields,
        )
        if fenced is None:
            raise LeaseLost(self.job_id)
        if fenced.cancel:
            self._seen_cancel()

    def _record_failure(self, name: str, kind: str, started: datetime, exc: BaseException) -> None:
        """Best effort: a failed step's record for operators (never masks ``exc``)."""
        connection = connections[self.using]
        if connection.in_atomic_block:
            return  # the handler's own transaction: it rolls back with exc anyway
        try:
            db.record_step(
                self.using,
                job_id=self.job_id,
                token=self.token,
                lease_seconds=self.lease_seconds,
                name=name,
                kind=kind,
                status=FAILED,
                attempt=self.attempt,
                started_at=started,
                error=_failure_text(exc),
            )
        except Exception:  # the step's own error is what the attempt reports
            logger.debug("Could not record the failure of step %s of job %s", name, self.job_id)

    def _encode(self, name: str, value: Any) -> str:
        try:
            text = _ENCODER.encode(value)
        except (TypeError, ValueError) as exc:
            raise StepResultError(name, f"its result is not JSON ({exc})") from exc
        limit = int(jobs_settings.STEP_RESULT_MAX_BYTES)
        size = len(text.encode())
        if size > limit:
            raise StepResultError(
                name,
                f"its result is {size} bytes of JSON, more than STEP_RESULT_MAX_BYTES ({limit})",
            )
        return text

    def _no_transaction(self, what: str) -> None:
        # A test's transaction (TestCase, pytest-django's db) is not the handler's:
        # run_jobs() runs jobs inside it, and a suspension there is a savepoint
        # that the test's rollback undoes with the rest.
        if in_own_transaction(connections[self.using]):
            raise RuntimeError(
                f"{what} cannot suspend the job inside transaction.atomic(): the suspension "
                "must commit before the handler stops. Call it outside the transaction."
            )

    def _suspend(self, **fields: Any) -> None:
        """The job's suspension (in the caller's transaction); raise if it cannot be."""
        fenced = db.suspend_job(self.using, job_id=self.job_id, token=self.token, **fields)
        if fenced is None:
            raise LeaseLost(self.job_id)
        if fenced.cancel:
            # Not suspended: the attempt ends cancelled, as any attempt of a
            # job cancelled while it runs (the transaction rolls back).
            self._seen_cancel()
            raise JobCancelled()

    def _suspended(self, reason: str, detail: str, wakes_at: datetime | None) -> NoReturn:
        if metrics.ENABLED:
            metrics.record_suspended(self.queue, reason)
        raise Suspended(reason, detail, wakes_at)

    # -- steps -------------------------------------------------------------

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: StepRetry | None,
        atomic: bool,
    ) -> Any:
        return self.run_step(self.occurrence(name), fn, args, kwargs, retry, atomic)

    def run_step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: StepRetry | None,
        atomic: bool,
    ) -> Any:
        record = self.records().get(name)
        if record is not None and record.status == COMPLETED:
            self._count("replayed")
            return record.result
        calls = 0
        while True:
            calls += 1
            started = _now()
            try:
                # atomic=True: the step's own writes and its record commit together.
                with transaction.atomic(using=self.using) if atomic else contextlib.nullcontext():
                    text = self._encode(name, _not_a_coroutine(name, fn(*args, **kwargs)))
                    self._checkpoint(
                        name, kind=STEP, status=COMPLETED, started_at=started, result_json=text
                    )
            except BaseException as exc:
                delay = self._retry_delay(retry, exc, calls)
                if delay is not None:
                    time.sleep(delay)
                    continue
                self._count("failed")
                if _recorded_as_failure(exc):
                    self._record_failure(name, STEP, started, exc)
                raise
            self._count("run")
            return json.loads(text)

    async def arun_step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: StepRetry | None,
        atomic: bool,
    ) -> Any:
        records = await self.arecords()
        record = records.get(name)
        if record is not None and record.status == COMPLETED:
            self._count("replayed")
            return record.result
        if not _is_async(fn):
            # A sync fn runs where a sync step does: on the slot thread, with
            # its connection (worker/event_loop.py), its checkpoint after it.
            return await sync_to_async(self.run_step)(name, fn, args, kwargs, retry, atomic)
        if atomic:
            raise TypeError(
                f"step {name!r}: atomic=True needs a plain (sync) function: a transaction "
                "belongs to one thread's connection, and a coroutine's awaits may run "
                "anywhere. Give astep a sync function for an atomic step."
            )
        calls = 0
        while True:
            calls += 1
            started = _now()
            try:
                text = self._encode(name, await fn(*args, **kwargs))
                await sync_to_async(self._checkpoint)(
                    name, kind=STEP, status=COMPLETED, started_at=started, result_json=text
                )
            except BaseException as exc:
                delay = self._retry_delay(retry, exc, calls)
                if delay is not None:
                    await asyncio.sleep(delay)
                    continue
                self._count("failed")
                if _recorded_as_failure(exc):
                    await sync_to_async(self._record_failure)(name, STEP, started, exc)
                raise
            self._count("run")
            return json.loads(text)

    def _retry_delay(self, retry: StepRetry | None, exc: BaseException, calls: int) -> float | None:
        """Seconds before the step's next call, or None: the failure ends the attempt.

        Only the step's own ``retry=`` policy calls it again, never for a result
        that cannot be stored, a lease lost or a cancel requested meanwhile.
        """
        if (
            retry is None
            or isinstance(exc, (StepResultError, LeaseLost))
            or not retry.retries(exc, calls)
            or self._cancelled()
        ):
            return None
        return retry.wait_before(calls)

    def _cancelled(self) -> bool:
        flag = self._cancel
        return flag is not None and flag.is_set()

    # -- sleeps ------------------------------------------------------------

    @staticmethod
    def wake_time(seconds: float | timedelta) -> datetime:
        return _now() + timedelta(seconds=_seconds(seconds, "ctx.sleep's duration"))

    @staticmethod
    def checked_time(when: datetime) -> datetime:
        return _aware(when)

    def sleep_named(self, name: str, when: datetime) -> None:
        """``ctx.sleep``/``ctx.sleep_until`` of the record ``name``, to wake at ``when``."""
        record = self.records().get(name)
        if record is not None:
            if record.status == COMPLETED:
                self._count("replayed")
                return
            wake_at = record.wake_at or when
            due = record.due or _now() >= wake_at
        else:
            wake_at = when
            if _now() >= wake_at:
                return  # nothing to wait for, nothing to replay
            due = False
        if due:
            self._checkpoint(name, kind=SLEEP, status=COMPLETED, wake_at=wake_at)
            self._count("run")
            return
        self._no_transaction("ctx.sleep")
        with transaction.atomic(using=self.using):
            if record is None:
                self._checkpoint(name, kind=SLEEP, status=SUSPENDED, wake_at=wake_at)
            self._suspend(
                status="pending",
                available_at=wake_at,
                waiting_for_json=json.dumps({"until": wake_at.isoformat()}),
            )
        self._suspended("sleep", name, wake_at)

    # -- events ------------------------------------------------------------

    @staticmethod
    def event_step(key: str) -> str:
        """The record's name for a wait for ``key`` (emit_event's key rules: ``InvalidJob``)."""
        return f"event:{validate_event_key(key)}"

    def wait_named(self, name: str, key: str, timeout: float | timedelta | None) -> Any:
        """``ctx.wait_for_event(key)``, recorded as ``name``."""
        record = self.records().get(name)
        if record is not None and record.status == COMPLETED:
            self._count("replayed")
            if isinstance(record.result, dict) and "event" in record.result:
                return record.result["event"]
            raise EventTimeout(key)
        if record is not None:
            deadline = record.wake_at
            past = deadline is not None and (record.due or _now() >= deadline)
        else:
            seconds = None if timeout is None else _seconds(timeout, "the wait's timeout")
            deadline = None if seconds is None else _now() + timedelta(seconds=seconds)
            past = seconds is not None and seconds <= 0
        self._no_transaction("ctx.wait_for_event")
        with transaction.atomic(using=self.using):
            # Its own statement, first: what follows sees every emit committed
            # before the lock, and a later emit waits for this transaction.
            db.lock_event_key(self.using, key)
            emitted, payload = db.read_event(self.using, key)
            if emitted:
                self._checkpoint(
                    name,
                    kind=EVENT,
                    status=COMPLETED,
                    result_json=_ENCODER.encode({"event": payload}),
                    event_key=key,
                    clear_waiter=True,
                )
            elif past:
                self._checkpoint(
                    name,
                    kind=EVENT,
                    status=COMPLETED,
                    result_json=_ENCODER.encode(_TIMED_OUT),
                    event_key=key,
                    clear_waiter=True,
                )
            else:
                self._checkpoint(
                    name, kind=EVENT, status=SUSPENDED, wake_at=deadline, event_key=key
                )
                db.add_event_waiter(self.using, self.job_id, key)
                waiting_for: dict[str, Any] = {"event": key}
                if deadline is not None:
                    waiting_for["deadline"] = deadline.isoformat()
                self._suspend(
                    status="pending" if deadline is not None else "waiting",
                    available_at=deadline,
                    waiting_for_json=json.dumps(waiting_for),
                )
        if emitted:
            self._count("run")
            return payload
        if past:
            self._count("run")
            raise EventTimeout(key)
        self._suspended("event", key, deadline)

    # -- child jobs --------------------------------------------------------

    def child_key(self, name: str) -> str:
        key = f"durable_jobs.run_job:{self.job_id}:{name}"
        if len(key) > IDEMPOTENCY_KEY_MAX_LENGTH:
            digest = hashlib.sha256(name.encode()).hexdigest()[:40]
            key = f"durable_jobs.run_job:{self.job_id}:{digest}"
        return key

    def run_job_named(
        self, name: str, type: str, payload: dict[str, Any] | None, options: dict[str, Any]
    ) -> Any:
        """``ctx.run_job(type, payload, **options)``, recorded as ``name``."""
        from .enqueueing import enqueue  # needs the models

        record = self.records().get(name)
        if record is not None and record.status == COMPLETED:
            self._count("replayed")
            return record.result
        child_id = None if record is None else record.child_id
        self._no_transaction("ctx.run_job")
        waited = False
        state: tuple[str, Any, str] | None = None
        with transaction.atomic(using=self.using):
            if child_id is None:
                options.pop("using", None)  # the child lives in this job's database
                if options.get("idempotency_key") is None:
                    options["idempotency_key"] = self.child_key(name)
                child_id = enqueue(type, payload, using=self.using, **options).job.pk
            if db.await_child(self.using, self.job_id, child_id):
                # This job's row after the child's (the order of the child's
                # own outcome, which then locks this one to release it).
                fenced = db.lock_job(self.using, self.job_id, self.token)
                if fenced is None:
                    raise LeaseLost(self.job_id)
                self._checkpoint(name, kind=CHILD, status=SUSPENDED, child_id=child_id)
                self._suspend(
                    status="waiting",
                    waiting_for_json=json.dumps({"job": str(child_id)}),
                    awaits=True,
                )
                waited = True
            else:
                state = db.child_state(self.using, child_id)
        if waited:
            self._suspended("child", str(child_id), None)
        if state is None:  # finished, then pruned: its result is gone
            state = ("cancelled", None, "the child job no longer exists (pruned)")
        status, result, last_error = state
        if status == "completed":
            self._checkpoint(
                name,
                kind=CHILD,
                status=COMPLETED,
                result_json=_ENCODER.encode(result),
                child_id=child_id,
            )
            self._count("run")
            return result
        failure = ChildJobFailed(child_id, status, last_error)
        self._count("failed")
        self._record_failure_of_child(name, child_id, failure)
        raise failure

    def _record_failure_of_child(
        self, name: str, child_id: uuid.UUID, failure: ChildJobFailed
    ) -> None:
        self._checkpoint(
            name, kind=CHILD, status=FAILED, error=_failure_text(failure), child_id=child_id
        )


def _recorded_as_failure(exc: BaseException) -> bool:
    """Whether a step's failure gets a record: an error of its function, not a stop
    (``BaseException``: a cancel, an exit) and not a lease lost (nothing may be written)."""
    return isinstance(exc, Exception) and not isinstance(exc, LeaseLost)


def _not_on_an_event_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        "an async def handler awaits the async twins of the step API: await ctx.astep(...), "
        "ctx.asleep(...), ctx.asleep_until(...), ctx.await_event(...), ctx.arun_job(...)"
    )


def _is_async(fn: Callable[..., Any]) -> bool:
    from asgiref.sync import iscoroutinefunction

    return iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _not_a_coroutine(name: str, value: Any) -> Any:
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()
        raise TypeError(
            f"step {name!r}: its function returned an awaitable; use `await ctx.astep(...)` "
            "for an async function"
        )
    return value


def awaitable(call: Callable[..., Any], *args: Any) -> Awaitable[Any]:
    """``call(*args)`` on the slot thread (thread-sensitive), as a coroutine."""
    return sync_to_async(call)(*args)
