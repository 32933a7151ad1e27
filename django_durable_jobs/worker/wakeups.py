"""When this worker should claim again because a job it knows of falls due.

A job this worker suspended (a sleep, an event wait's deadline) or whose
retry it wrote becomes claimable at a known time, and no NOTIFY says so
when that time comes. The worker keeps every such time, not only the
soonest: a single "next" slot, cleared when it fired, lost the second
sleeper's time, which then waited for the idle poll. And a time reached is a
notification to the claim planner: the plain claim, skipped for a while after
a short one, runs (without it a timed wake-up started 47 ms late at the median
against 2 ms for a new job; docs/benchmarks.md, "Durable steps").
"""

from __future__ import annotations

import bisect
import threading
import time
from datetime import datetime, timezone

#: A little after the time itself: the claim compares the database's clock, and
#: the conversion to the monotonic clock is made when the time is added.
MARGIN_SECONDS = 0.001

#: Times kept at most; beyond it the latest are dropped (the idle poll finds
#: those jobs, later): bounded memory for a worker that suspends millions.
LIMIT = 10_000


class WakeTimes:
    """Monotonic times, soonest first; added to from any thread (the planner's, the
    slots', the completer's), read by the loop."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._times: list[float] = []
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, due: float) -> None:
        with self._lock:
            bisect.insort(self._times, due)
            if len(self._times) > self._limit:
                self._times.pop()

    def add_in(self, seconds: float) -> None:
        self.add(time.monotonic() + max(0.0, seconds) + MARGIN_SECONDS)

    def add_at(self, when: datetime) -> None:
        """``when`` (aware, wall clock) as a time on the monotonic clock."""
        self.add_in((when - datetime.now(timezone.utc)).total_seconds())

    def fire(self, now: float) -> bool:
        """Forget the times reached by ``now``; True when there were any (claim now)."""
        with self._lock:
            reached = bisect.bisect_right(self._times, now)
            del self._times[:reached]
        return reached > 0

    def soonest(self) -> float | None:
        with self._lock:
            return self._times[0] if self._times else None

    def __len__(self) -> int:
        return len(self._times)
