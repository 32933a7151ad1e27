"""The gateway: the only code in the package that runs SQL of its own.

Typed functions, one per thing the queue asks of PostgreSQL (insert, claim,
record outcomes, extend leases, reap, prune, the worker's row, queue depth,
LISTEN). Their SQL is in ``queries.sql``; the JSON documents that carry a
batch into one statement are built here too. The ORM serves everything else
(admin, API, CLI, operations).

Every function runs on the Django connection of the job table's database,
so it shares the caller's transaction: a job enqueued inside
``transaction.atomic()`` commits or rolls back with the caller's data.

Two paths to the connection:

- ``_run_through_django``: Django's cursor wrapper, so what users hook into
  Django's query execution (``CaptureQueriesContext``, the Debug Toolbar,
  ``connection.execute_wrapper``, Sentry, OpenTelemetry) sees the statement.
  A single ``enqueue()``, the one call made from users' request code, goes
  this way.
- ``_run``: a server-side binding cursor with binary parameters, kept per
  psycopg connection. Django's cursor binds on the client, quoting every
  array element in Python; this path makes a 20,000-job ``enqueue_many``
  about a third faster and serves the worker's threads, whose statements
  run on the worker's own connections, not in users' code.
"""

from __future__ import annotations

import json
import operator
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from json.encoder import encode_basestring as _json_str
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import psycopg
from django.db import connections, router, transaction

from ..conf import jobs_settings
from ..constants import (
    CANCEL_NOTIFY_PREFIX,
    FINISHED_CHANNEL_SUFFIX,
    FINISHED_NOTIFY_IDS,
    FINISHED_NOTIFY_PREFIX,
    QUEUE_STATE_NOTIFY_PREFIX,
)
from ..flow import FlowCounts, room
from .listening import listen, listen_loop
from .queries import QUERIES
from .records import (
    ClaimedJob,
    ExpiredLease,
    Outcome,
    QueueCounts,
    QueueMinuteCounts,
    Transition,
)

if TYPE_CHECKING:
    from ..flow import QueueLimits
    from ..validation import JobSpec

__all__ = [
    "QUERIES",
    "ClaimedJob",
    "ExpiredLease",
    "InsertedWithParents",
    "LimitedClaim",
    "Outcome",
    "PruneResult",
    "QueueCounts",
    "QueueMinuteCounts",
    "Transition",
    "active_queues",
    "add_queue_stats",
    "cancel_requests",
    "claim",
    "claim_keyed",
    "claim_limited",
    "claim_per_queue",
    "connection_params",
    "database_alias",
    "delete_worker",
    "extend_leases",
    "finished_channel",
    "insert_jobs",
    "insert_jobs_with_parents",
    "jobs_held_by_keys",
    "keys_held_back",
    "listen",
    "listen_alias",
    "listen_loop",
    "next_available_at",
    "notify",
    "notify_finished",
    "notify_queue_state",
    "paused_queues",
    "prune_batch",
    "prune_queue_stats",
    "queue_depth",
    "queue_overview",
    "rate_window_starts",
    "reap",
    "record_outcomes",
    "record_outcomes_directly",
    "release_dependents",
    "request_cancel",
    "rewait_dependents",
    "send_probe",
    "upsert_worker",
]


def database_alias(using: str | None = None) -> str:
    """The database the ``Job`` table lives in (as the project's routers say)."""
    if using is not None:
        return using
    from ..models import Job  # models import conf; the gateway must import without apps ready

    return router.db_for_write(Job) or "default"


# -- running statements ---------------------------------------------------


