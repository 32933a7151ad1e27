"""Handlers by job type.

``@job`` registers a function under a name; the worker looks the name up
when it runs a job. Apps declare handlers in a ``jobs`` module, which
``AppConfig.ready()`` imports the way the admin imports ``admin.py``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar, overload

from .exceptions import HandlerAlreadyRegistered
from .schedules import Schedule, schedule_for_job
from .validation import (
    validate_max_attempts,
    validate_priority,
    validate_queue,
    validate_timeout,
    validate_type,
)

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Handler:
    """A registered handler and the defaults it gives its jobs."""

    name: str
    func: Callable[..., Any]
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    #: Seconds one attempt may run; None: ``DURABLE_JOBS["TIMEOUT_SECONDS"]``.
    timeout: float | None = None
    #: Enqueued periodically by the workers (docs/guides/periodic-jobs.md).
    schedule: Schedule | None = None

    @property
    def location(self) -> str:
        """``module.qualname (file:line)``, for error messages."""
        func = inspect.unwrap(self.func)
        where = f"{func.__module__}.{func.__qualname__}"
        try:
            filename = inspect.getsourcefile(func)
            line = inspect.getsourcelines(func)[1]
        except (OSError, TypeError):
            return where
        return f"{where} ({filename}:{line})"

    def _same_function(self, other: Handler) -> bool:
        # A module imported twice (runserver's reloader, a test re-import)
        # registers a new function object for the same definition.
        a, b = inspect.unwrap(self.func), inspect.unwrap(other.func)
        return (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


class Registry:
    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, handler: Handler) -> None:
        existing = self._handlers.get(handler.name)
        if existing is not None and not existing._same_function(handler):
            raise HandlerAlreadyRegistered(
                f"Job type {handler.name!r} is registered twice: by {existing.location} "
                f"and by {handler.location}."
            )
        self._handlers[handler.name] = handler

    def unregister(self, name: str) -> None:
        self._handlers.pop(name, None)

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __iter__(self) -> Iterator[Handler]:
        return iter(sorted(self._handlers.values(), key=lambda h: h.name))

    def __len__(self) -> int:
        return len(self._handlers)


registry = Registry()


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
) -> Any:
    """Register a handler for jobs of type ``name``.

    ``@job("emails.send_welcome", queue="emails", max_attempts=8)``; bare
    ``@job`` names the type ``module.function``. The options are the
    defaults for jobs of this type: ``enqueue`` arguments override them.
    The function is returned unchanged and stays callable directly.
    ``timeout`` (seconds or a ``timedelta``) limits each attempt: at the
    deadline the attempt fails with ``JobTimeout`` (docs/guides/time-limits.md);
    a job's own ``enqueue(timeout=...)`` overrides it.
    ``schedule`` makes the workers enqueue a job of this type on a cron
    expression (``"*/5 * * * *"``) or every ``timedelta``/number of seconds,
    one job per tick across all workers (docs/guides/periodic-jobs.md).
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

    def decorator(func: F) -> F:
        if not callable(func):
            raise TypeError(f"@job must decorate a callable, not {func!r}")
        type_name = name if name is not None else f"{func.__module__}.{func.__qualname__}"
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
            )
        )
        return func

    return decorator
