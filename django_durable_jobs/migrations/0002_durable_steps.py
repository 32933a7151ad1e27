"""Durable steps (DESIGN.md, "Durable steps"): the tables of steps, events and event waiters.

``durable_jobs_step`` holds each job's recorded steps, ``durable_jobs_event``
the events emitted (the first emit of a key wins), ``durable_jobs_event_waiter``
the jobs suspended until one arrives. On the job table, only a nullable
``waiting_for`` column (no rewrite: PostgreSQL adds a nullable column without
a default in the catalogue only); on the dependency table a ``kind`` with a
constant default (also catalogue only since PostgreSQL 11), so the migration
is instant on a table of millions of jobs.
"""

from __future__ import annotations

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Event",
            fields=[
                (
                    "key",
                    models.CharField(
                        max_length=200, primary_key=True, serialize=False, verbose_name="key"
                    ),
                ),
                ("payload", models.JSONField(blank=True, null=True, verbose_name="payload")),
                (
                    "created_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, verbose_name="emitted at"
                    ),
                ),
            ],
            options={
                "verbose_name": "event",
                "verbose_name_plural": "events",
                "db_table": "durable_jobs_event",
                "ordering": ["-created_at"],
                "default_permissions": ("view",),
            },
        ),
        migrations.AddField(
            model_name="job",
            name="waiting_for",
            field=models.JSONField(
                blank=True,
                editable=False,
                help_text="Why a suspended job waits: a time, an event or a child job.",
                null=True,
                verbose_name="waiting for",
            ),
        ),
        migrations.AddField(
            model_name="jobdependency",
            name="kind",
            field=models.CharField(
                choices=[("depends_on", "depends on"), ("awaits", "awaits")],
                db_default="depends_on",
                default="depends_on",
                max_length=16,
                verbose_name="kind",
            ),
        ),
        migrations.CreateModel(
            name="EventWaiter",
            fields=[
                (
                    "job",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="event_wait",
                        serialize=False,
                        to="durable_jobs.job",
                        verbose_name="job",
                    ),
                ),
                ("key", models.CharField(max_length=200, verbose_name="key")),
                (
                    "since",
                    models.DateTimeField(default=django.utils.timezone.now, verbose_name="since"),
                ),
            ],
            options={
                "verbose_name": "event waiter",
                "verbose_name_plural": "event waiters",
                "db_table": "durable_jobs_event_waiter",
                "indexes": [models.Index(fields=["key"], name="durable_jobs_waiter_key_idx")],
            },
        ),
        migrations.CreateModel(
            name="JobStep",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=220, verbose_name="name")),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("step", "step"),
                            ("sleep", "sleep"),
                            ("event", "event"),
                            ("child", "child job"),
                        ],
                        default="step",
                        max_length=16,
                        verbose_name="kind",
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("completed", "completed"),
                            ("failed", "failed"),
                            ("suspended", "suspended"),
                        ],
                        max_length=16,
                        verbose_name="status",
                    ),
                ),
                ("attempt", models.PositiveIntegerField(verbose_name="attempt")),
                ("position", models.PositiveIntegerField(default=0, verbose_name="position")),
                ("started_at", models.DateTimeField(verbose_name="started at")),
                (
                    "finished_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="finished at"),
                ),
                ("result", models.JSONField(blank=True, null=True, verbose_name="result")),
                (
                    "result_bytes",
                    models.PositiveIntegerField(default=0, verbose_name="result size"),
                ),
                ("error", models.TextField(blank=True, default="", verbose_name="error")),
                ("wake_at", models.DateTimeField(blank=True, null=True, verbose_name="wakes at")),
                (
                    "event_key",
                    models.CharField(
                        blank=True, max_length=200, null=True, verbose_name="event key"
                    ),
                ),
                ("child_id", models.UUIDField(blank=True, null=True, verbose_name="child job")),
                (
                    "job",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="durable_jobs.job",
                        verbose_name="job",
                    ),
                ),
            ],
            options={
                "verbose_name": "job step",
                "verbose_name_plural": "job steps",
                "db_table": "durable_jobs_step",
                "ordering": ["job", "position", "id"],
                "constraints": [
                    models.UniqueConstraint(fields=("job", "name"), name="durable_jobs_step_uniq")
                ],
            },
        ),
    ]
