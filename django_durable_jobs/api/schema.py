"""What the OpenAPI schema says beyond what drf-spectacular reads from the fields.

The API's rules, as JSON Schema: the patterns and bounds of names, keys and
numbers (written from ``names``, ``constants`` and ``durations``, the rules
``enqueue()`` applies), the request body that takes no other field and not
both ``delay_seconds`` and ``run_at``, and OpenAPI links from the calls
that answer a job or a queue to the calls that take its id or name, so
that a client (or schemathesis' stateful tests) can follow them.

The schema is checked against the API by ``tests/fuzz/test_api_schemathesis.py``:
a value the schema allows must be accepted, one it forbids refused.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema

from .. import rest_policy
from ..conf import jobs_settings
from ..constants import (
    IDEMPOTENCY_KEY_MAX_LENGTH,
    QUEUE_MAX_LENGTH,
    QUEUE_NAME_PATTERN,
    TYPE_MAX_LENGTH,
)

#: The characters Python's ``str.strip()`` and ``str.isspace()`` take for
#: whitespace, as an ECMA-262 character class body (JSON Schema's regex
#: dialect): not ``\s``, whose set differs in ECMA-262, Rust and Python
#: (U+001C..U+001F, U+0085, U+FEFF). ``tests/unit/test_api_schema_rules.py``
#: checks it against Python's own set.
WHITESPACE_CLASS = "".join(
    (
        "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680",
        "\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000",
    )
)
#: A key (idempotency, concurrency): at least one character that is not
#: whitespace, and no NUL (names.py: "must not be empty", "NUL").
KEY_PATTERN = f"^[^\\x00]*[^\\x00{WHITESPACE_CLASS}][^\\x00]*$"
#: A job type: a key that neither starts nor ends with whitespace.
TYPE_PATTERN = f"^[^\\x00{WHITESPACE_CLASS}](?:[^\\x00]*[^\\x00{WHITESPACE_CLASS}])?$"
#: An ISO 8601 time whose date is neither 0001-01-01 nor 9999-12-31: its
#: UTC time may not exist in Python (0001-01-01T00:00+05:00 is in year 0).
DATE_TIME_IN_RANGE = "^(?!0001-01-01|9999-12-31)"


def text(pattern: str, max_length: int, min_length: int = 1) -> dict[str, Any]:
    return {"type": "string", "minLength": min_length, "maxLength": max_length, "pattern": pattern}


TYPE_SCHEMA = text(TYPE_PATTERN, TYPE_MAX_LENGTH)
QUEUE_SCHEMA = text(QUEUE_NAME_PATTERN, QUEUE_MAX_LENGTH)
KEY_SCHEMA = text(KEY_PATTERN, IDEMPOTENCY_KEY_MAX_LENGTH)
AWARE_DATE_TIME_SCHEMA = {"type": "string", "format": "date-time", "pattern": DATE_TIME_IN_RANGE}


# drf-spectacular is untyped: its extension registry (__init_subclass__) and
# the serializer mapping the extension reuses have no annotations.
class EnqueueRequestExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """``POST /api/jobs``' body: no field but its own, and one start time at most."""

    target_class = "django_durable_jobs.api.serializers.EnqueueSerializer"

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_basic_serializer(  # type: ignore[no-untyped-call]
            self.target, direction
        )
        for field in schema["properties"].values():
            # drf-spectacular offers "" beside a patterned string that allows blanks;
            # these fields take blanks only to refuse them with enqueue()'s words.
            if field.get("oneOf", [None])[-1] == {"type": "string", "maxLength": 0}:
                field.update(field.pop("oneOf")[0])
        # A setting: read when the schema is made, not when the field is declared.
        schema["properties"]["timeout"]["maximum"] = float(jobs_settings.API_MAX_TIMEOUT_SECONDS)
        # What REST callers may ask for (rest_policy.py): the settings' ceilings and queues.
        schema["properties"]["priority"]["maximum"] = jobs_settings.API_MAX_PRIORITY
        schema["properties"]["max_attempts"]["maximum"] = jobs_settings.API_MAX_ATTEMPTS
        schema["properties"]["queue"]["enum"] = sorted(rest_policy.allowed_queues())
        return {
            **schema,
            "additionalProperties": False,
            "not": {"required": ["delay_seconds", "run_at"]},
        }


