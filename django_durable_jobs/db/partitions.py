"""The job table's partitions: finished jobs kept in time ranges, dropped whole.

``durable_jobs_job`` is partitioned by range of ``PARTITION_KEY``: the time a
job finished when it is completed or cancelled, ``infinity`` otherwise. So
every job in flight (pending, running, waiting) and every dead job is in one
partition, ``durable_jobs_job_active``, with the claim's, the lease's and
flow control's indexes; a job that completes or is cancelled moves (the
UPDATE that finishes it is a move, done by PostgreSQL) to the partition of
its ``completed_at``, which has only the indexes the admin, the API and the
CLI list by. Retention drops a partition whose range is older than the
retention period: no row is deleted one by one, no dead tuple is left, and
the active partition stays as small as the work in flight.

- ``durable_jobs_job_past``: the table as it was before this layout (the
  migration made it a partition without rewriting it), finished jobs up to
  the migration's cutover; dropped whole too, once its range is past the
  retention period.
- ``durable_jobs_job_hYYYYMMDD_HHMM``: one per ``HISTORY_PARTITION``
  interval (a day by default), created ahead by the workers' maintenance.
- ``durable_jobs_job_other``: the default partition, for a finished job
  whose range has no partition yet (a worker that has been down for days):
  it keeps the write from failing, and retention deletes its rows one by
  one (there are none while the maintenance runs).

Each partition carries a CHECK on ``status``, so that PostgreSQL leaves out
the partitions that cannot hold a row of the statuses a query asks for: the
claim and the reaper read the active partition only.

DDL cannot take parameters: names and bounds are composed with
``psycopg.sql`` (identifiers and literals quoted by psycopg).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import connections, transaction
from psycopg import sql

JOB_TABLE = "durable_jobs_job"
ACTIVE = "durable_jobs_job_active"
PAST = "durable_jobs_job_past"
OTHER = "durable_jobs_job_other"
RANGE_PREFIX = "durable_jobs_job_h"
_RANGE_NAME = re.compile(r"^durable_jobs_job_h(\d{8})_(\d{4})$")

#: Where a row goes: when it finished, for the statuses kept as history.
#: A completed row without completed_at (only written by hand) goes to the
#: oldest range, never to a missing one.
PARTITION_KEY = (
    "(CASE WHEN status IN ('completed', 'cancelled') "
    "THEN COALESCE(completed_at, '-infinity') ELSE 'infinity'::timestamptz END)"
)
#: The statuses of the history partitions (the rest stay in the active one).
HISTORY_STATUSES = ("completed", "cancelled")
_HISTORY_CHECK = "status IN ('completed', 'cancelled')"
_ACTIVE_CHECK = "status NOT IN ('completed', 'cancelled')"

#: The indexes of a history partition: what the admin, the API and the CLI
#: list by (newest first, by status, type or queue), the id every lookup
#: probes, the keyed rows (a replay's lookup, the keys a drop deletes), and
#: completion time. Suffix, definition.
HISTORY_INDEXES = (
    ("id", "UNIQUE INDEX {name} ON {table} (id)"),
    ("status", "INDEX {name} ON {table} (status, created_at DESC)"),
    ("created", "INDEX {name} ON {table} (created_at DESC)"),
    ("type", "INDEX {name} ON {table} (type, created_at DESC)"),
    ("queue", "INDEX {name} ON {table} (queue, created_at DESC)"),
    ("key", "INDEX {name} ON {table} (idempotency_key) WHERE idempotency_key IS NOT NULL"),
    # jobs prune's batches inside a range (oldest first), and the default
    # partition's pruning.
    ("finished", "INDEX {name} ON {table} (completed_at)"),
)

#: How long DDL waits for a lock before giving up until the next round. A
#: DETACH asks for the job table's ACCESS EXCLUSIVE lock (an ATTACH for the
#: default partition's): while it waits, the statements that come after it
#: wait too, so it must give up fast behind a long query that holds the table.
LOCK_TIMEOUT = "500ms"


class Partition(NamedTuple):
    name: str
    start: datetime | None  # None: from MINVALUE (the past partition)
    end: datetime | None  # None: the default partition or MAXVALUE


def floor(moment: datetime, interval: timedelta) -> datetime:
    """The start of the ``interval`` (counted from the epoch, UTC) that holds ``moment``."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    steps = (moment - epoch) // interval
    return epoch + steps * interval


