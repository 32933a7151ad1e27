"""Queues: paused state, limits, what they hold back; pause and resume."""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import db, pausing
from ..conf import jobs_settings
from ..flow import describe_limits, parse_queues, queue_limits
from ..held_back import describe_held_back, held_back
from ..models import Job, QueueState
from .bases import QueueModelAdmin

#: Where QueueStateAdmin keeps a request's held-back counts (see get_list_display).
_HELD_BACK_ATTRIBUTE = "_durable_jobs_held_back"
#: "Pause for 15 minutes": the admin's one pause with an end time.
ADMIN_PAUSE_FOR = datetime.timedelta(minutes=15)


@admin.register(QueueState)
class QueueStateAdmin(QueueModelAdmin):
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
