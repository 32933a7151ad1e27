"""Prometheus metrics, or no-ops when prometheus-client is not installed.

The metric objects are module-level (as django-prometheus defines its own),
so every process that imports this module exports them: the web process
through django-prometheus' ``/metrics`` view, a worker through its
``--metrics-port``. Names and labels are DESIGN.md's; do not rename them.

Without the ``metrics`` extra, ``ENABLED`` is False and every ``record_*``
function returns at once, before building any label, so the worker's hot
path pays one global lookup and one branch per call.

When ``PROMETHEUS_MULTIPROC_DIR`` is set, prometheus-client runs in
multiprocess mode by itself (values live in mmapped files in that
directory); gauges then need a ``multiprocess_mode``, given below.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError

from . import db, doctor
from .db.records import Transition

if TYPE_CHECKING:
    from .db.records import ClaimedJob

logger = logging.getLogger("django_durable_jobs.metrics")

try:
    import prometheus_client
    from prometheus_client.core import GaugeMetricFamily
except ImportError:  # the `metrics` extra is not installed
    prometheus_client = None  # type: ignore[assignment]

ENABLED = prometheus_client is not None

#: Results of ``durable_jobs_processed_total``: what the attempt ended in
#: (``cancelled``: the job was cancelled while it ran; neither a failure
#: nor a death, so it does not feed failure-rate alerts).
RESULTS = ("completed", "failed", "dead", "cancelled")
#: The statuses ``durable_jobs_queue_depth`` reports (history rows are left
#: out: counting them would scan the whole table on every scrape).
DEPTH_STATUSES = ("pending", "running", "waiting", "dead")
#: How long one reading of the queue depth serves scrapes.
DEPTH_CACHE_SECONDS = 1.5
#: How long one reading of the schedules' ticks serves scrapes.
SCHEDULE_CACHE_SECONDS = 1.5
SCHEDULE_LAST_TICK = "durable_jobs_schedule_last_tick_timestamp_seconds"
SCHEDULE_NEXT_TICK = "durable_jobs_schedule_next_tick_timestamp_seconds"

# Wait times range from milliseconds (a busy queue) to hours (a backlog).
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)

if prometheus_client is not None:
    ENQUEUED = prometheus_client.Counter(
        "durable_jobs_enqueued", "New jobs enqueued (replays not counted).", ["queue", "type"]
    )
    PROCESSED = prometheus_client.Counter(
        "durable_jobs_processed",
        "Attempts by what they ended in: completed, failed (will retry), dead or cancelled.",
        ["queue", "type", "result"],
    )
    UNRECORDED = prometheus_client.Counter(
        "durable_jobs_outcomes_unrecorded",
        "Attempt outcomes (already counted in durable_jobs_processed_total) that could not "
        "be written; the reaper retries those jobs.",
    )
    STEPS = prometheus_client.Counter(
        "durable_jobs_steps",
        "Durable steps by what became of them: run (fn called and recorded), replayed (the "
        "record returned, fn not called) or failed.",
        ["queue", "type", "result"],
    )
    # Not durable_jobs_suspended: that is the gauge of the jobs suspended now
    # (QueueDepthCollector); this counts the suspensions as they happen.
    SUSPENSIONS = prometheus_client.Counter(
        "durable_jobs_suspensions",
        "Suspensions of jobs by themselves (durable steps), by reason: sleep, event or child.",
        ["queue", "reason"],
    )
    IN_FLIGHT = prometheus_client.Gauge(
        "durable_jobs_in_flight",
        "Jobs claimed by this process and still running.",
        ["queue"],
        multiprocess_mode="livesum",
    )
    DURATION = prometheus_client.Histogram(
        "durable_jobs_processing_duration_seconds",
        "Time a handler ran, per attempt.",
        ["queue", "type"],
        buckets=DURATION_BUCKETS,
    )
    WAIT = prometheus_client.Histogram(
        "durable_jobs_wait_seconds",
        "Time from a job's available_at to its start.",
        ["queue"],
        buckets=WAIT_BUCKETS,
    )
    UNKNOWN_TYPE = prometheus_client.Counter(
        "durable_jobs_unknown_type",
        "Jobs given back (not counted as attempts) by a worker that has no handler for their "
        "type, for a worker that has one.",
        ["queue", "type"],
    )
    REAPED = prometheus_client.Counter(
        "durable_jobs_reaped", "Expired leases reaped (jobs returned to pending or dead)."
    )
    THROTTLED = prometheus_client.Counter(
        "durable_jobs_throttled",
        "Claims that held work back, by why: rate_limit, concurrency (the queue's), key "
        "(a concurrency key at its limit) or paused.",
        ["queue", "reason"],
    )
    SLOTS = prometheus_client.Gauge(
        "durable_jobs_worker_slots",
        "Jobs this worker can run at once: its handler threads now (an elastic pool's "
        "current size; with slots per queue, their sum).",
        multiprocess_mode="livesum",
    )
    # Labelled so that a process without a worker (the web) exports no
    # sample at all, rather than a 0 that would read as "not arriving".
    NOTIFICATIONS_OK = prometheus_client.Gauge(
        "durable_jobs_worker_notifications_ok",
        "1 while this worker's LISTEN connection hears the probe NOTIFYs of its main "
        "connection, 0 once one was missed (a transaction pooler in the way: see "
        "LISTEN_DATABASE); jobs then start at the next poll.",
        ["listen_database"],
        multiprocess_mode="livemin",
    )


def record_enqueued(queue: str, type: str, count: int = 1) -> None:
    """``count`` new jobs (only jobs this enqueue created, not replays)."""
    if ENABLED:
        child = _enqueued.get((queue, type))
        if child is None:
            child = _enqueued[(queue, type)] = ENQUEUED.labels(queue, type)
        child.inc(count)


# ``labels()`` costs about a microsecond (a lock and a tuple build); a worker
# runs up to ~10,000 jobs/s, so the children are looked up once per queue
# (and type) and kept here. A plain dict: a race only builds a child twice,
# and prometheus-client returns the same child both times.
_by_queue: dict[str, tuple[Any, Any]] = {}
_by_job_type: dict[tuple[str, str], tuple[Any, ...]] = {}
_enqueued: dict[tuple[str, str], Any] = {}
_steps: dict[tuple[str, str, str], Any] = {}


def _queue_children(queue: str) -> tuple[Any, Any]:
    children = _by_queue.get(queue)
    if children is None:
        children = _by_queue[queue] = (IN_FLIGHT.labels(queue), WAIT.labels(queue))
    return children


def _job_children(queue: str, type: str) -> tuple[Any, ...]:
    """One ``durable_jobs_processed_total`` child per ``RESULTS`` entry, then the duration's."""
    key = (queue, type)
    children = _by_job_type.get(key)
    if children is None:
        children = _by_job_type[key] = (
            *(PROCESSED.labels(queue, type, result) for result in RESULTS),
            DURATION.labels(queue, type),
        )
    return children


