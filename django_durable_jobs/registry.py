"""``@job``: declare a handler for a job type.

``@job`` registers a function under a name in the handler table
(``handlers.py``, re-exported here: ``registry``, ``Handler``); the worker
looks the name up when it runs a job. Apps declare handlers in a ``jobs``
module, which ``AppConfig.ready()`` imports the way the admin imports
``admin.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, overload

from .exceptions import InvalidJob
from .handlers import Handler, Registry, registry
from .names import OWN_TYPE_PREFIX, own_type_message, validate_queue, validate_type
from .schedules.declarations import schedule_for_job
from .validation import (
    validate_concurrency_limit,
    validate_max_attempts,
    validate_priority,
    validate_timeout,
)

__all__ = ["Handler", "Registry", "job", "registry"]

F = TypeVar("F", bound=Callable[..., Any])


@overload
def job(name: F, /) -> F: ...


@overload
def job(
    name: str | None = None,
    /,
    *,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    timeout: float | timedelta | None = None,
    schedule: str | timedelta | float | None = None,
    concurrency_limit: int | None = None,
) -> Callable[[F], F]: ...


def job(
    name: str | Callable[..., Any] | None = None,
    /,
    *,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    timeout: float | timedelta | None = None,
    schedule: str | timedelta | float | None = None,
    concurrency_limit: int | None = None,
) -> Any:
    """Register a handler for jobs of type ``name``.

    ``@job("emails.send_welcome", queue="emails", max_attempts=8)``; bare
    ``@job`` names the type ``module.function``. The options are the
    defaults for jobs of this type: ``enqueue`` arguments override them.
    The function is returned unchanged and stays callable directly; an
    ``async def`` function is awaited by the worker on its event loop, in a
    slot like any handler (docs/guides/async-handlers.md).
    ``timeout`` (seconds or a ``timedelta``) limits each attempt: at the
    deadline the attempt fails with ``JobTimeout`` (docs/guides/time-limits.md);
    a job's own ``enqueue(timeout=...)`` overrides it.
    ``schedule`` makes the workers enqueue a job of this type on a cron
    expression (``"*/5 * * * *"``) or every ``timedelta``/number of seconds,
    one job per tick across all workers (docs/guides/periodic-jobs.md).
    ``concurrency_limit``: at most that many jobs of this type sharing one
    ``concurrency_key`` run at once, over every worker
    (docs/guides/flow-control.md); jobs without a key are not limited.
    """
    if callable(name):
        return job()(name)
    if name is not None:
        validate_type(name)
    if queue is not None:
        validate_queue(queue)
    if priority is not None:
        validate_priority(priority)
    if max_attempts is not None:
        validate_max_attempts(max_attempts)
    limit = None if timeout is None else validate_timeout(timeout)
    if concurrency_limit is not None:
        validate_concurrency_limit(concurrency_limit)

    def decorator(func: F) -> F:
        if not callable(func):
            raise TypeError(f"@job must decorate a callable, not {func!r}")
        type_name = name if name is not None else f"{func.__module__}.{func.__qualname__}"
        if type_name.startswith(OWN_TYPE_PREFIX) and not func.__module__.startswith(
            "django_durable_jobs."
        ):
            raise InvalidJob("type", own_type_message(type_name))
        periodic = None if schedule is None else schedule_for_job(type_name, schedule)
        registry.register(
            Handler(
                type_name,
                func,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                timeout=limit,
                schedule=periodic,
                concurrency_limit=concurrency_limit,
            )
        )
        return func

    return decorator
