"""A project as a user writes it: the app from the installed wheel, the admin, the REST API.

Nothing here comes from the checkout: the wheel's migrations, templates and SQL
are the ones that run. DATABASE_URL is a throwaway database .ci/check-wheel made.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

url = urlsplit(os.environ["DATABASE_URL"])

SECRET_KEY = "wheel-smoke-test-only"  # noqa: S105 (a throwaway project)
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1"]
ROOT_URLCONF = "smoke.urls"
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_durable_jobs",
    "smoke_app",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(url.path.lstrip("/")),
        "USER": unquote(url.username or ""),
        "PASSWORD": unquote(url.password or ""),
        "HOST": url.hostname or "",
        "PORT": str(url.port or ""),
    }
}
