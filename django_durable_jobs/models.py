"""The ``Job`` table: the single source of truth of the queue.

A retry is a ``pending`` job with a later ``available_at``; the dead-letter
queue is the ``dead`` rows of this same table. Writes on the hot paths
(enqueue, claim, complete, fail, reap) go through ``db.py``; the ORM is used
everywhere else.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta

from django.db import models
from django.db.models import BooleanField, DurationField, ExpressionWrapper, F, Q
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .authorization import JOB_PERMISSIONS
from .constants import (
    AUDIT_JOB_INDEX,
    AUDIT_QUEUE_INDEX,
    CLAIM_INDEX,
    CLAIM_KEYED_INDEX,
    CLAIM_QUEUE_INDEX,
    CONCURRENCY_KEY_MAX_LENGTH,
    CREATED_INDEX,
    DEPENDENCY_PARENT_INDEX,
    DEPENDENCY_UNIQUE,
    EVENT_KEY_MAX_LENGTH,
    EVENT_WAITER_KEY_INDEX,
    FINISHED_INDEX,
    HELD_INDEX,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    KEY_PENDING_INDEX,
    KEY_RUNNING_INDEX,
    LEASE_HOLDER_MAX_LENGTH,
    LEASE_INDEX,
    QUEUE_HELD_INDEX,
    QUEUE_MAX_LENGTH,
    STEP_NAME_MAX_LENGTH,
    STEP_UNIQUE,
    TYPE_MAX_LENGTH,
)
from .ids import new_job_id


class JobStatus(models.TextChoices):
    PENDING = "pending", _("pending")
    RUNNING = "running", _("running")
    COMPLETED = "completed", _("completed")
    DEAD = "dead", _("dead")
    CANCELLED = "cancelled", _("cancelled")
    #: Enqueued with ``depends_on``: becomes pending once every parent is done.
    WAITING = "waiting", _("waiting")


class OnParentFailure(models.TextChoices):
    """What a waiting job does when one of its parents ends ``dead`` or ``cancelled``."""

    #: The job is cancelled too, its reason naming the parent (the default).
    CANCEL = "cancel", _("cancel")
    #: The parent counts as done: the job runs once the others are.
    RUN = "run", _("run")


FINISHED_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.DEAD, JobStatus.CANCELLED})


class JobQuerySet(models.QuerySet["Job"]):
    def pending(self) -> JobQuerySet:
        return self.filter(status=JobStatus.PENDING)

    def runnable(self) -> JobQuerySet:
        """Pending jobs a worker may claim now (by the database's clock)."""
        return self.filter(status=JobStatus.PENDING, available_at__lte=Now())

    def running(self) -> JobQuerySet:
        return self.filter(status=JobStatus.RUNNING)

    def completed(self) -> JobQuerySet:
        return self.filter(status=JobStatus.COMPLETED)

    def dead(self) -> JobQuerySet:
        return self.filter(status=JobStatus.DEAD)

    def cancelled(self) -> JobQuerySet:
        return self.filter(status=JobStatus.CANCELLED)

    def waiting(self) -> JobQuerySet:
        return self.filter(status=JobStatus.WAITING)

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=FINISHED_STATUSES)


