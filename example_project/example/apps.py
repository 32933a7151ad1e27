from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class ExampleConfig(AppConfig):
    name = "example"
    verbose_name = "Example"

    def ready(self) -> None:
        # Opt-in: with a receiver connected, every outcome costs the worker an
        # insert, and the benchmarks run on this project without one.
        if getattr(settings, "EXAMPLE_RECORD_OUTCOMES", False):
            from django_durable_jobs.signals import job_finished

            from .receivers import record_outcome

            job_finished.connect(record_outcome, dispatch_uid="example.record_outcome")
