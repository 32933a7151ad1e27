"""Heartbeats and the reaper, on a thread (and connection) of their own.

Heartbeat: every ``lease / 3`` the worker pushes back the lease of every
job it still holds, so a long job keeps its claim. Reaper: every worker
periodically returns jobs whose lease expired (their worker died or hung)
to ``pending`` with backoff, or to ``dead`` when out of attempts; an
advisory lock in the statement lets one worker reap at a time.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
import zlib
from collections.abc import Callable

from django.db import DatabaseError, connections

from .. import db

logger = logging.getLogger("django_durable_jobs.worker")

REAP_BATCH = 1_000
REAPER_LOCK_KEY = zlib.crc32(b"django_durable_jobs.reaper")


class Maintenance:
    def __init__(
        self,
        alias: str,
        worker_id: str,
        lease_seconds: float,
        held: Callable[[], dict[uuid.UUID, uuid.UUID]],
        on_lost: Callable[[set[uuid.UUID]], None],
        backoff: tuple[float, float, float],
        history_limit: int,
    ) -> None:
        self._alias = alias
        self._worker_id = worker_id
        self._lease_seconds = lease_seconds
        self._held = held
        self._on_lost = on_lost
        self._backoff = backoff
        self._history_limit = history_limit
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="durable-jobs-maintenance", daemon=True
        )
        self.heartbeat_interval = max(0.05, lease_seconds / 3)
        # Reap about twice per lease, jittered so workers do not all try at once.
        self.reap_interval = max(0.1, lease_seconds / 2)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        next_heartbeat = time.monotonic() + self.heartbeat_interval
        next_reap = time.monotonic() + random.uniform(0, self.reap_interval)
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_heartbeat:
                    self._guarded(self.heartbeat)
                    next_heartbeat = now + self.heartbeat_interval
                if now >= next_reap:
                    self._guarded(self.reap)
                    next_reap = now + self.reap_interval * random.uniform(0.75, 1.25)
                self._stop.wait(max(0.0, min(next_heartbeat, next_reap) - time.monotonic()))
        finally:
            connections[self._alias].close()

    def _guarded(self, task: Callable[[], object]) -> None:
        try:
            task()
        except DatabaseError as exc:
            # The next round tries again on a fresh connection; leases are
            # long enough (three heartbeats) to survive a missed one.
            logger.warning("Worker maintenance (%s) failed: %s", task.__name__, exc)
            connections[self._alias].close()

    def heartbeat(self) -> None:
        held = self._held()
        if not held:
            return
        rows = db.execute(
            self._alias,
            "extend_leases",
            {
                "ids": list(held),
                "tokens": list(held.values()),
                "lease_seconds": float(self._lease_seconds),
            },
        )
        extended = {row[0] for row in rows}
        lost = set(held) - extended
        # A job finished meanwhile is no longer held: not lost.
        lost &= set(self._held())
        if lost:
            self._on_lost(lost)

    def reap(self) -> int:
        base, cap, jitter = self._backoff
        rows = db.execute(
            self._alias,
            "reap_jobs",
            {
                "lock_key": REAPER_LOCK_KEY,
                "limit": REAP_BATCH,
                "backoff_base": base,
                "backoff_cap": cap,
                "backoff_jitter": jitter,
                "history_limit": self._history_limit,
            },
        )
        for job_id, job_type, status, attempts, last_error in rows:
            log = logger.error if status == "dead" else logger.warning
            log(
                "Job reaped id=%s type=%s attempt=%s now=%s worker=%s: %s",
                job_id, job_type, attempts, status, self._worker_id, last_error,
                extra={
                    "job_id": str(job_id), "job_type": job_type, "attempt": attempts,
                    "worker_id": self._worker_id,
                },
            )  # fmt: skip
        return len(rows)
