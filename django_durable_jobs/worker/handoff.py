"""What becomes of a claimed job, between a slot's thread and the database.

A slot's thread runs its group's jobs one at a time (``SlotRunner``). The
worker's side of the outcomes (``outcomes.py`` builds them, the completer
writes them): keep a handler's outcome only while its attempt is still
this worker's (``settle``), say what the completer wrote or could
not (``report_written``), give back jobs at shutdown (``release_attempts``)
and those a failed claim leased unseen (``give_back_orphans``), and write
what is known at a forced exit (``write_last``). The ``Worker``
calls these from its threads' callbacks; the logging and the metrics of
each case live here, so the worker's loop reads as its lifecycle.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable

from django.db import connections

from .. import db, hooks, metrics, signals
from ..backoff import RetryPolicy
from ..db.records import ClaimedJob, Outcome, Transition
from .attempts import Attempt, AttemptTable, State
from .completer import Completer
from .config import WorkerConfig
from .event_loop import EventLoop
from .executor import StopWorker, execute, internal_error
from .outcomes import cancel, cancelled_failure, release
from .pool import SlotGroup
from .watchdog import Watchdog

logger = logging.getLogger("django_durable_jobs.worker")


class SlotRunner:
    """The body of every slot's thread: run the group's jobs one at a time, until a stop
    marker; settle each outcome, then tell the worker the slot is free."""

    def __init__(
        self,
        *,
        worker_id: str,
        policy: RetryPolicy,
        watchdog: Watchdog,
        event_loop: EventLoop,
        attempts: AttemptTable,
        completer: Completer,
        stop_worker: Callable[[], None],
        slot_freed: Callable[[Attempt | None, float | None], None],
        lease_seconds: float | None = None,
        using: str | None = None,
    ) -> None:
        self._lease_seconds = lease_seconds
        self._using = using
        self._worker_id = worker_id
        self._policy = policy
        self._watchdog = watchdog
        self._event_loop = event_loop
        self._attempts = attempts
        self._completer = completer
        self._stop_worker = stop_worker
        self._slot_freed = slot_freed

    def __call__(self, group: SlotGroup) -> None:
        try:
            while True:
                job = group.jobs.get()
                if job is None:
                    return
                started = time.perf_counter()
                outcome = self._execute(job)
                duration = time.perf_counter() - started
                attempt = settle(self._attempts, self._completer, job, outcome, duration)
                self._slot_freed(attempt, None if outcome is None else duration)
        finally:
            connections.close_all()

    def _execute(self, job: ClaimedJob) -> Outcome | None:
        """Run the job under the watchdog; None when it was no longer ours to run.

        The attempt ends when the handler returns, even past its deadline:
        the watchdog never interrupts the thread (see ``watchdog.py``), it
        only records the failed attempt, so the handler's late outcome comes
        back here and ``settle`` drops it.
        """
        try:
            return execute(
                job,
                self._worker_id,
                self._policy,
                self._watchdog,
                self._event_loop,
                lease_seconds=self._lease_seconds,
                using=self._using,
            )
        except StopWorker as stop:
            self._stop_worker()
            return stop.outcome
        except Exception as exc:  # a bug of ours: count it, so it cannot loop
            logger.exception("Worker error running job %s", job.id)
            return internal_error(job, self._worker_id, self._policy, exc)


def settle(
    attempts: AttemptTable,
    completer: Completer,
    job: ClaimedJob,
    outcome: Outcome | None,
    duration: float,
) -> Attempt | None:
    """The handler returned ``outcome``: submit it if the attempt is still its own.

    Returns the attempt (None: unknown to the table).
    """
    attempt = attempts.returned(job.lease_token)
    state = None if attempt is None else attempt.state
    if attempt is not None and attempt.suspended is not None:
        if metrics.ENABLED:
            metrics.record_left(job)  # no longer in flight; counted at the suspension
    elif outcome is None or state is None:
        pass  # never started (released or lease lost while waiting), or unknown
    elif state is State.FINISHED:
        if metrics.ENABLED:
            # Counted here, once per attempt, whatever happens to the write.
            metrics.record_finished(job, outcome.transition, duration)
        completer.submit(outcome)
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
    return attempt


def soonest_retry_seconds(outcomes: Iterable[Outcome]) -> float | None:
    """Seconds until the soonest of these outcomes' retries falls due (None: no retry)."""
    delays = [
        o.delay_us for o in outcomes if o.transition is Transition.RETRY and o.delay_us is not None
    ]
    return min(delays) / 1_000_000 if delays else None


