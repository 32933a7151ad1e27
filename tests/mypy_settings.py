"""Settings for mypy's django-stubs plugin: the test settings, without a database server.

The plugin imports the settings and calls ``django.setup()`` to learn the
models, and never connects. ``tests.settings`` reads ``DATABASE_URL`` and,
where it is unset, starts the embedded PostgreSQL, which the type check has no
use for; a placeholder URL stands in for it then.
"""

from __future__ import annotations

import os

os.environ.setdefault("DATABASE_URL", "postgres://mypy@127.0.0.1:5432/type-check-never-connects")

from tests.settings import *  # noqa: F403

# django-prometheus (the example project's) requires Django < 6.1, the type
# check's Django, so tox's mypy environment does not install it; the package
# itself does not import it.
INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "django_prometheus"]  # noqa: F405
MIDDLEWARE = [name for name in MIDDLEWARE if not name.startswith("django_prometheus.")]  # noqa: F405
