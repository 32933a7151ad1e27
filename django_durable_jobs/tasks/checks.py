"""``durable_jobs.E108``: ``TASKS`` names the backend, but this process has no Tasks API.

Without ``django.tasks`` (Django < 6.0) and without the ``django-tasks``
backport, nothing reads ``TASKS`` at all: a project that configured
``DurableJobsBackend`` there would see no error, and no task would ever
be enqueued through it. This check says so at ``manage.py check``. The
backend's own checks (E101 to E107) run through the Tasks API's check,
so they cannot report this one. Registered by importing this module
(``AppConfig.ready()``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core import checks

from . import compat

#: How settings name the backend.
BACKEND_PATH = "django_durable_jobs.tasks.backend.DurableJobsBackend"

E108 = (
    "TASKS[{alias!r}] uses DurableJobsBackend, but this process has no Django Tasks API "
    "(Django {version} has no django.tasks, and the django-tasks backport is not installed)."
)
E108_HINT = (
    "On Django 5.2: pip install 'django-durable-jobs[tasks]' and add 'django_tasks' to "
    "INSTALLED_APPS; or upgrade to Django >= 6.0."
)


@checks.register(checks.Tags.compatibility)
def check_tasks_api(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """One E108 per ``TASKS`` alias naming the backend, when no Tasks API is in use."""
    if compat.TASKS_AVAILABLE:
        return []
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, Mapping):
        return []
    import django

    return [
        checks.Error(
            E108.format(alias=alias, version=django.get_version()),
            hint=E108_HINT,
            id="durable_jobs.E108",
        )
        for alias, params in tasks.items()
        if isinstance(params, Mapping) and params.get("BACKEND") == BACKEND_PATH
    ]
