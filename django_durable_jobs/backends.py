"""The Django Tasks backend, for ``TASKS``' ``BACKEND``.

``TASKS = {"default": {"BACKEND": "django_durable_jobs.backends.DurableJobsBackend"}}``

The public path of the Django Tasks integration, which lives in
``django_durable_jobs.tasks``: this dotted path is in users' settings and
never changes. ``django.tasks`` arrived in Django 6.0. On older versions
this module still imports (so code that mentions it, and the rest of the
app, keep working), and asking for ``DurableJobsBackend`` raises
``ImproperlyConfigured`` saying what is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import django
from django.core.exceptions import ImproperlyConfigured

from .tasks import TASKS_AVAILABLE
from .tasks.options import TaskOptions, current_task_options, task_options
from .tasks.waiting import await_result, wait_result

if TYPE_CHECKING:
    from .tasks.backend import DurableJobsBackend

__all__ = [
    "DurableJobsBackend",
    "TaskOptions",
    "await_result",
    "current_task_options",
    "task_options",
    "wait_result",
]


def __getattr__(name: str) -> Any:
    if name != "DurableJobsBackend":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not TASKS_AVAILABLE:
        raise ImproperlyConfigured(
            "django_durable_jobs.backends.DurableJobsBackend needs Django >= 6.0 "
            f"(django.tasks); this is Django {django.get_version()}. Enqueue with "
            "django_durable_jobs.enqueue() instead, or upgrade Django."
        )
    # Imported on first use: the module needs django.tasks (Django >= 6.0).
    from .tasks.backend import DurableJobsBackend

    return DurableJobsBackend
