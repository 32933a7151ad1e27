"""Pause and resume a queue: no worker claims from a paused queue until it resumes.

The CLI (``jobs pause``/``jobs resume``), the REST API and the admin all
call these. A paused queue still accepts jobs; they wait. A pause may end
by itself (``until``): nothing has to run at that time, because every
reader compares ``paused_until`` with the database's ``now()``.

Each change is one row of ``durable_jobs_queue`` (``QueueState``), and a
``NOTIFY`` on the enqueue channel (payload ``queue_state:<name>``) sent at
commit, so that running workers read the new state within about a second;
workers also read it at every poll interval, in case a notification is lost.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from . import audit, db
from .authorization import Actor
from .exceptions import InvalidJob, InvalidPause
from .models import QueueState
from .names import validate_queue

logger = logging.getLogger(__name__)


def _queue(name: object) -> str:
    try:
        return validate_queue(name)
    except InvalidJob as exc:
        raise InvalidPause("queue", exc.message) from None


def _until(until: datetime | timedelta | None, now: datetime) -> datetime | None:
    if until is None:
        return None
    if isinstance(until, timedelta):
        if until <= timedelta(0):
            raise InvalidPause("until", f"a pause must last more than 0 seconds, got {until}.")
        try:
            return now + until
        except OverflowError:
            raise InvalidPause("until", f"{until} from now is after the year 9999.") from None
    if not isinstance(until, datetime):
        raise InvalidPause(
            "until", f"must be a datetime or a timedelta, not {type(until).__name__}."
        )
    if settings.USE_TZ and timezone.is_naive(until):
        raise InvalidPause(
            "until", "must be an aware datetime (with a UTC offset): a naive time is ambiguous."
        )
    if until <= now:
        raise InvalidPause(
            "until", f"must be in the future; {until.isoformat()} is not after {now.isoformat()}."
        )
    if timezone.is_naive(until):
        return until
    # In UTC: PostgreSQL refuses offsets past 15:59 and fractions of a second.
    try:
        return until.astimezone(dt_timezone.utc)
    except OverflowError:
        raise InvalidPause("until", f"{until.isoformat()} is after the year 9999 in UTC.") from None


def pause_queue(
    name: str,
    until: datetime | timedelta | None = None,
    *,
    using: str | None = None,
    actor: Actor | None = None,
) -> QueueState:
    """Stop workers claiming from queue ``name``, until ``resume_queue`` or ``until``.

    ``until``: an aware ``datetime`` in the future, or a ``timedelta`` from
    now; ``None`` pauses until resumed. Pausing a paused queue replaces its
    end time. Jobs already running finish; new jobs are still accepted.
    Raises ``InvalidPause`` for a bad name or end time. Returns the row.

    ``actor``: who pauses (the doors pass theirs; a call from Python code
    is recorded as the OS user's, door ``python``); it needs
    ``durable_jobs.pause_queue`` (``PermissionDenied``), and the pause is
    recorded in the audit trail in the same transaction.
    """
    queue = _queue(name)
    now = timezone.now()
    end = _until(until, now)
    alias = db.database_alias(using)
    actor = actor or Actor.for_os_user("python")
    actor.require("pause")
    with transaction.atomic(using=alias):
        state, _created = QueueState.objects.using(alias).update_or_create(
            name=queue, defaults={"paused_at": now, "paused_until": end, "updated_at": now}
        )
        db.notify_queue_state(alias, queue)
        audit.record(
            actor,
            "pause",
            using=alias,
            queue=queue,
            details={"until": None if end is None else end.isoformat()},
        )
    logger.info(
        "Queue paused queue=%s until=%s", queue, "resumed" if end is None else end.isoformat(),
        extra={"queue": queue},
    )  # fmt: skip
    return state


def resume_queue(name: str, *, using: str | None = None, actor: Actor | None = None) -> QueueState:
    """Let workers claim from queue ``name`` again (at once: they are notified).

    Resuming a queue that is not paused changes nothing and is no error.
    Raises ``InvalidPause`` for a bad name. Returns the row (unsaved, if
    the queue was never paused). ``actor`` as for ``pause_queue``.
    """
    queue = _queue(name)
    now = timezone.now()
    alias = db.database_alias(using)
    actor = actor or Actor.for_os_user("python")
    actor.require("resume")
    with transaction.atomic(using=alias):
        changed = (
            QueueState.objects.using(alias)
            .filter(name=queue, paused_at__isnull=False)
            .update(paused_at=None, paused_until=None, updated_at=now)
        )
        if changed:
            db.notify_queue_state(alias, queue)
            audit.record(actor, "resume", using=alias, queue=queue)
        state = QueueState.objects.using(alias).filter(name=queue).first()
    if changed:
        logger.info("Queue resumed queue=%s", queue, extra={"queue": queue})
    return state if state is not None else QueueState(name=queue, updated_at=now)


def paused_queues(*, using: str | None = None) -> dict[str, datetime | None]:
    """The queues paused now: ``{name: paused_until}`` (``None``: until resumed), by name."""
    rows = QueueState.objects.using(db.database_alias(using)).paused().order_by("name")
    return dict(rows.values_list("name", "paused_until"))
