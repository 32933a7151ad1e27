"""Shared tools of the unit tier (no database): job contexts, claimed jobs, a watchdog."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from django_durable_jobs import JobContext
from django_durable_jobs.db.records import ClaimedJob, Outcome
from django_durable_jobs.worker.attempts import AttemptTable
from django_durable_jobs.worker.executor import RetryPolicy
from django_durable_jobs.worker.watchdog import Watchdog
from tests.factories import claimed_job

#: A retry policy without jitter: its delays are exact.
POLICY = RetryPolicy(base=1.0, cap=10.0, jitter=0.0)


def claimed(timeout: float | None = None, type: str = "unit.t", attempt: int = 1) -> ClaimedJob:
    """A claimed job as the worker holds it (no row behind it)."""
    return claimed_job(timeout=timeout, type=type, attempt=attempt)


def context(**kwargs: Any) -> JobContext:
    """A handler's context, ``kwargs`` on top of plain defaults."""
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "type": "t",
        "queue": "default",
        "payload": {},
        "attempt": 1,
        "max_attempts": 5,
    }
    values.update(kwargs)
    return JobContext(**values)


class Recorder:
    """What a watchdog submits and reports stuck, in place of the worker."""

    def __init__(self) -> None:
        self.submitted: list[Outcome] = []
        self.stuck: list[uuid.UUID] = []
        self.stuck_event = threading.Event()

    def submit(self, outcome: Outcome) -> None:
        self.submitted.append(outcome)

    def on_stuck(self, attempt: Any) -> None:
        self.stuck.append(attempt.job.id)
        self.stuck_event.set()


def make_watchdog(
    recorder: Recorder | None = None, grace: float = 0.3, clock: Any = time.monotonic
) -> Watchdog:
    """A watchdog over its own attempt table, reporting to ``recorder``."""
    recorder = recorder or Recorder()
    return Watchdog(
        attempts=AttemptTable(clock),
        worker_id="w1",
        policy=POLICY,
        default_timeout=None,
        grace=grace,
        submit=recorder.submit,
        on_stuck=recorder.on_stuck,
    )
