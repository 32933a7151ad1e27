"""The Django Tasks integration: ``@task`` functions on the durable job table.

Built on the core, never imported by it: the core calls the extension
points of ``django_durable_jobs.hooks``, and ``AppConfig.ready()`` plugs
this package into them (the bridge's ``task_handler`` as a handler
resolver, its ``announce_finished`` as a finished listener, its
``task_concurrency_limits`` as a concurrency limits provider). Seven
modules:

- ``compat``: which Tasks API is in use (``django.tasks`` or the
  ``django-tasks`` backport), and its names;
- ``backend``: ``DurableJobsBackend``, the ``BaseTaskBackend`` that
  enqueues a ``@task`` as a job (settings name it
  ``django_durable_jobs.tasks.backend.DurableJobsBackend``);
- ``bridge``: the worker's side, running such a job as its task,
  sending ``task_finished`` for endings the task's function never sees and
  telling the worker the tasks' per-key limits;
- ``limits``: how ``OPTIONS["concurrency_limits"]``, the tasks' per-key
  limits, reads (for the backend's check and the bridge);
- ``options``: ``task_options()``, the per-call extras (idempotency key,
  retry budget, time limit, concurrency key) Django's ``enqueue()`` has no
  argument for;
- ``results``: a job row as a Django ``TaskResult``;
- ``waiting``: ``wait_result()`` and ``await_result()``, which wait for a
  task's result.

What users call is re-exported here: ``from django_durable_jobs.tasks
import task_options, wait_result, await_result, current_job``.

Durable steps in a ``@task``: the Tasks API passes no context of ours, so
``current_job()`` returns the running job's ``JobContext`` (set by the
worker around each run, sync or async), with ``step``, ``sleep``,
``wait_for_event``, ``run_job`` and their async twins, and the same
guarantees as in a ``@job`` handler::

    @task
    def onboard(user_id: int) -> None:
        ctx = current_job()
        ctx.step("welcome", send_welcome, user_id)
        ctx.wait_for_event(f"confirmed:{user_id}", timeout=86400)

Outside a job run by a worker it raises ``RuntimeError``.

Which Tasks API is in use is ``compat``'s decision: ``django.tasks`` on
Django >= 6.0, the ``django-tasks`` backport (``django_tasks``, the
``tasks`` extra) on Django 5.2; every module here reads the API's names
from ``compat``, so the same backend serves both. Without either, this
package, ``bridge``, ``limits``, ``options`` and ``waiting`` still import
(``bridge`` then answers "no task" for every job, ``limits`` no limits,
``wait_result`` raises ``ImproperlyConfigured``); ``backend`` and
``results`` raise ``ImproperlyConfigured`` saying what to install.
"""

from __future__ import annotations

from ..context import current_job
from .compat import TASKS_AVAILABLE, TASKS_MODULE
from .options import TaskOptions, current_task_options, task_options
from .waiting import await_result, wait_result

__all__ = [
    "TASKS_AVAILABLE",
    "TASKS_MODULE",
    "TaskOptions",
    "await_result",
    "current_job",
    "current_task_options",
    "task_options",
    "wait_result",
]