def range_name(start: datetime) -> str:
    return f"{RANGE_PREFIX}{start.astimezone(UTC):%Y%m%d_%H%M}"


def _execute(cursor: Any, statement: sql.Composable | str) -> None:
    cursor.execute(statement)


def _history_table(cursor: Any, name: str) -> None:
    """Create ``name`` like the job table, with the history's CHECK and indexes (not attached)."""
    table = sql.Identifier(name)
    _execute(
        cursor,
        sql.SQL(
            "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)"
        ).format(table, sql.Identifier(JOB_TABLE)),
    )
    _execute(
        cursor,
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK (" + _HISTORY_CHECK + ")").format(
            table, sql.Identifier(f"{name}_finished")
        ),
    )
    for suffix, definition in HISTORY_INDEXES:
        _execute(
            cursor,
            sql.SQL("CREATE " + definition).format(
                name=sql.Identifier(f"{name}_{suffix}"), table=table
            ),
        )


def create_range(cursor: Any, start: datetime, end: datetime) -> str:
    """Create and attach the history partition of ``[start, end)``; its name."""
    name = range_name(start)
    _history_table(cursor, name)
    _execute(
        cursor,
        sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
            sql.Identifier(JOB_TABLE), sql.Identifier(name), sql.Literal(start), sql.Literal(end)
        ),
    )
    return name


def create_default(cursor: Any) -> None:
    _history_table(cursor, OTHER)
    _execute(
        cursor,
        sql.SQL("ALTER TABLE {} ATTACH PARTITION {} DEFAULT").format(
            sql.Identifier(JOB_TABLE), sql.Identifier(OTHER)
        ),
    )


def partitions(cursor: Any) -> list[Partition]:
    """The job table's partitions with their bounds, oldest first (the active one last)."""
    cursor.execute(
        """
        SELECT child.relname, pg_get_expr(child.relpartbound, child.oid)
        FROM pg_inherits
        JOIN pg_class AS child ON child.oid = pg_inherits.inhrelid
        WHERE pg_inherits.inhparent = %s::regclass
        """,
        [JOB_TABLE],
    )
    found = []
    for name, bound in cursor.fetchall():
        if bound == "DEFAULT":
            found.append(Partition(name, None, None))
            continue
        low, high = re.findall(r"\(([^)]*)\)", bound)
        found.append(Partition(name, _bound(low), _bound(high)))
    far = datetime.max.replace(tzinfo=UTC)
    return sorted(found, key=lambda p: (p.end is None, p.end or far, p.name))


def _bound(text: str) -> datetime | None:
    text = text.strip().strip("'")
    if text in ("MINVALUE", "MAXVALUE", "infinity"):
        return None
    return datetime.fromisoformat(text)


def is_partitioned(cursor: Any) -> bool:
    cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [JOB_TABLE])
    row = cursor.fetchone()
    return row is not None and row[0] == "p"


def missing_ranges(
    existing: list[Partition], *, now: datetime, interval: timedelta, ahead: int
) -> Iterator[tuple[datetime, datetime]]:
    """The ranges from ``now``'s to ``ahead`` intervals later that no partition covers yet.

    A range that overlaps an existing one (the past partition's cutover, a
    range of another interval after ``HISTORY_PARTITION`` changed) is
    shortened to start where that one ends.
    """
    covered_until = max(
        (p.end for p in existing if p.end is not None and p.name != ACTIVE), default=None
    )
    start = floor(now, interval)
    for _ in range(ahead + 1):
        end = start + interval
        if covered_until is None or end > covered_until:
            yield max(start, covered_until) if covered_until else start, end
            covered_until = end
        start = end


