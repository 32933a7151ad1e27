"""The worker's main loop: claim into free slots, run, record, repeat.

Threads, and the connection each uses:

- main thread: the claim loop (its own Django connection);
- handler threads, one per slot, in slot groups (``pool.py``: one group for
  all queues, or one per queue with slots of its own; an elastic group
  starts and stops threads as the load asks): run handlers (a Django
  connection each, opened only if a handler uses the ORM);
- completer: writes outcomes in batches (one connection);
- maintenance: heartbeats and the reaper (one connection);
- watchdog: fails attempts at their time limit (no connection; ``timeouts.py``);
- listener: LISTEN for enqueue notifications (one psycopg connection);
- scheduler: enqueues the periodic jobs' due ticks, when any are declared
  (one connection; ``scheduler.py``).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from django.db import DatabaseError, connections

from .. import db, metrics
from ..conf import jobs_settings
from ..tasks_bridge import announce_finished
from .claimed import ClaimedJob
from .completer import Completer
from .executor import RetryPolicy, StopWorker, execute, internal_error
from .listener import Listener, connection_params
from .maintenance import Maintenance
from .outcomes import Outcome, release
from .pool import (
    SCALE_DOWN_AFTER_SECONDS,
    SlotGroup,
    Slots,
    check_queue_slots,
    groups_for,
    total_size,
)
from .presence import Presence
from .scheduler import Scheduler
from .timeouts import Attempt, Watchdog

logger = logging.getLogger("django_durable_jobs.worker")

#: Exit codes of ``runjobworker``.
EXIT_OK = 0
EXIT_FORCED = 1
#: A handler thread ignored its time limit: the worker finished its other
#: jobs and exited so that its process manager starts a fresh process.
EXIT_RECYCLE = 3
# Stop claiming while this many outcomes wait to be written: a database
# that cannot keep up must slow the worker down, not fill its memory.
MAX_BACKLOG_PER_SLOT = 50
CLAIM_RETRY_CAP_SECONDS = 30.0


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
        if not self.scale_down_after > 0:
            raise ValueError(f"scale_down_after must be > 0 seconds, got {self.scale_down_after}")
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

    def describe_slots(self) -> str:
        """``8``, ``2-16`` or ``default:8,emails:4``: for logs."""
        if self.slots_per_queue:
            return ",".join(f"{name}:{s}" for name, s in sorted(self.slots_per_queue.items()))
        return str(self.slots)


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
        # Keyed by lease token (one per attempt), not job id: a job that failed
        # at its time limit can be claimed again by this worker while the
        # first attempt's thread still runs.
        self._running: dict[uuid.UUID, ClaimedJob] = {}
        # Jobs given back or reaped while their handler still runs: their
        # late outcome is dropped (and would be fenced out anyway).
        # (Lease tokens, as the next set.)
        self._abandoned: set[uuid.UUID] = set()
        # Abandoned at their deadline: the watchdog recorded (and counted)
        # the failed attempt; the slot stays busy until the thread returns.
        self._timed_out: set[uuid.UUID] = set()
        # A thread ignored its time limit: stop claiming, finish, exit 3.
        self._recycle = False
        self._groups = groups_for(
            config.queues,
            config.slots,
            config.slots_per_queue,
            config.scale_down_after,
            self._handler_thread,
        )
        # Per-queue slots: which group a job's queue belongs to.
        self._group_by_queue: dict[str, SlotGroup] | None = (
            {group.label: group for group in self._groups} if config.slots_per_queue else None
        )
        self.claimed = 0
        # For /healthz: the main loop runs, and its last claim did not fail.
        self.loop_alive = False
        self.claim_failing = False
        self.presence = Presence(config, self._current_slots)
        self.completer = Completer(config.alias, self._history_limit, self._written)
        self.watchdog = Watchdog(
            worker_id=config.worker_id,
            policy=self.policy,
            default_timeout=jobs_settings.TIMEOUT_SECONDS,
            grace=float(jobs_settings.TIMEOUT_GRACE_SECONDS),
            take=self._take_timed_out,
            submit=self.completer.submit,
            on_stuck=self._stuck,
        )
        self.maintenance = Maintenance(
            config.alias,
            config.worker_id,
            config.lease_seconds,
            self._held_snapshot,
            self._leases_lost,
            (self.policy.base, self.policy.cap, self.policy.jitter),
            self._history_limit,
            on_heartbeat=self.presence.beat,
            deadlines=self.watchdog.deadlines,
        )
        self.listener = (
            Listener(config.alias, str(jobs_settings.NOTIFY_CHANNEL), config.queues, self._notify)
            if config.listen
            else None
        )
        # None when there is nothing to schedule: no thread at all.
        self.scheduler = (
            Scheduler.from_declarations(config.alias, config.worker_id)
            if config.schedules and not config.burst
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
            c.worker_id, ",".join(sorted(c.queues)) if c.queues else "*", c.describe_slots(),
            c.lease_seconds, c.poll_interval, c.grace_period, " burst" if c.burst else "",
            extra={"worker_id": c.worker_id},
        )  # fmt: skip
        with self._lock:
            now = time.monotonic()
            for group in self._groups:
                group.start(now)
            metrics.set_worker_slots(total_size(self._groups))
        self.loop_alive = True
        self.completer.start()
        self.watchdog.start()
        self.maintenance.start()
        if self.listener is not None:
            self.listener.start()
        if self.scheduler is not None:
            self.scheduler.start()
        try:
            self._loop()
        finally:
            self.loop_alive = False
            self._shutdown()
        return EXIT_RECYCLE if self._recycle else EXIT_OK

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
        max_backlog = max(1_000, MAX_BACKLOG_PER_SLOT * c.max_slots)
        next_poll = time.monotonic()
        claim_failures = 0
        while not self._stopping:
            if self._recycle:
                self._drain_for_recycle()
                return
            now = time.monotonic()
            with self._lock:
                self._shrink_quiet_groups(now)
                notified, self._notified = self._notified, False
                due = notified or now >= next_poll
                # Each group with free slots asks for that many jobs: at a
                # poll or a notification, or at once if its last claim was full.
                asks = [
                    (group, group.free())
                    for group in self._groups
                    if group.free() > 0 and (due or group.more_waiting)
                ]
                free = sum(group.free() for group in self._groups)
                shrink_at = min(
                    (t for g in self._groups if (t := g.next_shrink_at()) is not None),
                    default=None,
                )
            if asks:
                if self.completer.backlog() >= max_backlog:
                    self._sleep(0.01)
                    continue
                try:
                    jobs = self._claim(asks)
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
                if not jobs:
                    with self._lock:
                        # A group left out of this claim (no free slot then)
                        # whose last claim was full may still have jobs.
                        busy = bool(self._running) or any(g.more_waiting for g in self._groups)
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
            if shrink_at is not None:
                # Wake to stop unused slots even when nothing else happens.
                until_shrink = max(0.0, shrink_at - now)
                timeout = until_shrink if timeout is None else min(timeout, until_shrink)
            self._sleep(timeout)

    def _claim(self, asks: list[tuple[SlotGroup, int]]) -> list[ClaimedJob]:
        """Claim up to each group's free slots, in one statement; hand the jobs to the groups."""
        c = self.config
        params: dict[str, Any] = {"worker_id": c.worker_id, "lease_seconds": float(c.lease_seconds)}
        if self._group_by_queue is not None:
            rows = db.execute(
                c.alias,
                "claim_jobs_per_queue",
                {
                    **params,
                    "queues": [group.label for group, _ in asks],
                    "limits": [free for _, free in asks],
                    "total": sum(free for _, free in asks),
                },
            )
        else:
            ((group, limit),) = asks
            if group.queues is None:
                rows = db.execute(c.alias, "claim_jobs", {**params, "limit": limit})
            else:
                rows = db.execute(
                    c.alias,
                    "claim_jobs_in_queues",
                    {**params, "limit": limit, "queues": sorted(group.queues)},
                )
        jobs = [ClaimedJob(*row) for row in rows]
        now = time.monotonic()
        with self._lock:
            got: dict[str, int] = {}
            for job in jobs:
                # The one place a job starts running, as far as the worker counts.
                self._held[job.id] = job.lease_token
                self._running[job.lease_token] = job
                label = self._group_of(job).label
                got[label] = got.get(label, 0) + 1
            grew = [
                group for group, asked in asks if group.claimed(asked, got.get(group.label, 0), now)
            ]
            if grew:
                size = total_size(self._groups)
        if grew:
            metrics.set_worker_slots(size)
            for group in grew:
                logger.info(
                    "Slots grew group=%s slots=%s max=%s: every slot is busy and jobs wait",
                    group.label, group.size, group.slots.maximum,
                    extra={"worker_id": c.worker_id},
                )  # fmt: skip
        if jobs:
            if metrics.ENABLED:
                metrics.record_claimed(jobs)
            for job in jobs:
                self._group_of(job).jobs.put(job)
            self.claimed += len(jobs)
        return jobs

    def _group_of(self, job: ClaimedJob) -> SlotGroup:
        if self._group_by_queue is None:
            return self._groups[0]
        return self._group_by_queue[job.queue]

    def _shrink_quiet_groups(self, now: float) -> None:
        """Stop slots that stayed unused for a quiet period (the caller holds the lock)."""
        for group in self._groups:
            stopped = group.shrink_if_quiet(now)
            if stopped:
                metrics.set_worker_slots(total_size(self._groups))
                logger.info(
                    "Slots shrank group=%s slots=%s min=%s: %s slot(s) unused for %ss",
                    group.label, group.size, group.slots.minimum, stopped,
                    self.config.scale_down_after, extra={"worker_id": self.config.worker_id},
                )  # fmt: skip

    def _current_slots(self) -> int:
        with self._lock:
            return total_size(self._groups)

    @property
    def slots(self) -> int:
        """Handler threads running now (not counting ones told to stop), all groups together."""
        return self._current_slots()

    def slots_by_group(self) -> dict[str, int]:
        """``{"all": 8}``, or ``{queue: slots}`` with slots per queue."""
        with self._lock:
            return {group.label: group.size for group in self._groups}

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

    def _handler_thread(self, group: SlotGroup) -> None:
        """One slot: run the group's jobs one at a time, until a stop marker."""
        try:
            while True:
                job = group.jobs.get()
                if job is None:
                    return
                started = time.perf_counter()
                outcome = self._run_attempt(job)
                self._finished(job, outcome, time.perf_counter() - started)
        finally:
            connections.close_all()

    def _run_attempt(self, job: ClaimedJob) -> Outcome:
        """Run the job under the watchdog; the attempt ends when the handler returns.

        Even past its deadline: the watchdog never interrupts the thread
        (see ``timeouts.py``), it only records the failed attempt, so the
        handler's late outcome comes back here and ``_finished`` drops it.
        """
        try:
            return self._execute(job)
        finally:
            self.watchdog.end(job)

    def _execute(self, job: ClaimedJob) -> Outcome:
        try:
            return execute(job, self.config.worker_id, self.policy, self.watchdog)
        except StopWorker as stop:
            self.stop()
            return stop.outcome
        except Exception as exc:  # a bug of ours: count it, so it cannot loop
            logger.exception("Worker error running job %s", job.id)
            return internal_error(job, self.config.worker_id, self.policy, exc)

    def _finished(self, job: ClaimedJob, outcome: Outcome, duration: float) -> None:
        with self._lock:
            # None when shutdown already gave the job back (and counted that).
            was_running = self._running.pop(job.lease_token, None) is not None
            if was_running:
                self._group_of(job).finished()
            timed_out = job.lease_token in self._timed_out
            self._timed_out.discard(job.lease_token)
            drop = job.lease_token in self._abandoned
            self._abandoned.discard(job.lease_token)
        if timed_out:
            # The watchdog recorded and counted this attempt at its deadline.
            logger.info(
                "Late outcome of job %s dropped: the attempt had failed at its time limit",
                job.id, extra={"job_id": str(job.id)},
            )  # fmt: skip
            self._wake()
            return
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
        announce = [o.job_id for o in outcomes if o.announce and o.job_id in written]
        if announce:
            announce_finished(announce, self.config.alias)
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

    def _take_timed_out(self, job: ClaimedJob) -> bool:
        """Watchdog: the attempt is past its deadline; take it from its handler.

        False when the attempt is no longer this worker's to record (it
        finished, was released, or its lease was lost).
        """
        with self._lock:
            attempt = job.lease_token
            if attempt not in self._running or attempt in self._abandoned:
                return False
            self._abandoned.add(attempt)
            self._timed_out.add(attempt)
            return True

    def _stuck(self, attempt: Attempt) -> None:
        """Watchdog: a handler thread is still busy ``grace`` s past its deadline; recycle."""
        with self._cond:
            self._recycle = True
            self._wake_locked()

    def _drain_for_recycle(self) -> None:
        """Stop claiming; wait for the in-flight jobs but the timed-out ones (or a stop)."""
        with self._lock:
            others = len(self._running.keys() - self._timed_out)
        logger.error(
            "Recycling worker=%s: a handler thread is stuck past its time limit; no new jobs, "
            "waiting for %s in-flight job(s), then exiting with code %s for a restart",
            self.config.worker_id, others, EXIT_RECYCLE,
            extra={"worker_id": self.config.worker_id},
        )  # fmt: skip
        while not self._stopping:
            with self._lock:
                if not self._running.keys() - self._timed_out:
                    return
            self._sleep(0.1)

    def _leases_lost(self, lost: set[uuid.UUID]) -> None:
        """Heartbeat: these held jobs' leases could not be extended.

        Only a job whose handler still runs has really lost its lease here.
        One whose handler has returned has its outcome with the completer:
        that write may itself be why the extension missed the row (the
        heartbeat raced the commit), and if the lease was in fact reaped the
        completer's fenced write says so. Either way its ``_held`` entry is
        the completer callback's to drop.
        """
        with self._lock:
            lost = {job_id for job_id in lost if self._held.get(job_id) in self._running}
            for job_id in lost:
                self._abandoned.add(self._held.pop(job_id))
        self.watchdog.cancel(lost)
        for job_id in lost:
            logger.warning(
                "Lease lost for job %s: it was reaped; this worker's outcome will not be "
                "recorded",
                job_id, extra={"job_id": str(job_id), "worker_id": self.config.worker_id},
            )  # fmt: skip

    # -- shutdown --------------------------------------------------------

    def _shutdown(self) -> None:
        c = self.config
        if self.scheduler is not None:
            self.scheduler.stop()  # first: a stopping worker enqueues nothing new
        deadline = time.monotonic() + (c.grace_period if self._stopping else 0)
        with self._lock:
            running = len(self._running)
        if running and self._stopping:
            logger.info("Waiting up to %ss for %s in-flight job(s)", c.grace_period, running)
        while True:
            with self._lock:
                # Timed-out jobs are recorded already; their threads may never return.
                if not self._running.keys() - self._timed_out:
                    break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._sleep(min(left, 0.1))
        # No timeout after this point: what it would submit might not be written.
        self.watchdog.stop()
        with self._lock:
            leftover = [j for j in self._running.values() if j.lease_token not in self._timed_out]
            self._abandoned.update(job.lease_token for job in leftover)
            # No longer in flight: the handler thread, if it ever returns,
            # finds the job gone and counts nothing.
            self._running.clear()
            for group in self._groups:
                group.running = 0
        self.watchdog.cancel({job.id for job in leftover})
        for job in leftover:
            metrics.record_released(job)
            logger.warning(
                "Releasing job %s type=%s: still running at the end of the grace period",
                job.id, job.type, extra={"job_id": str(job.id), "job_type": job.type},
            )  # fmt: skip
            self.completer.submit(release(job.id, job.lease_token))
        if not self.completer.stop(timeout=15.0):
            logger.error("Some outcomes could not be recorded; the reaper will retry those jobs")
        with self._lock:
            for group in self._groups:
                group.stop_all()
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
            # Not the timed-out ones: their failed attempt is among the unwritten.
            running = [j for j in self._running.values() if j.lease_token not in self._timed_out]
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