def report_written(outcomes: list[Outcome], written: set[uuid.UUID], alias: str) -> None:
    """Announce the finished jobs written; count and log the outcomes that were not."""
    hooks.jobs_finished([o.job_id for o in outcomes if o.announce and o.job_id in written], alias)
    signals.send_written(outcomes, written)
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


def release_attempts(
    completer: Completer, worker_id: str, attempts: list[Attempt], why: str
) -> None:
    """Give these attempts' jobs back (a cancelled one ends cancelled), counted as released."""
    for attempt in attempts:
        job = attempt.job
        metrics.record_released(job)
        if attempt.cancel_requested is not None:
            # Cancelled: given back, it would only be cancelled (record_outcomes).
            logger.warning(
                "Job cancelled id=%s type=%s: %s", job.id, job.type, why,
                extra={"job_id": str(job.id), "job_type": job.type},
            )  # fmt: skip
            completer.submit(cancel(job, worker_id, cancelled_failure(why)))
            continue
        logger.warning(
            "Releasing job %s type=%s: %s",
            job.id, job.type, why, extra={"job_id": str(job.id), "job_type": job.type},
        )  # fmt: skip
        completer.submit(release(job.id, job.lease_token))


def give_back_orphans(config: WorkerConfig, attempts: AttemptTable, completer: Completer) -> int:
    """After a failed claim: give back the jobs leased to this worker that it never held.

    A claim can commit while its answer dies with the connection (a backend
    terminated, a restart): its jobs are leased to this worker, no thread runs them,
    and they would wait out the lease and show an attempt that never ran. Given
    back as at a stop (uncounted, fenced by their lease tokens); only tokens the
    attempt table does not know, so nothing running here, or whose outcome is still
    to be written, is touched. The loop thread calls it before its next claim: every
    job of its earlier claims is in the table by then.
    """
    leased = db.leased_to(config.alias, config.worker_id)
    orphans = [row for row in leased if attempts.get(row[2]) is None]
    for job_id, job_type, token in orphans:
        logger.warning(
            "Giving back job %s type=%s: a claim whose answer was lost leased it to this "
            "worker, which never ran it (not counted as an attempt)",
            job_id, job_type, extra={"job_id": str(job_id), "job_type": job_type},
        )  # fmt: skip
        completer.submit(release(job_id, token))
    return len(orphans)


def write_last(
    alias: str, attempts: AttemptTable, completer: Completer, history_limit: int
) -> None:
    """A forced exit's last write (best effort, 2 s): the outcomes the completer has not
    written yet, so finished jobs are not run again, and a release of what still runs."""
    # Not the timed-out ones: their failed attempt is among the unwritten.
    running = attempts.handler_owned()
    outcomes = completer.unwritten() + [release(a.job.id, a.job.lease_token) for a in running]
    if not outcomes:
        return
    try:
        db.record_outcomes_directly(
            alias, outcomes, history_limit=history_limit, timeout_seconds=2.0
        )
    except Exception as exc:  # exiting anyway; the reaper will recover them
        logger.error("Could not record %s outcome(s) at forced exit: %s", len(outcomes), exc)


def log_cancels(told: list[Attempt], grace: float, worker_id: str) -> None:
    for attempt in told:
        job = attempt.job
        logger.info(
            "Cancel requested for job %s type=%s attempt=%s: ctx.cancelled is now True; "
            "the handler has %ss to stop worker=%s",
            job.id, job.type, job.attempt, grace, worker_id,
            extra={"job_id": str(job.id), "job_type": job.type, "worker_id": worker_id},
        )  # fmt: skip


def log_leases_lost(lost: list[Attempt], worker_id: str) -> None:
    for attempt in lost:
        job_id = attempt.job.id
        logger.warning(
            "Lease lost for job %s: it was reaped; this worker's outcome will not be recorded",
            job_id, extra={"job_id": str(job_id), "worker_id": worker_id},
        )  # fmt: skip