#: The one place transitions meet DESIGN.md's ``result`` label values. A
#: release is not an attempt's result: it is not counted.
RESULT_OF_TRANSITION = {
    Transition.COMPLETE: "completed",
    Transition.RETRY: "failed",
    Transition.DEAD: "dead",
    Transition.CANCEL: "cancelled",
}
_RESULT_INDEX = {
    transition: RESULTS.index(result) for transition, result in RESULT_OF_TRANSITION.items()
}


def record_claimed(jobs: Iterable[ClaimedJob]) -> None:
    """Jobs just claimed: in flight, and how long they waited to start."""
    if ENABLED:
        # One increment of the gauge per queue, not per job: a claim brings
        # hundreds of jobs of one queue, and each call takes the child's lock.
        claimed: dict[str, int] = {}
        for job in jobs:
            queue = job.queue
            claimed[queue] = claimed.get(queue, 0) + 1
            _queue_children(queue)[1].observe(
                max((job.started_at - job.available_at).total_seconds(), 0.0)
            )
        for queue, count in claimed.items():
            _queue_children(queue)[0].inc(count)


def record_finished(job: ClaimedJob, transition: Transition, duration: float) -> None:
    """An attempt ended: count its outcome (once, whether or not it gets written)."""
    if ENABLED:
        _queue_children(job.queue)[0].dec()
        index = _RESULT_INDEX.get(transition)
        if index is not None:
            children = _job_children(job.queue, job.type)
            children[index].inc()
            children[-1].observe(duration)