class Job(models.Model):
    # Time-ordered (ids.py): new rows go to the primary key's right edge.
    id = models.UUIDField(primary_key=True, default=new_job_id, editable=False)
    type = models.CharField(
        _("type"), max_length=TYPE_MAX_LENGTH, help_text=_("Name of the registered handler.")
    )
    queue = models.CharField(_("queue"), max_length=QUEUE_MAX_LENGTH, default="default")
    payload = models.JSONField(_("payload"), default=dict)
    # NULL, not "", means "no key": NULLs never collide in the unique index.
    idempotency_key = models.CharField(  # noqa: DJ001
        _("idempotency key"),
        max_length=IDEMPOTENCY_KEY_MAX_LENGTH,
        null=True,
        blank=True,
        help_text=_("Unique when set: enqueueing again with the same key returns this job."),
    )
    status = models.CharField(
        _("status"), max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING
    )
    priority = models.SmallIntegerField(_("priority"), default=0, help_text=_("Higher runs first."))
    attempts = models.PositiveIntegerField(
        _("attempts"), default=0, help_text=_("Counted when a worker claims the job.")
    )
    max_attempts = models.PositiveIntegerField(_("max attempts"), default=5)
    available_at = models.DateTimeField(
        _("available at"), default=timezone.now, help_text=_("Not claimed before this time.")
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now, editable=False)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    completed_at = models.DateTimeField(
        _("completed at"),
        null=True,
        blank=True,
        help_text=_("When the job reached completed, dead or cancelled."),
    )
    last_error = models.TextField(_("last error"), blank=True, default="")
    errors = models.JSONField(
        _("errors"),
        default=list,
        blank=True,
        help_text=_("Failures, oldest first: attempt, time, error, traceback (bounded)."),
    )
    result = models.JSONField(_("result"), null=True, blank=True)
    # The lease: which worker holds a running job, until when, and a token
    # unique to this claim. Every write after the claim matches the token,
    # so a worker that lost its lease cannot overwrite a newer claim's state.
    lease_holder = models.CharField(  # noqa: DJ001
        _("lease holder"), max_length=LEASE_HOLDER_MAX_LENGTH, null=True, blank=True
    )
    lease_expires_at = models.DateTimeField(_("lease expires at"), null=True, blank=True)
    lease_token = models.UUIDField(_("lease token"), null=True, blank=True, editable=False)
    timeout = models.FloatField(
        _("timeout"),
        null=True,
        blank=True,
        help_text=_(
            "Seconds one attempt may run; empty: the handler's timeout, else TIMEOUT_SECONDS."
        ),
    )

    # Jobs of one type sharing a key run at most their handler's
    # ``concurrency_limit`` at once, over every worker; no limit: unlimited.
    concurrency_key = models.CharField(  # noqa: DJ001
        _("concurrency key"),
        max_length=CONCURRENCY_KEY_MAX_LENGTH,
        null=True,
        blank=True,
        help_text=_("With the type's concurrency_limit: at most that many running per key."),
    )
    # Set by a cancel of a running job (operations.cancel): the worker that
    # holds it tells the handler (ctx.cancelled) and ends the attempt
    # cancelled. Kept once the job is finished (when it was asked); a
    # requeue clears it.
    cancel_requested_at = models.DateTimeField(
        _("cancel requested at"),
        null=True,
        blank=True,
        help_text=_("When a cancel of the running job was requested."),
    )

    # Dependencies (``enqueue(depends_on=...)``): the edges are JobDependency
    # rows; these counters let the statement that records a parent's outcome
    # find and release its children without reading anything more when a
    # job has none (db/claims.sql, record_outcomes).
    on_parent_failure = models.CharField(
        _("on parent failure"),
        max_length=8,
        choices=OnParentFailure.choices,
        default=OnParentFailure.CANCEL,
        db_default=OnParentFailure.CANCEL,
        help_text=_("When a parent ends dead or cancelled: cancel this job, or run it anyway."),
    )
    parent_count = models.PositiveIntegerField(
        _("parents"),
        default=0,
        db_default=0,
        help_text=_("How many jobs this one was enqueued to wait for."),
    )
    waiting_on = models.PositiveIntegerField(
        _("waiting on"),
        default=0,
        db_default=0,
        help_text=_("Parents not finished yet; the job becomes pending at 0."),
    )
    # Read by the claim: a job claimed at 0 has its outcome written by the one
    # statement of a job without dependents, which also checks the row is
    # still at 0. A child enqueued since (it adds one under the parent's row
    # lock, perhaps after that statement's snapshot) makes the check fail, and
    # the outcome is written again in a transaction that releases the
    # children (db.record_outcomes).
    dependent_count = models.PositiveIntegerField(
        _("dependents"),
        default=0,
        db_default=0,
        help_text=_("How many jobs were enqueued to wait for this one."),
    )
    # OpenTelemetry (django_durable_jobs/tracing.py): the span that enqueued
    # the job, as a W3C carrier, so the worker's span of its first attempt is
    # that span's child (and later attempts link to it). NULL without
    # OpenTelemetry or without a current span: no cost to the rows, since
    # PostgreSQL stores a NULL in the row's null bitmap.
    trace_context = models.JSONField(
        _("trace context"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("W3C trace context (traceparent, tracestate) of the span that enqueued it."),
    )
    # Durable steps (context.py, steps/): why a suspended job waits, written
    # by the suspension itself: {"until": iso time} (ctx.sleep), {"event":
    # key} (ctx.wait_for_event, with "deadline" when it has a timeout),
    # {"job": id} (ctx.run_job). Meaningful only while the job is pending or
    # waiting; never written by the claim or the outcome paths, so jobs that
    # use no steps never touch it (a NULL costs a bit in the row's null bitmap).
    waiting_for = models.JSONField(
        _("waiting for"),
        null=True,
        blank=True,
        editable=False,
        help_text=_("Why a suspended job waits: a time, an event or a child job."),
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        # One per operator action, checked at every door (authorization.py).
        permissions = JOB_PERMISSIONS
        indexes = [
            # Serves the claim: pending jobs in claim order. `available_at <=
            # now()` cannot be part of a partial index (now() is not
            # immutable), so it is the second key column and filters inside
            # the index.
            models.Index(
                fields=["-priority", "available_at", "created_at"],
                name=CLAIM_INDEX,
                condition=Q(status="pending"),
            ),
            # Serves claims by workers of some queues only (--queues): without
            # it, a worker of a small queue would scan past a big queue's backlog.
            models.Index(
                fields=["queue", "-priority", "available_at", "created_at"],
                name=CLAIM_QUEUE_INDEX,
                condition=Q(status="pending"),
            ),
            # Serves the reaper: running jobs whose lease has expired.
            models.Index(
                fields=["lease_expires_at"], name=LEASE_INDEX, condition=Q(status="running")
            ),
            # Serves the lists of jobs in flight, newest first (admin, API,
            # CLI), and the admin's date hierarchy (min/max of created_at).
            # The active partition has no index by status, type or queue of
            # every row: each would take an entry from every enqueue and every
            # claim (migration 0005, docs/benchmarks.md). A filtered list
            # reads this index newest first, past the rows that do not match;
            # the history partitions have those indexes (db/partitions.py).
            models.Index(fields=["-created_at"], name=CREATED_INDEX),
            # Serves the lists of waiting and dead jobs, newest first (the
            # Dead jobs list, bulk requeue). Partial: a job pays for it only
            # when it enters waiting or dead.
            models.Index(
                fields=["status", "-created_at"],
                name=HELD_INDEX,
                condition=Q(status__in=["waiting", "dead"]),
            ),
            # Serves pruning (retention and `jobs prune`): finished jobs,
            # oldest first. Partial, so pending and running jobs (the hot
            # rows) never pay for it.
            models.Index(
                fields=["completed_at"],
                name=FINISHED_INDEX,
                condition=Q(status__in=["completed", "dead", "cancelled"]),
            ),
            # Serve the claim of jobs with a concurrency key: the pending ones
            # of each (type, key) in claim order, and the running ones per
            # (type, key) it counts. Partial: jobs without a key never pay.
            models.Index(
                fields=["type", "concurrency_key", "-priority", "available_at", "created_at"],
                name=KEY_PENDING_INDEX,
                condition=Q(status="pending", concurrency_key__isnull=False),
            ),
            models.Index(
                fields=["type", "concurrency_key"],
                name=KEY_RUNNING_INDEX,
                condition=Q(status="running", concurrency_key__isnull=False),
            ),
            # Serves the admin's Queues page (waiting and dead jobs per queue,
            # counted up to a cap) and the job list filtered by queue and
            # one of these statuses. Partial: a job pays for it only when it
            # enters waiting or dead, never on the claim or the completion.
            models.Index(
                fields=["queue", "status", "-created_at"],
                name=QUEUE_HELD_INDEX,
                condition=Q(status__in=["waiting", "dead"]),
            ),
            # The keyed claim's first read: pending jobs with a key, in claim
            # order, without reading past the jobs without one (a backlog of
            # those ahead would make every keyed claim read all of it).
            models.Index(
                fields=["-priority", "available_at", "created_at"],
                name=CLAIM_KEYED_INDEX,
                condition=Q(status="pending", concurrency_key__isnull=False),
            ),
        ]
        # The table is partitioned (db/partitions.py, migration 0003): the
        # indexes above are the active partition's, under these names; the
        # history partitions have the listing ones. Idempotency keys are
        # unique through IdempotencyKey (a unique index on a partitioned
        # table must include the partition key).
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values), name="durable_jobs_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="durable_jobs_max_attempts_gte_1"
            ),
            models.CheckConstraint(
                condition=~Q(idempotency_key=""), name="durable_jobs_idempotency_key_not_empty"
            ),
            models.CheckConstraint(condition=~Q(type=""), name="durable_jobs_type_not_empty"),
            models.CheckConstraint(
                condition=Q(on_parent_failure__in=OnParentFailure.values),
                name="durable_jobs_on_parent_failure_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.pk} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    def parent_ids(self) -> list[uuid.UUID]:
        """The jobs this one waits (or waited) for (``depends_on``), oldest first.

        No query for a job enqueued without parents. A parent pruned since
        is missing.
        """
        return self._linked_ids(self.parent_count, "child_id", "parent_id")

    def dependent_ids(self) -> list[uuid.UUID]:
        """The jobs enqueued to wait for this one, oldest first; no query if there are none."""
        return self._linked_ids(self.dependent_count, "parent_id", "child_id")

    def _linked_ids(self, count: int, this_end: str, other_end: str) -> list[uuid.UUID]:
        """The other ends of this job's edges where it is ``this_end``; no query at 0."""
        if not count:
            return []
        # Not ctx.run_job's 'awaits' edges: a parent waiting for its child
        # job is not that child's dependent in the depends_on sense.
        edges = JobDependency.objects.using(self._state.db).filter(
            **{this_end: self.pk}, kind=DependencyKind.DEPENDS_ON
        )
        return list(edges.order_by(other_end).values_list(other_end, flat=True))


class DependencyKind(models.TextChoices):
    """Why an edge's child waits for its parent."""

    #: ``enqueue(..., depends_on=[parent])``: the parent's failure cancels the
    #: child unless its ``on_parent_failure`` is ``run``.
    DEPENDS_ON = "depends_on", _("depends on")
    #: ``ctx.run_job``: the edge's child is the job that started the edge's
    #: parent and suspended until it ends; the parent's failure never cancels
    #: it (its handler gets ``ChildJobFailed``). Not counted in
    #: ``parent_count``/``dependent_count``'s display, nor in ``parent_results``.
    AWAITS = "awaits", _("awaits")


class JobDependency(models.Model):
    """One edge: ``child`` waits for ``parent`` (``enqueue(..., depends_on=[parent])``).

    Written once at enqueue, with the child; ``resolved`` turns true when
    the parent's end has been counted for the child (its ``waiting_on``
    decremented, or the child cancelled), in the transaction that records
    that end, and never turns back: a requeued parent that completes again
    does not count twice. Cycles cannot exist: a parent exists before its
    child. Pruning a job deletes its edges.
    """

    # No foreign key constraint can point at the partitioned job table: the
    # ORM's cascade and the pruning's statements delete the edges with their jobs.
    child = models.ForeignKey(
        Job,
        models.CASCADE,
        related_name="parent_links",
        db_index=False,
        db_constraint=False,
        verbose_name=_("child"),
    )
    parent = models.ForeignKey(
        Job,
        models.CASCADE,
        related_name="child_links",
        db_index=False,
        db_constraint=False,
        verbose_name=_("parent"),
    )
    resolved = models.BooleanField(
        _("resolved"),
        default=False,
        db_default=False,
        help_text=_("The parent's end was counted for the child."),
    )
    kind = models.CharField(
        _("kind"),
        max_length=16,
        choices=DependencyKind.choices,
        default=DependencyKind.DEPENDS_ON,
        db_default=DependencyKind.DEPENDS_ON,
    )

    class Meta:
        db_table = "durable_jobs_dependency"
        verbose_name = _("job dependency")
        verbose_name_plural = _("job dependencies")
        constraints = [
            # Also the index of a child's parents (child first).
            models.UniqueConstraint(fields=["child", "parent"], name=DEPENDENCY_UNIQUE),
        ]
        indexes = [
            # A finished parent's children: what record_outcomes reads.
            models.Index(fields=["parent", "child"], name=DEPENDENCY_PARENT_INDEX),
        ]

    def __str__(self) -> str:
        return f"{self.child_id} after {self.parent_id}"


class DeadJobManager(models.Manager["DeadJob"]):
    """Only ``dead`` jobs: what the admin's "Dead jobs" page lists."""

    def get_queryset(self) -> models.QuerySet[DeadJob]:
        return super().get_queryset().filter(status=JobStatus.DEAD)


class DeadJob(Job):
    """The dead-letter queue as its own model, so the admin gets a "Dead jobs" entry.

    A proxy: same table, same rows, no migration of data. Its manager
    filters on ``status = 'dead'``, which the status index serves.
    """

    # Not Job's manager: a plain one over the dead rows, without JobQuerySet's
    # filters, so the stubs see an incompatible override of Job.objects.
    objects = DeadJobManager()  # type: ignore[assignment,misc]

    class Meta:
        proxy = True
        verbose_name = _("dead job")
        verbose_name_plural = _("dead jobs")


def _heartbeat_deadline() -> ExpressionWrapper[CombinedExpression]:
    """``now() - lease_seconds``: a heartbeat after it is younger than its worker's lease."""
    lease = ExpressionWrapper(
        F("lease_seconds") * timedelta(seconds=1), output_field=DurationField()
    )
    return ExpressionWrapper(Now() - lease, output_field=models.DateTimeField())


class WorkerProcessQuerySet(models.QuerySet["WorkerProcess"]):
    """Which workers are alive: the one rule ``/api/health`` and the admin count by.

    A worker is alive while its last heartbeat is younger than its lease
    (three heartbeat intervals: one or two missed beats are not a death),
    measured by the database's clock, the one the heartbeats were written
    with.
    """

    def alive(self) -> WorkerProcessQuerySet:
        return self.filter(last_heartbeat__gt=_heartbeat_deadline())

    def stale(self) -> WorkerProcessQuerySet:
        """The rows of workers that are gone (killed, or stopped without a goodbye)."""
        return self.filter(last_heartbeat__lte=_heartbeat_deadline())

    def with_liveness(self) -> WorkerProcessQuerySet:
        """Each row with ``is_alive`` (a boolean), by the same rule as ``alive()``."""
        return self.annotate(
            is_alive=ExpressionWrapper(
                Q(last_heartbeat__gt=_heartbeat_deadline()), output_field=BooleanField()
            )
        )


class WorkerProcess(models.Model):
    """A running ``runjobworker`` process, as its last heartbeat described it.

    Each heartbeat (every lease / 3) upserts the row; a graceful shutdown
    deletes it. A row whose heartbeat is older than a few intervals belongs
    to a worker that died: ``/api/health`` does not count it as live
    (``WorkerProcess.objects.alive()``), and the next worker with the same
    id overwrites it.
    """

    id = models.CharField(_("worker id"), max_length=LEASE_HOLDER_MAX_LENGTH, primary_key=True)
    host = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("pid"))
    queues = models.JSONField(_("queues"), default=list, help_text=_("Empty: every queue."))
    concurrency = models.PositiveIntegerField(_("concurrency"))
    lease_seconds = models.FloatField(_("lease seconds"))
    started_at = models.DateTimeField(_("started at"))
    last_heartbeat = models.DateTimeField(_("last heartbeat"), db_index=True)
    # Written with each heartbeat. Database defaults: a worker of an older
    # release, whose upsert does not name these columns, still inserts.
    slots_in_use = models.PositiveIntegerField(
        _("slots in use"),
        default=0,
        db_default=0,
        help_text=_("Slots running or holding a claimed job at the last heartbeat."),
    )
    version = models.CharField(
        _("version"),
        max_length=64,
        default="",
        db_default="",
        blank=True,
        help_text=_("The django-durable-jobs version the worker runs."),
    )

    objects = WorkerProcessQuerySet.as_manager()

    class Meta:
        db_table = "durable_jobs_worker"
        ordering = ["id"]
        verbose_name = _("worker")
        verbose_name_plural = _("workers")

    def __str__(self) -> str:
        return self.id


