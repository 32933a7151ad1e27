"""Request and response bodies of the REST API.

``EnqueueSerializer`` checks only JSON types (a string is a string, an
integer is not ``"5"`` or ``5.0``) and the API's own rules (the key is
required, registered types only, header and body agree). The values
themselves (lengths, ranges, queue names) are checked by ``enqueue()``'s
validation, the one implementation, and its ``InvalidJob`` is reported
against the same field (see ``errors.invalid_job_error``).

The fields' ``schema=`` is what the OpenAPI schema says of them (``schema.py``):
the same rules as JSON Schema, for clients and for schemathesis.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.drainage import set_override
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .. import rest_policy, step_records
from ..conf import jobs_settings
from ..constants import (
    CONCURRENCY_KEY_MAX_LENGTH,
    DEPENDS_ON_MAX,
    EVENT_KEY_MAX_LENGTH,
    EVENT_KEY_PATTERN,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    MAX_ATTEMPTS_LIMIT,
    MAX_DELAY_SECONDS,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUE_MAX_LENGTH,
    STEP_NAME_MAX_LENGTH,
    TYPE_MAX_LENGTH,
)
from ..exceptions import InvalidJob
from ..models import Job, JobStatus, OnParentFailure, StepKind, StepStatus
from ..names import validate_queue
from ..validation import validate_delay_or_run_at, validate_type
from .errors import invalid_job_error
from .schema import (
    AWARE_DATE_TIME_SCHEMA,
    INCLUDABLE_FIELDS,
    KEY_PATTERN,
    KEY_SCHEMA,
    QUEUE_SCHEMA,
    TYPE_SCHEMA,
    text,
)

# --- strict JSON fields ------------------------------------------------------


class Described:
    """A field whose OpenAPI schema is given as ``schema=`` (a JSON Schema dict).

    A keyword argument, not an attribute set afterwards: DRF copies declared
    fields by calling the class again with the same arguments.
    """

    def __init__(self, *, schema: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if schema is not None:
            set_override(self, "field", schema)


class StrictCharField(Described, serializers.CharField):
    """A JSON string, kept as sent: no coercion of numbers, no trimming."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("allow_blank", True)  # validation.py says "must not be empty"
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError(f"must be a string, not {_json_type(data)}.")
        return data


class StrictIntegerField(Described, serializers.IntegerField):
    """A JSON integer: ``"5"``, ``5.0`` and ``true`` are refused."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise serializers.ValidationError(f"must be an integer, not {_json_type(data)}.")
        return data


class SecondsField(Described, serializers.FloatField):
    """A JSON number of seconds (integer or fraction)."""

    def to_internal_value(self, data: Any) -> float | int:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise serializers.ValidationError(f"must be a number, not {_json_type(data)}.")
        return data


@extend_schema_field({"type": "object", "additionalProperties": True})
class JSONObjectField(serializers.JSONField):
    """A JSON object (``{...}``); arrays, strings, numbers and null are refused."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError(f"must be a JSON object, not {_json_type(data)}.")
        return data


#: A job id as JSON Schema's ``uuid`` format reads one: 8-4-4-4-12 hex digits.
#: (Python's ``uuid.UUID`` also takes braces, ``urn:uuid:`` and no hyphens.)
UUID_RE = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", re.ASCII)


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string", "format": "uuid"},
        "maxItems": DEPENDS_ON_MAX,
    }
)
class JobIdListField(serializers.Field):  # type: ignore[type-arg]
    """A JSON array of job ids (strings); whether they exist is ``enqueue()``'s to check."""

    def to_internal_value(self, data: Any) -> list[str]:
        if not isinstance(data, list):
            raise serializers.ValidationError(
                f"must be an array of job ids, not {_json_type(data)}."
            )
        if len(data) > DEPENDS_ON_MAX:
            raise serializers.ValidationError(f"must name at most {DEPENDS_ON_MAX} jobs.")
        for index, item in enumerate(data):
            if not isinstance(item, str):
                raise serializers.ValidationError(
                    f"must be an array of job ids (strings); item {index} is {_json_type(item)}."
                )
            if not UUID_RE.fullmatch(item):
                raise serializers.ValidationError(
                    f"item {index} is not a job id (a UUID such as "
                    "01234567-89ab-7cde-8f01-23456789abcd)."
                )
        return data

    def to_representation(self, value: Any) -> list[str]:
        return [str(item) for item in value]


