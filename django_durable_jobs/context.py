"""What a handler receives: the job it runs and the attempt it is in."""

from __future__ import annotations

import contextvars
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .exceptions import JobCancelled, JobTimeout

if TYPE_CHECKING:
    from .steps import StepRetry, StepRuntime


class CancelFlag:
    """Set once by the worker when it gives up on an attempt.

    A plain attribute rather than a ``threading.Event``: set once, by
    another thread, and read by the handler as often as it likes
    (``ctx.cancelled``); a lock on every read would buy nothing.
    ``requested`` says that the reason is a cancel of the job (rather than
    its time limit, a lost lease or a shutdown): ``ctx.check()`` then
    raises ``JobCancelled``.

    A cancel request sets the flag at once but does not give the attempt
    up: the handler has a grace to stop by itself. ``on_give_up`` is how an
    ``async def`` handler's task is cancelled when the worker does give up
    (``worker/event_loop.py``); a sync handler's thread is never interrupted.
    """

    __slots__ = ("_given_up", "_on_give_up", "_requested", "_set")

    def __init__(self) -> None:
        self._set = False
        self._requested = False
        self._given_up = False
        self._on_give_up: Callable[[], None] | None = None

    def set(self) -> None:
        """The worker gives up on the attempt (or it is over): ``ctx.cancelled`` for good."""
        self._set = True
        self._given_up = True
        callback = self._on_give_up
        if callback is not None:
            self._on_give_up = None
            callback()

    def request_cancel(self) -> None:
        """Someone cancelled the job: the reason first, so a reader of the flag sees it."""
        self._requested = True
        self._set = True

    def on_give_up(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` once when the worker gives up (at once if it has); None: forget it.

        Set and called from different threads without a lock: ``set`` writes
        the state before it reads the callback and this method the other way
        round, so one of them always sees the other and the callback is never
        missed; it may (rarely) run twice, so it must not mind.
        """
        self._on_give_up = callback
        if callback is not None and self._given_up:
            self._on_give_up = None
            callback()

    def is_set(self) -> bool:
        return self._set

    @property
    def requested(self) -> bool:
        return self._requested


@dataclass(frozen=True)
class JobContext:
    """The job a handler runs, passed as its only argument.

    ``attempt`` counts from 1. The payload is the job's JSON object.

    Time limit: ``timeout`` is this attempt's limit in seconds and
    ``deadline`` the wall-clock moment (an aware UTC ``datetime``) it ends,
    both ``None`` without a limit. ``deadline`` is for display and for
    passing on (say, as an HTTP client's timeout); the worker itself
    measures the limit on the monotonic clock, so changing the system
    clock moves neither ``cancelled`` nor the watchdog. A long handler
    should test ``ctx.cancelled`` or call ``ctx.check()`` between steps
    (an ``async def`` handler's task is also cancelled when the worker
    gives up on the attempt).
    """

    id: uuid.UUID
    type: str
    queue: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    worker_id: str = ""
    idempotency_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    deadline: datetime | None = None
    # Set by the worker: the deadline on time.monotonic()'s clock, and the
    # flag it sets when it gives up on the attempt (deadline passed, lease
    # lost, shutdown). Private: handlers read `cancelled`.
    _deadline_monotonic: float | None = field(default=None, repr=False, compare=False)
    _cancel: CancelFlag | None = field(default=None, repr=False, compare=False)
    # How many parents the job was enqueued with (depends_on), from the
    # claim: 0 and parent_results needs no query.
    _parent_count: int = field(default=0, repr=False, compare=False)
    # The claim's lease (its token, its length) and the jobs' database:
    # what a durable step's fenced checkpoint needs. None: not run by a
    # worker, and the step API refuses to run.
    _lease_token: uuid.UUID | None = field(default=None, repr=False, compare=False)
    _lease_seconds: float = field(default=30.0, repr=False, compare=False)
    _using: str | None = field(default=None, repr=False, compare=False)

    @cached_property
    def parent_results(self) -> dict[uuid.UUID, Any]:
        """``{parent id: its result}`` for the jobs this one was enqueued to wait for.

        Read once, on first use (one query; none for a job without parents).
        A parent that ended dead or cancelled (its child ran anyway, with
        ``on_parent_failure="run"``) maps to ``None``, as does one whose
        handler returned nothing; a parent pruned since is missing.
        """
        if not self._parent_count:
            return {}
        from .dependencies import parent_results  # needs the models

        return parent_results(self.id)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @property
    def remaining(self) -> float | None:
        """Seconds left before the deadline (0 once past it); ``None`` without a limit."""
        if self._deadline_monotonic is None:
            return None
        return max(0.0, self._deadline_monotonic - time.monotonic())

    @property
    def cancelled(self) -> bool:
        """True once the job was cancelled, or the attempt is past its deadline or
        the worker gave up on it.

        A cancel of the running job (``POST /api/jobs/{id}/cancel``, ``jobs
        cancel``, the admin) turns it True within about a second on whichever
        worker runs the job; the attempt then ends ``cancelled`` whatever the
        handler returns. The worker gives up on an attempt when its lease was
        lost (the job was reaped and may run elsewhere) or at the end of a
        shutdown's grace period. Cheap (no query): test it as often as
        convenient. Whatever the handler does after this turns True is not
        recorded.
        """
        cancel = self._cancel
        if cancel is not None and cancel.is_set():
            return True
        deadline = self._deadline_monotonic
        return deadline is not None and time.monotonic() >= deadline

    def check(self) -> None:
        """Raise if the attempt is cancelled (see ``cancelled``).

        ``JobCancelled`` when the job itself was cancelled, else
        ``JobTimeout`` (past the deadline, or the worker gave up on it).
        """
        cancel = self._cancel
        if cancel is not None and cancel.requested:
            raise JobCancelled()
        if self.cancelled:
            raise JobTimeout(self.timeout)

    # -- durable steps (steps.py) -------------------------------------------

    @cached_property
    def _steps(self) -> StepRuntime:
        """This attempt's steps, made at the first step call (a job without steps: never)."""
        if self._lease_token is None or self._using is None:
            raise RuntimeError(
                "durable steps (ctx.step, ctx.sleep, ctx.wait_for_event, ctx.run_job) need a "
                "job run by a worker, which holds its lease"
            )
        from .steps import StepRuntime  # needs the gateway and the models

        return StepRuntime(
            job_id=self.id,
            type=self.type,
            queue=self.queue,
            attempt=self.attempt,
            token=self._lease_token,
            lease_seconds=self._lease_seconds,
            using=self._using,
            cancel=self._cancel,
        )

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: StepRetry | None = None,
        atomic: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once per job and return its JSON result.

        A later run of the job (a retry, a wake-up) gets the recorded result
        and ``fn`` is not called. Keyed by ``name``; the same name used again
        in one run counts (``name``, ``name#2``, ...), never the call order.
        The result must be JSON (``allow_nan=False``) of at most
        ``STEP_RESULT_MAX_BYTES``, else ``StepResultError`` naming the step
        fails the attempt; what the caller gets back is the result as
        recorded (decoded JSON), the same on the first run as on a replay.

        A step that raises is not recorded: the exception fails the attempt
        (the job's retry rules), unless ``retry`` (a ``StepRetry``) calls
        ``fn`` again first. ``atomic=True``: ``fn`` runs in
        ``transaction.atomic()`` on the jobs' database and the record
        commits in that transaction: its writes there happen exactly once.
        Other effects (HTTP calls, emails) are at least once: give them an
        idempotency key made of ``ctx.id`` and the step's name.

        Writing the record extends the lease and turns ``ctx.cancelled`` True
        if the job was cancelled; a worker whose lease was taken over gets
        ``LeaseLost`` and writes nothing.
        """
        return self._steps.step(name, fn, args, kwargs, retry, atomic)

    def astep(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: StepRetry | None = None,
        atomic: bool = False,
        **kwargs: Any,
    ) -> Awaitable[Any]:
        """``step`` for ``async def`` handlers: ``await ctx.astep(name, fn, ...)``.

        ``fn`` may be sync (it runs on the slot's thread, with its database
        connection) or async (awaited; ``atomic=True`` then raises
        ``TypeError``: a transaction needs a sync function). The name is
        counted when ``astep`` is called, so ``asyncio.gather`` of distinctly
        named steps replays correctly.
        """
        steps = self._steps
        return steps.arun_step(steps.occurrence(name), fn, args, kwargs, retry, atomic)

    def sleep(self, name: str, duration: float | timedelta) -> None:
        """Suspend the job for ``duration`` (seconds or a ``timedelta``), freeing its slot.

        The first call records the wake-up time and suspends: the handler
        stops here (``Suspended``, a ``BaseException``: do not catch it), the
        job is pending until then and runs again from the top, its recorded
        steps replaying; this call then returns ``None``. Never a failed
        attempt. Keyed by ``name`` like a step. Not inside ``transaction.atomic()``.
        """
        steps = self._steps
        steps.sleep_named(steps.occurrence(name), steps.wake_time(duration))

    def sleep_until(self, name: str, when: datetime) -> None:
        """``sleep`` until the aware ``datetime`` ``when`` (a past one returns at once)."""
        steps = self._steps
        steps.sleep_named(steps.occurrence(name), steps.checked_time(when))

    def asleep(self, name: str, duration: float | timedelta) -> Awaitable[None]:
        """``sleep`` for ``async def`` handlers."""
        from .steps import awaitable

        steps = self._steps
        return awaitable(steps.sleep_named, steps.occurrence(name), steps.wake_time(duration))

    def asleep_until(self, name: str, when: datetime) -> Awaitable[None]:
        """``sleep_until`` for ``async def`` handlers."""
        from .steps import awaitable

        steps = self._steps
        return awaitable(steps.sleep_named, steps.occurrence(name), steps.checked_time(when))

    def wait_for_event(self, key: str, timeout: float | timedelta | None = None) -> Any:
        """The payload of the event ``key`` (``emit_event``), suspending the job until it comes.

        An event emitted before the wait is found at once. Otherwise the job
        suspends (``Suspended``; its slot is freed) and runs again from the
        top when the event is emitted, this call then returning its payload.
        With ``timeout`` (seconds or a ``timedelta``, counted from the first
        wait, not restarted by later runs), ``EventTimeout`` is raised once
        it passes without the event, and at every later run. Recorded as
        the step ``event:<key>`` (repeats counted). Not inside
        ``transaction.atomic()``.
        """
        steps = self._steps
        return steps.wait_named(steps.occurrence(steps.event_step(key)), key, timeout)

    def await_event(self, key: str, timeout: float | timedelta | None = None) -> Awaitable[Any]:
        """``wait_for_event`` for ``async def`` handlers."""
        from .steps import awaitable

        steps = self._steps
        return awaitable(steps.wait_named, steps.occurrence(steps.event_step(key)), key, timeout)

    def run_job(self, type: str, payload: dict[str, Any] | None = None, **options: Any) -> Any:
        """Run a child job of ``type`` and return its result, suspending until it finishes.

        The child is enqueued once (``options`` are ``enqueue``'s; its
        idempotency key derives from this job and the step unless given),
        and this job waits without holding a slot (so parents cannot starve
        their children). A child that ends ``dead`` or ``cancelled`` raises
        ``ChildJobFailed``. Recorded as the step ``run_job:<type>`` (repeats
        counted). Not inside ``transaction.atomic()``.
        """
        steps = self._steps
        return steps.run_job_named(steps.occurrence(f"run_job:{type}"), type, payload, options)

    def arun_job(
        self, type: str, payload: dict[str, Any] | None = None, **options: Any
    ) -> Awaitable[Any]:
        """``run_job`` for ``async def`` handlers."""
        from .steps import awaitable

        steps = self._steps
        name = steps.occurrence(f"run_job:{type}")
        return awaitable(steps.run_job_named, name, type, payload, options)


#: The job the current handler runs (set by the worker around each call).
_current_job: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "durable_jobs_current_job", default=None
)


def current_job() -> JobContext:
    """The ``JobContext`` of the job whose handler is running here.

    For code that gets no context argument: a Django ``@task`` function
    (``django_durable_jobs.tasks.current_job``), or a helper deep in a
    handler. Raises ``RuntimeError`` outside a job run by a worker.
    """
    ctx = _current_job.get()
    if ctx is None:
        raise RuntimeError(
            "no durable job is running here: current_job() works inside a job's handler "
            "(or a Django task) run by a worker"
        )
    return ctx
