"""Every API error as JSON ``{"error": code, "detail": ...}``.

The handler is set on the views themselves (``get_exception_handler``), so a
project does not have to change its global ``REST_FRAMEWORK`` settings for
the API to answer 401/403/404/405/409/413/415, and 503 when the database
cannot serve a request, in this shape. Domain errors
are translated here, so views can call ``enqueue()`` and ``operations``
without a ``try`` around each call.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db import InterfaceError, OperationalError
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ..exceptions import EventConflict, IdempotencyConflict, InvalidEvent, InvalidJob, InvalidPause
from ..operations import JobStateError, UnknownStep

logger = logging.getLogger("django_durable_jobs.api")

#: ``InvalidJob.field`` names that the REST body spells differently.
API_FIELD_NAMES = {"delay": "delay_seconds"}
#: ``InvalidJob.code`` -> the body's field and message, for the rules whose
#: Python wording names Python arguments (``delay``) the body spells otherwise.
API_ERRORS_BY_CODE = {
    InvalidJob.DELAY_AND_RUN_AT: (
        "delay_seconds",
        "give either delay_seconds or run_at, not both.",
    ),
}


class APIError(APIException):
    """An API error that adds fields of its own next to ``error`` and ``detail``."""

    def __init__(self, detail: Any = None, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.extra = extra or {}


class PayloadTooLarge(APIError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"
    default_detail = "The request body is too large."


class LengthRequired(APIError):
    status_code = status.HTTP_411_LENGTH_REQUIRED
    default_code = "length_required"
    default_detail = "Send the request body with a Content-Length header (not chunked)."


class TooManyWaiting(APIError):
    """``?wait=`` while the process already holds ``API_MAX_WAITING_REQUESTS`` waiting requests,
    or the user ``API_MAX_WAITING_REQUESTS_PER_USER`` of them.

    ``wait`` makes DRF's handler send ``Retry-After`` (seconds).
    """

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "too_many_waiting"
    wait = 1

    def __init__(self, limit: int, *, per_user: bool = False) -> None:
        held = (
            f"You already hold {limit} waiting requests on this server "
            "(API_MAX_WAITING_REQUESTS_PER_USER)"
            if per_user
            else f"This server already holds {limit} waiting requests (API_MAX_WAITING_REQUESTS)"
        )
        super().__init__(
            f"{held}; retry after {self.wait} s, or ask without ?wait=.",
            extra={"limit": limit},
        )


class DatabaseUnavailable(APIError):
    """The database could not serve the request: unreachable, out of connection slots,
    restarting, or the statement timed out or deadlocked (``OperationalError``).

    A 503 a client may retry (``Retry-After``), with an idempotency key for an
    enqueue, rather than Django's HTML 500 page. The driver's message is not
    repeated: it names hosts, ports and users.
    """

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "database_unavailable"
    default_detail = "The database is unavailable; retry later."
    wait = 1


class Conflict(APIError):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "The request conflicts with the job's current state."


class IdempotencyConflictError(Conflict):
    default_code = "idempotency_conflict"


class InvalidStateError(Conflict):
    default_code = "invalid_state"


class EventConflictError(Conflict):
    default_code = "event_conflict"


def invalid_job_error(exc: InvalidJob) -> ValidationError:
    """``InvalidJob`` as a 400 naming the field as the request body spells it.

    Chosen by the error's ``code`` and ``field``, never by its text.
    """
    if exc.code in API_ERRORS_BY_CODE:
        field, message = API_ERRORS_BY_CODE[exc.code]
    else:
        field, message = API_FIELD_NAMES.get(exc.field, exc.field), exc.message
    return ValidationError({field: [message]})


def translate(exc: Exception) -> Exception:
    """The DRF exception for one of the queue's own errors (others unchanged)."""
    if isinstance(exc, InvalidJob):
        return invalid_job_error(exc)
    if isinstance(exc, (InvalidPause, InvalidEvent)):
        return ValidationError({exc.field: [exc.message]})
    if isinstance(exc, UnknownStep):
        return ValidationError({"from_step": [str(exc)]})
    if isinstance(exc, EventConflict):
        # Not the stored payload: the emitter may not be one who reads events.
        return EventConflictError(str(exc), extra={"key": exc.key})
    if isinstance(exc, IdempotencyConflict):
        return IdempotencyConflictError(
            str(exc),
            extra={"job_id": str(exc.existing.pk), "differences": list(exc.differences)},
        )
    if isinstance(exc, JobStateError):
        return InvalidStateError(
            str(exc), extra={"job_status": exc.job.status, "allowed": list(exc.allowed)}
        )
    if isinstance(exc, ObjectDoesNotExist):
        return NotFound("No job with this id.")
    if isinstance(exc, (OperationalError, InterfaceError)):
        return DatabaseUnavailable()
    return exc


def error_code(exc: Exception) -> str:
    code = getattr(exc, "default_code", None)
    if isinstance(exc, ValidationError):
        return "invalid"
    return code if isinstance(code, str) else "error"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, then the body reshaped to ``{"error", "detail", ...}``.

    Returns ``None`` (a 500) only for exceptions that are neither DRF's,
    Django's 404/PermissionDenied nor the queue's: those are bugs.
    """
    translated = translate(exc)
    if isinstance(translated, DatabaseUnavailable):
        logger.warning("API request failed, database unavailable: %s: %s", type(exc).__name__, exc)
    exc = translated
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(exc, ValidationError):
        detail = data if isinstance(data, dict) else {"body": data}
    elif isinstance(data, dict) and set(data) == {"detail"}:
        detail = data["detail"]
    else:
        detail = data
    body: dict[str, Any] = {"error": error_code(exc), "detail": detail}
    body.update(getattr(exc, "extra", {}))
    response.data = body
    return response
