"""A durable background job queue for Django on PostgreSQL.

The public API is importable from here. ``enqueue`` and friends are
loaded on first use, because they need the app registry: importing
``django_durable_jobs`` itself (in ``INSTALLED_APPS``, or from another
app's models) must not import the models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .exceptions import (
    ChildJobFailed,
    Discard,
    DurableJobsError,
    EventConflict,
    EventTimeout,
    HandlerAlreadyRegistered,
    IdempotencyConflict,
    InvalidEvent,
    InvalidJob,
    InvalidPause,
    JobCancelled,
    JobTimeout,
    LeaseLost,
    Retry,
    StepResultError,
    Suspended,
)
from .registry import job

if TYPE_CHECKING:
    from .context import JobContext
    from .dependencies import chain, group
    from .enqueueing import EnqueueResult, enqueue, enqueue_many
    from .events import EmitResult, emit_event
    from .pausing import pause_queue, paused_queues, resume_queue
    from .steps import StepRetry
    from .waiting import await_job, wait

__version__ = "0.1.0.dev0"

__all__ = [
    "ChildJobFailed",
    "Discard",
    "DurableJobsError",
    "EmitResult",
    "EnqueueResult",
    "EventConflict",
    "EventTimeout",
    "HandlerAlreadyRegistered",
    "IdempotencyConflict",
    "InvalidEvent",
    "InvalidJob",
    "InvalidPause",
    "JobCancelled",
    "JobContext",
    "JobTimeout",
    "LeaseLost",
    "Retry",
    "StepResultError",
    "StepRetry",
    "Suspended",
    "__version__",
    "await_job",
    "chain",
    "emit_event",
    "enqueue",
    "enqueue_many",
    "group",
    "job",
    "pause_queue",
    "paused_queues",
    "resume_queue",
    "wait",
]

_LAZY = {
    "chain": "dependencies",
    "group": "dependencies",
    "enqueue": "enqueueing",
    "enqueue_many": "enqueueing",
    "EnqueueResult": "enqueueing",
    "emit_event": "events",
    "EmitResult": "events",
    "JobContext": "context",
    "StepRetry": "steps",
    "pause_queue": "pausing",
    "paused_queues": "pausing",
    "resume_queue": "pausing",
    "wait": "waiting",
    "await_job": "waiting",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
