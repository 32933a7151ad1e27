from __future__ import annotations

from django.contrib import admin

from .models import JobOutcome, Receipt


@admin.register(Receipt)
class ReceiptAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "order", "created_at")
    search_fields = ("order",)


@admin.register(JobOutcome)
class JobOutcomeAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("recorded_at", "type", "job_id", "outcome")
    list_filter = ("outcome",)
    search_fields = ("type",)
