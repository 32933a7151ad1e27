"""What a worker serves and how: ``WorkerConfig``, checked before any thread starts."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import db
from ..conf import jobs_settings
from ..durations import SecondsError, seconds
from .pool import SCALE_DOWN_AFTER_SECONDS, Slots, check_queue_slots
from .slots import check_queue_name


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class WorkerConfig:
    """What a Worker serves and how; ``runjobworker``'s options map onto it.

    Slots: ``concurrency`` handler threads shared by all ``queues``; with
    ``max_concurrency`` the pool is elastic, between ``concurrency`` and
    ``max_concurrency``, shrinking after ``scale_down_after`` quiet seconds.
    With ``queue_slots`` (``{"emails": 4, "webhooks": (1, 8)}``) each queue has
    slots of its own instead, and ``queues`` is set from its keys.
    """

    queues: frozenset[str] | None = None  # None: every queue
    concurrency: int = 8
    burst: bool = False
    grace_period: float = field(default_factory=lambda: float(jobs_settings.GRACE_PERIOD_SECONDS))
    poll_interval: float = field(default_factory=lambda: float(jobs_settings.POLL_INTERVAL_SECONDS))
    lease_seconds: float = field(default_factory=lambda: float(jobs_settings.LEASE_SECONDS))
    worker_id: str = field(default_factory=default_worker_id)
    alias: str = field(default_factory=db.database_alias)
    listen: bool = True
    # The database alias to LISTEN on; None: LISTEN_DATABASE, else ``alias``.
    listen_alias: str | None = None
    install_signal_handlers: bool = True
    # Enqueue the declared schedules' ticks (never in burst mode).
    schedules: bool = True
    max_concurrency: int | None = None  # None: a fixed pool of `concurrency`
    queue_slots: Mapping[str, int | tuple[int, int] | Slots] | None = None
    scale_down_after: float = SCALE_DOWN_AFTER_SECONDS
    # Derived in __post_init__: the shared pool's size, and the checked
    # per-queue slots (None without queue_slots).
    slots: Slots = field(init=False, repr=False)
    slots_per_queue: dict[str, Slots] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # A bad config is an error here, before any thread starts.
        maximum = self.concurrency if self.max_concurrency is None else self.max_concurrency
        try:
            self.slots = Slots(self.concurrency, maximum)
        except ValueError as exc:
            raise ValueError(f"concurrency: {exc}") from None
        try:
            self.scale_down_after = seconds(self.scale_down_after, allow_zero=False, maximum=None)
        except SecondsError:
            raise ValueError(
                f"scale_down_after must be > 0 seconds, got {self.scale_down_after!r}"
            ) from None
        if self.queues is not None:
            self.queues = frozenset(check_queue_name(name) for name in self.queues)
        if self.listen_alias is None:
            self.listen_alias = db.listen_alias(self.alias)
        self.slots_per_queue = None
        if self.queue_slots is not None:
            self.slots_per_queue = check_queue_slots(self.queue_slots)
            names = frozenset(self.slots_per_queue)
            if self.queues is not None and frozenset(self.queues) != names:
                raise ValueError(
                    f"queues {sorted(self.queues)} differ from the queues of queue_slots "
                    f"{sorted(names)}; give queue_slots only"
                )
            self.queues = names

    @property
    def max_slots(self) -> int:
        """The most handler threads this worker may run at once."""
        if self.slots_per_queue:
            return sum(slots.maximum for slots in self.slots_per_queue.values())
        return self.slots.maximum

    def describe(self) -> str:
        """What the worker serves and how, for its start-up log line."""
        return (
            f"worker={self.worker_id} "
            f"queues={','.join(sorted(self.queues)) if self.queues else '*'} "
            f"concurrency={self.describe_slots()} lease={self.lease_seconds}s "
            f"poll={self.poll_interval}s grace={self.grace_period}s"
            f"{' burst' if self.burst else ''}"
            + (
                f" listen_database={self.listen_alias}"
                if self.listen and self.listen_alias != self.alias
                else ""
            )
        )

    def describe_slots(self) -> str:
        """``8``, ``2-16`` or ``default:8,emails:4``: for logs."""
        if self.slots_per_queue:
            return ",".join(f"{name}:{s}" for name, s in sorted(self.slots_per_queue.items()))
        return str(self.slots)
