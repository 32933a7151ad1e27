"""Handlers of the durable steps' tests (tests/integration/test_steps*.py).

Each step's function writes a ``StepCall`` row, so a test counts how often
it ran; ``seen`` keeps what a handler saw that a test asks about.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django_durable_jobs import (
    ChildJobFailed,
    EventTimeout,
    JobContext,
    LeaseLost,
    StepRetry,
    db,
    job,
)

from .models import StepCall

#: What handlers saw, by job id (as text): read by the tests.
seen: dict[str, dict[str, Any]] = {}


def called(ctx: JobContext, name: str, value: Any = None) -> Any:
    StepCall.objects.create(job_id=ctx.id, name=name, attempt=ctx.attempt)
    return value


def take_over(job_id: Any) -> None:
    """What the reaper and a claim elsewhere do to the lease, on another connection."""
    from tests.integration.helpers import new_connection

    with new_connection() as conn:
        conn.execute(
            "UPDATE durable_jobs_job SET lease_token = gen_random_uuid() WHERE id = %s", [job_id]
        )


@job("tests.steps.three", max_attempts=3)
def three(ctx: JobContext) -> list[Any]:
    """Steps a, b, c; with ``fail_after`` a step name, attempt 1 raises after that step."""
    results = []
    for name in ("a", "b", "c"):
        results.append(ctx.step(name, called, ctx, name, f"{name}-{ctx.attempt}"))
        if ctx.payload.get("fail_after") == name and ctx.attempt == 1:
            raise ValueError(f"attempt 1 fails after step {name}")
    return results


@job("tests.steps.loop", max_attempts=2)
def loop(ctx: JobContext) -> list[Any]:
    results = [ctx.step("item", called, ctx, f"item{i}", i * 10) for i in range(3)]
    if ctx.attempt == 1:
        raise ValueError("attempt 1 fails after the loop")
    return results


async def _acalled(ctx: JobContext, name: str, value: Any) -> Any:
    from asgiref.sync import sync_to_async

    await asyncio.sleep(0.01 if name == "x" else 0)
    await sync_to_async(called)(ctx, name)
    return value


@job("tests.steps.gather", max_attempts=2)
async def gather(ctx: JobContext) -> list[Any]:
    """Distinctly named steps side by side: x (async fn, finishes last) and y (sync fn)."""
    results = await asyncio.gather(
        ctx.astep("x", _acalled, ctx, "x", 1), ctx.astep("y", called, ctx, "y", 2)
    )
    if ctx.attempt == 1:
        raise ValueError("attempt 1 fails after the gather")
    return list(results)


@job("tests.steps.async_all", max_attempts=2)
async def async_all(ctx: JobContext) -> dict[str, Any]:
    """An async handler with astep, asleep and await_event."""
    first = await ctx.astep("first", called, ctx, "first", 1)
    await ctx.asleep("nap", float(ctx.payload.get("sleep", 0)))
    event = await ctx.await_event(ctx.payload["key"])
    return {"first": first, "event": event}


@job("tests.steps.bad_result", max_attempts=1)
def bad_result(ctx: JobContext) -> Any:
    if ctx.payload.get("big"):
        return ctx.step("big", lambda: "x" * 200)
    return ctx.step("odd", lambda: {"when": object()})


@job("tests.steps.retry", max_attempts=1)
def retry(ctx: JobContext) -> Any:
    def flaky() -> str:
        called(ctx, "flaky")
        if StepCall.objects.filter(job_id=ctx.id, name="flaky").count() < 3:
            raise ConnectionError("not yet")
        return "ok"

    policy = StepRetry(attempts=int(ctx.payload.get("attempts", 3)), delay=0)
    return ctx.step("flaky", flaky, retry=policy)


@job("tests.steps.atomic", max_attempts=2)
def atomic(ctx: JobContext) -> Any:
    """An atomic step that writes a row; ``fail_in_step``: attempt 1's fn raises after it."""

    def write() -> int:
        row = StepCall.objects.create(job_id=ctx.id, name="write", attempt=ctx.attempt)
        if ctx.payload.get("fail_in_step") and ctx.attempt == 1:
            raise ValueError("the step fails after its write")
        if ctx.payload.get("take_over"):
            take_over(ctx.id)
        return row.pk

    try:
        return {"row": ctx.step("write", write, atomic=True)}
    except LeaseLost as exc:
        seen[str(ctx.id)] = {"lease_lost": str(exc)}
        raise


@job("tests.steps.fenced", max_attempts=1)
def fenced(ctx: JobContext) -> Any:
    """Step one; the lease is taken over; step two's checkpoint must fail."""
    ctx.step("one", called, ctx, "one")
    take_over(ctx.id)
    try:
        ctx.step("two", called, ctx, "two")
    except LeaseLost:
        seen[str(ctx.id)] = {"lease_lost": True}
        raise
    seen[str(ctx.id)] = {"lease_lost": False}


