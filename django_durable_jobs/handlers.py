"""Handlers by job type: the table the worker looks a job's type up in.

``@job`` (``registry.py``) declares handlers into it; ``enqueue()`` reads a
handler's defaults from it, the worker its function. A module of its own,
with no imports of the queue's other modules, so that the rules
(``validation``), the schedules and ``@job`` can all read it without
importing one another in a circle.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from asgiref.sync import iscoroutinefunction

from .exceptions import HandlerAlreadyRegistered

if TYPE_CHECKING:
    from .schedules.ticks import Schedule


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
    #: At most this many jobs of this type sharing a ``concurrency_key`` run
    #: at once, over every worker; None: keys do not limit this type.
    concurrency_limit: int | None = None

    @cached_property
    def is_async(self) -> bool:
        """An ``async def`` function (or one marked with ``markcoroutinefunction``,
        or a ``functools.partial`` of one): the worker runs it on its event loop."""
        return iscoroutinefunction(self.func)

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

    def concurrency_limits(self) -> dict[str, int]:
        """``{type: concurrency_limit}`` of the handlers that declare one."""
        return {
            h.name: h.concurrency_limit
            for h in self._handlers.values()
            if h.concurrency_limit is not None
        }


registry = Registry()
