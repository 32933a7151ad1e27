"""The job table partitioned: finished jobs in time ranges, dropped whole by retention.

``durable_jobs_job`` becomes a table partitioned by when a job finished
(``db/partitions.py`` describes the layout): the jobs in flight and the dead
ones in ``durable_jobs_job_active``, with the claim's indexes; the completed
and cancelled ones in a partition per ``HISTORY_PARTITION`` interval, which
retention drops whole. The table as it was becomes the first of those,
``durable_jobs_job_past``, without being rewritten: its unfinished rows
move to the active partition, then one scan checks the rest against its
range, under this migration's lock (docs/guides/upgrading.md has the
numbers and the steps for a table of tens of millions of rows).

A unique index on a partitioned table must include the partition key, so
idempotency keys are made unique by a table of their own,
``durable_jobs_idempotency`` (key, job), filled here from the keyed jobs.
For the same reason no foreign key can point at the job table: the edges,
steps and event waiters keep their columns without the constraint, and
whatever deletes jobs deletes them too (the ORM's cascade, the pruning's
statements).
"""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from django_durable_jobs.constants import IDEMPOTENCY_CONSTRAINT, QUEUE_STATUS_STATISTICS
from django_durable_jobs.db import partitions

UNIQUE_KEY = (IDEMPOTENCY_CONSTRAINT, "(idempotency_key) WHERE idempotency_key IS NOT NULL")


def forwards(apps: Any, schema_editor: Any) -> None:
    # The cutover is now (with the table locked): the past partition holds
    # every job finished before, the ranges of HISTORY_PARTITION start there
    # (the workers' maintenance creates the next ones).
    from django_durable_jobs.conf import jobs_settings
    from django_durable_jobs.durations import parse_duration

    with schema_editor.connection.cursor() as cursor:
        partitions.convert(
            cursor,
            interval=parse_duration(jobs_settings.HISTORY_PARTITION),
            statistics=QUEUE_STATUS_STATISTICS,
            skip={IDEMPOTENCY_CONSTRAINT},
        )
        cursor.execute(
            "INSERT INTO durable_jobs_idempotency (key, job_id)"
            " SELECT idempotency_key, id FROM durable_jobs_job WHERE idempotency_key IS NOT NULL"
        )


def backwards(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DELETE FROM durable_jobs_idempotency")
        partitions.unconvert(cursor, statistics=QUEUE_STATUS_STATISTICS, unique=UNIQUE_KEY)


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0002_durable_steps"),
    ]

    operations = [
        migrations.AlterField(
            model_name="jobdependency",
            name="child",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="parent_links",
                to="durable_jobs.job",
                verbose_name="child",
            ),
        ),
        migrations.AlterField(
            model_name="jobdependency",
            name="parent",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="child_links",
                to="durable_jobs.job",
                verbose_name="parent",
            ),
        ),
        migrations.AlterField(
            model_name="jobstep",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="steps",
                to="durable_jobs.job",
                verbose_name="job",
            ),
        ),
        migrations.AlterField(
            model_name="eventwaiter",
            name="job",
            field=models.OneToOneField(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                primary_key=True,
                related_name="event_wait",
                serialize=False,
                to="durable_jobs.job",
                verbose_name="job",
            ),
        ),
        migrations.CreateModel(
            name="IdempotencyKey",
            fields=[
                (
                    "key",
                    models.CharField(
                        max_length=255, primary_key=True, serialize=False, verbose_name="key"
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="durable_jobs.job",
                        verbose_name="job",
                    ),
                ),
            ],
            options={
                "verbose_name": "idempotency key",
                "verbose_name_plural": "idempotency keys",
                "db_table": "durable_jobs_idempotency",
                "default_permissions": (),
            },
        ),
        # The database's side of the unique key is the past partition's index
        # (renamed) and the key table; the models no longer declare it.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="job", name=IDEMPOTENCY_CONSTRAINT),
            ],
        ),
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
