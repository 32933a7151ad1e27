"""Which Tasks API this process uses: Django's ``django.tasks`` or the ``django-tasks`` backport.

The one place the integration decides it. Django 6.0 added ``django.tasks``;
on Django 5.2 the ``django-tasks`` package (the ``tasks`` extra) is its
backport, the same API imported as ``django_tasks``. Django's own module
wins when it exists, even with the backport installed beside it (a project
moving to Django 6 keeps working before it drops the package); else the
backport if it is installed; else none, and the backend cannot be used.

The decision reads no more than ``django.VERSION`` and whether the
backport is installed (``find_spec``, which does not import it): the
package imports on every supported Django before the app registry is
ready, and a process loads the chosen API only once something asks for
one of its names. They are read from this module, named as Django 6 names
them, whichever API is in use::

    from django_durable_jobs.tasks.compat import InvalidTask, Task, task_backends

Where the backport names a thing differently (``InvalidTaskError`` for
``InvalidTask``, ``InvalidTaskBackendError`` for ``InvalidTaskBackend``)
the mapping below says so. The first such read also imports the API's
``checks`` and ``signals`` modules, as ``import django.tasks`` does on
Django 6 itself: the backport imports them only from its ``AppConfig``,
and without them its backends' checks (``durable_jobs.E101``...) would
never run and ``override_settings(TASKS=...)`` would not reset the
backends.

For the type checker the names are Django 6's (the type check runs on
Django 6.1, whose stubs describe ``django.tasks``; the backport's classes
have the same shape).
"""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

import django
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from django.tasks import task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.checks import check_tasks
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started

__all__ = [
    "BACKPORT",
    "DJANGO_TASKS",
    "ENQUEUE_INSTEAD",
    "TASKS_AVAILABLE",
    "TASKS_MODULE",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "check_tasks",
    "choose",
    "require",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
    "unavailable_message",
]

#: Django's own Tasks framework (Django >= 6.0).
DJANGO_TASKS = "django.tasks"
#: The ``django-tasks`` package, its backport for Django 5.2.
BACKPORT = "django_tasks"

#: name -> (submodule, its name in ``django.tasks``, its name in ``django_tasks``)
_NAMES: dict[str, tuple[str, str, str]] = {
    "task": ("", "task", "task"),
    "task_backends": ("", "task_backends", "task_backends"),
    "BaseTaskBackend": ("backends.base", "BaseTaskBackend", "BaseTaskBackend"),
    "Task": ("base", "Task", "Task"),
    "TaskContext": ("base", "TaskContext", "TaskContext"),
    "TaskError": ("base", "TaskError", "TaskError"),
    "TaskResult": ("base", "TaskResult", "TaskResult"),
    "TaskResultStatus": ("base", "TaskResultStatus", "TaskResultStatus"),
    "check_tasks": ("checks", "check_tasks", "check_tasks"),
    "InvalidTask": ("exceptions", "InvalidTask", "InvalidTaskError"),
    "InvalidTaskBackend": ("exceptions", "InvalidTaskBackend", "InvalidTaskBackendError"),
    "TaskResultDoesNotExist": ("exceptions", "TaskResultDoesNotExist", "TaskResultDoesNotExist"),
    "TaskResultMismatch": ("exceptions", "TaskResultMismatch", "TaskResultMismatch"),
    "task_enqueued": ("signals", "task_enqueued", "task_enqueued"),
    "task_started": ("signals", "task_started", "task_started"),
    "task_finished": ("signals", "task_finished", "task_finished"),
}


def choose(django_version: tuple[Any, ...], backport_installed: bool) -> str | None:
    """``DJANGO_TASKS`` from Django 6.0, else ``BACKPORT`` if installed, else ``None``."""
    if tuple(django_version[:2]) >= (6, 0):
        return DJANGO_TASKS
    if backport_installed:
        return BACKPORT
    return None


#: The module whose API this process uses: ``"django.tasks"``, ``"django_tasks"`` or ``None``.
TASKS_MODULE: str | None = choose(django.VERSION, find_spec(BACKPORT) is not None)
#: Whether this process has a Tasks API at all.
TASKS_AVAILABLE: bool = TASKS_MODULE is not None


#: What works without a Tasks API, said after what does not.
ENQUEUE_INSTEAD = "enqueue with django_durable_jobs.enqueue() and @job handlers"


def unavailable_message(what: str, instead: str = ENQUEUE_INSTEAD) -> str:
    """Why ``what`` cannot work here, the two ways to make it work, and what works meanwhile."""
    return (
        f"{what} needs a Django Tasks API: Django >= 6.0 (django.tasks), or on Django "
        f"{django.get_version()} the django-tasks backport (pip install "
        f"'django-durable-jobs[tasks]', and 'django_tasks' in INSTALLED_APPS). Without "
        f"either, {instead}."
    )


def require(what: str, instead: str = ENQUEUE_INSTEAD) -> str:
    """The module in use; ``ImproperlyConfigured`` saying what is missing when there is none."""
    if TASKS_MODULE is None:
        raise ImproperlyConfigured(unavailable_message(what, instead))
    return TASKS_MODULE


_loaded: set[str] = set()


def _load(module: str) -> None:
    # What `import django.tasks` does on Django 6 (its __init__ imports
    # both); the backport leaves it to its AppConfig.ready().
    if module not in _loaded:
        import_module(f"{module}.checks")
        import_module(f"{module}.signals")
        _loaded.add(module)


def __getattr__(name: str) -> Any:
    """Read ``name`` from the Tasks API in use (PEP 562), and keep it here."""
    try:
        submodule, django_name, backport_name = _NAMES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = require(f"django_durable_jobs.tasks.compat.{name}")
    _load(module)
    path = f"{module}.{submodule}" if submodule else module
    value = getattr(import_module(path), django_name if module == DJANGO_TASKS else backport_name)
    globals()[name] = value
    return value
