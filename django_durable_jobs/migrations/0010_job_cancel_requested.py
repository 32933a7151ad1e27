# A nullable column without a default: a catalog-only change, no table rewrite
# and no scan, so it is safe on a big, busy table.

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0009_flow_control"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="cancel_requested_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When a cancel of the running job was requested.",
                null=True,
                verbose_name="cancel requested at",
            ),
        ),
    ]
