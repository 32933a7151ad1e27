"""The API's views: parse the request, call ``enqueue()`` or ``operations``, answer.

No queue rule lives here. Domain errors propagate and ``errors.exception_handler``
turns them into 400/404/409 answers.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.db import DatabaseError
from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status as http
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.viewsets import GenericViewSet

from .. import audit, db, events, operations, pausing, step_records
from ..authorization import Actor, user_can_read
from ..conf import API_MAX_PAGE_SIZE
from ..enqueueing import enqueue
from ..exceptions import IdempotencyConflict, InvalidJob
from ..models import FINISHED_STATUSES, AuditAction, AuditEntry, Job, JobStatus
from ..names import validate_queue, validate_type
from ..schedules.overview import schedule_overview
from . import long_poll
from . import serializers as s
from .errors import IdempotencyConflictError, exception_handler
from .guards import EmptyBodySerializer, RequestGuardsMixin
from .pagination import AuditCursorPagination, JobCursorPagination
from .permissions import permission_classes
from .schema import INCLUDABLE_FIELDS, KEY_SCHEMA, QUEUE_SCHEMA, TYPE_SCHEMA, JobsAutoSchema
from .stats import health_stats, job_stats, queue_overview

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rest_framework.renderers import BaseRenderer
    from rest_framework.schemas.inspectors import ViewInspector

logger = logging.getLogger(__name__)

#: A queryset's row type (models, dicts, tuples), kept by filter_queryset.
_Row = TypeVar("_Row")

ERROR = s.ErrorSerializer
AUTH_ERRORS = {
    401: OpenApiResponse(ERROR, description="Not authenticated."),
    403: OpenApiResponse(ERROR, description="Not allowed (or not authenticated, CSRF)."),
}
NOT_FOUND = {404: OpenApiResponse(ERROR, description="No job with this id.")}
STATE_CONFLICT = {
    409: OpenApiResponse(
        s.InvalidStateSerializer, description="The job is not in a state the call applies to."
    )
}
JOB_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Job id.")
#: ``?type=`` and ``?queue=`` take the names enqueue() takes: another cannot match a job.
NAME_FILTERS = {"type": validate_type, "queue": validate_queue}


_FIELD = "|".join(INCLUDABLE_FIELDS)
#: ``?include=``: field names, comma-separated (at least one).
INCLUDE_PATTERN = f"^({_FIELD})(,({_FIELD}))*$"


def _included(request: Request) -> tuple[str, ...]:
    """``?include=``'s field names, in ``INCLUDABLE_FIELDS``' order; another name is a 400."""
    names: set[str] = set()
    for value in request.query_params.getlist("include"):
        given = [name.strip() for name in value.split(",")]
        if "" in given:
            # The schema's items are field names: an empty one (`include=`, `a,,b`)
            # is a client's bug, said as one rather than read as "nothing".
            raise ValidationError(
                {"include": [f"an empty field name in {value!r}: name fields, comma-separated."]}
            )
        names.update(given)
    unknown = sorted(names - set(INCLUDABLE_FIELDS))
    if unknown:
        raise ValidationError(
            {
                "include": [
                    f"unknown field {', '.join(map(repr, unknown))}: "
                    f"may name {', '.join(INCLUDABLE_FIELDS)}."
                ]
            }
        )
    return tuple(name for name in INCLUDABLE_FIELDS if name in names)


class JSONErrorsMixin:
    """JSON only, errors in the ``{"error", "detail"}`` shape, whatever the project's defaults."""

    # Typed as APIView types them, so the mixin and the view agree.
    renderer_classes: Sequence[type[BaseRenderer]] = (JSONRenderer,)
    schema: ViewInspector | None = JobsAutoSchema()

    def get_exception_handler(self) -> Any:
        return exception_handler


def _actor(request: Request) -> Actor:
    return Actor.from_request(request, "rest")


