"""Per-attempt time limits: the watchdog that enforces them.

Each attempt is registered when its handler starts, with its deadline on
the monotonic clock (the limit is ``job.timeout``, else the handler's
``timeout``, else ``TIMEOUT_SECONDS``). A thread of the watchdog's own
sleeps until the nearest deadline. When one passes:

1. the attempt is cancelled (``ctx.cancelled`` turns True);
2. the worker takes the job back from the running handler (``take``): from
   then on the handler's own late outcome is dropped, and the watchdog
   submits a failed attempt with a ``JobTimeout`` error through the
   executor's normal retry/backoff/dead logic, fenced by the lease token
   like every outcome. The job does not wait for the stuck code;
3. the handler thread is interrupted: ``JobTimeout`` is raised in it
   asynchronously (``PyThreadState_SetAsyncExc``). That stops Python code
   at its next bytecode, but not a call blocked in C (``time.sleep``, a
   socket read without a timeout) until the call returns;
4. if the thread has still not returned ``grace`` seconds later, the
   worker is told (``on_stuck``) and recycles itself: it stops claiming,
   lets its other jobs finish, and exits with code 3 so that its process
   manager starts a fresh one. A thread that returns in time goes back to
   serving jobs.

The interrupt is sent at most once per attempt, and only while the
handler thread is still inside that attempt: ``end()`` (called by the
handler thread when the handler has returned) clears one that was sent
but not yet delivered. The thread must still tolerate one arriving in the
few bytecodes between the handler's return and ``end()``; see
``Worker._run_attempt``.
"""

from __future__ import annotations

import ctypes
import logging
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from .. import metrics
from ..context import CancelFlag
from ..exceptions import JobTimeout
from .claimed import ClaimedJob
from .executor import RetryPolicy, timed_out
from .outcomes import Outcome

logger = logging.getLogger("django_durable_jobs.worker")

# Attempt states.
RUNNING = "running"
TIMED_OUT = "timed_out"  # past its deadline, not yet interrupted
INTERRUPTED = "interrupted"  # JobTimeout sent to its thread
ENDED = "ended"  # the handler returned

#: Deepest stack of the handler thread kept in the JobTimeout error entry.
STACK_LIMIT = 30


def effective_timeout(
    job_timeout: float | None, handler_timeout: float | None, default: float | None
) -> float | None:
    """The attempt's limit: the job's own, else its handler's, else the setting."""
    for value in (job_timeout, handler_timeout, default):
        if value is not None:
            return float(value)
    return None


def interrupt_thread(thread_id: int, exc: type[BaseException] | None) -> int:
    """Raise ``exc`` in thread ``thread_id`` at its next bytecode (``None``: clear a pending one).

    Returns how many threads were affected (0: no such thread).
    """
    return int(
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread_id), None if exc is None else ctypes.py_object(exc)
        )
    )


def thread_stack(thread_id: int) -> str:
    """Where thread ``thread_id`` is now, for the error history ("" if it is gone)."""
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return ""
    return "".join(traceback.format_stack(frame, limit=STACK_LIMIT))


class Attempt:
    """One running attempt of a handler, as the watchdog sees it."""

    __slots__ = (
        "cancel",
        "deadline",
        "deadline_at",
        "interrupted_at",
        "job",
        "started",
        "state",
        "stuck",
        "thread_id",
        "timeout",
    )

    def __init__(self, job: ClaimedJob, timeout: float | None) -> None:
        self.job = job
        self.timeout = timeout
        self.started = time.monotonic()
        #: Monotonic: immune to changes of the system clock.
        self.deadline = None if timeout is None else self.started + timeout
        #: The same moment on the wall clock, for the handler (``ctx.deadline``).
        self.deadline_at = (
            None if timeout is None else datetime.now(dt_timezone.utc) + timedelta(seconds=timeout)
        )
        self.cancel = CancelFlag()
        self.thread_id = threading.get_ident()
        self.state = RUNNING
        self.interrupted_at: float | None = None
        self.stuck = False


