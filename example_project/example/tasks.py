"""Django Tasks (Django >= 6.0) run by the durable queue's worker.

Enqueue with ``add.enqueue(2, 3)``; ``manage.py runjobworker`` runs it and
``add.get_result(result.id).return_value`` is then ``5``. Django 5.2 has
no ``django.tasks``: importing this module there raises an ImportError
that says so (nothing imports it automatically).
"""

from __future__ import annotations

import django

if django.VERSION < (6, 0):
    raise ImportError(
        f"example.tasks needs Django >= 6.0 (django.tasks); this is Django "
        f"{django.get_version()}. The @job handlers in example.jobs work on any version."
    )

from django.tasks import task


@task
def add(a: int, b: int) -> int:
    """Returns ``a + b``: the smallest task that shows a return value."""
    return a + b
