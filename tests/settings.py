"""Test settings: the example project's, with faster password hashing.

The database is ``DATABASE_URL``, or the embedded PostgreSQL when unset;
pytest-django creates ``test_<name>`` in it.
"""

from __future__ import annotations

import django
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

# The Tasks backend's tests (tests/testapp/tasks.py), with django.tasks on
# Django >= 6.0 and the django-tasks backport (TASKS_BACKPORT, the example
# project's) on Django 5.2. A second queue for queue tests; an immediate
# backend to show that the worker runs only tasks of a DurableJobsBackend.
TASKS_API = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
if django.VERSION >= (6, 0) or TASKS_BACKPORT:  # noqa: F405
    TASKS = {
        "default": {
            "BACKEND": "django_durable_jobs.tasks.backend.DurableJobsBackend",
            "QUEUES": ["default", "other"],
            "OPTIONS": {"max_attempts": 3},
        },
        "immediate": {"BACKEND": f"{TASKS_API}.backends.immediate.ImmediateBackend"},
    }

# DURABLE_JOBS_TEST_QUEUE_DATABASE=1: the queue on a database of its own
# (tests/queue_database.py; tox's queuedb environment).
from tests import queue_database  # noqa: E402

queue_database.add_alias(DATABASES)
if queue_database.enabled():
    queue_database.configure(globals())

# A mirror of the queue's database (the default one, or the queue alias in
# the mode above) under another name, which tests give LISTEN_DATABASE: its
# connections show in pg_stat_activity by their application_name. A NOTIFY
# reaches only the sessions of its own database, so it mirrors the queue's.
# No test queries it through Django.
_QUEUE_ALIAS = DURABLE_JOBS.get("DATABASE") or "default"  # noqa: F405
DATABASES["listen"] = {
    **DATABASES[_QUEUE_ALIAS],
    "OPTIONS": {
        **DATABASES[_QUEUE_ALIAS].get("OPTIONS", {}),
        "application_name": "durable_jobs_listen",
    },
    "TEST": {"MIRROR": _QUEUE_ALIAS},
}
