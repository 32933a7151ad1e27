"""The gateway's claim and outcomes: claim runnable jobs, write what became of them
(fenced by the lease token), release or cancel their dependents, and tell
``wait()`` which jobs finished. SQL: ``claims.sql``.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from json.encoder import encode_basestring as _json_str
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
from django.db import transaction

from .. import db as gateway
from ..conf import jobs_settings
from ..constants import (
    FINISHED_CHANNEL_SUFFIX,
    FINISHED_NOTIFY_IDS,
    FINISHED_NOTIFY_PREFIX,
)
from .queries import QUERIES
from .records import (
    ClaimedJob,
    Outcome,
)

if TYPE_CHECKING:
    pass


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
        gateway._run(using, "notify_finished", {"ids": list(job_ids), **_finished_params()})


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
        rows = gateway._run(using, "claim_jobs", params)
    else:
        names = sorted(set(queues).difference(excluded))
        if not names:
            return []
        rows = gateway._run(using, "claim_jobs_in_queues", {**params, "queues": names})
    return [ClaimedJob(*row) for row in rows]


def claim_ids(
    using: str, ids: Sequence[uuid.UUID], *, worker_id: str, lease_seconds: float
) -> list[ClaimedJob]:
    """Claim the pending jobs among ``ids``, due or not (``testing.run_jobs``), in claim order."""
    rows = gateway._run(
        using,
        "claim_job_ids",
        {"ids": list(ids), "worker_id": worker_id, "lease_seconds": float(lease_seconds)},
    )
    return [ClaimedJob(*row) for row in rows]


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
    rows = gateway._run(
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
        return gateway._run(self.using, name, params)

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
    params = _outcomes_params(outcomes, history_limit)
    # Again if a row moved under it: only when another finished the job first
    # (a reaper that found a cancel requested). Outside a transaction: the
    # statement is its own (the reaper's, inside one, holds its rows locked).
    rows = gateway.again_if_moved(lambda: statements.run("record_outcomes", params))
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

    def record_and_release() -> tuple[list[tuple[Any, ...]], set[uuid.UUID]]:
        with statements.atomic():
            rows = statements.run(
                "record_outcomes",
                _outcomes_params(outcomes, history_limit, without_dependents=False),
            )
            ended = {job_id: status for job_id, status, count in rows if count and status in _ENDED}
            return rows, _release_levels(statements, ended)

    # Again if a child it waited for was moved (an operator cancelled it):
    # statements.atomic() is the transaction, or the savepoint, to repeat.
    rows, cancelled = gateway.again_if_moved(record_and_release)
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


def leased_to(using: str, worker_id: str) -> list[tuple[uuid.UUID, str, uuid.UUID]]:
    """The running jobs leased to ``worker_id``: (id, type, lease token) each.

    Read after a failed claim, whose jobs may be leased to the worker without its
    knowing (``handoff.give_back_orphans``). The running jobs are few, and the lease
    index (partial, on running jobs) finds them on a table of any size.
    """
    from ..models import Job, JobStatus

    rows = Job.objects.using(using).filter(status=JobStatus.RUNNING, lease_holder=worker_id)
    return [
        (job_id, job_type, token)
        for job_id, job_type, token in rows.values_list("id", "type", "lease_token")
        if token is not None
    ]


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
        gateway._run(using, "rewait_dependents", {"ids": list(job_ids)})


def record_outcomes_directly(
    using: str, outcomes: Sequence[Outcome], *, history_limit: int, timeout_seconds: float
) -> None:
    """``record_outcomes`` on a fresh connection, bounded in time: a forced exit's last write.

    Not on the worker's Django connections: the signal handler that calls it
    may have interrupted any of them mid-statement.
    """
    params = gateway.connection_params(using)
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


def next_available_at(
    using: str, queues: Iterable[str] | None, excluded: Collection[str] = ()
) -> datetime | None:
    """When the next pending job of ``queues`` (None: all) but not of ``excluded``
    becomes runnable."""
    names = sorted(queues) if queues is not None else None
    rows = gateway._run(using, "next_available_at", {"queues": names, "excluded": sorted(excluded)})
    return rows[0][0] if rows else None