class ScheduleState(models.Model):
    """What the workers know of one schedule: when it was first seen, its last tick.

    The schedules themselves are declared in code (``@job(schedule=...)``,
    ``DURABLE_JOBS["SCHEDULES"]``); this row is their memory. It outlives
    the jobs it points to, which retention prunes: ``last_tick`` is what
    stops a pruned tick from being enqueued a second time, and
    ``first_seen`` what stops a brand-new schedule from "catching up" on
    a tick from before it existed.
    """

    name = models.CharField(_("name"), max_length=TYPE_MAX_LENGTH, primary_key=True)
    timing = models.TextField(
        _("timing"),
        help_text=_("The schedule's timing when first seen; a change resets first_seen."),
    )
    first_seen = models.DateTimeField(_("first seen"))
    last_tick = models.DateTimeField(_("last tick"), null=True, blank=True)
    # Not a foreign key: the job is pruned long before this row goes.
    last_job_id = models.UUIDField(_("last job id"), null=True, blank=True)
    last_enqueued_at = models.DateTimeField(_("last enqueued at"), null=True, blank=True)
    updated_at = models.DateTimeField(_("updated at"), default=timezone.now)

    class Meta:
        db_table = "durable_jobs_schedule"
        ordering = ["name"]
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")

    def __str__(self) -> str:
        return self.name


