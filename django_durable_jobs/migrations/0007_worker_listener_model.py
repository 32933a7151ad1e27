"""The workers' listeners table (migration 0006) as a model the ORM can read.

State only: ``managed = False``, so this creates nothing in the database.
``WorkerListener`` lets the admin's list of workers say which sleep
(enqueues NOTIFY them) and which are awake (they claim on their own), with
the ORM rather than SQL of its own. The workers still write the table
through the gateway (``db.mark_listener``).
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0006_notify_sleeping_workers"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkerListener",
            fields=[
                (
                    "worker_id",
                    models.CharField(
                        max_length=200, primary_key=True, serialize=False, verbose_name="worker id"
                    ),
                ),
                ("sleeping", models.BooleanField(verbose_name="sleeping")),
                ("changed_at", models.DateTimeField(verbose_name="changed at")),
            ],
            options={
                "verbose_name": "worker listener",
                "verbose_name_plural": "worker listeners",
                "db_table": "durable_jobs_listener",
                "managed": False,
                "default_permissions": (),
            },
        ),
    ]
