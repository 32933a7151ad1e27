"""The gateway's view of the database's vacuum health: what holds back the vacuum
horizon, the job tables' dead tuples and last vacuum, the autovacuum settings.
SQL: ``health.sql``. What the readings mean, and what to do, is ``doctor.py``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from .. import db as gateway


class HorizonHolder(NamedTuple):
    """One thing that holds back the vacuum horizon: a session, a slot or a prepared transaction."""

    kind: str  # "session", "slot" or "prepared"
    #: The session's pid (as text), the slot's name or the prepared transaction's gid.
    holder: str
    pid: int | None  # a session's pid; a slot's active walsender's
    application_name: str | None
    usename: str | None  # a prepared transaction: its owner
    client_addr: str | None
    #: A session's state ("idle in transaction", "active"); a slot: active or
    #: inactive; a prepared transaction: "prepared".
    state: str | None
    #: A session's backend type ("client backend", "walsender"); a slot's type.
    backend_type: str | None
    #: When the session's transaction began, or the transaction was prepared.
    since: datetime | None
    query_start: datetime | None
    #: The horizon's age in transaction ids.
    xid_age: int | None
    #: How long it has been held; None for a slot (PostgreSQL does not say).
    age_seconds: float | None
    #: A slot's catalog_xmin only: it holds back the system catalogs, not the job tables.
    catalog_only: bool


class TableHealth(NamedTuple):
    """Dead and live tuples and the last vacuum of one of the package's tables."""

    table: str
    live: int
    dead: int
    last_vacuum: datetime | None  # vacuum or autovacuum, whichever was later
    vacuum_age_seconds: float | None  # None: never vacuumed since the statistics were reset
    last_analyze: datetime | None
    autovacuum_enabled: bool  # False: the table's autovacuum_enabled storage option is off
    reloptions: str | None  # its storage options, as ALTER TABLE ... SET (...) wrote them

    @property
    def dead_ratio(self) -> float:
        """The share of the table's tuples that are dead, from 0 to 1."""
        total = self.live + self.dead
        return self.dead / total if total else 0.0


class VacuumSettings(NamedTuple):
    autovacuum: bool
    track_counts: bool
    vacuum_threshold: int
    vacuum_scale_factor: float
    naptime: str
    server_version: int
    #: This role sees every session's details (pg_read_all_stats, or a superuser).
    reads_all_stats: bool


def horizon_holders(using: str) -> list[HorizonHolder]:
    """Everything that holds back this database's vacuum horizon, oldest (in xids) first."""
    holders = []
    for row in gateway._run_through_django(using, "horizon_holders", {}):
        xid_age, age, catalog_only = row[10:]
        holders.append(
            HorizonHolder._make(
                (
                    *row[:10],
                    None if xid_age is None else int(xid_age),
                    None if age is None else max(float(age), 0.0),
                    bool(catalog_only),
                )
            )
        )
    return holders


def hidden_sessions(using: str) -> list[int]:
    """The pids of this database's sessions whose details this role may not read."""
    ((_count, pids),) = gateway._run_through_django(using, "hidden_sessions", {})
    return [int(pid) for pid in pids]


def table_health(using: str, tables: Sequence[str]) -> list[TableHealth]:
    """The health of each of ``tables`` (names) that exists, by name."""
    rows: list[tuple[Any, ...]] = gateway._run_through_django(
        using, "table_health", {"tables": list(tables)}
    )
    return [
        TableHealth(
            name,
            int(live or 0),
            int(dead or 0),
            last_vacuum,
            None if vacuum_age is None else max(float(vacuum_age), 0.0),
            last_analyze,
            bool(enabled),
            reloptions,
        )
        for name, live, dead, last_vacuum, vacuum_age, last_analyze, enabled, reloptions in rows
    ]


def vacuum_settings(using: str) -> VacuumSettings:
    ((autovacuum, track_counts, threshold, scale, naptime, version, reads_all),) = (
        gateway._run_through_django(using, "vacuum_settings", {})
    )
    return VacuumSettings(
        autovacuum == "on",
        track_counts == "on",
        int(threshold),
        float(scale),
        str(naptime),
        int(version),
        bool(reads_all),
    )
