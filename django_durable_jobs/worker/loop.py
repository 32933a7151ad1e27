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
from django.utils import timezone

from .. import db, flow, hooks, metrics
from ..backoff import RetryPolicy
from ..conf import jobs_settings
from ..db.records import ClaimedJob, Outcome, Transition
from ..durations import SecondsError, seconds
from .attempts import Attempt, AttemptTable, Clock, State
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
#: How often a queue held back by one of its limits is logged, at most.
THROTTLE_LOG_EVERY_SECONDS = 60.0
#: When another worker's claim holds a limited queue's lock, look again this soon.
LIMITED_BUSY_RETRY_SECONDS = 0.01
#: How often a short claim of keyed jobs asks whether a busy key held jobs back.
KEYS_HELD_BACK_EVERY_SECONDS = 1.0
#: While keyed jobs run, how soon after a plain claim came back short the next
#: one may look again without a notification saying jobs were enqueued: at
#: least this, and 20 times as long as that claim took (a claim reading past
#: a long keyed backlog then costs the loop at most a twentieth of its time),
#: never more than the poll interval.
PLAIN_RECHECK_SECONDS = 0.1
PLAIN_RECHECK_FACTOR = 20


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
        self._forced = False
        # A thread ignored its time limit: stop claiming, finish, exit 3.
        self._recycle = False
        self._groups = groups_for(
            config.queues,
            config.slots,
            config.slots_per_queue,
            config.scale_down_after,
            self._handler_thread,
        )
        # Queues with cluster-wide limits that this worker serves (flow.py);
        # their claims take free slots only, never ahead.
        self._limits = {
            queue: limits
            for queue, limits in flow.queue_limits().items()
            if config.queues is None or queue in config.queues
        }
        self._throttled_until: dict[str, float] = {}
        # Types whose jobs run at most concurrency_limit per concurrency key:
        # @job's, and those the integrations declare (a Django task's).
        self._key_limits = hooks.concurrency_limits()
        self._keys_checked_at = 0.0
        # Until then (monotonic), claims leave out the jobs without a key: the
        # last such claim came back short (see _claim).
        self._plain_short_until = 0.0
        # The last claim left them out: it proves nothing about them.
        self._plain_skipped = False
        self._idle_limited: set[str] = set()
        # The paused queues at the current claim (read by _claim).
        self._paused_now: frozenset[str] = frozenset()
        self._throttle_logged: dict[tuple[str, str], float] = {}
        # Per-queue slots: which group a job's queue belongs to.
        self._group_by_queue: dict[str, SlotGroup] | None = (
            {group.label: group for group in self._groups} if config.slots_per_queue else None
        )
        self.claimed = 0
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
                if due:
                    # Limited queues found empty are looked at again.
                    self._idle_limited.clear()
                if notified:
                    # Jobs were enqueued (or given back): maybe without a key.
                    self._plain_short_until = 0.0
                # Each group with room (free slots, and its claim-ahead
                # buffer: pool.py) asks for that many jobs: at a poll or a
                # notification, or at once if its last claim was full.
                wanting = [group for group in self._groups if group.wants_claim()]
                asks = [(group, group.room()) for group in wanting if due or group.more_waiting]
                shrink_at = min(
                    (t for g in self._groups if (t := g.next_shrink_at()) is not None),
                    default=None,
                )
            if asks:
                if self.completer.backlog() >= max_backlog:
                    self._sleep(0.01)
                    continue
                if self.completer.failing:
                    # Outcomes cannot be written: claim nothing more until they can.
                    self._sleep(0.05)
                    continue
                # Whether jobs were in flight when this claim began: their
                # ends may free a slot a limit or a busy key held.
                ran_before = self.attempts.busy()
                # Or whose outcomes were not written yet: writing one may make
                # waiting jobs (depends_on) runnable after this claim looked,
                # so a burst claims once more before it decides to exit.
                unwritten_before = c.burst and (ran_before or self.attempts.outcomes_unwritten())
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
                        # A limited queue held back (or claimed by another
                        # worker at that moment) has runnable jobs too.
                        busy = (
                            self.attempts.busy()
                            or unwritten_before
                            or any(g.more_waiting for g in self._groups)
                            or bool(self._throttled_until)
                            # A claim that ran beside jobs of a limited queue
                            # or a busy key may have found nothing it may take
                            # yet: one more claim once nothing runs decides.
                            or (ran_before and bool(self._limits or self._key_limits))
                            or self._plain_skipped
                        )
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
            if self.paused.lifts_at is not None:
                # Claim when a pause ends by itself: no notification says so.
                next_poll = min(next_poll, self.paused.lifts_at)
            timeout = max(0.0, next_poll - now) if wanting else None
            if shrink_at is not None:
                # Wake to stop unused slots even when nothing else happens.
                until_shrink = max(0.0, shrink_at - now)
                timeout = until_shrink if timeout is None else min(timeout, until_shrink)
            self._sleep(timeout)

    def _claim(self, asks: list[tuple[SlotGroup, int]]) -> list[ClaimedJob]:
        """Claim up to each group's room; hand the jobs to the groups.

        Queues with cluster-wide limits are claimed first, each on its own
        (``db.claim_limited``); then the other queues in one statement; then
        the jobs whose type limits each concurrency key (``db.claim_keyed``).
        """
        c = self.config
        # Paused queues are left out of every claim (paused.py).
        self._paused_now = self.paused.current()
        jobs = self._claim_limited(asks)
        keyed = self._key_limits
        # A plain claim reads the claim index in order, past every runnable
        # job of a keyed type: with a keyed backlog ahead, each one reads all
        # of it. One that came back short found every job without a key
        # there was, so, while keyed jobs keep the loop busy, the next looks
        # again after a notification or PLAIN_RECHECK_SECONDS.
        now = time.monotonic()
        self._plain_skipped = bool(keyed) and now < self._plain_short_until
        if self._plain_skipped:
            pass
        elif self._group_by_queue is not None:
            plain = [(g, room) for g, room in asks if g.label not in self._limits]
            if plain:
                unkeyed = db.claim_per_queue(
                    c.alias,
                    worker_id=c.worker_id,
                    lease_seconds=c.lease_seconds,
                    limits=[(group.label, room) for group, room in plain],
                    keyed_types=keyed,
                    excluded=self._paused_now,
                )
                if keyed and not unkeyed:  # every queue short; some may be short only
                    self._plain_short_until = self._plain_recheck_at(now)
                jobs += unkeyed
        else:
            ((group, room),) = asks
            only_limited = group.queues is not None and group.queues <= self._limits.keys()
            want = room - len(jobs)
            if want > 0 and not only_limited:
                unkeyed = db.claim(
                    c.alias,
                    worker_id=c.worker_id,
                    lease_seconds=c.lease_seconds,
                    limit=want,
                    queues=group.queues,
                    excluded=self._limits.keys() | self._paused_now,
                    keyed_types=keyed,
                )
                if keyed and len(unkeyed) < want:
                    self._plain_short_until = self._plain_recheck_at(now)
                jobs += unkeyed
        if keyed:
            jobs += self._claim_keyed(asks, jobs)
        now = time.monotonic()
        with self._lock:
            got: dict[str, int] = {}
            for job in jobs:
                # The one place a job starts running, as far as the worker counts.
                group = self._group_of(job)
                self.attempts.claimed(job, group)
                got[group.label] = got.get(group.label, 0) + 1
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

    def _claim_limited(self, asks: list[tuple[SlotGroup, int]]) -> list[ClaimedJob]:
        """Claim the limited queues these groups serve, each into the group's free slots."""
        if not self._limits:
            return []
        c = self.config
        jobs: list[ClaimedJob] = []
        now = time.monotonic()
        for group, room in asks:
            for queue, limits in self._limits.items():
                if group.queues is not None and queue not in group.queues:
                    continue
                # Limited queues claim ahead too (short jobs only, pool.py): a
                # buffered job is running in the table, so it counts against
                # the concurrency limit, and its start is counted at its claim.
                free = room - sum(1 for j in jobs if self._group_of(j) is group)
                if (
                    queue in self._paused_now
                    or queue in self._idle_limited
                    or self._throttled_until.get(queue, 0.0) > now
                ):
                    continue
                if free <= 0:
                    # No slot for it now: look again at the next claim (and a
                    # burst worker does not take the queue for empty).
                    self._throttled_until.setdefault(queue, now)
                    continue
                got = db.claim_limited(
                    c.alias,
                    worker_id=c.worker_id,
                    lease_seconds=c.lease_seconds,
                    queue=queue,
                    limits=limits,
                    want=free,
                    key_limits=self._key_limits,
                )
                jobs += got.jobs
                if got.throttled is not None:
                    self._held_back(queue, got.throttled, got.retry_after, now)
                elif got.busy:
                    # Another worker claims this queue right now: look again soon.
                    self._throttled_until[queue] = now + LIMITED_BUSY_RETRY_SECONDS
                    self._retry_soon(now + LIMITED_BUSY_RETRY_SECONDS)
                elif len(got.jobs) < free:
                    # Nothing more runnable: not again before a poll or a notification.
                    self._throttled_until.pop(queue, None)
                    self._idle_limited.add(queue)
                else:
                    # It filled the free slots: look again as soon as one frees.
                    self._throttled_until[queue] = 0.0
        return jobs

    def _plain_recheck_at(self, began: float) -> float:
        took = time.monotonic() - began
        wait = max(PLAIN_RECHECK_SECONDS, PLAIN_RECHECK_FACTOR * took)
        return began + took + min(wait, self.config.poll_interval)

    def _claim_keyed(
        self, asks: list[tuple[SlotGroup, int]], claimed: list[ClaimedJob]
    ) -> list[ClaimedJob]:
        """Claim jobs with a concurrency key into what room the other claims left."""
        c = self.config
        jobs: list[ClaimedJob] = []
        short = False
        for group, room in asks:
            if group.label in self._limits:
                continue  # claim_limited claimed that queue's keyed jobs too
            taken = sum(1 for j in (*claimed, *jobs) if self._group_of(j) is group)
            want = room - taken
            if want <= 0:
                continue
            got = db.claim_keyed(
                c.alias,
                worker_id=c.worker_id,
                lease_seconds=c.lease_seconds,
                limit=want,
                key_limits=self._key_limits,
                queues=group.queues,
                excluded=self._limits.keys() | self._paused_now,
            )
            jobs += got
            short = short or len(got) < want
        now = time.monotonic()
        if short and now >= self._keys_checked_at + KEYS_HELD_BACK_EVERY_SECONDS:
            # Were jobs held back by a busy key? Asked at most once a second.
            self._keys_checked_at = now
            for queue in db.keys_held_back(c.alias, self._key_limits, c.queues):
                self._held_back(queue, "key", None, now, retry=False)
        return jobs

    def _retry_soon(self, due: float) -> None:
        with self._cond:
            if self._retry_due is None or due < self._retry_due:
                self._retry_due = due

    def _held_back(
        self,
        queue: str,
        reason: str,
        retry_after: float | None,
        now: float,
        retry: bool = True,
    ) -> None:
        """A limit held jobs of ``queue`` back: count it, log it once a minute, look again later."""
        metrics.record_throttled(queue, reason)
        if retry:
            # The rate window says when it has room; a concurrency slot frees
            # when some worker's job ends, which this worker learns by looking.
            delay = retry_after if retry_after is not None else min(self.config.poll_interval, 0.25)
            delay = max(0.005, delay + 0.005)
            self._throttled_until[queue] = now + delay
            self._retry_soon(now + delay)
        last = self._throttle_logged.get((queue, reason))
        if last is None or now - last >= THROTTLE_LOG_EVERY_SECONDS:
            self._throttle_logged[(queue, reason)] = now
            logger.info(
                "Queue %s held back by its %s limit (%s): runnable jobs wait "
                "(logged once a minute)",
                queue, reason.replace("_", " "),
                self._limits[queue].as_dict()[reason] if queue in self._limits else "per key",
                extra={"worker_id": self.config.worker_id, "queue": queue},
            )  # fmt: skip

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

    def _idle_sleep(self) -> float:
        """Until the next poll: the poll interval, or sooner if a delayed job is due
        sooner, or a pause lifts sooner."""
        interval = self.config.poll_interval
        lifts = self.paused.next_change_in(time.monotonic())
        if lifts is not None:
            interval = min(interval, lifts)
        try:
            due = db.next_available_at(self.config.alias, self.config.queues, self.paused.names)
        except DatabaseError:
            return interval
        if due is None:
            return interval
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
            if attempt is not None and attempt.job.queue in self._throttled_until:
                self._throttled_until[attempt.job.queue] = 0.0  # look again now
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
        if self.scheduler is not None:
            self.scheduler.stop()  # first: a stopping worker enqueues nothing new
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
        self.watchdog.stop()
        with self._lock:
            leftover = self.attempts.release_all()
            # Every slot given back: a handler thread that returns later
            # finds its attempt released and counts nothing.
            for group in self._groups:
                group.running = 0
        self._release(leftover, "still running at the end of the grace period")
        if not self.completer.stop(timeout=15.0):
            logger.error("Some outcomes could not be recorded; the reaper will retry those jobs")
        with self._lock:
            for group in self._groups:
                group.stop_all()
        # After the release above, which cancelled the async handlers still running.
        self.event_loop.stop()
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
