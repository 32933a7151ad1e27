"""New job ids are time-ordered UUIDs (ids.py); a Python default only, no change in the table."""

from __future__ import annotations

from django.db import migrations, models

import django_durable_jobs.ids


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0007_schedule"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="id",
            field=models.UUIDField(
                default=django_durable_jobs.ids.new_job_id,
                editable=False,
                primary_key=True,
                serialize=False,
            ),
        ),
    ]
