"""Heartbeats and the reaper, on a thread (and connection) of their own.

Heartbeat: every ``lease / 3`` the worker pushes back the lease of every
job it still holds (the attempt table says which: not past the job's time
limit, so an attempt past its deadline whose timeout could not be recorded
lets its lease run out, and the reaper takes it back: the reaper and the
time limit agree). Reaper: every worker periodically returns jobs whose
lease expired (their worker died or hung) to ``pending`` with backoff, or
to ``dead`` when out of attempts, by the same rule and backoff as any
failed attempt (``outcomes.after_failure``); an advisory lock in the
statement lets one worker reap at a time. Cancel
requests: NOTIFY tells the worker at once (``listener.py``); as the
fallback, while the worker holds jobs not yet told of a cancel, this thread
asks the database every ``CANCEL_POLL_SECONDS`` which of them have one (a
read by primary key, no write). Pruning:
when ``RETENTION`` is set, about once a minute one worker (another advisory
lock) deletes finished jobs past their retention, a few small batches per
round so that it never hogs the database. Throughput: with each heartbeat
the worker adds the outcomes it recorded since the last one to the
per-minute counts of the admin's Queues chart (``throughput.py``, one
statement), and about once a minute deletes the counts older than
``QUEUE_STATS_KEEP`` (one small statement, whatever ``RETENTION`` says).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Mapping
from datetime import timedelta

from django.db import DatabaseError, connections

from .. import db, hooks, metrics, pruning, signals
from ..backoff import RetryPolicy
from ..conf import jobs_settings
from ..db import partitions
from ..db.records import ExpiredLease, Outcome, Transition
from ..durations import parse_duration
from ..services import Service
from . import other_databases, outcomes
from .throughput import QUEUE_STATS_KEEP, OutcomeCounts

logger = logging.getLogger("django_durable_jobs.worker")

REAP_BATCH = 1_000
REAPER_LOCK_KEY = zlib.crc32(b"django_durable_jobs.reaper")
PRUNER_LOCK_KEY = pruning.PRUNER_LOCK_KEY
# Retention: a round deletes at most PRUNE_BATCH * PRUNE_MAX_BATCHES rows per
# period, one short transaction per batch; a backlog drains over a few rounds.
PRUNE_INTERVAL = 60.0  # seconds
PRUNE_BATCH = 1_000
PRUNE_MAX_BATCHES = 10
# The history partitions (db/partitions.py): created ahead by one worker at a
# time (an advisory lock), checked at start and about once a minute (a read
# of the catalog when there is nothing to create).
PARTITIONS_INTERVAL = 60.0  # seconds
PARTITIONS_LOCK_KEY = zlib.crc32(b"django_durable_jobs.partitions")
# A cancel request reaches the handler within about a second even when its
# notification is lost (the LISTEN connection down, a pooler in the way).
CANCEL_POLL_SECONDS = 1.0


def reaped(lease: ExpiredLease, policy: RetryPolicy) -> Outcome:
    """The outcome of an attempt whose lease expired: a failed attempt, by the usual rule.

    Retried with the policy's backoff, or dead when it was the last one,
    exactly as if its handler had raised. The error names the lost worker.
    A job whose cancel was requested ends ``cancelled`` instead: never run again.
    """
    if lease.cancel_requested:
        failure = outcomes.cancelled_failure(
            f"its worker {lease.lease_holder} stopped before the attempt ended: the lease "
            f"expired at {lease.lease_expires_at}"
        )
        return outcomes.cancel(lease, lease.lease_holder, failure)
    failure = outcomes.Failure(
        f"Abandoned: the lease of worker {lease.lease_holder} expired",
        "django_durable_jobs.LeaseExpired",
        "",
    )
    outcome = outcomes.after_failure(lease, lease.lease_holder, policy, failure)
    return outcome._replace(
        last_error=(
            f"Abandoned: the lease of worker {lease.lease_holder} expired at "
            f"{lease.lease_expires_at} (the worker died, hung or lost its database connection)."
        ),
        announce=outcome.transition is Transition.DEAD,
    )


_STATUS_AFTER_REAP = {Transition.DEAD: "dead", Transition.CANCEL: "cancelled"}


def _spread(interval: float, low: float, high: float) -> float:
    """``interval`` times a random factor from ``low`` to ``high``.

    Jitter, so that workers started together do not reap and prune in step:
    nothing depends on it being unpredictable, so ``random`` is the right
    generator (ruff's S311 is about secrets).
    """
    return interval * random.uniform(low, high)  # noqa: S311 (jitter, not a secret)


class Maintenance(Service):
    """The heartbeat, the reaper and the pruner of one worker.

    ``held()`` gives the leases to extend (``{job id: lease token}``);
    ``on_lost(job ids)`` hears of held jobs whose lease could not be
    extended. ``untold()`` gives the held jobs whose handler was not yet
    told of a cancel (``{job id: lease token}``), and ``on_cancel(job ids)``
    hears of those that have one. ``clock`` is the monotonic clock (tests
    pass their own).
    """

    def __init__(
        self,
        alias: str,
        worker_id: str,
        lease_seconds: float,
        held: Callable[[], Mapping[uuid.UUID, uuid.UUID]],
        on_lost: Callable[[set[uuid.UUID]], None],
        policy: RetryPolicy,
        history_limit: int,
        on_heartbeat: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        untold: Callable[[], Mapping[uuid.UUID, uuid.UUID]] | None = None,
        on_cancel: Callable[[set[uuid.UUID]], None] | None = None,
        counts: OutcomeCounts | None = None,
        reap_at_start: bool = False,
    ) -> None:
        self._alias = alias
        # A burst worker reaps at once, and looks for runnable jobs again
        # before it exits if that took back any (loop.py): its run may be
        # shorter than the jittered wait before a first reap.
        self._reap_at_start = reap_at_start
        #: Set once the first reap has been tried (done, or failed).
        self.first_reap = threading.Event()
        #: The jobs this worker's reaper has taken back so far.
        self.reaped = 0
        #: The worker's per-minute outcome counts, added to the table each heartbeat.
        self.counts = counts
        self._untold = untold
        self._on_cancel = on_cancel
        self.cancel_poll_interval = CANCEL_POLL_SECONDS
        # Each heartbeat also records the worker as alive (workers table).
        self._on_heartbeat = on_heartbeat
        self._clock = clock
        #: Monotonic time of the last heartbeat that reached the database (/healthz).
        self.last_heartbeat_ok: float | None = None
        # When this worker's leases were last extended (or found to be none).
        self._leases_extended_at: float | None = None
        self._worker_id = worker_id
        self._lease_seconds = lease_seconds
        self._held = held
        self._on_lost = on_lost
        self._policy = policy
        self._history_limit = history_limit
        self._stop = threading.Event()
        super().__init__("durable-jobs-maintenance")
        self.heartbeat_interval = max(0.05, lease_seconds / 3)
        # Reap about twice per lease, jittered so workers do not all try at once.
        self.reap_interval = max(0.1, lease_seconds / 2)
        # Read once, like the worker's other settings: restart to change it.
        self.retention = pruning.retention_periods(jobs_settings.RETENTION)
        self.prune_interval = PRUNE_INTERVAL
        self.history_interval = parse_duration(jobs_settings.HISTORY_PARTITION)
        self.partitions_interval = PARTITIONS_INTERVAL

    def _request_stop(self) -> None:
        self._stop.set()

    def stop(self, timeout: float | None = None) -> bool:
        stopped = super().stop(timeout)
        # The last outcomes (the completer has written them by now) are counted too.
        self._guarded(self.flush_counts)
        return stopped

    def _run(self) -> None:
        # The first heartbeat at once: the worker shows up as alive from the start.
        next_heartbeat = self._clock()
        next_reap = self._clock() + (
            0.0 if self._reap_at_start else _spread(self.reap_interval, 0, 1)
        )
        next_prune = self._clock() + _spread(self.prune_interval, 0, 1)
        next_stats_prune = self._clock() + _spread(self.prune_interval, 0, 1)
        next_cancel_poll = self._clock() + self.cancel_poll_interval
        # At once: a worker that was down for longer than the ranges ahead
        # creates the current one before its first outcome.
        next_partitions = self._clock()
        try:
            while not self._stop.is_set():
                other_databases.refresh(self._alias)  # for the reaper's signals' receivers
                now = self._clock()
                if now >= next_partitions:
                    self._guarded(self.create_partitions)
                    next_partitions = now + _spread(self.partitions_interval, 0.75, 1.25)
                if now >= next_heartbeat:
                    self._guarded(self.heartbeat)
                    self._guarded(self.flush_counts)
                    next_heartbeat = now + self.heartbeat_interval
                if now >= next_cancel_poll:
                    self._guarded(self.poll_cancels)
                    next_cancel_poll = now + self.cancel_poll_interval
                if now >= next_reap:
                    self._guarded(self.reap)
                    self.first_reap.set()
                    next_reap = now + _spread(self.reap_interval, 0.75, 1.25)
                if self.retention and now >= next_prune:
                    self._guarded(self.prune)
                    next_prune = now + _spread(self.prune_interval, 0.75, 1.25)
                if self.counts is not None and now >= next_stats_prune:
                    self._guarded(self.prune_counts)
                    next_stats_prune = now + _spread(self.prune_interval, 0.75, 1.25)
                wake = min(next_heartbeat, next_reap, next_partitions)
                if self.counts is not None:
                    wake = min(wake, next_stats_prune)
                if self._untold is not None:
                    wake = min(wake, next_cancel_poll)
                if self.retention:
                    wake = min(wake, next_prune)
                self._stop.wait(max(0.0, wake - self._clock()))
        finally:
            self.first_reap.set()  # no one waits for a reap that will not come
            connections.close_all()  # the queue's, and what receivers opened

    def _guarded(self, task: Callable[[], object]) -> None:
        try:
            task()
        except DatabaseError as exc:
            # The next round tries again on a fresh connection; leases are
            # long enough (three heartbeats) to survive a missed one.
            logger.warning("Worker maintenance (%s) failed: %s", task.__name__, exc)
            connections[self._alias].close()

    def heartbeat(self) -> None:
        if self._extend_leases():
            self.last_heartbeat_ok = self._clock()
        # After the leases: if this fails (say, its migration is not applied
        # yet), the jobs' leases are extended all the same.
        if self._on_heartbeat is not None:
            self._on_heartbeat()
            self.last_heartbeat_ok = self._clock()

    def flush_counts(self) -> int:
        """Add the outcomes counted since the last flush to the per-minute table (one
        statement, none when nothing was counted); how many (queue, minute) rows."""
        if self.counts is None:
            return 0
        return self.counts.flush(self._alias)

    def prune_counts(self) -> int:
        """Delete the per-minute counts older than ``QUEUE_STATS_KEEP``; how many rows."""
        return db.prune_queue_stats(self._alias, QUEUE_STATS_KEEP)

    def _extend_leases(self) -> bool:
        """Push back the held jobs' leases; False when none is held (no query)."""
        held = dict(self._held())
        if not held:
            self._leases_extended_at = self._clock()
            return False
        extended = db.extend_leases(self._alias, held, lease_seconds=self._lease_seconds)
        self._leases_extended_at = self._clock()
        lost = set(held) - extended
        if lost:
            self._on_lost(lost)
        return True

    def poll_cancels(self) -> set[uuid.UUID]:
        """Which held jobs not yet told have a cancel requested; tell them (no query if none)."""
        if self._untold is None:
            return set()
        untold = dict(self._untold())
        if not untold:
            return set()
        requested = db.cancel_requests(self._alias, untold)
        if requested and self._on_cancel is not None:
            self._on_cancel(requested)
        return requested

    def reap(self) -> int:
        """Return the jobs of expired leases to pending or dead; how many.

        This worker's own leases are extended first when no heartbeat has
        done so for an interval: after the database was out of reach for
        longer than a lease, they have expired like a dead worker's, but
        this worker is alive and holds them (their outcomes may be waiting
        in its completer). Reaped by its own reaper, due before its next
        heartbeat, they would run again. (Another worker's reaper may still
        reach them first; see the guarantees' page on outages.)
        """
        since = self._leases_extended_at
        stale = since is None or self._clock() - since >= self.heartbeat_interval
        if stale and self._extend_leases():
            self.last_heartbeat_ok = self._clock()
        cancelled_children: set[uuid.UUID] = set()
        reaped_jobs = db.reap(
            self._alias,
            lock_key=REAPER_LOCK_KEY,
            limit=REAP_BATCH,
            history_limit=self._history_limit,
            decide=lambda lease: reaped(lease, self._policy),
            cancelled_children=cancelled_children,
        )
        for lease, outcome in reaped_jobs:
            now = _STATUS_AFTER_REAP.get(outcome.transition, "pending")
            log = logger.error if now == "dead" else logger.warning
            log(
                "Job reaped id=%s type=%s attempt=%s now=%s worker=%s: %s",
                lease.id, lease.type, lease.attempt, now, self._worker_id, outcome.last_error,
                extra={
                    "job_id": str(lease.id), "job_type": lease.type, "attempt": lease.attempt,
                    "worker_id": self._worker_id,
                },
            )  # fmt: skip
        self.reaped += len(reaped_jobs)
        metrics.record_reaped(len(reaped_jobs))
        if self.counts is not None and reaped_jobs:
            # A reaped attempt failed (or, cancelled, counts as neither).
            self.counts.add(
                [outcome for _, outcome in reaped_jobs], {lease.id for lease, _ in reaped_jobs}
            )
        # Jobs that ended dead without their handler saying so (Django tasks
        # listen), and the waiting jobs their end cancelled.
        hooks.jobs_finished(
            [lease.id for lease, outcome in reaped_jobs if outcome.announce]
            + sorted(cancelled_children),
            self._alias,
        )
        signals.send_written(
            [outcome for _, outcome in reaped_jobs], {lease.id for lease, _ in reaped_jobs}
        )
        return len(reaped_jobs)

    def create_partitions(self) -> list[str] | None:
        """Create the history partitions of now and the next ranges (``db/partitions.py``)."""
        created = partitions.ensure_ranges(
            self._alias,
            interval=self.history_interval,
            ahead=partitions.ahead_for(self.history_interval),
            lock_key=PARTITIONS_LOCK_KEY,
        )
        if created:
            logger.info(
                "Job partitions created names=%s worker=%s", ",".join(created), self._worker_id,
                extra={"partitions": created, "worker_id": self._worker_id},
            )  # fmt: skip
            # Autovacuum never analyzes a partitioned table itself.
            self.analyze_history()
        return created

    def analyze_history(self) -> bool:
        """ANALYZE the partitioned job table after its partitions changed, unless any
        worker did within ``partitions.analyze_interval`` (each one analyzes every
        partition too)."""
        return partitions.analyze(
            self._alias, unless_within=partitions.analyze_interval(self.history_interval)
        )

    def prune(self) -> int | None:
        """Delete finished jobs past ``RETENTION``; None when another worker holds the lock.

        Completed and cancelled jobs go with their partition, whole, once
        its range is older than the longer of their two periods (only their
        default partition's strays are deleted row by row); dead jobs, and
        completed or cancelled ones when the other of the two is kept for
        ever, row by row. Statuses with the same period share one batch
        query. The advisory lock is taken per statement (transaction-level),
        so a worker that dies mid-round never leaves it held.
        """
        total = 0
        history = pruning.history_retention(self.retention)
        if history is not None:
            dropped = pruning.drop_expired(history, lock_key=PRUNER_LOCK_KEY, using=self._alias)
            if dropped is None:
                return None
            total += dropped[0]
            if dropped[1]:
                self.analyze_history()
                logger.info(
                    "Job partitions dropped count=%s jobs=%s worker=%s",
                    dropped[1], dropped[0], self._worker_id,
                    extra={"count": dropped[1], "jobs": dropped[0], "worker_id": self._worker_id},
                )  # fmt: skip
        rounds: dict[tuple[float, bool], list[str]] = {}
        for status, period in self.retention.items():
            other_only = history is not None and status in partitions.HISTORY_STATUSES
            rounds.setdefault((period.total_seconds(), other_only), []).append(status)
        for (seconds, other_only), statuses in sorted(rounds.items()):
            older_than = timedelta(seconds=seconds)
            result = pruning.prune_batch(
                statuses, older_than, limit=PRUNE_BATCH, lock_key=PRUNER_LOCK_KEY,
                using=self._alias, other_only=other_only,
            )  # fmt: skip
            if not result.acquired:
                return None
            deleted = result.deleted
            if deleted == PRUNE_BATCH:
                more, _ = pruning.prune(
                    statuses, older_than, batch_size=PRUNE_BATCH,
                    max_batches=PRUNE_MAX_BATCHES - 1, lock_key=PRUNER_LOCK_KEY,
                    using=self._alias, other_only=other_only,
                )  # fmt: skip
                deleted += more
            total += deleted
        if total:
            logger.info(
                "Jobs pruned count=%s worker=%s", total, self._worker_id,
                extra={"count": total, "worker_id": self._worker_id},
            )  # fmt: skip
        return total
