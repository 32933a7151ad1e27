"""``enqueue`` and ``enqueue_many``: the only ways a job is created.

Both run on the caller's connection (so they join the caller's
transaction), insert in one round trip, and let the database's unique
index on ``idempotency_key`` decide between a new job and a replay.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from . import db, hooks, metrics, tracing
from .exceptions import DurableJobsError, IdempotencyConflict, InvalidJob
from .ids import new_job_id
from .models import DependencyKind, Job, JobDependency, JobStatus
from .validation import Defaults, JobSpec, build_spec

logger = logging.getLogger(__name__)

ENQUEUE_ARGUMENTS = frozenset(
    {
        "type",
        "payload",
        "idempotency_key",
        "queue",
        "priority",
        "max_attempts",
        "delay",
        "run_at",
        "timeout",
        "concurrency_key",
        "depends_on",
        "on_parent_failure",
    }
)
# A replay finds the key's row gone only if it was deleted between our
# INSERT and our SELECT (a prune, an operator); trying again is then safe.
_MAX_RESOLVE_ROUNDS = 3


class EnqueueResult:
    """The job, and whether this call created it (``False`` on a replay).

    A new job's ``Job`` instance is built on first access from what the
    insert returned (no second query): ``enqueue_many`` callers who only
    count results do not pay for tens of thousands of model instances.
    """

    __slots__ = ("_job", "_pending", "created")

    def __init__(self, job: Job | None, created: bool, *, pending: tuple[Any, ...] = ()) -> None:
        self._job = job
        self._pending = pending
        self.created = created

    @property
    def job(self) -> Job:
        if self._job is None:
            self._job = _job_from_spec(*self._pending)
            self._pending = ()
        return self._job

    def _job_id(self) -> uuid.UUID:
        """The job's id, without building the ``Job`` of a new one."""
        if self._job is None:
            job_id: uuid.UUID = self._pending[1]
            return job_id
        return self._job.pk

    def __repr__(self) -> str:
        return f"EnqueueResult(job={self.job!r}, created={self.created})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EnqueueResult):
            return NotImplemented
        return (self.job.pk, self.created) == (other.job.pk, other.created)

    __hash__ = None  # type: ignore[assignment]


def enqueue(
    type: str,
    payload: dict[str, Any] | None = None,
    *,
    idempotency_key: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    delay: timedelta | float | None = None,
    run_at: datetime | None = None,
    timeout: timedelta | float | None = None,
    concurrency_key: str | None = None,
    depends_on: Iterable[Any] | None = None,
    on_parent_failure: str | None = None,
    using: str | None = None,
) -> EnqueueResult:
    """Create a job of ``type`` with ``payload``, or return the one holding ``idempotency_key``.

    ``timeout`` (seconds or a ``timedelta``) limits each attempt of this job,
    overriding the handler's ``timeout`` and ``TIMEOUT_SECONDS``.

    ``depends_on`` (jobs, ``enqueue`` results or job ids, which must exist)
    makes the job ``waiting`` until every one of them has completed; it
    becomes ``pending`` in the transaction that records the last one's
    completion. When a parent ends ``dead`` or ``cancelled``, the job is
    cancelled (its ``last_error`` names the parent), or, with
    ``on_parent_failure="run"``, runs anyway once the others are done.
    Parents already finished count at once: a job whose parents have all
    completed is created ``pending``, one with a failed parent (and
    ``"cancel"``) is created ``cancelled``. The handler reads the parents'
    results in ``ctx.parent_results``. Raises ``InvalidJob`` naming the
    parents that do not exist (nothing is stored).

    The same key with the same type, queue, payload, priority,
    ``max_attempts``, ``timeout``, parents and ``on_parent_failure`` returns the existing
    job (waiting or not) with ``created=False``; with any of them different it raises
    ``IdempotencyConflict``. Raises
    ``InvalidJob`` (a ``ValueError``) before touching the database when an
    argument is invalid. Unregistered types are allowed: the handler may
    live in another codebase.
    """
    spec = build_spec(
        type,
        payload,
        idempotency_key=idempotency_key,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        delay=delay,
        run_at=run_at,
        timeout=timeout,
        concurrency_key=concurrency_key,
        depends_on=depends_on,
        on_parent_failure=on_parent_failure,
    )
    # One statement, so atomic on its own: no transaction needed here.
    alias = db.database_alias(using)
    return announced(alias, insert_specs(alias, [spec]))[0]


