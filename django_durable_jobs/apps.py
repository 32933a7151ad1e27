from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _

from . import hooks
from .tasks import TASKS_AVAILABLE, bridge


class DurableJobsConfig(AppConfig):
    name = "django_durable_jobs"
    label = "durable_jobs"
    verbose_name = _("Durable jobs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .tasks import checks as tasks_checks  # noqa: F401  (durable_jobs.E108)

        # Handlers live in each app's `jobs` module, as admin classes live
        # in `admin.py`; importing them fills the registry.
        autodiscover_modules("jobs")
        # DURABLE_JOBS["RUN_IMMEDIATELY"], read at each enqueue (override_settings works).
        from . import immediate

        hooks.add_enqueue_listener(immediate.jobs_enqueued)
        # The core never imports the Django Tasks integration: it calls the
        # hooks, and this is where the two meet. Without a Tasks API
        # (Django < 6.0 without the django-tasks backport; tasks/compat.py
        # decides) no row can be a task, so nothing is registered.
        if TASKS_AVAILABLE:
            hooks.add_handler_resolver(bridge.task_handler)
            hooks.add_finished_listener(bridge.announce_finished)
            hooks.add_concurrency_limits(bridge.task_concurrency_limits)
