"""The gateway: the only code in the package that runs SQL of its own.

Typed functions, one per thing the queue asks of PostgreSQL, by what they
serve, each module with its SQL beside it (``<area>.sql``, loaded into
``QUERIES`` by ``queries.py``):

- ``enqueue``: insert jobs, and the notifications of an enqueue, a pause,
  a cancel;
- ``claims``: claim jobs, record their outcomes (fenced by the lease
  token), release their dependents, tell ``wait()`` what finished;
- ``flow_control``: the limited queues' and the concurrency keys' claims,
  the pauses, what the limits hold back;
- ``maintenance``: leases, the reaper, cancel polls, pruning;
- ``events``: an event key's lock, its event, the wake-up of its waiters;
- ``presence``: the workers table, the workers' marks of whether they
  sleep (which decide the enqueues' NOTIFY), the notification probe, queue
  depth and the per-minute counts;
- ``listening``: the LISTEN loop the worker and ``wait()`` share;
- ``steps``: durable steps' records, checkpoints and suspensions (fenced
  by the lease token);
- ``health``: the database's vacuum health: who holds back the vacuum
  horizon, the job tables' dead tuples and last vacuum (``doctor.py``
  says what they mean).

Callers import from ``db`` itself (``db.claim(...)``). The JSON documents
that carry a batch into one statement are built in those modules too. The
ORM serves everything else (admin, API, CLI, operations).

Every function runs on the Django connection of the job table's database,
so it shares the caller's transaction: a job enqueued inside
``transaction.atomic()`` commits or rolls back with the caller's data. This
module runs the statements, on two paths to the connection (the area
modules call them as ``gateway._run``, so there is one place to observe or
replace them):

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

On that path, the statements in ``PREPARED`` (the ones a worker repeats
most whose generic plan is as good as a custom one) are server-side
prepared statements when ``_prepares`` says the connection allows it
(``DURABLE_JOBS["PREPARE_STATEMENTS"]``; by default, when the connection
reaches PostgreSQL itself and not a pooler): parsed and planned once per
connection, which saves 0.45-0.9 ms of each (``benchmarks/planning.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import psycopg
from django.db import DatabaseError, connections, router, transaction

from ..conf import jobs_settings
from .claims import _outcomes_params as _outcomes_params  # benchmarks/statements.py
from .claims import (
    claim,
    claim_ids,
    claim_per_queue,
    finished_channel,
    leased_to,
    next_available_at,
    notify_finished,
    record_outcomes,
    record_outcomes_directly,
    release_dependents,
    rewait_dependents,
)
from .enqueue import (
    InsertedWithParents,
    insert_jobs,
    insert_jobs_with_parents,
    notify,
    notify_queue_state,
    request_cancel,
)
from .events import InsertedEvent, insert_event, lock_event_key, wake_event_waiters
from .flow_control import (
    LimitedClaim,
    claim_keyed,
    claim_limited,
    jobs_held_by_keys,
    keys_held_back,
    paused_queues,
    rate_window_starts,
)
from .health import (
    HorizonHolder,
    TableHealth,
    VacuumSettings,
    hidden_sessions,
    horizon_holders,
    table_health,
    vacuum_settings,
)
from .listening import (
    Interrupt,
    InterruptibleReads,
    listen,
    listen_alias,
    listen_loop,
)
from .maintenance import (
    PruneResult,
    cancel_requests,
    extend_leases,
    prune_batch,
    prune_queue_stats,
    reap,
)
from .presence import (
    active_queues,
    add_queue_stats,
    delete_worker,
    mark_listener,
    queue_depth,
    queue_overview,
    send_probe,
    still_in_progress,
    suspended_jobs,
    transactions_in_progress,
    upsert_worker,
)
from .queries import QUERIES
from .records import (
    ClaimedJob,
    ExpiredLease,
    Outcome,
    QueueCounts,
    QueueMinuteCounts,
    Transition,
)
from .steps import (
    Fenced,
    StepRecord,
    add_event_waiter,
    await_child,
    child_state,
    load_steps,
    lock_job,
    read_event,
    record_step,
    suspend_job,
)

T = TypeVar("T")

__all__ = [
    "MOVE_ATTEMPTS",
    "QUERIES",
    "ClaimedJob",
    "ExpiredLease",
    "Fenced",
    "HorizonHolder",
    "InsertedEvent",
    "InsertedWithParents",
    "Interrupt",
    "InterruptibleReads",
    "LimitedClaim",
    "Outcome",
    "PruneResult",
    "QueueCounts",
    "QueueMinuteCounts",
    "StepRecord",
    "TableHealth",
    "Transition",
    "VacuumSettings",
    "active_queues",
    "add_event_waiter",
    "add_queue_stats",
    "again_if_moved",
    "await_child",
    "cancel_requests",
    "child_state",
    "claim",
    "claim_ids",
    "claim_keyed",
    "claim_limited",
    "claim_per_queue",
    "connection_params",
    "database_alias",
    "delete_worker",
    "extend_leases",
    "finished_channel",
    "hidden_sessions",
    "horizon_holders",
    "insert_event",
    "insert_jobs",
    "insert_jobs_with_parents",
    "jobs_held_by_keys",
    "keys_held_back",
    "leased_to",
    "listen",
    "listen_alias",
    "listen_loop",
    "load_steps",
    "lock_event_key",
    "lock_job",
    "mark_listener",
    "moved_by_a_concurrent_update",
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
    "read_event",
    "reap",
    "record_outcomes",
    "record_outcomes_directly",
    "record_step",
    "release_dependents",
    "request_cancel",
    "retrying_moves",
    "rewait_dependents",
    "send_probe",
    "still_in_progress",
    "suspend_job",
    "suspended_jobs",
    "table_health",
    "transactions_in_progress",
    "upsert_worker",
    "vacuum_settings",
    "wake_event_waiters",
]


def database_alias(using: str | None = None) -> str:
    """The database the ``Job`` table lives in.

    ``DURABLE_JOBS["DATABASE"]`` when set (the shipped ``QueueRouter`` sends
    the ORM there too), else what the project's routers say, else
    ``"default"``.
    """
    if using is not None:
        return using
    from ..conf import jobs_settings

    configured: str | None = jobs_settings.DATABASE
    if configured is not None:
        return configured
    from ..models import Job  # models import conf; the gateway must import without apps ready

    return router.db_for_write(Job) or "default"


# -- running statements ---------------------------------------------------

#: How many times ``retrying_moves`` runs a call whose rows kept moving.
MOVE_ATTEMPTS = 5


def moved_by_a_concurrent_update(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL's refusal to lock a row another transaction moved.

    The job table is partitioned (``db/partitions.py``): the UPDATE that
    finishes a job moves its row to a history partition. A statement that
    waited for that row's lock then fails with a serialization error, where
    a row updated in place would have been read again in its new version.
    """
    cause = exc.__cause__ if isinstance(exc, DatabaseError) else exc
    return isinstance(cause, psycopg.errors.SerializationFailure) and (
        "moved to another partition" in str(cause)
    )