#: The dates an API time may fall on: on the first and last day Python
#: holds, the time in UTC may be in year 0 or 10000 (schema.DATE_TIME_IN_RANGE).
FIRST_DATE, LAST_DATE = date(1, 1, 2), date(9999, 12, 30)


@extend_schema_field(AWARE_DATE_TIME_SCHEMA)
class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 time with a UTC offset; a naive time is refused, not guessed.

    RFC 3339 (JSON Schema's ``date-time``) allows a lower-case ``t`` and ``z``.
    """

    def to_internal_value(self, value: Any) -> datetime:
        if not isinstance(value, str):
            raise serializers.ValidationError(
                f"must be an ISO 8601 string, not {_json_type(value)}."
            )
        try:
            parsed = parse_datetime(value.upper())
        except ValueError:
            parsed = None
        if parsed is None:
            raise serializers.ValidationError(
                "must be an ISO 8601 date and time, e.g. 2030-01-31T09:00:00Z."
            )
        if settings.USE_TZ and timezone.is_naive(parsed):
            raise serializers.ValidationError(
                "must include a UTC offset (Z or +hh:mm): a naive time is ambiguous."
            )
        if not FIRST_DATE <= parsed.date() <= LAST_DATE:
            raise serializers.ValidationError(
                f"must fall between {FIRST_DATE.isoformat()} and {LAST_DATE.isoformat()}."
            )
        return parsed


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# --- enqueue -------------------------------------------------------------------


# The type argument is the instance a serializer reads (DRF's stubs make it
# generic; at run time Serializer[...] is Serializer). The request body has
# none; the responses are dicts (stats.py, schedules/overview.py).
class EnqueueSerializer(serializers.Serializer[None]):
    """The body of ``POST /api/jobs``.

    ``context["header_key"]`` is the ``Idempotency-Key`` header, if sent.
    """

    type = StrictCharField(
        schema=TYPE_SCHEMA,
        help_text=(
            f"Job type (handler name), at most {TYPE_MAX_LENGTH} characters, without "
            "surrounding whitespace or NUL. Unless DURABLE_JOBS['API_ALLOW_UNREGISTERED_TYPES'], "
            "a type some handler of this process is registered for; never the package's own "
            "(durable_jobs.*); by default not one declared with a schedule, or exactly those of "
            "DURABLE_JOBS['API_ENQUEUE_TYPES']."
        ),
    )
    payload = JSONObjectField(
        required=False,
        help_text=(
            "JSON object given to the handler. No NUL character in its keys and strings "
            "(PostgreSQL's jsonb cannot store one), at most 100 levels deep."
        ),
    )
    idempotency_key = StrictCharField(
        required=False,
        schema=KEY_SCHEMA,
        help_text=(
            f"Required here or as the Idempotency-Key header; at most "
            f"{IDEMPOTENCY_KEY_MAX_LENGTH} characters. The same key with the same "
            "parameters returns the same job."
        ),
    )
    queue = StrictCharField(
        required=False,
        schema=QUEUE_SCHEMA,
        help_text=(
            f"Queue name (letters, digits, '_', '-', '.'), at most {QUEUE_MAX_LENGTH}; one the "
            "project declared (DEFAULT_QUEUE, QUEUES, handlers' queues) or listed in "
            "DURABLE_JOBS['API_ENQUEUE_QUEUES']."
        ),
    )
    priority = StrictIntegerField(
        required=False,
        schema={"type": "integer", "minimum": PRIORITY_MIN, "maximum": PRIORITY_MAX},
        help_text=(
            f"Higher runs first; {PRIORITY_MIN} to DURABLE_JOBS['API_MAX_PRIORITY'] (default 0: "
            "REST callers may lower a job's priority, not raise it above the default)."
        ),
    )
    delay_seconds = SecondsField(
        required=False,
        schema={"type": "number", "minimum": 0, "maximum": MAX_DELAY_SECONDS},
        help_text=(
            f"Run no sooner than this many seconds from now; 0 to {MAX_DELAY_SECONDS}. "
            "Not with run_at."
        ),
    )
    run_at = AwareDateTimeField(
        required=False,
        help_text=(
            "Run no sooner than this time (with a UTC offset; a date from 0001-01-02 to "
            "9999-12-30). Not with delay_seconds."
        ),
    )
    max_attempts = StrictIntegerField(
        required=False,
        schema={"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS_LIMIT},
        help_text=(
            "Attempts before the job goes dead; 1 to DURABLE_JOBS['API_MAX_ATTEMPTS'] (default 25)."
        ),
    )
    timeout = SecondsField(
        required=False,
        # The maximum is the setting's, filled in when the schema is made
        # (schema.EnqueueRequestExtension).
        schema={"type": "number", "minimum": 0, "exclusiveMinimum": True},
        help_text=(
            "Seconds one attempt may run before it fails with JobTimeout; more than 0 and at "
            "most DURABLE_JOBS['API_MAX_TIMEOUT_SECONDS'] (default 3600). Without it, the "
            "handler's timeout or DURABLE_JOBS['TIMEOUT_SECONDS'] applies."
        ),
    )

    concurrency_key = StrictCharField(
        required=False,
        schema=text(KEY_PATTERN, CONCURRENCY_KEY_MAX_LENGTH),
        help_text=(
            f"At most {CONCURRENCY_KEY_MAX_LENGTH} characters. Jobs of a type declared with "
            "@job(concurrency_limit=N) that share this key run at most N at once, over every "
            "worker; without a limit on the type, the key changes nothing."
        ),
    )

    depends_on = JobIdListField(
        required=False,
        help_text=(
            "Ids of jobs this one waits for: it stays waiting until every one has "
            "completed, then becomes pending. Each must exist (400 otherwise)."
        ),
    )
    on_parent_failure = serializers.ChoiceField(
        choices=OnParentFailure.choices,
        required=False,
        help_text=(
            "When a parent ends dead or cancelled: cancel this job (cancel, the default) or "
            "run it anyway once the other parents are done (run)."
        ),
    )

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["is not a field of a job request."] for name in unknown}
                )
        return super().to_internal_value(data)

    def validate_type(self, value: str) -> str:
        try:
            validate_type(value)
        except InvalidJob as exc:
            raise serializers.ValidationError(exc.message) from None
        refusal = rest_policy.type_refusal(value)
        if refusal is not None:
            raise serializers.ValidationError(refusal)
        return value

    def validate_queue(self, value: str) -> str:
        try:
            validate_queue(value)
        except InvalidJob as exc:
            raise serializers.ValidationError(exc.message) from None
        refusal = rest_policy.queue_refusal(value)
        if refusal is not None:
            raise serializers.ValidationError(refusal)
        return value

    def validate_priority(self, value: int) -> int:
        refusal = rest_policy.priority_refusal(value)
        if refusal is not None:
            raise serializers.ValidationError(refusal)
        return value

    def validate_max_attempts(self, value: int) -> int:
        refusal = rest_policy.attempts_refusal(value)
        if refusal is not None:
            raise serializers.ValidationError(refusal)
        return value

    def validate_timeout(self, value: float | int) -> float | int:
        # Positive and finite is enqueue()'s rule (validation.py); the API's
        # ceiling keeps a client from pinning a worker slot for days.
        limit = float(jobs_settings.API_MAX_TIMEOUT_SECONDS)
        if value > limit:
            raise serializers.ValidationError(
                f"must be at most {limit:g} seconds (DURABLE_JOBS['API_MAX_TIMEOUT_SECONDS'])."
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        header = self.context.get("header_key")
        body = attrs.get("idempotency_key")
        if header is not None and body is not None and header != body:
            raise serializers.ValidationError(
                {
                    "idempotency_key": [
                        "differs from the Idempotency-Key header; send one or both equal."
                    ]
                }
            )
        key = body if body is not None else header
        if key is None:
            raise serializers.ValidationError(
                {"idempotency_key": ["is required (in the body or as the Idempotency-Key header)."]}
            )
        try:
            validate_delay_or_run_at(attrs.get("delay_seconds"), attrs.get("run_at"))
        except InvalidJob as exc:
            raise invalid_job_error(exc) from None
        return {**attrs, "idempotency_key": key}

    def enqueue_arguments(self) -> dict[str, Any]:
        """The validated body as ``enqueue()``'s keyword arguments."""
        data = dict(self.validated_data)
        if "delay_seconds" in data:
            data["delay"] = data.pop("delay_seconds")
        return data


# --- jobs ------------------------------------------------------------------------


@extend_schema_field({"type": "object", "additionalProperties": True})
class ObjectField(serializers.JSONField):
    pass


@extend_schema_field(OpenApiTypes.ANY)
class AnyJSONField(serializers.JSONField):
    pass


# Of any length, so JobDetailSerializer.Meta can list more.
JOB_FIELDS: tuple[str, ...] = (
    "id",
    "type",
    "queue",
    "payload",
    "idempotency_key",
    "status",
    "priority",
    "attempts",
    "max_attempts",
    "available_at",
    "started_at",
    "completed_at",
    "last_error",
    "created_at",
    "updated_at",
)


class JobSerializer(serializers.ModelSerializer[Job]):
    """A job: what the list and the detail share (the detail adds more)."""

    payload = ObjectField(read_only=True)
    status = serializers.ChoiceField(choices=JobStatus.choices, read_only=True)

    class Meta:
        model = Job
        fields = JOB_FIELDS
        read_only_fields = JOB_FIELDS


class JobSummarySerializer(JobSerializer):
    """A job as listed: no payload, result, last error or error history unless asked.

    ``context["include"]``: the names of ``INCLUDABLE_FIELDS`` the client asked
    for with ``?include=`` (``JobSummaryExtension`` marks them optional in
    the schema, since a row has them only then).
    """

    result = AnyJSONField(read_only=True, allow_null=True)
    # See JobDetailSerializer.errors for the type: ignore.
    errors = serializers.ListField(child=ObjectField(), read_only=True)  # type: ignore[assignment]

    class Meta(JobSerializer.Meta):
        fields = (*JOB_FIELDS, "result", "errors")
        read_only_fields = fields

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        include = self.context.get("include")
        if include is None:
            # No request behind it (the schema generator): every field, for the schema.
            return fields
        return {
            name: field
            for name, field in fields.items()
            if name not in INCLUDABLE_FIELDS or name in include
        }


# Any: serialized many=True, which the stubs' instance type cannot express.
class StepSerializer(serializers.Serializer[Any]):
    """One recorded step of a job (its result is not shown: ``result_bytes`` is its size)."""

    name = serializers.CharField(
        read_only=True, help_text="The step's name; name#2... for a repeat within a run."
    )
    kind = serializers.ChoiceField(choices=StepKind.choices, read_only=True)
    attempt = serializers.IntegerField(read_only=True, help_text="The attempt that wrote it.")
    started_at = serializers.DateTimeField(read_only=True)
    finished_at = serializers.DateTimeField(read_only=True, allow_null=True)
    status = StrictCharField(
        read_only=True,
        # A pattern, not an enum: drf-spectacular names enums by field name, and
        # "status" is the jobs' (StatusEnum) already.
        schema={"type": "string", "pattern": f"^({'|'.join(StepStatus.values)})$"},
        help_text="completed, failed, or suspended (a sleep or wait not over yet).",
    )
    error = serializers.CharField(read_only=True, help_text="A failed step's error; else empty.")
    result_bytes = serializers.IntegerField(
        read_only=True, help_text="Size of the recorded result as JSON text, in bytes."
    )


WAITING_FOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "nullable": True,
    "description": (
        "Why the job waits, while it is pending or waiting; null otherwise. One of "
        '{"until": time} (a sleep), {"event": key} (with "deadline" when the wait has a '
        'timeout), {"job": id} (a child job), {"parents": [ids]} (depends_on parents not '
        f"finished yet, the first {step_records.PARENTS_SHOWN})."
    ),
    "properties": {
        "until": {"type": "string", "format": "date-time"},
        "event": {"type": "string"},
        "deadline": {"type": "string", "format": "date-time", "nullable": True},
        "job": {"type": "string", "format": "uuid"},
        "parents": {"type": "array", "items": {"type": "string", "format": "uuid"}},
    },
    "additionalProperties": True,
}


