"""A Django Task as a ``Job`` row, and a ``Job`` row as a Django ``TaskResult``.

One store for both APIs: a task is a job whose ``type`` is the task's
``module_path`` and whose payload is ``{"args": [...], "kwargs": {...},
"backend": alias}``. Its result is kept as ``{"return_value": ...,
"worker_id": ...}``: the worker id of the successful attempt is stored
there because a finished row no longer names its lease holder.

Needs a Tasks API (``compat``: ``django.tasks`` or the ``django-tasks``
backport); imported only by the backend and by the bridge once it knows
one is in use.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import datetime
from importlib import import_module
from typing import Any

from django.apps import apps
from django.dispatch import Signal
from django.utils import timezone

from ..models import Job, JobStatus
from .compat import InvalidTask, Task, TaskError, TaskResult, TaskResultStatus

PAYLOAD_KEYS = frozenset({"args", "kwargs", "backend"})

#: How our statuses read in Django's API. ``dead`` and ``cancelled`` both
#: read as FAILED: Django has no other final state for "did not succeed".
#: A task suspended by a durable step (``current_job().sleep``,
#: ``wait_for_event``, ``run_job``: pending or waiting) reads as READY, as a
#: task queued to run: it runs again when woken.
STATUS_MAP: dict[str, TaskResultStatus] = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.WAITING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}
_FINISHED = frozenset({TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED})

logger = logging.getLogger("django_durable_jobs.tasks")


class NotRoundTrippable(ValueError):
    """A task argument or return value that JSON would not give back unchanged."""


def is_task_payload(payload: Any) -> bool:
    """Whether ``payload`` has the shape our backend writes (cheap, no import)."""
    return (
        isinstance(payload, dict)
        and payload.keys() == PAYLOAD_KEYS
        and isinstance(payload["args"], list)
        and isinstance(payload["kwargs"], dict)
        and isinstance(payload["backend"], str)
    )


def check_round_trip(what: str, value: Any) -> None:
    """Raise ``NotRoundTrippable`` naming ``what`` unless JSON gives ``value`` back as is.

    Stricter than Django's ``normalize_json`` on purpose: a tuple would come
    back a list and ``{1: "a"}`` as ``{"1": "a"}``, so the function would
    run with other arguments than the caller passed.
    """
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise NotRoundTrippable(f"{what} is not JSON-serialisable: {exc}.") from None
    except RecursionError:
        raise NotRoundTrippable(f"{what} is nested too deeply to serialise.") from None
    if json.loads(text) != value or not _same_types(json.loads(text), value):
        raise NotRoundTrippable(
            f"{what} does not survive a JSON round trip unchanged ({value!r} would come "
            f"back as {json.loads(text)!r}): pass lists, dicts with string keys, strings, "
            "numbers, booleans and None."
        )


def _same_types(stored: Any, given: Any) -> bool:
    # 1 == 1.0 == True in Python, and (1,) != [1] only at the top level:
    # compare the container types all the way down.
    if type(stored) is not type(given):
        return False
    if isinstance(given, dict):
        return all(_same_types(stored[str(k)], v) for k, v in given.items())
    if isinstance(given, list):
        return all(_same_types(s, g) for s, g in zip(stored, given, strict=True))
    return True


def resolve_task(module_path: str) -> Task[Any, Any] | None:
    """The ``Task`` object a job type names, or ``None`` if it names none.

    A job's type is data: a REST client chose it when
    ``API_ALLOW_UNREGISTERED_TYPES`` is on, and importing a module runs its
    code. So a type is looked up, never imported, unless its module is one
    that declares tasks by convention: it resolves if its module is already
    imported in this process (where a ``Task`` attribute was made by
    ``@task``), or is an installed app's ``tasks`` module (or inside a
    ``tasks`` package), which is imported then, as the worker imports the
    ``jobs`` modules at start-up. A task defined anywhere else runs once
    something the process imports (its app's ``tasks`` or ``jobs`` module,
    ``AppConfig.ready()``) has imported it.
    """
    module_name, _, attribute = module_path.rpartition(".")
    if not module_name or not attribute:
        return None
    module = sys.modules.get(module_name)
    if module is None:
        if not is_tasks_module(module_name):
            return None
        try:
            module = import_module(module_name)
        except ImportError:
            return None
    # The module's own namespace, not getattr: a module-level __getattr__
    # (PEP 562) could import more on the type's say.
    found = vars(module).get(attribute)
    return found if isinstance(found, Task) else None


def is_tasks_module(module_name: str) -> bool:
    """Whether ``module_name`` is an installed app's ``tasks`` module, or inside it."""
    for app_config in apps.get_app_configs():
        tasks_module = f"{app_config.name}.tasks"
        if module_name == tasks_module or module_name.startswith(f"{tasks_module}."):
            return True
    return False