def enqueue_own(
    type: str, payload: dict[str, Any], *, idempotency_key: str, using: str | None = None
) -> EnqueueResult:
    """Enqueue one of the package's own job types (``durable_jobs.*``: bulk runs).

    ``enqueue()`` refuses those types to everyone else, so that whoever may
    enqueue cannot start a bulk cancel of every job: ``bulk.start`` is the
    one caller, after checking its actor's permission.
    """
    spec = build_spec(type, payload, idempotency_key=idempotency_key, own_type=True)
    alias = db.database_alias(using)
    return announced(alias, insert_specs(alias, [spec]))[0]


def enqueue_many(
    jobs: Iterable[Mapping[str, Any]], *, using: str | None = None
) -> list[EnqueueResult]:
    """Enqueue many jobs in one round trip; one result per input, in order.

    Each item takes ``enqueue``'s argument names. All or nothing: an invalid
    item or an idempotency conflict raises and leaves no job from this call.
    An item's ``depends_on`` names jobs that exist before the call: an item
    cannot wait for another item of the same call (their ids are made by
    the call); ``chain`` and ``group`` do that.
    """
    if isinstance(jobs, (str, bytes, Mapping)) or not isinstance(jobs, Iterable):
        raise InvalidJob("jobs", f"must be a list of dicts, not {type(jobs).__name__}.")
    defaults = Defaults.from_settings()
    specs = [spec_from_item(index, item, defaults) for index, item in enumerate(jobs)]
    if not specs:
        return []
    alias = db.database_alias(using)
    with transaction.atomic(using=alias):
        results = insert_specs(alias, specs, names=[f"jobs[{i}]" for i in range(len(specs))])
    return announced(alias, results)


def announced(alias: str, results: list[EnqueueResult]) -> list[EnqueueResult]:
    """``results``, once the enqueue listeners (the immediate mode) have heard of them.

    Each public way to enqueue calls it after its own atomic block has
    closed, so that a listener's ``transaction.on_commit`` waits for the
    caller's transaction, not for ours.
    """
    hooks.jobs_enqueued(results, alias)
    return results


def spec_from_item(
    index: int | None, item: Mapping[str, Any], defaults: Defaults, *, name: str = "jobs"
) -> JobSpec:
    """``item`` (a dict of ``enqueue``'s arguments) validated; errors name ``name[index]``."""
    where = name if index is None else f"{name}[{index}]"
    if not isinstance(item, Mapping):
        raise InvalidJob(where, f"must be a dict, not {type(item).__name__}.")
    unknown = set(item) - ENQUEUE_ARGUMENTS
    if unknown:
        # str(): a key may be anything hashable, and sorted() cannot order mixed types.
        raise InvalidJob(where, f"unknown argument(s): {', '.join(sorted(map(str, unknown)))}.")
    if "type" not in item:
        raise InvalidJob(f"{where}.type", "is required.")
    try:
        return build_spec(**item, defaults=defaults)
    except InvalidJob as exc:
        raise InvalidJob(f"{where}.{exc.field}", exc.message, code=exc.code) from None