class JobDetailSerializer(JobSerializer):
    """A job with its result, failure history, parents and dependents, steps and suspension."""

    result = AnyJSONField(read_only=True, allow_null=True)
    # A declared field: the serializer's metaclass takes it out of the class, so
    # Serializer.errors (the validation errors, which the stubs see) stays.
    errors = serializers.ListField(child=ObjectField(), read_only=True)  # type: ignore[assignment]
    waiting_for = serializers.SerializerMethodField()
    steps = serializers.SerializerMethodField(
        help_text=(
            f"Its recorded steps (ctx.step, sleeps, event waits, child jobs), by position: "
            f"the first {step_records.STEPS_SHOWN}; steps_truncated says whether there are "
            "more. Results are not shown, only their size."
        )
    )
    steps_truncated = serializers.SerializerMethodField(
        help_text=f"The job has more than {step_records.STEPS_SHOWN} step records."
    )
    depends_on = serializers.ListField(
        child=serializers.UUIDField(),
        source="parent_ids",
        read_only=True,
        help_text="Ids of the jobs it was enqueued to wait for, oldest first.",
    )
    dependents = serializers.ListField(
        child=serializers.UUIDField(),
        source="dependent_ids",
        read_only=True,
        help_text="Ids of the jobs enqueued to wait for it, oldest first.",
    )

    class Meta(JobSerializer.Meta):
        fields = (
            *JOB_FIELDS,
            "timeout",
            "concurrency_key",
            "cancel_requested_at",
            "on_parent_failure",
            "waiting_on",
            "depends_on",
            "dependents",
            "result",
            "errors",
            "waiting_for",
            "steps",
            "steps_truncated",
        )
        read_only_fields = fields

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._steps: dict[Any, step_records.Steps] = {}

    def _job_steps(self, job: Job) -> step_records.Steps:
        known = self.context.get("steps")
        if known is not None:  # a job just enqueued has none: no query
            return known  # type: ignore[no-any-return]
        if job.pk not in self._steps:
            self._steps[job.pk] = step_records.job_steps(job)
        return self._steps[job.pk]

    @extend_schema_field(WAITING_FOR_SCHEMA)
    def get_waiting_for(self, job: Job) -> dict[str, Any] | None:
        return step_records.waiting_for(job)

    @extend_schema_field(StepSerializer(many=True))
    def get_steps(self, job: Job) -> list[Any]:
        return list(StepSerializer(self._job_steps(job).rows, many=True).data)

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_steps_truncated(self, job: Job) -> bool:
        return self._job_steps(job).truncated


