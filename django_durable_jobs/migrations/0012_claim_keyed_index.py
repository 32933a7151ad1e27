"""The keyed claim's own index: pending jobs with a concurrency key, in claim order.

Without it the keyed claim read the claim index and skipped, row by row,
every pending job without a key ahead of the first keyed one. Partial, so
jobs without a key never pay for it; built CONCURRENTLY (outside a
transaction), so enqueues and workers are not blocked on a big table.
"""

from __future__ import annotations

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("durable_jobs", "0011_queue_pause"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("concurrency_key__isnull", False), ("status", "pending")),
                fields=["-priority", "available_at", "created_at"],
                name="durable_jobs_claim_keyed_idx",
            ),
        ),
    ]
