"""Jobs and dead jobs: the list, a job's page, and the actions on them."""

from __future__ import annotations

import dataclasses
import datetime
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import cached_property
from typing import Any, ClassVar
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Max, Min, Model, QuerySet
from django.db.models.functions import Left
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import formats, timezone
from django.utils.functional import Promise
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator, capfirst
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from .. import audit, bulk, db, operations, step_records
from ..authorization import Actor, user_can
from ..conf import jobs_settings
from ..exceptions import IdempotencyConflict
from ..models import DeadJob, Job, JobStatus
from ..names import OWN_TYPE_PREFIX
from ..operations import BulkResult
from ..registry import registry
from .audit import history_context
from .bases import (
    BasePaginator,
    JobModelAdmin,
)
from .bulk_actions import BULK_ACTIONS, BULK_PARAMETERS, _either
from .select_all import BoundedJobListMixin
from .timeline import attempt_timeline

#: Characters of ``last_error`` the list reads per row (not whole tracebacks).
ERROR_HEAD_CHARS = 200
#: Characters of the error's first line shown in the list.
ERROR_COLUMN_CHARS = 80
#: Parents or dependents linked on a job's page (a group's callback may have thousands).
MAX_JOB_LINKS = 100


class EstimatedCountPaginator(BasePaginator):
    """A paginator that never counts more than ``exact_count_limit`` rows.

    Django's changelist counts its filtered queryset on every page; on a
    table of millions that ``COUNT(*)`` takes seconds. This one counts with
    ``LIMIT exact_count_limit + 1`` (bounded work) and, when there are more
    rows, uses PostgreSQL's planner estimate (``EXPLAIN``, which reads table
    statistics rather than rows). Page links beyond the estimate may be
    empty; the page says that the total is an estimate.
    """

    exact_count_limit = bulk.EXACT_COUNT_LIMIT
    #: Whether ``count`` is the planner's estimate (the template says so).
    count_is_estimate = False
    #: The admin pages it with the changelist's queryset (``order_by``, ``explain``).
    object_list: QuerySet[Model]

    @cached_property
    def count(self) -> int:
        # Counts the ids only (values("pk")), not the list's computed columns.
        count, self.count_is_estimate = bulk.count_or_estimate(
            self.object_list, self.exact_count_limit
        )
        return count


