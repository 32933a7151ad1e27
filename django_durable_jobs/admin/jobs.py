"""Jobs and dead jobs: the list, a job's page, and the actions on them."""

from __future__ import annotations

import contextlib
import datetime
import json
import uuid
from collections.abc import Iterable
from functools import cached_property
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_permission_codename
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Max, Min, Model, Q, QuerySet
from django.db.models.functions import Left
from django.http import HttpRequest
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import Truncator, capfirst
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import operations
from ..conf import jobs_settings
from ..models import DeadJob, Job
from ..operations import BulkResult
from ..registry import registry
from .bases import (
    BasePaginator,
    JobModelAdmin,
)

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

    exact_count_limit = 10_000
    #: Whether ``count`` is the planner's estimate (the template says so).
    count_is_estimate = False
    #: The admin pages it with the changelist's queryset (``order_by``, ``explain``).
    object_list: QuerySet[Model]

    @cached_property
    def count(self) -> int:
        queryset = self.object_list.order_by()
        # values("pk"): count the ids only, not the list's computed columns.
        exact = queryset.values("pk")[: self.exact_count_limit + 1].count()
        if exact <= self.exact_count_limit:
            return exact
        self.count_is_estimate = True
        plan = json.loads(queryset.explain(format="json"))
        return max(int(plan[0]["Plan"]["Plan Rows"]), exact)


class _ValueListFilter(admin.SimpleListFilter):
    """Filter on one column, listing values known without reading the table.

    Django's field filters run ``SELECT DISTINCT column`` over the whole
    table to list their choices: millions of rows read on every page view.
    These list the values the code knows (the handler registry, the
    settings) plus the selected value, so ``?type=old.handler`` works for a
    type no longer registered; the filtering itself uses an index
    (``durable_jobs_type_idx``, ``durable_jobs_queue_idx``).
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
        return (handler.name for handler in registry)


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


def _pre(text: str) -> SafeString:
    return format_html("<pre>{}</pre>", text)


def _json_pre(value: Any) -> SafeString:
    return _pre(
        json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder)
    )


@admin.register(Job)
class JobAdmin(JobModelAdmin):
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
    # Newest first, served by durable_jobs_created_idx (and by the status,
    # type and queue indexes when filtered); Django adds "-pk" as tiebreak.
    ordering = ("-created_at",)
    # Sorting by a column would sort the whole (filtered) table.
    sortable_by = ()
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    change_list_template = "admin/durable_jobs/job/change_list.html"
    actions: tuple[str, ...] = ("requeue_jobs", "cancel_jobs", "run_jobs_now")

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
        (_("Errors"), {"fields": ("last_error_display", "error_history")}),
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
        "last_error_display",
        "error_history",
        "lease_holder",
        "lease_expires_at",
        "lease_token",
    )

    # -- permissions --------------------------------------------------------

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
        # True without an object, so that users with change_job get the
        # actions (permissions=["change"]); False for an object, so its
        # page is view-only: no form, no Save buttons, and a POST is a 403.
        if obj is not None:
            return False
        return self._user_can(request, "change")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

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
        condition = Q(type=term) | Q(idempotency_key=term)
        with contextlib.suppress(ValueError):
            condition |= Q(pk=uuid.UUID(term))
        return queryset.filter(condition), False

    @admin.display(description=_("attempts"))
    def attempts_display(self, obj: Job) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @admin.display(description=_("last error"))
    def short_error(self, obj: Job) -> str:
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

    @admin.display(description=_("last error"))
    def last_error_display(self, obj: Job) -> SafeString | str:
        return _pre(obj.last_error) if obj.last_error else ""

    @admin.display(description=_("error history"))
    def error_history(self, obj: Job) -> SafeString | str:
        """Each failure, newest first: attempt, time, worker, exception, message, traceback."""
        entries = [entry for entry in (obj.errors or []) if isinstance(entry, dict)]
        if not entries:
            return ""
        return format_html_join(
            "",
            "<div><p><strong>{} {}</strong> · {} · {} {} · <code>{}</code></p><p>{}</p>"
            "<pre>{}</pre></div>",
            (
                (
                    _("Attempt"),
                    entry.get("attempt", "?"),
                    entry.get("at", ""),
                    _("worker"),
                    entry.get("worker", ""),
                    entry.get("exception", ""),
                    entry.get("error", ""),
                    entry.get("traceback", ""),
                )
                for entry in reversed(entries)
            ),
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
        permissions=["change"], description=_("Requeue selected jobs (dead or cancelled)")
    )
    def requeue_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        result = operations.requeue_many(queryset.values_list("pk", flat=True), using=queryset.db)
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
        permissions=["change"],
        description=_("Cancel selected jobs (pending, waiting or running)"),
    )
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        result = operations.cancel_many(queryset.values_list("pk", flat=True), using=queryset.db)
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

    @admin.action(permissions=["change"], description=_("Run selected jobs now (pending)"))
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        result = operations.run_now_many(queryset.values_list("pk", flat=True), using=queryset.db)
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
    filters them; ``durable_jobs_status_idx`` serves it). Requeue is the one
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