def ensure_ranges(
    using: str, *, interval: timedelta, ahead: int, lock_key: int | None = None
) -> list[str] | None:
    """Create the history partitions from now's interval to ``ahead`` more; their names.

    In one transaction, each statement waiting at most ``LOCK_TIMEOUT`` for
    its locks: ATTACH takes the table's SHARE UPDATE EXCLUSIVE lock, which
    blocks no read or write, and the default partition's ACCESS EXCLUSIVE
    lock (it holds the rows of missing ranges only). What could not be
    created now is created by the next round; meanwhile those rows go to
    the default partition. None, and nothing done, when another worker
    holds ``lock_key`` (a transaction-level advisory lock).
    """
    connection = connections[using]
    with transaction.atomic(using=using), connection.cursor() as cursor:
        if not is_partitioned(cursor):
            return []
        if lock_key is not None:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [lock_key])
            if not cursor.fetchone()[0]:
                return None
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
        ranges = list(missing_ranges(partitions(cursor), now=now, interval=interval, ahead=ahead))
        return [create_range(cursor, start, end) for start, end in ranges]


def ahead_for(interval: timedelta) -> int:
    """How many ranges to create ahead of now's: two, and at least ten minutes' worth.

    Few: each is planned over by a query that reads finished jobs without a
    status filter; a worker that stays down longer than that finds its
    first outcomes in the default partition, and creates the ranges at start.
    """
    return max(2, -(-timedelta(minutes=10) // interval))


def expired(existing: list[Partition], before: datetime) -> list[Partition]:
    """The history partitions whose whole range is older than ``before`` (never the default)."""
    return [p for p in existing if p.end is not None and p.name != ACTIVE and p.end <= before]


def expired_before(using: str, older_than: timedelta) -> list[Partition]:
    """The history partitions whose range ended more than ``older_than`` ago (the
    database's clock); none when the table is not partitioned."""
    with connections[using].cursor() as cursor:
        if not is_partitioned(cursor):
            return []
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
        return expired(partitions(cursor), now - older_than)


def detach(using: str, partition: Partition, *, lock_key: int | None = None) -> int | None:
    """Take a history partition out of the job table, with what references its jobs.

    In one transaction: the idempotency keys of its keyed jobs (they are
    held while their job exists), their dependency edges and step records
    (tables without foreign keys to the partitioned job table), then the
    DETACH: from its commit on, its jobs are gone from the queue. The
    deletes cost in proportion to the jobs that used keys, dependencies or
    steps; the partition's own rows are never deleted one by one. Its
    files are removed by ``drop_detached``, outside this transaction: a
    DROP's unlink of a large table (about 135 ms a million jobs here) then
    holds no lock of the job table. The past partition is emptied by
    TRUNCATE instead, and kept. Returns PostgreSQL's estimate of its rows;
    None, and nothing done, when another pruner holds ``lock_key`` (a
    transaction-level advisory lock).
    """
    table = sql.Identifier(partition.name)
    connection = connections[using]
    with transaction.atomic(using=using), connection.cursor() as cursor:
        if lock_key is not None:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [lock_key])
            if not cursor.fetchone()[0]:
                return None
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(
            sql.SQL("SELECT reltuples::bigint FROM pg_class WHERE oid = {}::regclass").format(
                sql.Literal(partition.name)
            )
        )
        (estimate,) = cursor.fetchone()
        if partition.name == PAST:
            # Emptied, not dropped: prune_other reads it by name. Only when
            # it holds a row, so that its lock is not asked for every round.
            cursor.execute(sql.SQL("SELECT EXISTS (SELECT FROM {})").format(table))
            if not cursor.fetchone()[0]:
                return 0
        # A side table nobody uses (no keyed job, no dependency, no step) is
        # not joined with the partition's million rows at all.
        cursor.execute(
            "SELECT EXISTS (SELECT FROM durable_jobs_idempotency),"
            " EXISTS (SELECT FROM durable_jobs_dependency), EXISTS (SELECT FROM durable_jobs_step)"
        )
        keyed, linked, stepped = cursor.fetchone()
        for used, statement in (
            (
                keyed,
                "DELETE FROM durable_jobs_idempotency AS k USING {t} AS j WHERE"
                " j.idempotency_key IS NOT NULL AND k.key = j.idempotency_key AND k.job_id = j.id",
            ),
            (
                linked,
                "DELETE FROM durable_jobs_dependency AS e WHERE e.child_id IN (SELECT id FROM {t})",
            ),
            (
                linked,
                "DELETE FROM durable_jobs_dependency AS e"
                " WHERE e.parent_id IN (SELECT id FROM {t})",
            ),
            (stepped, "DELETE FROM durable_jobs_step AS s WHERE s.job_id IN (SELECT id FROM {t})"),
        ):
            if used:
                cursor.execute(sql.SQL(statement).format(t=table))
        if partition.name == PAST:
            cursor.execute(sql.SQL("TRUNCATE {}").format(table))
        else:
            cursor.execute(
                sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
                    sql.Identifier(JOB_TABLE), table
                )
            )
    return max(int(estimate), 0)