# --- schedules -------------------------------------------------------------------


# Any: the view serializes the whole list (many=True), which the stubs'
# instance type cannot express.
class ScheduleSerializer(serializers.Serializer[Any]):
    """One declared schedule with what the workers recorded of it (``schedule_overview``)."""

    name = serializers.CharField()
    type = serializers.CharField(help_text="The job type each tick enqueues.")
    cron = serializers.CharField(
        allow_null=True, help_text="The cron expression; null for an interval."
    )
    every_seconds = serializers.IntegerField(
        allow_null=True, help_text="The interval in seconds; null for a cron expression."
    )
    timing = serializers.CharField(help_text="As text: 'cron 0 3 * * *' or 'every 5m'.")
    timezone = serializers.CharField(
        help_text="The zone the cron expression is read in; UTC for an interval."
    )
    queue = serializers.CharField(help_text="The queue its jobs go to.")
    missed = serializers.CharField(help_text="The missed-tick policy: latest or skip.")
    enabled = serializers.BooleanField()
    origin = serializers.CharField(
        help_text="Where it is declared: @job or DURABLE_JOBS['SCHEDULES']."
    )
    handler_registered = serializers.BooleanField(
        help_text="Whether a handler is registered for its type in this process."
    )
    first_seen = serializers.DateTimeField(
        allow_null=True, help_text="When a worker first saw it; null if none has yet."
    )
    last_tick = serializers.DateTimeField(
        allow_null=True, help_text="The last tick a worker enqueued; null if none yet."
    )
    last_job_id = serializers.UUIDField(
        allow_null=True, help_text="The job the last tick enqueued; null if none yet."
    )
    last_job_status = serializers.CharField(
        allow_null=True,
        help_text="That job's status, or 'pruned' once retention has deleted it; null if no tick.",
    )
    next_tick = serializers.DateTimeField(
        allow_null=True, help_text="The first tick after now; null for a disabled schedule."
    )


