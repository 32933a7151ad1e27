"""The worker's side of the Django Tasks backend: run a ``@task`` as a job.

Plugged into the core from ``AppConfig.ready()`` through
``django_durable_jobs.hooks``; the core never imports this module.

``task_handler`` is a handler resolver: the executor asks it (through
``hooks.resolve_handler``) when no ``@job`` handler has the job's type. It
answers only for rows our backend wrote (the payload's shape says so)
whose type imports as a ``django.tasks.Task`` bound to a
``DurableJobsBackend``: anything else keeps the executor's "no handler"
path, so a stray type can never make the worker run an arbitrary
function. The handler it returns runs the task like Django's immediate
backend does (context, async functions, signals), while retries, leases
and the result are the executor's as for any job.

``announce_finished`` is a finished listener: it sends ``task_finished``
for the tasks among the jobs the core finished without their handler.

Importable on Django 5.2, where it answers ``None`` for every job and
announces nothing, and before the app registry is ready. The imports of
``django.tasks`` (and of ``backend`` and ``results``, which need it) and of
the models are inside the functions for those reasons, and so that a
process loads ``django.tasks`` only once a task shows up.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any

from .. import db
from ..context import JobContext
from ..exceptions import Discard
from ..registry import Handler, registry
from . import TASKS_AVAILABLE, limits

if TYPE_CHECKING:
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task

__all__ = [
    "TASKS_AVAILABLE",
    "announce_finished",
    "durable_backends",
    "run_task",
    "task_concurrency_limits",
    "task_handler",
]

logger = logging.getLogger("django_durable_jobs.worker")


def task_handler(type_name: str, payload: Any) -> Handler | None:
    """A handler running the Django task ``type_name`` names, or ``None``."""
    if not TASKS_AVAILABLE:
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
    return Handler(type_name, functools.partial(run_task, task, backend))


def durable_backends() -> Iterator[BaseTaskBackend]:
    """The ``TASKS`` backends that are ``DurableJobsBackend``s, in settings order."""
    from django.tasks import task_backends

    from .backend import DurableJobsBackend

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
    differently gets the smaller limit. ``{}`` on Django 5.2.
    """
    if not TASKS_AVAILABLE:
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
    from django.tasks import task_backends
    from django.tasks.exceptions import InvalidTaskBackend

    from .backend import DurableJobsBackend

    try:
        backend = task_backends[alias]
    except InvalidTaskBackend:
        return None
    return backend if isinstance(backend, DurableJobsBackend) else None


def run_task(task: Task[Any, Any], backend: BaseTaskBackend, ctx: JobContext) -> dict[str, Any]:
    """Run one attempt of ``task`` for the job ``ctx`` describes.

    Sends ``task_started`` before the call and ``task_finished`` once the
    task reaches a final state (success, or a failure no retry follows).
    Returns the result as the job stores it (see ``results``).
    """
    from django.tasks.base import TaskContext, TaskResultStatus
    from django.tasks.signals import task_finished, task_started

    from ..models import Job
    from .results import (
        NotRoundTrippable,
        build_result,
        check_round_trip,
        mark_finished,
        send_signal,
        task_error,
    )

    job = Job.objects.using(db.database_alias()).get(pk=ctx.id)
    task_result = build_result(job, task, backend.alias)
    task = task_result.task
    send_signal(task_started, type(backend), task_result)
    args, kwargs = ctx.payload["args"], ctx.payload["kwargs"]
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=task_result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        try:
            check_round_trip("The return value", value)
        except NotRoundTrippable as exc:
            # The work is done: running it again would repeat its side
            # effects. Django's backends fail such a task; so do we, at once.
            raise Discard(f"Task {task.module_path} returned an unstorable value: {exc}") from None
    except Exception as exc:
        if _given_up(ctx):
            raise  # the worker recorded this attempt already, or gave the job back
        if isinstance(exc, Discard) or ctx.attempt >= ctx.max_attempts:
            mark_finished(
                task_result,
                TaskResultStatus.FAILED,
                errors=[*task_result.errors, task_error(exc)],
            )
            # Inside the except block: Django's own receiver logs exc_info.
            send_signal(task_finished, type(backend), task_result)
        raise
    if not _given_up(ctx):
        mark_finished(task_result, TaskResultStatus.SUCCESSFUL, _return_value=value)
        send_signal(task_finished, type(backend), task_result)
    return {"return_value": value, "worker_id": ctx.worker_id}


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
    if not TASKS_AVAILABLE or not job_ids or not _backend_in_use():
        return
    from django.tasks.signals import task_finished

    from ..models import Job, JobStatus
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
