"""The active partition loses its indexes by status, type and queue of every row.

Every enqueue wrote an entry into each index of the active partition, and
every claim (an update that changes ``status``, so never HOT) wrote one
again into each whose predicate the running job meets. Three of those
indexes, ``durable_jobs_status_idx``, ``durable_jobs_type_idx`` and
``durable_jobs_queue_idx``, served only the lists: an enqueue now writes 4
index entries instead of 7, a claim 3 instead of 6: a third less WAL per
enqueued job, bulk enqueue 1.38 times as fast, and 5 to 17 % less
PostgreSQL CPU per job in a worker (docs/benchmarks.md, "A narrower active
partition"). The history partitions keep theirs: the finished jobs are
where a list filtered by type or queue reads many rows.

What serves the lists of jobs in flight now: ``durable_jobs_created_idx``
(newest first, a filter checked on each row), the claim's indexes for
pending jobs, ``durable_jobs_lease_idx`` for running ones, and a new partial
index, ``durable_jobs_held_idx``, for waiting and dead ones (the Dead jobs
list, bulk requeue), which a job pays for only when it enters one of those
statuses.

Not atomic: the indexes are built and dropped ``CONCURRENTLY``, so a live
queue keeps enqueueing and claiming meanwhile (docs/guides/upgrading.md);
inside a transaction that ``migrate`` was called in (a test's), the plain
way.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

ACTIVE = "durable_jobs_job_active"
HELD = "durable_jobs_held_idx"
DROPPED = {
    "durable_jobs_status_idx": "(status, created_at DESC)",
    "durable_jobs_type_idx": "(type, created_at DESC)",
    "durable_jobs_queue_idx": "(queue, created_at DESC)",
}


def _run(schema_editor: Any, statements: list[str]) -> None:
    # CONCURRENTLY cannot run in a transaction block: a migrate run inside
    # one (a test's transaction) builds and drops the plain way, under a
    # lock that no other session waits for there.
    concurrently = not schema_editor.connection.in_atomic_block
    for statement in statements:
        if not concurrently:
            statement = statement.replace(" CONCURRENTLY", "")
        schema_editor.execute(statement)


def forwards(apps: Any, schema_editor: Any) -> None:
    _run(
        schema_editor,
        [
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {HELD} ON {ACTIVE}"
            " (status, created_at DESC) WHERE status IN ('waiting', 'dead')",
            *(f"DROP INDEX CONCURRENTLY IF EXISTS {name}" for name in DROPPED),
        ],
    )


def backwards(apps: Any, schema_editor: Any) -> None:
    _run(
        schema_editor,
        [
            *(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {ACTIVE} {columns}"
                for name, columns in DROPPED.items()
            ),
            f"DROP INDEX CONCURRENTLY IF EXISTS {HELD}",
        ],
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("durable_jobs", "0004_keyed_claim_function"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, backwards, elidable=False)],
            state_operations=[
                *(migrations.RemoveIndex(model_name="job", name=name) for name in DROPPED),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        fields=["status", "-created_at"],
                        name=HELD,
                        condition=models.Q(status__in=["waiting", "dead"]),
                    ),
                ),
            ],
        ),
    ]
