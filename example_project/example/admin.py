from __future__ import annotations

from django.contrib import admin

from .models import Receipt


@admin.register(Receipt)
class ReceiptAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("id", "order", "created_at")
    search_fields = ("order",)
