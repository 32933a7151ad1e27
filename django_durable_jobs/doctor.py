"""The database's health as the queue sees it, and what to do about it.

What hurts a PostgreSQL queue in production is rarely its own claim: it is
a transaction elsewhere (a report, a ``pg_dump``, a session left ``idle in
transaction``, a standby's ``hot_standby_feedback``, a forgotten replication
slot or prepared transaction) that holds back the vacuum *horizon*: no
vacuum may remove a row version that transaction could still see, so the
dead rows every claim and every outcome leave behind pile up in the job
table and its indexes, and each claim reads through more of them.

This module reads that once (``read``: the gateway's ``db/health.py``
queries, plus the queue depth for the oldest pending jobs), and turns a
reading into findings with what to do (``diagnose``), lines for a
worker's ``/healthz`` (``health_notes``), the admin's notice
(``horizon_slows_queue``) and JSON (``as_dict``). ``manage.py jobs doctor``
prints them; ``metrics.DatabaseHealthCollector`` exports the numbers.
``cached_reading`` serves the scrapes, probes and pages that come often.

The thresholds are the ``HEALTH_*`` settings. A finding of severity
``operator`` needs one (``jobs doctor`` exits 1); ``info`` findings do not.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import db
from .conf import jobs_settings
from .db.health import HorizonHolder, TableHealth, VacuumSettings

#: How long one reading serves the scrapes, probes and pages (``cached_reading``).
HEALTH_CACHE_SECONDS = 5.0
OPERATOR = "operator"
INFO = "info"


@dataclass(frozen=True)
class Thresholds:
    """The ``HEALTH_*`` settings, read once per diagnosis."""

    horizon_age_seconds: float
    dead_tuple_ratio: float
    min_dead_tuples: int
    oldest_pending_seconds: float

    @classmethod
    def from_settings(cls) -> Thresholds:
        return cls(
            float(jobs_settings.HEALTH_HORIZON_AGE_SECONDS),
            float(jobs_settings.HEALTH_DEAD_TUPLE_RATIO),
            int(jobs_settings.HEALTH_MIN_DEAD_TUPLES),
            float(jobs_settings.HEALTH_OLDEST_PENDING_SECONDS),
        )


@dataclass(frozen=True)
class Reading:
    """One look at the database (``read``)."""

    holders: list[HorizonHolder]
    #: Pids of this database's sessions whose details this role may not read.
    hidden: list[int]
    tables: list[TableHealth]
    settings: VacuumSettings
    #: ``{queue: seconds}`` of the oldest runnable pending job of each queue not
    #: paused; None when the reading left the jobs out.
    oldest_pending: dict[str, float] | None = None
    paused: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Finding:
    severity: str  # OPERATOR or INFO
    #: What it is about: "horizon", "slot", "prepared", "hidden_sessions",
    #: "dead_tuples", "autovacuum", "track_counts", "oldest_pending".
    code: str
    #: Its subject: a pid, a slot's name, a gid, a table, a queue ("" for the server).
    subject: str
    text: str
    advice: str

    def as_dict(self) -> dict[str, str]:
        return {
            "severity": self.severity,
            "code": self.code,
            "subject": self.subject,
            "text": self.text,
            "advice": self.advice,
        }


def job_tables() -> list[str]:
    """The package's tables, from its models (a table a later model adds is read too),
    and the job table's active partition on its own: the partitioned table sums
    its partitions, where the dead tuples of the hot rows would drown in the
    history's live ones (``db/partitions.py``). Unmanaged models count: the
    workers' listeners table (``WorkerListener``) is updated at every change
    of a worker's mark, and its dead tuples are the enqueues' to read past."""
    from django.apps import apps

    from .db import partitions

    config = apps.get_app_config("durable_jobs")
    return sorted(
        {
            model._meta.db_table
            for model in config.get_models(include_auto_created=True)
            if not model._meta.proxy
        }
        | {partitions.ACTIVE}
    )


def read(using: str | None = None, *, jobs: bool = True) -> Reading:
    """Read the database's health: five small queries (six with ``jobs``).

    ``jobs``: the oldest runnable pending job of each queue too (the queue
    depth's query, which the metrics run on their own). Raises
    ``DatabaseError`` when the database does not answer.
    """
    from .models import QueueState

    alias = db.database_alias(using)
    oldest: dict[str, float] | None = None
    paused: frozenset[str] = frozenset()
    if jobs:
        paused = frozenset(QueueState.objects.using(alias).paused().values_list("name", flat=True))
        oldest = {
            queue: age
            for queue, status, _count, age in db.queue_depth(alias)
            if status == "pending" and age is not None
        }
    return Reading(
        holders=db.horizon_holders(alias),
        hidden=db.hidden_sessions(alias),
        tables=db.table_health(alias, job_tables()),
        settings=db.vacuum_settings(alias),
        oldest_pending=oldest,
        paused=paused,
    )


_cache: dict[str, tuple[float, Reading]] = {}
_cache_lock = threading.Lock()


def cached_reading(using: str | None = None, ttl: float = HEALTH_CACHE_SECONDS) -> Reading:
    """``read(jobs=False)``, at most once per ``ttl`` seconds per database alias.

    For the metrics' scrapes, a worker's ``/healthz`` and the admin's Queues
    page, which can come often and from many places at once.
    """
    alias = db.database_alias(using)
    with _cache_lock:
        now = time.monotonic()
        cached = _cache.get(alias)
        if cached is not None and now - cached[0] < ttl:
            return cached[1]
        reading = read(alias, jobs=False)
        _cache[alias] = (now, reading)
        return reading


def forget_cached_readings() -> None:
    """Drop the cached readings (tests, and after an operator's fix)."""
    with _cache_lock:
        _cache.clear()


# -- what a reading says ------------------------------------------------------


def table_holders(reading: Reading) -> list[HorizonHolder]:
    """The holders that hold back the job tables (a slot's catalog_xmin does not)."""
    return [h for h in reading.holders if not h.catalog_only]


def horizon_age_seconds(reading: Reading) -> float:
    """How long the job tables' horizon has been held, at most: the oldest session or
    prepared transaction holding it; 0 when none (a slot's age is not known in seconds)."""
    return max((h.age_seconds or 0.0 for h in table_holders(reading)), default=0.0)


def horizon_xid_age(reading: Reading) -> int:
    """The job tables' horizon's age in transaction ids (slots included); 0 when none."""
    return max((h.xid_age or 0 for h in table_holders(reading)), default=0)


def oldest_holder(reading: Reading) -> HorizonHolder | None:
    """The session or prepared transaction that has held the horizon longest."""
    timed = [h for h in table_holders(reading) if h.age_seconds is not None]
    return max(timed, key=lambda h: h.age_seconds or 0.0, default=None)


def high_dead_tuples(reading: Reading, thresholds: Thresholds) -> list[TableHealth]:
    """The job tables whose dead tuples pass both thresholds."""
    return [
        t
        for t in reading.tables
        if t.dead >= thresholds.min_dead_tuples and t.dead_ratio >= thresholds.dead_tuple_ratio
    ]


def held_too_long(reading: Reading, thresholds: Thresholds) -> list[HorizonHolder]:
    """Sessions and prepared transactions holding the job tables' horizon past the threshold."""
    return [
        h
        for h in table_holders(reading)
        if h.age_seconds is not None and h.age_seconds >= thresholds.horizon_age_seconds
    ]


def horizon_slows_queue(reading: Reading, thresholds: Thresholds) -> bool:
    """The admin's notice: the horizon is held past its threshold and dead tuples are high."""
    return bool(held_too_long(reading, thresholds)) and bool(high_dead_tuples(reading, thresholds))


def describe_seconds(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``; ``never`` for None."""
    if seconds is None:
        return "never"
    total = int(seconds)
    if total < 60:
        return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.1f} s"
    minutes, hours, days = total // 60, total // 3600, total // 86400
    if total < 3600:
        return f"{minutes} min"
    if total < 86400:
        rest = minutes % 60
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    rest = hours % 24
    return f"{days} d {rest} h" if rest else f"{days} d"


def describe_holder(holder: HorizonHolder) -> str:
    """Who holds the horizon, in words: ``session pid 1234 (psql, user bob, active)``."""
    if holder.kind == "slot":
        return f"replication slot {holder.holder!r} ({holder.backend_type}, {holder.state})"
    if holder.kind == "prepared":
        return f"prepared transaction {holder.holder!r} (owner {holder.usename})"
    details = [
        holder.application_name or "no application_name",
        f"user {holder.usename}",
    ]
    if holder.client_addr:
        details.append(f"from {holder.client_addr}")
    if holder.state:
        details.append(holder.state)
    what = "standby's walsender" if holder.backend_type == "walsender" else "session"
    return f"{what} pid {holder.pid} ({', '.join(details)})"


def _session_advice(holder: HorizonHolder) -> str:
    pid = holder.pid
    if holder.backend_type == "walsender":
        return (
            "A standby with hot_standby_feedback = on reports its oldest query's snapshot "
            "here: find that query on the standby (pg_stat_activity there) and cancel it, or "
            "run long reports on a standby without hot_standby_feedback (queries there may "
            "then be cancelled after max_standby_streaming_delay)."
        )
    if holder.state and holder.state.startswith("idle in transaction"):
        return (
            f"End it: SELECT pg_terminate_backend({pid}); (its open transaction rolls back). "
            "Then find the code that leaves transactions open, and set "
            "idle_in_transaction_session_timeout (e.g. ALTER ROLE ... SET "
            "idle_in_transaction_session_timeout = '5min') so that it cannot happen again."
        )
    return (
        f"If it may stop: SELECT pg_cancel_backend({pid}); cancels its query (its "
        f"transaction then ends), SELECT pg_terminate_backend({pid}); ends the session. "
        "Long reports and dumps belong on a replica without hot_standby_feedback; a "
        "statement_timeout on their role bounds them."
    )


def _holder_finding(holder: HorizonHolder, thresholds: Thresholds) -> Finding | None:
    """A finding about one holder, or None when it holds nothing for long."""
    age = describe_seconds(holder.age_seconds)
    xids = f"{holder.xid_age:,} transactions" if holder.xid_age is not None else "?"
    if holder.kind == "slot":
        if holder.catalog_only:
            return Finding(
                INFO,
                "slot",
                holder.holder,
                f"{describe_holder(holder)} holds back the vacuum of the system catalogs "
                f"({xids} old), not of the job tables.",
                "If no logical replication consumer uses it any more: SELECT "
                f"pg_drop_replication_slot('{holder.holder}'); (it also keeps WAL on disk).",
            )
        if holder.state == "inactive":
            return Finding(
                OPERATOR,
                "slot",
                holder.holder,
                f"{describe_holder(holder)} holds back vacuum on the job tables: its xmin is "
                f"{xids} old and no standby is connected to it.",
                "If its standby is gone for good: SELECT "
                f"pg_drop_replication_slot('{holder.holder}'); otherwise bring the standby "
                "back. An inactive slot also keeps WAL on disk until it is dropped.",
            )
        return Finding(
            INFO,
            "slot",
            holder.holder,
            f"{describe_holder(holder)} holds the horizon {xids} back: its standby sends "
            "hot_standby_feedback, so its oldest query holds back vacuum here.",
            "If dead tuples grow, look for long queries on that standby (pg_stat_activity "
            "there) and cancel them.",
        )
    if holder.age_seconds is None or holder.age_seconds < thresholds.horizon_age_seconds:
        return None
    if holder.kind == "prepared":
        return Finding(
            OPERATOR,
            "prepared",
            holder.holder,
            f"{describe_holder(holder)} was prepared {age} ago and is still neither committed "
            "nor rolled back: it holds back vacuum on the job tables (and keeps its locks).",
            f"Ask its transaction manager to finish it; if it is lost: COMMIT PREPARED "
            f"'{holder.holder}'; or ROLLBACK PREPARED '{holder.holder}'; (as its owner or a "
            "superuser, in this database), whichever its other participants did.",
        )
    return Finding(
        OPERATOR,
        "horizon",
        str(holder.pid),
        f"{describe_holder(holder)} has held a transaction open for {age} ({xids}): it "
        "holds back vacuum on the job tables, whose dead rows pile up meanwhile.",
        _session_advice(holder),
    )


def _dead_tuples_advice(
    table: TableHealth, reading: Reading, thresholds: Thresholds, horizon_held: bool
) -> str:
    name = table.table
    if horizon_held:
        return (
            "The held horizon above is the likely cause: vacuum cannot remove rows that "
            "transaction may still see. End it first; then VACUUM (VERBOSE, ANALYZE) "
            f"{name}; removes them (VERBOSE says how many remain unremovable)."
        )
    if not reading.settings.autovacuum:
        return (
            f"autovacuum is off on this server: run VACUUM (ANALYZE) {name}; from a "
            "scheduler every few minutes, or turn it on (ALTER SYSTEM SET autovacuum = on; "
            "SELECT pg_reload_conf();)."
        )
    if not table.autovacuum_enabled:
        return (
            f"autovacuum is off for this table ({table.reloptions}): ALTER TABLE {name} "
            f"RESET (autovacuum_enabled); then VACUUM (ANALYZE) {name};"
        )
    settings = reading.settings
    trigger = settings.vacuum_threshold + settings.vacuum_scale_factor * table.live
    return (
        f"Run VACUUM (VERBOSE, ANALYZE) {name}; now. autovacuum starts on a table once its "
        f"dead tuples pass autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor x "
        f"live tuples ({settings.vacuum_threshold} + {settings.vacuum_scale_factor:g} x "
        f"{table.live:,} = {trigger:,.0f} here); a queue's hot table wants it sooner: "
        f"ALTER TABLE {name} SET (autovacuum_vacuum_scale_factor = 0.01, "
        "autovacuum_vacuum_cost_delay = 1); and if it runs but cannot keep up, more "
        "autovacuum_max_workers or a higher autovacuum_vacuum_cost_limit."
    )


def diagnose(reading: Reading, thresholds: Thresholds | None = None) -> list[Finding]:
    """What the reading says, those that need an operator first."""
    thresholds = thresholds or Thresholds.from_settings()
    findings: list[Finding] = []
    if not reading.settings.track_counts:
        findings.append(
            Finding(
                OPERATOR,
                "track_counts",
                "",
                "track_counts is off: PostgreSQL counts no dead tuples, so autovacuum never "
                "starts and these figures are all zero.",
                "ALTER SYSTEM SET track_counts = on; SELECT pg_reload_conf();",
            )
        )
    for holder in reading.holders:
        finding = _holder_finding(holder, thresholds)
        if finding is not None:
            findings.append(finding)
    horizon_held = any(f.code in ("horizon", "prepared", "slot") and f.severity == OPERATOR
                       for f in findings)  # fmt: skip
    if reading.hidden:
        pids = ", ".join(str(pid) for pid in reading.hidden[:10])
        more = f" and {len(reading.hidden) - 10} more" if len(reading.hidden) > 10 else ""
        findings.append(
            Finding(
                INFO,
                "hidden_sessions",
                "",
                f"{len(reading.hidden)} session(s) of other roles (pid {pids}{more}) are "
                "hidden from this database role: whether they hold back the horizon cannot "
                "be seen.",
                "GRANT pg_read_all_stats TO <the role in DATABASES>; lets it read them.",
            )
        )
    for table in high_dead_tuples(reading, thresholds):
        findings.append(
            Finding(
                OPERATOR,
                "dead_tuples",
                table.table,
                f"{table.table}: {table.dead_ratio:.0%} of its tuples are dead "
                f"({table.dead:,} dead, {table.live:,} live); "
                f"{_vacuumed(table.vacuum_age_seconds)}. Claims and scans read through them.",
                _dead_tuples_advice(table, reading, thresholds, horizon_held),
            )
        )
    if not reading.settings.autovacuum and not any(f.code == "dead_tuples" for f in findings):
        findings.append(
            Finding(
                INFO,
                "autovacuum",
                "",
                "autovacuum is off on this server: nothing removes the job tables' dead "
                "tuples but a VACUUM someone runs.",
                "Turn it on (ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf();) or "
                "run VACUUM (ANALYZE) on the job tables from a scheduler.",
            )
        )
    for queue, age in sorted((reading.oldest_pending or {}).items()):
        if queue in reading.paused or age < thresholds.oldest_pending_seconds:
            continue
        cause = " The held horizon above slows every claim: fix that first." if horizon_held else ""
        findings.append(
            Finding(
                OPERATOR,
                "oldest_pending",
                queue,
                f"Queue {queue!r}: its oldest runnable job has waited {describe_seconds(age)}.",
                "Are workers running and serving this queue (`jobs stats`, the admin's "
                "Workers page), and do its limits hold jobs back (`jobs stats`, held back)?"
                + cause,
            )
        )
    return sorted(findings, key=lambda f: f.severity != OPERATOR)


def _vacuumed(seconds: float | None) -> str:
    if seconds is None:
        return "never vacuumed since the statistics were reset"
    return f"last vacuumed {describe_seconds(seconds)} ago"


def needs_operator(findings: Iterable[Finding]) -> bool:
    return any(f.severity == OPERATOR for f in findings)


def health_notes(reading: Reading, thresholds: Thresholds | None = None) -> list[str]:
    """Lines for a worker's ``/healthz``: what holds the horizon too long, which tables
    hold too many dead tuples. They qualify the answer, never change it: restarting the
    worker would not help."""
    thresholds = thresholds or Thresholds.from_settings()
    lines = []
    holder = oldest_holder(reading)
    age = None if holder is None else holder.age_seconds
    if holder is not None and age is not None and age >= thresholds.horizon_age_seconds:
        lines.append(
            f"vacuum horizon: held for {describe_seconds(age)} by "
            f"{describe_holder(holder)} (see manage.py jobs doctor)"
        )
    for slot in table_holders(reading):
        if slot.kind == "slot" and slot.state == "inactive":
            lines.append(
                f"vacuum horizon: held {slot.xid_age or 0:,} transactions back by inactive "
                f"replication slot {slot.holder!r} (see manage.py jobs doctor)"
            )
    for table in high_dead_tuples(reading, thresholds):
        lines.append(
            f"dead tuples: {table.table} {table.dead_ratio:.0%} dead ({table.dead:,}), "
            f"{_vacuumed(table.vacuum_age_seconds)}"
        )
    return lines


def as_dict(reading: Reading, findings: list[Finding]) -> dict[str, Any]:
    """The reading and the findings as JSON (``jobs doctor --json``)."""

    def iso(value: Any) -> Any:
        return value.isoformat() if value is not None else None

    holder = oldest_holder(reading)
    return {
        "needs_operator": needs_operator(findings),
        "horizon": {
            "age_seconds": horizon_age_seconds(reading),
            "xid_age": horizon_xid_age(reading),
            "oldest_holder": None if holder is None else _holder_dict(holder, iso),
            "holders": [_holder_dict(h, iso) for h in reading.holders],
            "hidden_sessions": reading.hidden,
        },
        "tables": [
            {
                "table": t.table,
                "live_tuples": t.live,
                "dead_tuples": t.dead,
                "dead_ratio": round(t.dead_ratio, 4),
                "last_vacuum": iso(t.last_vacuum),
                "vacuum_age_seconds": t.vacuum_age_seconds,
                "last_analyze": iso(t.last_analyze),
                "autovacuum_enabled": t.autovacuum_enabled,
                "reloptions": t.reloptions,
            }
            for t in reading.tables
        ],
        "settings": reading.settings._asdict(),
        "oldest_pending_age_seconds": reading.oldest_pending,
        "paused_queues": sorted(reading.paused),
        "findings": [f.as_dict() for f in findings],
    }


def _holder_dict(holder: HorizonHolder, iso: Any) -> dict[str, Any]:
    data = holder._asdict()
    data["since"] = iso(holder.since)
    data["query_start"] = iso(holder.query_start)
    return data
