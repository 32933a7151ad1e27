"""The worker's main loop: claim into free slots, run, record, repeat.

Threads, and the connection each uses:

- main thread: the claim loop (its own Django connection);
- ``concurrency`` handler threads: run handlers (a Django connection each,
  opened only if a handler uses the ORM);
- completer: writes outcomes in batches (one connection);
- maintenance: heartbeats and the reaper (one connection);
- listener: LISTEN for enqueue notifications (one psycopg connection).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from django.db import DatabaseError, connections

from .. import db, metrics
from ..conf import jobs_settings
from .claimed import ClaimedJob
from .completer import Completer
from .executor import RetryPolicy, StopWorker, execute, internal_error
from .listener import Listener, connection_params
from .maintenance import Maintenance
from .outcomes import Outcome, release
from .presence import Presence

logger = logging.getLogger("django_durable_jobs.worker")

#: Exit codes of ``runjobworker``.
EXIT_OK = 0
EXIT_FORCED = 1
# Stop claiming while this many outcomes wait to be written: a database
# that cannot keep up must slow the worker down, not fill its memory.
MAX_BACKLOG_PER_SLOT = 50
CLAIM_RETRY_CAP_SECONDS = 30.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class WorkerConfig:
    queues: frozenset[str] | None = None  # None: every queue
    concurrency: int = 8
    burst: bool = False
    grace_period: float = field(default_factory=lambda: float(jobs_settings.GRACE_PERIOD_SECONDS))
    poll_interval: float = field(default_factory=lambda: float(jobs_settings.POLL_INTERVAL_SECONDS))
    lease_seconds: float = field(default_factory=lambda: float(jobs_settings.LEASE_SECONDS))
    worker_id: str = field(default_factory=default_worker_id)
    alias: str = field(default_factory=db.database_alias)
    listen: bool = True
    install_signal_handlers: bool = True


class Worker:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.policy = RetryPolicy(
            base=float(jobs_settings.BACKOFF_BASE_SECONDS),
            cap=float(jobs_settings.BACKOFF_MAX_SECONDS),
            jitter=float(jobs_settings.BACKOFF_JITTER),
        )
        self._history_limit = int(jobs_settings.ERROR_HISTORY_LIMIT)
        # Reentrant: the signal handler runs on the main thread, possibly
        # while the main thread holds this lock; it must be able to take it.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._woken = False
        self._notified = False
        # When a retry this worker scheduled falls due (monotonic clock).
        self._retry_due: float | None = None
        self._stopping = False
        self._forced = False
        # Jobs claimed and not yet recorded: id -> lease token.
        self._held: dict[uuid.UUID, uuid.UUID] = {}
        # Jobs whose handler is running: id -> job.
        self._running: dict[uuid.UUID, ClaimedJob] = {}
        # Jobs given back or reaped while their handler still runs: their
        # late outcome is dropped (and would be fenced out anyway).
        self._abandoned: set[uuid.UUID] = set()
        self._jobs: queue.SimpleQueue[ClaimedJob | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self.claimed = 0
        # For /healthz: the main loop runs, and its last claim did not fail.
        self.loop_alive = False
        self.claim_failing = False
        self.presence = Presence(config)
        self.completer = Completer(config.alias, self._history_limit, self._written)
        self.maintenance = Maintenance(
            config.alias,
            config.worker_id,
            config.lease_seconds,
            self._held_snapshot,
            self._leases_lost,
            (self.policy.base, self.policy.cap, self.policy.jitter),
            self._history_limit,
            on_heartbeat=self.presence.beat,
        )
        self.listener = (
            Listener(config.alias, str(jobs_settings.NOTIFY_CHANNEL), config.queues, self._notify)
            if config.listen
            else None
        )

    # -- lifecycle -------------------------------------------------------

    def run(self) -> int:
        """Serve until stopped (or, with ``burst``, until no runnable job is left)."""
        c = self.config
        if c.install_signal_handlers:
            self._install_signal_handlers()
        logger.info(
            "Worker starting worker=%s queues=%s concurrency=%s lease=%ss poll=%ss grace=%ss%s",
            c.worker_id, ",".join(sorted(c.queues)) if c.queues else "*", c.concurrency,
            c.lease_seconds, c.poll_interval, c.grace_period, " burst" if c.burst else "",
            extra={"worker_id": c.worker_id},
        )  # fmt: skip
        for index in range(c.concurrency):
            thread = threading.Thread(
                target=self._handler_thread, name=f"durable-jobs-handler-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        metrics.set_worker_slots(c.concurrency)
        self.loop_alive = True
        self.completer.start()
        self.maintenance.start()
        if self.listener is not None:
            self.listener.start()
        try:
            self._loop()
        finally:
            self.loop_alive = False
            self._shutdown()
        return EXIT_OK

    def stop(self) -> None:
        """Ask for a graceful stop (what the first SIGTERM/SIGINT does)."""
        with self._cond:
            self._stopping = True
            self._wake_locked()

    def _wake(self) -> None:
        with self._cond:
            self._wake_locked()

    def _wake_locked(self) -> None:
        self._woken = True
        self._cond.notify_all()

    def _sleep(self, timeout: float | None) -> None:
        """Until woken (a free slot, a notification, a stop) or ``timeout``."""
        with self._cond:
            if not self._woken:
                self._cond.wait(timeout)
            self._woken = False

    def _install_signal_handlers(self) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if self._stopping:
                logger.warning("Second %s: exiting now", name)
                self._force_exit()
            logger.info(
                "%s received: no new jobs; in-flight jobs have %ss to finish (send it again "
                "to exit at once)",
                name, self.config.grace_period,
            )  # fmt: skip
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    # -- the loop --------------------------------------------------------

    def _loop(self) -> None:
        c = self.config
        max_backlog = max(1_000, MAX_BACKLOG_PER_SLOT * c.concurrency)
        next_poll = time.monotonic()
        more_waiting = True
        claim_failures = 0
        while not self._stopping:
            now = time.monotonic()
            with self._lock:
                free = c.concurrency - len(self._running)
                notified, self._notified = self._notified, False
            if free > 0 and (notified or more_waiting or now >= next_poll):
                if self.completer.backlog() >= max_backlog:
                    self._sleep(0.01)
                    continue
                try:
                    jobs = self._claim(free)
                    claim_failures = 0
                    self.claim_failing = False
                except DatabaseError as exc:
                    claim_failures += 1
                    self.claim_failing = True
                    delay = min(CLAIM_RETRY_CAP_SECONDS, 0.5 * 2 ** (claim_failures - 1))
                    logger.warning("Claim failed (%s); retrying in %.1fs", exc, delay)
                    connections[c.alias].close()
                    self._sleep(delay)
                    continue
                more_waiting = len(jobs) == free
                if not jobs:
                    with self._lock:
                        busy = bool(self._running)
                    if c.burst and not busy:
                        logger.info("No runnable job left: exiting (--burst)")
                        return
                    if c.burst:
                        # Look again shortly: the running jobs may be all there is.
                        next_poll = time.monotonic() + min(c.poll_interval, 0.05)
                    elif now >= next_poll:
                        # Only at poll time: an empty claim after a notification
                        # (another worker was faster) need not cost a query.
                        next_poll = time.monotonic() + self._idle_sleep()
                continue
            with self._lock:
                if self._retry_due is not None:
                    next_poll = min(next_poll, self._retry_due)
                    self._retry_due = None
            timeout = max(0.0, next_poll - now) if free > 0 else None
            self._sleep(timeout)

    def _claim(self, limit: int) -> list[ClaimedJob]:
        c = self.config
        params: dict[str, Any] = {
            "limit": limit,
            "worker_id": c.worker_id,
            "lease_seconds": float(c.lease_seconds),
        }
        if c.queues is None:
            rows = db.execute(c.alias, "claim_jobs", params)
        else:
            rows = db.execute(
                c.alias, "claim_jobs_in_queues", {**params, "queues": sorted(c.queues)}
            )
        jobs = [ClaimedJob(*row) for row in rows]
        if jobs:
            with self._lock:
                for job in jobs:
                    self._held[job.id] = job.lease_token
                    self._running[job.id] = job
            if metrics.ENABLED:
                metrics.record_claimed(jobs)
            for job in jobs:
                self._jobs.put(job)
            self.claimed += len(jobs)
        return jobs

    def _idle_sleep(self) -> float:
        """Until the next poll: the poll interval, or sooner if a delayed job is due sooner."""
        interval = self.config.poll_interval
        try:
            queues = sorted(self.config.queues) if self.config.queues else None
            rows = db.execute(self.config.alias, "next_available_at", {"queues": queues})
        except DatabaseError:
            return interval
        due = rows[0][0] if rows else None
        if due is None:
            return interval
        from django.utils import timezone

        seconds = (due - timezone.now()).total_seconds()
        # A little after `due`, so the database's clock has passed it too.
        return min(interval, max(0.005, seconds + 0.005))

    # -- handler threads -------------------------------------------------

    def _handler_thread(self) -> None:
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                started = time.perf_counter()
                try:
                    outcome = execute(job, self.config.worker_id, self.policy)
                except StopWorker as stop:
                    outcome = stop.outcome
                    self.stop()
                except Exception as exc:  # a bug of ours: count it, so it cannot loop
                    logger.exception("Worker error running job %s", job.id)
                    outcome = internal_error(job, self.config.worker_id, self.policy, exc)
                self._finished(job, outcome, time.perf_counter() - started)
        finally:
            connections.close_all()

    def _finished(self, job: ClaimedJob, outcome: Outcome, duration: float) -> None:
        with self._lock:
            # None when shutdown already gave the job back (and counted that).
            was_running = self._running.pop(job.id, None) is not None
            if job.id in self._abandoned:
                self._abandoned.discard(job.id)
                drop = True
            else:
                drop = False
        if was_running and metrics.ENABLED:
            # Counted here, once per attempt, whatever happens to the write.
            metrics.record_finished(job, outcome.kind, duration)
            if drop and outcome.kind != "released":
                metrics.record_unrecorded(1)
        if drop:
            logger.warning(
                "Outcome of job %s dropped: its lease was lost or released (%s)",
                job.id, outcome.kind, extra={"job_id": str(job.id)},
            )  # fmt: skip
        else:
            self.completer.submit(outcome)
        self._wake()

    # -- callbacks from the other threads --------------------------------

    def _notify(self) -> None:
        with self._cond:
            self._notified = True
            self._wake_locked()

    def _held_snapshot(self) -> dict[uuid.UUID, uuid.UUID]:
        with self._lock:
            return dict(self._held)

    def _written(self, outcomes: list[Outcome], written: set[uuid.UUID]) -> None:
        retry_delays = [
            o.delay_us for o in outcomes if o.kind == "failed" and o.delay_us is not None
        ]
        with self._cond:
            for outcome in outcomes:
                self._held.pop(outcome.job_id, None)
            if retry_delays:
                # Wake when the soonest retry written here falls due.
                due = time.monotonic() + min(retry_delays) / 1_000_000 + 0.005
                if self._retry_due is None or due < self._retry_due:
                    self._retry_due = due
                self._wake_locked()
        if metrics.ENABLED and len(written) < len(outcomes):
            metrics.record_unrecorded(
                sum(1 for o in outcomes if o.job_id not in written and o.kind != "released")
            )
        for outcome in outcomes:
            if outcome.job_id not in written:
                logger.warning(
                    "Outcome of job %s (%s) not recorded: the job no longer holds this "
                    "worker's lease (it was reaped, and may have run again)",
                    outcome.job_id, outcome.kind, extra={"job_id": str(outcome.job_id)},
                )  # fmt: skip

    def _leases_lost(self, lost: set[uuid.UUID]) -> None:
        with self._lock:
            for job_id in lost:
                self._held.pop(job_id, None)
                if job_id in self._running:
                    self._abandoned.add(job_id)
        for job_id in lost:
            logger.warning(
                "Lease lost for job %s: it was reaped; this worker's outcome will not be "
                "recorded",
                job_id, extra={"job_id": str(job_id), "worker_id": self.config.worker_id},
            )  # fmt: skip

    # -- shutdown --------------------------------------------------------

    def _shutdown(self) -> None:
        c = self.config
        deadline = time.monotonic() + (c.grace_period if self._stopping else 0)
        with self._lock:
            running = len(self._running)
        if running and self._stopping:
            logger.info("Waiting up to %ss for %s in-flight job(s)", c.grace_period, running)
        while True:
            with self._lock:
                if not self._running:
                    break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._sleep(min(left, 0.1))
        with self._lock:
            leftover = list(self._running.values())
            self._abandoned.update(job.id for job in leftover)
            # No longer in flight: the handler thread, if it ever returns,
            # finds the job gone and counts nothing.
            self._running.clear()
        for job in leftover:
            metrics.record_released(job)
            logger.warning(
                "Releasing job %s type=%s: still running at the end of the grace period",
                job.id, job.type, extra={"job_id": str(job.id), "job_type": job.type},
            )  # fmt: skip
            self.completer.submit(release(job.id, job.lease_token))
        if not self.completer.stop(timeout=15.0):
            logger.error("Some outcomes could not be recorded; the reaper will retry those jobs")
        for _ in self._threads:
            self._jobs.put(None)
        if self.listener is not None:
            self.listener.stop()
        self.maintenance.stop()
        self.presence.remove()
        metrics.set_worker_slots(0)
        connections[c.alias].close()
        logger.info(
            "Worker stopped worker=%s claimed=%s", c.worker_id, self.claimed,
            extra={"worker_id": c.worker_id},
        )  # fmt: skip

    def healthy(self, now: float | None = None) -> bool:
        """For ``/healthz``: the loop runs, its last claim worked, and the
        maintenance thread reached the database within three heartbeats."""
        now = time.monotonic() if now is None else now
        last = self.maintenance.last_heartbeat_ok
        return (
            self.loop_alive
            and not self.claim_failing
            and last is not None
            and now - last <= 3 * self.maintenance.heartbeat_interval + self.config.poll_interval
        )

    def _force_exit(self) -> None:
        """Second signal: record what is known and give back what runs (best effort, 2 s); exit 1.

        Outcomes still waiting for the completer are written too, so jobs
        that finished are not run again by the reaper.
        """
        with self._lock:
            running = list(self._running.values())
        outcomes = self.completer.unwritten() + [release(j.id, j.lease_token) for j in running]
        if outcomes:
            try:
                import psycopg

                from ..sql import QUERIES

                params = connection_params(self.config.alias)
                params["connect_timeout"] = 2
                with psycopg.connect(**params, autocommit=True) as conn:
                    conn.execute("SET statement_timeout = 2000")
                    conn.execute(
                        QUERIES["finish_jobs"],
                        {
                            "outcomes": "[" + ",".join(o.json_row() for o in outcomes) + "]",
                            "history_limit": self._history_limit,
                        },
                    )
            except Exception as exc:  # exiting anyway; the reaper will recover them
                logger.error(
                    "Could not record %s outcome(s) at forced exit: %s", len(outcomes), exc
                )
        logging.shutdown()
        os._exit(EXIT_FORCED)
