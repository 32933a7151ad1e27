"""The audit trail in the admin: its own read-only list, and the History pages.

A job's History page (and a queue's) lists the trail's entries for it,
newest first: ``history_context`` builds what the shared template
(``admin/durable_jobs/object_history.html``) shows.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from ..models import AuditEntry
from .bases import AuditModelAdmin

#: Entries a History page shows; the trail's own list has the rest.
HISTORY_LIMIT = 200


def history_context(entries: QuerySet[AuditEntry], **filters: str) -> dict[str, Any]:
    """``audit_entries`` (the newest ``HISTORY_LIMIT``) and a link to the whole list."""
    rows = list(entries[: HISTORY_LIMIT + 1])
    url = reverse("admin:durable_jobs_auditentry_changelist")
    return {
        "audit_entries": rows[:HISTORY_LIMIT],
        "audit_truncated": len(rows) > HISTORY_LIMIT,
        "audit_list_url": f"{url}?{urlencode(filters)}" if filters else url,
    }


@admin.register(AuditEntry)
class AuditEntryAdmin(AuditModelAdmin):
    """Every operator action, newest first; nothing here can be changed or deleted."""

    list_display = ("at", "actor", "door", "action", "job_link", "queue", "details_text")
    list_filter = ("action", "door")
    search_fields = ("=actor", "=queue")
    show_full_result_count = False
    ordering = ("-at", "-id")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def lookup_allowed(self, lookup: str, value: str, request: Any = None) -> bool:
        # ?job_id= and ?queue= (the History pages' links); nothing else typed in.
        return lookup in ("job_id", "queue", "action", "action__exact", "door", "door__exact")

    @admin.display(description=_("job"))
    def job_link(self, obj: AuditEntry) -> SafeString | str:
        if obj.job_id is None:
            return "-"
        url = reverse("admin:durable_jobs_job_change", args=[obj.job_id])
        return format_html('<a href="{}">{}</a>', url, obj.job_id)

    @admin.display(description=_("details"))
    def details_text(self, obj: AuditEntry) -> str:
        return obj.details_text if obj.details else ""
