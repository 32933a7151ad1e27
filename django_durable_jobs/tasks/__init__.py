"""The Django Tasks integration: ``django.tasks`` on the durable job table.

Built on the core, never imported by it: the core calls the extension
points of ``django_durable_jobs.hooks``, and ``AppConfig.ready()`` plugs
this package into them (the bridge's ``task_handler`` as a handler
resolver, its ``announce_finished`` as a finished listener, its
``task_concurrency_limits`` as a concurrency limits provider). Five
modules:

- ``backend``: ``DurableJobsBackend``, the ``BaseTaskBackend`` that
  enqueues a ``@task`` as a job (users name it by its public path,
  ``django_durable_jobs.backends.DurableJobsBackend``);
- ``bridge``: the worker's side, running such a job as its task,
  sending ``task_finished`` for endings the task's function never sees and
  telling the worker the tasks' per-key limits;
- ``limits``: how ``OPTIONS["concurrency_limits"]``, the tasks' per-key
  limits, reads (for the backend's check and the bridge);
- ``options``: ``task_options()``, the per-call extras (idempotency key,
  retry budget, time limit, concurrency key) Django's ``enqueue()`` has no
  argument for;
- ``results``: a job row as a Django ``TaskResult``.

``django.tasks`` arrived in Django 6.0. This package, ``bridge``,
``limits`` and ``options`` import on Django 5.2 too (``bridge`` then
answers "no task" for every job, ``limits`` no limits); ``backend`` and
``results`` need Django >= 6.0.
"""

from __future__ import annotations

import django

#: Whether this Django has ``django.tasks`` (Django >= 6.0): the one place
#: the integration decides it.
TASKS_AVAILABLE = django.VERSION >= (6, 0)

__all__ = ["TASKS_AVAILABLE"]
