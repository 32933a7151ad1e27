"""The claim planner: what a worker claims next, and the claim itself.

One object, ``ClaimPlanner``, decides for the worker's loop how many jobs
to ask for (each slot group's room: its free slots and its claim-ahead
buffer, ``pool.py``), from which queues and slot groups, and what the
cluster-wide limits (``flow.py``), the concurrency keys and the pauses
(``paused.py``) allow; then it runs the claims through the gateway
(``db/``). How many jobs of a limited queue may start is ``flow.room()``,
applied by ``db.claim_limited`` under the queue's lock.

The order of one claim round:

1. the queues with cluster-wide limits, each on its own
   (``db.claim_limited``), into the free room of the group serving it;
2. the other queues, in one statement (``db.claim``, or
   ``db.claim_per_queue`` with slots per queue), leaving out the jobs
   whose type limits its concurrency keys;
3. those keyed jobs (``db.claim_keyed``), into what room is left.

The planner remembers what each claim taught it (a limited queue held back
until its rate window has room, a limited queue found empty, a plain claim
that came back short while keyed jobs run), so that the loop neither spins
on work it may not take nor misses work it may. The ``Worker`` keeps the
rest: it hands the claimed jobs to the slot groups and counts them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from django.db import DatabaseError
from django.utils import timezone

from .. import db, flow, hooks, metrics
from ..db.records import ClaimedJob
from .config import WorkerConfig
from .paused import PausedQueues
from .pool import SlotGroup

logger = logging.getLogger("django_durable_jobs.worker")

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

#: What one group asks for: the group, and how many jobs it has room for.
Ask = tuple[SlotGroup, int]


class ClaimPlanner:
    """Decides what the worker claims next, and claims it (see the module docstring).

    Used by the worker's main thread; ``slot_freed`` is called by handler
    threads under the worker's lock.
    """

    def __init__(
        self,
        config: WorkerConfig,
        groups: Sequence[SlotGroup],
        paused: PausedQueues,
        retry_soon: Callable[[float], None],
    ) -> None:
        self._alias = config.alias
        self._worker_id = config.worker_id
        self._lease_seconds = config.lease_seconds
        self._poll_interval = config.poll_interval
        self._queues = queues = config.queues
        self._groups = groups
        # Per-queue slots: which group a job's queue belongs to.
        self._group_by_queue = {g.label: g for g in groups} if config.slots_per_queue else None
        self.paused = paused
        # Called with when (monotonic) the loop should look again, unasked.
        self._retry_soon = retry_soon
        # Queues with cluster-wide limits that this worker serves (flow.py).
        self.limits = {
            queue: limits
            for queue, limits in flow.queue_limits().items()
            if queues is None or queue in queues
        }
        # Types whose jobs run at most concurrency_limit per concurrency key:
        # @job's, and those the integrations declare (a Django task's).
        self.key_limits = hooks.concurrency_limits()
        # Limited queues not to claim before then (monotonic); 0.0: at the next claim.
        self._throttled_until: dict[str, float] = {}
        # Limited queues found empty: not looked at again before a poll or a notification.
        self._idle_limited: set[str] = set()
        self._keys_checked_at = 0.0
        # Until then (monotonic), claims leave out the jobs without a key: the
        # last such claim came back short (see claim()).
        self._plain_short_until = 0.0
        # The last claim left them out: it proves nothing about them.
        self._plain_skipped = False
        # The paused queues at the current claim.
        self._paused_now: frozenset[str] = frozenset()
        self._throttle_logged: dict[tuple[str, str], float] = {}

    # -- what to ask for ---------------------------------------------------

    def asks(self, *, due: bool, notified: bool) -> list[Ask]:
        """The groups that claim now, each with its room (the caller holds the worker's lock).

        Each group with room (free slots, and its claim-ahead buffer) asks
        for that many jobs: at a poll or a notification (``due``), or at
        once if its last claim was full.
        """
        if due:
            # Limited queues found empty are looked at again.
            self._idle_limited.clear()
        if notified:
            # Jobs were enqueued (or given back): maybe without a key.
            self._plain_short_until = 0.0
        return [(g, g.room()) for g in self._groups if g.wants_claim() and (due or g.more_waiting)]

    def group_of(self, job: ClaimedJob) -> SlotGroup:
        if self._group_by_queue is None:
            return self._groups[0]
        return self._group_by_queue[job.queue]

    def slot_freed(self, queue: str) -> bool:
        """A job of ``queue`` ended here: True when that may let a held limited queue claim."""
        if queue not in self._throttled_until:
            return False
        self._throttled_until[queue] = 0.0  # look again now
        return True

    def may_find_more(self, ran_before: bool) -> bool:
        """After an empty claim: may runnable jobs still be there that it could not take?

        A limited queue held back (or claimed by another worker at that
        moment) has runnable jobs; a claim that ran beside jobs of a limited
        queue or a busy key may have found nothing it may take yet (one more
        claim once nothing runs decides); a claim that left out the jobs
        without a key proves nothing about them.
        """
        return (
            bool(self._throttled_until)
            or (ran_before and bool(self.limits or self.key_limits))
            or self._plain_skipped
        )

    def idle_sleep(self) -> float:
        """Until the next poll: the poll interval, or sooner if a delayed job is due
        sooner, or a pause lifts sooner."""
        interval = self._poll_interval
        lifts = self.paused.next_change_in(time.monotonic())
        if lifts is not None:
            interval = min(interval, lifts)
        try:
            due = db.next_available_at(self._alias, self._queues, self.paused.names)
        except DatabaseError:
            return interval
        if due is None:
            return interval
        seconds = (due - timezone.now()).total_seconds()
        # A little after `due`, so the database's clock has passed it too.
        return min(interval, max(0.005, seconds + 0.005))

    # -- the claim ---------------------------------------------------------

    def claim(self, asks: list[Ask]) -> list[ClaimedJob]:
        """Claim up to each group's room: limited queues, then plain jobs, then keyed ones."""
        # Paused queues are left out of every claim (paused.py).
        self._paused_now = self.paused.current()
        jobs = self._claim_limited(asks)
        # A plain claim reads the claim index in order, past every runnable
        # job of a keyed type: with a keyed backlog ahead, each one reads all
        # of it. One that came back short found every job without a key
        # there was, so, while keyed jobs keep the loop busy, the next looks
        # again after a notification or PLAIN_RECHECK_SECONDS.
        now = time.monotonic()
        self._plain_skipped = bool(self.key_limits) and now < self._plain_short_until
        if not self._plain_skipped:
            jobs += self._claim_plain(asks, jobs, now)
        if self.key_limits:
            jobs += self._claim_keyed(asks, jobs)
        return jobs

    def _excluded(self) -> set[str]:
        return self.limits.keys() | self._paused_now

    def _claim_plain(
        self, asks: list[Ask], claimed: list[ClaimedJob], now: float
    ) -> list[ClaimedJob]:
        """The queues without limits, in one statement, leaving the keyed types' jobs out."""
        if self._group_by_queue is not None:
            plain = [(g.label, room) for g, room in asks if g.label not in self.limits]
            if not plain:
                return []
            jobs = db.claim_per_queue(
                self._alias,
                worker_id=self._worker_id,
                lease_seconds=self._lease_seconds,
                limits=plain,
                keyed_types=self.key_limits,
                excluded=self._paused_now,
            )
            short = not jobs  # every queue short; some may be short only
        else:
            ((group, room),) = asks
            want = room - len(claimed)
            if want <= 0 or (group.queues is not None and group.queues <= self.limits.keys()):
                return []
            jobs = db.claim(
                self._alias,
                worker_id=self._worker_id,
                lease_seconds=self._lease_seconds,
                limit=want,
                queues=group.queues,
                excluded=self._excluded(),
                keyed_types=self.key_limits,
            )
            short = len(jobs) < want
        if self.key_limits and short:
            self._plain_short_until = self._plain_recheck_at(now)
        return jobs

    def _plain_recheck_at(self, began: float) -> float:
        took = time.monotonic() - began
        wait = max(PLAIN_RECHECK_SECONDS, PLAIN_RECHECK_FACTOR * took)
        return began + took + min(wait, self._poll_interval)

    def _claim_limited(self, asks: list[Ask]) -> list[ClaimedJob]:
        """Claim the limited queues these groups serve, each into the group's free room."""
        jobs: list[ClaimedJob] = []
        if not self.limits:
            return jobs
        now = time.monotonic()
        for group, room in asks:
            for queue, limits in self.limits.items():
                if group.queues is not None and queue not in group.queues:
                    continue
                # Limited queues claim ahead too (short jobs only, pool.py): a
                # buffered job is running in the table, so it counts against
                # the concurrency limit, and its start is counted at its claim.
                free = room - sum(1 for j in jobs if self.group_of(j) is group)
                if self._skips(queue, free, now):
                    continue
                got = db.claim_limited(
                    self._alias,
                    worker_id=self._worker_id,
                    lease_seconds=self._lease_seconds,
                    queue=queue,
                    limits=limits,
                    want=free,
                    key_limits=self.key_limits,
                )
                jobs += got.jobs
                self._learn(queue, got, free, now)
        return jobs

    def _skips(self, queue: str, free: int, now: float) -> bool:
        """Whether this round leaves the limited ``queue`` alone."""
        if (
            queue in self._paused_now
            or queue in self._idle_limited
            or self._throttled_until.get(queue, 0.0) > now
        ):
            return True
        if free <= 0:
            # No slot for it now: look again at the next claim (and a burst
            # worker does not take the queue for empty).
            self._throttled_until.setdefault(queue, now)
            return True
        return False

    def _learn(self, queue: str, got: db.LimitedClaim, free: int, now: float) -> None:
        """What a limited queue's claim says about when to claim it again."""
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

    def _claim_keyed(self, asks: list[Ask], claimed: list[ClaimedJob]) -> list[ClaimedJob]:
        """Claim jobs with a concurrency key into what room the other claims left."""
        jobs: list[ClaimedJob] = []
        short = False
        for group, room in asks:
            if group.label in self.limits:
                continue  # claim_limited claimed that queue's keyed jobs too
            want = room - sum(1 for j in (*claimed, *jobs) if self.group_of(j) is group)
            if want <= 0:
                continue
            got = db.claim_keyed(
                self._alias,
                worker_id=self._worker_id,
                lease_seconds=self._lease_seconds,
                limit=want,
                key_limits=self.key_limits,
                queues=group.queues,
                excluded=self._excluded(),
            )
            jobs += got
            short = short or len(got) < want
        now = time.monotonic()
        if short and now >= self._keys_checked_at + KEYS_HELD_BACK_EVERY_SECONDS:
            # Were jobs held back by a busy key? Asked at most once a second.
            self._keys_checked_at = now
            for queue in db.keys_held_back(self._alias, self.key_limits, self._queues):
                self._held_back(queue, "key", None, now, retry=False)
        return jobs

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
            delay = retry_after if retry_after is not None else min(self._poll_interval, 0.25)
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
                self.limits[queue].as_dict()[reason] if queue in self.limits else "per key",
                extra={"worker_id": self._worker_id, "queue": queue},
            )  # fmt: skip
