"""The worker's main loop: claim into free slots, run, record, repeat.

Threads, and the connection each uses:

- main thread: the claim loop (its own Django connection);
- handler threads, one per slot, in slot groups (``pool.py``: one group for
  all queues, or one per queue with slots of its own; an elastic group
  starts and stops threads as the load asks): run handlers (a Django
  connection each, opened only if a handler uses the ORM);
- completer: writes outcomes in batches (one connection);
- maintenance: heartbeats and the reaper (one connection);
- watchdog: fails attempts at their time limit (no connection; ``watchdog.py``);
- event loop: runs the ``async def`` handlers, started at the first one;
  each takes a slot, whose thread waits for it and runs its sync calls
  (no connection of its own; ``event_loop.py``);
- listener: LISTEN for enqueue notifications, and pause/resume ones
  (one psycopg connection, to ``LISTEN_DATABASE`` when set; the paused
  queues: ``paused.py``); it probes itself now and then (``probe.py``: a
  short connection of the job database's every few minutes);
- scheduler: enqueues the periodic jobs' due ticks, when any are declared
  (one connection; ``scheduler.py``).

Every attempt's state lives in one ``AttemptTable`` (``attempts.py``),
under one lock that this loop's condition and the watchdog's share; the
other threads change attempts only through the table's methods.
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

from django.db import DatabaseError, connections

from .. import db, hooks, metrics
from ..backoff import RetryPolicy
from ..conf import jobs_settings
from ..db.records import ClaimedJob, Outcome, Transition
from ..durations import SecondsError, seconds
from ..services import ServiceSet
from .attempts import Attempt, AttemptTable, Clock, State
from .claiming import Ask, ClaimPlanner
from .completer import Completer
from .event_loop import EventLoop
from .executor import StopWorker, execute, internal_error
from .listener import Listener
from .maintenance import Maintenance
from .outcomes import cancel, cancelled_failure, release
from .paused import PausedQueues
from .pool import (
    SCALE_DOWN_AFTER_SECONDS,
    SlotGroup,
    Slots,
    check_queue_slots,
    groups_for,
    total_size,
)
from .presence import Presence
from .probe import NotificationProbe
from .scheduler import Scheduler
from .slots import check_queue_name
from .throughput import OutcomeCounts
from .watchdog import Watchdog

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

    def describe_slots(self) -> str:
        """``8``, ``2-16`` or ``default:8,emails:4``: for logs."""
        if self.slots_per_queue:
            return ",".join(f"{name}:{s}" for name, s in sorted(self.slots_per_queue.items()))
        return str(self.slots)


class Worker:
    def __init__(self, config: WorkerConfig, *, clock: Clock = time.monotonic) -> None:
        self.config = config
        self.policy = RetryPolicy.from_settings()
        self._history_limit = int(jobs_settings.ERROR_HISTORY_LIMIT)
        self.attempts = AttemptTable(clock)
        # The table's lock, for the slot groups and the wake-up flags too: one
        # lock for the worker's state. Reentrant: the signal handler runs on
        # the main thread, possibly while the main thread holds it.
        self._lock = self.attempts.lock
        self._cond = threading.Condition(self._lock)
        self._woken = False
        self._notified = False
        # When a retry this worker scheduled falls due (monotonic clock).
        self._retry_due: float | None = None
        self._stopping = False
        # A thread ignored its time limit: stop claiming, finish, exit 3.
        self._recycle = False
        self._groups = groups_for(
            config.queues,
            config.slots,
            config.slots_per_queue,
            config.scale_down_after,
            self._handler_thread,
        )
        self.claimed = 0
        # The background threads, started in order and stopped in reverse.
        self._services = ServiceSet()
        # For /healthz: the main loop runs, and its last claim did not fail.
        self.loop_alive = False
        self.claim_failing = False
        self.presence = Presence(
            alias=config.alias,
            worker_id=config.worker_id,
            queues=config.queues,
            max_slots=config.max_slots,
            lease_seconds=config.lease_seconds,
            current_slots=self._current_slots,
            busy_slots=self._busy_slots,
        )
        #: Outcomes written, per queue and minute, for the admin's Queues chart.
        self.throughput = OutcomeCounts()
        self.completer = Completer(config.alias, self._history_limit, self._written)
        # Started by the first async handler; never, if there is none.
        self.event_loop = EventLoop()
        self.watchdog = Watchdog(
            attempts=self.attempts,
            worker_id=config.worker_id,
            policy=self.policy,
            default_timeout=jobs_settings.TIMEOUT_SECONDS,
            grace=float(jobs_settings.TIMEOUT_GRACE_SECONDS),
            submit=self.completer.submit,
            on_stuck=self._stuck,
        )
        self.maintenance = Maintenance(
            config.alias,
            config.worker_id,
            config.lease_seconds,
            self.attempts.leases_to_extend,
            self._leases_lost,
            self.policy,
            self._history_limit,
            on_heartbeat=self.presence.beat,
            clock=clock,
            untold=self.attempts.untold,
            on_cancel=self._cancels_requested,
            counts=self.throughput,
        )
        # The claim leaves these out; read before a claim when stale.
        self.paused = PausedQueues(
            config.alias, config.queues, config.poll_interval, worker_id=config.worker_id
        )
        # What to claim next, and the claim (claiming.py).
        self.planner = ClaimPlanner(
            alias=config.alias,
            worker_id=config.worker_id,
            lease_seconds=config.lease_seconds,
            poll_interval=config.poll_interval,
            queues=config.queues,
            groups=self._groups,
            per_queue=config.slots_per_queue is not None,
            paused=self.paused,
            retry_soon=self._retry_soon,
        )
        self._max_backlog = max(1_000, MAX_BACKLOG_PER_SLOT * config.max_slots)
        # When the loop claims next at the latest, unasked (monotonic).
        self._next_poll = 0.0
        self._claim_failures = 0
        listen_alias = config.listen_alias or config.alias
        self.listener = (
            Listener(
                config.alias,
                str(jobs_settings.NOTIFY_CHANNEL),
                config.queues,
                self._notify,
                on_cancel=lambda job_id: self._cancels_requested({job_id}),
                queue_state=self._queue_state_changed,
                listen_alias=listen_alias,
                probe=NotificationProbe(
                    alias=config.alias,
                    listen_alias=listen_alias,
                    poll_interval=config.poll_interval,
                ),
            )
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
            "Worker starting worker=%s queues=%s concurrency=%s lease=%ss poll=%ss grace=%ss%s%s",
            c.worker_id, ",".join(sorted(c.queues)) if c.queues else "*", c.describe_slots(),
            c.lease_seconds, c.poll_interval, c.grace_period, " burst" if c.burst else "",
            f" listen_database={c.listen_alias}"
            if c.listen and c.listen_alias != c.alias else "",
            extra={"worker_id": c.worker_id},
        )  # fmt: skip
        with self._lock:
            now = time.monotonic()
            for group in self._groups:
                group.start(now)
            metrics.set_worker_slots(total_size(self._groups))
        self.loop_alive = True
        # Stopped in the reverse order (_shutdown): the scheduler first (a
        # stopping worker enqueues nothing new), then the watchdog once the
        # grace period is over, the completer once everything is released,
        # and last the threads that keep the worker reachable and its leases
        # alive while the others finish.
        self._services.start(
            self.maintenance, self.listener, self.completer, self.watchdog, self.scheduler
        )
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
        """Claim into free slots as jobs come; sleep until woken or the next poll.

        Returns at a stop, at a recycle once the in-flight jobs are done, and
        (``--burst``) once no runnable job is left.
        """
        self._next_poll = time.monotonic()
        while not self._stopping:
            if self._recycle:
                self._drain_for_recycle()
                return
            now = time.monotonic()
            asks, timeout = self._plan_round(now)
            if not asks:
                self._sleep(timeout)
            elif self._claim_round(asks, now):
                return

    def _plan_round(self, now: float) -> tuple[list[Ask], float | None]:
        """The groups that claim now; when there are none, how long to sleep (None: until woken)."""
        with self._lock:
            self._shrink_quiet_groups(now)
            notified, self._notified = self._notified, False
            due = notified or now >= self._next_poll
            asks = self.planner.asks(due=due, notified=notified)
            if asks:
                return asks, None
            wanting = any(group.wants_claim() for group in self._groups)
            shrink_at = min(
                (t for g in self._groups if (t := g.next_shrink_at()) is not None),
                default=None,
            )
            if self._retry_due is not None:
                self._next_poll = min(self._next_poll, self._retry_due)
                self._retry_due = None
        if self.paused.lifts_at is not None:
            # Claim when a pause ends by itself: no notification says so.
            self._next_poll = min(self._next_poll, self.paused.lifts_at)
        timeout = max(0.0, self._next_poll - now) if wanting else None
        if shrink_at is not None:
            # Wake to stop unused slots even when nothing else happens.
            until_shrink = max(0.0, shrink_at - now)
            timeout = until_shrink if timeout is None else min(timeout, until_shrink)
        return [], timeout

    def _claim_round(self, asks: list[Ask], now: float) -> bool:
        """Claim for ``asks`` and hand the jobs over; True when a burst has nothing left."""
        if self.completer.backlog() >= self._max_backlog:
            self._sleep(0.01)
            return False
        if self.completer.failing:
            # Outcomes cannot be written: claim nothing more until they can.
            self._sleep(0.05)
            return False
        # Whether jobs were in flight when this claim began: their ends may
        # free a slot a limit or a busy key held.
        ran_before = self.attempts.busy()
        # Or whose outcomes were not written yet: writing one may make waiting
        # jobs (depends_on) runnable after this claim looked, so a burst
        # claims once more before it decides to exit.
        unwritten_before = self.config.burst and (ran_before or self.attempts.outcomes_unwritten())
        try:
            jobs = self._claim(asks)
        except DatabaseError as exc:
            self._claim_failed(exc)
            return False
        self._claim_failures = 0
        self.claim_failing = False
        if jobs:
            return False
        if self.config.burst:
            if not self._may_find_more(ran_before, unwritten_before):
                logger.info("No runnable job left: exiting (--burst)")
                return True
            # Look again shortly: the running jobs may be all there is.
            self._next_poll = time.monotonic() + min(self.config.poll_interval, 0.05)
        elif now >= self._next_poll:
            # Only at poll time: an empty claim after a notification (another
            # worker was faster) need not cost a query.
            self._next_poll = time.monotonic() + self.planner.idle_sleep()
        return False

    def _may_find_more(self, ran_before: bool, unwritten_before: bool) -> bool:
        """After an empty claim: may a later claim still find a job (a burst goes on)?"""
        with self._lock:
            # A group left out of this claim (no free slot then) whose last
            # claim was full may still have jobs; so may the planner's queues.
            return (
                self.attempts.busy()
                or unwritten_before
                or any(g.more_waiting for g in self._groups)
                or self.planner.may_find_more(ran_before)
            )

    def _claim_failed(self, exc: DatabaseError) -> None:
        self._claim_failures += 1
        self.claim_failing = True
        delay = min(CLAIM_RETRY_CAP_SECONDS, 0.5 * 2 ** (self._claim_failures - 1))
        logger.warning("Claim failed (%s); retrying in %.1fs", exc, delay)
        connections[self.config.alias].close()
        self._sleep(delay)

    def _claim(self, asks: list[Ask]) -> list[ClaimedJob]:
        """Claim up to each group's room (the planner's); hand the jobs to the groups."""
        jobs = self.planner.claim(asks)
        now = time.monotonic()
        group_of = self.planner.group_of
        with self._lock:
            got: dict[str, int] = {}
            for job in jobs:
                # The one place a job starts running, as far as the worker counts.
                group = group_of(job)
                self.attempts.claimed(job, group)
                got[group.label] = got.get(group.label, 0) + 1
            grew = [
                group for group, asked in asks if group.claimed(asked, got.get(group.label, 0), now)
            ]
            size = total_size(self._groups)
        if grew:
            self._slots_grew(grew, size)
        if jobs:
            if metrics.ENABLED:
                metrics.record_claimed(jobs)
            for job in jobs:
                group_of(job).jobs.put(job)
            self.claimed += len(jobs)
        return jobs

    def _slots_grew(self, grew: list[SlotGroup], size: int) -> None:
        metrics.set_worker_slots(size)
        for group in grew:
            logger.info(
                "Slots grew group=%s slots=%s max=%s: every slot is busy and jobs wait",
                group.label, group.size, group.slots.maximum,
                extra={"worker_id": self.config.worker_id},
            )  # fmt: skip

    def _retry_soon(self, due: float) -> None:
        with self._cond:
            if self._retry_due is None or due < self._retry_due:
                self._retry_due = due

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

    def _busy_slots(self) -> int:
        """Slots with a job, claimed or running (claimed-ahead jobs take no slot of their own)."""
        with self._lock:
            return sum(min(group.running, group.size) for group in self._groups)

    @property
    def slots(self) -> int:
        """Handler threads running now (not counting ones told to stop), all groups together."""
        return self._current_slots()

    def slots_by_group(self) -> dict[str, int]:
        """``{"all": 8}``, or ``{queue: slots}`` with slots per queue."""
        with self._lock:
            return {group.label: group.size for group in self._groups}

    # -- handler threads -------------------------------------------------

    def _handler_thread(self, group: SlotGroup) -> None:
        """One slot: run the group's jobs one at a time, until a stop marker."""
        try:
            while True:
                job = group.jobs.get()
                if job is None:
                    return
                started = time.perf_counter()
                outcome = self._execute(job)
                self._finished(job, outcome, time.perf_counter() - started)
        finally:
            connections.close_all()

    def _execute(self, job: ClaimedJob) -> Outcome | None:
        """Run the job under the watchdog; None when it was no longer ours to run.

        The attempt ends when the handler returns, even past its deadline:
        the watchdog never interrupts the thread (see ``watchdog.py``), it
        only records the failed attempt, so the handler's late outcome comes
        back here and ``_finished`` drops it.
        """
        try:
            return execute(job, self.config.worker_id, self.policy, self.watchdog, self.event_loop)
        except StopWorker as stop:
            self.stop()
            return stop.outcome
        except Exception as exc:  # a bug of ours: count it, so it cannot loop
            logger.exception("Worker error running job %s", job.id)
            return internal_error(job, self.config.worker_id, self.policy, exc)

    def _finished(self, job: ClaimedJob, outcome: Outcome | None, duration: float) -> None:
        """The handler returned ``outcome``: submit it if the attempt is still its own."""
        attempt = self.attempts.returned(job.lease_token)
        state = None if attempt is None else attempt.state
        if outcome is None or state is None:
            pass  # never started (released or lease lost while waiting), or unknown
        elif state is State.FINISHED:
            if metrics.ENABLED:
                # Counted here, once per attempt, whatever happens to the write.
                metrics.record_finished(job, outcome.transition, duration)
            self.completer.submit(outcome)
        elif state is State.TIMED_OUT:
            # The watchdog recorded and counted this attempt at its deadline.
            logger.info(
                "Late outcome of job %s dropped: the attempt had %s",
                job.id,
                "failed at its time limit"
                if attempt is None or attempt.cancel_requested is None
                else "ended cancelled at its cancel's grace",
                extra={"job_id": str(job.id)},
            )  # fmt: skip
        else:
            if state is State.LEASE_LOST and metrics.ENABLED:
                # Still in flight until now; its outcome will never be written.
                metrics.record_finished(job, outcome.transition, duration)
                if outcome.transition is not Transition.RELEASE:
                    metrics.record_unrecorded(1)
            logger.warning(
                "Outcome of job %s dropped: its lease was lost or released (%s)",
                job.id, outcome.transition.value, extra={"job_id": str(job.id)},
            )  # fmt: skip
        self._slot_freed(attempt, None if outcome is None else duration)

    def _slot_freed(self, attempt: Attempt | None, duration: float | None) -> None:
        """A handler thread is free again: wake the loop only if it now has work.

        That is a claim to make (the group has room), or a stop, a recycle
        or the end of a burst to see; not once per job, which would cost the
        loop a wake-up (and the handler threads the GIL) for every job.
        """
        with self._cond:
            group = None if attempt is None else attempt.group
            if group is not None and duration is not None:
                group.attempt_took(duration)
            if attempt is not None and self.planner.slot_freed(attempt.job.queue):
                # A limited queue's job ended here: one of its slots is free
                # now, so claim again as on a notification.
                self._notified = True
                self._wake_locked()
            if (
                group is None
                or group.wants_claim()
                or self._stopping
                or self._recycle
                or not any(g.running for g in self._groups)
            ):
                self._wake_locked()

    # -- callbacks from the other threads --------------------------------

    def _notify(self) -> None:
        with self._cond:
            self._notified = True
            self._wake_locked()

    def _queue_state_changed(self, queue: str | None) -> None:
        """Listener: ``queue`` was paused or resumed (None: maybe missed, reconnected)."""
        if queue is None or self.paused.concerns(queue):
            self.paused.invalidate()
            # Claim now: a resumed queue's jobs are waiting.
            self._notify()

    def _written(self, outcomes: list[Outcome], written: set[uuid.UUID]) -> None:
        """Completer: ``outcomes`` were written (the ``written`` ids) or given up on."""
        self.attempts.written(outcomes)
        self.throughput.add(outcomes, written)
        retry_delays = [
            o.delay_us
            for o in outcomes
            if o.transition is Transition.RETRY and o.delay_us is not None
        ]
        if retry_delays:
            with self._cond:
                # Wake when the soonest retry written here falls due.
                due = time.monotonic() + min(retry_delays) / 1_000_000 + 0.005
                if self._retry_due is None or due < self._retry_due:
                    self._retry_due = due
                self._wake_locked()
        hooks.jobs_finished(
            [o.job_id for o in outcomes if o.announce and o.job_id in written], self.config.alias
        )
        if metrics.ENABLED and len(written) < len(outcomes):
            metrics.record_unrecorded(
                sum(
                    1
                    for o in outcomes
                    if o.job_id not in written and o.transition is not Transition.RELEASE
                )
            )
        for outcome in outcomes:
            if outcome.job_id not in written:
                logger.warning(
                    "Outcome of job %s (%s) not recorded: the job no longer holds this "
                    "worker's lease (it was reaped, and may have run again)",
                    outcome.job_id, outcome.transition.value,
                    extra={"job_id": str(outcome.job_id)},
                )  # fmt: skip

    def _cancels_requested(self, job_ids: set[uuid.UUID]) -> None:
        """Listener or maintenance: these jobs were cancelled; tell the attempts we hold."""
        for attempt in self.watchdog.request_cancel(job_ids):
            job = attempt.job
            logger.info(
                "Cancel requested for job %s type=%s attempt=%s: ctx.cancelled is now True; "
                "the handler has %ss to stop worker=%s",
                job.id, job.type, job.attempt, self.watchdog.grace, self.config.worker_id,
                extra={"job_id": str(job.id), "job_type": job.type,
                       "worker_id": self.config.worker_id},
            )  # fmt: skip

    def _stuck(self, attempt: Attempt) -> None:
        """Watchdog: a handler thread is still busy ``grace`` s past its deadline; recycle."""
        with self._cond:
            self._recycle = True
            self._wake_locked()

    def _drain_for_recycle(self) -> None:
        """Stop claiming; wait for the in-flight jobs but the timed-out ones (or a stop)."""
        logger.error(
            "Recycling worker=%s: a handler thread is stuck past its time limit; no new jobs, "
            "waiting for %s in-flight job(s), then exiting with code %s for a restart",
            self.config.worker_id, self.attempts.in_flight(), EXIT_RECYCLE,
            extra={"worker_id": self.config.worker_id},
        )  # fmt: skip
        while not self._stopping:
            if not self.attempts.in_flight():
                return
            self._sleep(0.1)

    def _leases_lost(self, lost: set[uuid.UUID]) -> None:
        """Heartbeat: these held jobs' leases could not be extended (see ``lose_leases``)."""
        for attempt in self.attempts.lose_leases(lost):
            job_id = attempt.job.id
            logger.warning(
                "Lease lost for job %s: it was reaped; this worker's outcome will not be "
                "recorded",
                job_id, extra={"job_id": str(job_id), "worker_id": self.config.worker_id},
            )  # fmt: skip

    # -- shutdown --------------------------------------------------------

    def _shutdown(self) -> None:
        c = self.config
        self._services.stop_through(self.scheduler)  # a stopping worker enqueues nothing new
        deadline = time.monotonic() + (c.grace_period if self._stopping else 0)
        # Claimed ahead and not started: given back now, never run.
        self._release(self.attempts.release_unstarted(), "not started yet")
        running = self.attempts.in_flight()
        if running and self._stopping:
            logger.info("Waiting up to %ss for %s in-flight job(s)", c.grace_period, running)
        # Timed-out attempts are recorded already; their threads may never return.
        while self.attempts.in_flight():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._sleep(min(left, 0.1))
        # No timeout after this point: what it would submit might not be written.
        self._services.stop_through(self.watchdog)
        with self._lock:
            leftover = self.attempts.release_all()
            # Every slot given back: a handler thread that returns later
            # finds its attempt released and counts nothing.
            for group in self._groups:
                group.running = 0
        self._release(leftover, "still running at the end of the grace period")
        if not self._services.stop_through(self.completer, timeout=15.0):
            logger.error("Some outcomes could not be recorded; the reaper will retry those jobs")
        with self._lock:
            for group in self._groups:
                group.stop_all()
        # After the release above, which cancelled the async handlers still running.
        self.event_loop.stop()
        self._services.stop_through(self.maintenance)  # and the listener before it
        self.presence.remove()
        metrics.set_worker_slots(0)
        connections[c.alias].close()
        logger.info(
            "Worker stopped worker=%s claimed=%s", c.worker_id, self.claimed,
            extra={"worker_id": c.worker_id},
        )  # fmt: skip

    def _release(self, attempts: list[Attempt], why: str) -> None:
        for attempt in attempts:
            job = attempt.job
            metrics.record_released(job)
            if attempt.cancel_requested is not None:
                # Cancelled: given back, it would only be cancelled (record_outcomes).
                logger.warning(
                    "Job cancelled id=%s type=%s: %s", job.id, job.type, why,
                    extra={"job_id": str(job.id), "job_type": job.type},
                )  # fmt: skip
                failure = cancelled_failure(why)
                self.completer.submit(cancel(job, self.config.worker_id, failure))
                continue
            logger.warning(
                "Releasing job %s type=%s: %s",
                job.id, job.type, why, extra={"job_id": str(job.id), "job_type": job.type},
            )  # fmt: skip
            self.completer.submit(release(job.id, job.lease_token))

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

    @property
    def notifications_arriving(self) -> bool | None:
        """Whether the last probe of the LISTEN connection arrived (None: not known yet,
        or the worker does not listen)."""
        if self.listener is None or self.listener.probe is None:
            return None
        return self.listener.probe.arriving

    def health_notes(self) -> list[str]:
        """For ``/healthz``: lines that qualify its answer (not a failure: the worker polls)."""
        if self.notifications_arriving is False:
            return [
                f"notifications: not arriving (polling every {self.config.poll_interval:g}s; "
                "see DURABLE_JOBS['LISTEN_DATABASE'])"
            ]
        return []

    def _force_exit(self) -> None:
        """Second signal: record what is known and give back what runs (best effort, 2 s); exit 1.

        Outcomes still waiting for the completer are written too, so jobs
        that finished are not run again by the reaper.
        """
        # Not the timed-out ones: their failed attempt is among the unwritten.
        running = self.attempts.handler_owned()
        outcomes = self.completer.unwritten() + [
            release(a.job.id, a.job.lease_token) for a in running
        ]
        if outcomes:
            try:
                db.record_outcomes_directly(
                    self.config.alias,
                    outcomes,
                    history_limit=self._history_limit,
                    timeout_seconds=2.0,
                )
            except Exception as exc:  # exiting anyway; the reaper will recover them
                logger.error(
                    "Could not record %s outcome(s) at forced exit: %s", len(outcomes), exc
                )
        logging.shutdown()
        os._exit(EXIT_FORCED)
