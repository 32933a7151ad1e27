"""Per-attempt time limits: the watchdog that enforces them.

Each attempt is begun (``AttemptTable.begin``) when its handler starts,
with its deadline on the monotonic clock (the limit is ``job.timeout``,
else the handler's ``timeout``, else ``TIMEOUT_SECONDS``). A thread of the
watchdog's own sleeps until the nearest deadline. When one passes:

1. the attempt is cancelled (``ctx.cancelled`` turns True, ``ctx.check()``
   raises ``JobTimeout``);
2. the attempt goes ``TIMED_OUT`` in the attempt table, when its handler
   still owned it: from then on the handler's own late outcome is dropped,
   and the watchdog
   submits a failed attempt with a ``JobTimeout`` error through the
   executor's normal retry/backoff/dead logic, fenced by the lease token
   like every outcome. The job does not wait for the stuck code;
3. the handler thread is left alone. It keeps its slot until it returns:
   a cooperative handler sees ``ctx.cancelled`` and stops, a blocking call
   ends. A thread that returns goes back to serving jobs;
4. if the thread has still not returned ``grace`` seconds after the
   deadline, the worker is told (``on_stuck``) and recycles itself: it
   stops claiming, lets its other jobs finish, and exits with code 3 so
   that its process manager starts a fresh one. Python cannot kill a
   thread; a new process is the only way to get the slot back.

A job cancelled while it runs goes the same way: its cancel flag is set at
once, and its deadline comes forward to ``grace`` seconds after the worker
heard of the request (``request_cancel``). A handler that stops before
then ends the attempt ``cancelled`` itself; at that deadline the watchdog
records the ``cancel`` outcome (not a failed attempt), and a thread still
busy ``grace`` seconds later recycles the worker, as above.

Why the thread is never interrupted: an asynchronous exception
(``PyThreadState_SetAsyncExc``) lands at any bytecode, including between a
library's ``lock.acquire()`` and the ``try``/``finally`` that releases it.
It did exactly that inside ``logging.Handler.handle``: the log handler's
lock stayed owned by the interrupted thread, and the watchdog and the
heartbeat thread blocked on it for ever, hanging the whole worker. Any
lock or protocol state in any library a handler calls (psycopg, Django's
connections) has the same hazard, and no code outside the handler can make
it safe. Cancelling the attempt, recording it and recycling a process that
stays stuck is slower to free a slot, but it cannot corrupt the process.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

from .. import metrics
from ..backoff import RetryPolicy
from ..db.records import ClaimedJob, Outcome
from ..services import Service
from . import outcomes
from .attempts import Attempt, AttemptTable
from .executor import timed_out
from .stacks import STACK_LIMIT, thread_stack

__all__ = ["STACK_LIMIT", "Watchdog", "effective_timeout", "handler_stack", "thread_stack"]

logger = logging.getLogger("django_durable_jobs.worker")


def effective_timeout(
    job_timeout: float | None, handler_timeout: float | None, default: float | None
) -> float | None:
    """The attempt's limit: the job's own, else its handler's, else the setting."""
    for value in (job_timeout, handler_timeout, default):
        if value is not None:
            return float(value)
    return None


def handler_stack(attempt: Attempt) -> tuple[str, str]:
    """What runs the attempt's handler (``"thread"`` or ``"coroutine"``) and where it is now."""
    if attempt.task_stack is not None:
        return "coroutine", attempt.task_stack()
    return "thread", thread_stack(attempt.thread_id)


