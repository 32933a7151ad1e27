"""Checks on enqueue arguments, done before anything touches the database.

Pure functions: each raises ``InvalidJob`` naming the argument and the
problem, so the Python API, the REST API and the CLI report bad input the
same way. The name rules (type, queue, idempotency key) live in ``names``
and time in ``durations``; the ones for enqueue are re-exported here.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal
from typing import Any, NamedTuple

from django.conf import settings
from django.utils import timezone

from .conf import jobs_settings
from .constants import (
    CONCURRENCY_LIMIT_MAX,
    DEPENDS_ON_MAX,
    MAX_ATTEMPTS_LIMIT,
    MAX_DELAY_SECONDS,
    PRIORITY_MAX,
    PRIORITY_MIN,
)
from .durations import SecondsError, seconds
from .exceptions import InvalidJob
from .handlers import registry
from .names import (
    NO_SURROGATES,
    OWN_TYPE_PREFIX,
    SURROGATE_RE,
    own_type_message,
    validate_concurrency_key,
    validate_idempotency_key,
    validate_queue,
    validate_type,
)

__all__ = [
    "Defaults",
    "JobSpec",
    "build_spec",
    "dump_payload",
    "validate_delay",
    "validate_delay_or_run_at",
    "validate_depends_on",
    "validate_idempotency_key",
    "validate_max_attempts",
    "validate_on_parent_failure",
    "validate_priority",
    "validate_queue",
    "validate_run_at",
    "validate_timeout",
    "validate_type",
]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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


def validate_concurrency_limit(value: Any) -> int:
    if not _is_int(value):
        raise InvalidJob("concurrency_limit", f"must be an integer, not {type(value).__name__}.")
    if not 1 <= value <= CONCURRENCY_LIMIT_MAX:
        raise InvalidJob(
            "concurrency_limit",
            f"must be between 1 and {CONCURRENCY_LIMIT_MAX} (got {value}).",
        )
    return int(value)


# One encoder for every payload: json.dumps() with non-default options
# builds a new encoder per call, a visible cost in enqueue_many. Not ASCII-
# only, so that a lone surrogate stays a character of the text (and is found
# below) rather than an escape PostgreSQL refuses; a valid character outside
# the BMP and a surrogate pair would look the same as escapes.
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))
# A NUL escape, not a backslash written before "u0000": an odd number of backslashes.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def dump_payload(value: Any) -> str:
    """The payload as JSON text, or ``InvalidJob``.

    Strict ``json`` (no custom encoder): what is stored must read back as
    the same object, which is also what idempotent replays compare.
    """
    if value.__class__ is not dict and not isinstance(value, dict):
        raise InvalidJob("payload", f"must be a JSON object (a dict), not {type(value).__name__}.")
    return dump_json("payload", value)


def dump_json(field: str, value: Any) -> str:
    """Any JSON value as JSON text that jsonb can store, or ``InvalidJob`` for ``field``."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidJob(field, f"is not JSON-serialisable: {exc}.") from None
    except RecursionError:
        raise InvalidJob(field, "is nested too deeply to serialise.") from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        # PostgreSQL's jsonb cannot store NUL in a string.
        raise InvalidJob(field, "must not contain NUL characters.")
    if not text.isascii() and SURROGATE_RE.search(text):
        raise InvalidJob(field, NO_SURROGATES)
    return text


def _as_decimals(value: Any) -> Any:
    return json.loads(json.dumps(value), parse_float=Decimal, parse_int=Decimal)


def same_json(mine: Any, stored: Any) -> bool:
    """Whether two JSON values are equal as JSON, whose numbers have one type.

    jsonb keeps a number's decimal value, not Python's int/float split:
    ``1.2345678901234567e+30`` reads back as the ``int`` it is in decimal,
    which Python's ``==`` tells from the float. Compared as decimals, an
    idempotent replay of a payload holding such a float is a replay.
    """
    return bool(mine == stored) or _as_decimals(mine) == _as_decimals(stored)


def validate_delay(value: Any) -> int | None:
    """The delay in whole microseconds (the database's resolution), or ``None``."""
    if value is None:
        return None
    try:
        number = seconds(value, allow_zero=True)
    except SecondsError as exc:
        raise InvalidJob("delay", _delay_error(exc)) from None
    if isinstance(value, timedelta):
        return value // timedelta(microseconds=1)
    return round(number * 1_000_000)


