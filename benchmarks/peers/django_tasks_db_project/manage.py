"""manage.py of the django-tasks-db side: ``db_worker`` and ``migrate`` run through it.

Runs only with ``benchmarks/peers/.venv-django-tasks-db/bin/python``, from
this directory (``run.py`` starts it so); the settings are ``settings.py``
beside it.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