# --- stats, health, errors (responses) -----------------------------------------


class StatusCountsSerializer(serializers.Serializer[dict[str, Any]]):
    pending = serializers.IntegerField()
    running = serializers.IntegerField()
    completed = serializers.IntegerField()
    dead = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    waiting = serializers.IntegerField(help_text="Waiting for their parents (depends_on).")


class QueueLimitsSerializer(serializers.Serializer[dict[str, Any]]):
    rate_limit = serializers.CharField(
        allow_null=True, help_text="At most N starts per window: N/s, N/m or N/h; null: none."
    )
    concurrency = serializers.IntegerField(
        allow_null=True, help_text="At most this many running at once; null: no limit."
    )


class HeldBackSerializer(serializers.Serializer[dict[str, Any]]):
    """The queue's runnable jobs no worker may start now, by the limit that holds them.

    Each job counts once, under the first reason that applies in this order.
    """

    paused = serializers.IntegerField(
        help_text="The queue is paused: all its runnable jobs; 0 otherwise."
    )
    concurrency = serializers.IntegerField(
        help_text="The queue already runs as many jobs as its concurrency allows: all its "
        "runnable jobs; 0 otherwise."
    )
    rate_limit = serializers.IntegerField(
        help_text="The queue's rate window is full (as many starts as its rate_limit allows): "
        "all its runnable jobs; 0 otherwise."
    )
    key = serializers.IntegerField(
        help_text="Runnable jobs whose concurrency key already runs its type's "
        "concurrency_limit (keys of a type without a limit never count)."
    )