def record_step(queue: str, type: str, result: str) -> None:
    """A durable step ran (``run``), was replayed from its record, or failed."""
    if ENABLED:
        child = _steps.get((queue, type, result))
        if child is None:
            child = _steps[(queue, type, result)] = STEPS.labels(queue, type, result)
        child.inc()


def record_suspended(queue: str, reason: str) -> None:
    """A job suspended itself (``sleep``, ``event``, ``child``)."""
    if ENABLED:
        SUSPENSIONS.labels(queue, reason).inc()


def record_left(job: ClaimedJob) -> None:
    """An attempt left without an outcome (its job suspended): no longer in flight."""
    if ENABLED:
        _queue_children(job.queue)[0].dec()


def record_released(job: ClaimedJob) -> None:
    """A job given back unfinished (shutdown): no longer in flight, no attempt counted."""
    if ENABLED:
        _queue_children(job.queue)[0].dec()


def record_unknown_type(queue: str, type: str) -> None:
    """A job given back because this worker has no handler for its type."""
    if ENABLED:
        UNKNOWN_TYPE.labels(queue, type).inc()


def record_unrecorded(count: int) -> None:
    if ENABLED and count:
        UNRECORDED.inc(count)


def record_throttled(queue: str, reason: str, count: int = 1) -> None:
    """A claim held back work of ``queue`` because of ``reason`` (see ``flow.THROTTLE_REASONS``)."""
    if ENABLED and count:
        THROTTLED.labels(queue, reason).inc(count)


def record_reaped(count: int) -> None:
    if ENABLED and count:
        REAPED.inc(count)


def set_worker_slots(slots: int) -> None:
    if ENABLED:
        SLOTS.set(slots)


def set_notifications_ok(listen_database: str, ok: bool | None) -> None:
    """The notification probe's verdict (``worker/probe.py``); None: no worker listens any more."""
    if not ENABLED:
        return
    if ok is None:
        with contextlib.suppress(KeyError):  # never set
            NOTIFICATIONS_OK.remove(listen_database)
    else:
        NOTIFICATIONS_OK.labels(listen_database).set(1 if ok else 0)


# -- read from the database at scrape time ------------------------------


