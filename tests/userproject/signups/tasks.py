"""The shop's Django tasks: ``@task`` functions that run on the durable queue."""

from __future__ import annotations

import django

if django.VERSION >= (6, 0):
    from django.tasks import task
else:  # Django 5.2: the django-tasks backport
    from django_tasks import task


@task()
def send_welcome(user_id: int) -> str:
    """Send a user the welcome email (here: say that it was sent)."""
    return "sent"