class JobViewSet(RequestGuardsMixin, JSONErrorsMixin, GenericViewSet[Job]):
    """Enqueue, list, inspect, requeue and cancel jobs."""

    permission_scope = "jobs"
    queryset = Job.objects.all()
    serializer_class = s.JobSummarySerializer
    pagination_class = JobCursorPagination
    empty_body_actions = frozenset({"cancel"})
    # Any segment reaches the view, so a malformed id is a JSON 404, not Django's page.
    lookup_value_regex = "[^/]+"

    def get_permissions(self) -> list[BasePermission]:
        return [cls() for cls in permission_classes()]

    # -- helpers -------------------------------------------------------------

    def _job_id(self) -> uuid.UUID:
        try:
            return uuid.UUID(str(self.kwargs["pk"]))
        except ValueError:
            raise NotFound("No job with this id.") from None

    def _answer(
        self, job: Job, code: int = http.HTTP_200_OK, *, new: bool = False, **kwargs: Any
    ) -> Response:
        # A job just enqueued has no steps yet: its answer reads none.
        context = {"steps": step_records.Steps([], False)} if new else {}
        return Response(s.JobDetailSerializer(job, context=context).data, status=code, **kwargs)

    def filter_queryset(self, queryset: QuerySet[Job, _Row]) -> QuerySet[Job, _Row]:
        """``?status=``, ``?type=``, ``?queue=``: exact matches (``status`` uses its index).

        A type or queue name that ``enqueue()`` would refuse is a 400: no job
        has it, and some (a NUL) PostgreSQL cannot even compare.
        """
        params = self.request.query_params
        errors: dict[str, list[str]] = {}
        status = params.get("status")
        if status is not None:
            if status in JobStatus.values:
                queryset = queryset.filter(status=status)
            else:
                errors["status"] = [f"must be one of {', '.join(JobStatus.values)}."]
        for name, validate in NAME_FILTERS.items():
            value = params.get(name)
            if value is not None:
                try:
                    queryset = queryset.filter(**{name: validate(value)})
                except InvalidJob as exc:
                    errors[name] = [exc.message]
        if errors:
            raise ValidationError(errors)
        return queryset

    # -- actions -------------------------------------------------------------

    @extend_schema(
        operation_id="jobs_create",
        summary="Enqueue a job (idempotent)",
        request=s.EnqueueSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                KEY_SCHEMA,
                OpenApiParameter.HEADER,
                description=(
                    "The idempotency key, instead of the body's idempotency_key (the same, if "
                    "both are sent). One of the two is required."
                ),
            )
        ],
        responses={
            201: OpenApiResponse(s.JobDetailSerializer, description="A new job."),
            200: OpenApiResponse(
                s.JobDetailSerializer, description="Replay: the key's existing job."
            ),
            400: OpenApiResponse(s.ValidationErrorSerializer, description="Invalid input."),
            **AUTH_ERRORS,
            409: OpenApiResponse(
                s.IdempotencyConflictSerializer,
                description="The key belongs to a job with other parameters.",
            ),
            411: OpenApiResponse(ERROR, description="Chunked body without Content-Length."),
            413: OpenApiResponse(ERROR, description="Body over API_MAX_BODY_BYTES."),
            415: OpenApiResponse(ERROR, description="Body is not application/json."),
        },
    )
    def create(self, request: Request) -> Response:
        serializer = s.EnqueueSerializer(
            data=request.data, context={"header_key": request.headers.get("Idempotency-Key")}
        )
        serializer.is_valid(raise_exception=True)
        reader = user_can_read(request.user)
        try:
            result = enqueue(**serializer.enqueue_arguments())
        except IdempotencyConflict:
            if reader:
                raise
            # Not the job's id, nor how its parameters differ: the job may be another
            # client's, and this one may not read jobs.
            raise IdempotencyConflictError(
                "This idempotency key belongs to a job with other parameters."
            ) from None
        job = result.job
        location = reverse("durable_jobs_api:job-detail", kwargs={"pk": job.pk})
        code = http.HTTP_201_CREATED if result.created else http.HTTP_200_OK
        if not reader:
            data = s.EnqueueReceiptSerializer(job).data
            return Response(data, status=code, headers={"Location": location})
        return self._answer(job, code, new=result.created, headers={"Location": location})

    @extend_schema(
        summary="List jobs, newest first",
        description=(
            "Summaries: a row has no payload, result, last_error or errors unless "
            "`?include=` names them (the job's own page, GET /api/jobs/{id}, always has them)."
        ),
        parameters=[
            OpenApiParameter("status", str, enum=JobStatus.values, description="Only this status."),
            OpenApiParameter("type", TYPE_SCHEMA, description="Only this job type."),
            OpenApiParameter("queue", QUEUE_SCHEMA, description="Only this queue."),
            OpenApiParameter(
                "include",
                # A comma-separated list of names, as a string with a pattern: as an
                # array, the empty list and a list of one empty name are both
                # `include=` (the server refuses it, 400).
                {"type": "string", "pattern": INCLUDE_PATTERN},
                description=(
                    "Fields the rows leave out unless named here, comma-separated: "
                    f"{', '.join(INCLUDABLE_FIELDS)}. With any of them, a page also ends "
                    "before the row that would take its rows over API_MAX_PAGE_BYTES "
                    "(one row at least): it may hold fewer than page_size rows while "
                    "`next` is not null."
                ),
            ),
            OpenApiParameter(
                "page_size",
                {"type": "integer", "minimum": 1, "maximum": API_MAX_PAGE_SIZE},
                description="Jobs per page (default API_PAGE_SIZE).",
            ),
        ],
        responses={
            200: s.JobSummarySerializer(many=True),
            400: OpenApiResponse(s.ValidationErrorSerializer, description="Bad filter or cursor."),
            **AUTH_ERRORS,
        },
    )
    def list(self, request: Request) -> Response:
        include = _included(request)
        # Never read from the database what the rows will not carry.
        jobs = self.filter_queryset(self.get_queryset()).defer(*INCLUDABLE_FIELDS)
        context = {**self.get_serializer_context(), "include": include}

        def serialize(page: list[Job]) -> list[dict[str, Any]]:
            return list(s.JobSummarySerializer(page, many=True, context=context).data)

        if include:
            paginator = cast("JobCursorPagination", self.paginator)
            rows = paginator.paginate_within_budget(jobs, request, self, include, serialize)
        else:
            rows = serialize(self.paginate_queryset(jobs) or [])
        return self.get_paginated_response(rows)

    @extend_schema(
        summary="One job, with its result and failure history",
        description=(
            "With `?wait=S` (seconds, > 0 and at most 30), a long poll: the answer comes as "
            "soon as the job is finished (completed, dead or cancelled), or after S seconds "
            "with the job as it is then (still 200: read its status). A waiting request holds "
            "a server thread; at most API_MAX_WAITING_REQUESTS wait at once per process, "
            "API_MAX_WAITING_REQUESTS_PER_USER of them for one user, and one more that would "
            "have to wait is answered 503 with Retry-After. A client that hangs up frees its "
            "slot within about a second where the WSGI server shows the connection "
            "(runserver, gunicorn), else when its wait ends."
        ),
        parameters=[
            JOB_ID,
            OpenApiParameter(
                "wait",
                {
                    "type": "number",
                    "minimum": 0,
                    "exclusiveMinimum": True,
                    "maximum": long_poll.MAX_WAIT_SECONDS,
                },
                description=(
                    "Seconds to wait for the job to finish, > 0 and at most "
                    f"{long_poll.MAX_WAIT_SECONDS:g}; absent: answer at once."
                ),
            ),
            OpenApiParameter(
                "Retry-After",
                int,
                OpenApiParameter.HEADER,
                response=[503],
                description="Seconds to wait before asking again.",
            ),
        ],
        responses={
            200: s.JobDetailSerializer,
            400: OpenApiResponse(s.ValidationErrorSerializer, description="A bad `wait`."),
            **AUTH_ERRORS,
            **NOT_FOUND,
            503: OpenApiResponse(
                s.TooManyWaitingSerializer,
                description=(
                    "`?wait=` on an unfinished job while API_MAX_WAITING_REQUESTS requests "
                    "already wait in this process, or API_MAX_WAITING_REQUESTS_PER_USER of "
                    "this user's; Retry-After says when to try again."
                ),
            ),
        },
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        job_id = self._job_id()
        seconds = long_poll.wait_seconds(request.query_params)
        job = Job.objects.get(pk=job_id)
        if seconds is not None and job.status not in FINISHED_STATUSES:
            job = long_poll.wait_for(job_id, seconds, request)
        return self._answer(job)

    @extend_schema(
        summary="Requeue a dead or cancelled job, or retry it from a step",
        description=(
            "Back to pending, attempts 0, runnable now; the error history is kept, and so "
            "are its step records (the next run replays them). With `from_step`, a retry "
            "from that step: its record and every later one are forgotten in the same "
            "transaction (audit action retry_from_step). Both need durable_jobs.requeue_job."
        ),
        request=s.RequeueSerializer,
        parameters=[JOB_ID],
        responses={
            200: s.JobDetailSerializer,
            400: OpenApiResponse(
                s.ValidationErrorSerializer,
                description="A bad body, or a from_step the job has no record of.",
            ),
            **AUTH_ERRORS,
            **NOT_FOUND,
            **STATE_CONFLICT,
        },
    )
    @action(detail=True, methods=["post"])
    def requeue(self, request: Request, pk: str) -> Response:
        body = s.RequeueSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job = operations.requeue(
            self._job_id(),
            from_step=body.validated_data.get("from_step"),
            actor=_actor(request),
        )
        return self._answer(job)

    @extend_schema(
        summary="Cancel a pending or waiting job, or ask a running one to stop",
        description=(
            "A pending or waiting job is cancelled at once (200), and the waiting jobs that "
            "depend on it with it (those enqueued with on_parent_failure run count it as done). "
            "A running job gets "
            "cancel_requested_at and stays running (202): its handler's ctx.cancelled "
            "turns true within about a second and the attempt ends cancelled, never "
            "retried, when the handler stops (or after TIMEOUT_GRACE_SECONDS if it "
            "never checks). Asking again is harmless (202 again). A finished job: 409."
        ),
        request=EmptyBodySerializer,
        parameters=[JOB_ID],
        responses={
            200: OpenApiResponse(
                s.JobDetailSerializer, description="The pending or waiting job, cancelled."
            ),
            202: OpenApiResponse(
                s.JobDetailSerializer,
                description="The running job, still running, its cancel requested.",
            ),
            **AUTH_ERRORS,
            **NOT_FOUND,
            **STATE_CONFLICT,
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        job = operations.cancel(self._job_id(), actor=_actor(request))
        # Still running: its worker has been asked to stop it (accepted, not done).
        requested = job.status == JobStatus.RUNNING and job.cancel_requested_at is not None
        return self._answer(job, http.HTTP_202_ACCEPTED if requested else http.HTTP_200_OK)

    @extend_schema(
        summary="Counts by queue and status, and queue lag",
        description=(
            "Bounded work, whatever the history: each queue's pending, waiting and dead jobs "
            "are counted exactly up to 1,000, running jobs in full, completed and cancelled "
            "jobs exactly while the table holds at most 10,000 of that status. Past those, "
            "the number is PostgreSQL's planner estimate (from the table's statistics, "
            "reading no rows), and its status is listed in `estimated` (the queue's and the "
            "answer's). Queues: those declared in DURABLE_JOBS['QUEUES'], holding pending, "
            "running, waiting or dead jobs, paused, with outcomes in the last hour, or (while "
            "their history is counted exactly) with completed or cancelled jobs."
        ),
        responses={200: s.StatsSerializer, **AUTH_ERRORS},
    )
    @action(detail=False, methods=["get"])
    def stats(self, request: Request) -> Response:
        return Response(s.StatsSerializer(job_stats()).data)


# Any: no model; the schedules are declared in code and settings.
class ScheduleViewSet(RequestGuardsMixin, JSONErrorsMixin, GenericViewSet[Any]):
    """The declared schedules, with their last and next tick (read-only).

    The same list as ``manage.py jobs schedules --json``; the permission is
    that of listing jobs (``list`` in ``ACTION_PERMISSIONS``). Schedules are
    declared in code and settings, so there are few: no pagination.
    """

    serializer_class = s.ScheduleSerializer
    permission_scope = "schedules"

    def get_permissions(self) -> list[BasePermission]:
        return [cls() for cls in permission_classes()]

    @extend_schema(
        operation_id="schedules_list",
        summary="Declared schedules, by name, with their last and next tick",
        description=(
            "Every valid schedule declared with @job(schedule=...) or in "
            "DURABLE_JOBS['SCHEDULES'], by name: its declaration, the last tick a worker "
            "enqueued, that tick's job and the job's status ('pruned' once retention deleted "
            "it), and the next tick. The same list as `manage.py jobs schedules --json`. "
            "Needs the permission to list jobs. Not paginated."
        ),
        responses={200: s.ScheduleSerializer(many=True), **AUTH_ERRORS},
    )
    def list(self, request: Request) -> Response:
        return Response(s.ScheduleSerializer(schedule_overview(), many=True).data)


QUEUE_NAME = OpenApiParameter(
    "name", QUEUE_SCHEMA, OpenApiParameter.PATH, description="Queue name (letters, digits, _ - .)."
)
BAD_PAUSE = {
    400: OpenApiResponse(
        s.ValidationErrorSerializer, description="A bad queue name, or a bad or past until."
    )
}


# Any: no model behind a queue's JSON (stats.queue_overview builds it).
class QueueViewSet(RequestGuardsMixin, JSONErrorsMixin, GenericViewSet[Any]):
    """The queues, with counts, limits and paused state; pause and resume one.

    Permissions as the job actions': listing is ``list``'s, pausing and
    resuming need what requeue and cancel need (``change_job``).
    """

    serializer_class = s.QueueSerializer
    permission_scope = "queues"
    empty_body_actions = frozenset({"resume"})
    lookup_field = "name"
    # Any segment reaches the view, so a bad name is a JSON 400, not Django's 404 page.
    lookup_value_regex = "[^/]+"

    def get_permissions(self) -> list[BasePermission]:
        return [cls() for cls in permission_classes()]

    def _answer(self, name: str) -> Response:
        (queue,) = queue_overview(only=name)
        return Response(s.QueueSerializer(queue).data)

    @extend_schema(
        operation_id="queues_list",
        summary="Queues, by name, with counts, limits and paused state",
        description=(
            "Every queue declared in DURABLE_JOBS['QUEUES'], holding pending, running or dead "
            "jobs, or paused: its counts (pending, running, waiting, dead), its limits "
            "(null: none), and whether it is paused, until when. Needs the permission to list "
            "jobs. Not paginated."
        ),
        responses={200: s.QueueSerializer(many=True), **AUTH_ERRORS},
    )
    def list(self, request: Request) -> Response:
        return Response(s.QueueSerializer(queue_overview(), many=True).data)

    @extend_schema(
        summary="Pause a queue, until resumed or until a time",
        description=(
            "No worker claims the queue's jobs until it is resumed or `until` passes (the "
            "pause then lifts by itself); running jobs finish, new jobs are still accepted. "
            "Workers see the pause within about a second. Pausing a paused queue replaces "
            "its end time."
        ),
        request=s.PauseSerializer,
        parameters=[QUEUE_NAME],
        responses={200: s.QueueSerializer, **BAD_PAUSE, **AUTH_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, name: str) -> Response:
        body = s.PauseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        state = pausing.pause_queue(name, body.validated_data.get("until"), actor=_actor(request))
        return self._answer(state.name)

    @extend_schema(
        summary="Resume a paused queue",
        description="Workers claim its jobs again at once; resuming a queue not paused is no "
        "error.",
        request=EmptyBodySerializer,
        parameters=[QUEUE_NAME],
        responses={
            200: s.QueueSerializer,
            400: OpenApiResponse(s.ValidationErrorSerializer, description="A bad queue name."),
            **AUTH_ERRORS,
        },
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, name: str) -> Response:
        return self._answer(pausing.resume_queue(name, actor=_actor(request)).name)


AUDIT_FILTERS = [
    OpenApiParameter("job", OpenApiTypes.UUID, description="Only entries of this job."),
    OpenApiParameter("queue", QUEUE_SCHEMA, description="Only entries of this queue."),
    OpenApiParameter(
        "action",
        str,
        enum=[value for value, _label in AuditAction.choices],
        description="Only this action.",
    ),
    OpenApiParameter(
        "actor",
        # No NUL: PostgreSQL's text cannot hold one, and the view answers 400 for it.
        {"type": "string", "maxLength": 200, "pattern": "^[^\\u0000]*$"},
        description="Only this actor, exactly.",
    ),
    # The pagination's own parameter, with the bounds it enforces (400 outside them).
    OpenApiParameter(
        "page_size",
        {"type": "integer", "minimum": 1, "maximum": API_MAX_PAGE_SIZE},
        description="Entries per page (default API_PAGE_SIZE).",
    ),
]


class AuditViewSet(RequestGuardsMixin, JSONErrorsMixin, GenericViewSet[AuditEntry]):
    """The audit trail: every operator action, from every door, newest first (read-only)."""

    permission_scope = "audit"
    serializer_class = s.AuditEntrySerializer
    pagination_class = AuditCursorPagination

    def get_permissions(self) -> list[BasePermission]:
        return [cls() for cls in permission_classes()]

    def get_queryset(self) -> QuerySet[AuditEntry]:
        params = self.request.query_params
        errors: dict[str, list[str]] = {}
        job = None
        if params.get("job") is not None:
            try:
                job = uuid.UUID(params["job"])
            except ValueError:
                errors["job"] = ["must be a job id (a UUID)."]
        queue = params.get("queue")
        if queue is not None:
            try:
                validate_queue(queue)
            except InvalidJob as exc:
                errors["queue"] = [exc.message]
        action_name = params.get("action")
        if action_name is not None and action_name not in AuditAction.values:
            errors["action"] = [f"must be one of {', '.join(AuditAction.values)}."]
        actor = params.get("actor")
        if actor is not None and (len(actor) > 200 or "\x00" in actor):
            errors["actor"] = ["must be at most 200 characters, without NUL."]
        if errors:
            raise ValidationError(errors)
        return audit.entries(
            using=db.database_alias(), job=job, queue=queue, action=action_name, actor=actor
        )

    @extend_schema(
        operation_id="audit_list",
        summary="The audit trail: who requeued, cancelled, ran now, paused, resumed, bulk ran",
        description=(
            "Every operator action from the admin, this API and `manage.py jobs`, newest "
            "first: who (the username, token:<username>, or os:<login> for the CLI), when, "
            "through which door, what it touched (a job, a queue; a bulk run's filter and "
            "count in details). Needs durable_jobs.view_auditentry."
        ),
        parameters=AUDIT_FILTERS,
        responses={
            200: s.AuditEntrySerializer(many=True),
            400: OpenApiResponse(s.ValidationErrorSerializer, description="A bad filter."),
            **AUTH_ERRORS,
        },
    )
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


# Any: the answer is an EmitResult's event, with the created flag.
class EventViewSet(RequestGuardsMixin, JSONErrorsMixin, GenericViewSet[Any]):
    """Emit events: ``POST /api/events``."""

    permission_scope = "events"
    serializer_class = s.EmitSerializer

    def get_permissions(self) -> list[BasePermission]:
        return [cls() for cls in permission_classes()]

    @extend_schema(
        operation_id="events_create",
        summary="Emit an event (the first emit wins)",
        description=(
            "Emits the event `key` and wakes the jobs waiting for it in "
            "ctx.wait_for_event(key): they become pending and runnable now. An event is "
            "emitted once and kept: 201 for the first emit, 200 when the key's event exists "
            "with the same payload (compared as JSON values; nothing is woken again), 409 "
            "when it exists with another payload (the first emit never changes). Needs "
            "durable_jobs.emit_event; a new event is recorded in the audit trail (action "
            "emit). Keys a client sends at random may meet an event emitted before them: "
            "409 then is an answer, not an error of the server."
        ),
        request=s.EmitSerializer,
        responses={
            201: OpenApiResponse(s.EventSerializer, description="A new event."),
            200: OpenApiResponse(
                s.EventSerializer, description="The key's event existed with this payload."
            ),
            400: OpenApiResponse(
                s.ValidationErrorSerializer, description="A bad key or payload, or body."
            ),
            **AUTH_ERRORS,
            409: OpenApiResponse(
                s.EventConflictSerializer,
                description="The key's event was emitted before with another payload.",
            ),
            413: OpenApiResponse(ERROR, description="Body over API_MAX_BODY_BYTES."),
            415: OpenApiResponse(ERROR, description="Body is not application/json."),
        },
    )
    def create(self, request: Request) -> Response:
        body = s.EmitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = events.emit_event(
            body.validated_data["key"],
            body.validated_data.get("payload"),
            actor=_actor(request),
        )
        event = result.event
        data = s.EventSerializer(
            {
                "key": event.key,
                "payload": event.payload,
                "created_at": event.created_at,
                "created": result.created,
            }
        ).data
        return Response(data, status=http.HTTP_201_CREATED if result.created else http.HTTP_200_OK)


class HealthView(JSONErrorsMixin, APIView):
    """Liveness of the web process and its database; no authentication.

    Also the number of live workers (heartbeat younger than their lease)
    and how long the oldest runnable job has waited, so that one probe
    shows a queue nobody serves.

    Answers no job data, so load balancers and probes need no credentials.
    """

    authentication_classes = ()
    permission_classes = (AllowAny,)

    @extend_schema(
        summary="Health: 200 when the database answers, 503 when not",
        auth=[],
        responses={
            200: s.HealthSerializer,
            503: OpenApiResponse(s.HealthSerializer, description="The database did not answer."),
        },
    )
    def get(self, request: Request) -> Response:
        alias = db.database_alias()
        try:
            stats = health_stats(alias)
        except DatabaseError:
            # The error text may name hosts and users: logged, not answered.
            logger.warning("Health check: database alias=%s unavailable", alias, exc_info=True)
            return Response(
                {
                    "status": "unavailable",
                    "database": "unavailable",
                    "error": "database_unavailable",
                    "detail": "The database did not answer.",
                },
                status=http.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return Response({"status": "ok", "database": "ok", **stats})