class QueueDepthCollector:
    """``durable_jobs_queue_depth{queue,status}``, the oldest pending job's age, and
    ``durable_jobs_suspended{queue,reason}`` (durable steps: sleep, event, child).

    Two grouped queries per reading, cached for ``DEPTH_CACHE_SECONDS`` so
    that several scrapers (or a fast one) do not load the database.
    """

    def __init__(self, alias: str | None = None, ttl: float = DEPTH_CACHE_SECONDS) -> None:
        self._alias = alias
        self._ttl = ttl
        self._lock = threading.Lock()
        self._rows: list[tuple[str, str, int, float | None]] | None = None
        self._suspended: list[tuple[str, str, int]] = []
        self._read_at = 0.0

    def describe(self) -> list[Any]:
        # Without describe(), registering would call collect(): a query at import.
        return [
            GaugeMetricFamily("durable_jobs_queue_depth", "", labels=["queue", "status"]),
            GaugeMetricFamily("durable_jobs_oldest_pending_age_seconds", "", labels=["queue"]),
            GaugeMetricFamily("durable_jobs_suspended", "", labels=["queue", "reason"]),
        ]

    def rows(self) -> list[tuple[str, str, int, float | None]]:
        with self._lock:
            now = time.monotonic()
            if self._rows is not None and now - self._read_at < self._ttl:
                return self._rows
            try:
                alias = db.database_alias(self._alias)
                self._rows = db.queue_depth(alias)
                self._suspended = db.suspended_jobs(alias)
            except DatabaseError as exc:
                logger.warning("Queue depth for metrics unavailable: %s", exc)
                self._suspended = []
                return []
            self._read_at = now
            return self._rows

    def suspended(self) -> list[tuple[str, str, int]]:
        """``(queue, reason, count)`` of the last reading (``rows()`` reads both)."""
        with self._lock:
            return list(self._suspended)

    def collect(self) -> Iterator[Any]:
        depth = GaugeMetricFamily(
            "durable_jobs_queue_depth",
            "Jobs per queue and status (pending, running, dead), read from the database.",
            labels=["queue", "status"],
        )
        oldest = GaugeMetricFamily(
            "durable_jobs_oldest_pending_age_seconds",
            "How long the oldest runnable pending job of each queue has waited.",
            labels=["queue"],
        )
        suspended = GaugeMetricFamily(
            "durable_jobs_suspended",
            "Suspended jobs (durable steps) per queue and reason: sleep (ctx.sleep), event "
            "(ctx.wait_for_event), child (ctx.run_job), read from the database.",
            labels=["queue", "reason"],
        )
        for queue, status, count, age in self.rows():
            depth.add_metric([queue, status], count)
            if age is not None:
                oldest.add_metric([queue], age)
        for queue, reason, count in self.suspended():
            suspended.add_metric([queue, reason], count)
        yield depth
        yield oldest
        yield suspended


