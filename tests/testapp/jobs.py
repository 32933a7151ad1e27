"""Handlers for the worker's tests; registered in test processes and e2e workers."""

from __future__ import annotations

import time
from typing import Any

from django_durable_jobs import Discard, JobContext, Retry, job

from .models import Execution


@job("tests.record")
def record(ctx: JobContext) -> dict[str, Any]:
    """Record the execution, then sleep ``payload["sleep"]`` seconds (default 0)."""
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    seconds = float(ctx.payload.get("sleep", 0))
    if seconds:
        time.sleep(seconds)
    return {"attempt": ctx.attempt}


@job("tests.fail_until")
def fail_until(ctx: JobContext) -> int:
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    if ctx.attempt < int(ctx.payload["succeed_on"]):
        raise ValueError(f"attempt {ctx.attempt} fails")
    return ctx.attempt


@job("tests.discard")
def discard(ctx: JobContext) -> None:
    raise Discard("not worth retrying")


@job("tests.retry_later")
def retry_later(ctx: JobContext) -> None:
    raise Retry(after=float(ctx.payload["after"]))


@job("tests.exit")
def exit_(ctx: JobContext) -> None:
    raise SystemExit(3)


@job("tests.unserialisable")
def unserialisable(ctx: JobContext) -> object:
    return {"when": object()}


@job("tests.crash", max_attempts=2)
def crash(ctx: JobContext) -> None:
    """Kills its own worker process, every time: a poison job."""
    import os
    import signal

    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    os.kill(os.getpid(), signal.SIGKILL)


@job("tests.retry_forever")
def retry_forever(ctx: JobContext) -> None:
    """Asks for an impossible delay: the worker falls back to the normal backoff."""
    raise Retry(after=float("inf"))
