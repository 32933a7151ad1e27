"""Daily history ranges for the benchmarks that fill finished jobs by SQL.

A database migrated today has range partitions from the migration's moment
on only: finished jobs filled by SQL with a completion time in the past
would all land in the default partition (``durable_jobs_job_other``), a
layout no long-running queue has. A queue that has run for ``days`` days
has a range a day (``HISTORY_PARTITION = "1d"``) holding that day's jobs.
``daily_ranges`` makes that layout in a new (empty) database: the ranges
the migration made are dropped, the empty past partition ends where the
first day starts, and a range is created for each day up to ``ahead`` days
after today, as the workers' maintenance would have.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import DEFAULT_DB_ALIAS, connection, connections

from django_durable_jobs.db import partitions


def daily_ranges(days: int, *, ahead: int = 2, using: str = DEFAULT_DB_ALIAS) -> datetime:
    """The job table's history as ``days`` daily ranges up to today (and ``ahead`` more);
    the first range's start. For a table without finished jobs (a new database)."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first = today - timedelta(days=days)
    with connections[using].cursor() as cursor:
        for partition in partitions.partitions(cursor):
            if partition.name.startswith(partitions.RANGE_PREFIX):
                cursor.execute(f"DROP TABLE {partition.name}")
        cursor.execute(f"ALTER TABLE durable_jobs_job DETACH PARTITION {partitions.PAST}")
        cursor.execute(
            f"ALTER TABLE {partitions.PAST} DROP CONSTRAINT IF EXISTS {partitions.PAST}_finished"
        )
        cursor.execute(
            f"ALTER TABLE durable_jobs_job ATTACH PARTITION {partitions.PAST}"
            " FOR VALUES FROM (MINVALUE) TO (%s)",
            [first],
        )
        for day in range(days + ahead):
            start = first + timedelta(days=day)
            partitions.create_range(cursor, start, start + timedelta(days=1))
    return first


def ranges_before(moment: datetime) -> list[str]:
    """The names of the history ranges that end at or before ``moment``."""
    with connection.cursor() as cursor:
        return [
            p.name
            for p in partitions.partitions(cursor)
            if p.name.startswith(partitions.RANGE_PREFIX) and p.end is not None and p.end <= moment
        ]


def truncate_all_but(kept: list[str]) -> None:
    """Empty every partition of the job table but ``kept`` (and the side tables): a run's
    own jobs gone, a filled history kept, in moments whatever its size."""
    with connection.cursor() as cursor:
        names = [p.name for p in partitions.partitions(cursor) if p.name not in kept]
        cursor.execute(
            "TRUNCATE durable_jobs_dependency, durable_jobs_step, durable_jobs_idempotency, "
            + ", ".join(names)
        )
