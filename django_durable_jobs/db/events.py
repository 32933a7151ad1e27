"""The gateway's events: lock an event key, insert its event, wake its waiters.

SQL: ``events.sql`` (the lock protocol with the wait side is described there).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple

from .. import db as gateway
from ..conf import jobs_settings
from ..constants import EVENT_LOCK_SPACE


class InsertedEvent(NamedTuple):
    #: The row is this call's (False: the key already had an event).
    created: bool
    #: The stored payload equals the one given, compared as JSON values.
    same_payload: bool
    #: The stored payload as JSON text (``None``: SQL NULL).
    payload_json: str | None
    created_at: datetime


def lock_event_key(using: str, key: str) -> None:
    """Take ``key``'s advisory lock for the rest of the caller's transaction.

    The emit and the wait side both take it first, so that a wait either
    finds the event or is woken by its emit.
    """
    gateway._run_through_django(using, "lock_event_key", {"space": EVENT_LOCK_SPACE, "key": key})


def insert_event(using: str, key: str, payload_json: str | None) -> InsertedEvent:
    """Insert the event ``key`` unless it exists (call it under ``lock_event_key``)."""
    ((created, same, stored, created_at),) = gateway._run_through_django(
        using, "insert_event", {"key": key, "payload": payload_json}
    )
    return InsertedEvent(bool(created), bool(same), stored, created_at)


def wake_event_waiters(using: str, key: str) -> list[uuid.UUID]:
    """Wake the jobs waiting for ``key`` (pending, available now; NOTIFYed at commit).

    Returns the woken jobs' ids. A waiter whose job is no longer suspended
    (cancelled, or running again) is deleted without touching the job.
    """
    ((ids, _notified),) = gateway._run_through_django(
        using, "wake_event_waiters", {"key": key, "channel": jobs_settings.NOTIFY_CHANNEL}
    )
    return [uuid.UUID(str(job_id)) for job_id in ids or ()]
