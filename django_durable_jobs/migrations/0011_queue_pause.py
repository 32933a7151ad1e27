"""The queue-state table: which queues an operator paused, and until when."""

from __future__ import annotations

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0010_job_cancel_requested"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueState",
            fields=[
                (
                    "name",
                    models.CharField(
                        max_length=100, primary_key=True, serialize=False, verbose_name="name"
                    ),
                ),
                (
                    "paused_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="Empty: not paused.",
                        null=True,
                        verbose_name="paused at",
                    ),
                ),
                (
                    "paused_until",
                    models.DateTimeField(
                        blank=True,
                        help_text="When the pause lifts by itself; empty: until resumed.",
                        null=True,
                        verbose_name="paused until",
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
                "verbose_name": "queue",
                "verbose_name_plural": "queues",
                "db_table": "durable_jobs_queue",
                "ordering": ["name"],
            },
        ),
    ]
