"""The attempt table: every attempt this worker holds, and who owns its outcome.

One ``Attempt`` per claim, keyed by its lease token (unique to each claim:
a job that failed at its time limit can be claimed again by this worker
while the first attempt's thread still runs). The claim loop, the handler
threads, the watchdog, the heartbeat, the completer and the shutdown read
and change attempts only through this table's methods, under its one lock.

States, and who records the attempt's outcome in each::

    claim ──> CLAIMED ──begin──> RUNNING ──returned──> FINISHED ──written──> (gone)
                 │                  │ │                  the handler's outcome,
                 │                  │ │                  with the completer
                 │       time_out   │ └──lose_lease──> LEASE_LOST: nobody (it was
                 │  (deadline)      v                  reaped; the late outcome
                 │              TIMED_OUT              is dropped)
                 │              the watchdog's failed attempt; the thread keeps
                 │              its slot until it returns, its outcome dropped
                 └──release (shutdown: at once from CLAIMED, at the end
                    of the grace period from RUNNING)──> RELEASED:
                                the shutdown's release; a late outcome dropped

    RUNNING ──returned, suspended──> SUSPENDED ──> (gone): the handler
                                suspended the job (a durable sleep or wait)
                                and wrote its new state itself: no outcome,
                                no lease left to extend

A cancel of the running job (``request_cancel``: a NOTIFY, or the
maintenance thread's poll) sets the attempt's cancel flag and brings its
deadline forward to the time limit's grace from now: a handler that
stops records the ``cancel`` outcome itself (the executor turns whatever
it returned into one), one that does not is taken by the watchdog at
that deadline exactly like one past its time limit (``TIMED_OUT``, then
a recycle if the thread is still busy a grace later), but its outcome
is the cancel.

An attempt leaves the table once nothing more can happen to it: its
thread (if it ever started) has returned and its recorded outcome (if any)
has been written, or given up on.
"""

from __future__ import annotations

import enum
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import TYPE_CHECKING

from ..context import CancelFlag
from ..db.records import ClaimedJob, Outcome

if TYPE_CHECKING:
    from .pool import SlotGroup

Clock = Callable[[], float]


class State(enum.Enum):
    #: Claimed; waiting in its slot group's queue for a handler thread.
    CLAIMED = "claimed"
    #: Its handler runs; the handler's outcome will be recorded.
    RUNNING = "running"
    #: The handler returned; its outcome is with the completer.
    FINISHED = "finished"
    #: Past its deadline: the watchdog recorded a failed attempt (or, for a
    #: job cancelled while it ran, the cancel). The thread keeps its slot
    #: until it returns; what it returns is dropped.
    TIMED_OUT = "timed out"
    #: A heartbeat found the lease gone (reaped): nothing of this attempt is
    #: recorded, the job may already run elsewhere.
    LEASE_LOST = "lease lost"
    #: Still running at the end of the shutdown's grace period: given back.
    RELEASED = "released"
    #: The handler suspended the job (``Suspended``): its thread wrote the
    #: job's new state and gave the lease back; nothing more to record.
    SUSPENDED = "suspended"


#: States in which the handler's own outcome is still the one to record.
HANDLER_OWNS = frozenset({State.CLAIMED, State.RUNNING})


