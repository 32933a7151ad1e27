"""The throttle table: per-queue bookkeeping for the claims of queues with limits (flow.py)."""

from __future__ import annotations

import django.contrib.postgres.fields
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
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
                    "starts",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.DateTimeField(), blank=True, default=list, size=None
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
    ]
