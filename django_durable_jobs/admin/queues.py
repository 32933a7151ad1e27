"""Queues: what each holds, its last hour, its limits and paused state; pause and resume."""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from .. import audit, db, doctor, pausing
from ..authorization import Actor, user_can
from ..exceptions import InvalidPause
from ..flow import describe_limits, queue_limits
from ..held_back import describe_held_back, held_back
from ..models import Job, QueueState
from ..queue_overview import EXACT_COUNT_CAP, known_queues, queue_overview
from .audit import history_context
from .bases import QueueModelAdmin
from .charts import throughput_svg
from .humanize import describe_age

#: Where QueueStateAdmin keeps a request's held-back counts (see get_list_display).
_HELD_BACK_ATTRIBUTE = "_durable_jobs_held_back"
#: Where QueueChangeList keeps the overview of the queues of the page it shows.
_OVERVIEW_ATTRIBUTE = "_durable_jobs_queue_overview"
#: "Pause for 15 minutes": the admin's one pause with an end time.
ADMIN_PAUSE_FOR = datetime.timedelta(minutes=15)
#: The counts shown, each linking to the job list filtered to it, with their headers.
COUNTED_STATUSES = {
    "pending": _("pending"),
    "running": _("running"),
    "waiting": _("waiting"),
    "dead": _("dead"),
}
CONFIRM_TEMPLATE = "admin/durable_jobs/queuestate/confirm_queue_change.html"


