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
