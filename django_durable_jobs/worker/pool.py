"""Slot groups: the handler threads of a worker, and how many of them run.

A worker has one slot group serving all its queues (``--concurrency 8``),
or one group per queue when each queue has slots of its own (``--queues
emails:4,default:8``). A group owns its handler threads and the queue of
claimed jobs they read, and counts its running jobs, so a group never runs
more jobs than it has slots: a queue of slow webhooks fills its own slots,
never another queue's.

A group is *elastic* when its minimum and maximum differ (``--concurrency
2-16``). It grows by one slot each time a claim filled every free slot and
left none (runnable jobs may be waiting; the next claim finds out), and
shrinks back, never below the minimum, once slots went unused for a whole
quiet period. A slot is stopped only while idle: the group puts a stop
marker in its job queue, which the next idle thread takes and exits on; a
thread that runs a job finishes it first.

A group also *claims ahead*, while its jobs are short: besides one job per
slot it keeps up to ``size`` more claimed and waiting in its queue, so a
thread that finishes a job takes the next at once instead of waiting for a
claim's round trip (the claim runs while the slots work). Only while the
recent attempts took at most ``CLAIM_AHEAD_MAX_SECONDS`` on average: a job
waits in the buffer for about one job's duration, and jobs that take long
are never held back from other workers. A buffered job holds a lease (the
heartbeat extends it), its time limit counts from its start, and a
stopping worker gives it back uncounted without running it.

The group's state is guarded by the worker's lock; the methods here do
not lock.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from .. import metrics
from ..db.records import ClaimedJob
from .slots import MAX_SLOTS, Slots, SlotsError, check_queue_slots

# The slot rule lives in slots.py; these names are importable from here too.
__all__ = [
    "MAX_SLOTS",
    "SCALE_DOWN_AFTER_SECONDS",
    "SlotGroup",
    "Slots",
    "SlotsError",
    "busy_slots",
    "check_queue_slots",
    "grew",
    "groups_for",
    "next_shrink_at",
    "shrink_quiet",
    "total_size",
]

logger = logging.getLogger("django_durable_jobs.worker")

#: Seconds a slot may stay unused before an elastic group stops it.
SCALE_DOWN_AFTER_SECONDS = 30.0
#: Claim ahead only while the recent attempts took at most this long on average.
CLAIM_AHEAD_MAX_SECONDS = 0.05
#: The most jobs a group keeps claimed beyond its slots.
CLAIM_AHEAD_LIMIT = 256
# Weight of the newest attempt in the running mean of durations.
_DURATION_WEIGHT = 0.2


class SlotGroup:
    """Handler threads for some queues (``None``: every queue), and their accounting."""

    def __init__(
        self,
        label: str,
        queues: frozenset[str] | None,
        slots: Slots,
        scale_down_after: float,
        target: Callable[[SlotGroup], None],
    ) -> None:
        self.label = label
        self.queues = queues
        self.slots = slots
        self.scale_down_after = scale_down_after
        self._target = target
        #: Claimed jobs for the handler threads; ``None`` stops one thread.
        self.jobs: queue.SimpleQueue[ClaimedJob | None] = queue.SimpleQueue()
        #: Handler threads started and not told to stop.
        self.size = 0
        #: Jobs claimed for this group and not finished (queued or running).
        self.running = 0
        #: The last claim for this group filled every slot it asked for.
        self.more_waiting = True
        #: Claimed jobs that may wait for a thread beyond one per slot.
        self.ahead = 0
        #: Running mean of the attempts' durations (None before the first).
        self.mean_duration: float | None = None
        self._started = 0
        self._threads: list[threading.Thread] = []
        # The quiet-period window: when it began, and the most slots in use since.
        self._window_start = 0.0
        self._peak = 0

    def start(self, now: float) -> None:
        self._window_start = now
        for _ in range(self.slots.minimum):
            self._add_thread()

    def free(self) -> int:
        """Slots without a job, claimed or running."""
        return max(0, self.size - self.running)

    def room(self) -> int:
        """How many jobs a claim may ask for now: the free slots and the buffer's room."""
        return max(0, self.size + self.ahead - self.running)

    def wants_claim(self) -> bool:
        """A slot is free, or the buffer is at least half empty (claims come in batches)."""
        return self.room() > self.ahead // 2

    def attempt_took(self, seconds: float) -> None:
        """An attempt's duration, for the rule that decides whether to claim ahead."""
        mean = self.mean_duration
        mean = seconds if mean is None else mean + _DURATION_WEIGHT * (seconds - mean)
        self.mean_duration = mean
        if mean > CLAIM_AHEAD_MAX_SECONDS:
            self.ahead = 0
        else:
            # About CLAIM_AHEAD_MAX_SECONDS of work for the slots, within bounds.
            work = self.size * CLAIM_AHEAD_MAX_SECONDS / max(mean, 1e-6)
            self.ahead = int(min(max(self.size, work), CLAIM_AHEAD_LIMIT))

    def claimed(self, asked: int, got: int, now: float) -> bool:
        """Account for a claim of ``got`` jobs out of ``asked``; grow if it was full.

        Returns whether the group grew.
        """
        self.running += got
        self._peak = max(self._peak, self.running)
        self.more_waiting = got == asked
        if got == asked and self.running >= self.size and self.size < self.slots.maximum:
            self._add_thread()
            self._window_start = now
            return True
        return False

    def finished(self) -> None:
        self.running = max(0, self.running - 1)

    def shrink_if_quiet(self, now: float) -> int:
        """Stop the slots left unused for a whole quiet period; how many were stopped."""
        if self.size <= self.slots.minimum:
            # Nothing to stop; the window starts afresh when the group grows.
            self._window_start = now
            self._peak = self.running
            return 0
        if now - self._window_start < self.scale_down_after:
            return 0
        # Never below what runs now: each stop marker needs an idle thread.
        # (Claimed-ahead jobs count in ``running`` but need no slot of their own.)
        keep = min(self.size, max(self.slots.minimum, self._peak, self.running))
        stopped = self.size - keep
        for _ in range(stopped):
            self.jobs.put(None)
        self.size = keep
        self._window_start = now
        self._peak = self.running
        return stopped

    def next_shrink_at(self) -> float | None:
        """When ``shrink_if_quiet`` may next stop a slot (monotonic), if it can."""
        if self.size <= self.slots.minimum:
            return None
        return self._window_start + self.scale_down_after

    def stop_all(self) -> None:
        """One stop marker per live thread (shutdown; markers behind queued jobs)."""
        for _ in range(self.size):
            self.jobs.put(None)
        self.size = 0

    def threads(self) -> list[threading.Thread]:
        self._threads = [t for t in self._threads if t.is_alive()]
        return list(self._threads)

    def _add_thread(self) -> None:
        self._started += 1
        thread = threading.Thread(
            target=self._target,
            args=(self,),
            name=f"durable-jobs-handler-{self.label}-{self._started}",
            daemon=True,
        )
        self.size += 1
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()


