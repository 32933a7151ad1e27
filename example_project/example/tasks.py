"""Django Tasks run by the durable queue's worker, on Django 6 and on Django 5.2.

Enqueue with ``add.enqueue(2, 3)``; ``manage.py runjobworker`` runs it and
``add.get_result(result.id).return_value`` is then ``5``. Django 6 has
``django.tasks``; on Django 5.2 the same API comes from the ``django-tasks``
backport (``pip install 'django-durable-jobs[tasks]'``), imported as
``django_tasks``. Without either, importing this module raises an
ImportError that says so (nothing imports it automatically).
"""

from __future__ import annotations

import django

try:
    from django.tasks import task  # Django >= 6.0
except ImportError:
    try:
        from django_tasks import task  # Django 5.2 with the django-tasks backport
    except ImportError as error:
        raise ImportError(
            f"example.tasks needs Django >= 6.0 (django.tasks) or, on Django "
            f"{django.get_version()}, the django-tasks backport (pip install "
            "'django-durable-jobs[tasks]'). The @job handlers in example.jobs work on any "
            "version."
        ) from error


@task
def add(a: int, b: int) -> int:
    """Returns ``a + b``: the smallest task that shows a return value."""
    return a + b
