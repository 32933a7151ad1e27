"""Old path of ``django_durable_jobs.tasks.options``, kept so imports of it keep working.

Users import these from ``django_durable_jobs.backends``, which stays.
"""

from __future__ import annotations

from .tasks.options import TaskOptions, current_task_options, task_options

__all__ = ["TaskOptions", "current_task_options", "task_options"]
