"""Who may do what to jobs and queues: one permission per operator action.

Every door (the admin, the REST API, ``manage.py jobs``) asks this module,
so an action is allowed, or refused, the same way wherever it comes in.
Superusers hold every permission (``user.has_perm``); ``is_staff`` alone
grants nothing here: it only lets a user into the admin site.

An ``Actor`` is who is acting and through which door; ``audit.record``
writes it down with what was done.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
    from django.http import HttpRequest

    AnyUser = AbstractBaseUser | AnonymousUser

APP_LABEL = "durable_jobs"

#: The custom permissions of the ``Job`` model (DESIGN.md, "Security and audit").
JOB_PERMISSIONS = (
    ("requeue_job", "Can requeue jobs (and retry them from a step)"),
    ("cancel_job", "Can cancel jobs"),
    ("run_job_now", "Can run pending jobs now"),
    ("pause_queue", "Can pause and resume queues"),
    ("emit_event", "Can emit events"),
)

#: Operator action -> the permission it needs. The keys are also the
#: ``action`` of the audit trail's entries.
ACTION_PERMISSIONS: dict[str, str] = {
    "requeue": f"{APP_LABEL}.requeue_job",
    "retry_from_step": f"{APP_LABEL}.requeue_job",
    "bulk_requeue": f"{APP_LABEL}.requeue_job",
    "cancel": f"{APP_LABEL}.cancel_job",
    "bulk_cancel": f"{APP_LABEL}.cancel_job",
    "run_now": f"{APP_LABEL}.run_job_now",
    "pause": f"{APP_LABEL}.pause_queue",
    "resume": f"{APP_LABEL}.pause_queue",
    "emit": f"{APP_LABEL}.emit_event",
}

#: Reading jobs (lists, details, stats, queues, schedules). ``change_job``
#: implies it, as in Django's admin.
READ_PERMISSIONS = (f"{APP_LABEL}.view_job", f"{APP_LABEL}.change_job")
#: Enqueueing over REST.
ENQUEUE_PERMISSION = f"{APP_LABEL}.add_job"
#: Reading the audit trail (REST, the admin's list of entries).
AUDIT_READ_PERMISSION = f"{APP_LABEL}.view_auditentry"

#: The doors an action comes in through, as the trail records them.
DOORS = ("admin", "rest", "cli", "python")


def is_active_user(user: Any) -> bool:
    return user is not None and bool(getattr(user, "is_authenticated", False)) and user.is_active


def user_can(user: Any, action: str) -> bool:
    """Whether ``user`` may perform operator ``action`` (a key of ``ACTION_PERMISSIONS``)."""
    return is_active_user(user) and user.has_perm(ACTION_PERMISSIONS[action])


def user_can_read(user: Any) -> bool:
    return is_active_user(user) and any(user.has_perm(perm) for perm in READ_PERMISSIONS)


@dataclass(frozen=True)
class Actor:
    """Who acts, through which door: what the audit trail records as "who".

    ``user`` is the Django user when there is one (the admin, REST, the
    CLI's ``--user``); ``name`` is what the trail shows: the username,
    ``token:<username>`` for a DRF token, ``os:<login>`` for the CLI
    without ``--user``. ``address`` is the client's, for web doors.
    """

    door: str
    name: str
    user: Any = None
    address: str | None = None

    @property
    def user_pk(self) -> str | None:
        return None if self.user is None else str(self.user.pk)

    def can(self, action: str) -> bool:
        """``user_can``; an actor without a user (the CLI as an OS user) may do anything.

        Whoever runs ``manage.py`` holds the project's database credentials:
        no permission check can stop them, so the CLI checks a Django user's
        permissions only when one is named (``--user``, or required by
        ``CLI_REQUIRE_USER``). The trail records the OS login either way.
        """
        if self.user is None:
            return self.door in ("cli", "python")
        return user_can(self.user, action)

    def require(self, action: str) -> None:
        """Raise ``PermissionDenied`` unless this actor may perform ``action``."""
        if not self.can(action):
            raise PermissionDenied(
                f"{self.name} lacks the permission {ACTION_PERMISSIONS[action]} "
                f"needed to {action.replace('_', ' ')}."
            )

    @classmethod
    def from_request(cls, request: HttpRequest | Any, door: str) -> Actor:
        """The request's user; a DRF token shows as ``token:<username>``."""
        user = request.user
        name = user.get_username() if is_active_user(user) else "anonymous"
        auth = getattr(request, "auth", None)
        if auth is not None and not isinstance(auth, (str, bytes)) and hasattr(auth, "key"):
            name = f"token:{name}"
        return cls(door=door, name=name, user=user, address=client_address(request))

    @classmethod
    def for_os_user(cls, door: str = "cli", user: Any = None) -> Actor:
        """The CLI's (or a script's) actor: the OS login, and the Django user if named."""
        login = os_login()
        if user is None:
            return cls(door=door, name=f"os:{login}")
        return cls(door=door, name=f"{user.get_username()} (os:{login})", user=user)


def os_login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, no LOGNAME: a container's uid
        return f"uid={os.getuid()}" if hasattr(os, "getuid") else "unknown"


def client_address(request: Any) -> str | None:
    """``REMOTE_ADDR``: what this process saw (behind a proxy, the proxy's)."""
    meta = getattr(request, "META", None)
    if meta is None:  # a DRF Request
        meta = getattr(getattr(request, "_request", None), "META", {})
    address = meta.get("REMOTE_ADDR")
    return str(address) if address else None