HELD_BACK_HELP = (
    "Runnable pending jobs that no worker may start now because of a pause or a limit, "
    "by reason (the reasons of durable_jobs_throttled_total); all 0 when none."
)


class QueueStatsSerializer(StatusCountsSerializer):
    total = serializers.IntegerField()
    oldest_pending_age_seconds = serializers.FloatField(
        allow_null=True,
        help_text="Seconds the oldest runnable pending job of this queue has waited.",
    )
    limits = QueueLimitsSerializer(
        allow_null=True, help_text="The queue's DURABLE_JOBS['QUEUES'] limits; null: none."
    )
    paused = serializers.BooleanField(help_text="Whether workers hold off this queue now.")
    paused_until = serializers.DateTimeField(
        allow_null=True, help_text="When the pause lifts by itself; null: until resumed."
    )
    held_back = HeldBackSerializer(help_text=HELD_BACK_HELP)
    estimated = serializers.ListField(
        child=serializers.CharField(),  # a status; an enum here would rename StatusEnum
        help_text="The statuses whose counts for this queue are the planner's estimates.",
    )


class StatsSerializer(serializers.Serializer[dict[str, Any]]):
    total = serializers.IntegerField()
    statuses = StatusCountsSerializer()
    queues = serializers.DictField(child=QueueStatsSerializer())
    estimated = serializers.ListField(
        child=serializers.CharField(),  # a status; an enum here would rename StatusEnum
        help_text=(
            "The statuses whose counts are PostgreSQL's estimates somewhere in this answer "
            "(the total then too); empty: every number is exact."
        ),
    )
    oldest_pending_age_seconds = serializers.FloatField(
        allow_null=True,
        help_text=(
            "Seconds the oldest runnable pending job (available_at in the past) has "
            "waited since available_at; null when none is waiting."
        ),
    )


