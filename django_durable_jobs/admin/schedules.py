"""Periodic jobs: declarations beside their ticks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..models import ScheduleState
from ..schedules import Schedule, find_schedule, load_schedules
from ..schedules.overview import effective_queue
from .bases import ScheduleModelAdmin

if TYPE_CHECKING:
    from django_stubs_ext import StrPromise


@admin.register(ScheduleState)
class ScheduleStateAdmin(ScheduleModelAdmin):
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
