"""Workers, from their heartbeats: live ones first, stale ones flagged; asleep or awake."""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib import admin
from django.db.models import DurationField, ExpressionWrapper, F, OuterRef, QuerySet, Subquery
from django.db.models.functions import Now
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..models import WorkerListener, WorkerProcess
from .bases import WorkerModelAdmin
from .humanize import describe_age


@admin.register(WorkerProcess)
class WorkerProcessAdmin(WorkerModelAdmin):
    """Workers, from their heartbeats; read-only (the workers own these rows).

    A worker is live while its last heartbeat is younger than its lease
    (``WorkerProcess.objects.with_liveness()``, the rule ``/api/health``
    counts by); the others are flagged stale: killed, or stopped without a
    goodbye, and forgotten a day later. Slots in use and the version are
    what the worker's last heartbeat said. "Listening" is the worker's mark
    in ``durable_jobs_listener`` (``WorkerListener``): asleep, it waits for a
    NOTIFY and enqueues of its queues send one; awake, it claims every few
    milliseconds on its own and they do not.
    """

    list_display = ("id", "host", "pid", "queue_list", "slots", "version", "started_at",
                    "last_heartbeat", "live", "heartbeat", "listening")  # fmt: skip
    search_fields = ("id", "host")
    readonly_fields = ("id", "host", "pid", "queues", "concurrency", "slots_in_use", "version",
                       "lease_seconds", "started_at", "last_heartbeat")  # fmt: skip

    @admin.display(description=_("queues"))
    def queue_list(self, obj: WorkerProcess) -> str:
        return ", ".join(obj.queues) if obj.queues else "*"

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkerProcess]:
        # Liveness by the rule /api/health counts by (WorkerProcess.objects.alive()),
        # and the heartbeat's age, both by the database's clock.
        listener = WorkerListener.objects.filter(worker_id=OuterRef("pk"))
        return WorkerProcess.objects.with_liveness().annotate(
            heartbeat_age=ExpressionWrapper(
                Now() - F("last_heartbeat"), output_field=DurationField()
            ),
            listener_sleeping=Subquery(listener.values("sleeping")[:1]),
            listener_age=Subquery(
                listener.annotate(
                    age=ExpressionWrapper(Now() - F("changed_at"), output_field=DurationField())
                ).values("age")[:1]
            ),
        )

    def get_ordering(self, request: HttpRequest) -> tuple[str, ...]:
        return ("-is_alive", "id")

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        return super().changelist_view(request, {"title": _("Workers"), **(extra_context or {})})

    @admin.display(description=_("slots in use"))
    def slots(self, obj: WorkerProcess) -> str:
        return f"{obj.slots_in_use} / {obj.concurrency}"

    @admin.display(description=_("live"), boolean=True)
    def live(self, obj: WorkerProcess) -> bool:
        return bool(obj.is_alive)  # type: ignore[attr-defined]

    @admin.display(description=_("heartbeat"))
    def heartbeat(self, obj: WorkerProcess) -> SafeString | str:
        """How long ago the last heartbeat was; for a stale worker, flagged."""
        age: datetime.timedelta | None = getattr(obj, "heartbeat_age", None)
        ago = gettext("%(age)s ago") % {"age": describe_age(age)} if age is not None else "-"
        if obj.is_alive:  # type: ignore[attr-defined]
            return ago
        return format_html(
            '<strong style="color: var(--error-fg)">{}</strong> {}', gettext("stale"), ago
        )

    @admin.display(description=_("listening"))
    def listening(self, obj: WorkerProcess) -> str:
        """Asleep (woken by NOTIFY) or awake (claiming on its own), and for how long.

        No mark: a ``--burst`` worker (it does not listen), one whose LISTEN
        connection is not connected, or one older than migration 0006.
        """
        sleeping: bool | None = getattr(obj, "listener_sleeping", None)
        if sleeping is None:
            return "-"
        age = describe_age(getattr(obj, "listener_age", None))
        if sleeping:
            return gettext("asleep, woken by NOTIFY (%(age)s)") % {"age": age}
        return gettext("awake, claiming on its own every few ms (%(age)s)") % {"age": age}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
