"""Test settings: the example project's, with faster password hashing.

The database is ``DATABASE_URL``, or the embedded PostgreSQL when unset;
pytest-django creates ``test_<name>`` in it.
"""

from __future__ import annotations

from example_project.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGGING = {"version": 1, "disable_existing_loggers": False}

# A second, non-PostgreSQL database: the checks' tests route the job table to
# it to see durable_jobs.E001. No test queries it.
DATABASES = {
    **DATABASES,  # noqa: F405
    "sqlite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}

# Test handlers and the Execution table that counts their runs.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]  # noqa: F405
