"""Per-minute counts of the outcomes this worker recorded: the admin's Queues chart.

Counted in memory by the thread that learns an outcome was written (the
completer's callback, the reaper), and added to ``durable_jobs_queue_stats``
by the maintenance thread with each heartbeat: one statement for every
queue and minute counted since the last one (``db.add_queue_stats``). Never
a write per job, and nothing added to the claim's or the completion's
statements. An upsert that fails keeps its counts for the next heartbeat;
counts older than ``QUEUE_STATS_KEEP`` are dropped then, since the table
would prune them anyway.

What is counted, per queue and minute (the worker's clock, in UTC): an
attempt that completed its job, and a failed attempt (a retry, or dead),
and, of the failed ones, those that made the job dead. A release
(shutdown) or a cancel is neither. A retry that the database ended
cancelled instead (its cancel had been requested) still counts as failed.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Container, Iterable
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from .. import db
from ..db.records import Outcome, QueueMinuteCounts, Transition

#: How long the table keeps a minute's counts (the chart shows the last hour).
QUEUE_STATS_KEEP = timedelta(hours=2)

#: (completed, failed, dead) that one written outcome of each transition adds.
_ADDS = {
    Transition.COMPLETE: (1, 0, 0),
    Transition.RETRY: (0, 1, 0),
    Transition.DEAD: (0, 1, 1),
}


class OutcomeCounts:
    """Counts by (queue, minute) since the last flush; safe to use from any thread."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        #: (queue, minutes since the epoch) -> [completed, failed, dead]
        self._counts: dict[tuple[str, int], list[int]] = {}

    def add(self, outcomes: Iterable[Outcome], written: Container[uuid.UUID]) -> None:
        """Count the ``outcomes`` whose job id is in ``written`` (the others changed nothing)."""
        minute = int(self._clock() // 60)
        with self._lock:
            for outcome in outcomes:
                adds = _ADDS.get(outcome.transition)
                if adds is None or not outcome.queue or outcome.job_id not in written:
                    continue
                counts = self._counts.setdefault((outcome.queue, minute), [0, 0, 0])
                for i, n in enumerate(adds):
                    counts[i] += n

    def take(self) -> list[QueueMinuteCounts]:
        """The counts so far, sorted by queue and minute; they start again from zero."""
        with self._lock:
            counts, self._counts = self._counts, {}
        return [
            QueueMinuteCounts(queue, _minute_start(minute), *values)
            for (queue, minute), values in sorted(counts.items())
        ]

    def put_back(self, rows: Iterable[QueueMinuteCounts]) -> None:
        """Add back counts taken but not written, but for minutes past ``QUEUE_STATS_KEEP``."""
        oldest = int((self._clock() - QUEUE_STATS_KEEP.total_seconds()) // 60)
        with self._lock:
            for row in rows:
                minute = int(row.minute.timestamp() // 60)
                if minute < oldest:
                    continue
                counts = self._counts.setdefault((row.queue, minute), [0, 0, 0])
                for i, n in enumerate((row.completed, row.failed, row.dead)):
                    counts[i] += n

    def flush(self, alias: str) -> int:
        """Add the counts so far to the table in one statement; how many rows it touched.

        On a database error the counts are kept for the next flush, and the
        error goes to the caller.
        """
        rows = self.take()
        if not rows:
            return 0
        try:
            db.add_queue_stats(alias, rows)
        except BaseException:
            self.put_back(rows)
            raise
        return len(rows)


def _minute_start(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * 60, tz=dt_timezone.utc)
