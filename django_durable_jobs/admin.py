"""A read-only view of the job table.

Operators' actions (requeue, cancel, run now) and the dead-jobs entry come
with the admin release; this view lets the demo and early users look.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "id",
        "type",
        "queue",
        "status",
        "priority",
        "attempts",
        "max_attempts",
        "available_at",
        "created_at",
    )
    list_filter = ("status", "queue")
    search_fields = ("=id", "type", "=idempotency_key")
    ordering = ("-created_at",)
    # A COUNT(*) over millions of rows would make every page slow.
    show_full_result_count = False
    readonly_fields = [field.name for field in Job._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