class QueueChangeList(ChangeList):
    """The changelist, which reads the overview of the queues on its page once."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        names = [row.name for row in self.result_list]
        setattr(request, _OVERVIEW_ATTRIBUTE, queue_overview(names, using=self.queryset.db))


def jobs_url(queue: str, status: str) -> str:
    """The job list filtered to ``queue`` and ``status`` (its queue and status filters)."""
    query = urlencode({"queue": queue, "status__exact": status})
    return f"{reverse('admin:durable_jobs_job_changelist')}?{query}"


@admin.register(QueueState)
class QueueStateAdmin(QueueModelAdmin):
    """The queues: what each holds (pending, running, waiting, dead), its oldest pending
    job, its last hour, its limits and what these hold back now, its paused state; pause
    and resume, per row or as actions on the selected rows.

    A queue gets a row here once it is declared in ``QUEUES``, holds
    pending, running, waiting or dead jobs, had outcomes within the last
    hour, or was paused: opening the list adds the missing rows.
    Permissions: ``view_job`` shows the list (or the same on this model),
    ``pause_queue`` adds the controls. No field is editable: the controls
    call ``pausing.py``, which tells the workers and records who did it in
    the audit trail (the queue's page and its History page list them).
    """

    list_display = ("name", "paused", "limits", "paused_until")
    list_display_links = ("name",)
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
        # As JobAdmin's: no form on a row's page; pausing has its own permission.
        return False

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return user_can(request.user, "pause")

    def _audit_context(self, object_id: str) -> dict[str, Any]:
        name = unquote(object_id)
        return history_context(audit.entries(using=db.database_alias(), queue=name), queue=name)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The queue's page: its state and the operator actions on it, newest first."""
        context = {**(extra_context or {}), **self._audit_context(object_id)}
        return super().change_view(request, object_id, form_url, context)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), **self._audit_context(object_id)}
        return super().history_view(request, object_id, context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[QueueState]:
        return super().get_queryset(request).with_paused()  # type: ignore[attr-defined,no-any-return]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return QueueChangeList

    # -- the list -------------------------------------------------------------

    def get_list_display(self, request: HttpRequest) -> Any:
        """The columns: the counts, the oldest pending job, the last hour, "held back" and,
        for users who may pause, the controls.

        Each is a closure over this request: a column method sees only its
        row, and the overview (``QueueChangeList``) and the held-back
        counts (``held_back.py``) are read once per page, not per row.
        """
        held = getattr(request, _HELD_BACK_ATTRIBUTE, None)
        if held is None:
            held = held_back(db.database_alias())
            setattr(request, _HELD_BACK_ATTRIBUTE, held)

        def overview_of(obj: QueueState) -> Any:
            return getattr(request, _OVERVIEW_ATTRIBUTE, {}).get(obj.name)

        def count_column(status: str) -> Any:
            @admin.display(description=COUNTED_STATUSES[status])
            def column(obj: QueueState) -> SafeString | str:
                overview = overview_of(obj)
                if overview is None:
                    return "-"
                count = overview.count(status)
                title = (
                    gettext("PostgreSQL's estimate: more than %(cap)s jobs")
                    % {"cap": f"{EXACT_COUNT_CAP:,}"}
                    if count.estimated
                    else ""
                )
                return format_html(
                    '<a href="{}" title="{}">{}</a>', jobs_url(obj.name, status), title, str(count)
                )

            column.__name__ = f"{status}_jobs"
            return column

        @admin.display(description=_("oldest pending"))
        def oldest_pending(obj: QueueState) -> str:
            overview = overview_of(obj)
            return describe_age(None if overview is None else overview.oldest_pending)

        @admin.display(description=_("last hour"))
        def last_hour(obj: QueueState) -> SafeString | str:
            overview = overview_of(obj)
            if overview is None:
                return "-"
            return format_html(
                '{}<br><span class="help">{}</span>',
                throughput_svg(overview.minutes),
                gettext("%(completed)s done, %(failed)s failed")
                % {
                    "completed": f"{overview.completed_last_hour:,}",
                    "failed": f"{overview.failed_last_hour:,}",
                },
            )

        @admin.display(description=_("held back"))
        def held_back_now(obj: QueueState) -> str:
            return describe_held_back(held.get(obj.name, {})) or "-"

        columns: list[Any] = [
            "name",
            "paused",
            *(count_column(status) for status in COUNTED_STATUSES),
            oldest_pending,
            last_hour,
            "limits",
            held_back_now,
            "paused_until",
        ]
        if self.has_pause_permission(request):
            columns.append(self.controls)
        return tuple(columns)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        if request.method == "GET" and self.has_view_permission(request):
            self._add_known_queues()
            self._horizon_notice(request)
        extra_context = {"title": _("Queues"), **(extra_context or {})}
        return super().changelist_view(request, extra_context)

    def _horizon_notice(self, request: HttpRequest) -> None:
        """Say so when the vacuum horizon is why the queues are slow: held past
        ``HEALTH_HORIZON_AGE_SECONDS`` while a job table's dead tuples are high."""
        thresholds = doctor.Thresholds.from_settings()
        try:
            reading = doctor.read(db.database_alias(), jobs=False)
        except DatabaseError:  # the page itself will say the database is down
            return
        holder = doctor.oldest_holder(reading)
        if holder is None or not doctor.horizon_slows_queue(reading, thresholds):
            return
        tables = ", ".join(
            f"{table.table} ({table.dead_ratio:.0%} dead, {table.dead:,} rows)"
            for table in doctor.high_dead_tuples(reading, thresholds)
        )
        self.message_user(
            request,
            gettext(
                "The queue is slowed by the database's vacuum horizon: %(holder)s has held a "
                "transaction open for %(age)s, so vacuum cannot remove the dead rows of "
                "%(tables)s, and every claim reads through them. End that transaction; "
                "`manage.py jobs doctor` says how."
            )
            % {
                "holder": doctor.describe_holder(holder),
                "age": doctor.describe_seconds(holder.age_seconds),
                "tables": tables,
            },
            messages.WARNING,
        )

    @staticmethod
    def _add_known_queues() -> None:
        alias = db.database_alias()
        QueueState.objects.using(alias).bulk_create(
            [QueueState(name=name) for name in sorted(known_queues(alias))],
            ignore_conflicts=True,
        )

    @admin.display(description=_("paused"), boolean=True)
    def paused(self, obj: QueueState) -> bool:
        return bool(obj.is_paused)  # type: ignore[attr-defined]

    @admin.display(description=_("limits"))
    def limits(self, obj: QueueState) -> str:
        limits = queue_limits().get(obj.name)
        return describe_limits(None if limits is None else limits.as_dict()) or "-"

    @admin.display(description=_("pause or resume"))
    def controls(self, obj: QueueState) -> SafeString:
        """A link to the confirmation page of the change this row's state allows."""
        if obj.is_paused:  # type: ignore[attr-defined]
            verb, label = "resume", _("Resume…")
        else:
            verb, label = "pause", _("Pause…")
        url = reverse(f"admin:durable_jobs_queuestate_{verb}", args=[quote(obj.name)])
        return format_html('<a class="button" href="{}">{}</a>', url, label)

    # -- pause and resume, one queue: a confirmation page, then a POST --------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        own = [
            path(
                f"<path:object_id>/{verb}/",
                self.admin_site.admin_view(getattr(self, f"{verb}_view")),
                name="{}_{}_{}".format(*info, verb),
            )
            for verb in ("pause", "resume")
        ]
        # Before the admin's own: its "<path:object_id>/" would take these.
        return own + super().get_urls()

    def pause_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET), then pause the queue (POST): until resumed, or for 15 minutes."""
        return self._change_view(request, object_id, "pause")

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET), then resume the queue (POST)."""
        return self._change_view(request, object_id, "resume")

    def _change_view(self, request: HttpRequest, object_id: str, verb: str) -> HttpResponse:
        # The admin's view wrapper checked the login and the CSRF token of a POST.
        if not self.has_pause_permission(request):
            raise PermissionDenied
        state = self.get_object(request, unquote(object_id))
        if state is None:
            raise Http404(
                gettext("No queue %(name)r has a row here.") % {"name": unquote(object_id)}
            )
        changelist = reverse("admin:durable_jobs_queuestate_changelist")
        if request.method == "POST":
            try:
                self._apply(request, state, verb)
            except InvalidPause as exc:
                self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(changelist)
        overview = queue_overview([state.name], using=db.database_alias()).get(state.name)
        context = {
            **self.admin_site.each_context(request),
            "title": (
                gettext("Pause queue “%(name)s”?")
                if verb == "pause"
                else gettext("Resume queue “%(name)s”?")
            )
            % {"name": state.name},
            "opts": self.opts,
            "queue": state,
            "verb": verb,
            "overview": overview,
            "pause_for_minutes": int(ADMIN_PAUSE_FOR.total_seconds() // 60),
            "changelist_url": changelist,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, CONFIRM_TEMPLATE, context)

    def _apply(self, request: HttpRequest, state: QueueState, verb: str) -> None:
        alias = db.database_alias()
        actor = Actor.from_request(request, "admin")
        if verb == "resume":
            pausing.resume_queue(state.name, using=alias, actor=actor)
            message = gettext("Queue “%(name)s” was resumed.")
        elif "_pause_briefly" in request.POST:
            pausing.pause_queue(state.name, ADMIN_PAUSE_FOR, using=alias, actor=actor)
            message = gettext("Queue “%(name)s” was paused for %(minutes)d minutes.")
        else:
            pausing.pause_queue(state.name, None, using=alias, actor=actor)
            message = gettext("Queue “%(name)s” was paused until resumed.")
        minutes = int(ADMIN_PAUSE_FOR.total_seconds() // 60)
        self.message_user(
            request, message % {"name": state.name, "minutes": minutes}, messages.SUCCESS
        )

    # -- actions on the selected rows ------------------------------------------

    def _pause(self, request: HttpRequest, queryset: QuerySet[Any], until: Any) -> None:
        names = list(queryset.values_list("name", flat=True))
        actor = Actor.from_request(request, "admin")
        for name in names:
            pausing.pause_queue(name, until, using=queryset.db, actor=actor)
        self.message_user(
            request,
            ngettext("%(count)d queue was paused.", "%(count)d queues were paused.", len(names))
            % {"count": len(names)},
            messages.SUCCESS,
        )

    @admin.action(permissions=["pause"], description=_("Pause selected queues"))
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._pause(request, queryset, None)

    @admin.action(permissions=["pause"], description=_("Pause selected queues for 15 minutes"))
    def pause_queues_briefly(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._pause(request, queryset, ADMIN_PAUSE_FOR)

    @admin.action(permissions=["pause"], description=_("Resume selected queues"))
    def resume_queues(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        names = list(queryset.values_list("name", flat=True))
        actor = Actor.from_request(request, "admin")
        for name in names:
            pausing.resume_queue(name, using=queryset.db, actor=actor)
        self.message_user(
            request,
            ngettext("%(count)d queue was resumed.", "%(count)d queues were resumed.", len(names))
            % {"count": len(names)},
            messages.SUCCESS,
        )