class QueueMinuteStats(models.Model):
    """How many attempts of one queue ended, and how, in one minute: the Queues page's chart.

    The workers count the outcomes they record in memory and add them here
    every heartbeat, one upsert per worker for all its queues and minutes
    (``INSERT ... ON CONFLICT DO UPDATE SET completed = completed +
    EXCLUDED.completed``), never a write per job. Rows older than
    ``QUEUE_STATS_KEEP`` are deleted by the workers' maintenance. The chart
    reads this small table, not the job table.
    """

    pk = models.CompositePrimaryKey("queue", "minute")
    queue = models.CharField(_("queue"), max_length=QUEUE_MAX_LENGTH)
    #: The minute's start (UTC, by the clock of the worker that recorded the outcomes).
    minute = models.DateTimeField(_("minute"))
    completed = models.PositiveIntegerField(
        _("completed"), default=0, help_text=_("Attempts that completed their job.")
    )
    failed = models.PositiveIntegerField(
        _("failed"),
        default=0,
        help_text=_("Failed attempts: retried, or dead (no attempt left, or Discard)."),
    )
    dead = models.PositiveIntegerField(
        _("dead"), default=0, help_text=_("Of the failed attempts, those that made their job dead.")
    )

    class Meta:
        db_table = "durable_jobs_queue_stats"
        ordering = ["queue", "minute"]
        verbose_name = _("queue minute")
        verbose_name_plural = _("queue minutes")

    def __str__(self) -> str:
        return f"{self.queue} {self.minute:%Y-%m-%d %H:%M}"