def again_if_moved(call: Callable[[], T]) -> T:
    """``call()``, run again (up to ``MOVE_ATTEMPTS`` in all) when it failed because a
    row it waited for was moved (see above). ``call`` must be repeatable: its own
    transaction, or a savepoint (``retrying_moves`` makes one)."""
    for attempt in range(1, MOVE_ATTEMPTS + 1):
        try:
            return call()
        except (DatabaseError, psycopg.errors.SerializationFailure) as exc:
            if attempt == MOVE_ATTEMPTS or not moved_by_a_concurrent_update(exc):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def retrying_moves(using: str, call: Callable[[], T]) -> T:
    """``call()`` on Django's connection ``using``, run again when a row it waited for
    was moved (see above).

    Inside a transaction, each attempt is a savepoint, so that a failed one
    leaves the caller's transaction usable; outside one, the statement is
    its own transaction. Each attempt takes a new snapshot (READ COMMITTED)
    and reads the moved row where it is now.
    """
    connection = connections[using]

    def attempt() -> T:
        if connection.in_atomic_block:
            with transaction.atomic(using=using):
                return call()
        return call()

    return again_if_moved(attempt)


def _run(using: str, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Run the named query on the fast path (see the module docstring); fetch its rows.

    Database errors still come out as ``django.db`` exceptions, as from the ORM.
    """
    connection = connections[using]
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor = _cursor(connection)
        # None, not False: psycopg's own prepare_threshold then decides, as
        # it does for every other statement (Django's default: never).
        prepare = (name in PREPARED and _prepares(connection)) or None
        cursor.execute(QUERIES[name], params, binary=True, prepare=prepare)
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


#: The named queries ``_run`` prepares where ``_prepares`` allows it: a worker
#: runs each of them every round, and their generic plan (the one a prepared
#: statement settles on after five runs) is the custom plan's
#: (benchmarks/planning.py; tests/integration/test_prepared_statements.py
#: checks PostgreSQL uses it). The claim of every queue (claim_jobs), whose
#: paused queues and keyed types are sub-selects for that reason: its generic
#: plan reads the claim index. PostgreSQL's default keeps that plan on a short
#: backlog (half a claim's time saved: a job enqueued to an idle worker starts
#: a third sooner) and plans each run on a long one, where the generic plan's
#: cost counts the LIMIT a tenth of the backlog (the parse saved, 0.1 ms of a
#: claim's 0.5). Not the claims of
#: named queues (claim_jobs_in_queues, claim_jobs_per_queue): their generic
#: plan reads the claim index and filters by queue, where a custom plan
#: reads the claim-by-queue index, past a big backlog of other queues. The
#: keyed claim is a call of a function (migration 0004) that plans its own
#: statements for each call's values.
#: insert_job_shape (chain() and group() of new jobs) reads no table: its
#: generic plan is its custom plan, and planning was 40 % of its call
#: (docs/benchmarks.md, "10,000 chains of 3 a minute").
PREPARED = frozenset(
    {"claim_jobs", "record_outcomes", "extend_leases", "claim_keyed", "insert_job_shape"}
)

_PREPARES_ATTRIBUTE = "_durable_jobs_prepares"

#: psycopg prepares nothing while a connection's ``prepare_threshold`` is
#: None (Django's default), ``prepare=True`` or not; this threshold lets
#: ``prepare=True`` through and leaves every other statement unprepared.
PREPARE_ONLY_WHEN_ASKED = 2**31 - 1


def _prepares(connection: Any) -> bool:
    """Whether ``_run`` prepares the ``PREPARED`` statements on this Django connection.

    ``PREPARE_STATEMENTS``, or by default (None) whether the connection goes
    straight to PostgreSQL: a named prepared statement lives in one server
    session, and a transaction pooler (PgBouncer before 1.21, Supavisor's
    transaction mode) hands each transaction to any server connection,
    where it is missing or, worse, another client's statement of the same
    name. A pooler answers the connect with a cancel key of its own, so
    the backend pid psycopg was given differs from ``pg_backend_pid()``;
    PostgreSQL gives its own. Decided once per psycopg connection (and
    again when the setting changes), at the cost of one statement.
    """
    raw = connection.connection
    setting = jobs_settings.PREPARE_STATEMENTS
    known = getattr(connection, _PREPARES_ATTRIBUTE, None)
    if known is not None and known[0] is raw and known[1] is setting:
        return bool(known[2])
    prepares: bool
    if setting is None:
        ((pid,),) = _cursor(connection).execute(QUERIES["backend_pid"]).fetchall()
        prepares = bool(pid == raw.info.backend_pid)
    else:
        prepares = bool(setting)
    if prepares and raw.prepare_threshold is None:
        raw.prepare_threshold = PREPARE_ONLY_WHEN_ASKED
    setattr(connection, _PREPARES_ATTRIBUTE, (raw, setting, prepares))
    return prepares


def connection_params(using: str) -> dict[str, Any]:
    """``psycopg.connect()`` arguments for Django's database ``using``.

    For the connections the worker opens outside Django's: LISTEN, and the
    last write of a forced exit.
    """
    params = dict(connections[using].get_connection_params())
    for django_only in ("cursor_factory", "context", "prepare_threshold", "server_side_binding"):
        params.pop(django_only, None)
    return params
