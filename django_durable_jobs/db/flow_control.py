"""The gateway's flow control: the claims that respect a queue's cluster-wide
limits (``flow.room()`` decides how many, on what ``throttle_state`` counts)
and the concurrency keys, the pauses, and the counts of what they hold back.
SQL: ``flow_control.sql``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from django.db import transaction

from .. import db as gateway
from ..flow import FlowCounts, room
from .records import (
    ClaimedJob,
)

if TYPE_CHECKING:
    from ..flow import QueueLimits


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
        if not gateway._run(using, "lock_throttle", {"queue": queue}):
            return LimitedClaim([], None, None, busy=True)
        (state,) = gateway._run_named(
            using, "throttle_state", {"queue": queue, "window_seconds": window}
        )
        until_room, runnable = state.pop("until_room"), state.pop("runnable")
        # The other columns are what the limits count: flow.room() decides.
        allowed, throttled = room(limits, FlowCounts(**state), want)
        retry_after = float(until_room) if until_room is not None else None
        jobs = (
            gateway.claim(
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
            gateway._run(
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

    ``key_limits`` is ``{type: concurrency_limit}``. One statement, its own
    transaction (or part of a caller's): a PL/pgSQL function (migration
    0004) locks the keys of the first runnable jobs whose key has room,
    then, in a snapshot taken after the locks, claims what each key's limit
    leaves, the oldest job of a key first. A busy key never blocks another:
    its jobs are skipped, not waited for. One round trip where two
    statements in a transaction took three.
    """
    if limit <= 0 or not key_limits:
        return []
    types = sorted(key_limits)
    rows = gateway._run(
        using,
        "claim_keyed",
        {
            "types": types,
            "limits": [key_limits[t] for t in types],
            "queues": None if queues is None else sorted(queues),
            "excluded": sorted(excluded),
            "limit": limit,
            "scan": limit * KEY_SCAN_PER_KEY,
            "lock_space": KEY_LOCK_SPACE,
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
    rows = gateway._run(
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
    rows = gateway._run_through_django(
        using,
        "jobs_held_by_keys",
        {"types": types, "limits": [key_limits[t] for t in types]},
    )
    return {queue: int(count) for queue, count in rows}


def rate_window_starts(using: str, windows: Mapping[str, float]) -> dict[str, int]:
    """``{queue: starts in its rate window now}`` for ``windows`` (``{queue: seconds}``)."""
    queues = sorted(windows)
    rows = gateway._run_through_django(
        using,
        "rate_window_starts",
        {"queues": queues, "window_seconds": [float(windows[q]) for q in queues]},
    )
    return {queue: int(starts) for queue, starts in rows}


def paused_queues(using: str) -> dict[str, float | None]:
    """``{queue: seconds until its pause lifts (None: until resumed)}`` for the paused queues."""
    return {
        name: None if left is None else max(float(left), 0.0)
        for name, left in gateway._run(using, "paused_queues", {})
    }
