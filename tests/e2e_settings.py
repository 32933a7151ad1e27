"""Settings for workers started as real processes by the e2e tests.

The example project's settings plus the test handlers; DATABASE_URL points
at the test database that pytest-django created.
"""

from __future__ import annotations

import os

from example_project.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]  # noqa: F405
DURABLE_JOBS = {"BACKOFF_BASE_SECONDS": 0.05, "BACKOFF_MAX_SECONDS": 1.0}
if "queue" in DATABASES:  # noqa: F405 (QUEUE_DATABASE_URL: tests/queue_database.py)
    DURABLE_JOBS["DATABASE"] = "queue"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_durable_jobs": {
            "handlers": ["console"],
            "level": os.environ.get("E2E_LOG_LEVEL", "WARNING"),
            "propagate": False,
        },
    },
}