class Attempt:
    """One claim of one job, as this worker tracks it."""

    __slots__ = (
        "cancel",
        "cancel_requested",
        "deadline",
        "deadline_at",
        "group",
        "holds_slot",
        "job",
        "outcome_unwritten",
        "started",
        "state",
        "stuck",
        "suspended",
        "task_stack",
        "thread_id",
        "thread_running",
        "timed_out_at",
        "timeout",
        "wakes_at",
    )

    def __init__(self, job: ClaimedJob, group: SlotGroup | None) -> None:
        self.job = job
        self.group = group
        self.state = State.CLAIMED
        #: ``ctx.cancelled``: set when the worker gives up on the attempt.
        self.cancel = CancelFlag()
        #: Monotonic time this worker heard of a cancel of the job; None: none.
        self.cancel_requested: float | None = None
        self.timeout: float | None = None
        self.started: float | None = None
        #: Monotonic: immune to changes of the system clock. The time limit's
        #: end, or sooner: a cancel request's grace (``request_cancel``).
        self.deadline: float | None = None
        #: The same moment on the wall clock, for the handler (``ctx.deadline``).
        self.deadline_at: datetime | None = None
        self.thread_id: int | None = None
        #: An ``async def`` handler's chain of awaits, for the watchdog (None:
        #: a sync handler, whose thread's stack says where it is).
        self.task_stack: Callable[[], str] | None = None
        self.thread_running = False
        #: Counted in its slot group's ``running`` (from the claim until its
        #: thread returns, or the shutdown gives every slot back).
        self.holds_slot = True
        #: An outcome of this attempt was submitted and not yet written.
        self.outcome_unwritten = False
        self.timed_out_at: float | None = None
        self.stuck = False
        #: Set by the handler's thread when it suspended the job: the reason
        #: (sleep, event, child), and when the job falls due by itself.
        self.suspended: str | None = None
        self.wakes_at: datetime | None = None

    @property
    def token(self) -> uuid.UUID:
        return self.job.lease_token

    def __repr__(self) -> str:
        return f"<Attempt job={self.job.id} {self.state.value}>"


