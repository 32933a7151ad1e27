"""The paused queues, as this worker knows them: the claim leaves them out.

Read from the database (``db.paused_queues``) by the claim loop before a
claim, when the copy is stale: at start, after a pause or resume
notification (the listener calls ``invalidate``), once per poll interval
(in case a notification was lost), and when a pause's end time passes.
Between reads, knowing costs a comparison of two numbers per claim, and
with no paused queue the claim gets an empty list: the fast path stays as
it was.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .. import db

logger = logging.getLogger("django_durable_jobs.worker")

#: Read a little after a pause's end, so the database's clock has passed it too.
LIFT_MARGIN_SECONDS = 0.005


class PausedQueues:
    """The set of paused queue names, refreshed when stale (the claim loop's thread only).

    ``invalidate`` may be called from any thread (the listener's): it only
    sets a flag, which the next ``current`` reads.
    """

    def __init__(
        self,
        alias: str,
        queues: frozenset[str] | None,
        refresh_interval: float,
        *,
        worker_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._alias = alias
        self._queues = queues
        self._interval = refresh_interval
        self._worker_id = worker_id
        self._clock = clock
        self.names: frozenset[str] = frozenset()
        # Stale until the first read: the worker reads at start.
        self._stale = True
        self._refresh_at = float("-inf")
        # When the soonest pause among ``names`` lifts (monotonic); None: none does.
        self.lifts_at: float | None = None

    def invalidate(self) -> None:
        """A pause or resume was announced: read again before the next claim."""
        self._stale = True

    def concerns(self, queue: str) -> bool:
        """Whether a change to ``queue`` matters to this worker (it serves the queue)."""
        return self._queues is None or queue in self._queues

    def current(self) -> frozenset[str]:
        """The paused queues this worker serves; read from the database if stale.

        A ``DatabaseError`` propagates (the claim that follows would fail
        too), and the copy stays stale, so the next claim reads again.
        """
        now = self._clock()
        if self._stale or now >= self._refresh_at:
            self._read(now)
        return self.names

    def next_change_in(self, now: float) -> float | None:
        """Seconds until a known pause lifts (None: none will), for the idle sleep."""
        return None if self.lifts_at is None else max(0.0, self.lifts_at - now)

    def _read(self, now: float) -> None:
        # Cleared first: a notification arriving during the read makes it stale again.
        self._stale = False
        try:
            paused = db.paused_queues(self._alias)
        except Exception:
            self._stale = True
            raise
        names = frozenset(name for name in paused if self.concerns(name))
        lifts = [now + left + LIFT_MARGIN_SECONDS for name, left in paused.items()
                 if left is not None and name in names]  # fmt: skip
        self.lifts_at = min(lifts, default=None)
        self._refresh_at = now + self._interval
        if self.lifts_at is not None:
            self._refresh_at = min(self._refresh_at, self.lifts_at)
        if names != self.names:
            for name in sorted(names - self.names):
                left = paused[name]
                logger.info(
                    "Queue paused queue=%s: not claiming its jobs%s",
                    name, "" if left is None else f" for {left:.1f}s more",
                    extra={"worker_id": self._worker_id, "queue": name},
                )  # fmt: skip
            for name in sorted(self.names - names):
                logger.info(
                    "Queue resumed queue=%s: claiming its jobs again",
                    name, extra={"worker_id": self._worker_id, "queue": name},
                )  # fmt: skip
            self.names = names
