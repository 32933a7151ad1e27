"""Per-key limits for Django tasks: ``OPTIONS["concurrency_limits"]``.

A ``@task`` is Django's, not our ``@job``, so it has nowhere to say
``concurrency_limit=1`` where it is defined: Django's ``task()`` takes no
extra arguments and ``Task`` is a frozen dataclass. Its backend's
``OPTIONS`` is where Django puts what is particular to a backend, so the
limits go there, keyed by each task's module path, the ``type`` its jobs
get::

    TASKS = {"default": {
        "BACKEND": "django_durable_jobs.backends.DurableJobsBackend",
        "OPTIONS": {"concurrency_limits": {"crm.tasks.sync_customer": 1}},
    }}

``task_options(concurrency_key=...)`` gives a job its key; together, at
most that many of the task's jobs sharing a key run at once, over every
worker, enforced by the same keyed claim as ``@job(concurrency_limit=N)``.

Two readers: the backend's system check (``durable_jobs.E107``, with
``problems()``) and the worker (``task_concurrency_limits``, the provider
``AppConfig.ready()`` registers in ``hooks``). Importable
on Django 5.2 (``django.tasks`` is imported inside the functions), where
the provider answers ``{}``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..constants import CONCURRENCY_LIMIT_MAX
from ..exceptions import InvalidJob
from ..names import validate_type
from ..validation import validate_concurrency_limit
from . import TASKS_AVAILABLE
from .bridge import durable_backends

if TYPE_CHECKING:
    from django.tasks.backends.base import BaseTaskBackend

__all__ = ["OPTION", "describe", "problems", "read_limits", "task_concurrency_limits"]

#: The key in a ``DurableJobsBackend``'s ``OPTIONS``.
OPTION = "concurrency_limits"

logger = logging.getLogger("django_durable_jobs.worker")

#: (the entry's key, or ``None`` for the value as a whole; what is wrong)
Problem = tuple[object | None, str]


def describe(alias: str, problem: Problem) -> str:
    """``TASKS['default']['OPTIONS']['concurrency_limits']['x.y']: <problem>.``"""
    entry, text = problem
    where = "" if entry is None else f"[{entry!r}]"
    return f"TASKS[{alias!r}]['OPTIONS'][{OPTION!r}]{where}: {text}."


def read_limits(value: Any) -> tuple[dict[str, int], list[Problem]]:
    """The valid ``{task path: limit}`` entries of ``value``, and what is wrong with the rest."""
    if not isinstance(value, Mapping):
        return {}, [
            (None, f"must be a dict mapping task paths to limits, got {type(value).__name__}")
        ]
    limits: dict[str, int] = {}
    wrong: list[Problem] = []
    for path in sorted(value, key=str):
        try:
            validate_type(path)
        except InvalidJob as exc:
            wrong.append((path, f"is not a task path: {exc.message.rstrip('.')}"))
            continue
        try:
            limits[path] = validate_concurrency_limit(value[path])
        except InvalidJob:
            wrong.append(
                (
                    path,
                    f"must be an integer from 1 to {CONCURRENCY_LIMIT_MAX}, got {value[path]!r}",
                )
            )
    return limits, wrong


def problems(backend: BaseTaskBackend) -> list[Problem]:
    """What ``durable_jobs.E107`` reports for ``backend`` (which has the option).

    Beyond the shape: each path must import as a ``Task`` (a typo would
    leave the task unlimited, silently), and another ``DurableJobsBackend``
    declared before this one in ``TASKS`` must not give the same task
    another limit (its jobs share one limit whichever backend enqueued
    them; the worker would take the smaller).
    """
    from django.tasks.base import Task
    from django.utils.module_loading import import_string

    limits, wrong = read_limits(backend.options[OPTION])
    for path in limits:
        try:
            found = import_string(path)
        except Exception as exc:
            wrong.append((path, f"does not import as a task ({exc})"))
            continue
        if not isinstance(found, Task):
            wrong.append((path, f"names a {type(found).__name__}, not a Django task"))
    for other in durable_backends():
        if other.alias == backend.alias:
            break
        earlier = _declared(other)
        for path, limit in limits.items():
            if path in earlier and earlier[path] != limit:
                wrong.append(
                    (
                        path,
                        f"is {limit} here but {earlier[path]} in TASKS[{other.alias!r}]: a "
                        "task's jobs share one limit whichever backend enqueued them",
                    )
                )
    return wrong


def task_concurrency_limits() -> dict[str, int]:
    """``{task path: limit}`` over every ``DurableJobsBackend``: the worker's provider.

    Invalid entries are logged at ERROR and left out (a worker does not run
    Django's Tasks checks, so it says so itself); a task two backends limit
    differently gets the smaller limit. ``{}`` on Django 5.2.
    """
    if not TASKS_AVAILABLE:
        return {}
    merged: dict[str, int] = {}
    for backend in durable_backends():
        for path, limit in _declared(backend, log=True).items():
            merged[path] = min(limit, merged.get(path, limit))
    return merged


def _declared(backend: BaseTaskBackend, *, log: bool = False) -> dict[str, int]:
    options = backend.options
    if not isinstance(options, Mapping) or OPTION not in options:
        return {}
    limits, wrong = read_limits(options[OPTION])
    if log:
        for problem in wrong:
            logger.error("%s The entry is ignored.", describe(backend.alias, problem))
    return limits
