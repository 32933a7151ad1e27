"""Django Tasks for the DurableJobsBackend tests, on Django 6 and on Django 5.2.

Imported as a project imports its tasks: ``django.tasks`` on Django >= 6.0,
the ``django-tasks`` backport (``django_tasks``) on Django 5.2.

Each run is recorded as an ``Execution`` (keyed by the task result id), so
tests count runs exactly and see the attempt and worker of each.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

try:
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskContext, task

from .models import Execution


class TaskFailure(Exception):
    pass


def _record(context: TaskContext) -> None:
    Execution.objects.create(
        job_id=uuid.UUID(context.task_result.id),
        attempt=context.attempt,
        worker=context.task_result.worker_ids[-1],
    )


@task
def add(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def record(context: TaskContext, label: str = "") -> dict[str, Any]:
    _record(context)
    return {"label": label, "attempt": context.attempt}


@task(takes_context=True, queue_name="other")
def record_other(context: TaskContext) -> str:
    _record(context)
    return "other"


@task(takes_context=True)
def fail_until(context: TaskContext, succeed_on: int) -> dict[str, Any]:
    """Fails until ``succeed_on``; returns what the context showed on success."""
    _record(context)
    if context.attempt < succeed_on:
        raise TaskFailure(f"attempt {context.attempt} fails")
    return {
        "attempt": context.attempt,
        "worker_ids": context.task_result.worker_ids,
        "errors": len(context.task_result.errors),
    }


@task
def nap(seconds: float) -> str:
    """Sleeps past a short time limit, then returns (too late to count)."""
    time.sleep(seconds)
    return "woke up"


@task
def returns_a_set() -> Any:
    return {1, 2}


@task
async def async_multiply(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a * b


@task(takes_context=True)
async def async_record(context: TaskContext, seconds: float = 0, fail: bool = False) -> Any:
    """Records its run with the async ORM, then sleeps ``seconds`` in one await.

    Returns the thread its coroutine ran on, and the attempt; raises
    ``TaskFailure`` with ``fail``.
    """
    await Execution.objects.acreate(
        job_id=uuid.UUID(context.task_result.id),
        attempt=context.attempt,
        worker=context.task_result.worker_ids[-1],
    )
    await asyncio.sleep(seconds)
    if fail:
        raise TaskFailure(f"async attempt {context.attempt} fails")
    return {"thread": threading.current_thread().name, "attempt": context.attempt}


@task(backend="immediate")
def immediate_add(a: int, b: int) -> int:
    return a + b


def undecorated(a: int) -> int:
    return a


renamed = task(undecorated)


@task
def traced() -> dict[str, str]:
    """The ids of the OpenTelemetry span current while the task runs (test_tracing.py)."""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


@task
def stepped(label: str) -> dict[str, Any]:
    """Durable steps in a task (tests/integration/test_steps_tasks.py)."""
    from django_durable_jobs.tasks import current_job

    from .models import StepCall

    ctx = current_job()

    def first() -> str:
        StepCall.objects.create(job_id=ctx.id, name="first", attempt=ctx.attempt)
        return label

    value = ctx.step("first", first)
    payload = ctx.wait_for_event(f"task:{label}")
    return {"first": value, "event": payload}
