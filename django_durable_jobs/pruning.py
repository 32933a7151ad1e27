"""Deleting finished jobs: ``manage.py jobs prune`` and the workers' retention.

Completed and cancelled jobs live in time-range partitions
(``db/partitions.py``): retention drops a partition whole once its whole
range is older than the retention period (``drop_expired``), which deletes
no row one by one and leaves no dead tuple. The rest is deleted in
batches, one short statement (and transaction) per batch, oldest first,
through the ``prune_jobs`` query: dead jobs, the default partition's rows,
and whatever an operator's ``jobs prune`` asks for inside a range. A
batch never holds one giant transaction, never locks the table, and skips
rows someone else has locked (a requeue in progress) instead of waiting.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from django.db import transaction

from . import db
from .db import partitions
from .durations import parse_duration
from .models import JobStatus

#: Statuses a prune may delete. Pending and running jobs are never pruned.
PRUNABLE = (JobStatus.COMPLETED, JobStatus.CANCELLED, JobStatus.DEAD)
DEFAULT_BATCH_SIZE = 5_000
MAX_BATCH_SIZE = 100_000
#: The advisory lock that lets one worker at a time run the retention.
PRUNER_LOCK_KEY = zlib.crc32(b"django_durable_jobs.pruner")


#: What one batch did (kept under its old name for callers).
BatchResult = db.PruneResult


def prune_batch(
    statuses: Iterable[str],
    older_than: timedelta,
    *,
    limit: int,
    lock_key: int | None = None,
    using: str | None = None,
    other_only: bool = False,
) -> BatchResult:
    """Delete up to ``limit`` jobs of ``statuses`` finished more than ``older_than`` ago.

    Its own transaction (unless the caller has one open), so the row locks
    last one batch. With ``lock_key``, nothing is deleted and
    ``acquired`` is False when another pruner holds the lock.
    """
    alias = db.database_alias(using)
    with transaction.atomic(using=alias):
        return db.prune_batch(
            alias, statuses, older_than, limit=limit, lock_key=lock_key, other_only=other_only
        )


def prune(
    statuses: Iterable[str],
    older_than: timedelta,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_batches: int | None = None,
    lock_key: int | None = None,
    on_batch: Callable[[int, int], object] | None = None,
    using: str | None = None,
    other_only: bool = False,
) -> tuple[int, int]:
    """Prune in batches until a batch comes back short (or ``max_batches`` ran).

    ``on_batch(batches, deleted_so_far)`` is called after each batch (the
    CLI's progress line). Returns ``(deleted, batches)``; stops at once when
    ``lock_key`` is given and another pruner holds it.
    """
    statuses = list(statuses)
    deleted = batches = 0
    while max_batches is None or batches < max_batches:
        result = prune_batch(
            statuses,
            older_than,
            limit=batch_size,
            lock_key=lock_key,
            using=using,
            other_only=other_only,
        )
        if not result.acquired:
            break
        batches += 1
        deleted += result.deleted
        if on_batch is not None:
            on_batch(batches, deleted)
        if result.deleted < batch_size:
            break
    return deleted, batches


def retention_periods(value: Mapping[str, Any] | None) -> dict[str, timedelta]:
    """``RETENTION`` as ``{status: timedelta}``; a status left out (or None) is kept forever."""
    if value is None:
        return {}
    return {
        status: parse_duration(period) for status, period in value.items() if period is not None
    }


def drop_expired(
    older_than: timedelta, *, lock_key: int | None = None, using: str | None = None
) -> tuple[int, int] | None:
    """Drop the history partitions whose whole range ended more than ``older_than`` ago.

    Returns ``(jobs, partitions)``: the jobs as PostgreSQL's estimate of
    each partition's rows (a count would read them all); None when another
    pruner holds ``lock_key``. Each partition is detached in a transaction
    of its own (``partitions.detach``), then its table dropped.
    """
    alias = db.database_alias(using)
    expired = partitions.expired_before(alias, older_than)
    jobs = 0
    for partition in expired:
        detached = partitions.detach(alias, partition, lock_key=lock_key)
        if detached is None:
            return None
        jobs += detached
    # The files, once the jobs are out of the table (and what an earlier
    # round detached and could not drop).
    partitions.drop_detached(alias)
    return jobs, len(expired)


def history_retention(retention: Mapping[str, timedelta]) -> timedelta | None:
    """How long the history partitions are kept: the longer of the completed and the
    cancelled jobs' periods (a partition holds both); None when one is kept forever."""
    periods = [retention.get(status) for status in partitions.HISTORY_STATUSES]
    if any(period is None for period in periods):
        return None
    return max(period for period in periods if period is not None)