def _delay_error(exc: SecondsError) -> str:
    if exc.reason == SecondsError.TYPE:
        return f"must be a timedelta or a number of seconds, not {type(exc.value).__name__}."
    if exc.reason == SecondsError.NOT_FINITE:
        return "must be finite."
    if exc.reason == SecondsError.TOO_LONG:
        return f"must be at most {MAX_DELAY_SECONDS} s (100 years), got {exc.seconds} s."
    return f"must not be negative (got {exc.seconds} s)."


def validate_timeout(value: Any, field: str = "timeout") -> float:
    """A time limit in seconds: a positive, finite number (``timedelta`` accepted)."""
    try:
        return seconds(value, allow_zero=False)
    except SecondsError as exc:
        raise InvalidJob(field, _timeout_error(exc)) from None


def _timeout_error(exc: SecondsError) -> str:
    if exc.reason == SecondsError.TYPE:
        return f"must be a number of seconds or a timedelta, not {type(exc.value).__name__}."
    if exc.reason == SecondsError.NOT_FINITE:
        return "must be finite."
    if exc.reason == SecondsError.TOO_LONG:
        return f"must be at most {MAX_DELAY_SECONDS} s (100 years), got {exc.seconds:g} s."
    return f"must be more than 0 seconds (got {exc.seconds:g})."


def validate_delay_or_run_at(delay: Any, run_at: Any) -> None:
    """A job has one start time: ``delay`` or ``run_at``, never both (``None``: not given)."""
    if delay is not None and run_at is not None:
        raise InvalidJob(
            "run_at", "give either delay or run_at, not both.", code=InvalidJob.DELAY_AND_RUN_AT
        )