def insert_specs(
    alias: str,
    specs: Sequence[JobSpec],
    *,
    names: Sequence[str] | None = None,
    ids: Sequence[uuid.UUID] | None = None,
) -> list[EnqueueResult]:
    """Insert validated ``specs`` (or find their keys' jobs); one result per spec, in order.

    ``names``: what the caller calls each spec in errors (``jobs[0]``...);
    None: a lone ``enqueue`` call's arguments. ``ids``: the new jobs' ids,
    chosen by the caller so that specs of the batch can name each other as
    parents (``chain``, ``group``); only for specs without idempotency keys,
    since a skipped row would leave its children's edges pointing nowhere.
    """
    if ids is not None and any(spec.idempotency_key is not None for spec in specs):
        raise ValueError("insert_specs: ids are for specs without idempotency keys")
    # One constant's test when OpenTelemetry is not installed; with it, a
    # look at the current span (none: nothing more).
    send = tracing.start_send(specs) if tracing.AVAILABLE else None
    if send is None:
        return _insert_specs(alias, specs, names, ids, None)
    with send.current():
        results = _insert_specs(alias, specs, names, ids, send.context_json)
        send.sent(
            str(results[0]._job_id()) if len(results) == 1 else None,
            sum(result.created for result in results),
        )
        return results


def _insert_specs(
    alias: str,
    specs: Sequence[JobSpec],
    names: Sequence[str] | None,
    ids: Sequence[uuid.UUID] | None,
    trace_context: str | None,
) -> list[EnqueueResult]:
    results: list[EnqueueResult | None] = [None] * len(specs)
    todo = list(range(len(specs)))
    debug = logger.isEnabledFor(logging.DEBUG)
    # The plain inserts leave on_parent_failure at its default ('cancel'), so
    # a job given 'run' without parents goes through the insert that stores it
    # (and reads back, and replays, as given).
    with_parents = any(spec.parents or spec.on_parent_failure != "cancel" for spec in specs)
    # One counter increment per (queue, type), not per job: enqueue_many
    # inserts tens of thousands of jobs at a time.
    new_per_label: Counter[tuple[str, str]] | None = Counter() if metrics.ENABLED else None
    for _round in range(_MAX_RESOLVE_ROUNDS):
        if ids is None or _round:
            ids = [new_job_id() for _ in todo]
        batch = [specs[i] for i in todo]
        inserted: Mapping[uuid.UUID, tuple[Any, ...]]
        if with_parents:
            inserted, missing = db.insert_jobs_with_parents(
                batch, ids, using=alias, trace_context=trace_context
            )
            if missing:
                raise _unknown_parents(specs, missing, names)
        else:
            inserted = db.insert_jobs(batch, ids, using=alias, trace_context=trace_context)
        replays = []
        for index, job_id in zip(todo, ids, strict=True):
            if job_id in inserted:
                spec = specs[index]
                results[index] = EnqueueResult(
                    None, True, pending=(spec, job_id, alias, trace_context, *inserted[job_id])
                )
                if new_per_label is not None:
                    new_per_label[spec.queue, spec.type] += 1
                if debug:
                    logger.debug(
                        "Job enqueued id=%s type=%s queue=%s",
                        job_id,
                        spec.type,
                        spec.queue,
                        extra={"job_id": str(job_id), "job_type": spec.type, "queue": spec.queue},
                    )
            else:
                replays.append(index)
        todo = _resolve_replays(alias, specs, replays, results)
        if not todo:
            for (queue, type_name), count in (new_per_label or {}).items():
                metrics.record_enqueued(queue, type_name, count)
            return [r for r in results if r is not None]
    raise DurableJobsError(
        "Could not enqueue: the jobs holding these idempotency keys kept disappearing: "
        + ", ".join(repr(specs[i].idempotency_key) for i in todo)
    )


def _unknown_parents(
    specs: Sequence[JobSpec], missing: Collection[uuid.UUID], names: Sequence[str] | None
) -> InvalidJob:
    """The error for parents that do not exist, on the first spec that names one."""
    unknown = set(missing)
    index, spec = next((i, s) for i, s in enumerate(specs) if unknown.intersection(s.parents))
    named = [str(parent) for parent in spec.parents if parent in unknown]
    field = "depends_on" if names is None else f"{names[index]}.depends_on"
    return InvalidJob(
        field,
        f"no job with id {', '.join(named)} (a parent must exist before its child is "
        "enqueued; to enqueue both at once, use chain() or group()).",
        code=InvalidJob.UNKNOWN_PARENT,
    )