class Watchdog(Service):
    """Enforces the deadlines of the attempts in one worker's attempt table.

    ``submit`` hands the failed attempt's outcome to the completer;
    ``on_stuck`` is called once per attempt whose thread did not return
    within ``grace`` seconds of its deadline. Time is the table's clock.
    """

    def __init__(
        self,
        *,
        attempts: AttemptTable,
        worker_id: str,
        policy: RetryPolicy,
        default_timeout: float | None,
        grace: float,
        submit: Callable[[Outcome], None],
        on_stuck: Callable[[Attempt], None],
    ) -> None:
        self.attempts = attempts
        self.worker_id = worker_id
        self.policy = policy
        self.default_timeout = default_timeout
        self.grace = grace
        self._submit = submit
        self._on_stuck = on_stuck
        # On the table's lock: a new deadline and the wake-up it needs are one step.
        self._cond = threading.Condition(attempts.lock)
        self._stopping = False
        super().__init__("durable-jobs-watchdog")
        #: Attempts failed at their deadline, for tests and logs.
        self.timed_out = 0
        #: Attempts of cancelled jobs ended here, their handler still running.
        self.cancelled = 0

    # -- the handler threads' side --------------------------------------

    def begin(self, job: ClaimedJob, handler_timeout: float | None) -> Attempt | None:
        """Begin the attempt the calling thread is about to run (None: not ours any more)."""
        timeout = effective_timeout(job.timeout, handler_timeout, self.default_timeout)
        with self._cond:
            attempt = self.attempts.begin(job.lease_token, timeout)
            if attempt is not None and attempt.deadline is not None:
                self._cond.notify_all()
        return attempt

    # -- the worker's side ----------------------------------------------

    def request_cancel(self, job_ids: set[uuid.UUID]) -> list[Attempt]:
        """These jobs were cancelled: set their attempts' flags, and take them at the
        grace's end if their handlers have not stopped by then. The attempts told."""
        with self._cond:
            told = self.attempts.request_cancel(job_ids, self.grace)
            if told:
                self._cond.notify_all()  # a deadline came forward
        return told

    def _request_stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def deadlines(self) -> dict[uuid.UUID, float]:
        """Monotonic deadlines of the running attempts that have one, by lease token."""
        return self.attempts.deadlines()

    def stuck(self) -> list[Attempt]:
        """Attempts whose thread has not returned ``grace`` seconds after their deadline."""
        return self.attempts.stuck()

    # -- the watchdog thread --------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                late, stuck, wake = self.attempts.overdue(self.grace)
                if not late and not stuck:
                    now = self.attempts.clock()
                    self._cond.wait(None if wake is None else max(0.0, wake - now))
                    continue
            self._act(late, stuck)

    def check(self) -> None:
        """Act on whatever is overdue now, on the calling thread (tests drive a fake clock)."""
        late, stuck, _ = self.attempts.overdue(self.grace)
        self._act(late, stuck)

    def _act(self, late: list[Attempt], stuck: list[Attempt]) -> None:
        """Outside the lock: time out the late attempts, report the stuck threads."""
        for attempt in late:
            self._guarded(self._time_out, attempt)
        for attempt in stuck:
            self._guarded(self._report_stuck, attempt)

    @staticmethod
    def _guarded(action: Callable[[Attempt], None], attempt: Attempt) -> None:
        try:
            action(attempt)
        except Exception:  # never let the watchdog die: time limits depend on it
            logger.exception("Watchdog error on job %s", attempt.job.id)

    def _time_out(self, attempt: Attempt) -> None:
        job = attempt.job
        # Where the handler is stuck, for the error history: before the
        # cancel flag, which a cooperative handler would act on (and which
        # cancels an async handler's task).
        what, stack = handler_stack(attempt)
        taken = self.attempts.time_out(attempt)
        # Only now: a handler that sees ctx.cancelled has had its job taken
        # (its outcome is dropped), so the executor need not log a retry for it.
        attempt.cancel.set()
        if not taken:
            return  # no longer this worker's to record (finished, released, lease lost)
        assert attempt.started is not None  # noqa: S101 (narrows for mypy: a begun attempt)
        elapsed = self.attempts.clock() - attempt.started
        if attempt.cancel_requested is not None:
            self._cancel(attempt, elapsed, what, stack)
            return
        outcome = timed_out(
            job, self.worker_id, self.policy, attempt.timeout, elapsed, stack, what=what
        )
        self._submit(outcome)
        self.timed_out += 1
        if metrics.ENABLED:
            metrics.record_finished(job, outcome.transition, elapsed)
        logger.warning(
            "Job %s type=%s ran past its time limit (%ss): attempt failed (%s); its handler "
            "thread keeps its slot until it returns (at most %ss more before a recycle) "
            "worker=%s",
            job.id, job.type, attempt.timeout, outcome.transition.value, self.grace,
            self.worker_id,
            extra={"job_id": str(job.id), "job_type": job.type, "worker_id": self.worker_id},
        )  # fmt: skip

    def _cancel(self, attempt: Attempt, elapsed: float, what: str, stack: str) -> None:
        """The handler of a cancelled job did not stop within the grace: end it cancelled."""
        job = attempt.job
        failure = outcomes.cancelled_failure(
            f"its handler had not stopped {self.grace:g} s after the request"
        )
        if stack:
            failure.traceback = (
                f"Handler {what} at the end of the grace (most recent call last):\n{stack}"
            )
        outcome = outcomes.cancel(job, self.worker_id, failure)
        self._submit(outcome)
        self.cancelled += 1
        if metrics.ENABLED:
            metrics.record_finished(job, outcome.transition, elapsed)
        logger.warning(
            "Job cancelled id=%s type=%s attempt=%s worker=%s: its handler did not stop "
            "within %ss of the cancel request (it never checks ctx.cancelled?); its thread "
            "keeps its slot until it returns (at most %ss more before a recycle)",
            job.id, job.type, job.attempt, self.worker_id, self.grace, self.grace,
            extra={"job_id": str(job.id), "job_type": job.type, "worker_id": self.worker_id},
        )  # fmt: skip

    def _report_stuck(self, attempt: Attempt) -> None:
        if not self.attempts.mark_stuck(attempt):
            return
        job = attempt.job
        limit = "its time limit" if attempt.cancel_requested is None else "its cancel's grace"
        what, stack = handler_stack(attempt)
        why = (
            "blocked without a timeout, or a loop that ignores ctx.cancelled?"
            if what == "thread"
            else "a coroutine that swallows CancelledError, or blocked in a sync call?"
        )
        logger.error(
            "Handler %s of job %s type=%s has not returned %ss after %s (%s): the worker "
            "stops claiming and will exit for a restart once its other jobs finish "
            "worker=%s\n%s",
            what, job.id, job.type, self.grace, limit, why, self.worker_id, stack,
            extra={"job_id": str(job.id), "job_type": job.type, "worker_id": self.worker_id},
        )  # fmt: skip
        self._on_stuck(attempt)
