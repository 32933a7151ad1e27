"""The example handlers; ``django_durable_jobs`` finds this module by itself."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from django_durable_jobs import JobContext, job
from django_durable_jobs.schedules import tick_from_key


@job("example.noop")
def noop(ctx: JobContext) -> None:
    """Does nothing: the cheapest job, for benchmarks."""


@job("example.echo")
def echo(ctx: JobContext) -> dict[str, Any]:
    """Returns its payload, which becomes the job's result."""
    return ctx.payload


@job("example.sleep")
def sleep(ctx: JobContext) -> dict[str, float]:
    """Sleeps ``payload["seconds"]`` (default 1)."""
    seconds = float(ctx.payload.get("seconds", 1))
    time.sleep(seconds)
    return {"slept": seconds}


@job("example.asleep")
async def asleep(ctx: JobContext) -> dict[str, float]:
    """``async def``: awaits ``asyncio.sleep(payload["seconds"])`` (default 1).

    Runs on the worker's event loop and takes a slot like any job: twenty of
    them at 0.5 s on ``--concurrency 4`` take about 2.5 s. A time limit or a
    cancel cancels the sleep (docs/guides/async-handlers.md).
    """
    seconds = float(ctx.payload.get("seconds", 1))
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@job("example.anoop")
async def anoop(ctx: JobContext) -> None:
    """``async def`` that does nothing: the async twin of ``example.noop``, for benchmarks."""


@job("example.timeboxed", timeout=2)
def timeboxed(ctx: JobContext) -> dict[str, float]:
    """Sleeps ``payload["seconds"]`` (default 1) in 0.1 s steps, under a 2 s time limit.

    Past 2 s the attempt fails with ``JobTimeout`` and is retried; ``ctx.check()``
    between steps makes the handler stop by itself at the deadline.
    """
    seconds = float(ctx.payload.get("seconds", 1))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ctx.check()
        time.sleep(min(0.1, left))
    return {"slept": seconds}


@job("example.cancellable")
def cancellable(ctx: JobContext) -> dict[str, float]:
    """Loops for ``payload["seconds"]`` (default 10), checking ``ctx.check()`` every 50 ms.

    Cancel it while it runs (``POST /api/jobs/{id}/cancel``: 202, ``jobs cancel
    ID``, the admin): ``ctx.check()`` raises ``JobCancelled`` within about a
    second and the job ends ``cancelled``, not retried.
    """
    seconds = float(ctx.payload.get("seconds", 10))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ctx.check()
        time.sleep(min(0.05, left))
    return {"looped": seconds}


@job("example.sum_parents")
def sum_parents(ctx: JobContext) -> int | float:
    """Returns the sum of its parents' numeric results (enqueue it with ``depends_on``).

    A parent whose result is not a number (none, a dict, a dead parent's
    ``None`` under ``on_parent_failure="run"``) adds nothing.
    """
    return sum(
        result
        for result in ctx.parent_results.values()
        if isinstance(result, (int, float)) and not isinstance(result, bool)
    )


class ExampleFailure(Exception):
    pass


@job("example.fail", max_attempts=3)
def fail(ctx: JobContext) -> None:
    """Always raises: shows retries with backoff, then the dead state."""
    raise ExampleFailure(f"example.fail always fails (attempt {ctx.attempt})")


@job("example.flaky")
def flaky(ctx: JobContext) -> dict[str, int]:
    """Fails until attempt >= ``payload["succeed_on_attempt"]`` (default 2)."""
    succeed_on = int(ctx.payload.get("succeed_on_attempt", 2))
    if ctx.attempt < succeed_on:
        raise ExampleFailure(f"flaky: attempt {ctx.attempt} < {succeed_on}")
    return {"succeeded_on_attempt": ctx.attempt}


