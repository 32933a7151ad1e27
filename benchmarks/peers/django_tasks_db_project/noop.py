"""The task of the django-tasks-db side: nothing, with the argument ours enqueues, {"i": i}."""

from __future__ import annotations

from django_tasks import task


@task()
def noop(i: int) -> None:
    return None
