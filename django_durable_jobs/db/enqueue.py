"""The gateway's enqueue: insert jobs (one, a batch, a batch with parents), and the
notifications an enqueue, a pause or a cancel sends. SQL: ``enqueue.sql``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from json.encoder import encode_basestring as _json_str
from typing import TYPE_CHECKING, NamedTuple

from .. import db as gateway
from ..conf import jobs_settings
from ..constants import (
    CANCEL_NOTIFY_PREFIX,
    QUEUE_STATE_NOTIFY_PREFIX,
)

if TYPE_CHECKING:
    from ..validation import JobSpec


def notify(using: str, queues: Iterable[str]) -> None:
    """Wake the workers of ``queues`` (delivered when the transaction commits)."""
    names = sorted(set(queues))
    if names:
        gateway._run(
            using, "notify_queues", {"channel": jobs_settings.NOTIFY_CHANNEL, "queues": names}
        )


def request_cancel(using: str, job_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Mark these jobs' cancel as requested, if still running, and tell their workers.

    The notification is delivered when the caller's transaction commits.
    Returns the ids of the running jobs asked.
    """
    rows = gateway._run_through_django(
        using,
        "request_cancel",
        {
            "ids": list(job_ids),
            "channel": jobs_settings.NOTIFY_CHANNEL,
            "prefix": CANCEL_NOTIFY_PREFIX,
        },
    )
    return {row[0] for row in rows}


def notify_queue_state(using: str, queue: str) -> None:
    """Tell the workers that ``queue`` was paused or resumed (delivered at commit).

    On the enqueue channel, as ``queue_state:<queue>``: a payload no queue
    name can be, so listeners tell it from an enqueue's.
    """
    gateway._run(
        using,
        "notify_queues",
        {
            "channel": jobs_settings.NOTIFY_CHANNEL,
            "queues": [QUEUE_STATE_NOTIFY_PREFIX + queue],
        },
    )


def insert_jobs(
    specs: Sequence[JobSpec],
    ids: Sequence[uuid.UUID],
    *,
    using: str,
    trace_context: str | None = None,
) -> dict[uuid.UUID, tuple[datetime, datetime]]:
    """Insert ``specs`` with ``ids`` in one statement (one round trip).

    ``trace_context`` (JSON, see ``tracing``) is stored with every row.
    Returns ``{id: (available_at, created_at)}`` for the rows inserted; a
    row missing from it was skipped because its idempotency key is taken.
    """
    channel = jobs_settings.NOTIFY_CHANNEL
    if len(specs) == 1:
        spec = specs[0]
        rows = gateway._run_through_django(
            using,
            "insert_job" if spec.idempotency_key is None else "insert_job_keyed",
            {
                "id": ids[0],
                "type": spec.type,
                "queue": spec.queue,
                "payload": spec.payload_json,
                "key": spec.idempotency_key,
                "priority": spec.priority,
                "max_attempts": spec.max_attempts,
                "delay_us": spec.delay_us,
                "run_at": spec.run_at,
                "timeout": spec.timeout,
                "concurrency_key": spec.concurrency_key,
                "trace_context": trace_context,
                "channel": channel,
            },
        )
        return {row[0]: (row[1], row[2]) for row in rows}

    keyed = any(spec.idempotency_key is not None for spec in specs)
    document = "[" + ",".join(map(_job_row, specs, ids)) + "]"
    ((inserted, now),) = gateway._run(
        using,
        "insert_jobs" if keyed else "insert_jobs_unkeyed",
        {"jobs": document, "channel": channel, "trace_context": trace_context},
    )
    if keyed:
        inserted_ids = set(inserted or ())
    else:
        # Plain INSERT: all rows or an error. A check of our own query (S101: not
        # input validation, nothing relies on it under python -O).
        assert inserted == len(specs)  # noqa: S101
        inserted_ids = set(ids)
    # Computed here exactly as the SQL does (whole microseconds), rather
    # than sent back row by row.
    return {
        job_id: (_available_at(spec, now), now)
        for spec, job_id in zip(specs, ids, strict=True)
        if job_id in inserted_ids
    }


