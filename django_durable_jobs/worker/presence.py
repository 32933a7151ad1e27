"""This worker's row in the workers table: who is alive, for health and the admin.

Written by the maintenance thread on each heartbeat (one upsert), deleted
at a graceful shutdown. A killed worker leaves its row behind; its stale
``last_heartbeat`` tells readers it is gone.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

if TYPE_CHECKING:
    from .loop import WorkerConfig

#: Rows of workers killed without a graceful stop are deleted by the next
#: heartbeat of any worker once this old (kept a while for the admin).
STALE_AFTER = "1 day"

# One statement: forget long-dead workers, then upsert this one.
UPSERT = (
    """
WITH forgotten AS (
    DELETE FROM durable_jobs_worker
    WHERE last_heartbeat < now() - interval '"""
    + STALE_AFTER
    + """' AND id <> %(id)s
)
INSERT INTO durable_jobs_worker
    (id, host, pid, queues, concurrency, lease_seconds, started_at, last_heartbeat)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(concurrency)s, %(lease)s, now(), now())
ON CONFLICT (id) DO UPDATE SET
    host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
    concurrency = EXCLUDED.concurrency, lease_seconds = EXCLUDED.lease_seconds,
    started_at = CASE WHEN durable_jobs_worker.pid = EXCLUDED.pid
                      THEN durable_jobs_worker.started_at ELSE now() END,
    last_heartbeat = now()
"""
)


class Presence:
    """``concurrency`` in the row is the worker's current number of slots
    (``current_slots()`` at each heartbeat), which an elastic pool changes."""

    def __init__(self, config: WorkerConfig, current_slots: Callable[[], int]) -> None:
        self._alias = config.alias
        self._current_slots = current_slots
        self._params = {
            "id": config.worker_id,
            "host": socket.gethostname()[:255],
            "pid": os.getpid(),
            "queues": json.dumps(sorted(config.queues) if config.queues else []),
            "concurrency": config.max_slots,
            "lease": float(config.lease_seconds),
        }

    def beat(self) -> None:
        """Upsert this worker's row (the caller handles ``DatabaseError``)."""
        # Before the handler threads start (size 0), the configured maximum.
        params = {
            **self._params,
            "concurrency": self._current_slots() or self._params["concurrency"],
        }
        with connections[self._alias].cursor() as cursor:
            cursor.execute(UPSERT, params)

    def remove(self) -> None:
        """Delete this worker's row at a graceful shutdown; best effort."""
        try:
            with connections[self._alias].cursor() as cursor:
                cursor.execute(
                    "DELETE FROM durable_jobs_worker WHERE id = %s", [self._params["id"]]
                )
        except DatabaseError:
            pass  # its heartbeat goes stale, which readers treat as gone