def validate_run_at(value: Any) -> datetime | None:
    """An aware ``run_at``, in UTC.

    In UTC because PostgreSQL takes UTC offsets only up to 15:59 and in whole
    seconds, where Python allows up to 23:59:59.999999; and a time that
    does not exist in UTC (0001-01-01 00:00+05:00 is in year 0) is refused.
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidJob("run_at", f"must be a datetime, not {type(value).__name__}.")
    if timezone.is_naive(value):
        if settings.USE_TZ:
            raise InvalidJob("run_at", "must be timezone-aware when USE_TZ is True.")
        return value
    try:
        return value.astimezone(dt_timezone.utc)
    except OverflowError:
        raise InvalidJob(
            "run_at", f"is out of range: {value.isoformat()} is before year 1 or after 9999 in UTC."
        ) from None


#: ``on_parent_failure`` values (``models.OnParentFailure``, which this module cannot import).
ON_PARENT_FAILURE_VALUES = ("cancel", "run")


def validate_depends_on(value: Any) -> tuple[uuid.UUID, ...]:
    """Parents as job ids, without duplicates, in the order given.

    Each item may be a job id (a ``UUID`` or its text), a ``Job`` or what
    ``enqueue`` returned (an ``EnqueueResult``). Whether the jobs exist is
    the database's to say, when the child is inserted.
    """
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidJob(
            "depends_on", f"must be a list of jobs or job ids, not {type(value).__name__}."
        )
    parents: dict[uuid.UUID, None] = {}
    for item in value:
        parents[_job_id_of(item)] = None
        if len(parents) > DEPENDS_ON_MAX:
            raise InvalidJob("depends_on", f"must name at most {DEPENDS_ON_MAX} jobs.")
    return tuple(parents)


def _job_id_of(item: Any) -> uuid.UUID:
    """The job id ``item`` stands for: a UUID, its text, a ``Job``, an ``EnqueueResult``."""
    if isinstance(item, uuid.UUID):
        return item
    if isinstance(item, str):
        try:
            return uuid.UUID(item)
        except ValueError:
            raise InvalidJob("depends_on", f"{item!r} is not a job id (a UUID).") from None
    # A Job (pk), an EnqueueResult (job.pk): duck-typed, the models are not
    # importable here (validation runs before the app registry is ready).
    job = getattr(item, "job", item)
    pk = getattr(job, "pk", None)
    if isinstance(pk, uuid.UUID):
        return pk
    raise InvalidJob(
        "depends_on",
        f"items must be jobs, enqueue() results or job ids, not {type(item).__name__}.",
    )


def validate_on_parent_failure(value: Any) -> str:
    if value not in ON_PARENT_FAILURE_VALUES:
        raise InvalidJob(
            "on_parent_failure",
            f"must be {' or '.join(map(repr, ON_PARENT_FAILURE_VALUES))}, not {value!r}.",
        )
    return str(value)


class JobSpec(NamedTuple):
    """A validated, fully resolved job to insert.

    A named tuple rather than a frozen dataclass: it is built once per job
    and is about five times cheaper to construct.
    """

    type: str
    payload: dict[str, Any]
    payload_json: str
    queue: str
    priority: int
    max_attempts: int
    idempotency_key: str | None
    delay_us: int | None
    run_at: datetime | None
    #: The per-job time limit, only when the caller gave one: ``None`` lets
    #: the worker use the handler's ``timeout``, then ``TIMEOUT_SECONDS``, as
    #: they are when the job runs.
    timeout: float | None = None
    #: Jobs of this type sharing the key run at most ``concurrency_limit`` at once.
    concurrency_key: str | None = None
    #: The jobs it waits for (``depends_on``); empty: none.
    parents: tuple[uuid.UUID, ...] = ()
    on_parent_failure: str = "cancel"

    @property
    def delay(self) -> timedelta | None:
        return None if self.delay_us is None else timedelta(microseconds=self.delay_us)

    def differences(self, job: Any) -> list[str]:
        """The parameters in which ``job`` differs from this spec.

        The payload is compared as stored JSON (so ``{1: "a"}`` equals
        ``{"1": "a"}``), its numbers as decimals (``same_json``). The
        schedule is left out on purpose: a delay is
        relative to the moment of each call, so a retried call never
        repeats it exactly. ``timeout`` is compared as given (``None``, no
        per-job limit, differs from any number): a replay asking for another
        limit than the job has would otherwise run under a limit the caller
        did not ask for. The parents are compared by the caller
        (``enqueueing``), which reads the job's edges.
        """
        return [
            name
            for name, mine in (
                ("type", self.type),
                ("queue", self.queue),
                ("payload", self.stored_payload()),
                ("priority", self.priority),
                ("max_attempts", self.max_attempts),
                ("timeout", self.timeout),
                ("concurrency_key", self.concurrency_key),
                ("on_parent_failure", self.on_parent_failure),
            )
            if not (
                same_json(mine, job.payload) if name == "payload" else mine == getattr(job, name)
            )
        ]

    def stored_payload(self) -> dict[str, Any]:
        """The payload as the database holds it (JSON keys are strings, tuples lists)."""
        payload: dict[str, Any] = json.loads(self.payload_json)
        return payload


class Defaults(NamedTuple):
    """``DURABLE_JOBS`` defaults, read once per enqueue call rather than per job."""

    queue: str
    priority: int
    max_attempts: int

    @classmethod
    def from_settings(cls) -> Defaults:
        return cls(
            jobs_settings.DEFAULT_QUEUE,
            jobs_settings.DEFAULT_PRIORITY,
            jobs_settings.DEFAULT_MAX_ATTEMPTS,
        )


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
    timeout: Any = None,
    concurrency_key: Any = None,
    depends_on: Any = None,
    on_parent_failure: Any = None,
    defaults: Defaults | None = None,
    own_type: bool = False,
) -> JobSpec:
    """Validate ``enqueue`` arguments and fill in the defaults.

    Defaults come from the registered handler, if this process has one,
    then from ``DURABLE_JOBS``. Written for speed: ``enqueue_many`` calls it
    once per job. ``own_type``: the package's own types (``durable_jobs.*``)
    are allowed; only the package's own doors pass it.
    """
    type_name = validate_type(type)
    if type_name.startswith(OWN_TYPE_PREFIX) and not own_type:
        raise InvalidJob("type", own_type_message(type_name))
    if payload is None:
        payload, payload_json = {}, "{}"
    else:
        payload_json = dump_payload(payload)
    validate_delay_or_run_at(delay, run_at)
    if defaults is None:
        defaults = Defaults.from_settings()
    handler = registry.get(type_name)
    if handler is not None:
        if queue is None:
            queue = handler.queue
        if priority is None:
            priority = handler.priority
        if max_attempts is None:
            max_attempts = handler.max_attempts
    return JobSpec(
        type_name,
        payload,
        payload_json,
        defaults.queue if queue is None else validate_queue(queue),
        defaults.priority if priority is None else validate_priority(priority),
        defaults.max_attempts if max_attempts is None else validate_max_attempts(max_attempts),
        None if idempotency_key is None else validate_idempotency_key(idempotency_key),
        None if delay is None else validate_delay(delay),
        None if run_at is None else validate_run_at(run_at),
        None if timeout is None else validate_timeout(timeout),
        None if concurrency_key is None else validate_concurrency_key(concurrency_key),
        () if depends_on is None else validate_depends_on(depends_on),
        "cancel" if on_parent_failure is None else validate_on_parent_failure(on_parent_failure),
    )