def _job_row(spec: JobSpec, job_id: uuid.UUID) -> str:
    """One row of ``insert_jobs``' JSON document (see the query for the layout)."""
    return (
        f'["{job_id}",{_json_str(spec.type)},{_json_str(spec.queue)},{spec.payload_json},'
        f"{'null' if spec.idempotency_key is None else _json_str(spec.idempotency_key)},"
        f"{spec.priority},{spec.max_attempts},"
        f"{'null' if spec.delay_us is None else spec.delay_us},"
        f"{'null' if spec.run_at is None else _json_str(spec.run_at.isoformat())},"
        f"{'null' if spec.timeout is None else repr(spec.timeout)},"
        f"{'null' if spec.concurrency_key is None else _json_str(spec.concurrency_key)}]"
    )


class InsertedWithParents(NamedTuple):
    """What ``insert_jobs_with_parents`` did."""

    #: ``{id: (available_at, created_at, status, waiting_on, last_error)}``
    #: of the rows inserted; a row missing was skipped (its key is taken).
    inserted: dict[uuid.UUID, tuple[datetime, datetime, str, int, str]]
    #: Parents that do not exist: then nothing was inserted.
    missing: set[uuid.UUID]


def insert_jobs_with_parents(
    specs: Sequence[JobSpec],
    ids: Sequence[uuid.UUID],
    *,
    using: str,
    trace_context: str | None = None,
) -> InsertedWithParents:
    """Insert ``specs``, some with parents (``depends_on``), in one statement.

    The parents are locked until the caller's transaction ends; each job
    starts ``waiting``, ``pending`` or ``cancelled`` as its parents' newest
    statuses say. Nothing is inserted if a parent does not exist. Inside a
    transaction, the statement is a savepoint of its own
    (``retrying_moves``).
    """
    document = "[" + ",".join(map(_job_row_with_parents, specs, ids)) + "]"
    run = gateway._run_through_django if len(specs) == 1 else gateway._run
    params = {
        "jobs": document,
        "channel": jobs_settings.NOTIFY_CHANNEL,
        "trace_context": trace_context,
    }
    if _is_shape(specs, ids):
        # chain() and group() of new jobs: no row outside the batch is read
        # or written, so none can have moved meanwhile.
        (row,) = run(using, "insert_job_shape", params)
    else:
        # Again when a parent it waited for finished meanwhile (its row moved).
        (row,) = gateway.retrying_moves(
            using, lambda: run(using, "insert_jobs_with_parents", params)
        )
    inserted, statuses, waiting, errors, now, missing, _counted, _notified = row
    by_id = {spec_id: spec for spec, spec_id in zip(specs, ids, strict=True)}
    rows = {}
    for job_id, status, waiting_on, last_error in zip(
        inserted or (), statuses or (), waiting or (), errors or (), strict=True
    ):
        spec = by_id[job_id]
        rows[job_id] = (_available_at(spec, now), now, status, waiting_on, last_error)
    return InsertedWithParents(rows, set(missing or ()))


def _is_shape(specs: Sequence[JobSpec], ids: Sequence[uuid.UUID]) -> bool:
    """Whether every parent is a row of the batch, and no row has an idempotency key:
    ``insert_job_shape``'s case, which reads nothing outside the batch."""
    batch = set(ids)
    return all(spec.idempotency_key is None and batch.issuperset(spec.parents) for spec in specs)


def _job_row_with_parents(spec: JobSpec, job_id: uuid.UUID) -> str:
    parents = ",".join(f'"{parent}"' for parent in spec.parents)
    return f'{_job_row(spec, job_id)[:-1]},"{spec.on_parent_failure}",[{parents}]]'


def _available_at(spec: JobSpec, now: datetime) -> datetime:
    """A new job's available_at, computed exactly as the insert's SQL does."""
    if spec.run_at is not None:
        return spec.run_at
    if spec.delay_us is None:
        return now
    return now + timedelta(microseconds=spec.delay_us)