def drop_detached(using: str) -> list[str]:
    """DROP the range tables that are no longer partitions of the job table; their names.

    What ``detach`` left, and what a worker that died between a detach and
    its drop left: a table named as a range that is not attached. Each in
    a transaction of its own; a DROP locks that table only.
    """
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.relname FROM pg_class AS c
            WHERE c.relname LIKE %s AND c.relkind = 'r'
                AND c.relnamespace = current_schema()::regnamespace
                AND NOT EXISTS (SELECT FROM pg_inherits AS i WHERE i.inhrelid = c.oid)
            ORDER BY c.relname
            """,
            [RANGE_PREFIX.replace("_", "\\_") + "%"],
        )
        names = [row[0] for row in cursor.fetchall() if _RANGE_NAME.match(row[0])]
    for name in names:
        with transaction.atomic(using=using), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cursor.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
    return names


def analyze(using: str, *, unless_within: timedelta | None = None) -> bool:
    """ANALYZE the partitioned table itself: autovacuum analyzes its partitions, never it.

    The planner estimates a query on the parent (the admin's count by
    status, a filter on several partitions) from the parent's statistics.
    Before PostgreSQL 17 (``ANALYZE ONLY``) it analyzes every partition too:
    0.2-0.4 s of a core each time in the soak, where the ranges of a minute
    changed the partitions every minute. Proportions that change that
    slowly need no fresher statistics: with ``unless_within``, nothing is
    done (False) when any session analyzed the table that recently
    (``pg_stat_user_tables`` keeps the time for the parent too).
    """
    with connections[using].cursor() as cursor:
        if unless_within is not None:
            cursor.execute(
                "SELECT GREATEST(last_analyze, last_autoanalyze)"
                " > now() - make_interval(secs => %s)"
                " FROM pg_stat_user_tables WHERE relid = %s::regclass",
                [unless_within.total_seconds(), JOB_TABLE],
            )
            row = cursor.fetchone()
            if row is not None and row[0]:
                return False
        cursor.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(JOB_TABLE)))
    return True


def analyze_interval(interval: timedelta) -> timedelta:
    """The least time between two ANALYZEs of the partitioned table by the maintenance:
    a range's length, and at least ten minutes."""
    return max(interval, timedelta(minutes=10))


# -- the migration (0003_partitioned_jobs) --------------------------------


def _indexes(cursor: Any, table: str) -> list[tuple[str, str, str | None]]:
    """``(name, definition, constraint name or None)`` of each index on ``table``."""
    cursor.execute(
        """
        SELECT index.relname, pg_get_indexdef(pg_index.indexrelid), constraint_.conname
        FROM pg_index
        JOIN pg_class AS index ON index.oid = pg_index.indexrelid
        LEFT JOIN pg_constraint AS constraint_ ON constraint_.conindid = pg_index.indexrelid
            AND constraint_.conrelid = pg_index.indrelid
        WHERE pg_index.indrelid = %s::regclass
        ORDER BY index.relname
        """,
        [table],
    )
    return list(cursor.fetchall())


