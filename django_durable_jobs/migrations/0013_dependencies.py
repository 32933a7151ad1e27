# Dependencies between jobs (enqueue(depends_on=...)): the edge table, the
# status `waiting` and the counters the release of children reads. The new
# columns have constant database defaults: a catalog-only change, no table
# rewrite. The status CHECK constraint is replaced to allow `waiting`; adding
# it back validates the existing rows once (a scan of the table, under the
# migration's lock).

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0012_claim_keyed_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobDependency",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "resolved",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        help_text="The parent's end was counted for the child.",
                        verbose_name="resolved",
                    ),
                ),
            ],
            options={
                "verbose_name": "job dependency",
                "verbose_name_plural": "job dependencies",
                "db_table": "durable_jobs_dependency",
            },
        ),
        migrations.RemoveConstraint(
            model_name="job",
            name="durable_jobs_status_valid",
        ),
        migrations.AddField(
            model_name="job",
            name="dependent_count",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="How many jobs were enqueued to wait for this one.",
                verbose_name="dependents",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="on_parent_failure",
            field=models.CharField(
                choices=[("cancel", "cancel"), ("run", "run")],
                db_default="cancel",
                default="cancel",
                help_text="When a parent ends dead or cancelled: cancel this job, or run it anyway.",
                max_length=8,
                verbose_name="on parent failure",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="parent_count",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="How many jobs this one was enqueued to wait for.",
                verbose_name="parents",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="waiting_on",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="Parents not finished yet; the job becomes pending at 0.",
                verbose_name="waiting on",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "pending"),
                    ("running", "running"),
                    ("completed", "completed"),
                    ("dead", "dead"),
                    ("cancelled", "cancelled"),
                    ("waiting", "waiting"),
                ],
                default="pending",
                max_length=16,
                verbose_name="status",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        ["pending", "running", "completed", "dead", "cancelled", "waiting"],
                    )
                ),
                name="durable_jobs_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("on_parent_failure__in", ["cancel", "run"])),
                name="durable_jobs_on_parent_failure_valid",
            ),
        ),
        migrations.AddField(
            model_name="jobdependency",
            name="child",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="parent_links",
                to="durable_jobs.job",
                verbose_name="child",
            ),
        ),
        migrations.AddField(
            model_name="jobdependency",
            name="parent",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="child_links",
                to="durable_jobs.job",
                verbose_name="parent",
            ),
        ),
        migrations.AddIndex(
            model_name="jobdependency",
            index=models.Index(fields=["parent", "child"], name="durable_jobs_dep_parent_idx"),
        ),
        migrations.AddConstraint(
            model_name="jobdependency",
            constraint=models.UniqueConstraint(
                fields=("child", "parent"), name="durable_jobs_dep_uniq"
            ),
        ),
    ]
