"""Flow control: the throttle table (per-queue limits) and jobs' concurrency keys.

Adding a nullable column without a default is instant on PostgreSQL; the two
partial indexes hold no row until jobs with keys arrive, but building them
still reads the table, so they are built CONCURRENTLY (outside a
transaction): enqueues and workers are not blocked on a big table.
"""

from __future__ import annotations

import django.utils.timezone
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("durable_jobs", "0008_job_id_time_ordered"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueThrottle",
            fields=[
                (
                    "queue",
                    models.CharField(
                        max_length=100, primary_key=True, serialize=False, verbose_name="queue"
                    ),
                ),
                (
                    "updated_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, verbose_name="updated at"
                    ),
                ),
            ],
            options={
                "verbose_name": "queue throttle",
                "verbose_name_plural": "queue throttles",
                "db_table": "durable_jobs_throttle",
                "ordering": ["queue"],
            },
        ),
        # The rate window: one (start, count) per claim, read and written
        # only by the claim's SQL (db/queries.sql), so not model fields.
        migrations.RunSQL(
            "ALTER TABLE durable_jobs_throttle"
            " ADD COLUMN starts timestamptz[] NOT NULL DEFAULT '{}',"
            " ADD COLUMN counts integer[] NOT NULL DEFAULT '{}'",
            reverse_sql="ALTER TABLE durable_jobs_throttle DROP COLUMN starts, DROP COLUMN counts",
        ),
        migrations.AddField(
            model_name="job",
            name="concurrency_key",
            field=models.CharField(
                blank=True,
                help_text="With the type's concurrency_limit: at most that many running per key.",
                max_length=255,
                null=True,
                verbose_name="concurrency key",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("concurrency_key__isnull", False), ("status", "pending")),
                fields=["type", "concurrency_key", "-priority", "available_at", "created_at"],
                name="durable_jobs_key_pending_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("concurrency_key__isnull", False), ("status", "running")),
                fields=["type", "concurrency_key"],
                name="durable_jobs_key_running_idx",
            ),
        ),
    ]
