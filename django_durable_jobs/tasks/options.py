"""Per-call extras for Django Tasks: ``with task_options(idempotency_key=...)``.

Django's ``Task.enqueue(*args, **kwargs)`` passes every keyword argument to
the task function, so our extras (an idempotency key, a retry budget, a
time limit, a concurrency key) cannot travel as arguments. A context
manager sets them in a context variable that ``DurableJobsBackend.enqueue``
reads: it works with Django's own API, in threads and under ``aenqueue``
(asgiref copies the context), and needs no Django 6 import, so this module
loads on Django 5.2 too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta

from ..names import validate_concurrency_key
from ..validation import validate_idempotency_key, validate_max_attempts, validate_timeout


@dataclass(frozen=True)
class TaskOptions:
    """The extras the next enqueues in this context get (``None``: not set)."""

    idempotency_key: str | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    concurrency_key: str | None = None


_NONE = TaskOptions()
_current: ContextVar[TaskOptions | None] = ContextVar("durable_jobs_task_options", default=None)


@contextmanager
def task_options(
    *,
    idempotency_key: str | None = None,
    max_attempts: int | None = None,
    timeout: float | timedelta | None = None,
    concurrency_key: str | None = None,
) -> Iterator[TaskOptions]:
    """Give the tasks enqueued inside this block an idempotency key, a retry budget, and so on.

    ``idempotency_key``: enqueueing again with the same key returns the
    existing task's result instead of a second job (one key names one
    job, so use it around a single enqueue). ``max_attempts``: how many
    times the task may run before it is ``FAILED``, overriding the
    backend's ``OPTIONS``. ``timeout``: each attempt's time limit in
    seconds (or a ``timedelta``), overriding ``OPTIONS["timeout"]`` and
    ``DURABLE_JOBS["TIMEOUT_SECONDS"]``. ``concurrency_key``: the job's
    ``concurrency_key``; with the task's limit in the backend's
    ``OPTIONS["concurrency_limits"]``, at most that many of its tasks sharing
    the key run at once, over every worker (no limit: the key changes
    nothing). Arguments are checked here, so a bad value
    fails at the ``with`` line. Blocks nest; the inner one wins for the
    options it sets.
    """
    outer = current_task_options()
    options = TaskOptions(
        idempotency_key=(
            outer.idempotency_key
            if idempotency_key is None
            else validate_idempotency_key(idempotency_key)
        ),
        max_attempts=(
            outer.max_attempts if max_attempts is None else validate_max_attempts(max_attempts)
        ),
        timeout=outer.timeout if timeout is None else validate_timeout(timeout),
        concurrency_key=(
            outer.concurrency_key
            if concurrency_key is None
            else validate_concurrency_key(concurrency_key)
        ),
    )
    token = _current.set(options)
    try:
        yield options
    finally:
        _current.reset(token)


def current_task_options() -> TaskOptions:
    """The options in force in this context (all ``None`` outside any block)."""
    return _current.get() or _NONE
