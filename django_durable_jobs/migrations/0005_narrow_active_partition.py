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
HELD = {"durable_jobs_held_idx": "(status, created_at DESC) WHERE status IN ('waiting', 'dead')"}
DROPPED = {
    "durable_jobs_status_idx": "(status, created_at DESC)",
    "durable_jobs_type_idx": "(type, created_at DESC)",
    "durable_jobs_queue_idx": "(queue, created_at DESC)",
}


def _swap(schema_editor: Any, build: dict[str, str], drop: list[str]) -> None:
    """Build the indexes of ``build`` ({name: columns and predicate}) on the active
    partition, then drop those named in ``drop``.

    CONCURRENTLY cannot run in a transaction block: a migrate run inside one (a
    test's transaction) builds and drops the plain way, under a lock no other
    session waits for there. An interrupted concurrent build leaves its index
    behind, invalid, and ``IF NOT EXISTS`` would keep it: such an index is
    dropped and built again, so running ``migrate`` again is the way to resume.
    """
    how = "" if schema_editor.connection.in_atomic_block else " CONCURRENTLY"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT index.relname FROM pg_index"
            " JOIN pg_class AS index ON index.oid = pg_index.indexrelid"
            " WHERE index.relname = ANY(%s) AND NOT pg_index.indisvalid",
            [list(build)],
        )
        invalid = {name for (name,) in cursor.fetchall()}
    for name, definition in build.items():
        if name in invalid:
            schema_editor.execute(f"DROP INDEX{how} {name}")
        schema_editor.execute(f"CREATE INDEX{how} IF NOT EXISTS {name} ON {ACTIVE} {definition}")
    for name in drop:
        schema_editor.execute(f"DROP INDEX{how} IF EXISTS {name}")


def forwards(apps: Any, schema_editor: Any) -> None:
    _swap(schema_editor, build=HELD, drop=list(DROPPED))


def backwards(apps: Any, schema_editor: Any) -> None:
    _swap(schema_editor, build=DROPPED, drop=list(HELD))


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
                        name="durable_jobs_held_idx",
                        condition=models.Q(status__in=["waiting", "dead"]),
                    ),
                ),
            ],
        ),
    ]