class _ValueListFilter(admin.SimpleListFilter):
    """Filter on one column, listing values known without reading the table.

    Django's field filters run ``SELECT DISTINCT column`` over the whole
    table to list their choices: millions of rows read on every page view.
    These list the values the code knows (the handler registry, the
    settings) plus the selected value, so ``?type=old.handler`` works for a
    type no longer registered. The filtering reads an index in the list's
    order: each history partition's own index by type or queue, and the
    active partition's ``durable_jobs_created_idx``, the filter checked on
    each row (the active partition has no index by type or queue: migration
    0005).
    """

    field_name: str

    def known_values(self) -> Iterable[str]:
        """The values to offer besides the selected one; each subclass lists its own."""
        return ()

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = set(self.known_values())
        selected = self.value()
        if selected:
            values.add(selected)
        return [(value, value) for value in sorted(values)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(**{self.field_name: self.value()})
        return queryset


class TypeFilter(_ValueListFilter):
    title = _("type")
    parameter_name = field_name = "type"

    def known_values(self) -> Iterable[str]:
        # The package's own types (bulk runs) are plumbing, not the project's
        # jobs: not offered, though ``?type=durable_jobs.bulk_requeue`` still works.
        return (
            handler.name for handler in registry if not handler.name.startswith(OWN_TYPE_PREFIX)
        )


class QueueFilter(_ValueListFilter):
    title = _("queue")
    parameter_name = field_name = "queue"

    def known_values(self) -> Iterable[str]:
        yield jobs_settings.DEFAULT_QUEUE
        for handler in registry:
            if handler.queue:
                yield handler.queue


class JobChangeList(ChangeList):
    """The changelist, with light rows and a date hierarchy that reads no rows."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        # A page of 100 rows should not carry 100 payloads and tracebacks:
        # the list needs the first line of the last error only.
        queryset = super().get_queryset(request, exclude_parameters)
        # Annotated: the plugin types annotate() on a QuerySet[Any] as Any.
        light: QuerySet[Any] = queryset.defer("payload", "result", "errors", "last_error").annotate(
            last_error_head=Left("last_error", ERROR_HEAD_CHARS)
        )
        return light

    @cached_property
    def date_hierarchy_links(self) -> dict[str, Any]:
        """The context of ``admin/date_hierarchy.html``, from one min/max query.

        Django's own tag lists the years, months or days that hold rows with
        ``SELECT DISTINCT date_trunc(...)``, which reads every row of the
        period. This lists every period between the first and the last
        job instead (a period with no jobs in between may appear), and
        ``min``/``max`` are index probes.
        """
        field = self.date_hierarchy
        year, month, day = (
            self.params.get(f"{field}__{part}") for part in ("year", "month", "day")
        )

        def link(filters: dict[str, Any]) -> str:
            return self.get_query_string(filters, [f"{field}__"])

        if year and month and day:
            chosen = datetime.date(int(year), int(month), int(day))
            return {
                "show": True,
                "back": {
                    "link": link({f"{field}__year": year, f"{field}__month": month}),
                    "title": capfirst(formats.date_format(chosen, "YEAR_MONTH_FORMAT")),
                },
                "choices": [{"title": capfirst(formats.date_format(chosen, "MONTH_DAY_FORMAT"))}],
            }
        bounds = self.queryset.aggregate(first=Min(field), last=Max(field))
        if bounds["first"] is None:
            return {"show": False}
        first, last = (timezone.localtime(bounds[key]) for key in ("first", "last"))
        if not year and first.year == last.year:
            year = str(first.year)
            if first.month == last.month:
                month = str(first.month)
        if year and month:
            return {
                "show": True,
                "back": {"link": link({f"{field}__year": year}), "title": year},
                "choices": [
                    {
                        "link": link(
                            {f"{field}__year": year, f"{field}__month": month, f"{field}__day": d}
                        ),
                        "title": capfirst(
                            formats.date_format(
                                datetime.date(int(year), int(month), d), "MONTH_DAY_FORMAT"
                            )
                        ),
                    }
                    for d in range(first.day, last.day + 1)
                ],
            }
        if year:
            return {
                "show": True,
                "back": {"link": link({}), "title": _("All dates")},
                "choices": [
                    {
                        "link": link({f"{field}__year": year, f"{field}__month": m}),
                        "title": capfirst(
                            formats.date_format(datetime.date(int(year), m, 1), "YEAR_MONTH_FORMAT")
                        ),
                    }
                    for m in range(first.month, last.month + 1)
                ],
            }
        return {
            "show": True,
            "back": None,
            "choices": [
                {"link": link({f"{field}__year": str(y)}), "title": str(y)}
                for y in range(first.year, last.year + 1)
            ],
        }


@dataclasses.dataclass(frozen=True)
class JobAction:
    """A button on a job's page: the states it shows in, and the operation it runs."""

    #: The URL's last part, ``<id>/<slug>/``.
    slug: str
    label: Promise
    allowed: tuple[str, ...]
    perform: Callable[..., Job]
    #: The confirmation page's question and what it says happens.
    question: Promise
    explanation: Promise
    #: The confirmation page offers a select of the job's steps (``from_step``),
    #: and the button shows only for a job with steps.
    chooses_step: bool = False


#: The buttons of a job's page, in the order shown (DESIGN.md: "Operator views").
JOB_ACTIONS: dict[str, JobAction] = {
    action.slug: action
    for action in (
        JobAction(
            "requeue",
            _("Requeue"),
            tuple(operations.REQUEUE_FROM),
            operations.requeue,
            _("Requeue this job?"),
            _(
                "It goes back to pending with its attempts reset to 0 and runs as soon as a "
                "worker is free. Its error history is kept. Its dependents still waiting wait "
                "for it again; those cancelled when it ended stay cancelled."
            ),
        ),
        JobAction(
            "retry-from-step",
            _("Retry from step"),
            tuple(operations.REQUEUE_FROM),
            operations.requeue,
            _("Retry this job from a step?"),
            _(
                "It is requeued (pending, attempts reset to 0, runnable as soon as a worker is "
                "free), and the record of the step you choose and of every step recorded after "
                "it is deleted: the next run calls those steps again, and replays the results "
                "of the steps before it."
            ),
            chooses_step=True,
        ),
        JobAction(
            "cancel",
            _("Cancel"),
            tuple(operations.CANCEL_FROM),
            operations.cancel,
            _("Cancel this job?"),
            _(
                "A pending or waiting job is cancelled at once and will not run; the waiting "
                "jobs that depend on it are cancelled too (or run anyway, those enqueued with "
                'on_parent_failure="run"). A running job is asked to stop: its handler sees '
                "ctx.cancelled within about a second, and the job ends cancelled, not retried, "
                "when the handler returns."
            ),
        ),
        JobAction(
            "run-now",
            _("Run now"),
            tuple(operations.RUN_NOW_FROM),
            operations.run_now,
            _("Run this job now?"),
            _(
                "It becomes runnable at once instead of at its available time (a delay, or the "
                "backoff before a retry): the next free worker claims it."
            ),
        ),
    )
}

#: A job page button's slug -> its action in authorization.py (and the audit trail).
ACTION_OF_SLUG = {
    "requeue": "requeue",
    "retry-from-step": "retry_from_step",
    "cancel": "cancel",
    "run-now": "run_now",
}


def _created_range(params: Mapping[str, str]) -> tuple[datetime.datetime, datetime.datetime] | None:
    """The date hierarchy's ``created_at`` range, as Django's changelist computes it."""
    year, month, day = (params.get(f"created_at__{part}") for part in ("year", "month", "day"))
    if year is None:
        return None
    start = datetime.datetime(int(year), int(month or 1), int(day or 1))
    if day:
        end = start + datetime.timedelta(days=1)
    elif month:
        end = (start + datetime.timedelta(days=32)).replace(day=1)
    else:
        end = start.replace(year=start.year + 1)
    if settings.USE_TZ:
        start, end = timezone.make_aware(start), timezone.make_aware(end)
    return start, end


def _pre(text: str) -> SafeString:
    return format_html("<pre>{}</pre>", text)


def _json_pre(value: Any) -> SafeString:
    return _pre(
        json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder)
    )


