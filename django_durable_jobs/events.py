"""Events: ``emit_event(key, payload)`` wakes the jobs waiting for ``key``.

An event is emitted once: the first emit wins and never changes (the same
payload again is no error, another one is ``EventConflict``), and it is
kept, so that a job that waits for it later finds it at once. The emit runs
in the caller's transaction: an event commits with the data that caused it,
and a rolled-back emit leaves no event and wakes nobody.

Every door calls ``emit_event``: Python code, REST ``POST /api/events``,
``manage.py jobs emit``. The doors pass their ``Actor``, and the emit is
then recorded in the audit trail (action ``emit``) in the same transaction;
a call from application code without an actor is the application's own
data, not an operator action, and is not recorded.
"""

from __future__ import annotations

import json
import logging
from typing import Any, NamedTuple

from django.db import transaction

from . import audit, db
from .authorization import Actor
from .exceptions import EventConflict, InvalidEvent, InvalidJob
from .models import Event
from .names import validate_event_key
from .validation import dump_json

logger = logging.getLogger(__name__)

__all__ = ["EmitResult", "emit_event", "validate_key"]


class EmitResult(NamedTuple):
    """What ``emit_event`` did: the stored event, and whether this call created it."""

    event: Event
    created: bool


def validate_key(key: Any) -> str:
    """``key`` if it is a valid event key, else ``InvalidEvent`` (field ``key``)."""
    try:
        return validate_event_key(key)
    except InvalidJob as exc:
        raise InvalidEvent("key", exc.message) from None


def _payload_json(payload: Any) -> str | None:
    if payload is None:
        return None
    try:
        return dump_json("payload", payload)
    except InvalidJob as exc:
        raise InvalidEvent("payload", exc.message) from None


def emit_event(
    key: str,
    payload: Any = None,
    *,
    using: str | None = None,
    actor: Actor | None = None,
) -> EmitResult:
    """Emit the event ``key`` with ``payload`` (any JSON value) and wake its waiters.

    Runs in the caller's transaction (in one of its own in autocommit). The
    first emit of a key creates the event (``created=True``) and makes the
    jobs waiting for it pending and available now; emitting the same
    payload again returns the stored event (``created=False``); another
    payload raises ``EventConflict``. Raises ``InvalidEvent`` for a bad key
    (letters, digits, ``_``, ``-``, ``.``, ``:``; at most 200 characters)
    or a payload that is not JSON.

    ``actor`` (the REST API's and the CLI's): who emits; it needs
    ``durable_jobs.emit_event`` (``PermissionDenied``), and the emit is
    recorded in the audit trail (action ``emit``) with the event.
    """
    key = validate_key(key)
    payload_json = _payload_json(payload)
    if actor is not None:
        actor.require("emit")
    alias = db.database_alias(using)
    with transaction.atomic(using=alias):
        # The key's lock first (events.sql): a wait for the key, in another
        # transaction, either sees this event or is woken below.
        db.lock_event_key(alias, key)
        inserted = db.insert_event(alias, key, payload_json)
        event = Event(
            key=key,
            payload=None if inserted.payload_json is None else json.loads(inserted.payload_json),
            created_at=inserted.created_at,
        )
        event._state.adding = False
        event._state.db = alias
        if not inserted.created:
            if not inserted.same_payload:
                raise EventConflict(key, event)
            return EmitResult(event, False)
        woken = db.wake_event_waiters(alias, key)
        if actor is not None:
            audit.record(actor, "emit", using=alias, details={"key": key})
    logger.info("Event emitted key=%s woken=%s", key, len(woken), extra={"event_key": key})
    return EmitResult(event, True)
