"""Worker settings for tests/e2e/test_time_limits.py: the e2e settings, a 3 s grace."""

from __future__ import annotations

from tests.e2e_settings import *  # noqa: F403

DURABLE_JOBS = {**DURABLE_JOBS, "TIMEOUT_GRACE_SECONDS": 3.0}  # noqa: F405
LOGGING["loggers"]["django_durable_jobs"]["level"] = "INFO"  # noqa: F405