def _on(definition: str, table: str, old_name: str, new_name: str) -> str:
    """An index definition from ``pg_get_indexdef``, renamed and moved to ``table``."""
    head, _, tail = definition.partition(" USING ")
    head = re.sub(r" ON (ONLY )?\S+$", f" ON {table}", head)
    head = head.replace(f" INDEX {old_name} ", f" INDEX {new_name} ", 1)
    return f"{head} USING {tail}"


def _statuses(cursor: Any, table: str) -> list[str]:
    """The distinct statuses in ``table``, a probe of its status index each (a skip scan)."""
    cursor.execute(
        sql.SQL(
            """
            WITH RECURSIVE found (status) AS (
                SELECT min(status) FROM {t}
                UNION ALL
                SELECT (SELECT min(status) FROM {t} WHERE status > found.status)
                FROM found WHERE found.status IS NOT NULL
            )
            SELECT status FROM found WHERE status IS NOT NULL
            """
        ).format(t=sql.Identifier(table))
    )
    return [row[0] for row in cursor.fetchall()]


def convert(cursor: Any, *, interval: timedelta, statistics: str, skip: set[str]) -> datetime:
    """Make the job table partitioned, in the caller's transaction (the migration's).

    The table is not rewritten: it becomes the past partition, for the finished
    jobs up to the cutover (now; returned), once its jobs in flight and dead
    moved to the new active partition (an insert of those rows, a few thousand
    on a live queue, found through the status index). Its indexes keep their
    definitions under a ``_past`` name; the active partition gets the same ones
    under the names the models declare, but for the index names in ``skip`` (the
    idempotency key's unique index, which the key table replaces). Attaching the
    past partition checks its rows against the range (a scan, under the
    migration's lock: docs/guides/upgrading.md says what it costs). The ranges
    of ``interval`` from the cutover on are created too.
    """
    cursor.execute(f"LOCK TABLE {JOB_TABLE} IN ACCESS EXCLUSIVE MODE")
    # The cutover: now, with the table locked, so that every job finished
    # before it (a transaction that committed while this one waited for the
    # lock included) is older.
    cursor.execute("SELECT clock_timestamp()")
    cutover: datetime = cursor.fetchone()[0]
    indexes = _indexes(cursor, JOB_TABLE)
    cursor.execute(f"ALTER TABLE {JOB_TABLE} RENAME TO {PAST}")
    for name, _definition, constraint in indexes:
        if constraint is not None:
            cursor.execute(f"ALTER TABLE {PAST} RENAME CONSTRAINT {constraint} TO {name}_past")
        else:
            cursor.execute(f"ALTER INDEX {name} RENAME TO {name}_past")
    cursor.execute(f"ALTER STATISTICS {statistics} RENAME TO {statistics}_past")
    cursor.execute(
        f"CREATE TABLE {JOB_TABLE} (LIKE {PAST} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
        f" INCLUDING STORAGE) PARTITION BY RANGE ({PARTITION_KEY})"
    )
    cursor.execute(
        f"CREATE TABLE {ACTIVE} (LIKE {JOB_TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
        " INCLUDING STORAGE)"
    )
    cursor.execute(
        f"ALTER TABLE {ACTIVE} ADD CONSTRAINT {ACTIVE}_unfinished CHECK ({_ACTIVE_CHECK})"
    )
    cursor.execute(f"ALTER TABLE {ACTIVE} ADD CONSTRAINT {ACTIVE}_pkey PRIMARY KEY (id)")
    for name, definition, constraint in indexes:
        if constraint is not None or name in skip:
            continue
        cursor.execute(_on(definition, ACTIVE, name, name))
    # The key table makes keys unique; this finds a key's job (a replay,
    # the admin's search), as each history partition's own index does.
    cursor.execute(
        f"CREATE INDEX {ACTIVE}_key ON {ACTIVE} (idempotency_key) WHERE idempotency_key IS NOT NULL"
    )
    cursor.execute(f"CREATE STATISTICS {statistics} (mcv) ON queue, status FROM {ACTIVE}")
    # The rows in flight and dead move, found through the status index: a
    # NOT IN would read the whole table, twice, under the lock.
    unfinished = [status for status in _statuses(cursor, PAST) if status not in HISTORY_STATUSES]
    # The module's own constants, no input (S608).
    moved = f"SELECT * FROM {PAST} WHERE status = ANY(%s)"  # noqa: S608
    cursor.execute(f"INSERT INTO {ACTIVE} {moved}", [unfinished])
    cursor.execute(f"DELETE FROM {PAST} WHERE status = ANY(%s)", [unfinished])  # noqa: S608
    cursor.execute(
        f"ALTER TABLE {JOB_TABLE} ATTACH PARTITION {ACTIVE}"
        " FOR VALUES FROM ('infinity') TO (MAXVALUE)"
    )
    # The CHECK lets the planner leave the past partition out of the active
    # statuses' queries, and proves the range for the ATTACH (one scan).
    cursor.execute(
        sql.SQL(
            "ALTER TABLE {} ADD CONSTRAINT {} CHECK ("
            + _HISTORY_CHECK
            + " AND "
            + PARTITION_KEY
            + " < {})"
        ).format(sql.Identifier(PAST), sql.Identifier(f"{PAST}_finished"), sql.Literal(cutover))
    )
    cursor.execute(
        sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM (MINVALUE) TO ({})").format(
            sql.Identifier(JOB_TABLE), sql.Identifier(PAST), sql.Literal(cutover)
        )
    )
    create_default(cursor)
    # The ranges from the cutover: the first one ends where the interval
    # that holds it ends.
    for start, end in missing_ranges(
        partitions(cursor), now=cutover, interval=interval, ahead=ahead_for(interval)
    ):
        create_range(cursor, start, end)
    return cutover


