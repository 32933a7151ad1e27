"""The gateway's presence and stats: the workers table, the workers' marks of
whether they sleep (``durable_jobs_listener``, which the enqueues' NOTIFY
reads: ``worker/wakefulness.py``), the notification probe, queue depth and
the per-minute counts behind the admin's Queues page. SQL: ``presence.sql``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from .. import db as gateway
from .queries import QUERIES
from .records import (
    QueueCounts,
    QueueMinuteCounts,
)

if TYPE_CHECKING:
    pass


def send_probe(conn: psycopg.Connection[Any], channel: str, payload: str) -> None:
    """NOTIFY ``payload`` on ``channel`` (in autocommit: delivered at once); ``worker/probe.py``."""
    conn.execute(QUERIES["notify_probe"], {"channel": channel, "payload": payload})


def upsert_worker(using: str, row: Mapping[str, Any], *, forget_after_seconds: float) -> None:
    """Record the worker as alive now; forget workers silent for ``forget_after_seconds``."""
    params = {**row, "queues": json.dumps(list(row["queues"]))}
    gateway._run_through_django(
        using, "upsert_worker", {**params, "forget_after_seconds": forget_after_seconds}
    )


def delete_worker(using: str, worker_id: str) -> None:
    gateway._run_through_django(using, "delete_worker", {"id": worker_id})


def mark_listener(
    using: str,
    worker_id: str,
    queues: Collection[str] | None,
    *,
    sleeping: bool,
    forget_after_seconds: float,
) -> None:
    """Say whether this worker sleeps (enqueues of ``queues`` notify it) or is awake.

    Runs in the caller's autocommit: the mark is committed on return.
    """
    gateway._run(
        using,
        "mark_listener",
        {
            "id": worker_id,
            "queues": None if queues is None else sorted(queues),
            "sleeping": sleeping,
            "forget_after_seconds": forget_after_seconds,
        },
    )


def transactions_in_progress(using: str) -> list[str]:
    """The ids (as text) of the transactions running now that wrote something."""
    ((xids,),) = gateway._run(using, "transactions_in_progress", {})
    return list(xids or ())


def still_in_progress(using: str, xids: Sequence[str]) -> list[str]:
    """Those of ``xids`` still running."""
    if not xids:
        return []
    ((running,),) = gateway._run(using, "still_in_progress", {"xids": list(xids)})
    return list(running or ())


def queue_depth(using: str) -> list[tuple[str, str, int, float | None]]:
    """``(queue, status, count, oldest runnable pending age in seconds)`` rows."""
    return [
        (queue, status, int(count), None if age is None else max(float(age), 0.0))
        for queue, status, count, age in gateway._run_through_django(using, "queue_depth", {})
    ]


def suspended_jobs(using: str) -> list[tuple[str, str, int]]:
    """``(queue, reason, count)`` of the suspended jobs; reason: sleep, event or child."""
    return [
        (queue, reason, int(count))
        for queue, reason, count in gateway._run_through_django(using, "suspended_jobs", {})
        if reason is not None
    ]


def add_queue_stats(using: str, counts: Sequence[QueueMinuteCounts]) -> None:
    """Add ``counts`` to the per-minute rows of their queues, in one statement."""
    if not counts:
        return
    gateway._run(
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


def active_queues(using: str, since: datetime) -> set[str]:
    """Queues with unfinished or dead jobs, or with outcomes counted since ``since``."""
    return {row[0] for row in gateway._run_through_django(using, "active_queues", {"since": since})}


def queue_overview(
    using: str, queues: Sequence[str], *, cap: int, max_priorities: int
) -> list[QueueCounts]:
    """Counts (pending, waiting and dead up to ``cap``) and oldest age of each of ``queues``."""
    if not queues:
        return []
    rows = gateway._run_through_django(
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
