"""The gateway's durable steps: a job's step records, its checkpoints and its
suspensions, each fenced by the lease token. SQL: ``steps.sql``.

Every function runs on the caller's Django connection for ``using`` (the
handler thread's own), so an ``atomic=True`` step's checkpoint shares the
step's transaction. The runtime (``django_durable_jobs/steps.py``) decides
what to write; these functions only write it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, NamedTuple

from .. import db as gateway
from ..conf import jobs_settings


class StepRecord(NamedTuple):
    """One row of ``load_steps``."""

    name: str
    status: str
    result: Any
    wake_at: datetime | None
    event_key: str | None
    child_id: uuid.UUID | None
    #: ``wake_at`` had passed when the records were read (the database's clock).
    due: bool


class Fenced(NamedTuple):
    """What a fenced write found: None from the functions below means the lease was lost."""

    #: A cancel of the job was requested (``cancel_requested_at``).
    cancel: bool
    #: The write happened (a record written, the job suspended).
    written: bool


def load_steps(using: str, job_id: uuid.UUID, token: uuid.UUID) -> dict[str, StepRecord]:
    """The job's step records by name (one query; clears a resumed job's ``waiting_for``)."""
    rows = gateway._run(using, "load_steps", {"job_id": job_id, "token": token})
    return {row[0]: StepRecord(*row) for row in rows}


def record_step(
    using: str,
    *,
    job_id: uuid.UUID,
    token: uuid.UUID,
    lease_seconds: float,
    name: str,
    kind: str,
    status: str,
    attempt: int,
    started_at: datetime | None = None,
    result_json: str | None = None,
    error: str = "",
    wake_at: datetime | None = None,
    event_key: str | None = None,
    child_id: uuid.UUID | None = None,
    clear_waiter: bool = False,
) -> Fenced | None:
    """Write one step record, extend the lease; None when the lease was lost (nothing written).

    One statement. ``clear_waiter``: the job's event waiter row goes too (a wait that ended).
    """
    rows = gateway._run(
        using,
        "record_step",
        {
            "job_id": job_id,
            "token": token,
            "lease_seconds": float(lease_seconds),
            "name": name,
            "kind": kind,
            "status": status,
            "attempt": attempt,
            "started_at": started_at,
            "result": result_json,
            "result_bytes": 0 if result_json is None else len(result_json.encode()),
            "error": error,
            "wake_at": wake_at,
            "event_key": event_key,
            "child_id": child_id,
            "clear_waiter": clear_waiter,
        },
    )
    return Fenced(bool(rows[0][0]), bool(rows[0][1])) if rows else None


def lock_job(using: str, job_id: uuid.UUID, token: uuid.UUID) -> Fenced | None:
    """Lock the job's row while this lease holds it (in the caller's transaction)."""
    rows = gateway._run(using, "lock_job", {"job_id": job_id, "token": token})
    return Fenced(bool(rows[0][0]), True) if rows else None


def suspend_job(
    using: str,
    *,
    job_id: uuid.UUID,
    token: uuid.UUID,
    status: str,
    waiting_for_json: str,
    available_at: datetime | None = None,
    awaits: bool = False,
) -> Fenced | None:
    """Suspend the running job (see the query); None when the lease was lost."""
    rows = gateway._run(
        using,
        "suspend_job",
        {
            "job_id": job_id,
            "token": token,
            "status": status,
            "available_at": available_at,
            "waiting_for": waiting_for_json,
            "awaits": awaits,
            "channel": jobs_settings.NOTIFY_CHANNEL,
        },
    )
    return Fenced(bool(rows[0][0]), bool(rows[0][1])) if rows else None


def read_event(using: str, key: str) -> tuple[bool, Any]:
    """``(emitted, payload)`` of the event ``key``."""
    rows = gateway._run(using, "read_event", {"key": key})
    return (True, rows[0][0]) if rows else (False, None)


def add_event_waiter(using: str, job_id: uuid.UUID, key: str) -> None:
    """The job waits for ``key`` (replacing any earlier wait of the job)."""
    gateway._run(using, "add_event_waiter", {"job_id": job_id, "key": key})


def await_child(using: str, job_id: uuid.UUID, child_id: uuid.UUID) -> bool:
    """Make ``job_id`` wait for ``child_id`` unless it finished; whether it waits."""
    rows = gateway._run(using, "await_child", {"job_id": job_id, "child_id": child_id})
    return bool(rows[0][0])


def child_state(using: str, child_id: uuid.UUID) -> tuple[str, Any, str] | None:
    """``(status, result, last_error)`` of the child job; None when it is gone."""
    rows = gateway._run(using, "child_state", {"child_id": child_id})
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None
