"""Who may call the API: staff, or users holding the ``Job`` model permissions.

Secure by default: every endpoint but health needs an authenticated user.
Projects swap the rule through ``DURABLE_JOBS["API_PERMISSION_CLASSES"]``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from ..conf import jobs_settings

#: The model permissions that allow each viewset action (any one suffices).
#: As in the admin, ``change_job`` also allows reading. ``list`` is also the
#: action of ``GET /api/schedules`` and ``GET /api/queues``: whoever may list
#: jobs may list schedules and queues.
ACTION_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "create": ("durable_jobs.add_job",),
    "requeue": ("durable_jobs.change_job",),
    "cancel": ("durable_jobs.change_job",),
    "list": ("durable_jobs.view_job", "durable_jobs.change_job"),
    "retrieve": ("durable_jobs.view_job", "durable_jobs.change_job"),
    "stats": ("durable_jobs.view_job", "durable_jobs.change_job"),
    # /api/queues: listing is ``list``'s; pausing and resuming change jobs' fate.
    "pause": ("durable_jobs.change_job",),
    "resume": ("durable_jobs.change_job",),
}


class IsStaffOrHasJobPermission(BasePermission):
    """Staff may do everything; other users need the action's model permission.

    An action missing from ``ACTION_PERMISSIONS`` (OPTIONS, say) is staff only.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if user is None or not user.is_authenticated or not user.is_active:
            return False
        if user.is_staff:
            return True
        needed = ACTION_PERMISSIONS.get(getattr(view, "action", None) or "", ())
        return any(user.has_perm(perm) for perm in needed)


@lru_cache(maxsize=8)
def _load(paths: tuple[str, ...]) -> tuple[type[BasePermission], ...]:
    classes = []
    for path in paths:
        try:
            classes.append(import_string(path))
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"DURABLE_JOBS['API_PERMISSION_CLASSES']: cannot import {path!r}: {exc}"
            ) from exc
    return tuple(classes)


def permission_classes() -> tuple[type[BasePermission], ...]:
    """The configured classes, read on each request so ``override_settings`` works."""
    return _load(tuple(jobs_settings.API_PERMISSION_CLASSES))
