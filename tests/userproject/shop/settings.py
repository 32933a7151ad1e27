"""Settings of a small shop that uses django-durable-jobs.

Not the package's test project: a user's, whose own tests
(``signups/tests.py``, ``signups/test_*.py``) call the testing helpers the
way ``docs/guides/testing.md`` shows. The database is PostgreSQL, found the
way libpq finds it (``PGHOST``, ``PGPORT``, ``PGUSER``, ``PGPASSWORD``);
its name is ``SHOP_DATABASE`` (pytest-django creates ``test_<name>``).
"""

from __future__ import annotations

import os

import django

SECRET_KEY = "only-for-this-projects-tests"
DEBUG = False
ALLOWED_HOSTS: list[str] = []

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django_durable_jobs",
    "signups",
]
# `@task` functions (signups/tasks.py) on the durable queue: Django's django.tasks
# from 6.0, the django-tasks backport (an app of its own) on Django 5.2.
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")
TASKS = {"default": {"BACKEND": "django_durable_jobs.tasks.backend.DurableJobsBackend"}}
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "shop.urls"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("SHOP_DATABASE", "shop"),
    }
}

USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
