"""Old path of ``django_durable_jobs.tasks.results``, kept so imports of it keep working.

Needs Django >= 6.0, as the module it re-exports does.
"""

from __future__ import annotations

from .tasks.results import (
    PAYLOAD_KEYS,
    STATUS_MAP,
    NotRoundTrippable,
    build_result,
    check_round_trip,
    is_task_payload,
    mark_finished,
    resolve_task,
    send_signal,
    task_error,
    task_errors,
    task_for_job,
    worker_ids,
)

__all__ = [
    "PAYLOAD_KEYS",
    "STATUS_MAP",
    "NotRoundTrippable",
    "build_result",
    "check_round_trip",
    "is_task_payload",
    "mark_finished",
    "resolve_task",
    "send_signal",
    "task_error",
    "task_errors",
    "task_for_job",
    "worker_ids",
]