def _resolve_replays(
    alias: str,
    specs: Sequence[JobSpec],
    replays: list[int],
    results: list[EnqueueResult | None],
) -> list[int]:
    """Match skipped rows with the jobs holding their keys; return those to insert again."""
    if not replays:
        return []
    keys = {specs[i].idempotency_key for i in replays}
    existing = {
        job.idempotency_key: job
        for job in Job.objects.using(alias).filter(idempotency_key__in=keys)
    }
    parents = _parents_of(
        alias,
        [
            job.pk
            for index in replays
            if (job := existing.get(specs[index].idempotency_key)) is not None
            and (job.parent_count or specs[index].parents)
        ],
    )
    again = []
    for index in replays:
        spec = specs[index]
        # Rows without a key always insert (S101: narrows the type for mypy only).
        assert spec.idempotency_key is not None  # noqa: S101
        job = existing.get(spec.idempotency_key)
        if job is None:
            again.append(index)
            continue
        differences = spec.differences(job)
        if set(spec.parents) != parents.get(job.pk, set()):
            differences.append("depends_on")
        if differences:
            raise IdempotencyConflict(spec.idempotency_key, job, differences)
        results[index] = EnqueueResult(job, created=False)
        logger.debug(
            "Job enqueue replayed id=%s type=%s key=%s",
            job.pk,
            job.type,
            spec.idempotency_key,
            extra={"job_id": str(job.pk), "job_type": job.type, "queue": job.queue},
        )
    return again


def _parents_of(alias: str, job_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, set[uuid.UUID]]:
    """``{job id: its parents' ids}`` for ``job_ids`` (no query when empty)."""
    parents: dict[uuid.UUID, set[uuid.UUID]] = {}
    if job_ids:
        # depends_on edges only: ctx.run_job's 'awaits' ones came later.
        edges = JobDependency.objects.using(alias).filter(
            child_id__in=list(job_ids), kind=DependencyKind.DEPENDS_ON
        )
        for child, parent in edges.values_list("child_id", "parent_id"):
            parents.setdefault(child, set()).add(parent)
    return parents


def _job_from_spec(
    spec: JobSpec,
    job_id: uuid.UUID,
    alias: str,
    trace_context: str | None,
    available_at: datetime,
    created_at: datetime,
    *state: Any,
) -> Job:
    """The ``Job`` just inserted, built without reading it back.

    ``state`` is the status, ``waiting_on`` and ``last_error`` of a job
    inserted with parents (none: pending).
    """
    status, waiting_on, last_error = state or (JobStatus.PENDING, 0, "")
    # Positional arguments in field order: Model.__init__'s fast path, which
    # matters when enqueue_many builds tens of thousands of jobs.
    job = Job(
        job_id,  # id
        spec.type,
        spec.queue,
        spec.stored_payload(),  # not the caller's dict, which they may mutate
        spec.idempotency_key,
        status,
        spec.priority,
        0,  # attempts
        spec.max_attempts,
        available_at,
        created_at,
        created_at,  # updated_at
        None,  # started_at
        created_at if status == JobStatus.CANCELLED else None,  # completed_at
        last_error,
        [],  # errors
        None,  # result
        None,  # lease_holder
        None,  # lease_expires_at
        None,  # lease_token
        spec.timeout,  # timeout
        spec.concurrency_key,  # concurrency_key
        None,  # cancel_requested_at
        spec.on_parent_failure,
        len(spec.parents),  # parent_count
        waiting_on,
        0,  # dependent_count
        None if trace_context is None else json.loads(trace_context),
        None,  # waiting_for
    )
    job._state.adding = False
    job._state.db = alias
    return job
