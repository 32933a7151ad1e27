"""Waiting for a Django task's result: ``wait_result()`` and ``await_result()``.

Django's Tasks API reads a result with ``TaskResult.refresh()`` /
``arefresh()`` and a backend's ``get_result()`` / ``aget_result()``, and
has no way to wait: these two fill that gap for tasks of a
``DurableJobsBackend``, with ``wait()``/``await_job()`` (woken by the
NOTIFY at the task's finish, polling as a fallback), then refresh the
result in place as ``refresh()`` does. Module functions, not methods:
``TaskResult`` is Django's class, and code holding one must not find a
method that only this backend's results have. The async twin is named
the way Django names its own (``get_result``/``aget_result``).

No read of the Tasks API (``compat``) at module level, and ``waiting``
(which needs the models) only inside the functions:
``django_durable_jobs.tasks`` re-exports these without a Tasks API too,
where no ``TaskResult`` can exist.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from . import compat

if TYPE_CHECKING:
    from .compat import TaskResult

__all__ = ["await_result", "wait_result"]


def wait_result(
    result: TaskResult[Any, Any], *, timeout: float | timedelta | None = None
) -> TaskResult[Any, Any]:
    """Block until the task is finished (``SUCCESSFUL`` or ``FAILED``); refresh ``result``.

    Returns ``result`` itself, refreshed, so that
    ``wait_result(r, timeout=10).return_value`` reads the value. Raises
    ``TimeoutError`` (``result`` then unchanged), ``TaskResultDoesNotExist``
    when its job is gone (pruned), ``ValueError`` for a result of another
    backend, ``TypeError`` for anything but a ``TaskResult``.
    """
    from ..models import Job
    from ..waiting import wait

    _check(result)
    try:
        wait(result.id, timeout=timeout)
    except Job.DoesNotExist:
        raise _does_not_exist(result) from None
    result.refresh()
    return result


async def await_result(
    result: TaskResult[Any, Any], *, timeout: float | timedelta | None = None
) -> TaskResult[Any, Any]:
    """``wait_result()`` for asyncio: ``await await_result(result, timeout=10)``."""
    from ..models import Job
    from ..waiting import await_job

    _check(result)
    try:
        await await_job(result.id, timeout=timeout)
    except Job.DoesNotExist:
        raise _does_not_exist(result) from None
    await result.arefresh()
    return result


def _check(result: Any) -> None:
    # ImproperlyConfigured without a Tasks API; wait() needs none.
    compat.require(
        "Waiting for a task's result", "wait with django_durable_jobs.wait() and a job id"
    )
    from .backend import DurableJobsBackend
    from .compat import TaskResult, task_backends

    if not isinstance(result, TaskResult):
        raise TypeError(
            f"Expected a {compat.TASKS_MODULE} TaskResult, got {type(result).__name__}."
        )
    backend = task_backends[result.backend]
    if not isinstance(backend, DurableJobsBackend):
        raise ValueError(
            f"This result is of the task backend {result.backend!r} "
            f"({type(backend).__name__}): only a DurableJobsBackend's results can be waited for."
        )


def _does_not_exist(result: TaskResult[Any, Any]) -> Exception:
    from .compat import TaskResultDoesNotExist

    return TaskResultDoesNotExist(result.id)