# Periodic: every 2 seconds, but only when EXAMPLE_SCHEDULES=1, so that the
# demo and the tests do not fill the table with ticks unless asked to. The
# handler itself is always registered: any worker can run a tick's job.
@job("example.tick", schedule=2 if os.environ.get("EXAMPLE_SCHEDULES") == "1" else None)
def tick(ctx: JobContext) -> dict[str, str | None]:
    """Returns the tick it was enqueued for (the scheduler's idempotency key tells)."""
    scheduled = tick_from_key(ctx.idempotency_key)
    return {"tick": None if scheduled is None else scheduled.isoformat()}


@job("example.serial", concurrency_limit=1)
def serial(ctx: JobContext) -> dict[str, Any]:
    """Sleeps ``payload["seconds"]``; jobs sharing a ``concurrency_key`` never overlap.

    ``enqueue("example.serial", {"seconds": 2}, concurrency_key="customer:42")``
    twice: the second starts when the first has finished, whichever worker
    takes it; a job with another key runs beside them.
    """
    seconds = float(ctx.payload.get("seconds", 1))
    if seconds > 0:  # time.sleep(0) still gives up the GIL: a benchmark's cost, not the key's
        time.sleep(seconds)
    return {"key_slept": seconds}


# -- durable steps (docs/guides: "Durable steps") ------------------------------------


@job("example.checkout")
def checkout(ctx: JobContext) -> dict[str, Any]:
    """Charge, record, email: three steps, each done once per job.

    Payload ``{"order": str, "pause": seconds (default 0), "fail_at": step}``:
    ``pause`` sleeps (plain ``time.sleep``) after each step, so a worker can
    be killed between them; ``fail_at`` makes that step raise. ``record`` is
    atomic: its ``Receipt`` commits with the step's record, so a retry never
    writes a second one. ``charge`` and ``email`` stand for calls outside the
    database (at least once: a real one would pass an idempotency key made
    of ``ctx.id`` and the step's name).
    """
    from .models import Receipt

    order = str(ctx.payload["order"])
    pause = float(ctx.payload.get("pause", 0))
    fail_at = ctx.payload.get("fail_at")

    def run(name: str, work: Any) -> Any:
        def fn() -> Any:
            if fail_at == name:
                raise RuntimeError(f"step {name} failed (fail_at)")
            return work()

        value = ctx.step(name, fn, atomic=name == "record")
        if pause:
            time.sleep(pause)
        return value

    run("charge", lambda: {"charged": order, "key": f"{ctx.id}:charge"})
    receipt = run("record", lambda: Receipt.objects.create(order=order).pk)
    run("email", lambda: {"sent": order, "key": f"{ctx.id}:email"})
    return {"order": order, "receipt": receipt}


@job("example.nap")
def nap(ctx: JobContext) -> dict[str, bool]:
    """Sleeps ``payload["seconds"]`` without holding a slot (``ctx.sleep``)."""
    ctx.sleep("nap", float(ctx.payload["seconds"]))
    return {"woke": True}


@job("example.wait_for_signup")
def wait_for_signup(ctx: JobContext) -> dict[str, Any]:
    """Waits for the event ``signup:<id>`` (``jobs emit signup:<id>``), up to ``timeout`` s."""
    from django_durable_jobs import EventTimeout

    timeout = ctx.payload.get("timeout")
    try:
        event = ctx.wait_for_event(
            f"signup:{ctx.payload['id']}", timeout=None if timeout is None else float(timeout)
        )
    except EventTimeout:
        return {"timed_out": True}
    return {"event": event}


@job("example.parent_of")
def parent_of(ctx: JobContext) -> dict[str, Any]:
    """Runs the job ``payload["child"]`` with ``payload["payload"]`` and returns its result."""
    return {"child_result": ctx.run_job(ctx.payload["child"], ctx.payload.get("payload", {}))}


@job("example.steps")
def steps(ctx: JobContext) -> int:
    """Runs ``payload["steps"]`` no-op durable steps (default 1): for benchmarks."""
    count = int(ctx.payload.get("steps", 1))
    for _ in range(count):
        ctx.step("noop", int)
    return count