class QueueThrottle(models.Model):
    """The claim's bookkeeping for one queue with limits in ``DURABLE_JOBS["QUEUES"]``.

    A worker claiming from a limited queue locks this row first, so claims of
    that queue happen one at a time over every worker and each sees the
    others' committed claims. Two array columns, ``starts`` and ``counts``,
    hold the claims of the queue within the last rate window (when, and how
    many jobs each started): the sliding window the rate limit counts. They
    belong to the claim's SQL (``db/flow_control.sql``) and are not model fields:
    the ORM never reads them, and an ``ArrayField`` would make projects add
    ``django.contrib.postgres`` to ``INSTALLED_APPS`` (Django 6.1's check
    postgres.E005). Rows of queues without
    limits are never read; a queue's row is created by its first limited claim.
    """

    queue = models.CharField(_("queue"), max_length=QUEUE_MAX_LENGTH, primary_key=True)
    updated_at = models.DateTimeField(_("updated at"), default=timezone.now)

    class Meta:
        db_table = "durable_jobs_throttle"
        ordering = ["queue"]
        verbose_name = _("queue throttle")
        verbose_name_plural = _("queue throttles")

    def __str__(self) -> str:
        return self.queue


class QueueStateQuerySet(models.QuerySet["QueueState"]):
    """Which queues are paused: the one rule the worker, the API and the admin read.

    Paused: ``paused_at`` set and no end, or an end still ahead, by the
    database's clock. A pause with an end lifts itself: nothing rewrites
    the row, readers compare ``paused_until`` with ``now()``.
    """

    def paused(self) -> QueueStateQuerySet:
        return self.filter(
            Q(paused_at__isnull=False) & (Q(paused_until__isnull=True) | Q(paused_until__gt=Now()))
        )

    def with_paused(self) -> QueueStateQuerySet:
        """Each row with ``is_paused`` (a boolean), by the same rule as ``paused()``."""
        return self.annotate(
            is_paused=ExpressionWrapper(
                Q(paused_at__isnull=False)
                & (Q(paused_until__isnull=True) | Q(paused_until__gt=Now())),
                output_field=BooleanField(),
            )
        )


