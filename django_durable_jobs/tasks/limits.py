"""Per-key limits for Django tasks: ``OPTIONS["concurrency_limits"]``.

A ``@task`` is Django's, not our ``@job``, so it has nowhere to say
``concurrency_limit=1`` where it is defined: Django's ``task()`` takes no
extra arguments and ``Task`` is a frozen dataclass. Its backend's
``OPTIONS`` is where Django puts what is particular to a backend, so the
limits go there, keyed by each task's module path, the ``type`` its jobs
get::

    TASKS = {"default": {
        "BACKEND": "django_durable_jobs.tasks.backend.DurableJobsBackend",
        "OPTIONS": {"concurrency_limits": {"crm.tasks.sync_customer": 1}},
    }}

``task_options(concurrency_key=...)`` gives a job its key; together, at
most that many of the task's jobs sharing a key run at once, over every
worker, enforced by the same keyed claim as ``@job(concurrency_limit=N)``.

How the option reads, for its two readers: the backend's system check
(``durable_jobs.E107``, ``problems()``) and the worker
(``bridge.task_concurrency_limits``, ``declared()``). It imports
neither (they import it), and the Tasks API (``compat``) only inside
``problems``, so it loads without one too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..constants import CONCURRENCY_LIMIT_MAX
from ..exceptions import InvalidJob
from ..names import validate_type
from ..validation import validate_concurrency_limit

if TYPE_CHECKING:
    from .compat import BaseTaskBackend

__all__ = ["OPTION", "Problem", "declared", "describe", "problems", "read_limits"]

#: The key in a ``DurableJobsBackend``'s ``OPTIONS``.
OPTION = "concurrency_limits"

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


def problems(backend: BaseTaskBackend, earlier: Iterable[BaseTaskBackend]) -> list[Problem]:
    """What ``durable_jobs.E107`` reports for ``backend`` (which has the option).

    Beyond the shape: each path must import as a ``Task`` (a typo would
    leave the task unlimited, silently), and none of the ``earlier``
    ``DurableJobsBackend``s (those before it in ``TASKS``) may give the same
    task another limit (its jobs share one limit whichever backend enqueued
    them; the worker would take the smaller). Each disagreement is so
    reported once, on the later backend.
    """
    from django.utils.module_loading import import_string

    from .compat import Task

    limits, wrong = read_limits(backend.options[OPTION])
    for path in limits:
        try:
            found = import_string(path)
        except Exception as exc:
            wrong.append((path, f"does not import as a task ({exc})"))
            continue
        if not isinstance(found, Task):
            wrong.append((path, f"names a {type(found).__name__}, not a Django task"))
    for other in earlier:
        theirs = declared(other.options)[0]
        for path, limit in limits.items():
            if path in theirs and theirs[path] != limit:
                wrong.append(
                    (
                        path,
                        f"is {limit} here but {theirs[path]} in TASKS[{other.alias!r}]: a "
                        "task's jobs share one limit whichever backend enqueued them",
                    )
                )
    return wrong


def declared(options: Any) -> tuple[dict[str, int], list[Problem]]:
    """``read_limits`` of a backend's ``OPTIONS`` (nothing when it has no such option)."""
    if not isinstance(options, Mapping) or OPTION not in options:
        return {}, []
    return read_limits(options[OPTION])