class HealthSerializer(serializers.Serializer[dict[str, Any]]):
    # Plain strings, not enums: their "ok"/"unavailable" would collide in the
    # schema's enum names with the job's status.
    status = serializers.CharField(help_text="ok or unavailable.")
    database = serializers.CharField(help_text="ok or unavailable.")
    live_workers = serializers.IntegerField(
        required=False, help_text="Workers whose last heartbeat is younger than their lease."
    )
    oldest_pending_age_seconds = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="How long the oldest runnable pending job has waited; null if none.",
    )
    error = serializers.CharField(required=False, help_text="database_unavailable, on a 503.")
    detail = serializers.CharField(required=False)


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """Every error: a stable code and a human message (or per-field messages)."""

    error = serializers.CharField(help_text="Stable code, e.g. invalid, not_found, conflict.")
    detail = AnyJSONField(help_text="A message, or {field: [messages]} for invalid input.")


class ValidationErrorSerializer(ErrorSerializer):
    # The field's type, narrowed for the schema: ErrorSerializer's is any JSON.
    detail = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Messages by field name.",
    )


class TooManyWaitingSerializer(ErrorSerializer):
    """A ``?wait=`` refused: this process already holds as many waiting requests as it may."""

    limit = serializers.IntegerField(
        help_text="API_MAX_WAITING_REQUESTS: the waiting requests one process holds at most."
    )


class IdempotencyConflictSerializer(ErrorSerializer):
    job_id = serializers.UUIDField(
        required=False,
        help_text="The job that holds the key (absent for a client that may not read jobs).",
    )
    differences = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Parameters that differ from that job's (absent likewise).",
    )


class InvalidStateSerializer(ErrorSerializer):
    job_status = serializers.CharField(help_text="The job's status, which the call refused.")
    allowed = serializers.ListField(child=serializers.CharField())


# --- queues ----------------------------------------------------------------------


class QueueCountsSerializer(serializers.Serializer[dict[str, Any]]):
    pending = serializers.IntegerField()
    running = serializers.IntegerField()
    waiting = serializers.IntegerField(help_text="Waiting for their parents (depends_on).")
    dead = serializers.IntegerField()


class QueueSerializer(serializers.Serializer[Any]):
    """One queue: its counts, limits and paused state."""

    name = serializers.CharField()
    counts = QueueCountsSerializer(
        help_text="Jobs pending, running, waiting and dead in this queue."
    )
    oldest_pending_age_seconds = serializers.FloatField(
        allow_null=True,
        help_text="Seconds the oldest runnable pending job of this queue has waited.",
    )
    limits = QueueLimitsSerializer(
        allow_null=True, help_text="The queue's DURABLE_JOBS['QUEUES'] limits; null: none."
    )
    paused = serializers.BooleanField(
        help_text="Whether workers hold off this queue now (it still accepts jobs)."
    )
    paused_until = serializers.DateTimeField(
        allow_null=True, help_text="When the pause lifts by itself; null: until resumed."
    )
    held_back = HeldBackSerializer(help_text=HELD_BACK_HELP)