def unconvert(cursor: Any, *, statistics: str, unique: tuple[str, str]) -> None:
    """The way back (``migrate durable_jobs 0002``): one plain table with every row.

    A copy of every row, under the migration's lock: for a development
    database, not for a table of millions. ``unique`` is the idempotency
    key's unique index (name, columns and predicate), restored.
    """
    cursor.execute(f"LOCK TABLE {JOB_TABLE} IN ACCESS EXCLUSIVE MODE")
    indexes = [
        row for row in _indexes(cursor, ACTIVE) if row[2] is None and row[0] != f"{ACTIVE}_key"
    ]
    # LIKE the partitioned table: the models' CHECK constraints, not the
    # partitions' own.
    cursor.execute(
        f"CREATE TABLE {JOB_TABLE}_plain (LIKE {JOB_TABLE} INCLUDING DEFAULTS"
        " INCLUDING CONSTRAINTS INCLUDING STORAGE)"
    )
    cursor.execute(f"INSERT INTO {JOB_TABLE}_plain SELECT * FROM {JOB_TABLE}")  # noqa: S608
    cursor.execute(f"DROP TABLE {JOB_TABLE}")
    cursor.execute(f"ALTER TABLE {JOB_TABLE}_plain RENAME TO {JOB_TABLE}")
    cursor.execute(f"ALTER TABLE {JOB_TABLE} ADD CONSTRAINT {JOB_TABLE}_pkey PRIMARY KEY (id)")
    for name, definition, _constraint in indexes:
        cursor.execute(_on(definition, JOB_TABLE, name, name))
    name, rest = unique
    cursor.execute(f"CREATE UNIQUE INDEX {name} ON {JOB_TABLE} {rest}")
    cursor.execute(f"CREATE STATISTICS {statistics} (mcv) ON queue, status FROM {JOB_TABLE}")
