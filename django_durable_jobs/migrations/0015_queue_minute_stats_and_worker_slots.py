"""What the admin's Queues and Workers pages read (issue 15).

- ``durable_jobs_queue_stats``: per queue and minute, the attempts that
  completed, failed and went dead, which the workers add up in memory and
  upsert with their heartbeat (the Queues page's chart reads it, not the job
  table).
- Two columns of the workers table, written with each heartbeat: the slots
  in use and the package version. Constant database defaults: a
  catalog-only change, and a worker of the previous release still inserts.
- ``durable_jobs_queue_held_idx``: waiting and dead jobs per queue, partial,
  so only a job entering one of these statuses pays for it; built
  CONCURRENTLY (outside a transaction), so enqueues and workers are not
  blocked on a big table.
- Extended statistics on (queue, status): the planner's estimate of one
  queue's jobs in one status, which the Queues page shows beyond its exact
  counts, reads their most common combinations instead of assuming the two
  columns independent. CREATE STATISTICS takes a lock that lets reads and
  writes go on; the next ANALYZE (autovacuum's) fills it in.
"""

from __future__ import annotations

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("durable_jobs", "0014_job_trace_context"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueMinuteStats",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue",
                        "minute",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("queue", models.CharField(max_length=100, verbose_name="queue")),
                ("minute", models.DateTimeField(verbose_name="minute")),
                (
                    "completed",
                    models.PositiveIntegerField(
                        default=0,
                        help_text="Attempts that completed their job.",
                        verbose_name="completed",
                    ),
                ),
                (
                    "failed",
                    models.PositiveIntegerField(
                        default=0,
                        help_text="Failed attempts: retried, or dead (no attempt left, or Discard).",
                        verbose_name="failed",
                    ),
                ),
                (
                    "dead",
                    models.PositiveIntegerField(
                        default=0,
                        help_text="Of the failed attempts, those that made their job dead.",
                        verbose_name="dead",
                    ),
                ),
            ],
            options={
                "verbose_name": "queue minute",
                "verbose_name_plural": "queue minutes",
                "db_table": "durable_jobs_queue_stats",
                "ordering": ["queue", "minute"],
            },
        ),
        migrations.AddField(
            model_name="workerprocess",
            name="slots_in_use",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="Slots running or holding a claimed job at the last heartbeat.",
                verbose_name="slots in use",
            ),
        ),
        migrations.AddField(
            model_name="workerprocess",
            name="version",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="The django-durable-jobs version the worker runs.",
                max_length=64,
                verbose_name="version",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status__in", ["waiting", "dead"])),
                fields=["queue", "status", "-created_at"],
                name="durable_jobs_queue_held_idx",
            ),
        ),
        migrations.RunSQL(
            "CREATE STATISTICS IF NOT EXISTS durable_jobs_queue_status_stats (mcv) "
            "ON queue, status FROM durable_jobs_job",
            "DROP STATISTICS IF EXISTS durable_jobs_queue_status_stats",
        ),
    ]
