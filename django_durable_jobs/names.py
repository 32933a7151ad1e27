"""What a name may be: job types, queue names, idempotency keys.

Each rule is written once, here, and every door a name comes in through
uses it: ``enqueue()`` and ``@job`` (``InvalidJob``), the REST API (a 400
naming the field), ``runjobworker --queues`` (an argparse error),
``WorkerConfig(queue_slots=...)`` (``ValueError``), the ``DEFAULT_QUEUE``
setting (``durable_jobs.E003``), schedules and the Django Tasks backend.
Each door keeps its own error type and wording; the rule is the same.

A module of its own, below ``validation`` and ``conf``: the settings check
the same names that ``enqueue()`` does, and ``validation`` reads settings.
"""

from __future__ import annotations

import re
from typing import Any

from .constants import (
    CONCURRENCY_KEY_MAX_LENGTH,
    EVENT_KEY_MAX_LENGTH,
    EVENT_KEY_RE,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    QUEUE_MAX_LENGTH,
    QUEUE_NAME_RE,
    TYPE_MAX_LENGTH,
)
from .exceptions import InvalidJob

#: A surrogate code point: Python strings may hold one alone (from a JSON
#: ``"\ud800"`` escape, say), UTF-8 cannot encode it, and PostgreSQL would
#: refuse the statement.
SURROGATE_RE = re.compile("[\ud800-\udfff]")
NO_SURROGATES = "must be valid Unicode text: it holds a lone surrogate, which UTF-8 cannot encode."


def has_surrogates(value: str) -> bool:
    return not value.isascii() and SURROGATE_RE.search(value) is not None


def _text(field: str, value: Any, max_length: int) -> str:
    if not isinstance(value, str):
        raise InvalidJob(field, f"must be a string, not {type(value).__name__}.")
    if not value.strip():
        raise InvalidJob(field, "must not be empty.")
    if len(value) > max_length:
        raise InvalidJob(field, f"must be at most {max_length} characters (got {len(value)}).")
    if "\x00" in value:
        raise InvalidJob(field, "must not contain NUL characters.")
    if has_surrogates(value):
        raise InvalidJob(field, NO_SURROGATES)
    return value


# Bulk enqueues repeat a handful of types and queues thousands of times;
# remembering the names already seen keeps validation off the profile.
_VALID_TYPES: set[str] = set()
_VALID_QUEUES: set[str] = set()
_MAX_REMEMBERED = 10_000


def _remember(seen: set[str], value: str) -> None:
    if len(seen) < _MAX_REMEMBERED:
        seen.add(value)


#: The package's own job types (bulk runs) start with it: no one else may
#: enqueue them (``enqueue()``, REST, the Tasks backend) or register one.
OWN_TYPE_PREFIX = "durable_jobs."


def own_type_message(name: str) -> str:
    return (
        f"{name!r} is one of django-durable-jobs' own job types (names starting with "
        f"{OWN_TYPE_PREFIX!r}): only the package starts them (a bulk run starts from the "
        "admin or `manage.py jobs requeue --all` / `cancel --all`)."
    )


def validate_type(value: Any) -> str:
    """A job type: a non-empty string of at most 255 characters, no surrounding blanks."""
    if value.__class__ is str and value in _VALID_TYPES:
        return value
    _text("type", value, TYPE_MAX_LENGTH)
    if value != value.strip():
        raise InvalidJob("type", f"{value!r} must not start or end with whitespace.")
    _remember(_VALID_TYPES, value)
    return str(value)


def validate_queue(value: Any) -> str:
    """A queue name: letters, digits, ``_``, ``-`` and ``.``, at most 100 characters.

    No ``,``, ``:`` or spaces: the worker's ``--queues emails:4,default``
    syntax uses them as separators.
    """
    if value.__class__ is str and value in _VALID_QUEUES:
        return value
    _text("queue", value, QUEUE_MAX_LENGTH)
    if not QUEUE_NAME_RE.fullmatch(value):
        raise InvalidJob(
            "queue",
            f"{value!r} is not a valid queue name: use letters, digits, '_', '-' and '.'.",
        )
    _remember(_VALID_QUEUES, value)
    return str(value)


def is_queue_name(value: Any) -> bool:
    """Whether ``validate_queue`` accepts ``value`` (for doors that word errors their own way)."""
    try:
        validate_queue(value)
    except InvalidJob:
        return False
    return True


def validate_concurrency_key(value: Any) -> str | None:
    """``None`` (no key) or a non-empty string of at most 255 characters."""
    if value is None:
        return None
    return _text("concurrency_key", value, CONCURRENCY_KEY_MAX_LENGTH)


def validate_idempotency_key(value: Any) -> str | None:
    """``None`` (no key) or a non-empty string of at most 255 characters."""
    if value is None:
        return None
    return _text("idempotency_key", value, IDEMPOTENCY_KEY_MAX_LENGTH)


def validate_event_key(value: Any) -> str:
    """An event key: letters, digits, ``_``, ``-``, ``.`` and ``:``, at most 200 characters.

    The queue-name rules, longer, and with ``:`` (``signup:42``). Raises
    ``InvalidJob`` for field ``key``; ``events`` words it as ``InvalidEvent``.
    """
    _text("key", value, EVENT_KEY_MAX_LENGTH)
    if not EVENT_KEY_RE.fullmatch(value):
        raise InvalidJob(
            "key",
            f"{value!r} is not a valid event key: use letters, digits, '_', '-', '.' and ':', "
            "starting with a letter, a digit or '_'.",
        )
    return str(value)