class ScheduleCollector:
    """When each declared, enabled schedule last ticked, and when it ticks next.

    ``durable_jobs_schedule_last_tick_timestamp_seconds{schedule}`` is the
    Unix time of the last tick a worker enqueued (``last_tick`` of its
    ``durable_jobs_schedule`` row), absent until a worker has ticked it.
    ``durable_jobs_schedule_next_tick_timestamp_seconds{schedule}`` is the
    tick that follows that last tick; for a schedule never ticked, the
    first tick after now. While the schedule runs, that is its coming
    tick. Once it stops ticking, the value stays where it was (in the past)
    instead of moving on with the clock, so ``next - last`` stays one
    period and ``time() - last > 2 * (next - last)`` can fire: measured
    from now, ``next`` would always be later than ``time()`` and the alert
    could never fire.

    The declarations come from code and settings (no query); the last ticks
    from one query, and the whole reading is cached for
    ``SCHEDULE_CACHE_SECONDS``, as the queue depth is.
    """

    def __init__(self, alias: str | None = None, ttl: float = SCHEDULE_CACHE_SECONDS) -> None:
        self._alias = alias
        self._ttl = ttl
        self._lock = threading.Lock()
        self._rows: list[tuple[str, float | None, float | None]] | None = None
        self._read_at = 0.0

    def describe(self) -> list[Any]:
        # Without describe(), registering would call collect(): a query at import.
        return [
            GaugeMetricFamily(SCHEDULE_LAST_TICK, "", labels=["schedule"]),
            GaugeMetricFamily(SCHEDULE_NEXT_TICK, "", labels=["schedule"]),
        ]

    def rows(self) -> list[tuple[str, float | None, float | None]]:
        """``(schedule, last tick, next tick)`` as Unix times, by name; None where absent."""
        with self._lock:
            now = time.monotonic()
            if self._rows is not None and now - self._read_at < self._ttl:
                return self._rows
            rows = self._read()
            if rows is None:
                return []
            self._rows = rows
            self._read_at = now
            return self._rows

    def _read(self) -> list[tuple[str, float | None, float | None]] | None:
        """A fresh reading, or None when the settings or the database do not allow one."""
        # Here, not at the top: this module must import before Django is set
        # up (a bare process recording metrics, multiprocess exporters), and
        # the models need the app registry.
        from .models import ScheduleState
        from .schedules import load_schedules

        if not settings.USE_TZ:
            return []  # no tick is ever enqueued (durable_jobs.E007)
        try:
            schedules = [s for s in load_schedules()[0] if s.enabled]
        except ImproperlyConfigured as exc:  # an ill-shaped SCHEDULES (durable_jobs.E003)
            logger.warning("Schedules for metrics unavailable: %s", exc)
            return None
        if not schedules:
            return []
        try:
            last_ticks = dict(
                ScheduleState.objects.using(db.database_alias(self._alias))
                .filter(name__in=[s.name for s in schedules], last_tick__isnull=False)
                .values_list("name", "last_tick")
            )
        except DatabaseError as exc:
            logger.warning("Schedule ticks for metrics unavailable: %s", exc)
            return None
        now = datetime.now(timezone.utc)
        rows: list[tuple[str, float | None, float | None]] = []
        for schedule in schedules:
            last = last_ticks.get(schedule.name)
            following = schedule.next_tick(now if last is None else last)
            rows.append(
                (
                    schedule.name,
                    None if last is None else last.timestamp(),
                    None if following is None else following.timestamp(),
                )
            )
        return rows

    def collect(self) -> Iterator[Any]:
        last = GaugeMetricFamily(
            SCHEDULE_LAST_TICK,
            "Unix time of the last tick enqueued for each declared, enabled schedule; "
            "absent until a worker has ticked it.",
            labels=["schedule"],
        )
        following = GaugeMetricFamily(
            SCHEDULE_NEXT_TICK,
            "Unix time of the tick that follows the last one (for a schedule never "
            "ticked, the next from now); in the past when the schedule is overdue.",
            labels=["schedule"],
        )
        for name, last_tick, next_tick in self.rows():
            if last_tick is not None:
                last.add_metric([name], last_tick)
            if next_tick is not None:
                following.add_metric([name], next_tick)
        yield last
        yield following


#: The database-health metrics (``DatabaseHealthCollector``), each with its help.
HORIZON_AGE = "durable_jobs_db_horizon_age_seconds"
HORIZON_XID_AGE = "durable_jobs_db_horizon_age_xids"
DEAD_TUPLES = "durable_jobs_db_dead_tuples"
DEAD_TUPLE_RATIO = "durable_jobs_db_dead_tuple_ratio"
LIVE_TUPLES = "durable_jobs_db_live_tuples"
VACUUM_AGE = "durable_jobs_db_vacuum_age_seconds"
HIDDEN_SESSIONS = "durable_jobs_db_hidden_sessions"


