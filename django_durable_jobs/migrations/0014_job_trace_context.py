# OpenTelemetry: the W3C trace context of the span that enqueued a job
# (django_durable_jobs/tracing.py). A nullable column without a default: a
# catalog-only change, no table rewrite.

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0013_dependencies"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="trace_context",
            field=models.JSONField(
                blank=True,
                editable=False,
                help_text="W3C trace context (traceparent, tracestate) of the span that enqueued it.",
                null=True,
                verbose_name="trace context",
            ),
        ),
    ]