class AttemptTable:
    """The worker's attempts, under one lock (see the module docstring).

    ``lock`` is reentrant and shared: the worker's loop and the watchdog
    build their conditions on it, so a state change and the wake-up it
    causes happen under the same lock. (Reentrant also because the signal
    handler runs on the main thread, which may hold it.)
    """

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.lock = threading.RLock()
        self.clock = clock
        self._attempts: dict[uuid.UUID, Attempt] = {}

    # -- the claim loop ---------------------------------------------------

    def claimed(self, job: ClaimedJob, group: SlotGroup | None) -> Attempt:
        with self.lock:
            attempt = self._attempts[job.lease_token] = Attempt(job, group)
            return attempt

    def busy(self) -> bool:
        """Whether any attempt takes a slot (``--burst`` waits for them)."""
        with self.lock:
            return any(a.holds_slot for a in self._attempts.values())

    def outcomes_unwritten(self) -> bool:
        """Whether an attempt's outcome is not written yet (a ``--burst`` worker waits:
        writing it may make jobs that depend on it runnable)."""
        with self.lock:
            return any(a.outcome_unwritten for a in self._attempts.values())

    def in_flight(self) -> int:
        """Attempts a stopping worker waits for: taking a slot, and not yet recorded
        by someone else (a timed-out thread may never return; a released one is done)."""
        with self.lock:
            return sum(
                1
                for a in self._attempts.values()
                if a.holds_slot and a.state not in (State.TIMED_OUT, State.RELEASED)
            )

    # -- the handler threads ----------------------------------------------

    def begin(self, token: uuid.UUID, timeout: float | None) -> Attempt | None:
        """The calling thread starts the attempt's handler, with a time limit of ``timeout`` s.

        None when the attempt is no longer this worker's to run (released
        or its lease lost while it waited for a thread): do not run it.
        """
        with self.lock:
            attempt = self._attempts.get(token)
            if attempt is None or attempt.state is not State.CLAIMED:
                return None
            now = self.clock()
            attempt.state = State.RUNNING
            attempt.thread_running = True
            attempt.thread_id = threading.get_ident()
            attempt.started = now
            attempt.timeout = timeout
            if timeout is not None:
                attempt.deadline = now + timeout
                attempt.deadline_at = datetime.now(dt_timezone.utc) + timedelta(seconds=timeout)
            return attempt

    def returned(self, token: uuid.UUID) -> Attempt | None:
        """The attempt's handler returned (or was never started): free its slot.

        Returns the attempt; its ``state`` says what to do with the outcome
        the handler returned: ``FINISHED`` (it was still the handler's: now
        the caller submits it) or another state (dropped). None when the
        attempt is unknown.
        """
        with self.lock:
            attempt = self._attempts.get(token)
            if attempt is None:
                return None
            attempt.thread_running = False
            attempt.cancel.set()  # a stray reference to ctx sees the attempt is over
            if attempt.state in HANDLER_OWNS:
                if attempt.suspended is not None:
                    # Written by the handler's thread (set on this thread, read here).
                    attempt.state = State.SUSPENDED
                else:
                    attempt.state = State.FINISHED
                    attempt.outcome_unwritten = True
            if attempt.holds_slot:
                attempt.holds_slot = False
                if attempt.group is not None:
                    attempt.group.finished()
            self._forget_if_done(attempt)
            return attempt

    # -- the watchdog -----------------------------------------------------

    def deadlines(self) -> dict[uuid.UUID, float]:
        """Monotonic deadlines of the running attempts that have one, by lease token."""
        with self.lock:
            return {
                a.token: a.deadline
                for a in self._attempts.values()
                if a.deadline is not None and a.thread_running
            }

    def overdue(self, grace: float) -> tuple[list[Attempt], list[Attempt], float | None]:
        """(running attempts past their deadline, threads still busy ``grace`` s later
        and not yet reported, when to look again)."""
        now = self.clock()
        late: list[Attempt] = []
        stuck: list[Attempt] = []
        wake: float | None = None
        with self.lock:
            for a in self._attempts.values():
                if not a.thread_running or a.deadline is None:
                    continue
                if a.state is State.RUNNING:
                    at = a.deadline
                    target = late
                elif not a.stuck:
                    at = (a.timed_out_at or a.deadline) + grace
                    target = stuck
                else:
                    continue
                if now >= at:
                    target.append(a)
                elif wake is None or at < wake:
                    wake = at
        return late, stuck, wake

    def time_out(self, attempt: Attempt) -> bool:
        """Take a running attempt past its deadline from its handler.

        True when it was still the handler's: the caller records the failed
        attempt. Either way the grace before a recycle counts from now.
        """
        with self.lock:
            if not attempt.thread_running:
                return False  # the handler returned meanwhile
            attempt.timed_out_at = self.clock()
            if attempt.state is not State.RUNNING or attempt.suspended is not None:
                # Released or lease lost: no longer ours to record; or the
                # handler has just suspended the job (its state is written).
                return False
            attempt.state = State.TIMED_OUT
            attempt.outcome_unwritten = True
            return True

    def mark_stuck(self, attempt: Attempt) -> bool:
        """Report a thread stuck past its grace once; False if it returned or was reported."""
        with self.lock:
            if attempt.stuck or not attempt.thread_running:
                return False
            attempt.stuck = True
            return True

    def stuck(self) -> list[Attempt]:
        with self.lock:
            return [a for a in self._attempts.values() if a.stuck and a.thread_running]

    # -- cancel requests --------------------------------------------------

    def request_cancel(self, job_ids: Iterable[uuid.UUID], grace: float) -> list[Attempt]:
        """These jobs were cancelled: tell their handlers, give them ``grace`` s to stop.

        Only attempts whose handler still owns the outcome (claimed or
        running) and were not told before; returns them. A running one's
        deadline comes forward to ``grace`` s from now (the watchdog takes it
        then, as at a time limit); a claimed one ends when a thread begins it
        (the executor sees the flag and never runs the handler).
        """
        wanted = set(job_ids)
        now = self.clock()
        with self.lock:
            told = [
                a
                for a in self._attempts.values()
                if a.job.id in wanted and a.state in HANDLER_OWNS and a.cancel_requested is None
            ]
            for attempt in told:
                attempt.cancel_requested = now
                attempt.cancel.request_cancel()
                if attempt.state is State.RUNNING:
                    end = now + grace
                    if attempt.deadline is None or end < attempt.deadline:
                        attempt.deadline = end
            return told

    def untold(self) -> dict[uuid.UUID, uuid.UUID]:
        """``{job id: lease token}`` of the attempts a cancel request would still reach."""
        with self.lock:
            return {
                a.job.id: a.token
                for a in self._attempts.values()
                if a.state in HANDLER_OWNS and a.cancel_requested is None
            }

    # -- the heartbeat ----------------------------------------------------

    def leases_to_extend(self) -> dict[uuid.UUID, uuid.UUID]:
        """``{job id: lease token}`` of the leases the heartbeat keeps alive.

        Every held attempt whose outcome is not written yet, except one past
        its deadline that is not finished: that one's job is the watchdog's
        to fail, and if that write never lands the lease must expire so that
        the reaper and the time limit agree.
        """
        now = self.clock()
        with self.lock:
            return {
                a.job.id: a.token
                for a in self._attempts.values()
                if (a.state in HANDLER_OWNS or a.outcome_unwritten)
                and a.state is not State.LEASE_LOST
                and not (
                    a.state in (State.RUNNING, State.TIMED_OUT)
                    and a.deadline is not None
                    and now >= a.deadline
                )
            }

    def lose_leases(self, job_ids: Iterable[uuid.UUID]) -> list[Attempt]:
        """The heartbeat could not extend these jobs' leases: they were reaped.

        Only an attempt whose handler still owns its outcome has really lost
        it. One whose outcome is with the completer (or the watchdog) is left
        alone: that write may be why the extension missed the row (the
        heartbeat raced its commit), and if the lease was in fact reaped the
        fenced write says so. Returns the attempts now ``LEASE_LOST``.
        """
        wanted = set(job_ids)
        with self.lock:
            # Not one whose handler has just suspended the job: its lease was
            # given back by the suspension, not lost.
            lost = [
                a
                for a in self._attempts.values()
                if a.job.id in wanted and a.state in HANDLER_OWNS and a.suspended is None
            ]
            for attempt in lost:
                attempt.state = State.LEASE_LOST
                attempt.cancel.set()
                self._forget_if_done(attempt)
            return lost

    # -- the completer ----------------------------------------------------

    def written(self, outcomes: Iterable[Outcome]) -> None:
        """These outcomes were written, or given up on: their leases need no more heartbeats."""
        with self.lock:
            for outcome in outcomes:
                attempt = self._attempts.get(outcome.lease_token)
                if attempt is not None:
                    attempt.outcome_unwritten = False
                    self._forget_if_done(attempt)

    # -- the shutdown -----------------------------------------------------

    def release_all(self) -> list[Attempt]:
        """End of the grace period: give back every attempt the handler still owns.

        Every slot is given back too (the caller empties the slot groups):
        a thread that returns later frees nothing more.
        """
        with self.lock:
            for attempt in self._attempts.values():
                attempt.holds_slot = False
            released = [a for a in self._attempts.values() if a.state in HANDLER_OWNS]
            for attempt in released:
                attempt.state = State.RELEASED
                attempt.outcome_unwritten = True
                attempt.cancel.set()
            return released

    def release_unstarted(self) -> list[Attempt]:
        """A stop: give back the attempts claimed ahead that no thread has begun.

        Their slots stay taken until a thread takes each from its queue and
        finds it released (``begin`` refuses it, ``returned`` frees the slot).
        """
        with self.lock:
            released = [a for a in self._attempts.values() if a.state is State.CLAIMED]
            for attempt in released:
                attempt.state = State.RELEASED
                attempt.outcome_unwritten = True
                attempt.cancel.set()
            return released

    def handler_owned(self) -> list[Attempt]:
        """Attempts whose handler still owns the outcome (a forced exit releases them)."""
        with self.lock:
            return [a for a in self._attempts.values() if a.state in HANDLER_OWNS]

    def __len__(self) -> int:
        with self.lock:
            return len(self._attempts)

    def get(self, token: uuid.UUID) -> Attempt | None:
        with self.lock:
            return self._attempts.get(token)

    def _forget_if_done(self, attempt: Attempt) -> None:
        # Kept while it holds a slot: a job still queued for a thread must be
        # found by that thread's ``returned()``, which gives the slot back.
        if (
            attempt.state in HANDLER_OWNS
            or attempt.thread_running
            or attempt.outcome_unwritten
            or attempt.holds_slot
        ):
            return
        self._attempts.pop(attempt.token, None)
