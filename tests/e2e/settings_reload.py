"""Worker settings for tests/e2e/test_reload.py: the e2e settings, INFO logs, and an app
of the test's own when ``E2E_EXTRA_APP`` names one (a package the test writes into a
temporary directory on ``PYTHONPATH``: its handlers change, no tracked file does)."""

from __future__ import annotations

import os

from tests.e2e_settings import *  # noqa: F403

if os.environ.get("E2E_EXTRA_APP"):
    INSTALLED_APPS = [*INSTALLED_APPS, os.environ["E2E_EXTRA_APP"]]  # noqa: F405
LOGGING["loggers"]["django_durable_jobs"]["level"] = "INFO"  # noqa: F405
