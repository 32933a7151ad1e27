"""Settings of the django-tasks-db side: a Django project with one no-op task, nothing else.

django-tasks-db's worker (``manage.py db_worker``) needs a Django project of
its own; this is the smallest one: its two apps (``django_tasks``, the
backport of ``django.tasks`` that Django 5.2 needs, and ``django_tasks_db``),
its ``DatabaseBackend`` as the default task backend, and the database of
``DATABASE_URL``. The database settings are those of our example project
(``CONN_MAX_AGE`` 60, health checks on), so both workers meet the same
connection handling; ``BENCH_HEALTH_CHECKS=0`` turns the checks off (a
setting of the benchmark's sweep: ``db_worker`` calls
``close_old_connections()`` around every task, and a health check is a round
trip each time).
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_url = urlsplit(os.environ["DATABASE_URL"])

SECRET_KEY = "benchmark-only"  # noqa: S105 (a benchmark's project: nothing is signed)
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django_tasks", "django_tasks_db"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "",
        "PASSWORD": _url.password or "",
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": os.environ.get("BENCH_HEALTH_CHECKS", "1") != "0",
    }
}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}}