def _run(using: str, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Run the named query on the fast path (see the module docstring); fetch its rows.

    Database errors still come out as ``django.db`` exceptions, as from the ORM.
    """
    connection = connections[using]
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor = _cursor(connection)
        cursor.execute(QUERIES[name], params, binary=True)
        # Every named query returns rows (RETURNING or SELECT); not testing
        # cursor.description saves building its Column objects per call.
        return cursor.fetchall()


def _run_named(using: str, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``_run``, each row a dict by column name (for rows read by name, not position)."""
    connection = connections[using]
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor = _cursor(connection)
        cursor.execute(QUERIES[name], params, binary=True)
        names = [column.name for column in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _run_through_django(using: str, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Run the named query through Django's cursor, which users' instrumentation sees."""
    with connections[using].cursor() as cursor:
        cursor.execute(QUERIES[name], params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows


_CURSOR_ATTRIBUTE = "_durable_jobs_cursor"


def _cursor(connection: Any) -> psycopg.Cursor[Any]:
    """A server-side binding cursor kept for the life of the psycopg connection.

    Making a psycopg cursor per statement costs a measurable share of a
    small statement. Django connections are per thread, and a reconnect
    makes a new psycopg connection, hence a new cursor.
    """
    cursor = getattr(connection, _CURSOR_ATTRIBUTE, None)
    if cursor is None or cursor.closed or cursor.connection is not connection.connection:
        cursor = psycopg.Cursor(connection.connection)
        setattr(connection, _CURSOR_ATTRIBUTE, cursor)
    return cursor


def connection_params(using: str) -> dict[str, Any]:
    """``psycopg.connect()`` arguments for Django's database ``using``.

    For the connections the worker opens outside Django's: LISTEN, and the
    last write of a forced exit.
    """
    params = dict(connections[using].get_connection_params())
    for django_only in ("cursor_factory", "context", "prepare_threshold", "server_side_binding"):
        params.pop(django_only, None)
    return params


# -- enqueue --------------------------------------------------------------


def notify(using: str, queues: Iterable[str]) -> None:
    """Wake the workers of ``queues`` (delivered when the transaction commits)."""
    names = sorted(set(queues))
    if names:
        _run(using, "notify_queues", {"channel": jobs_settings.NOTIFY_CHANNEL, "queues": names})


def finished_channel() -> str:
    """The channel finished jobs are NOTIFYed on (``wait()`` listens on it).

    Not the workers' ``NOTIFY_CHANNEL``: PostgreSQL sends a LISTEN
    connection only its own channels' notifications, so the workers'
    listeners are never woken by a job finishing.
    """
    return f"{jobs_settings.NOTIFY_CHANNEL}{FINISHED_CHANNEL_SUFFIX}"


def _finished_params() -> dict[str, Any]:
    return {
        "notify_finished": bool(jobs_settings.NOTIFY_FINISHED),
        "finished_channel": finished_channel(),
        "finished_prefix": FINISHED_NOTIFY_PREFIX,
        "finished_chunk": FINISHED_NOTIFY_IDS,
    }


def notify_finished(using: str, job_ids: Collection[uuid.UUID]) -> None:
    """Tell the waiters of ``job_ids`` that these jobs finished (delivered at commit).

    For the finishes that do not go through ``record_outcomes`` (which
    notifies by itself): a pending job cancelled. Nothing with
    ``NOTIFY_FINISHED`` off.
    """
    if job_ids and jobs_settings.NOTIFY_FINISHED:
        _run(using, "notify_finished", {"ids": list(job_ids), **_finished_params()})


def request_cancel(using: str, job_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Mark these jobs' cancel as requested, if still running, and tell their workers.

    The notification is delivered when the caller's transaction commits.
    Returns the ids of the running jobs asked.
    """
    rows = _run_through_django(
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
    _run(
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
        rows = _run_through_django(
            using,
            "insert_job",
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
    ((inserted, now),) = _run(
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
    statuses say. Nothing is inserted if a parent does not exist.
    """
    document = "[" + ",".join(map(_job_row_with_parents, specs, ids)) + "]"
    run = _run_through_django if len(specs) == 1 else _run
    ((inserted, statuses, waiting, errors, now, missing, _counted, _notified),) = run(
        using,
        "insert_jobs_with_parents",
        {
            "jobs": document,
            "channel": jobs_settings.NOTIFY_CHANNEL,
            "trace_context": trace_context,
        },
    )
    by_id = {spec_id: spec for spec, spec_id in zip(specs, ids, strict=True)}
    rows = {}
    for job_id, status, waiting_on, last_error in zip(
        inserted or (), statuses or (), waiting or (), errors or (), strict=True
    ):
        spec = by_id[job_id]
        rows[job_id] = (_available_at(spec, now), now, status, waiting_on, last_error)
    return InsertedWithParents(rows, set(missing or ()))


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


# -- the worker: claim, outcomes, leases ----------------------------------


def claim(
    using: str,
    *,
    worker_id: str,
    lease_seconds: float,
    limit: int,
    queues: Iterable[str] | None = None,
    excluded: Collection[str] = (),
    keyed_types: Iterable[str] = (),
) -> list[ClaimedJob]:
    """Claim up to ``limit`` runnable jobs of ``queues`` (None: any) but not of ``excluded``.

    With ``queues``, the excluded ones are left out of the list (no statement
    at all when none is left); for any queue, the statement skips them.
    """
    params: dict[str, Any] = {
        "worker_id": worker_id,
        "lease_seconds": float(lease_seconds),
        "limit": limit,
        "excluded": sorted(excluded),
        # Jobs of these types with a concurrency key: claim_keyed's, not this claim's.
        "keyed_types": sorted(keyed_types),
    }
    if queues is None:
        rows = _run(using, "claim_jobs", params)
    else:
        names = sorted(set(queues).difference(excluded))
        if not names:
            return []
        rows = _run(using, "claim_jobs_in_queues", {**params, "queues": names})
    return [ClaimedJob(*row) for row in rows]


#: A rate window keeps at most about this many entries (claims close together merge).
RATE_WINDOW_ENTRIES = 200


class LimitedClaim(NamedTuple):
    """What one claim of a limited queue got, and why it got no more."""

    jobs: list[ClaimedJob]
    #: Which limit held runnable jobs back (``flow.THROTTLE_REASONS``); None: none did.
    throttled: str | None
    #: Seconds until the rate window has room again, when the rate limit held jobs back.
    retry_after: float | None
    #: Another worker's claim of the queue held its lock: nothing was looked at.
    busy: bool = False


def claim_limited(
    using: str,
    *,
    worker_id: str,
    lease_seconds: float,
    queue: str,
    limits: QueueLimits,
    want: int,
    key_limits: Mapping[str, int] | None = None,
) -> LimitedClaim:
    """Claim up to ``want`` jobs of ``queue`` within its cluster-wide limits.

    One transaction: lock the queue's throttle row (skipped when another
    worker's claim of the queue holds it), then, in a snapshot taken after
    the lock, count the queue's running jobs and its starts in the rate
    window, claim what both limits leave, and add the starts to the window.
    """
    rate = limits.rate_limit
    window = rate.seconds if rate is not None else 0.0
    with transaction.atomic(using=using):
        if not _run(using, "lock_throttle", {"queue": queue}):
            return LimitedClaim([], None, None, busy=True)
        (state,) = _run_named(using, "throttle_state", {"queue": queue, "window_seconds": window})
        until_room, runnable = state.pop("until_room"), state.pop("runnable")
        # The other columns are what the limits count: flow.room() decides.
        allowed, throttled = room(limits, FlowCounts(**state), want)
        retry_after = float(until_room) if until_room is not None else None
        jobs = (
            claim(
                using,
                worker_id=worker_id,
                lease_seconds=lease_seconds,
                limit=allowed,
                queues=[queue],
                keyed_types=key_limits or (),
            )
            if allowed > 0 and runnable
            else []
        )
        if key_limits and runnable and len(jobs) < allowed:
            # Jobs with a concurrency key: both the queue's limits and the key's.
            jobs += claim_keyed(
                using,
                worker_id=worker_id,
                lease_seconds=lease_seconds,
                limit=allowed - len(jobs),
                key_limits=key_limits,
                queues=[queue],
            )
        if jobs and rate is not None:
            _run(
                using,
                "record_starts",
                {
                    "queue": queue,
                    "window_seconds": window,
                    "merge_seconds": window / RATE_WINDOW_ENTRIES,
                    # One statement_timestamp() for the whole claim.
                    "started_at": max(job.started_at for job in jobs),
                    "count": len(jobs),
                },
            )
    # Held back only if jobs were left runnable for that reason.
    held_back = throttled if runnable and len(jobs) < want and len(jobs) == allowed else None
    return LimitedClaim(jobs, held_back, retry_after if held_back == "rate_limit" else None)


#: The advisory lock space of concurrency keys (two-int form: this, the key's hash).
KEY_LOCK_SPACE = 0x444A4B59  # "DJKY"
#: lock_keys reads at most this many runnable jobs per key it may return.
KEY_SCAN_PER_KEY = 4


def claim_keyed(
    using: str,
    *,
    worker_id: str,
    lease_seconds: float,
    limit: int,
    key_limits: Mapping[str, int],
    queues: Iterable[str] | None = None,
    excluded: Iterable[str] = (),
) -> list[ClaimedJob]:
    """Claim up to ``limit`` jobs with a concurrency key, within each key's limit.

    ``key_limits`` is ``{type: concurrency_limit}``. One transaction (a
    savepoint inside a caller's): lock the keys of the first runnable jobs
    whose key has room, then, in a snapshot taken after the locks, claim
    what each key's limit leaves, the oldest job of a key first. A busy key
    never blocks another: its jobs are skipped, not waited for.
    """
    if limit <= 0 or not key_limits:
        return []
    types = sorted(key_limits)
    scope = {
        "queues": None if queues is None else sorted(queues),
        "excluded": sorted(excluded),
    }
    with transaction.atomic(using=using):
        locked = _run(
            using,
            "lock_keys",
            {
                **scope,
                "types": types,
                "limits": [key_limits[t] for t in types],
                "limit": limit,
                "scan": limit * KEY_SCAN_PER_KEY,
                "lock_space": KEY_LOCK_SPACE,
            },
        )
        if not locked:
            return []
        keys = sorted({(type_, key) for _, type_, key, _ in locked})
        rows = _run(
            using,
            "claim_keyed",
            {
                "key_types": [type_ for type_, _ in keys],
                "keys": [key for _, key in keys],
                "key_limits": [key_limits[type_] for type_, _ in keys],
                "ids": [row[0] for row in locked],
                "id_types": [row[1] for row in locked],
                "id_keys": [row[2] for row in locked],
                "ranks": [row[3] for row in locked],
                "limit": limit,
                "worker_id": worker_id,
                "lease_seconds": float(lease_seconds),
            },
        )
    return [ClaimedJob(*row) for row in rows]


def keys_held_back(
    using: str, key_limits: Mapping[str, int], queues: Iterable[str] | None = None
) -> list[str]:
    """Queues with a runnable job whose concurrency key is at its limit."""
    types = sorted(key_limits)
    rows = _run(
        using,
        "keys_held_back",
        {
            "types": types,
            "limits": [key_limits[t] for t in types],
            "queues": None if queues is None else sorted(queues),
        },
    )
    return [row[0] for row in rows]


def jobs_held_by_keys(using: str, key_limits: Mapping[str, int]) -> dict[str, int]:
    """``{queue: runnable jobs whose concurrency key is at its limit}`` (queues with some)."""
    types = sorted(key_limits)
    rows = _run_through_django(
        using,
        "jobs_held_by_keys",
        {"types": types, "limits": [key_limits[t] for t in types]},
    )
    return {queue: int(count) for queue, count in rows}


def rate_window_starts(using: str, windows: Mapping[str, float]) -> dict[str, int]:
    """``{queue: starts in its rate window now}`` for ``windows`` (``{queue: seconds}``)."""
    queues = sorted(windows)
    rows = _run_through_django(
        using,
        "rate_window_starts",
        {"queues": queues, "window_seconds": [float(windows[q]) for q in queues]},
    )
    return {queue: int(starts) for queue, starts in rows}


def claim_per_queue(
    using: str,
    *,
    worker_id: str,
    lease_seconds: float,
    limits: Sequence[tuple[str, int]],
    keyed_types: Iterable[str] = (),
    excluded: Collection[str] = (),
) -> list[ClaimedJob]:
    """Claim up to ``free`` jobs of each ``(queue, free)`` in ``limits``, in one statement.

    The ``excluded`` queues are left out (no statement when none is left).
    """
    if excluded:
        limits = [(queue, free) for queue, free in limits if queue not in excluded]
        if not limits:
            return []
    rows = _run(
        using,
        "claim_jobs_per_queue",
        {
            "worker_id": worker_id,
            "lease_seconds": float(lease_seconds),
            "queues": [queue for queue, _ in limits],
            "limits": [free for _, free in limits],
            "total": sum(free for _, free in limits),
            "keyed_types": sorted(keyed_types),
        },
    )
    return [ClaimedJob(*row) for row in rows]


def _outcome_row(outcome: Outcome) -> str:
    """One row of ``record_outcomes``' JSON document (see the query for the layout)."""
    return (
        f'["{outcome.job_id}","{outcome.lease_token}","{outcome.transition.value}",'
        f"{outcome.result_json},"
        f"{'null' if outcome.delay_us is None else outcome.delay_us},"
        f"{'null' if outcome.run_at is None else _json_str(outcome.run_at.isoformat())},"
        f"{'null' if outcome.last_error is None else _json_str(outcome.last_error)},"
        f"{outcome.error_entry_json}]"
    )


def _outcomes_params(
    outcomes: Sequence[Outcome], history_limit: int, *, without_dependents: bool = True
) -> dict[str, Any]:
    return {
        "outcomes": "[" + ",".join(map(_outcome_row, outcomes)) + "]",
        "history_limit": history_limit,
        "without_dependents": without_dependents,
        **_finished_params(),
    }


class _Statements(Protocol):
    """Where ``_record_outcomes`` runs its statements."""

    def run(self, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]: ...

    def atomic(self) -> AbstractContextManager[Any]: ...


class _DjangoStatements:
    """On the Django connection ``using`` (the worker's, the reaper's, an operator's)."""

    def __init__(self, using: str) -> None:
        self.using = using

    def run(self, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return _run(self.using, name, params)

    def atomic(self) -> AbstractContextManager[Any]:
        return transaction.atomic(using=self.using)


class _DirectStatements:
    """On a psycopg connection of its own (a forced exit's last write)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def run(self, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return self.conn.execute(QUERIES[name], params).fetchall()

    def atomic(self) -> AbstractContextManager[Any]:
        return self.conn.transaction()


_job_id = operator.attrgetter("job_id")

#: The statuses that end a job, which release its children.
_ENDED = frozenset({"completed", "dead", "cancelled"})


def record_outcomes(
    using: str,
    outcomes: Sequence[Outcome],
    *,
    history_limit: int,
    cancelled_children: set[uuid.UUID] | None = None,
) -> set[uuid.UUID]:
    """Write ``outcomes``; release the children of the jobs they end; the ids written.

    ``cancelled_children``, if given, receives the waiting jobs cancelled
    because a parent ended dead or cancelled (at every level below): they
    finished too, without a handler, and the caller announces them once
    its transaction is committed (``hooks.jobs_finished``).

    The others lost their lease. Jobs without dependents (the outcomes'
    ``dependent_count``, as of the claim) are written in one statement,
    exactly as before dependencies existed; it refuses a job that gained
    a child since, which is then written with the jobs known to have
    dependents: in one transaction that records them, then releases their
    children (``_record_and_release``).
    """
    return _record_outcomes(_DjangoStatements(using), outcomes, history_limit, cancelled_children)


def _record_outcomes(
    statements: _Statements,
    outcomes: Sequence[Outcome],
    history_limit: int,
    cancelled_children: set[uuid.UUID] | None = None,
) -> set[uuid.UUID]:
    # In id order, the order in which an enqueue locks its parents: a batch
    # that ends two parents of a child being enqueued then waits for that
    # enqueue instead of deadlocking with it (the UPDATE locks its rows in
    # the order it reads the outcomes).
    outcomes = sorted(outcomes, key=_job_id)
    if any(outcome.dependent_count for outcome in outcomes):
        return _record_and_release(statements, outcomes, history_limit, cancelled_children)
    rows = statements.run("record_outcomes", _outcomes_params(outcomes, history_limit))
    written = {row[0] for row in rows}
    if len(written) < len(outcomes):
        refused = [outcome for outcome in outcomes if outcome.job_id not in written]
        gained = {
            row[0]
            for row in statements.run(
                "held_with_dependents",
                {"ids": [o.job_id for o in refused], "tokens": [o.lease_token for o in refused]},
            )
        }
        if gained:
            again = [outcome for outcome in refused if outcome.job_id in gained]
            written |= _record_and_release(statements, again, history_limit, cancelled_children)
    return written


def _record_and_release(
    statements: _Statements,
    outcomes: Sequence[Outcome],
    history_limit: int,
    cancelled_children: set[uuid.UUID] | None,
) -> set[uuid.UUID]:
    """Write ``outcomes`` and release the children of the jobs they end, in one transaction.

    Two statements (or more, a level each, when a cancel goes down to
    grandchildren): the first locks the jobs it ends, so the second's
    snapshot, taken after, sees every child enqueued under them; an
    enqueue that comes later waits for the lock, then sees its parent
    finished. A crash between the two rolls both back.
    """
    with statements.atomic():
        rows = statements.run(
            "record_outcomes",
            _outcomes_params(outcomes, history_limit, without_dependents=False),
        )
        ended = {job_id: status for job_id, status, count in rows if count and status in _ENDED}
        cancelled = _release_levels(statements, ended)
    if cancelled_children is not None:
        cancelled_children |= cancelled
    return {row[0] for row in rows}


def _release_levels(statements: _Statements, ended: Mapping[uuid.UUID, str]) -> set[uuid.UUID]:
    """Release the children of ``ended`` (``{job id: its new status}``), then theirs;
    return the waiting jobs cancelled on the way.

    One statement per level of cancelled descendants: each one's snapshot
    is taken after the statement above locked the level it reads, so it
    sees every child enqueued under those rows before (a later enqueue
    waits for the lock, then sees the parent cancelled).
    """
    cancelled: set[uuid.UUID] = set()
    while ended:
        ids = list(ended)
        rows = statements.run(
            "release_dependents",
            {
                "ids": ids,
                "statuses": [str(ended[i]) for i in ids],
                "channel": jobs_settings.NOTIFY_CHANNEL,
                **_finished_params(),
            },
        )
        cancelled.update(row[0] for row in rows if row[0] is not None)
        ended = dict.fromkeys(
            (row[0] for row in rows if row[0] is not None and row[1]), "cancelled"
        )
    return cancelled


def release_dependents(using: str, ended: Mapping[uuid.UUID, str]) -> set[uuid.UUID]:
    """Release the children of ``ended`` (``{job id: its new status}``), in the caller's
    transaction, which must have ended and locked those jobs (an operator's cancel).

    Children are released or cancelled as ``record_outcomes`` does for the
    jobs it ends, and a cancel goes down to every waiting descendant.
    Returns the descendants cancelled.
    """
    return _release_levels(_DjangoStatements(using), ended)


def rewait_dependents(using: str, job_ids: Collection[uuid.UUID]) -> None:
    """Make the waiting dependents of requeued ``job_ids`` wait for them again.

    In the caller's transaction, which locked and requeued those jobs.
    """
    if job_ids:
        _run(using, "rewait_dependents", {"ids": list(job_ids)})


def record_outcomes_directly(
    using: str, outcomes: Sequence[Outcome], *, history_limit: int, timeout_seconds: float
) -> None:
    """``record_outcomes`` on a fresh connection, bounded in time: a forced exit's last write.

    Not on the worker's Django connections: the signal handler that calls it
    may have interrupted any of them mid-statement.
    """
    params = connection_params(using)
    params["connect_timeout"] = max(1, round(timeout_seconds))
    with psycopg.connect(**params, autocommit=True) as conn, conn.transaction():
        # Local to this transaction (set_config's true): through a transaction
        # pooler, a session setting would stay on the server connection for
        # whichever client the pooler gives it to next.
        conn.execute(
            "SELECT set_config('statement_timeout', %s, true)",
            [str(round(timeout_seconds * 1000))],
        )
        _record_outcomes(_DirectStatements(conn), outcomes, history_limit)


def extend_leases(
    using: str, held: Mapping[uuid.UUID, uuid.UUID], *, lease_seconds: float
) -> set[uuid.UUID]:
    """Push back the leases of ``held`` (``{job id: lease token}``); the ids extended."""
    rows = _run(
        using,
        "extend_leases",
        {"ids": list(held), "tokens": list(held.values()), "lease_seconds": float(lease_seconds)},
    )
    return {row[0] for row in rows}


def cancel_requests(using: str, held: Mapping[uuid.UUID, uuid.UUID]) -> set[uuid.UUID]:
    """Which of ``held`` (``{job id: lease token}``) have a cancel requested (no write)."""
    rows = _run(using, "cancel_requests", {"ids": list(held), "tokens": list(held.values())})
    return {row[0] for row in rows}


def reap(
    using: str,
    *,
    lock_key: int,
    limit: int,
    history_limit: int,
    decide: Callable[[ExpiredLease], Outcome],
    cancelled_children: set[uuid.UUID] | None = None,
) -> list[tuple[ExpiredLease, Outcome]]:
    """Return expired leases' jobs to pending or dead, as ``decide`` says, in one transaction.

    ``cancelled_children``: as ``record_outcomes``'.

    The rows stay locked from the read to the write, so a late heartbeat or
    outcome of the lost worker waits, then finds the lease token gone.
    """
    with transaction.atomic(using=using):
        expired = [
            ExpiredLease(*row)
            for row in _run(using, "reap_jobs", {"lock_key": lock_key, "limit": limit})
        ]
        if not expired:
            return []
        outcomes = [decide(lease) for lease in expired]
        written = record_outcomes(
            using, outcomes, history_limit=history_limit, cancelled_children=cancelled_children
        )
    return [pair for pair in zip(expired, outcomes, strict=True) if pair[0].id in written]


def next_available_at(
    using: str, queues: Iterable[str] | None, excluded: Collection[str] = ()
) -> datetime | None:
    """When the next pending job of ``queues`` (None: all) but not of ``excluded``
    becomes runnable."""
    names = sorted(queues) if queues is not None else None
    rows = _run(using, "next_available_at", {"queues": names, "excluded": sorted(excluded)})
    return rows[0][0] if rows else None


def paused_queues(using: str) -> dict[str, float | None]:
    """``{queue: seconds until its pause lifts (None: until resumed)}`` for the paused queues."""
    return {
        name: None if left is None else max(float(left), 0.0)
        for name, left in _run(using, "paused_queues", {})
    }


def listen_alias(using: str) -> str:
    """The database alias to LISTEN on for the job database ``using``.

    ``LISTEN_DATABASE`` when set: a transaction pooler in front of ``using``
    runs each statement on whichever server connection is free, so a LISTEN
    through it lands on a connection the listener no longer holds, and
    nothing it LISTENs for ever reaches it.
    """
    alias = jobs_settings.LISTEN_DATABASE
    return using if alias is None else str(alias)


def send_probe(conn: psycopg.Connection[Any], channel: str, payload: str) -> None:
    """NOTIFY ``payload`` on ``channel`` (in autocommit: delivered at once); ``worker/probe.py``."""
    conn.execute(QUERIES["notify_probe"], {"channel": channel, "payload": payload})


# -- the workers table ----------------------------------------------------


def upsert_worker(using: str, row: Mapping[str, Any], *, forget_after_seconds: float) -> None:
    """Record the worker as alive now; forget workers silent for ``forget_after_seconds``."""
    params = {**row, "queues": json.dumps(list(row["queues"]))}
    _run_through_django(
        using, "upsert_worker", {**params, "forget_after_seconds": forget_after_seconds}
    )


def delete_worker(using: str, worker_id: str) -> None:
    _run_through_django(using, "delete_worker", {"id": worker_id})


# -- retention and metrics ------------------------------------------------


class PruneResult(NamedTuple):
    acquired: bool
    deleted: int


def prune_batch(
    using: str,
    statuses: Iterable[str],
    older_than: timedelta,
    *,
    limit: int,
    lock_key: int | None,
) -> PruneResult:
    """Delete up to ``limit`` finished jobs of ``statuses`` older than ``older_than``.

    With ``lock_key``, nothing is deleted when another pruner holds it.
    """
    ((acquired, deleted),) = _run(
        using,
        "prune_jobs",
        {
            "statuses": [str(status) for status in statuses],
            "older_than_seconds": older_than.total_seconds(),
            "limit": limit,
            "lock_key": lock_key,
        },
    )
    return PruneResult(bool(acquired), int(deleted))


def queue_depth(using: str) -> list[tuple[str, str, int, float | None]]:
    """``(queue, status, count, oldest runnable pending age in seconds)`` rows."""
    return [
        (queue, status, int(count), None if age is None else max(float(age), 0.0))
        for queue, status, count, age in _run_through_django(using, "queue_depth", {})
    ]


# -- the admin's Queues page, and the per-minute counts it charts ------------


def add_queue_stats(using: str, counts: Sequence[QueueMinuteCounts]) -> None:
    """Add ``counts`` to the per-minute rows of their queues, in one statement."""
    if not counts:
        return
    _run(
        using,
        "add_queue_stats",
        {
            "queues": [row.queue for row in counts],
            "minutes": [row.minute for row in counts],
            "completed": [row.completed for row in counts],
            "failed": [row.failed for row in counts],
            "dead": [row.dead for row in counts],
        },
    )


def prune_queue_stats(using: str, older_than: timedelta) -> int:
    """Delete the per-minute counts older than ``older_than``; how many rows."""
    ((deleted,),) = _run(
        using, "prune_queue_stats", {"older_than_seconds": older_than.total_seconds()}
    )
    return int(deleted)


def active_queues(using: str, since: datetime) -> set[str]:
    """Queues with unfinished or dead jobs, or with outcomes counted since ``since``."""
    return {row[0] for row in _run_through_django(using, "active_queues", {"since": since})}


def queue_overview(
    using: str, queues: Sequence[str], *, cap: int, max_priorities: int
) -> list[QueueCounts]:
    """Counts (pending, waiting and dead up to ``cap``) and oldest age of each of ``queues``."""
    if not queues:
        return []
    rows = _run_through_django(
        using,
        "queue_overview",
        {"queues": list(queues), "cap": cap, "max_priorities": max_priorities},
    )
    return [
        QueueCounts(
            queue,
            int(pending),
            int(waiting),
            int(dead),
            int(running),
            None if age is None else max(float(age), 0.0),
        )
        for queue, pending, waiting, dead, running, age in rows
    ]