class PauseSerializer(serializers.Serializer[None]):
    """The body of a pause: an optional end time."""

    until = AwareDateTimeField(
        required=False,
        allow_null=True,
        help_text="When the pause lifts by itself (ISO 8601 with a UTC offset, in the "
        "future); absent or null: until resumed.",
    )


# --- security: what a client that may not read jobs gets; the audit trail ----------


class EnqueueReceiptSerializer(serializers.Serializer[Job]):
    """``POST /api/jobs``' answer to a client that may enqueue but not read jobs.

    A replay finds a job that may be another client's: its status, payload,
    result and errors are not this client's to read.
    """

    id = serializers.UUIDField(read_only=True)
    type = serializers.CharField(read_only=True)
    queue = serializers.CharField(read_only=True)
    idempotency_key = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


class AuditEntrySerializer(serializers.Serializer[Any]):
    """One operator action: who, when, through which door, what it touched."""

    id = serializers.IntegerField(read_only=True)
    at = serializers.DateTimeField(read_only=True)
    action = serializers.CharField(read_only=True)
    door = serializers.CharField(read_only=True, help_text="admin, rest, cli or python.")
    actor = serializers.CharField(
        read_only=True,
        help_text="The username; token:<username> for a DRF token; os:<login> for the CLI.",
    )
    address = serializers.CharField(read_only=True, allow_null=True)
    job_id = serializers.UUIDField(read_only=True, allow_null=True)
    queue = serializers.CharField(read_only=True, allow_null=True)
    details = ObjectField(read_only=True)


# --- events, retry from a step --------------------------------------------------

EVENT_KEY_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": EVENT_KEY_MAX_LENGTH,
    "pattern": EVENT_KEY_PATTERN,
}


class StrictBody(serializers.Serializer[None]):
    """A request body of these fields only: another key is a 400 naming it."""

    #: What a body that is not a JSON object gets (as ``guards.check_empty_body``'s).
    not_an_object = "must be a JSON object."

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if data is None:  # DRF's own null check would come first, worded otherwise
            raise serializers.ValidationError({"body": [self.not_an_object]})
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"body": [self.not_an_object]})
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["is not a field of this request."] for name in unknown}
                )
        return super().to_internal_value(data)


class EmitSerializer(StrictBody):
    """``POST /api/events``' body: the key, and any JSON payload."""

    key = StrictCharField(
        schema=EVENT_KEY_SCHEMA,
        help_text=(
            "The event's key: letters, digits, _ - . and :, starting with a letter, a digit "
            f"or _, at most {EVENT_KEY_MAX_LENGTH} characters."
        ),
    )
    payload = AnyJSONField(
        required=False,
        allow_null=True,
        help_text=(
            "Any JSON value (absent: null), returned to the waiting handlers. No NUL "
            "character in its strings (PostgreSQL's jsonb cannot store one)."
        ),
    )


class EventSerializer(serializers.Serializer[Any]):
    """An event, as stored: the first emit's payload."""

    key = serializers.CharField(read_only=True)
    payload = AnyJSONField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True, help_text="When it was emitted.")
    created = serializers.BooleanField(
        read_only=True, help_text="This request created it (false: emitted before, same payload)."
    )


class EventConflictSerializer(ErrorSerializer):
    key = serializers.CharField(help_text="The event's key, emitted before with another payload.")


class RequeueSerializer(StrictBody):
    """``POST /api/jobs/{id}/requeue``' body: ``{}``, or the step to retry from."""

    not_an_object = "must be a JSON object: {} when there is nothing to say."

    from_step = StrictCharField(
        required=False,
        schema={"type": "string", "minLength": 1, "maxLength": STEP_NAME_MAX_LENGTH},
        help_text=(
            "Retry from this step (one of the job's step names, as GET /api/jobs/{id} "
            "lists them): its record and every later one are forgotten, so the next run "
            "calls those steps again and replays the earlier ones. Absent: every record is "
            "kept. A name the job has no record of: 400."
        ),
    )
