"""Checks on enqueue arguments, done before anything touches the database.

Pure functions: each raises ``InvalidJob`` naming the argument and the
problem, so the Python API, the REST API and the CLI report bad input the
same way.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from .constants import (
    IDEMPOTENCY_KEY_MAX_LENGTH,
    MAX_ATTEMPTS_LIMIT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_MAX_LENGTH,
    TYPE_MAX_LENGTH,
)
from .exceptions import InvalidJob

# Letters, digits, "_", "-" and "."; no ",", ":" or spaces, which the
# worker's `--queues emails:4,default` syntax uses as separators.
QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(field: str, value: Any, max_length: int) -> str:
    if not isinstance(value, str):
        raise InvalidJob(field, f"must be a string, not {type(value).__name__}.")
    if not value.strip():
        raise InvalidJob(field, "must not be empty.")
    if len(value) > max_length:
        raise InvalidJob(field, f"must be at most {max_length} characters (got {len(value)}).")
    if "\x00" in value:
        raise InvalidJob(field, "must not contain NUL characters.")
    return value


# Bulk enqueues repeat a handful of types and queues thousands of times;
# remembering the names already seen keeps validation off the profile.
_VALID_TYPES: set[str] = set()
_VALID_QUEUES: set[str] = set()
_MAX_REMEMBERED = 10_000


def _remember(seen: set[str], value: str) -> None:
    if len(seen) < _MAX_REMEMBERED:
        seen.add(value)


def validate_type(value: Any) -> str:
    if value.__class__ is str and value in _VALID_TYPES:
        return value
    _text("type", value, TYPE_MAX_LENGTH)
    _remember(_VALID_TYPES, value)
    return str(value)


def validate_queue(value: Any) -> str:
    if value.__class__ is str and value in _VALID_QUEUES:
        return value
    _text("queue", value, QUEUE_MAX_LENGTH)
    if not QUEUE_NAME_RE.match(value):
        raise InvalidJob(
            "queue",
            f"{value!r} is not a valid queue name: use letters, digits, '_', '-' and '.'.",
        )
    _remember(_VALID_QUEUES, value)
    return str(value)


def validate_idempotency_key(value: Any) -> str | None:
    if value is None:
        return None
    return _text("idempotency_key", value, IDEMPOTENCY_KEY_MAX_LENGTH)


def validate_priority(value: Any) -> int:
    if not _is_int(value):
        raise InvalidJob("priority", f"must be an integer, not {type(value).__name__}.")
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InvalidJob(
            "priority", f"must be between {PRIORITY_MIN} and {PRIORITY_MAX} (got {value})."
        )
    return int(value)


def validate_max_attempts(value: Any) -> int:
    if not _is_int(value):
        raise InvalidJob("max_attempts", f"must be an integer, not {type(value).__name__}.")
    if not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise InvalidJob(
            "max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT} (got {value})."
        )
    return int(value)


def dump_payload(value: Any) -> str:
    """The payload as JSON text, or ``InvalidJob``.

    Strict ``json`` (no custom encoder): what is stored must read back as
    the same object, which is also what idempotent replays compare.
    """
    if not isinstance(value, dict):
        raise InvalidJob("payload", f"must be a JSON object (a dict), not {type(value).__name__}.")
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidJob("payload", f"is not JSON-serialisable: {exc}.") from None
    if "\\u0000" in text:
        # PostgreSQL's jsonb cannot store NUL in a string.
        raise InvalidJob("payload", "must not contain NUL characters.")
    return text


def validate_delay(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidJob(
            "delay", f"must be a timedelta or a number of seconds, not {type(value).__name__}."
        )
    if not math.isfinite(seconds):
        raise InvalidJob("delay", "must be finite.")
    if seconds < 0:
        raise InvalidJob("delay", f"must not be negative (got {seconds} s).")
    return seconds


def validate_run_at(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidJob("run_at", f"must be a datetime, not {type(value).__name__}.")
    if settings.USE_TZ and timezone.is_naive(value):
        raise InvalidJob("run_at", "must be timezone-aware when USE_TZ is True.")
    return value


@dataclass(frozen=True)
class JobSpec:
    """A validated, fully resolved job to insert."""

    type: str
    payload: dict[str, Any]
    payload_json: str
    queue: str
    priority: int
    max_attempts: int
    idempotency_key: str | None
    delay_seconds: float | None
    run_at: datetime | None

    def differences(self, job: Any) -> list[str]:
        """The parameters in which ``job`` differs from this spec.

        The payload is compared as stored JSON (so ``{1: "a"}`` equals
        ``{"1": "a"}``). The schedule is left out on purpose: a delay is
        relative to the moment of each call, so a retried call never
        repeats it exactly.
        """
        differ = [
            name
            for name in ("type", "queue", "priority", "max_attempts")
            if getattr(self, name) != getattr(job, name)
        ]
        if json.loads(self.payload_json) != job.payload:
            differ.insert(1, "payload")
        return differ


def build_spec(
    type: Any,
    payload: Any = None,
    *,
    idempotency_key: Any = None,
    queue: Any = None,
    priority: Any = None,
    max_attempts: Any = None,
    delay: Any = None,
    run_at: Any = None,
) -> JobSpec:
    """Validate ``enqueue`` arguments and fill in the defaults.

    Defaults come from the registered handler, if this process has one,
    then from ``DURABLE_JOBS``.
    """
    from .conf import jobs_settings
    from .registry import registry

    type_name = validate_type(type)
    payload_json = dump_payload({} if payload is None else payload)
    if delay is not None and run_at is not None:
        raise InvalidJob("run_at", "give either delay or run_at, not both.")
    handler = registry.get(type_name)
    if queue is None:
        queue = handler.queue if handler and handler.queue else jobs_settings.DEFAULT_QUEUE
    if priority is None:
        priority = (
            handler.priority
            if handler and handler.priority is not None
            else jobs_settings.DEFAULT_PRIORITY
        )
    if max_attempts is None:
        max_attempts = (
            handler.max_attempts
            if handler and handler.max_attempts is not None
            else jobs_settings.DEFAULT_MAX_ATTEMPTS
        )
    return JobSpec(
        type=type_name,
        payload={} if payload is None else payload,
        payload_json=payload_json,
        queue=validate_queue(queue),
        priority=validate_priority(priority),
        max_attempts=validate_max_attempts(max_attempts),
        idempotency_key=validate_idempotency_key(idempotency_key),
        delay_seconds=validate_delay(delay),
        run_at=validate_run_at(run_at),
    )
