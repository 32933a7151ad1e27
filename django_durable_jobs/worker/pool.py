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

The group's state is guarded by the worker's lock; the methods here do
not lock.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Mapping

from ..db.records import ClaimedJob
from .slots import MAX_SLOTS, Slots, SlotsError, check_queue_slots

# The slot rule lives in slots.py; these names are importable from here too.
__all__ = [
    "MAX_SLOTS",
    "SCALE_DOWN_AFTER_SECONDS",
    "SlotGroup",
    "Slots",
    "SlotsError",
    "check_queue_slots",
    "groups_for",
    "total_size",
]

#: Seconds a slot may stay unused before an elastic group stops it.
SCALE_DOWN_AFTER_SECONDS = 30.0


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
        return max(0, self.size - self.running)

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
        keep = max(self.slots.minimum, self._peak, self.running)
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
