"""Per-attempt time limits: the watchdog that enforces them.

Each attempt is registered when its handler starts, with its deadline on
the monotonic clock (the limit is ``job.timeout``, else the handler's
``timeout``, else ``TIMEOUT_SECONDS``). A thread of the watchdog's own
sleeps until the nearest deadline. When one passes:

1. the attempt is cancelled (``ctx.cancelled`` turns True, ``ctx.check()``
   raises ``JobTimeout``);
2. the worker takes the job back from the running handler (``take``): from
   then on the handler's own late outcome is dropped, and the watchdog
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
from .claimed import ClaimedJob
from .executor import RetryPolicy, timed_out
from .outcomes import Outcome

logger = logging.getLogger("django_durable_jobs.worker")

# Attempt states.
RUNNING = "running"
#: Past its deadline: cancelled, its job taken from it (when the worker still
#: held it), its thread not returned yet. The grace counts from here.
ABANDONED = "abandoned"
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


def thread_stack(thread_id: int) -> str:
    """Where thread ``thread_id`` is now, for the error history ("" if it is gone)."""
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return ""
    return "".join(traceback.format_stack(frame, limit=STACK_LIMIT))


class Attempt:
    """One running attempt of a handler, as the watchdog sees it."""

    __slots__ = (
        "abandoned_at",
        "cancel",
        "deadline",
        "deadline_at",
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
        self.abandoned_at: float | None = None
        self.stuck = False


class Watchdog:
    """Enforces the deadlines of the attempts running in one worker.

    Attempts are keyed by lease token, unique to each claim: a job that
    failed at its deadline may be claimed again by the same worker while
    the first attempt's thread still runs. ``take(job)`` asks the worker
    to give up on a job's running attempt (True when the worker still held
    it and now drops the handler's own outcome); ``submit`` hands an
    outcome to the completer; ``on_stuck`` is called once per attempt
    whose thread did not return within ``grace`` seconds of its deadline.
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
    ) -> None:
        self.worker_id = worker_id
        self.policy = policy
        self.default_timeout = default_timeout
        self.grace = grace
        self._take = take
        self._submit = submit
        self._on_stuck = on_stuck
        self._cond = threading.Condition()
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
        with self._cond:
            self._attempts[job.lease_token] = attempt
            if attempt.deadline is not None:
                self._cond.notify_all()
        return attempt

    def end(self, job: ClaimedJob) -> None:
        """The calling thread's attempt of ``job`` is over: its handler returned.

        Also after its deadline: the thread is then free again, and the
        attempt no longer counts towards a recycle.
        """
        with self._cond:
            attempt = self._attempts.pop(job.lease_token, None)
            if attempt is not None:
                attempt.state = ENDED
                attempt.cancel.set()

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
        """Attempts whose thread has not returned ``grace`` seconds after their deadline."""
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
                    if what == RUNNING:
                        self._time_out(attempt)
                    else:
                        self._report_stuck(attempt)
                except Exception:  # never let the watchdog die: time limits depend on it
                    logger.exception("Watchdog error on job %s", attempt.job.id)

    def _due(self, now: float) -> tuple[list[tuple[Attempt, str]], float | None]:
        """(attempts needing action now, with their state; when to look again).

        Called under the lock.
        """
        due: list[tuple[Attempt, str]] = []
        wake: float | None = None
        for attempt in self._attempts.values():
            if attempt.state == RUNNING and attempt.deadline is not None:
                at = attempt.deadline
            elif attempt.state == ABANDONED and not attempt.stuck:
                assert attempt.abandoned_at is not None
                at = attempt.abandoned_at + self.grace
            else:
                continue
            if now >= at:
                due.append((attempt, attempt.state))
            elif wake is None or at < wake:
                wake = at
        return due, wake

    def _time_out(self, attempt: Attempt) -> None:
        job = attempt.job
        with self._cond:
            if attempt.state != RUNNING:
                return  # the handler returned meanwhile
            attempt.state = ABANDONED
            attempt.abandoned_at = time.monotonic()
        elapsed = time.monotonic() - attempt.started
        # Where the handler is stuck, for the error history.
        stack = thread_stack(attempt.thread_id)
        taken = self._take(job)
        # Only now: a handler that sees ctx.cancelled has had its job taken
        # (its outcome is dropped), so the executor need not log a retry for it.
        attempt.cancel.set()
        if not taken:
            return  # no longer this worker's to record (finished, released, lease lost)
        outcome = timed_out(job, self.worker_id, self.policy, attempt.timeout, elapsed, stack)
        self._submit(outcome)
        self.timed_out += 1
        if metrics.ENABLED:
            metrics.record_finished(job, outcome.kind, elapsed)
        logger.warning(
            "Job %s type=%s ran past its time limit (%ss): attempt failed (%s); its handler "
            "thread keeps its slot until it returns (at most %ss more before a recycle) "
            "worker=%s",
            job.id, job.type, attempt.timeout, outcome.kind, self.grace, self.worker_id,
            extra={"job_id": str(job.id), "job_type": job.type, "worker_id": self.worker_id},
        )  # fmt: skip

    def _report_stuck(self, attempt: Attempt) -> None:
        job = attempt.job
        with self._cond:
            if attempt.state != ABANDONED or attempt.stuck:
                return
            attempt.stuck = True
        logger.error(
            "Handler thread of job %s type=%s has not returned %ss after its time limit "
            "(blocked without a timeout, or a loop that ignores ctx.cancelled?): the worker "
            "stops claiming and will exit for a restart once its other jobs finish "
            "worker=%s\n%s",
            job.id, job.type, self.grace, self.worker_id, thread_stack(attempt.thread_id),
            extra={"job_id": str(job.id), "job_type": job.type, "worker_id": self.worker_id},
        )  # fmt: skip
        self._on_stuck(attempt)
