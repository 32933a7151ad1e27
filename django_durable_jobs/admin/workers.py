"""Workers, from their heartbeats."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..models import WorkerProcess
from .bases import WorkerModelAdmin


@admin.register(WorkerProcess)
class WorkerProcessAdmin(WorkerModelAdmin):
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
