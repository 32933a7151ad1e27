"""The gateway's maintenance: heartbeats (leases extended), the reaper, cancel
polls and the pruning of finished jobs and old counts. SQL: ``maintenance.sql``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

from django.db import transaction

from .. import db as gateway
from .records import (
    ExpiredLease,
    Outcome,
)

if TYPE_CHECKING:
    pass


def extend_leases(
    using: str, held: Mapping[uuid.UUID, uuid.UUID], *, lease_seconds: float
) -> set[uuid.UUID]:
    """Push back the leases of ``held`` (``{job id: lease token}``); the ids extended.

    Once more when a job it waited for was moved to a history partition by
    its outcome (PostgreSQL then fails the statement with a serialization
    error instead of reading the row again): the second run finds it
    finished, so it is not extended, as when the outcome commits first.
    """
    params = {
        "ids": list(held),
        "tokens": list(held.values()),
        "lease_seconds": float(lease_seconds),
    }
    rows = gateway.retrying_moves(using, lambda: gateway._run(using, "extend_leases", params))
    return {row[0] for row in rows}


def cancel_requests(using: str, held: Mapping[uuid.UUID, uuid.UUID]) -> set[uuid.UUID]:
    """Which of ``held`` (``{job id: lease token}``) have a cancel requested (no write)."""
    rows = gateway._run(
        using, "cancel_requests", {"ids": list(held), "tokens": list(held.values())}
    )
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
            for row in gateway._run(using, "reap_jobs", {"lock_key": lock_key, "limit": limit})
        ]
        if not expired:
            return []
        outcomes = [decide(lease) for lease in expired]
        written = gateway.record_outcomes(
            using, outcomes, history_limit=history_limit, cancelled_children=cancelled_children
        )
    return [pair for pair in zip(expired, outcomes, strict=True) if pair[0].id in written]


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
    other_only: bool = False,
) -> PruneResult:
    """Delete up to ``limit`` finished jobs of ``statuses`` older than ``older_than``.

    With ``lock_key``, nothing is deleted when another pruner holds it.
    ``other_only``: in the default partition only (``db/partitions.py``).
    """
    ((acquired, deleted),) = gateway._run(
        using,
        "prune_other" if other_only else "prune_jobs",
        {
            "statuses": [str(status) for status in statuses],
            "older_than_seconds": older_than.total_seconds(),
            "limit": limit,
            "lock_key": lock_key,
        },
    )
    return PruneResult(bool(acquired), int(deleted))


def prune_queue_stats(using: str, older_than: timedelta) -> int:
    """Delete the per-minute counts older than ``older_than``; how many rows."""
    ((deleted,),) = gateway._run(
        using, "prune_queue_stats", {"older_than_seconds": older_than.total_seconds()}
    )
    return int(deleted)