def _strict_body(auto_schema: AutoSchema, serializer: Any, direction: Any) -> dict[str, Any]:
    schema: dict[str, Any] = auto_schema._map_basic_serializer(  # type: ignore[no-untyped-call]
        serializer, direction
    )
    for field in schema["properties"].values():
        # As EnqueueRequestExtension: no "" beside a patterned string.
        if field.get("oneOf", [None])[-1] == {"type": "string", "maxLength": 0}:
            field.update(field.pop("oneOf")[0])
    return {**schema, "additionalProperties": False}


class EmitRequestExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """``POST /api/events``' body: ``key`` and ``payload``, nothing else."""

    target_class = "django_durable_jobs.api.serializers.EmitSerializer"

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        return _strict_body(auto_schema, self.target, direction)


class RequeueRequestExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """``POST /api/jobs/{id}/requeue``' body: ``{}`` or ``{"from_step": name}``."""

    target_class = "django_durable_jobs.api.serializers.RequeueSerializer"

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        return _strict_body(auto_schema, self.target, direction)


class EmptyBodyExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """The body of cancel and resume: ``{}``, no key allowed."""

    target_class = "django_durable_jobs.api.guards.EmptyBodySerializer"

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        return {
            "type": "object",
            "additionalProperties": False,
            "maxProperties": 0,
            "description": "No options: send {} (an empty body with this content type counts "
            "as {}).",
        }


#: The fields a list row leaves out unless ``?include=`` names them: their size is
#: the client's data (a payload up to API_MAX_BODY_BYTES) or tracebacks, so a page
#: of them could weigh a gigabyte. The detail always has them.
INCLUDABLE_FIELDS: tuple[str, ...] = ("payload", "result", "last_error", "errors")


class JobSummaryExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """A listed job: the fields ``?include=`` adds are optional (absent unless asked)."""

    target_class = "django_durable_jobs.api.serializers.JobSummarySerializer"

    def map_serializer(self, auto_schema: AutoSchema, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_basic_serializer(  # type: ignore[no-untyped-call]
            self.target, direction
        )
        schema["required"] = [f for f in schema.get("required", []) if f not in INCLUDABLE_FIELDS]
        for name in INCLUDABLE_FIELDS:
            field = schema["properties"][name]
            field["description"] = (
                f"{field.get('description', '')} Only with ?include={name}.".strip()
            )
        return schema


def _link(operation_id: str, parameter: str, expression: str, description: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "parameters": {parameter: expression},
        "description": description,
    }


def _job_links(expression: str) -> dict[str, Any]:
    """Links from a response holding a job (``expression``: where its id is)."""
    return {
        "RetrieveJob": _link("jobs_retrieve", "id", expression, "The job, as it is now."),
        "CancelJob": _link("jobs_cancel_create", "id", expression, "Cancel the job."),
        "RequeueJob": _link("jobs_requeue_create", "id", expression, "Requeue the job."),
    }


def _queue_links(expression: str) -> dict[str, Any]:
    return {
        "PauseQueue": _link("queues_pause_create", "name", expression, "Pause the queue."),
        "ResumeQueue": _link("queues_resume_create", "name", expression, "Resume the queue."),
    }


JOB = _job_links("$response.body#/id")
#: ``{operationId: {status code: links}}``.
LINKS: dict[str, dict[str, dict[str, Any]]] = {
    "jobs_create": {"201": JOB, "200": JOB},
    "jobs_list": {"200": _job_links("$response.body#/results/0/id")},
    "jobs_retrieve": {"200": JOB},
    "jobs_cancel_create": {"200": JOB, "202": JOB},
    "jobs_requeue_create": {"200": JOB},
    "queues_list": {"200": _queue_links("$response.body#/0/name")},
    "queues_pause_create": {"200": _queue_links("$response.body#/name")},
    "queues_resume_create": {"200": _queue_links("$response.body#/name")},
}


#: The 503 every operation may answer (``errors.DatabaseUnavailable``).
UNAVAILABLE_DESCRIPTION = (
    "The database is unavailable (unreachable, out of connection slots, restarting): "
    "error database_unavailable. Retry after Retry-After seconds (an enqueue with the "
    "same idempotency key)."
)
RETRY_AFTER = {
    "schema": {"type": "integer"},
    "description": "Seconds to wait before asking again.",
}
ERROR = {"$ref": "#/components/schemas/Error"}
#: Methods whose request must carry a JSON body (guards.py, parsers.check_json_content_type).
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
NOT_JSON = {
    "content": {"application/json": {"schema": ERROR}},
    "description": (
        "The request's Content-Type is not application/json (a form, text/plain, none): "
        "error unsupported_media_type. Every call that changes something takes a JSON body, "
        "{} when there is nothing to say."
    ),
}
BAD_BODY = {
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ValidationError"}}},
    "description": "The body is not JSON, or not the object this call takes.",
}
THROTTLED = {
    "headers": {"Retry-After": RETRY_AFTER},
    "content": {"application/json": {"schema": ERROR}},
    "description": (
        "Throttled; retry after Retry-After seconds. Error too_many_failed_authentications: "
        "this address failed to authenticate DURABLE_JOBS['API_FAILED_AUTH_RATE'] times in "
        "the window, and no credentials are checked until it ends. Error throttled: a DRF "
        "throttle the project switched on (DURABLE_JOBS['API_THROTTLE_CLASSES'])."
    ),
}


def _declare_unavailable(responses: dict[str, Any]) -> None:
    """Add the database's 503 to an operation's responses, beside a 503 of its own."""
    own = responses.get("503")
    if own is None:
        responses["503"] = {
            "headers": {"Retry-After": RETRY_AFTER},
            "content": {"application/json": {"schema": ERROR}},
            "description": UNAVAILABLE_DESCRIPTION,
        }
        return
    media = own.setdefault("content", {}).setdefault("application/json", {})
    if "schema" in media and media["schema"] != ERROR:
        # anyOf, not oneOf: the plain error body is a subset of the other.
        media["schema"] = {"anyOf": [media["schema"], ERROR]}
    own["description"] = f"{own.get('description', '')} Or: {UNAVAILABLE_DESCRIPTION}".strip()


#: ``POST /api/jobs``' answer to a client that may enqueue but not read jobs
#: (``serializers.EnqueueReceiptSerializer``); readers get the whole job.
RECEIPT = {
    "type": "object",
    "description": "For a client without view_job: the job's id and what the client sent.",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "type": {"type": "string"},
        "queue": {"type": "string"},
        "idempotency_key": {"type": "string"},
        "created_at": {"type": "string", "format": "date-time"},
    },
    "required": ["id", "type", "queue", "idempotency_key", "created_at"],
}


def _allow_receipt(responses: dict[str, Any]) -> None:
    for code in ("200", "201"):
        media = responses.get(code, {}).get("content", {}).get("application/json")
        if media is not None and "schema" in media:
            media["schema"] = {"anyOf": [media["schema"], RECEIPT]}


class JobsAutoSchema(AutoSchema):
    """drf-spectacular's ``AutoSchema``, with the API's links on its responses, and
    the 503 that any operation answers when the database cannot serve it."""

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation: dict[str, Any] | None = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        for code, links in LINKS.get(operation["operationId"], {}).items():
            response = operation["responses"].get(code)
            if response is not None:
                response["links"] = links
        responses = operation["responses"]
        if operation["operationId"] == "jobs_create":
            _allow_receipt(responses)
        if operation["operationId"] != "health_retrieve":
            # /api/health/ answers its own 503 (a Health body) when the database is down,
            # and authenticates nobody: no 429 either.
            _declare_unavailable(responses)
            responses.setdefault("429", THROTTLED)
        if self.method in UNSAFE_METHODS:
            # The body is required: without one (and its Content-Type) the answer is 415.
            body = operation.get("requestBody")
            if body is not None:
                body["required"] = True
            responses.setdefault("400", BAD_BODY)
            responses.setdefault("415", NOT_JSON)
        return operation