class QueueState(models.Model):
    """An operator's pause of one queue (``pause_queue``, ``jobs pause``, the API, the admin).

    A queue has a row once it was paused; resuming clears ``paused_at`` and
    keeps the row. Queues themselves are not declared anywhere: a job's
    ``queue`` names one, so a queue with no row is simply not paused.
    """

    name = models.CharField(_("name"), max_length=QUEUE_MAX_LENGTH, primary_key=True)
    paused_at = models.DateTimeField(
        _("paused at"), null=True, blank=True, help_text=_("Empty: not paused.")
    )
    paused_until = models.DateTimeField(
        _("paused until"),
        null=True,
        blank=True,
        help_text=_("When the pause lifts by itself; empty: until resumed."),
    )
    updated_at = models.DateTimeField(_("updated at"), default=timezone.now)

    objects = QueueStateQuerySet.as_manager()

    class Meta:
        db_table = "durable_jobs_queue"
        ordering = ["name"]
        verbose_name = _("queue")
        verbose_name_plural = _("queues")

    def __str__(self) -> str:
        return self.name

    def is_paused_at(self, now: datetime) -> bool:
        """Whether this row reads as paused at ``now`` (the rule of ``paused()``, in Python)."""
        return self.paused_at is not None and (self.paused_until is None or self.paused_until > now)


class AuditAction(models.TextChoices):
    """What an operator did: the keys of ``authorization.ACTION_PERMISSIONS``."""

    REQUEUE = "requeue", _("requeue")
    RETRY_FROM_STEP = "retry_from_step", _("retry from step")
    CANCEL = "cancel", _("cancel")
    RUN_NOW = "run_now", _("run now")
    PAUSE = "pause", _("pause")
    RESUME = "resume", _("resume")
    BULK_REQUEUE = "bulk_requeue", _("bulk requeue")
    BULK_CANCEL = "bulk_cancel", _("bulk cancel")
    EMIT = "emit", _("emit event")


