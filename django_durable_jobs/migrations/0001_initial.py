"""The schema of django-durable-jobs, in one migration.

The tables: ``durable_jobs_job`` (the queue, its claim, lease, flow-control
and listing indexes, its constraints and the extended statistics on
``(queue, status)``), ``durable_jobs_dependency`` (``depends_on`` edges),
``durable_jobs_worker``, ``durable_jobs_schedule``, ``durable_jobs_throttle``
(with the rate window's two array columns, written only by the claim's
SQL), ``durable_jobs_queue`` (pauses), ``durable_jobs_queue_stats`` (per
queue and minute) and ``durable_jobs_audit``; and the job's permissions, one
per operator action.

Squashed from the sixteen migrations of the development versions, before
the first release: a database migrated by one of those must be recreated.
Columns are created in the order the old migrations left them, so both
give the same ``pg_dump --schema-only``.

The indexes are built with a plain ``CREATE INDEX`` in the migration's
transaction, not ``CONCURRENTLY`` as the development migrations did: this
migration creates the table, so the table is empty and nothing waits on
the build. An index added by a later migration, to a table that may hold
millions of rows, is built ``CONCURRENTLY`` (``AddIndexConcurrently``,
``atomic = False``) so that enqueues and workers are not blocked.
"""

from __future__ import annotations

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import django_durable_jobs.ids


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Job",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=django_durable_jobs.ids.new_job_id,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                (
                    "type",
                    models.CharField(
                        help_text="Name of the registered handler.",
                        max_length=255,
                        verbose_name="type",
                    ),
                ),
                (
                    "queue",
                    models.CharField(default="default", max_length=100, verbose_name="queue"),
                ),
                ("payload", models.JSONField(default=dict, verbose_name="payload")),
                (
                    "idempotency_key",
                    models.CharField(
                        blank=True,
                        help_text="Unique when set: enqueueing again with the same key returns this job.",
                        max_length=255,
                        null=True,
                        verbose_name="idempotency key",
                    ),
                ),
                (
                    "status",
                    models.CharField(
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
                (
                    "priority",
                    models.SmallIntegerField(
                        default=0,
                        help_text="Higher runs first.",
                        verbose_name="priority",
                    ),
                ),
                (
                    "attempts",
                    models.PositiveIntegerField(
                        default=0,
                        help_text="Counted when a worker claims the job.",
                        verbose_name="attempts",
                    ),
                ),
                (
                    "max_attempts",
                    models.PositiveIntegerField(default=5, verbose_name="max attempts"),
                ),
                (
                    "available_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        help_text="Not claimed before this time.",
                        verbose_name="available at",
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        editable=False,
                        verbose_name="created at",
                    ),
                ),
                (
                    "updated_at",
                    models.DateTimeField(auto_now=True, verbose_name="updated at"),
                ),
                (
                    "started_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="started at"),
                ),
                (
                    "completed_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When the job reached completed, dead or cancelled.",
                        null=True,
                        verbose_name="completed at",
                    ),
                ),
                (
                    "last_error",
                    models.TextField(blank=True, default="", verbose_name="last error"),
                ),
                (
                    "errors",
                    models.JSONField(
                        blank=True,
                        default=list,
                        help_text="Failures, oldest first: attempt, time, error, traceback (bounded).",
                        verbose_name="errors",
                    ),
                ),
                (
                    "result",
                    models.JSONField(blank=True, null=True, verbose_name="result"),
                ),
                (
                    "lease_holder",
                    models.CharField(
                        blank=True,
                        max_length=255,
                        null=True,
                        verbose_name="lease holder",
                    ),
                ),
                (
                    "lease_expires_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="lease expires at"),
                ),
                (
                    "lease_token",
                    models.UUIDField(
                        blank=True,
                        editable=False,
                        null=True,
                        verbose_name="lease token",
                    ),
                ),
                (
                    "timeout",
                    models.FloatField(
                        blank=True,
                        help_text="Seconds one attempt may run; empty: the handler's timeout, else TIMEOUT_SECONDS.",
                        null=True,
                        verbose_name="timeout",
                    ),
                ),
                (
                    "concurrency_key",
                    models.CharField(
                        blank=True,
                        help_text="With the type's concurrency_limit: at most that many running per key.",
                        max_length=255,
                        null=True,
                        verbose_name="concurrency key",
                    ),
                ),
                (
                    "cancel_requested_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When a cancel of the running job was requested.",
                        null=True,
                        verbose_name="cancel requested at",
                    ),
                ),
                (
                    "dependent_count",
                    models.PositiveIntegerField(
                        db_default=0,
                        default=0,
                        help_text="How many jobs were enqueued to wait for this one.",
                        verbose_name="dependents",
                    ),
                ),
                (
                    "on_parent_failure",
                    models.CharField(
                        choices=[("cancel", "cancel"), ("run", "run")],
                        db_default="cancel",
                        default="cancel",
                        help_text="When a parent ends dead or cancelled: cancel this job, or run it anyway.",
                        max_length=8,
                        verbose_name="on parent failure",
                    ),
                ),
                (
                    "parent_count",
                    models.PositiveIntegerField(
                        db_default=0,
                        default=0,
                        help_text="How many jobs this one was enqueued to wait for.",
                        verbose_name="parents",
                    ),
                ),
                (
                    "waiting_on",
                    models.PositiveIntegerField(
                        db_default=0,
                        default=0,
                        help_text="Parents not finished yet; the job becomes pending at 0.",
                        verbose_name="waiting on",
                    ),
                ),
                (
                    "trace_context",
                    models.JSONField(
                        blank=True,
                        editable=False,
                        help_text="W3C trace context (traceparent, tracestate) of the span that enqueued it.",
                        null=True,
                        verbose_name="trace context",
                    ),
                ),
            ],
            options={
                "verbose_name": "job",
                "verbose_name_plural": "jobs",
                "permissions": (
                    ("requeue_job", "Can requeue jobs (and retry them from a step)"),
                    ("cancel_job", "Can cancel jobs"),
                    ("run_job_now", "Can run pending jobs now"),
                    ("pause_queue", "Can pause and resume queues"),
                    ("emit_event", "Can emit events"),
                ),
                "indexes": [
                    models.Index(
                        condition=models.Q(("status", "pending")),
                        fields=["-priority", "available_at", "created_at"],
                        name="durable_jobs_claim_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "pending")),
                        fields=["queue", "-priority", "available_at", "created_at"],
                        name="durable_jobs_claim_queue_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "running")),
                        fields=["lease_expires_at"],
                        name="durable_jobs_lease_idx",
                    ),
                    models.Index(fields=["status", "-created_at"], name="durable_jobs_status_idx"),
                    models.Index(fields=["-created_at"], name="durable_jobs_created_idx"),
                    models.Index(fields=["type", "-created_at"], name="durable_jobs_type_idx"),
                    models.Index(fields=["queue", "-created_at"], name="durable_jobs_queue_idx"),
                    models.Index(
                        condition=models.Q(("status__in", ["completed", "dead", "cancelled"])),
                        fields=["completed_at"],
                        name="durable_jobs_finished_idx",
                    ),
                    models.Index(
                        condition=models.Q(
                            ("concurrency_key__isnull", False), ("status", "pending")
                        ),
                        fields=[
                            "type",
                            "concurrency_key",
                            "-priority",
                            "available_at",
                            "created_at",
                        ],
                        name="durable_jobs_key_pending_idx",
                    ),
                    models.Index(
                        condition=models.Q(
                            ("concurrency_key__isnull", False), ("status", "running")
                        ),
                        fields=["type", "concurrency_key"],
                        name="durable_jobs_key_running_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status__in", ["waiting", "dead"])),
                        fields=["queue", "status", "-created_at"],
                        name="durable_jobs_queue_held_idx",
                    ),
                    models.Index(
                        condition=models.Q(
                            ("concurrency_key__isnull", False), ("status", "pending")
                        ),
                        fields=["-priority", "available_at", "created_at"],
                        name="durable_jobs_claim_keyed_idx",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("idempotency_key__isnull", False)),
                        fields=("idempotency_key",),
                        name="durable_jobs_idempotency_key_uniq",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                [
                                    "pending",
                                    "running",
                                    "completed",
                                    "dead",
                                    "cancelled",
                                    "waiting",
                                ],
                            )
                        ),
                        name="durable_jobs_status_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("max_attempts__gte", 1)),
                        name="durable_jobs_max_attempts_gte_1",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("idempotency_key", ""), _negated=True),
                        name="durable_jobs_idempotency_key_not_empty",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("type", ""), _negated=True),
                        name="durable_jobs_type_not_empty",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("on_parent_failure__in", ["cancel", "run"])),
                        name="durable_jobs_on_parent_failure_valid",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="DeadJob",
            fields=[],
            options={
                "verbose_name": "dead job",
                "verbose_name_plural": "dead jobs",
                "proxy": True,
                "indexes": [],
                "constraints": [],
            },
            bases=("durable_jobs.job",),
        ),
        migrations.CreateModel(
            name="WorkerProcess",
            fields=[
                (
                    "id",
                    models.CharField(
                        max_length=255,
                        primary_key=True,
                        serialize=False,
                        verbose_name="worker id",
                    ),
                ),
                ("host", models.CharField(max_length=255, verbose_name="host")),
                ("pid", models.PositiveIntegerField(verbose_name="pid")),
                (
                    "queues",
                    models.JSONField(
                        default=list,
                        help_text="Empty: every queue.",
                        verbose_name="queues",
                    ),
                ),
                (
                    "concurrency",
                    models.PositiveIntegerField(verbose_name="concurrency"),
                ),
                ("lease_seconds", models.FloatField(verbose_name="lease seconds")),
                ("started_at", models.DateTimeField(verbose_name="started at")),
                (
                    "last_heartbeat",
                    models.DateTimeField(db_index=True, verbose_name="last heartbeat"),
                ),
                (
                    "slots_in_use",
                    models.PositiveIntegerField(
                        db_default=0,
                        default=0,
                        help_text="Slots running or holding a claimed job at the last heartbeat.",
                        verbose_name="slots in use",
                    ),
                ),
                (
                    "version",
                    models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="The django-durable-jobs version the worker runs.",
                        max_length=64,
                        verbose_name="version",
                    ),
                ),
            ],
            options={
                "verbose_name": "worker",
                "verbose_name_plural": "workers",
                "db_table": "durable_jobs_worker",
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="ScheduleState",
            fields=[
                (
                    "name",
                    models.CharField(
                        max_length=255,
                        primary_key=True,
                        serialize=False,
                        verbose_name="name",
                    ),
                ),
                (
                    "timing",
                    models.TextField(
                        help_text="The schedule's timing when first seen; a change resets first_seen.",
                        verbose_name="timing",
                    ),
                ),
                ("first_seen", models.DateTimeField(verbose_name="first seen")),
                (
                    "last_tick",
                    models.DateTimeField(blank=True, null=True, verbose_name="last tick"),
                ),
                (
                    "last_job_id",
                    models.UUIDField(blank=True, null=True, verbose_name="last job id"),
                ),
                (
                    "last_enqueued_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="last enqueued at"),
                ),
                (
                    "updated_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, verbose_name="updated at"
                    ),
                ),
            ],
            options={
                "verbose_name": "schedule",
                "verbose_name_plural": "schedules",
                "db_table": "durable_jobs_schedule",
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="QueueThrottle",
            fields=[
                (
                    "queue",
                    models.CharField(
                        max_length=100,
                        primary_key=True,
                        serialize=False,
                        verbose_name="queue",
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
        # The rate window: one (start, count) per claim, read and written
        # only by the claim's SQL (db/), so not model fields.
        migrations.RunSQL(
            "ALTER TABLE durable_jobs_throttle"
            " ADD COLUMN starts timestamptz[] NOT NULL DEFAULT '{}',"
            " ADD COLUMN counts integer[] NOT NULL DEFAULT '{}'",
            reverse_sql="ALTER TABLE durable_jobs_throttle DROP COLUMN starts, DROP COLUMN counts",
        ),
        migrations.CreateModel(
            name="QueueState",
            fields=[
                (
                    "name",
                    models.CharField(
                        max_length=100,
                        primary_key=True,
                        serialize=False,
                        verbose_name="name",
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
        migrations.CreateModel(
            name="JobDependency",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True,
                        primary_key=True,
                        serialize=False,
                        verbose_name="ID",
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
                (
                    "child",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="parent_links",
                        to="durable_jobs.job",
                        verbose_name="child",
                    ),
                ),
                (
                    "parent",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="child_links",
                        to="durable_jobs.job",
                        verbose_name="parent",
                    ),
                ),
            ],
            options={
                "verbose_name": "job dependency",
                "verbose_name_plural": "job dependencies",
                "db_table": "durable_jobs_dependency",
                "indexes": [
                    models.Index(fields=["parent", "child"], name="durable_jobs_dep_parent_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("child", "parent"), name="durable_jobs_dep_uniq"
                    )
                ],
            },
        ),
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
        # The planner's estimate of one queue's jobs in one status (the
        # Queues page shows it beyond its exact counts) reads the most common
        # (queue, status) pairs instead of taking the columns as independent.
        migrations.RunSQL(
            "CREATE STATISTICS IF NOT EXISTS durable_jobs_queue_status_stats (mcv) "
            "ON queue, status FROM durable_jobs_job",
            "DROP STATISTICS IF EXISTS durable_jobs_queue_status_stats",
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "at",
                    models.DateTimeField(
                        db_index=True,
                        default=django.utils.timezone.now,
                        verbose_name="at",
                    ),
                ),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("requeue", "requeue"),
                            ("retry_from_step", "retry from step"),
                            ("cancel", "cancel"),
                            ("run_now", "run now"),
                            ("pause", "pause"),
                            ("resume", "resume"),
                            ("bulk_requeue", "bulk requeue"),
                            ("bulk_cancel", "bulk cancel"),
                            ("emit", "emit event"),
                        ],
                        max_length=32,
                        verbose_name="action",
                    ),
                ),
                (
                    "door",
                    models.CharField(
                        help_text="admin, rest, cli or python.",
                        max_length=16,
                        verbose_name="door",
                    ),
                ),
                (
                    "actor",
                    models.CharField(
                        help_text="The username; token:<username> for a DRF token; os:<login> for the CLI.",
                        max_length=200,
                        verbose_name="actor",
                    ),
                ),
                (
                    "user_pk",
                    models.CharField(blank=True, max_length=64, null=True, verbose_name="user id"),
                ),
                (
                    "address",
                    models.GenericIPAddressField(
                        blank=True, null=True, verbose_name="client address"
                    ),
                ),
                ("job_id", models.UUIDField(blank=True, null=True, verbose_name="job")),
                (
                    "queue",
                    models.CharField(blank=True, max_length=100, null=True, verbose_name="queue"),
                ),
                (
                    "details",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text="The pause's end, a bulk run's filter and count, the step retried from...",
                        verbose_name="details",
                    ),
                ),
            ],
            options={
                "verbose_name": "audit entry",
                "verbose_name_plural": "audit trail",
                "db_table": "durable_jobs_audit",
                "ordering": ["-at", "-id"],
                "default_permissions": ("view",),
                "indexes": [
                    models.Index(
                        condition=models.Q(("job_id__isnull", False)),
                        fields=["job_id", "-at"],
                        name="durable_jobs_audit_job_idx",
                    ),
                    models.Index(
                        condition=models.Q(("queue__isnull", False)),
                        fields=["queue", "-at"],
                        name="durable_jobs_audit_queue_idx",
                    ),
                ],
            },
        ),
    ]