class Watchdog:
    """Enforces the deadlines of the attempts running in one worker.

    Attempts are keyed by lease token, unique to each claim: a job that
    failed at its deadline may be claimed again by the same worker while
    the first attempt's thread still runs. ``take(job)`` asks the worker
    to give up on a job's running attempt (True when the worker still held
    it and now drops the handler's own outcome); ``submit`` hands an
    outcome to the completer; ``on_stuck`` is called once per attempt
    whose thread did not return within ``grace``
    seconds of its interrupt.
    """

    def __init__(
        self,
        *,
        worker_id: str,
        policy: RetryPolicy,
        default_timeout: float | None,
        grace: float,
        take: Callable[[ClaimedJob], bool],
        submit: Callable[[Outcome], None],
        on_stuck: Callable[[Attempt], None],
        interrupt: Callable[[int, type[BaseException] | None], int] = interrupt_thread,
    ) -> None:
        self.worker_id = worker_id
        self.policy = policy
        self.default_timeout = default_timeout
        self.grace = grace
        self._take = take
        self._submit = submit
        self._on_stuck = on_stuck
        self._interrupt = interrupt
        # The handler threads take the bare lock (``with self._lock``: a C-level
        # acquire, which an asynchronous JobTimeout cannot split from the
        # with-block's cleanup); only the watchdog's own thread, which is
        # never interrupted, goes through the Condition's Python methods.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._attempts: dict[uuid.UUID, Attempt] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="durable-jobs-watchdog", daemon=True)
        #: Attempts failed at their deadline, for tests and logs.
        self.timed_out = 0

    # -- the handler threads' side --------------------------------------

    def begin(self, job: ClaimedJob, handler_timeout: float | None) -> Attempt:
        """Register the attempt the calling thread is about to run."""
        attempt = Attempt(
            job, effective_timeout(job.timeout, handler_timeout, self.default_timeout)
        )
        with self._lock:
            self._attempts[job.lease_token] = attempt
            if attempt.deadline is not None:
                self._cond.notify_all()
        return attempt

    def end(self, job: ClaimedJob) -> None:
        """The calling thread's attempt of ``job`` is over.

        Safe against the watchdog's interrupt: once this returns, no
        ``JobTimeout`` is pending or can be sent for the attempt. One that
        arrives while this runs is absorbed and the work done again (every
        step is idempotent; the attempt leaves the table last).
        """
        while True:
            try:
                with self._lock:
                    attempt = self._attempts.get(job.lease_token)
                    if attempt is None:
                        return
                    if attempt.state == INTERRUPTED:
                        # Sent, maybe not delivered yet: clear it.
                        self._interrupt(attempt.thread_id, None)
                    attempt.state = ENDED
                    attempt.cancel.set()
                    del self._attempts[job.lease_token]
                return
            except JobTimeout:
                # The interrupt arrived here rather than in the handler (at
                # most once per attempt): go round again.
                continue

    # -- the worker's side ----------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)

    def cancel(self, job_ids: set[uuid.UUID]) -> None:
        """The worker gave up on these jobs (lease lost, shutdown): ``ctx.cancelled``."""
        with self._cond:
            for attempt in self._attempts.values():
                if attempt.job.id in job_ids:
                    attempt.cancel.set()

    def deadlines(self) -> dict[uuid.UUID, float]:
        """Monotonic deadlines of the running attempts that have one, by lease token."""
        with self._cond:
            return {
                token: attempt.deadline
                for token, attempt in self._attempts.items()
                if attempt.deadline is not None
            }

    def stuck(self) -> list[Attempt]:
        """Attempts whose thread ignored its interrupt for longer than ``grace``."""
        with self._cond:
            return [a for a in self._attempts.values() if a.stuck]

    # -- the watchdog thread --------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                due, wake = self._due(time.monotonic())
                if not due:
                    self._cond.wait(None if wake is None else max(0.0, wake - time.monotonic()))
                    continue
            for attempt, what in due:
                try:
                    if what == TIMED_OUT:
                        self._time_out(attempt)
                    else:
                        self._report_stuck(attempt)
                except Exception:  # never let the watchdog die: time limits depend on it
                    logger.exception("Watchdog error on job %s", attempt.job.id)

    def _due(self, now: float) -> tuple[list[tuple[Attempt, str]], float | None]:
        """(attempts needing action now, when to look again). Called under the lock."""
        due: list[tuple[Attempt, str]] = []
        wake: float | None = None
        for attempt in self._attempts.values():
            if attempt.state == RUNNING and attempt.deadline is not None:
                at = attempt.deadline
                what = TIMED_OUT
            elif attempt.state == INTERRUPTED and not attempt.stuck:
                assert attempt.interrupted_at is not None
                at = attempt.interrupted_at + self.grace
                what = INTERRUPTED
            else:
                continue
            if now >= at:
                due.append((attempt, what))
            elif wake is None or at < wake:
                wake = at
        return due, wake

    def _time_out(self, attempt: Attempt) -> None:
        job = attempt.job
        with self._cond:
            if attempt.state != RUNNING:
                return
            attempt.state = TIMED_OUT
            attempt.cancel.set()
        elapsed = time.monotonic() - attempt.started
        # The stack before the interrupt changes it: where the handler was stuck.
        stack = thread_stack(attempt.thread_id)
        if self._take(job):
            outcome = timed_out(job, self.worker_id, self.policy, attempt.timeout, elapsed, stack)
            self._submit(outcome)
            self.timed_out += 1
            if metrics.ENABLED:
                metrics.record_finished(job, outcome.kind, elapsed)
        with self._cond:
            if attempt.state != TIMED_OUT:
                return  # the handler returned meanwhile: nothing to interrupt
            attempt.state = INTERRUPTED
            attempt.interrupted_at = time.monotonic()
            affected = self._interrupt(attempt.thread_id, JobTimeout)
        logger.warning(
            "Handler thread of job %s interrupted at its deadline (%ss) worker=%s%s",
            job.id, attempt.timeout, self.worker_id, "" if affected else ": thread not found",
            extra={"job_id": str(job.id), "job_type": job.type, "worker_id": self.worker_id},
        )  # fmt: skip

    def _report_stuck(self, attempt: Attempt) -> None:
        job = attempt.job
        with self._cond:
            if attempt.state != INTERRUPTED or attempt.stuck:
                return
            attempt.stuck = True
        logger.error(
            "Handler thread of job %s type=%s ignored its interrupt for %ss (blocked in C "
            "code?): the worker stops claiming and will exit for a restart once its other "
            "jobs finish worker=%s\n%s",
            job.id, job.type, self.grace, self.worker_id, thread_stack(attempt.thread_id),
            extra={"job_id": str(job.id), "job_type": job.type, "worker_id": self.worker_id},
        )  # fmt: skip
        self._on_stuck(attempt)