class DatabaseHealthCollector:
    """The database's vacuum health (``doctor.py``), read at scrape time.

    ``durable_jobs_db_horizon_age_seconds``: how long the oldest session or
    prepared transaction has held back the vacuum horizon of the job
    tables (0: none); ``durable_jobs_db_horizon_age_xids``: the horizon's age
    in transaction ids, replication slots included (their only measure);
    per table (the package's, from its models): dead and live tuples, the
    dead share, seconds since the last vacuum or autovacuum (absent for a
    table never vacuumed since the statistics were reset); and the sessions
    whose details the database role may not read (pg_read_all_stats).

    Four small queries on PostgreSQL's own views, never the job table, per
    reading; a reading serves ``doctor.HEALTH_CACHE_SECONDS``, shared with
    a worker's ``/healthz`` and the admin's Queues page.
    """

    def __init__(self, alias: str | None = None) -> None:
        self._alias = alias

    def describe(self) -> list[Any]:
        # Without describe(), registering would call collect(): a query at import.
        return [
            GaugeMetricFamily(HORIZON_AGE, ""),
            GaugeMetricFamily(HORIZON_XID_AGE, ""),
            GaugeMetricFamily(DEAD_TUPLES, "", labels=["table"]),
            GaugeMetricFamily(LIVE_TUPLES, "", labels=["table"]),
            GaugeMetricFamily(DEAD_TUPLE_RATIO, "", labels=["table"]),
            GaugeMetricFamily(VACUUM_AGE, "", labels=["table"]),
            GaugeMetricFamily(HIDDEN_SESSIONS, ""),
        ]

    def collect(self) -> Iterator[Any]:
        try:
            reading = doctor.cached_reading(self._alias)
        except DatabaseError as exc:
            logger.warning("Database health for metrics unavailable: %s", exc)
            return
        yield GaugeMetricFamily(
            HORIZON_AGE,
            "How long the oldest session or prepared transaction has held back the vacuum "
            "horizon of the job tables' database; 0 when none.",
            value=doctor.horizon_age_seconds(reading),
        )
        yield GaugeMetricFamily(
            HORIZON_XID_AGE,
            "Age in transaction ids of the vacuum horizon of the job tables (sessions, "
            "replication slots, prepared transactions); 0 when none holds it.",
            value=doctor.horizon_xid_age(reading),
        )
        dead = GaugeMetricFamily(
            DEAD_TUPLES, "Dead tuples of each job table (pg_stat_user_tables).", labels=["table"]
        )
        live = GaugeMetricFamily(
            LIVE_TUPLES, "Live tuples of each job table (pg_stat_user_tables).", labels=["table"]
        )
        ratio = GaugeMetricFamily(
            DEAD_TUPLE_RATIO,
            "Share of each job table's tuples that are dead: dead / (live + dead).",
            labels=["table"],
        )
        vacuum_age = GaugeMetricFamily(
            VACUUM_AGE,
            "Seconds since each job table's last vacuum or autovacuum; absent if never.",
            labels=["table"],
        )
        for table in reading.tables:
            dead.add_metric([table.table], table.dead)
            live.add_metric([table.table], table.live)
            ratio.add_metric([table.table], table.dead_ratio)
            if table.vacuum_age_seconds is not None:
                vacuum_age.add_metric([table.table], table.vacuum_age_seconds)
        yield dead
        yield live
        yield ratio
        yield vacuum_age
        yield GaugeMetricFamily(
            HIDDEN_SESSIONS,
            "Sessions of the job tables' database whose details the database role may not "
            "read (it lacks pg_read_all_stats): the horizon they hold is not seen.",
            value=len(reading.hidden),
        )


_collector: QueueDepthCollector | None = None
_schedule_collector: ScheduleCollector | None = None
_health_collector: DatabaseHealthCollector | None = None


def make_wsgi_app() -> Any:
    """prometheus_client's WSGI app over the default registry (the worker's ``--metrics-port``)."""
    if prometheus_client is None:  # not an assert: python -O would drop it
        raise RuntimeError("the metrics extra is not installed")
    return prometheus_client.make_wsgi_app()


def register_queue_depth_collector() -> None:
    """Register the database collector on the default registry, once per process."""
    global _collector
    if not ENABLED or _collector is not None:
        return
    _collector = QueueDepthCollector()
    prometheus_client.REGISTRY.register(_collector)


def register_schedule_collector() -> None:
    """Register the schedules' collector on the default registry, once per process."""
    global _schedule_collector
    if not ENABLED or _schedule_collector is not None:
        return
    _schedule_collector = ScheduleCollector()
    prometheus_client.REGISTRY.register(_schedule_collector)


def register_database_health_collector() -> None:
    """Register the database-health collector on the default registry, once per process."""
    global _health_collector
    if not ENABLED or _health_collector is not None:
        return
    _health_collector = DatabaseHealthCollector()
    prometheus_client.REGISTRY.register(_health_collector)


register_queue_depth_collector()
register_schedule_collector()
register_database_health_collector()
