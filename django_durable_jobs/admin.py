"""The operators' admin: find out why jobs died, requeue, cancel, run now.

Two entries: "Jobs" (the whole table) and "Dead jobs" (the dead-letter
queue, a proxy model); then "Queues" (pause and resume), "Workers" and
"Schedules". Both are built to stay fast on a table of millions
of rows:

- no ``COUNT(*)`` over the table: the paginator counts exactly up to
  10,000 rows and asks the planner for an estimate beyond that;
- every filter, the search and the default order are served by an index;
- the date hierarchy reads ``min``/``max(created_at)`` (two index probes)
  instead of ``SELECT DISTINCT`` over the rows;
- no sortable columns: sorting millions of rows by priority is a full scan.

No field is editable: a job's state changes only through the actions,
which call ``operations.py`` like the REST API and the CLI do.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import uuid
from collections.abc import Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_permission_codename
from django.core.paginator import Paginator
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

from . import db, operations, pausing
from .conf import jobs_settings
from .flow import describe_limits, parse_queues, queue_limits
from .held_back import describe_held_back, held_back
from .models import DeadJob, Job, QueueState, ScheduleState, WorkerProcess
from .operations import BulkResult
from .registry import registry
from .schedules import Schedule, find_schedule, load_schedules
from .schedules.overview import effective_queue

if TYPE_CHECKING:
    from django_stubs_ext import StrPromise

    # Generic in django-stubs only: at run time these classes take no type
    # arguments, so the parametrised bases exist for the type checker alone.
    _Paginator = Paginator[Model]
    _JobModelAdmin = admin.ModelAdmin[Job]
    _WorkerModelAdmin = admin.ModelAdmin[WorkerProcess]
    _ScheduleModelAdmin = admin.ModelAdmin[ScheduleState]
    _QueueModelAdmin = admin.ModelAdmin[QueueState]
else:
    _Paginator = Paginator
    _JobModelAdmin = _WorkerModelAdmin = _ScheduleModelAdmin = _QueueModelAdmin = admin.ModelAdmin

#: Characters of ``last_error`` the list reads per row (not whole tracebacks).
ERROR_HEAD_CHARS = 200
#: Characters of the error's first line shown in the list.
ERROR_COLUMN_CHARS = 80
#: Parents or dependents linked on a job's page (a group's callback may have thousands).
MAX_JOB_LINKS = 100


class EstimatedCountPaginator(_Paginator):
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
class JobAdmin(_JobModelAdmin):
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


@admin.register(WorkerProcess)
class WorkerProcessAdmin(_WorkerModelAdmin):
    """Running workers, from their heartbeats; read-only (the workers own these rows)."""

    list_display = ("id", "host", "pid", "queue_list", "concurrency", "started_at",
                    "last_heartbeat", "live")  # fmt: skip
    search_fields = ("id", "host")
    readonly_fields = ("id", "host", "pid", "queues", "concurrency", "lease_seconds",
                       "started_at", "last_heartbeat")  # fmt: skip

    @admin.display(description=_("queues"))
    def queue_list(self, obj: WorkerProcess) -> str:
        return ", ".join(obj.queues) if obj.queues else "*"

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkerProcess]:
        # Liveness by the rule /api/health counts by (WorkerProcess.objects.alive()).
        return WorkerProcess.objects.with_liveness()

    @admin.display(description=_("live"), boolean=True)
    def live(self, obj: WorkerProcess) -> bool:
        return bool(obj.is_alive)  # type: ignore[attr-defined]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ScheduleState)
class ScheduleStateAdmin(_ScheduleModelAdmin):
    """Periodic jobs: each schedule's declaration next to its last and next tick; read-only.

    Schedules are declared in code and settings, not here; a row appears
    once a worker has seen the schedule. The list page names the declared
    schedules no worker has seen yet, so a schedule is never simply missing.
    """

    list_display = ("name", "job_type", "timing_now", "zone", "queue", "missed", "enabled",
                    "last_tick", "last_job", "next_tick")  # fmt: skip
    search_fields = ("name",)
    readonly_fields = (
        *("name", "job_type", "timing_now", "zone", "queue", "missed", "enabled"),
        *("first_seen", "last_tick", "last_job", "last_enqueued_at", "next_tick"),
    )
    fields = readonly_fields

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        unseen = self._unseen_schedules()
        if unseen and request.method == "GET":
            messages.info(
                request,
                _(
                    "Declared but not yet seen by a worker (a running worker adds them "
                    "within a second of starting): %(names)s."
                )
                % {"names": ", ".join(unseen)},
            )
        return super().changelist_view(request, extra_context)

    @staticmethod
    def _unseen_schedules() -> list[str]:
        schedules, _errors = load_schedules()  # invalid ones: durable_jobs.E007
        names = [s.name for s in schedules if s.enabled]
        seen = set(ScheduleState.objects.filter(name__in=names).values_list("name", flat=True))
        return sorted(set(names) - seen)

    def _declared(self, obj: ScheduleState) -> Schedule | None:
        # Cached on the row: several columns read it. The ignores: the
        # attribute is this cache's, not a field the model declares.
        if not hasattr(obj, "_declared_schedule"):
            obj._declared_schedule = find_schedule(obj.name)  # type: ignore[attr-defined]
        return obj._declared_schedule  # type: ignore[attr-defined,no-any-return]

    @admin.display(description=_("job type"))
    def job_type(self, obj: ScheduleState) -> str | StrPromise:
        schedule = self._declared(obj)
        return _("(no longer declared)") if schedule is None else schedule.type

    @admin.display(description=_("timing"))
    def timing_now(self, obj: ScheduleState) -> str:
        schedule = self._declared(obj)
        return obj.timing if schedule is None else schedule.timing

    @admin.display(description=_("time zone"))
    def zone(self, obj: ScheduleState) -> str:
        schedule = self._declared(obj)
        if schedule is None:
            return "-"
        return str(schedule.zone()) if schedule.cron is not None else "UTC"

    @admin.display(description=_("queue"))
    def queue(self, obj: ScheduleState) -> str:
        schedule = self._declared(obj)
        return "-" if schedule is None else effective_queue(schedule)

    @admin.display(description=_("missed ticks"))
    def missed(self, obj: ScheduleState) -> str:
        schedule = self._declared(obj)
        return "-" if schedule is None else schedule.missed

    @admin.display(description=_("enabled"), boolean=True)
    def enabled(self, obj: ScheduleState) -> bool:
        schedule = self._declared(obj)
        return schedule is not None and schedule.enabled

    @admin.display(description=_("last job"))
    def last_job(self, obj: ScheduleState) -> str:
        if obj.last_job_id is None:
            return "-"
        url = reverse("admin:durable_jobs_job_change", args=[obj.last_job_id])
        return format_html('<a href="{}">{}</a>', url, obj.last_job_id)

    @admin.display(description=_("next tick"))
    def next_tick(self, obj: ScheduleState) -> Any:
        schedule = self._declared(obj)
        if schedule is None or not schedule.enabled:
            return "-"
        return schedule.next_tick(timezone.now())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


#: Where QueueStateAdmin keeps a request's held-back counts (see get_list_display).
_HELD_BACK_ATTRIBUTE = "_durable_jobs_held_back"
#: "Pause for 15 minutes": the admin's one pause with an end time.
ADMIN_PAUSE_FOR = datetime.timedelta(minutes=15)


@admin.register(QueueState)
class QueueStateAdmin(_QueueModelAdmin):
    """The queues, with their paused state, limits and what these hold back now; actions
    pause and resume them.

    A queue gets a row here once it is declared in ``QUEUES``, holds
    pending, running or dead jobs, or was paused: opening the list adds the
    missing rows (for users who may pause, the only ones who need them).
    Permissions are the job actions': ``view_job`` shows the list,
    ``change_job`` adds the actions (or the same on this model). No field
    is editable: the actions call ``pausing.py``, which tells the workers.
    """

    list_display = ("name", "paused", "paused_until", "paused_at", "limits", "updated_at")
    search_fields = ("=name",)
    readonly_fields = ("name", "paused_at", "paused_until", "updated_at")
    fields = readonly_fields
    actions = ("pause_queues", "pause_queues_briefly", "resume_queues")

    def _user_can(self, request: HttpRequest, action: str) -> bool:
        return any(
            request.user.has_perm(f"{opts.app_label}.{get_permission_codename(action, opts)}")
            for opts in (self.opts, Job._meta)
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._user_can(request, "view") or self._user_can(request, "change")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # As JobAdmin's: the actions for change_job, no form on a row's page.
        return obj is None and self._user_can(request, "change")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[QueueState]:
        return super().get_queryset(request).with_paused()  # type: ignore[attr-defined,no-any-return]

    def get_list_display(self, request: HttpRequest) -> Any:
        """The columns, and "held back": what flow control holds back in each queue now.

        Counted once per page (a few small queries, ``held_back.py``), not
        per row: a column method sees only its row, so it reads the counts
        of this request from a closure.
        """
        held = getattr(request, _HELD_BACK_ATTRIBUTE, None)
        if held is None:
            held = held_back(db.database_alias())
            setattr(request, _HELD_BACK_ATTRIBUTE, held)

        @admin.display(description=_("held back"))
        def held_back_now(obj: QueueState) -> str:
            return describe_held_back(held.get(obj.name, {})) or "-"

        after = self.list_display.index("limits") + 1
        return (*self.list_display[:after], held_back_now, *self.list_display[after:])

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        if request.method == "GET" and self.has_change_permission(request):
            self._add_known_queues()
        return super().changelist_view(request, extra_context)

    @staticmethod
    def _add_known_queues() -> None:
        alias = db.database_alias()
        names = {queue for queue, *_ in db.queue_depth(alias)} | set(
            parse_queues(jobs_settings.QUEUES)
        )
        QueueState.objects.using(alias).bulk_create(
            [QueueState(name=name) for name in sorted(names)], ignore_conflicts=True
        )

    @admin.display(description=_("paused"), boolean=True)
    def paused(self, obj: QueueState) -> bool:
        return bool(obj.is_paused)  # type: ignore[attr-defined]

    @admin.display(description=_("limits"))
    def limits(self, obj: QueueState) -> str:
        limits = queue_limits().get(obj.name)
        return describe_limits(None if limits is None else limits.as_dict()) or "-"

    def _pause(self, request: HttpRequest, queryset: QuerySet[Any], until: Any) -> None:
        names = list(queryset.values_list("name", flat=True))
        for name in names:
            pausing.pause_queue(name, until, using=queryset.db)
        self.message_user(
            request,
            ngettext("%(count)d queue was paused.", "%(count)d queues were paused.", len(names))
            % {"count": len(names)},
            messages.SUCCESS,
        )

    @admin.action(permissions=["change"], description=_("Pause selected queues"))
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._pause(request, queryset, None)

    @admin.action(permissions=["change"], description=_("Pause selected queues for 15 minutes"))
    def pause_queues_briefly(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._pause(request, queryset, ADMIN_PAUSE_FOR)

    @admin.action(permissions=["change"], description=_("Resume selected queues"))
    def resume_queues(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        names = list(queryset.values_list("name", flat=True))
        for name in names:
            pausing.resume_queue(name, using=queryset.db)
        self.message_user(
            request,
            ngettext("%(count)d queue was resumed.", "%(count)d queues were resumed.", len(names))
            % {"count": len(names)},
            messages.SUCCESS,
        )