def task_for_job(task: Task[Any, Any], job: Job, alias: str) -> Task[Any, Any]:
    """``task`` with the queue, priority and backend its job was enqueued with."""
    changes: dict[str, Any] = {}
    if task.queue_name != job.queue:
        changes["queue_name"] = job.queue
    if task.priority != job.priority:
        changes["priority"] = job.priority
    if task.backend != alias:
        changes["backend"] = alias
    if not changes:
        return task
    try:
        return task.using(**changes)
    except InvalidTask:
        # The settings changed since (a queue dropped from QUEUES): the
        # stored job still exists and still has a result to show.
        return task


def worker_ids(job: Job) -> list[str]:
    """One worker id per attempt, oldest first ("" where no record is left).

    Failed attempts are named by the error history (newest entry per
    attempt, so a requeued job shows its latest run); the running attempt
    by the lease holder, the successful one by the stored result.
    """
    by_attempt: dict[int, str] = {}
    for entry in job.errors or []:
        if isinstance(entry, dict) and isinstance(entry.get("attempt"), int):
            by_attempt[entry["attempt"]] = str(entry.get("worker") or "")
    if job.status == JobStatus.RUNNING and job.lease_holder:
        by_attempt[job.attempts] = job.lease_holder
    elif job.status == JobStatus.COMPLETED and isinstance(job.result, dict):
        by_attempt[job.attempts] = str(job.result.get("worker_id") or "")
    return [by_attempt.get(n, "") for n in range(1, job.attempts + 1)]


def task_errors(job: Job) -> list[TaskError]:
    """One ``TaskError`` per recorded failure, oldest first (bounded by ERROR_HISTORY_LIMIT)."""
    return [
        TaskError(
            exception_class_path=str(entry.get("exception") or "Exception"),
            traceback=str(entry.get("traceback") or entry.get("error") or ""),
        )
        for entry in job.errors or []
        if isinstance(entry, dict)
    ]


def build_result(job: Job, task: Task[Any, Any], alias: str) -> TaskResult[Any, Any]:
    """The ``TaskResult`` that ``job`` (a row our backend wrote) reads as."""
    status = STATUS_MAP[job.status]
    started_at: datetime | None = job.started_at
    result: TaskResult[Any, Any] = TaskResult(
        task=task_for_job(task, job, alias),
        id=str(job.pk),
        status=status,
        enqueued_at=job.created_at,
        started_at=started_at,
        finished_at=job.completed_at if status in _FINISHED else None,
        last_attempted_at=started_at,
        args=job.payload["args"],
        kwargs=job.payload["kwargs"],
        backend=alias,
        errors=task_errors(job),
        worker_ids=worker_ids(job),
    )
    if status == TaskResultStatus.SUCCESSFUL:
        value = job.result.get("return_value") if isinstance(job.result, dict) else None
        object.__setattr__(result, "_return_value", value)
    return result


def mark_finished(result: TaskResult[Any, Any], status: TaskResultStatus, **changes: Any) -> None:
    """Update the in-memory ``result`` the worker sends with ``task_finished``."""
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    for name, value in changes.items():
        object.__setattr__(result, name, value)


def task_error(exc: BaseException) -> TaskError:
    """The ``TaskError`` Django's backends record for ``exc``."""
    kind = type(exc)
    return TaskError(
        exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
        traceback="".join(traceback.format_exception(exc)),
    )


def send_signal(signal: Signal, sender: type, task_result: TaskResult[Any, Any]) -> None:
    """Send a task signal to every receiver; log, never raise, a receiver's error.

    When a signal is sent the task is already stored (enqueued) or has
    already run (started, finished): a failing receiver must neither
    make the caller believe the enqueue failed (and enqueue again) nor
    turn a task that ran into a failed attempt whose retry repeats it.
    """
    for receiver, response in signal.send_robust(sender, task_result=task_result):
        if isinstance(response, Exception):
            logger.error(
                "Task signal receiver %r failed id=%s path=%s",
                receiver, task_result.id, task_result.task.module_path,
                exc_info=response,
            )  # fmt: skip
