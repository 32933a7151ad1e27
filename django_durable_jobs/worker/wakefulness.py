"""Whether this worker sleeps (enqueues must NOTIFY it) or is awake (they need not).

A transaction that NOTIFYs takes a cluster-wide lock at commit, held
through its WAL flush: many enqueuers notifying at once commit one at a
time (docs/benchmarks.md, "NOTIFY at scale"). Yet a worker fed by a
stream of jobs has no use for each one's notification: it would claim
again within milliseconds anyway. So the worker keeps a row in
``durable_jobs_listener`` (migration 0006) saying which it is, and an enqueue
NOTIFYs a queue only while some worker of that queue sleeps.

- **Sleeping** (at start, and whenever jobs come slowly): the worker claims
  when notified or at its poll, as always.
- **Awake**: once notifications come faster than ``AWAKE_AT_PER_SECOND``, or
  a claim comes back full (a backlog), the worker marks itself awake and
  keeps a promise: while it has room, it claims at least every
  ``AWAKE_POLL_SECONDS`` (each such claim counts as a notification for the
  claim planner), so a job enqueued without a NOTIFY waits no longer than
  that.
- **Back to sleep** after ``IDLE_POLLS`` empty claims in a row, or when
  it claims fewer than ``ASLEEP_BELOW_PER_SECOND`` jobs a second. The mark
  is committed first. An enqueue that looked before it (and sent no
  NOTIFY) has then either committed, and the next claim sees its job, or
  is still running, and its transaction id is in the snapshot taken right
  after the mark (it got one with its INSERT, before looking:
  ``durable_jobs_notify_sleepers()``). The worker waits for those
  transactions to end (``settling``), polling ever less often, then claims
  once more. Past the poll interval it stops waiting: the regular poll
  covers the rest. The snapshot lists the open transactions of the whole
  cluster: those of other databases make the wait longer, never wrong.
  The worker's first mark at start, and again whenever its LISTEN
  connection reconnects (a crash empties the unlogged table), is such a
  move to sleep.

Used by the worker's loop thread only, except ``heard()`` (the listener
thread, under the worker's lock).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .. import db

logger = logging.getLogger("django_durable_jobs.worker")

#: While awake, the worker claims at least this often while it has room.
AWAKE_POLL_SECONDS = 0.003
#: Notifications heard faster than this (per second, over a window of at
#: least WINDOW_SECONDS) wake the worker up.
AWAKE_AT_PER_SECOND = 400.0
WINDOW_SECONDS = 0.05
#: Empty claims in a row after which an awake worker goes back to sleep.
IDLE_POLLS = 30
#: An awake worker that claims fewer jobs than this a second (over a window,
#: with no full claim) goes back to sleep: at such a rate a notification
#: starts a job sooner than a poll every AWAKE_POLL_SECONDS would. Below
#: AWAKE_AT_PER_SECOND, so that a rate between the two keeps either mode.
ASLEEP_BELOW_PER_SECOND = 300.0


class Wakefulness:
    def __init__(
        self,
        alias: str,
        worker_id: str,
        queues: frozenset[str] | None,
        *,
        poll_interval: float,
        forget_after_seconds: float,
        enabled: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._alias = alias
        self._worker_id = worker_id
        self._queues = queues
        self._poll_interval = poll_interval
        self._forget_after = forget_after_seconds
        self.enabled = enabled
        self._clock = clock
        #: Whether the row says awake (the loop then polls every AWAKE_POLL_SECONDS).
        self.awake = False
        # Set by the listener on (re)connect: mark the row sleeping again.
        self._mark_due = enabled
        # After a move to sleep: the transactions to wait for before the last
        # claim (None: not settling), and how many polls that took so far.
        self._settling: list[str] | None = None
        self._settle_polls = 0
        self._idle_polls = 0
        self._heard = 0
        # While awake: jobs claimed in the window, and whether a claim was full.
        self._claimed = 0
        self._full = False
        self._window_start = clock()

    # -- what the loop asks --------------------------------------------------

    @property
    def polling(self) -> bool:
        """Whether the loop must claim on its own soon (awake, or settling)."""
        return self.awake or self._settling is not None

    def poll_seconds(self) -> float:
        """How soon the loop claims again, unasked, while ``polling``."""
        if self.awake:
            return AWAKE_POLL_SECONDS
        return min(self._poll_interval, self._settle_wait())

    def _settle_wait(self) -> float:
        """While settling: 3, 6, 12 ms ... after the mark, doubling at each look."""
        return AWAKE_POLL_SECONDS * 2.0**self._settle_polls

    # -- events --------------------------------------------------------------

    def heard(self) -> None:
        """A notification for this worker's queues came (listener thread)."""
        self._heard += 1

    def listening(self) -> None:
        """The LISTEN connection is (again) up: mark the row sleeping at the next claim."""
        if self.enabled:
            self._mark_due = True

    def before_claim(self) -> None:
        """Write a due mark; while settling, learn whether the wait is over.

        Raises ``DatabaseError`` like a claim (the loop's handling retries).
        """
        if not self.enabled:
            return
        if self._mark_due:
            self._go_to_sleep()  # this claim starts after the mark: not settled yet
        elif self._settling:
            running = db.still_in_progress(self._alias, self._settling)
            self._settle_polls += 1
            if running and self._settle_wait() < self._poll_interval:
                self._settling = running
            else:
                # This claim starts after they ended (or the poll covers the rest).
                self._settling = []

    def after_claim(self, got: int, full: bool) -> None:
        """What a claim round found: ``got`` jobs, ``full`` if some group's claim was full."""
        if not self.enabled:
            return
        if self._settling == []:
            self._settling = None  # the last claim of a move to sleep is done
        now = self._clock()
        if not self.awake:
            elapsed = now - self._window_start
            if full or (elapsed >= WINDOW_SECONDS and self._heard >= AWAKE_AT_PER_SECOND * elapsed):
                self._wake_up()
            elif elapsed >= WINDOW_SECONDS:
                self._heard, self._window_start = 0, now
            return
        self._claimed += got
        self._full = self._full or full
        elapsed = now - self._window_start
        if elapsed >= WINDOW_SECONDS:
            slow = not self._full and self._claimed < ASLEEP_BELOW_PER_SECOND * elapsed
            self._claimed, self._full, self._window_start = 0, False, now
            if slow:
                self._go_to_sleep()
                return
        if got:
            self._idle_polls = 0
            return
        self._idle_polls += 1
        if self._idle_polls >= IDLE_POLLS:
            self._go_to_sleep()

    # -- the moves -----------------------------------------------------------

    def _mark(self, *, sleeping: bool) -> None:
        db.mark_listener(
            self._alias,
            self._worker_id,
            self._queues,
            sleeping=sleeping,
            forget_after_seconds=self._forget_after,
        )

    def _wake_up(self) -> None:
        self._mark(sleeping=False)
        self.awake = True
        self._idle_polls = 0
        self._settling = None
        self._claimed, self._full, self._window_start = 0, False, self._clock()
        logger.debug(
            "Awake: enqueues stop notifying this worker", extra={"worker_id": self._worker_id}
        )

    def _go_to_sleep(self) -> None:
        self._mark(sleeping=True)
        # Committed: enqueues that look from now on notify. Those that looked
        # before are running now, or committed already (the next claim sees
        # their jobs).
        self._settling = db.transactions_in_progress(self._alias)
        # Only now: if either statement failed, the next claim marks again.
        self._mark_due = False
        self._settle_polls = 0
        self.awake = False
        self._heard, self._window_start = 0, self._clock()
