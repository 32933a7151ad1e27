"""Old path of ``django_durable_jobs.tasks.bridge``, kept so imports of it keep working.

Importable on Django 5.2, as the bridge is.
"""

from __future__ import annotations

from .tasks.bridge import TASKS_AVAILABLE, announce_finished, run_task, task_handler

__all__ = ["TASKS_AVAILABLE", "announce_finished", "run_task", "task_handler"]
