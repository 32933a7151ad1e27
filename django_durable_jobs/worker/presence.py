"""This worker's row in the workers table: who is alive, for health and the admin.

Written by the maintenance thread on each heartbeat (one upsert), deleted
at a graceful shutdown. A killed worker leaves its row behind; its stale
``last_heartbeat`` tells readers it is gone.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import DatabaseError

from .. import __version__, db

if TYPE_CHECKING:
    from .config import WorkerConfig

#: Rows of workers killed without a graceful stop are deleted by the next
#: heartbeat of any worker once this old (kept a while for the admin).
FORGET_AFTER_SECONDS = 86_400.0


class Presence:
    """``concurrency`` in the row is the worker's current number of slots
    (``current_slots()`` at each heartbeat), which an elastic pool changes;
    ``slots_in_use`` is ``busy_slots()`` then (the admin's Workers page)."""

    @classmethod
    def for_worker(
        cls,
        config: WorkerConfig,
        current_slots: Callable[[], int],
        busy_slots: Callable[[], int],
    ) -> Presence:
        return cls(
            alias=config.alias,
            worker_id=config.worker_id,
            queues=config.queues,
            max_slots=config.max_slots,
            lease_seconds=config.lease_seconds,
            current_slots=current_slots,
            busy_slots=busy_slots,
        )

    def __init__(
        self,
        *,
        alias: str,
        worker_id: str,
        queues: frozenset[str] | None,
        max_slots: int,
        lease_seconds: float,
        current_slots: Callable[[], int],
        busy_slots: Callable[[], int] = lambda: 0,
    ) -> None:
        self._alias = alias
        self._current_slots = current_slots
        self._busy_slots = busy_slots
        self._params = {
            "id": worker_id,
            "host": socket.gethostname()[:255],
            "pid": os.getpid(),
            "queues": sorted(queues) if queues else [],
            "concurrency": max_slots,
            "lease": float(lease_seconds),
            "version": __version__,
        }

    def beat(self) -> None:
        """Upsert this worker's row (the caller handles ``DatabaseError``)."""
        # Before the handler threads start (size 0), the configured maximum.
        params = {
            **self._params,
            "concurrency": self._current_slots() or self._params["concurrency"],
            "slots_in_use": self._busy_slots(),
        }
        db.upsert_worker(self._alias, params, forget_after_seconds=FORGET_AFTER_SECONDS)

    def remove(self) -> None:
        """Delete this worker's row at a graceful shutdown; best effort."""
        # On failure its heartbeat goes stale, which readers treat as gone.
        with contextlib.suppress(DatabaseError):
            db.delete_worker(self._alias, str(self._params["id"]))
