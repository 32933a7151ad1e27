"""The worker: its lifecycle (start, the loop, the hand-off to the slots, shutdown).

The loop claims into free slots (what to claim is the planner's,
``claiming.py``), hands the jobs to the slot groups' handler threads
(``pool.py``), and sleeps until a notification, a freed slot or the next
poll. Around it run the background services (``services.py``), each with a
connection of its own where it needs one: the completer (outcomes, in
batches), the maintenance (heartbeats, the reaper), the watchdog (time
limits), the listener (LISTEN: enqueues, pauses, cancels; ``probe.py``)
and the scheduler (periodic jobs); ``async def`` handlers run on one event
loop (``event_loop.py``). Every attempt's state lives in one
``AttemptTable`` (``attempts.py``) under one lock that this loop's
condition and the watchdog's share.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid

from django.db import DatabaseError, connections

from .. import metrics
from ..backoff import RetryPolicy
from ..conf import jobs_settings
from ..db.records import ClaimedJob, Outcome
from ..services import ServiceSet
from . import handoff, health, pool, stopping
from .attempts import Attempt, AttemptTable, Clock
from .claiming import Ask, ClaimPlanner
from .completer import Completer
from .config import WorkerConfig, default_worker_id
from .event_loop import EventLoop
from .listener import Listener
from .maintenance import Maintenance
from .paused import PausedQueues
from .pool import groups_for, total_size
from .presence import Presence
from .scheduler import Scheduler
from .stopping import EXIT_FORCED, EXIT_OK, EXIT_RECYCLE
from .throughput import OutcomeCounts
from .wakefulness import Wakefulness
from .wakeups import WakeTimes
from .watchdog import Watchdog

__all__ = ["EXIT_FORCED", "EXIT_OK", "EXIT_RECYCLE", "Worker", "WorkerConfig", "default_worker_id"]

logger = logging.getLogger("django_durable_jobs.worker")

# Stop claiming while this many outcomes wait to be written: a database
# that cannot keep up must slow the worker down, not fill its memory.
MAX_BACKLOG_PER_SLOT = 50
CLAIM_RETRY_CAP_SECONDS = 30.0


class Worker(health.WorkerHealth):
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
        self._wakes = WakeTimes()  # when jobs it suspended or retried fall due
        self._stopping = False
        # A stop by SIGTERM/SIGINT; one by --reload (which a signal does not force).
        self._signalled = False
        self._reload_of: str | None = None
        # A thread ignored its time limit: stop claiming, finish, exit 3.
        self._recycle = False
        # Each slot's thread runs handoff.SlotRunner (made below, started by run()).
        self._groups = groups_for(
            config.queues,
            config.slots,
            config.slots_per_queue,
            config.scale_down_after,
            lambda group: self._runner(group),
        )
        self.claimed = 0
        # The background threads, started in order and stopped in reverse.
        self._services = ServiceSet()
        # For /healthz: the main loop runs, and its last claim did not fail.
        self.loop_alive = False
        self.claim_failing = False
        self.presence = Presence.for_worker(config, lambda: self.slots, self._busy_slots)
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
            reap_at_start=config.burst,
        )
        # The reaper's count the burst's last look saw (_reaped_more).
        self._reaped_seen = 0
        # The claim leaves these out; read before a claim when stale.
        self.paused = PausedQueues(
            config.alias, config.queues, config.poll_interval, worker_id=config.worker_id
        )
        # What to claim next, and the claim (claiming.py).
        self.planner = ClaimPlanner(config, self._groups, self.paused, self._wakes.add)
        self._max_backlog = max(1_000, MAX_BACKLOG_PER_SLOT * config.max_slots)
        # When the loop claims next at the latest, unasked (monotonic).
        self._next_poll = 0.0
        self._claim_failures = 0
        # Whether enqueues must NOTIFY this worker (wakefulness.py): only
        # with a LISTEN connection, and not for a burst.
        self.wakefulness = Wakefulness(
            config.alias,
            config.worker_id,
            config.queues,
            poll_interval=config.poll_interval,
            forget_after_seconds=max(60.0, 2 * config.lease_seconds),
            enabled=config.listen and not config.burst,
        )
        self.listener = (
            Listener.for_worker(
                config.alias,
                config.listen_alias,
                config.queues,
                config.poll_interval,
                self._notify,
                on_cancel=lambda job_id: self._cancels_requested({job_id}),
                queue_state=self._queue_state_changed,
                on_connected=self.wakefulness.listening,
            )
            if config.listen
            else None
        )
        self._runner = handoff.SlotRunner(
            worker_id=config.worker_id,
            policy=self.policy,
            watchdog=self.watchdog,
            event_loop=self.event_loop,
            attempts=self.attempts,
            completer=self.completer,
            stop_worker=self.stop,
            slot_freed=self._slot_freed,
            lease_seconds=config.lease_seconds,
            using=config.alias,
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
        logger.info("Worker starting %s", c.describe(), extra={"worker_id": c.worker_id})
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

    def stop(self, reload_of: str | None = None) -> None:
        """Ask for a graceful stop: a first SIGTERM/SIGINT, or ``--reload`` (``reload_of``
        changed; a signal during that stop is still the first press, not a forced exit)."""
        with self._cond:
            self._reload_of = self._reload_of or reload_of
            self._stopping = True
            self._wake_locked()

    @property
    def reloading(self) -> bool:
        """Whether the worker stopped for a reload (and no signal asked it to stop)."""
        return self._reload_of is not None and not self._signalled

    def _stop_by_signal(self) -> None:
        self._signalled = True
        self.stop()

    def _install_signal_handlers(self) -> None:
        stopping.install_signal_handlers(
            # A stop of a reload's is not a first signal.
            stopping=lambda: self._signalled or (self._stopping and self._reload_of is None),
            stop=self._stop_by_signal,
            force_exit=self._force_exit,
            grace_period=self.config.grace_period,
        )

    def _wake_locked(self) -> None:
        self._woken = True
        self._cond.notify_all()

    def _sleep(self, timeout: float | None) -> None:
        """Until woken (a free slot, a notification, a stop) or ``timeout``."""
        with self._cond:
            if not self._woken:
                self._cond.wait(timeout)
            self._woken = False

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
            pool.shrink_quiet(self._groups, now, self.config.worker_id)
            # A job known due now counts as a notification (so the plain claim runs).
            notified, self._notified = self._wakes.fire(now) | self._notified, False
            due = notified or now >= self._next_poll
            # An awake worker's poll stands for the NOTIFYs enqueues no longer send.
            notified = notified or (due and self.wakefulness.polling)
            asks = self.planner.asks(due=due, notified=notified)
            if asks:
                return asks, None
            wanting = any(group.wants_claim() for group in self._groups)
            shrink_at = pool.next_shrink_at(self._groups)
            soonest = self._wakes.soonest()
            if soonest is not None:
                self._next_poll = min(self._next_poll, soonest)
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
        # Jobs in flight when this claim began (their ends may free a slot a limit or a
        # busy key held), or whose outcomes were not written yet (writing one may make
        # waiting jobs runnable after this claim looked): a burst claims once more.
        ran_before = self.attempts.busy()
        unwritten_before = self.config.burst and (ran_before or self.attempts.outcomes_unwritten())
        try:
            if self.claim_failing:  # its jobs may be leased to this worker unseen
                handoff.give_back_orphans(self.config, self.attempts, self.completer)
            self.wakefulness.before_claim()
            jobs = self._claim(asks)
        except DatabaseError as exc:
            self._claim_failed(exc)
            return False
        self._claim_failures = 0
        self.claim_failing = False
        try:
            self.wakefulness.after_claim(len(jobs), any(group.more_waiting for group, _ in asks))
        except DatabaseError as exc:
            # The row keeps its last mark, and the worker the mode that mark promises.
            logger.warning("Could not mark this worker awake or sleeping (%s)", exc)
        if self.wakefulness.polling:
            self._next_poll = time.monotonic() + self.wakefulness.poll_seconds()
        if jobs:
            return False
        if self.config.burst:
            if not self._may_find_more(ran_before, unwritten_before):
                if self._reaped_more():
                    self._next_poll = time.monotonic()
                    return False
                logger.info("No runnable job left: exiting (--burst)")
                return True
            # Look again shortly: the running jobs may be all there is.
            self._next_poll = time.monotonic() + min(self.config.poll_interval, 0.05)
        elif now >= self._next_poll:
            # Only at poll time: an empty claim after a notification (another
            # worker was faster) need not cost a query.
            self._next_poll = time.monotonic() + self.planner.idle_sleep()
        return False

    def _reaped_more(self) -> bool:
        """Before a burst exits: whether its reaper took jobs back since the last look.

        A dead worker's expired leases come back through the reaper, which a
        burst runs at its start (``reap_at_start``); jobs it took back may
        be runnable now, so the burst claims again rather than exit first.
        """
        self.maintenance.first_reap.wait(self.config.lease_seconds)
        reaped = self.maintenance.reaped
        more = reaped > self._reaped_seen
        self._reaped_seen = reaped
        return more

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
            pool.grew(grew, size, self.config.worker_id)
        if jobs:
            if metrics.ENABLED:
                metrics.record_claimed(jobs)
            for job in jobs:
                group_of(job).jobs.put(job)
            self.claimed += len(jobs)
        return jobs

    def _busy_slots(self) -> int:
        with self._lock:
            return pool.busy_slots(self._groups)

    @property
    def slots(self) -> int:
        """Handler threads running now (not counting ones told to stop), all groups together."""
        with self._lock:
            return total_size(self._groups)

    def slots_by_group(self) -> dict[str, int]:
        """``{"all": 8}``, or ``{queue: slots}`` with slots per queue."""
        with self._lock:
            return {group.label: group.size for group in self._groups}

    # -- callbacks from the other threads --------------------------------

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
            if attempt is not None and attempt.wakes_at is not None:
                # A job this worker suspended falls due then (a sleep, a
                # wait's deadline): claim at that time, not a poll later.
                self._wakes.add_at(attempt.wakes_at)
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

    def _notify(self) -> None:
        with self._cond:
            self.wakefulness.heard()
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
        retry_in = handoff.soonest_retry_seconds(outcomes)
        if retry_in is not None:
            with self._cond:
                # Wake when the soonest retry written here falls due.
                self._wakes.add_in(retry_in)
                self._wake_locked()
        handoff.report_written(outcomes, written, self.config.alias)

    def _cancels_requested(self, job_ids: set[uuid.UUID]) -> None:
        """Listener or maintenance: these jobs were cancelled; tell the attempts we hold."""
        told = self.watchdog.request_cancel(job_ids)
        handoff.log_cancels(told, self.watchdog.grace, self.config.worker_id)

    def _stuck(self, attempt: Attempt) -> None:
        """Watchdog: a handler thread is still busy ``grace`` s past its deadline; recycle."""
        with self._cond:
            self._recycle = True
            self._wake_locked()

    def _drain_for_recycle(self) -> None:
        """Stop claiming; wait for the in-flight jobs but the timed-out ones (or a stop)."""
        stopping.log_recycle(self.config.worker_id, self.attempts.in_flight())
        while not self._stopping:
            if not self.attempts.in_flight():
                return
            self._sleep(0.1)

    def _leases_lost(self, lost: set[uuid.UUID]) -> None:
        """Heartbeat: these held jobs' leases could not be extended (see ``lose_leases``)."""
        handoff.log_leases_lost(self.attempts.lose_leases(lost), self.config.worker_id)

    # -- shutdown --------------------------------------------------------

    def _shutdown(self) -> None:
        c = self.config
        self._services.stop_through(self.scheduler)  # a stopping worker enqueues nothing new
        deadline = time.monotonic() + (c.grace_period if self._stopping else 0)
        # Claimed ahead and not started: given back now, never run.
        release = functools.partial(handoff.release_attempts, self.completer, c.worker_id)
        release(self.attempts.release_unstarted(), "not started yet")
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
        release(leftover, "still running at the end of the grace period")
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

    def _force_exit(self) -> None:
        """Second signal: record what is known, give back what runs, exit 1 (``stopping.py``)."""
        stopping.force_exit(self.config.alias, self.attempts, self.completer, self._history_limit)