@admin.register(Job)
class JobAdmin(BoundedJobListMixin, JobModelAdmin):
    """Every job. Read-only; the actions are the only way to change a job.

    Permissions: ``view_job`` shows the list and the pages; ``change_job``
    adds the actions. Nobody adds or deletes jobs here (jobs come from
    ``enqueue()``; finished jobs are pruned by ``manage.py jobs prune``).
    """

    # Tuples of any length, not these exact ones, so DeadJobAdmin can list fewer.
    list_display: tuple[str, ...] = (
        "id",
        "type",
        "queue",
        "status",
        "priority",
        "attempts_display",
        "available_at",
        "created_at",
        "short_error",
    )
    list_filter: ClassVar[tuple[str | type[admin.ListFilter], ...]] = (
        "status",
        TypeFilter,
        QueueFilter,
    )
    # For the search box and its help; the search itself is get_search_results.
    search_fields = ("=id", "=type", "=idempotency_key")
    search_help_text = _("Exact match on a job id, a type or an idempotency key.")
    date_hierarchy = "created_at"
    # Newest first, served by durable_jobs_created_idx (and, when filtered, by
    # the history partitions' status, type and queue indexes and the active
    # one's held index); Django adds "-pk" as tiebreak.
    ordering = ("-created_at",)
    # Sorting by a column would sort the whole (filtered) table.
    sortable_by = ()
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    change_list_template = "admin/durable_jobs/job/change_list.html"
    change_form_template = "admin/durable_jobs/job/change_form.html"
    actions: tuple[str, ...] = ("requeue_jobs", "cancel_jobs", "run_jobs_now")
    #: The status of every job this page lists (DeadJobAdmin: dead); None: the status filter's.
    listed_status: str | None = None

    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "type",
                    "queue",
                    "status",
                    "priority",
                    ("attempts", "max_attempts"),
                    "timeout",
                    "idempotency_key",
                )
            },
        ),
        (
            _("Times"),
            {
                "fields": (
                    "available_at",
                    "created_at",
                    "updated_at",
                    "started_at",
                    "cancel_requested_at",
                    "completed_at",
                )
            },
        ),
        (
            _("Dependencies"),
            {"fields": ("parents_display", "children_display", "on_parent_failure", "waiting_on")},
        ),
        (_("Payload and result"), {"fields": ("payload_display", "result_display")}),
        (_("Durable steps"), {"fields": ("waiting_for_display", "steps_display")}),
        # "error_history": the field's old name, kept for the selectors that know it.
        (_("Attempts and errors"), {"fields": ("error_history", "last_error_display")}),
        (
            _("Lease"),
            {
                "classes": ("collapse",),
                "fields": ("lease_holder", "lease_expires_at", "lease_token"),
            },
        ),
    )
    readonly_fields = (
        "id",
        "type",
        "queue",
        "status",
        "priority",
        "attempts",
        "max_attempts",
        "timeout",
        "idempotency_key",
        "available_at",
        "created_at",
        "updated_at",
        "started_at",
        "cancel_requested_at",
        "completed_at",
        "parents_display",
        "children_display",
        "on_parent_failure",
        "waiting_on",
        "payload_display",
        "result_display",
        "waiting_for_display",
        "steps_display",
        "last_error_display",
        "error_history",
        "bulk_progress",
        "lease_holder",
        "lease_expires_at",
        "lease_token",
    )

    # -- permissions --------------------------------------------------------

    #: The job actions this admin's pages offer (the dead jobs' page: requeue only).
    job_action_slugs: tuple[str, ...] = tuple(JOB_ACTIONS)
    #: The bulk operations its lists offer.
    bulk_operations: tuple[str, ...] = tuple(BULK_ACTIONS)

    @staticmethod
    def _actor(request: HttpRequest) -> Actor:
        return Actor.from_request(request, "admin")

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return user_can(request.user, "requeue")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return user_can(request.user, "cancel")

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return user_can(request.user, "run_now")

    def _user_can(self, request: HttpRequest, action: str) -> bool:
        """``action`` permission on this admin's model, or on ``Job``.

        For ``DeadJobAdmin`` this means ``durable_jobs.change_job`` also
        works on the "Dead jobs" page: one set of permissions for the table.
        """
        return any(
            request.user.has_perm(f"{opts.app_label}.{get_permission_codename(action, opts)}")
            for opts in {self.opts, Job._meta}
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._user_can(request, "view") or self._user_can(request, "change")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Never: a job's page is view-only (no form, no Save buttons, a POST
        # is a 403). What changes a job are the actions, each with its own
        # permission (has_requeue_permission...), checked again by operations.
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # -- a job's page: the buttons, each a confirmation page and a POST -------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        urls = [
            path(
                f"<path:object_id>/{slug}/",
                wrap(self.job_action_view),
                {"slug": slug},
                name=self._url_name(slug),
            )
            for slug in self.job_action_slugs
        ]
        urls += [
            path(
                f"bulk-{operation}/",
                wrap(self.bulk_view),
                {"operation": operation},
                name=self._url_name(f"bulk_{operation}"),
            )
            for operation in self.bulk_operations
        ]
        return [*urls, *super().get_urls()]

    def _url_name(self, suffix: str) -> str:
        """``durable_jobs_job_<suffix>`` (``..._deadjob_...`` on the dead jobs' admin)."""
        return f"{self.opts.app_label}_{self.opts.model_name}_{suffix.replace('-', '_')}"

    def _job_url(self, job_id: Any) -> str:
        # Job's page, not this admin's: a requeued job has left the "Dead jobs" page.
        return reverse("admin:durable_jobs_job_change", args=[job_id])

    def _changelist_url(self, query: str = "") -> str:
        url = reverse(f"admin:{self._url_name('changelist')}")
        return f"{url}?{query}" if query else url

    def job_actions(self, request: HttpRequest, job: Job) -> list[dict[str, Any]]:
        """The buttons of ``job``'s page: those its state allows and the user may use."""
        return [
            {
                "label": action.label,
                "url": reverse(f"admin:{self._url_name(action.slug)}", args=[job.pk]),
                "slug": action.slug,
            }
            for action in JOB_ACTIONS.values()
            if action.slug in self.job_action_slugs
            and job.status in self._allowed(action)
            and user_can(request.user, ACTION_OF_SLUG[action.slug])
            and (not action.chooses_step or self._has_steps(job))
        ]

    @staticmethod
    def _has_steps(job: Job) -> bool:
        return bool(step_records.step_names(job, limit=1))

    def _allowed(self, action: JobAction) -> tuple[str, ...]:
        """The statuses ``action`` applies to on this admin's pages (dead ones only, there)."""
        if self.listed_status is None:
            return action.allowed
        return tuple(status for status in action.allowed if status == self.listed_status)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        job = self._job_or_none(object_id)
        context = {**(extra_context or {})}
        if job is not None:
            context["durable_jobs_actions"] = self.job_actions(request, job)
        return super().change_view(request, object_id, form_url, context)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The job's History page: the audit trail's entries for it, newest first."""
        context = {**(extra_context or {})}
        job_id = self._job_or_none(object_id)
        if job_id is not None:
            entries = audit.entries(using=job_id._state.db or db.database_alias(), job=job_id.pk)
            context.update(history_context(entries, job_id=str(job_id.pk)))
        return super().history_view(request, object_id, context)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = list(super().get_fieldsets(request, obj))
        if obj is not None and obj.type in bulk.BULK_TYPES:
            fieldsets.insert(1, (_("Bulk operation"), {"fields": ("bulk_progress",)}))
        return fieldsets

    @staticmethod
    def _job_or_none(object_id: str) -> Job | None:
        """The job, whatever this admin lists (a dead job's page outlives its requeue)."""
        try:
            job_id = uuid.UUID(str(object_id))
        except ValueError:
            return None
        return Job.objects.filter(pk=job_id).first()

    def job_action_view(self, request: HttpRequest, object_id: str, slug: str) -> HttpResponse:
        """Requeue, cancel or run now one job: a confirmation page (GET), the change (POST).

        The action's own permission is required for both (403 without); the
        admin's ``admin_view`` checks staff and CSRF. The change is the
        operation's own conditional UPDATE: a job whose state changed since
        the page was shown gets a message saying so, never a 500. On the
        dead jobs' pages, only a dead job can be acted on.
        """
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        if slug not in self.job_action_slugs or not user_can(request.user, ACTION_OF_SLUG[slug]):
            raise PermissionDenied
        action = JOB_ACTIONS[slug]
        job = self._job_or_none(object_id)
        if job is None:
            self.message_user(
                request,
                _("There is no job with id %(id)s (pruned, perhaps).") % {"id": object_id},
                messages.ERROR,
            )
            return HttpResponseRedirect(self._changelist_url())
        if self.listed_status is not None and job.status != self.listed_status:
            # The dead jobs' page acts on dead jobs: another is the job page's business.
            self.message_user(request, self._not_allowed(action, job), messages.WARNING)
            return HttpResponseRedirect(self._job_url(job.pk))
        if request.method == "POST":
            return self._perform(request, action, job)
        if job.status not in action.allowed:
            self.message_user(request, self._not_allowed(action, job), messages.WARNING)
            return HttpResponseRedirect(self._job_url(job.pk))
        step_names = step_records.step_names(job) if action.chooses_step else []
        if action.chooses_step and not step_names:
            self.message_user(
                request, _("Job %(id)s has no recorded steps.") % {"id": job.pk}, messages.WARNING
            )
            return HttpResponseRedirect(self._job_url(job.pk))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": action.question,
            "job": job,
            "action": action,
            "step_names": step_names,
            "job_url": reverse(f"admin:{self._url_name('change')}", args=[job.pk]),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/durable_jobs/job/action_confirmation.html", context)

    @staticmethod
    def _not_allowed(action: JobAction, job: Job) -> str:
        return _("Job %(id)s is %(status)s: “%(action)s” applies to %(allowed)s jobs only.") % {
            "id": job.pk,
            "status": job.status,
            "action": action.label,
            "allowed": _either(action.allowed),
        }

    def _perform(self, request: HttpRequest, action: JobAction, job: Job) -> HttpResponse:
        options: dict[str, Any] = {}
        if action.chooses_step:
            options["from_step"] = request.POST.get("from_step", "")
        try:
            changed = action.perform(job.pk, actor=self._actor(request), **options)
        except operations.UnknownStep as exc:
            self.message_user(
                request, _("Nothing was done: %(reason)s") % {"reason": exc}, messages.ERROR
            )
        except operations.JobStateError as exc:
            # Its state changed since the page was shown (a worker claimed
            # it, someone else requeued it): the UPDATE matched nothing.
            self.message_user(
                request,
                _("Nothing was done: %(reason)s") % {"reason": self._not_allowed(action, exc.job)},
                messages.ERROR,
            )
        except Job.DoesNotExist:
            self.message_user(
                request,
                _("Job %(id)s no longer exists (pruned, perhaps).") % {"id": job.pk},
                messages.ERROR,
            )
            return HttpResponseRedirect(self._changelist_url())
        else:
            self.message_user(request, self._done(action, changed), messages.SUCCESS)
        return HttpResponseRedirect(self._job_url(job.pk))

    @staticmethod
    def _done(action: JobAction, job: Job) -> str:
        if action.slug == "requeue":
            return _("Job %(id)s was requeued: pending, runnable now.") % {"id": job.pk}
        if action.slug == "retry-from-step":
            return _("Job %(id)s was requeued from the chosen step: pending, runnable now.") % {
                "id": job.pk
            }
        if action.slug == "run-now":
            return _("Job %(id)s will run now: the next free worker claims it.") % {"id": job.pk}
        if job.status == JobStatus.RUNNING:
            return _(
                "Cancel requested for job %(id)s: it is running, and ends cancelled when its "
                "handler stops."
            ) % {"id": job.pk}
        return _("Job %(id)s was cancelled.") % {"id": job.pk}

    # -- bulk by filter: a durable job does the batches ------------------------

    def bulk_filter(self, params: Mapping[str, str]) -> bulk.JobFilter | None:
        """The changelist's filters as a ``bulk.JobFilter``; None if they are not all its.

        The status, type, queue and search filters and the date drill-down;
        with any other parameter (a lookup typed in the address) the list
        is not offered in bulk, so that what a bulk run changes is exactly
        what the list shows.
        """
        if set(params) - BULK_PARAMETERS:
            return None
        status = self.listed_status or params.get("status__exact")
        if not status:
            return None
        try:
            created = _created_range(params)
            return bulk.JobFilter(
                status=status,
                queue=params.get("queue") or None,
                type=params.get("type") or None,
                created_after=created[0] if created else None,
                created_before=created[1] if created else None,
                search=params.get("q", "").strip() or None,
            )
        except (ValueError, OverflowError):  # InvalidFilter is a ValueError
            return None

    @staticmethod
    def _filter_query(params: Mapping[str, str]) -> str:
        """The filters of a changelist query string, without its page and order."""
        kept = {key: params[key] for key in params if key not in ("o", "p", "all", "_facets")}
        return urlencode(sorted(kept.items()))

    def bulk_actions(self, request: HttpRequest) -> list[dict[str, Any]]:
        """The "Requeue all N matching" / "Cancel all N matching" buttons this list offers."""
        job_filter = self.bulk_filter(request.GET)
        if job_filter is None:
            return []
        query = self._filter_query(request.GET)
        return [
            {
                "operation": operation,
                "verb": verb,
                "url": reverse(f"admin:{self._url_name(f'bulk_{operation}')}") + f"?{query}",
            }
            for operation, (statuses, verb) in BULK_ACTIONS.items()
            if operation in self.bulk_operations
            and job_filter.status in statuses
            and user_can(request.user, f"bulk_{operation}")
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "durable_jobs_bulk_actions": self.bulk_actions(request)}
        return super().changelist_view(request, context)

    def bulk_view(self, request: HttpRequest, operation: str) -> HttpResponse:
        """A bulk requeue or cancel of the filtered list: a confirmation page, then a bulk job.

        A web request must not run for minutes: the POST enqueues a job of
        the built-in type (``bulk.BULK_REQUEUE`` / ``BULK_CANCEL``) whose
        handler does the batches and keeps its progress in its result. The
        confirmation page carries a token that becomes the job's
        idempotency key, so a form submitted twice starts one job.
        """
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        if not user_can(request.user, f"bulk_{operation}"):
            raise PermissionDenied
        query = self._filter_query(request.GET)
        job_filter = self.bulk_filter(request.GET)
        statuses, verb = BULK_ACTIONS[operation]
        if job_filter is None or job_filter.status not in statuses:
            self.message_user(
                request,
                _(
                    "“%(verb)s all matching” needs the list filtered to %(statuses)s jobs, by "
                    "the filters in the sidebar, the search or the dates only."
                )
                % {"verb": verb, "statuses": _either(statuses)},
                messages.ERROR,
            )
            return HttpResponseRedirect(self._changelist_url(query))
        if request.method == "POST":
            return self._start_bulk(request, operation, job_filter, query)
        matched, estimate = bulk.count_or_estimate(job_filter.queryset())
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("%(verb)s all matching jobs?") % {"verb": verb},
            "verb": verb,
            "operation": operation,
            "description": job_filter.describe(),
            "matched": matched,
            "matched_is_estimate": estimate,
            "batch_size": bulk.DEFAULT_BATCH_SIZE,
            "job_type": bulk.bulk_job_payload(operation, job_filter)[0],
            "queue": jobs_settings.DEFAULT_QUEUE,
            "token": uuid.uuid4().hex,
            "changelist_url": self._changelist_url(query),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/durable_jobs/job/bulk_confirmation.html", context)

    def _start_bulk(
        self, request: HttpRequest, operation: str, job_filter: bulk.JobFilter, query: str
    ) -> HttpResponse:
        back = HttpResponseRedirect(self._changelist_url(query))
        try:
            token = uuid.UUID(request.POST.get("token", ""))
        except ValueError:
            self.message_user(
                request, _("The form was incomplete; nothing was done."), messages.ERROR
            )
            return back
        try:
            result = bulk.start(operation, job_filter, actor=self._actor(request), token=token)
        except IdempotencyConflict:
            self.message_user(request, _("The form was reused; nothing was done."), messages.ERROR)
            return back
        link = format_html('<a href="{}">{}</a>', self._job_url(result.job.pk), result.job.pk)
        if result.created:
            message = format_html(
                gettext("Bulk {} of {} started as job {}: its page shows the progress."),
                operation,
                job_filter.describe(),
                link,
            )
        else:
            message = format_html(
                gettext("That bulk {} was already started as job {}."), operation, link
            )
        self.message_user(request, message, messages.SUCCESS)
        return back

    # -- the list -----------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Exact matches only, each served by an index.

        Django's ``=field`` search is ``UPPER(field) = UPPER(term)``, which
        no index serves. A UUID may be a job id or an idempotency key.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        # The bulk operations' search too: "requeue all matching" means these.
        return queryset.filter(bulk.search_condition(term)), False

    @admin.display(description=_("attempts"))
    def attempts_display(self, obj: Job) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @admin.display(description=_("last error"))
    def short_error(self, obj: Job) -> str:
        """The first line of the last failure, blank once the job has completed.

        A job that failed and then completed keeps ``last_error`` (the change
        page shows the history), but in the list an error next to "completed"
        reads as a failure that is not there.
        """
        if obj.status == JobStatus.COMPLETED:
            return ""
        head = getattr(obj, "last_error_head", None)
        text = (obj.last_error if head is None else head).strip()
        return Truncator(text.splitlines()[0]).chars(ERROR_COLUMN_CHARS) if text else ""

    # -- the change page: everything escaped, in <pre> where it is text -----

    @admin.display(description=_("waits for"))
    def parents_display(self, obj: Job) -> SafeString | str:
        """The jobs it was enqueued to wait for, each a link with its status."""
        return self._job_links(obj.parent_ids())

    @admin.display(description=_("dependents"))
    def children_display(self, obj: Job) -> SafeString | str:
        """The jobs enqueued to wait for it, each a link with its status."""
        return self._job_links(obj.dependent_ids())

    def _job_links(self, ids: list[uuid.UUID]) -> SafeString | str:
        """Links to the first ``MAX_JOB_LINKS`` of ``ids`` (one query), and how many more."""
        if not ids:
            return "-"
        shown = ids[:MAX_JOB_LINKS]
        statuses = dict(Job.objects.filter(pk__in=shown).values_list("pk", "status"))
        links = format_html_join(
            ", ",
            '<a href="{}">{}</a> ({})',
            (
                (reverse("admin:durable_jobs_job_change", args=[pk]), pk, statuses.get(pk, "?"))
                for pk in shown
            ),
        )
        more = len(ids) - len(shown)
        if more:
            return format_html("{} {}", links, _("and %(count)d more") % {"count": more})
        return links

    @admin.display(description=_("payload"))
    def payload_display(self, obj: Job) -> SafeString:
        return _json_pre(obj.payload)

    @admin.display(description=_("result"))
    def result_display(self, obj: Job) -> SafeString:
        return _json_pre(obj.result)

    @admin.display(description=_("waits for"))
    def waiting_for_display(self, obj: Job) -> SafeString | str:
        """Why a suspended job waits: a time, an event key, a child job (linked), parents."""
        reason = step_records.waiting_for(obj)
        if not reason:
            return "-"
        if "until" in reason:
            return format_html("{} {}", _("Sleeping until"), _time_html(reason["until"]))
        if "event" in reason:
            text = format_html("{} <code>{}</code>", _("Waiting for the event"), reason["event"])
            if reason.get("deadline"):
                deadline = _time_html(reason["deadline"])
                text = format_html("{} ({} {})", text, _("times out at"), deadline)
            return text
        if "job" in reason:
            child = step_records.child_id(reason)
            if child is None:
                return format_html("{} {}", _("Waiting for the child job"), reason["job"])
            return format_html("{} {}", _("Waiting for the child job"), self._job_links([child]))
        if "parents" in reason:
            parents = [uuid.UUID(pk) for pk in reason["parents"]]
            return format_html("{} {}", _("Waiting for its parents:"), self._job_links(parents))
        return format_html("<code>{}</code>", json.dumps(reason, sort_keys=True))

    @admin.display(description=_("steps"))
    def steps_display(self, obj: Job) -> SafeString | str:
        """The recorded steps, by position: name, kind, attempt, when, duration, size or error."""
        steps = step_records.job_steps(obj)
        if not steps.rows:
            return "-"
        rows = [
            {
                "step": step,
                "duration": (
                    (step.finished_at - step.started_at).total_seconds()
                    if step.finished_at and step.started_at
                    else None
                ),
            }
            for step in steps.rows
        ]
        return SafeString(
            render_to_string(
                "admin/durable_jobs/job/steps.html",
                {"rows": rows, "truncated": steps.truncated, "limit": step_records.STEPS_SHOWN},
            )
        )

    @admin.display(description=_("last error"))
    def last_error_display(self, obj: Job) -> SafeString | str:
        return _pre(obj.last_error) if obj.last_error else ""

    @admin.display(description=_("attempts"))
    def error_history(self, obj: Job) -> SafeString | str:
        """Each attempt, oldest first: worker, start, end, outcome, error and traceback."""
        rows = attempt_timeline(obj)
        if not rows:
            return "-"
        # A template renders it, escaping everything a job carries.
        return SafeString(
            render_to_string(
                "admin/durable_jobs/job/attempt_timeline.html",
                {"rows": rows, "history_limit": jobs_settings.ERROR_HISTORY_LIMIT},
            )
        )

    @admin.display(description=_("progress"))
    def bulk_progress(self, obj: Job) -> SafeString | str:
        """A bulk job's filter and progress, as its handler stores them in ``result``."""
        try:
            job_filter = bulk.JobFilter.from_dict((obj.payload or {}).get("filter"))
        except bulk.InvalidFilter as exc:
            return str(exc)
        progress = None
        if isinstance(obj.result, dict):
            try:
                progress = bulk.BulkProgress.from_dict(obj.result)
            except (KeyError, TypeError, ValueError):
                progress = None
        if progress is None:
            state = _("not started yet") if obj.status == JobStatus.PENDING else obj.status
            return format_html("<p>{}</p><p>{}</p>", capfirst(job_filter.describe()), state)
        if progress.done:
            state = _("done")
        elif obj.status == JobStatus.RUNNING:
            state = _("in progress: updated after each batch, reload the page to follow it")
        elif obj.status == JobStatus.PENDING:
            state = _("interrupted: its next attempt goes on after the last batch")
        else:
            state = _(
                "stopped (%(status)s): requeue it to go on; it starts over on the jobs that "
                "still match"
            ) % {"status": obj.status}
        return format_html(
            "<p>{}</p><p><strong>{}</strong></p><p>{}</p>",
            capfirst(job_filter.describe()),
            capfirst(progress.describe()),
            state,
        )

    # -- actions: thin shells over operations.py ----------------------------

    def _report(self, request: HttpRequest, result: BulkResult, done: str, skipped: str) -> None:
        """One message for the jobs changed, one for those skipped for their state."""
        if result.changed:
            self.message_user(request, done, messages.SUCCESS)
        if result.skipped:
            self.message_user(request, skipped, messages.WARNING)
        if not result.changed and not result.skipped:
            self.message_user(request, _("No job was changed."), messages.WARNING)

    @admin.action(
        permissions=["requeue"], description=_("Requeue selected jobs (dead or cancelled)")
    )
    def requeue_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        result = operations.requeue_many(
            queryset.values_list("pk", flat=True), using=queryset.db, actor=self._actor(request)
        )
        changed, skipped = len(result.changed), result.skipped
        self._report(
            request,
            result,
            ngettext("%(count)d job was requeued.", "%(count)d jobs were requeued.", changed)
            % {"count": changed},
            ngettext(
                "%(count)d job was skipped: only dead or cancelled jobs can be requeued.",
                "%(count)d jobs were skipped: only dead or cancelled jobs can be requeued.",
                skipped,
            )
            % {"count": skipped},
        )

    @admin.action(
        permissions=["cancel"],
        description=_("Cancel selected jobs (pending, waiting or running)"),
    )
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        result = operations.cancel_many(
            queryset.values_list("pk", flat=True), using=queryset.db, actor=self._actor(request)
        )
        changed, skipped, requested = len(result.changed), result.skipped, len(result.requested)
        if requested:
            self.message_user(
                request,
                ngettext(
                    "Cancel requested for %(count)d running job: it ends cancelled when its "
                    "handler stops.",
                    "Cancel requested for %(count)d running jobs: each ends cancelled when its "
                    "handler stops.",
                    requested,
                )
                % {"count": requested},
                messages.SUCCESS,
            )
            if not changed and not skipped:
                return
        self._report(
            request,
            result,
            ngettext("%(count)d job was cancelled.", "%(count)d jobs were cancelled.", changed)
            % {"count": changed},
            ngettext(
                "%(count)d job was skipped: only pending, waiting or running jobs can be "
                "cancelled.",
                "%(count)d jobs were skipped: only pending, waiting or running jobs can be "
                "cancelled.",
                skipped,
            )
            % {"count": skipped},
        )

    @admin.action(permissions=["run_now"], description=_("Run selected jobs now (pending)"))
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        result = operations.run_now_many(
            queryset.values_list("pk", flat=True), using=queryset.db, actor=self._actor(request)
        )
        changed, skipped = len(result.changed), result.skipped
        self._report(
            request,
            result,
            ngettext("%(count)d job will run now.", "%(count)d jobs will run now.", changed)
            % {"count": changed},
            ngettext(
                "%(count)d job was skipped: only pending jobs can be run now.",
                "%(count)d jobs were skipped: only pending jobs can be run now.",
                skipped,
            )
            % {"count": skipped},
        )


@admin.register(DeadJob)
class DeadJobAdmin(JobAdmin):
    """The dead-letter queue: the "Dead jobs" entry of the sidebar.

    Same pages as ``JobAdmin`` on the dead rows only (the proxy's manager
    filters them; ``durable_jobs_held_idx`` serves it). Requeue is the one
    action that applies to a dead job. The job permissions apply here too.
    """

    list_display = (
        "id",
        "type",
        "queue",
        "attempts_display",
        "completed_at",
        "created_at",
        "short_error",
    )
    list_filter = (TypeFilter, QueueFilter)
    actions = ("requeue_jobs",)
    listed_status = JobStatus.DEAD
    # Requeue (from a step, too) is what applies to a dead job: no URL for the others.
    job_action_slugs = ("requeue", "retry-from-step")
    bulk_operations = ("requeue",)


def _time_html(value: Any) -> SafeString:
    """A time of ``waiting_for`` (ISO 8601, UTC) as the admin shows its other times: in
    the current time zone, in ``DATETIME_FORMAT``; the exact instant in ``datetime``."""
    try:
        when = datetime.datetime.fromisoformat(str(value))
    except ValueError:
        return format_html("<time>{}</time>", value)
    if timezone.is_naive(when):
        when = timezone.make_aware(when, datetime.timezone.utc)
    shown = formats.date_format(timezone.localtime(when), "DATETIME_FORMAT")
    return format_html('<time datetime="{}">{}</time>', when.isoformat(), shown)
