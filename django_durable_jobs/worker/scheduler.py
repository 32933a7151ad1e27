"""The worker's scheduler: enqueue each schedule's due tick, on a thread of its own.

Every worker runs one (unless started with ``--no-schedules``), and there
is no leader: each computes the same ticks from the same declarations and
enqueues a due tick with the idempotency key ``schedule:<name>:<tick>``, so
the unique constraint turns N racing inserts into one job. The cost per
tick and worker is one small SELECT of the schedules' state, plus the
insert when the tick is due: the thread sleeps until the next tick of any
schedule (at most ``MAX_SLEEP`` seconds, so a changed clock is noticed).

The ``durable_jobs_schedule`` row of each schedule (``ScheduleState``)
records its last tick, in the same transaction as the insert. It is what
makes the missed-tick policy work after the tick's job has been pruned,
and what ``manage.py jobs schedules`` and the admin show.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.db.models import Q
from django.utils import timezone

from ..enqueueing import enqueue
from ..exceptions import DurableJobsError, IdempotencyConflict
from ..models import ScheduleState
from ..schedules import Schedule, due_tick, load_schedules, missed_tick_count
from ..services import Service
from . import other_databases

logger = logging.getLogger("django_durable_jobs.worker")

#: Longest sleep between two looks at the clock, in seconds.
MAX_SLEEP = 30.0
#: Wake this long after a tick, so that the tick is surely in the past.
TICK_MARGIN = 0.005
#: Back-off after a database error, doubling up to the cap (seconds).
ERROR_RETRY_BASE = 0.5
ERROR_RETRY_CAP = 30.0


class Scheduler(Service):
    def __init__(self, alias: str, worker_id: str, schedules: list[Schedule]) -> None:
        self.alias = alias
        self.worker_id = worker_id
        self.schedules = [s for s in schedules if s.enabled]
        # The newest tick of each schedule this worker has dealt with: a
        # tick at or before it needs no query at all.
        self._known: dict[str, datetime] = {}
        self._stop = threading.Event()
        super().__init__("durable-jobs-scheduler")

    @classmethod
    def from_declarations(cls, alias: str, worker_id: str) -> Scheduler | None:
        """A scheduler for the declared, enabled schedules; None when there are none.

        Invalid declarations are logged and left out (``manage.py check``
        reports them as ``durable_jobs.E007``); the valid ones still run.
        """
        schedules, errors = load_schedules()
        for error in errors:
            logger.error("Schedule ignored: %s", error)
        if not any(s.enabled for s in schedules):
            return None
        if not settings.USE_TZ:
            logger.error("Schedules ignored: periodic jobs need USE_TZ = True (durable_jobs.E007)")
            return None
        return cls(alias, worker_id, schedules)

    def start(self) -> None:
        logger.info(
            "Scheduler starting worker=%s schedules=%s",
            self.worker_id, ",".join(s.name for s in self.schedules),
            extra={"worker_id": self.worker_id},
        )  # fmt: skip
        super().start()

    def _request_stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        failures = 0
        try:
            while not self._stop.is_set():
                other_databases.refresh(self.alias)  # for the enqueue signals' receivers
                try:
                    self.run_once()
                    failures = 0
                    wait = self.seconds_to_next_tick(timezone.now())
                except DatabaseError as exc:
                    failures += 1
                    wait = min(ERROR_RETRY_CAP, ERROR_RETRY_BASE * 2 ** (failures - 1))
                    logger.warning("Scheduler failed (%s); retrying in %.1fs", exc, wait)
                    connections[self.alias].close()
                except Exception:
                    # A bug of ours must not end the thread: a dead scheduler
                    # stops every schedule of this worker without a sound.
                    failures += 1
                    wait = min(ERROR_RETRY_CAP, ERROR_RETRY_BASE * 2 ** (failures - 1))
                    logger.exception("Scheduler error; retrying in %.1fs", wait)
                self._stop.wait(wait)
        finally:
            connections.close_all()  # the queue's, and what receivers opened

    def seconds_to_next_tick(self, now: datetime) -> float:
        """Until the soonest next tick of any schedule (bounded by ``MAX_SLEEP``)."""
        wait = MAX_SLEEP
        for schedule in self.schedules:
            tick = schedule.next_tick(now)
            if tick is not None:
                wait = min(wait, (tick - now).total_seconds() + TICK_MARGIN)
        return max(TICK_MARGIN, wait)

    def run_once(self, now: datetime | None = None) -> dict[str, datetime]:
        """Enqueue every schedule's due tick; return ``{name: tick}`` of those enqueued here.

        A tick enqueued by another worker first is a replay here (same key):
        not returned, not an error.
        """
        now = timezone.now() if now is None else now
        candidates: dict[str, tuple[Schedule, datetime]] = {}
        for schedule in self.schedules:
            latest = schedule.latest_tick(now)
            known = self._known.get(schedule.name)
            if latest is not None and (known is None or latest > known):
                candidates[schedule.name] = (schedule, latest)
        if not candidates:
            return {}
        states = self._states([s for s, _ in candidates.values()], now)
        enqueued: dict[str, datetime] = {}
        for name, (schedule, latest) in candidates.items():
            state = states.get(name)
            if state is None:
                continue  # deleted under our feet: created again on the next look
            tick = due_tick(
                latest,
                now=now,
                last_tick=state.last_tick,
                first_seen=state.first_seen,
                missed=schedule.missed,
            )
            if tick is not None and self._enqueue(schedule, tick, now):
                enqueued[name] = tick
                self._report_missed(schedule, state.last_tick, tick)
            # Decided, whatever the decision: not looked at again.
            self._known[name] = latest
        return enqueued

    def _report_missed(
        self, schedule: Schedule, last_tick: datetime | None, tick: datetime
    ) -> None:
        """Say so when ticks between the last one enqueued and ``tick`` were not run.

        The policy only ever runs the latest tick, whether the gap came from
        downtime or from this worker being late (a stalled host, a slow
        commit): with an interval of a few seconds the second can happen
        while everything runs. Only the worker that created the tick's job
        logs it, so N workers do not say it N times.
        """
        if last_tick is None:
            return
        first = schedule.next_tick(last_tick)
        if first is None or first >= tick:
            return
        count = missed_tick_count(schedule, first, tick)
        logger.warning(
            "Schedule %s missed %s tick(s) from %s (the last before %s); "
            "only the latest was enqueued (missed=%s)",
            schedule.name, count, first.isoformat(), tick.isoformat(), schedule.missed,
            extra={"schedule": schedule.name, "worker_id": self.worker_id},
        )  # fmt: skip

    def _states(self, schedules: list[Schedule], now: datetime) -> dict[str, ScheduleState]:
        """Each schedule's state row, created (first seen: now) when missing.

        A schedule whose timing changed counts as first seen now, so that
        editing an expression does not run the new expression's past tick.
        Concurrent workers may do this at once: the insert ignores
        conflicts and the update is conditional, so neither errors.
        """
        rows = ScheduleState.objects.using(self.alias)
        names = [s.name for s in schedules]
        states = {state.name: state for state in rows.filter(name__in=names)}
        missing = [
            ScheduleState(name=s.name, timing=s.timing, first_seen=now, updated_at=now)
            for s in schedules
            if s.name not in states
        ]
        changed = [s for s in schedules if s.name in states and states[s.name].timing != s.timing]
        for schedule in changed:
            rows.filter(name=schedule.name).exclude(timing=schedule.timing).update(
                timing=schedule.timing, first_seen=now, updated_at=now
            )
        if missing:
            rows.bulk_create(missing, ignore_conflicts=True)
        if missing or changed:
            states = {state.name: state for state in rows.filter(name__in=names)}
        return states

    def _enqueue(self, schedule: Schedule, tick: datetime, now: datetime) -> bool:
        """Enqueue ``tick`` and record it; True if this call created the job."""
        key = schedule.idempotency_key(tick)
        try:
            with transaction.atomic(using=self.alias):
                result = enqueue(
                    schedule.type,
                    schedule.payload,
                    idempotency_key=key,
                    queue=schedule.queue,
                    priority=schedule.priority,
                    run_at=tick,
                    using=self.alias,
                )
                job_id = result.job.pk
                self._record(schedule, tick, job_id, now)
        except IdempotencyConflict as exc:
            # The tick already has its job, enqueued with other parameters
            # (a deploy changed the payload between two workers' looks).
            logger.warning(
                "Schedule %s tick %s already has job %s with a different %s; not enqueued again",
                schedule.name, tick.isoformat(), exc.existing.pk, ", ".join(exc.differences),
            )  # fmt: skip
            self._record(schedule, tick, exc.existing.pk, now)
            return False
        except DurableJobsError as exc:
            logger.error("Schedule %s tick %s could not be enqueued: %s", schedule.name, tick, exc)
            return False
        if result.created:
            logger.info(
                "Schedule tick enqueued schedule=%s tick=%s job=%s worker=%s",
                schedule.name, tick.isoformat(), job_id, self.worker_id,
                extra={"job_id": str(job_id), "job_type": schedule.type,
                       "schedule": schedule.name, "worker_id": self.worker_id},
            )  # fmt: skip
        return result.created

    def _record(self, schedule: Schedule, tick: datetime, job_id: object, now: datetime) -> None:
        """Move the schedule's ``last_tick`` forward (never back: a slow worker may be late)."""
        ScheduleState.objects.using(self.alias).filter(name=schedule.name).filter(
            Q(last_tick__isnull=True) | Q(last_tick__lt=tick)
        ).update(last_tick=tick, last_job_id=job_id, last_enqueued_at=now, updated_at=now)