def groups_for(
    queues: frozenset[str] | None,
    concurrency: Slots,
    queue_slots: Mapping[str, Slots] | None,
    scale_down_after: float,
    target: Callable[[SlotGroup], None],
) -> list[SlotGroup]:
    """One group per queue with slots of its own, or one group for everything."""
    if queue_slots:
        return [
            SlotGroup(name, frozenset({name}), slots, scale_down_after, target)
            for name, slots in sorted(queue_slots.items())
        ]
    return [SlotGroup("all", queues, concurrency, scale_down_after, target)]


def total_size(groups: Iterable[SlotGroup]) -> int:
    return sum(group.size for group in groups)


def busy_slots(groups: Iterable[SlotGroup]) -> int:
    """Slots with a job, claimed or running (claimed-ahead jobs take no slot of their own)."""
    return sum(min(group.running, group.size) for group in groups)


def next_shrink_at(groups: Iterable[SlotGroup]) -> float | None:
    """When some elastic group may next stop a slot (monotonic), if any can."""
    return min((t for g in groups if (t := g.next_shrink_at()) is not None), default=None)


def shrink_quiet(groups: Sequence[SlotGroup], now: float, worker_id: str) -> None:
    """Stop the slots that stayed unused for a quiet period; log and count it."""
    for group in groups:
        stopped = group.shrink_if_quiet(now)
        if stopped:
            metrics.set_worker_slots(total_size(groups))
            logger.info(
                "Slots shrank group=%s slots=%s min=%s: %s slot(s) unused for %ss",
                group.label, group.size, group.slots.minimum, stopped,
                group.scale_down_after, extra={"worker_id": worker_id},
            )  # fmt: skip


def grew(groups: Iterable[SlotGroup], size: int, worker_id: str) -> None:
    """These groups grew by a slot (the worker now has ``size``): log and count it."""
    metrics.set_worker_slots(size)
    for group in groups:
        logger.info(
            "Slots grew group=%s slots=%s max=%s: every slot is busy and jobs wait",
            group.label, group.size, group.slots.maximum, extra={"worker_id": worker_id},
        )  # fmt: skip