class AuditEntry(models.Model):
    """One operator action: who, when, through which door, what it touched.

    Written in the transaction of the change itself (``audit.record``), so a
    change without its entry, or an entry without its change, cannot
    commit. Never written by the worker's claim or outcome paths.

    ``job_id`` is not a foreign key: the trail outlives pruned jobs. The
    user is kept as its primary key and name, not a foreign key either:
    the entry outlives the user too, and the queue's database may not be
    the users' (``DURABLE_JOBS["DATABASE"]``).
    """

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(_("at"), default=timezone.now, db_index=True)
    action = models.CharField(_("action"), max_length=32, choices=AuditAction.choices)
    door = models.CharField(_("door"), max_length=16, help_text=_("admin, rest, cli or python."))
    actor = models.CharField(
        _("actor"),
        max_length=200,
        help_text=_("The username; token:<username> for a DRF token; os:<login> for the CLI."),
    )
    user_pk = models.CharField(_("user id"), max_length=64, null=True, blank=True)  # noqa: DJ001
    address = models.GenericIPAddressField(_("client address"), null=True, blank=True)
    job_id = models.UUIDField(_("job"), null=True, blank=True)
    queue = models.CharField(  # noqa: DJ001
        _("queue"), max_length=QUEUE_MAX_LENGTH, null=True, blank=True
    )
    details = models.JSONField(
        _("details"),
        default=dict,
        blank=True,
        help_text=_("The pause's end, a bulk run's filter and count, the step retried from..."),
    )

    class Meta:
        db_table = "durable_jobs_audit"
        ordering = ["-at", "-id"]
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit trail")
        default_permissions = ("view",)
        indexes = [
            # A job's History page and ?job=; a queue's page and ?queue=.
            models.Index(
                fields=["job_id", "-at"],
                name=AUDIT_JOB_INDEX,
                condition=Q(job_id__isnull=False),
            ),
            models.Index(
                fields=["queue", "-at"],
                name=AUDIT_QUEUE_INDEX,
                condition=Q(queue__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        target = self.job_id or self.queue or ""
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {target}".rstrip()

    @property
    def details_text(self) -> str:
        """``details`` as compact JSON, keys sorted: what the History pages show."""
        return json.dumps(self.details, sort_keys=True, default=str, separators=(", ", ": "))


class StepStatus(models.TextChoices):
    """Where one recorded step is."""

    #: ``fn`` returned (or the sleep ended, the event came, the child
    #: finished): later runs replay ``result``.
    COMPLETED = "completed", _("completed")
    #: ``fn`` raised in its last try: nothing to replay, the next run calls it again.
    FAILED = "failed", _("failed")
    #: A sleep or a wait that suspended the job and has not ended yet.
    SUSPENDED = "suspended", _("suspended")


class StepKind(models.TextChoices):
    STEP = "step", _("step")
    SLEEP = "sleep", _("sleep")
    EVENT = "event", _("event")
    CHILD = "child", _("child job")


class JobStep(models.Model):
    """One recorded step of a job (``ctx.step``, ``ctx.sleep``, ``ctx.wait_for_event``,
    ``ctx.run_job``): its result, replayed by every later run of the job.

    Written only by the worker that holds the job's lease, in one fenced
    statement (``db/steps.py``); an ``atomic=True`` step's record commits in
    the transaction of the step's own writes. Deleted with its job (pruning
    deletes a job's steps first); kept by a requeue unless it is a retry
    from a step, which deletes that step's record and every later one.
    """

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        Job,
        models.CASCADE,
        related_name="steps",
        db_index=False,
        db_constraint=False,
        verbose_name=_("job"),
    )
    #: The handler's name for it, ``name#2``... for the second use of a name in a run.
    name = models.CharField(_("name"), max_length=STEP_NAME_MAX_LENGTH)
    kind = models.CharField(
        _("kind"), max_length=16, choices=StepKind.choices, default=StepKind.STEP
    )
    status = models.CharField(_("status"), max_length=16, choices=StepStatus.choices)
    #: The job's attempt that wrote the record (the last write, for a failed step).
    attempt = models.PositiveIntegerField(_("attempt"))
    #: The order the records were first written in (what the job's page lists by).
    position = models.PositiveIntegerField(_("position"), default=0)
    started_at = models.DateTimeField(_("started at"))
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    result = models.JSONField(_("result"), null=True, blank=True)
    #: Size of ``result`` as JSON text, in bytes (the job's page shows it).
    result_bytes = models.PositiveIntegerField(_("result size"), default=0)
    error = models.TextField(_("error"), blank=True, default="")
    #: A sleep's end, or an event wait's deadline (None: waits for ever).
    wake_at = models.DateTimeField(_("wakes at"), null=True, blank=True)
    #: What a suspended step waits for: the event's key, or the child job's id.
    event_key = models.CharField(  # noqa: DJ001
        _("event key"), max_length=EVENT_KEY_MAX_LENGTH, null=True, blank=True
    )
    child_id = models.UUIDField(_("child job"), null=True, blank=True)

    class Meta:
        db_table = "durable_jobs_step"
        ordering = ["job", "position", "id"]
        verbose_name = _("job step")
        verbose_name_plural = _("job steps")
        constraints = [
            # One record per name per job; also the index of a job's steps.
            models.UniqueConstraint(fields=["job", "name"], name=STEP_UNIQUE),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.name} ({self.status})"


class Event(models.Model):
    """An event, emitted once (``emit_event``): the first emit wins and never changes.

    Kept after the jobs waiting for it woke, so that a job that waits for it
    later (or runs again) finds it.
    """

    key = models.CharField(_("key"), max_length=EVENT_KEY_MAX_LENGTH, primary_key=True)
    payload = models.JSONField(_("payload"), null=True, blank=True)
    created_at = models.DateTimeField(_("emitted at"), default=timezone.now)

    class Meta:
        db_table = "durable_jobs_event"
        ordering = ["-created_at"]
        verbose_name = _("event")
        verbose_name_plural = _("events")
        default_permissions = ("view",)

    def __str__(self) -> str:
        return self.key


class EventWaiter(models.Model):
    """A job suspended in ``ctx.wait_for_event(key)``: what an emit of ``key`` wakes.

    One row per suspended job (a job waits for one event at a time),
    deleted by the emit that wakes it, or with the job.
    """

    job = models.OneToOneField(
        Job,
        models.CASCADE,
        primary_key=True,
        related_name="event_wait",
        db_constraint=False,
        verbose_name=_("job"),
    )
    key = models.CharField(_("key"), max_length=EVENT_KEY_MAX_LENGTH)
    since = models.DateTimeField(_("since"), default=timezone.now)

    class Meta:
        db_table = "durable_jobs_event_waiter"
        verbose_name = _("event waiter")
        verbose_name_plural = _("event waiters")
        indexes = [models.Index(fields=["key"], name=EVENT_WAITER_KEY_INDEX)]

    def __str__(self) -> str:
        return f"{self.job_id} waits for {self.key}"


class IdempotencyKey(models.Model):
    """An idempotency key, held by its job for as long as the job exists.

    What makes keys unique: the job table is partitioned, and a unique index
    on it would have to include the partition key. Written by the enqueue's
    statement with the job (``ON CONFLICT DO NOTHING`` here decides between
    a new job and a replay), deleted with the job (the ORM's cascade, the
    pruning's statements, a dropped partition's keyed jobs). Only keyed
    jobs pay for it.
    """

    key = models.CharField(_("key"), max_length=IDEMPOTENCY_KEY_MAX_LENGTH, primary_key=True)
    job = models.ForeignKey(
        Job, models.CASCADE, related_name="+", db_constraint=False, verbose_name=_("job")
    )

    class Meta:
        db_table = "durable_jobs_idempotency"
        verbose_name = _("idempotency key")
        verbose_name_plural = _("idempotency keys")
        default_permissions = ()

    def __str__(self) -> str:
        return self.key


class WorkerListener(models.Model):
    """Whether a listening worker sleeps: the mark enqueues read to decide on a NOTIFY.

    Migration 0006's unlogged table, written by the workers through the
    gateway (``db.mark_listener``, ``worker/wakefulness.py``); read-only
    here, for the admin's list of workers. A sleeping worker waits for a
    NOTIFY to claim, so an enqueue of one of its queues sends one; an awake
    worker claims every few milliseconds on its own, and enqueues skip the
    NOTIFY (and the cluster-wide lock it takes at commit). A ``--burst``
    worker, or one whose LISTEN connection has not connected yet, has no row.
    """

    worker_id = models.CharField(_("worker id"), max_length=200, primary_key=True)
    sleeping = models.BooleanField(_("sleeping"))
    changed_at = models.DateTimeField(_("changed at"))

    class Meta:
        managed = False
        db_table = "durable_jobs_listener"
        verbose_name = _("worker listener")
        verbose_name_plural = _("worker listeners")
        default_permissions = ()

    def __str__(self) -> str:
        return f"{self.worker_id} {'sleeping' if self.sleeping else 'awake'}"
