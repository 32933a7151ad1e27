"""The worker's side of the Django Tasks backend: run a ``@task`` as a job.

Plugged into the core from ``AppConfig.ready()`` through
``django_durable_jobs.hooks``; the core never imports this module.

``task_handler`` is a handler resolver: the executor asks it (through
``hooks.resolve_handler``) when no ``@job`` handler has the job's type. It
answers only for rows our backend wrote (the payload's shape says so)
whose type imports as a ``Task`` (of the Tasks API in use, ``compat``) bound to a
``DurableJobsBackend``: anything else keeps the executor's "no handler"
path, so a stray type can never make the worker run an arbitrary
function. The handler it returns runs the task like Django's immediate
backend does (context, signals), while retries, leases and the result are
the executor's as for any job; an ``async def`` task's handler is async
too, so the worker awaits it on its event loop like an async ``@job``.

``announce_finished`` is a finished listener: it sends ``task_finished``
for the tasks among the jobs the core finished without their handler.

Importable without a Tasks API (Django 5.2 without the backport), where it
answers ``None`` for every job and announces nothing, and before the app
registry is ready. The reads of the API's names from ``compat`` (and the
imports of ``backend`` and ``results``, which need them) and of the models
are inside the functions for those reasons, and so that a process loads
the Tasks API only once a task shows up.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any

from asgiref.sync import iscoroutinefunction

from .. import db
from ..context import JobContext
from ..exceptions import Discard
from ..registry import Handler, registry
from . import compat, limits

if TYPE_CHECKING:
    from .compat import BaseTaskBackend, Task, TaskResult

__all__ = [
    "announce_finished",
    "arun_task",
    "durable_backends",
    "run_task",
    "task_concurrency_limits",
    "task_handler",
]

logger = logging.getLogger("django_durable_jobs.worker")


def task_handler(type_name: str, payload: Any) -> Handler | None:
    """A handler running the Django task ``type_name`` names, or ``None``."""
    if not compat.TASKS_AVAILABLE:
        return None
    from .results import is_task_payload, resolve_task

    if not is_task_payload(payload):
        return None
    try:
        task = resolve_task(type_name)
        backend = _durable_backend(payload["backend"])
    except Exception:
        # A module that fails to import is the job's problem, not the
        # worker's: log why, and let the executor record "no handler".
        logger.warning("Task %s could not be loaded", type_name, exc_info=True)
        return None
    if task is None or backend is None:
        return None
    # An async def task is awaited on the worker's event loop (in a slot,
    # like any job), not run to completion on a loop of its own by Task.call.
    run = arun_task if iscoroutinefunction(task.func) else run_task
    return Handler(type_name, functools.partial(run, task, backend))


def durable_backends() -> Iterator[BaseTaskBackend]:
    """The ``TASKS`` backends that are ``DurableJobsBackend``s, in settings order."""
    from .backend import DurableJobsBackend
    from .compat import task_backends

    try:
        backends = task_backends.all()
    except Exception:  # a misconfigured TASKS: its check reports it
        return
    for backend in backends:
        if isinstance(backend, DurableJobsBackend):
            yield backend


def task_concurrency_limits() -> dict[str, int]:
    """``{task path: limit}`` over every ``DurableJobsBackend``: the worker's limits provider.

    From each backend's ``OPTIONS["concurrency_limits"]`` (``limits.py``).
    Invalid entries are logged at ERROR and left out (a worker does not run
    Django's Tasks checks, so it says so itself); a task two backends limit
    differently gets the smaller limit. ``{}`` without a Tasks API.
    """
    if not compat.TASKS_AVAILABLE:
        return {}
    merged: dict[str, int] = {}
    for backend in durable_backends():
        found, wrong = limits.declared(backend.options)
        for problem in wrong:
            logger.error("%s The entry is ignored.", limits.describe(backend.alias, problem))
        for path, limit in found.items():
            merged[path] = min(limit, merged.get(path, limit))
    return merged


def _backend_in_use() -> bool:
    """Whether any ``TASKS`` entry is a ``DurableJobsBackend`` (else no row can be a task)."""
    return any(True for _ in durable_backends())


def _durable_backend(alias: str) -> BaseTaskBackend | None:
    from .backend import DurableJobsBackend
    from .compat import InvalidTaskBackend, task_backends

    try:
        backend = task_backends[alias]
    except InvalidTaskBackend:
        return None
    return backend if isinstance(backend, DurableJobsBackend) else None


class _Started:
    """One attempt of a task, begun: its ``TaskResult`` and how to call its function."""

    __slots__ = ("args", "backend", "kwargs", "result", "task")

    def __init__(
        self,
        task: Task[Any, Any],
        backend: BaseTaskBackend,
        result: TaskResult[Any, Any],
        args: list[Any],
        kwargs: dict[str, Any],
    ) -> None:
        self.task, self.backend, self.result = task, backend, result
        self.args, self.kwargs = args, kwargs

    def arguments(self) -> list[Any]:
        """The function's positional arguments, its ``TaskContext`` first if it takes one."""
        if not self.task.takes_context:
            return self.args
        from .compat import TaskContext

        return [TaskContext(task_result=self.result), *self.args]


def _start(task: Task[Any, Any], backend: BaseTaskBackend, ctx: JobContext) -> _Started:
    """Read the job as a ``TaskResult`` and send ``task_started`` (sync: the ORM)."""
    from ..models import Job
    from .compat import task_started
    from .results import build_result, send_signal

    job = Job.objects.using(db.database_alias()).get(pk=ctx.id)
    task_result = build_result(job, task, backend.alias)
    send_signal(task_started, type(backend), task_result)
    return _Started(
        task_result.task, backend, task_result, ctx.payload["args"], ctx.payload["kwargs"]
    )


def _checked(started: _Started, value: Any) -> Any:
    """``value``, if the job can store it; else ``Discard`` (the work is done)."""
    from .results import NotRoundTrippable, check_round_trip

    try:
        check_round_trip("The return value", value)
    except NotRoundTrippable as exc:
        # Running it again would repeat its side effects. Django's backends
        # fail such a task; so do we, at once.
        raise Discard(
            f"Task {started.task.module_path} returned an unstorable value: {exc}"
        ) from None
    return value


def _failed(started: _Started, ctx: JobContext, exc: Exception) -> None:
    """The function raised ``exc``: ``task_finished`` if no retry follows.

    Called inside the ``except`` block (for an async task, through
    ``sync_to_async``, which keeps it): Django's own receiver logs exc_info.
    """
    from .compat import TaskResultStatus, task_finished
    from .results import mark_finished, send_signal, task_error

    if _given_up(ctx):
        return  # the worker recorded this attempt already, or gave the job back
    if isinstance(exc, Discard) or ctx.attempt >= ctx.max_attempts:
        result = started.result
        mark_finished(result, TaskResultStatus.FAILED, errors=[*result.errors, task_error(exc)])
        send_signal(task_finished, type(started.backend), result)


def _succeeded(started: _Started, ctx: JobContext, value: Any) -> dict[str, Any]:
    """The function returned ``value``: ``task_finished``; the job's result."""
    from .compat import TaskResultStatus, task_finished
    from .results import mark_finished, send_signal

    if not _given_up(ctx):
        mark_finished(started.result, TaskResultStatus.SUCCESSFUL, _return_value=value)
        send_signal(task_finished, type(started.backend), started.result)
    return {"return_value": value, "worker_id": ctx.worker_id}


def run_task(task: Task[Any, Any], backend: BaseTaskBackend, ctx: JobContext) -> dict[str, Any]:
    """Run one attempt of ``task`` for the job ``ctx`` describes.

    Sends ``task_started`` before the call and ``task_finished`` once the
    task reaches a final state (success, or a failure no retry follows).
    Returns the result as the job stores it (see ``results``).
    """
    started = _start(task, backend, ctx)
    try:
        value = _checked(started, started.task.call(*started.arguments(), **started.kwargs))
    except Exception as exc:
        _failed(started, ctx, exc)
        raise
    return _succeeded(started, ctx, value)


async def arun_task(
    task: Task[Any, Any], backend: BaseTaskBackend, ctx: JobContext
) -> dict[str, Any]:
    """``run_task`` for an ``async def`` task: awaited on the worker's event loop.

    The signals and the ORM reads run through ``sync_to_async``, on the
    waiting slot thread (``worker/event_loop.py``), as the receivers and the
    ORM expect.
    """
    from asgiref.sync import sync_to_async

    started = await sync_to_async(_start)(task, backend, ctx)
    try:
        value = _checked(started, await started.task.acall(*started.arguments(), **started.kwargs))
    except Exception as exc:
        await sync_to_async(_failed)(started, ctx, exc)
        raise
    return await sync_to_async(_succeeded)(started, ctx, value)


def _given_up(ctx: JobContext) -> bool:
    """Whether the worker took this attempt from its function.

    The flag is set at the time limit (after the watchdog recorded the
    failure, which announces itself), when the lease is lost, or when a
    shutdown gave the job back: the function's late outcome is dropped, so
    its ``task_finished`` would tell receivers something the row does not say.
    """
    flag = ctx._cancel
    return flag is not None and flag.is_set()


def announce_finished(job_ids: Collection[uuid.UUID], alias: str) -> None:
    """Send ``task_finished`` for tasks that reached a final state without their function.

    The finished listener (``hooks.jobs_finished``), called after the row is
    committed: by ``cancel`` (``cancelled`` reads as ``FAILED``), by the
    reaper (a task whose last lease expired goes ``dead``) and by the worker
    for a last attempt failed at its time limit. The core passes every job
    it finished so, tasks or not: this picks the tasks itself, and stays
    cheap for the rest. No query at all unless a ``TASKS`` backend is a
    ``DurableJobsBackend``; then one, for the ``dead`` or ``cancelled`` rows
    with a task's payload keys. A type a ``@job`` declares is that handler's
    job, never a task (the executor asks the registry first), whatever its
    payload. A task whose module no longer imports cannot be described by a
    ``TaskResult`` and is skipped (logged). Never raises: the state change
    it reports has happened whatever a receiver does.
    """
    if not compat.TASKS_AVAILABLE or not job_ids or not _backend_in_use():
        return
    from ..models import Job, JobStatus
    from .compat import task_finished
    from .results import build_result, is_task_payload, resolve_task, send_signal

    try:
        rows = list(
            Job.objects.using(alias).filter(
                pk__in=list(job_ids),
                status__in=[JobStatus.DEAD, JobStatus.CANCELLED],
                payload__has_keys=["args", "kwargs", "backend"],
            )
        )
    except Exception:
        logger.exception("task_finished not sent for %s job(s): could not read them", len(job_ids))
        return
    for job in rows:
        if job.type in registry or not is_task_payload(job.payload):
            continue
        try:
            task = resolve_task(job.type)
            backend = _durable_backend(job.payload["backend"])
            if task is None or backend is None:
                continue
            task_result = build_result(job, task, backend.alias)
        except Exception:
            logger.warning(
                "task_finished not sent for job %s (%s)", job.pk, job.type, exc_info=True
            )
            continue
        send_signal(task_finished, type(backend), task_result)
