"""Who may call the API: users holding the permission of the action they call.

One permission per operator action (``authorization.ACTION_PERMISSIONS``),
the same the admin and ``manage.py jobs`` check; reading needs
``view_job`` (or ``change_job``, which implies it, as in the admin);
enqueueing needs ``add_job``. Superusers hold them all. ``is_staff`` alone
grants nothing: it only opens the admin site's door.

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

from ..authorization import (
    ACTION_PERMISSIONS,
    AUDIT_READ_PERMISSION,
    ENQUEUE_PERMISSION,
    READ_PERMISSIONS,
    is_active_user,
)
from ..conf import jobs_settings

#: The permissions that allow each view's action (any one suffices), by the
#: view's ``permission_scope`` and DRF's ``action``.
SCOPED_PERMISSIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("jobs", "create"): (ENQUEUE_PERMISSION,),
    ("jobs", "list"): READ_PERMISSIONS,
    ("jobs", "retrieve"): READ_PERMISSIONS,
    ("jobs", "stats"): READ_PERMISSIONS,
    ("jobs", "requeue"): (ACTION_PERMISSIONS["requeue"],),
    ("jobs", "cancel"): (ACTION_PERMISSIONS["cancel"],),
    ("schedules", "list"): READ_PERMISSIONS,
    ("queues", "list"): READ_PERMISSIONS,
    ("queues", "pause"): (ACTION_PERMISSIONS["pause"],),
    ("queues", "resume"): (ACTION_PERMISSIONS["resume"],),
    ("audit", "list"): (AUDIT_READ_PERMISSION,),
    ("events", "create"): (ACTION_PERMISSIONS["emit"],),
}


class HasJobPermission(BasePermission):
    """The permission of the action called; an action not listed (OPTIONS) needs reading.

    DRF turns a refusal into 401 (no credentials) or 403 (not allowed).
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not is_active_user(user):
            return False
        scope = getattr(view, "permission_scope", "jobs")
        action = getattr(view, "action", None) or ""
        needed = SCOPED_PERMISSIONS.get((scope, action), READ_PERMISSIONS)
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