@job("tests.steps.sees_cancel", max_attempts=1)
def sees_cancel(ctx: JobContext) -> Any:
    """A step whose fn asks for the job's cancel: the checkpoint reports it."""
    from django_durable_jobs import operations

    before = ctx.cancelled
    ctx.step("cancel me", lambda: operations.cancel(ctx.id) and None)
    seen[str(ctx.id)] = {"before": before, "after": ctx.cancelled}


@job("tests.steps.nap")
def nap(ctx: JobContext) -> dict[str, Any]:
    called(ctx, "before")
    ctx.sleep("nap", float(ctx.payload["seconds"]))
    called(ctx, "after")
    return {"woke": True}


@job("tests.steps.nap_until")
def nap_until(ctx: JobContext) -> dict[str, Any]:
    from datetime import datetime

    ctx.sleep_until("nap", datetime.fromisoformat(ctx.payload["until"]))
    return {"woke": True}


@job("tests.steps.wait", max_attempts=2)
def wait(ctx: JobContext) -> dict[str, Any]:
    timeout = ctx.payload.get("timeout")
    try:
        payload = ctx.wait_for_event(ctx.payload["key"], timeout=timeout)
    except EventTimeout:
        called(ctx, "timed out")
        if ctx.payload.get("fail_after_timeout") and ctx.attempt == 1:
            raise ValueError("attempt 1 fails after the timeout") from None
        return {"timed_out": True}
    return {"event": payload}


@job("tests.steps.parent", max_attempts=1)
def parent(ctx: JobContext) -> dict[str, Any]:
    called(ctx, "parent run")
    try:
        result = ctx.run_job(
            ctx.payload["child"],
            ctx.payload.get("payload", {}),
            idempotency_key=ctx.payload.get("key"),
        )
    except ChildJobFailed as exc:
        return {"child_failed": exc.status, "child": str(exc.child_id)}
    return {"child_result": result}


@job("tests.steps.in_transaction", max_attempts=1)
def in_transaction(ctx: JobContext) -> None:
    from django.db import transaction

    # On the jobs' database: the suspension's own transaction.
    with transaction.atomic(using=db.database_alias()):
        ctx.sleep("nap", 60)


@job("tests.steps.cancel_then_sleep", max_attempts=3)
def cancel_then_sleep(ctx: JobContext) -> None:
    """Cancelled while it runs (by another connection), then it tries to sleep."""
    from tests.integration.helpers import new_connection

    with new_connection() as conn:
        conn.execute(
            "UPDATE durable_jobs_job SET cancel_requested_at = now() WHERE id = %s", [ctx.id]
        )
    ctx.sleep("nap", 3600)


@job("tests.steps.extends", max_attempts=1)
def extends(ctx: JobContext) -> None:
    """Its lease nearly runs out; a checkpoint extends it."""
    from tests.integration.helpers import new_connection

    def left() -> float:
        with new_connection() as conn:
            row = conn.execute(
                "SELECT extract(epoch FROM lease_expires_at - now()) FROM durable_jobs_job "
                "WHERE id = %s",
                [ctx.id],
            ).fetchone()
        assert row is not None
        return float(row[0])

    # The worker's heartbeat may extend the lease between the UPDATE and the read
    # (seen once in CI: 19.99 s left): shorten it again until the read sees it short.
    for _ in range(5):
        with new_connection() as conn:
            conn.execute(
                "UPDATE durable_jobs_job SET lease_expires_at = now() + interval '1 second' "
                "WHERE id = %s",
                [ctx.id],
            )
        before = left()
        if before <= 1.0:
            break
    ctx.step("s", lambda: 1)
    seen[str(ctx.id)] = {"before": before, "after": left()}


@job("tests.steps.sync_call_in_async", max_attempts=1)
async def sync_call_in_async(ctx: JobContext) -> Any:
    return ctx.step("a", lambda: 1)


@job("tests.steps.reaped", max_attempts=3)
def reaped(ctx: JobContext) -> list[Any]:
    """Step a; on attempt 1, wait for the gate (the test reaps the job meanwhile); step b."""
    from .jobs import gate

    first = ctx.step("a", called, ctx, "a", "A")
    if ctx.attempt == 1:
        gate("steps-reaped").wait(30)
    try:
        second = ctx.step("b", called, ctx, "b", "B")
    except LeaseLost:
        seen[str(ctx.id)] = {"lease_lost_on_attempt": ctx.attempt}
        raise
    return [first, second]
