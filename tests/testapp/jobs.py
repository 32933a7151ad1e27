"""Handlers for the worker's tests; registered in test processes and e2e workers."""

from __future__ import annotations

import asyncio
import contextlib
import threading
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


@job("tests.enqueues")
def enqueues(ctx: JobContext) -> dict[str, str]:
    """Record the execution; enqueue a ``payload["type"]`` job (its payload: ``{"from": id}``)."""
    from django_durable_jobs import enqueue

    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    child = enqueue(ctx.payload["type"], {"from": str(ctx.id)}).job
    return {"enqueued": str(child.pk)}


@job("tests.aenqueues")
async def aenqueues(ctx: JobContext) -> dict[str, str]:
    """``tests.enqueues`` from a coroutine: the enqueue through ``sync_to_async``."""
    from asgiref.sync import sync_to_async

    from django_durable_jobs import enqueue

    child = await sync_to_async(enqueue)(ctx.payload["type"], {"from": str(ctx.id)})
    return {"enqueued": str(child.job.pk)}


@job("tests.parent_status")
def parent_status(ctx: JobContext) -> str:
    """The status of the job ``payload["from"]`` names, as this job runs."""
    from django_durable_jobs.models import Job

    return str(Job.objects.get(pk=ctx.payload["from"]).status)


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


# Jobs of tests.concurrent running now in this process, by queue.
_concurrent: dict[str, int] = {}
_concurrent_lock = threading.Lock()


@job("tests.concurrent")
def concurrent(ctx: JobContext) -> dict[str, int]:
    """Record the execution; return how many jobs of its queue ran at once as it started.

    Sleeps ``payload["sleep"]`` seconds. The most any job returns is the most
    this process ever ran at once in that queue.
    """
    with _concurrent_lock:
        _concurrent[ctx.queue] = now = _concurrent.get(ctx.queue, 0) + 1
    try:
        Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
        time.sleep(float(ctx.payload.get("sleep", 0)))
    finally:
        with _concurrent_lock:
            _concurrent[ctx.queue] -= 1
    return {"concurrent": now}


# Gates, for workers in the test process: a tests.gated job runs until the test
# opens its gate, so "still running" is a fact of the test, not of a clock.
_gates: dict[str, threading.Event] = {}


def gate(name: str) -> threading.Event:
    """The gate ``name`` (created closed); ``gate(name).set()`` lets its jobs return."""
    with _concurrent_lock:
        return _gates.setdefault(name, threading.Event())


@job("tests.gated")
def gated(ctx: JobContext) -> dict[str, bool]:
    """Record the execution, then wait for the gate ``payload["gate"]`` (at most 60 s)."""
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    return {"opened": gate(str(ctx.payload["gate"])).wait(60)}


# Time limits (tests/*/test_time_limits*.py, test_timeouts*.py).


@job("tests.sleep_in_c", timeout=30)
def sleep_in_c(ctx: JobContext) -> dict[str, Any]:
    """Record the execution, then block in C (``time.sleep``) for ``payload["sleep"]`` s.

    The handler's own limit (30 s) is overridden per job by ``enqueue(timeout=...)``.
    """
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    time.sleep(float(ctx.payload["sleep"]))
    return {"slept": True}


@job("tests.spin", timeout=1)
def spin(ctx: JobContext) -> int:
    """Record the execution, then spin in pure Python for ``payload["spin"]`` s (default: for ever).

    Ignores ``ctx.cancelled``, like a runaway loop: the watchdog fails the attempt
    at the deadline but cannot stop the thread; only its own clock (or the
    worker process's exit, after a recycle) does.
    """
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    until = time.monotonic() + float(ctx.payload.get("spin", 1e9))
    count = 0
    while time.monotonic() < until:
        count += 1
    return count


@job("tests.stops_when_cancelled")
def stops_when_cancelled(ctx: JobContext) -> None:
    """Wait until the worker gives up on the attempt (not the deadline alone), then ``check()``.

    Forces the path where the watchdog takes the job before the handler
    raises ``JobTimeout``: the handler's own outcome is then dropped.
    """
    cancel = ctx._cancel
    assert cancel is not None, "runs under a worker's watchdog"
    while not cancel.is_set():
        time.sleep(0.01)
    ctx.check()


@job("tests.cooperative")
def cooperative(ctx: JobContext) -> dict[str, Any]:
    """Record the execution, then work in small steps, calling ``ctx.check()`` between them."""
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    steps = 0
    for _ in range(int(ctx.payload.get("steps", 1_000_000))):
        ctx.check()
        time.sleep(0.01)
        steps += 1
    return {"steps": steps, "remaining": ctx.remaining}


@job("tests.serial", concurrency_limit=1)
def serial(ctx: JobContext) -> dict[str, Any]:
    """One at a time per concurrency key: records its run, sleeps ``payload["sleep"]``.

    A retry sleeps ``payload["retry_sleep"]`` instead, when given: a long first
    attempt for a worker to be killed in, and a quick retry once it is reaped.
    """
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    seconds = ctx.payload.get("sleep", 0)
    if ctx.attempt > 1:
        seconds = ctx.payload.get("retry_sleep", seconds)
    time.sleep(float(seconds))
    return {"attempt": ctx.attempt}


@job("tests.pair", concurrency_limit=2)
def pair(ctx: JobContext) -> None:
    """Two at a time per concurrency key."""
    time.sleep(float(ctx.payload.get("sleep", 0)))


# Cancelling a running job (tests/*/test_cancel*.py).

#: When each tests.cancellable job's handler saw ctx.cancelled (time.monotonic()).
cancel_seen: dict[str, float] = {}


@job("tests.cancellable")
def cancellable(ctx: JobContext) -> dict[str, Any]:
    """Record the execution, then loop for ``payload["seconds"]`` (default 60), calling
    ``ctx.check()`` every 50 ms, as ``example.cancellable`` does.

    Records in ``cancel_seen`` when ``ctx.cancelled`` turned true; with
    ``payload["swallow"]`` it then returns normally instead of raising.
    """
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    until = time.monotonic() + float(ctx.payload.get("seconds", 60))
    while time.monotonic() < until:
        if ctx.cancelled:
            cancel_seen[str(ctx.id)] = time.monotonic()
            if ctx.payload.get("swallow"):
                return {"swallowed": True}
        ctx.check()
        time.sleep(0.05)
    return {"looped": True}


@job("tests.ignores_cancel")
def ignores_cancel(ctx: JobContext) -> dict[str, bool]:
    """Record the execution, then sleep ``payload["seconds"]`` in 50 ms steps, never checking."""
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    until = time.monotonic() + float(ctx.payload["seconds"])
    while time.monotonic() < until:
        time.sleep(0.05)
    return {"ignored": True}


# Async handlers (tests/*/test_async_handlers*.py). Each records its run with
# the async ORM, so the tests also see that the ORM works where it should.

#: Async jobs running now in this process, and the most that ever did at once.
_async_running = {"now": 0, "most": 0}


async def _arecord(ctx: JobContext, worker: str | None = None) -> None:
    await Execution.objects.acreate(
        job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id if worker is None else worker
    )


@job("tests.asleep")
async def asleep(ctx: JobContext) -> dict[str, Any]:
    """Record the execution, then ``await asyncio.sleep(payload["sleep"])`` (default 0).

    Returns where it ran (its coroutine's thread), when on this process's
    monotonic clock (so that a test sees how many ran at once from the
    handlers' side), and the most async jobs that ran at once in this
    process so far.
    """
    started = time.monotonic()
    _async_running["now"] += 1  # only the event loop's thread runs this code
    _async_running["most"] = max(_async_running["most"], _async_running["now"])
    try:
        await _arecord(ctx)
        await asyncio.sleep(float(ctx.payload.get("sleep", 0)))
    finally:
        _async_running["now"] -= 1
    return {
        "thread": threading.current_thread().name,
        "most": _async_running["most"],
        "started": started,
        "ended": time.monotonic(),
    }


@job("tests.async_outcome")
async def async_outcome(ctx: JobContext) -> Any:
    """Ends as ``payload["do"]`` says: "return", "raise", "retry" or "discard"."""
    await _arecord(ctx)
    do = ctx.payload["do"]
    if do == "raise":
        raise ValueError(f"async attempt {ctx.attempt} fails")
    if do == "retry":
        raise Retry(after=0.01)
    if do == "discard":
        raise Discard("async: not worth retrying")
    return {"returned": ctx.payload.get("value")}


@job("tests.async_cancelled")
async def async_cancelled(ctx: JobContext) -> None:
    """Record the execution, then sleep ``payload["sleep"]`` s (default 60) in one await.

    When the worker cancels its task, records that it saw the CancelledError
    (an ``Execution`` whose worker is "cancelled") and re-raises it; with
    ``payload["swallow"]`` it swallows it instead and sleeps on, in steps of
    50 ms, until the gate ``payload["gate"]`` opens (another process: for
    ``payload["swallow"]`` s).
    """
    await _arecord(ctx)
    try:
        await asyncio.sleep(float(ctx.payload.get("sleep", 60)))
    except asyncio.CancelledError:
        await _arecord(ctx, "cancelled")
        if not ctx.payload.get("swallow"):
            raise
    name = ctx.payload.get("gate")
    until = time.monotonic() + float(ctx.payload.get("swallow") or 0)

    def going_on() -> bool:
        return not gate(name).is_set() if name else time.monotonic() < until

    while going_on():
        with contextlib.suppress(asyncio.CancelledError):  # and again: it never stops by itself
            await asyncio.sleep(0.05)


@job("tests.async_checks")
async def async_checks(ctx: JobContext) -> dict[str, bool]:
    """Record the execution, then call ``ctx.check()`` every 50 ms for ``payload["seconds"]``.

    Catches the worker's CancelledError (the grace after a cancel request
    may end first on a slow machine) only to record it, like
    ``tests.async_cancelled``.
    """
    await _arecord(ctx)
    until = time.monotonic() + float(ctx.payload.get("seconds", 60))
    while time.monotonic() < until:
        ctx.check()
        await asyncio.sleep(0.05)
    return {"looped": True}


@job("tests.async_sync_orm", max_attempts=1)
async def async_sync_orm(ctx: JobContext) -> None:
    """Uses the sync ORM in a coroutine: Django raises SynchronousOnlyOperation."""
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)


@job("tests.async_orm")
async def async_orm(ctx: JobContext) -> dict[str, Any]:
    """The async ORM (acreate, aget, acount) and sync_to_async, and the threads they ran on."""
    from asgiref.sync import sync_to_async

    created = await Execution.objects.acreate(job_id=ctx.id, attempt=ctx.attempt, worker="async")
    fetched = await Execution.objects.aget(pk=created.pk)
    counted = await Execution.objects.filter(job_id=ctx.id).acount()

    def in_sync_code() -> dict[str, Any]:
        Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker="sync_to_async")
        return {"thread": threading.current_thread().name}

    synced = await sync_to_async(in_sync_code)()
    return {
        "fetched": str(fetched.job_id),
        "counted": counted,
        "sync_thread": synced["thread"],
        "loop_thread": threading.current_thread().name,
    }


@job("tests.returns_coroutine", max_attempts=1)
def returns_coroutine(ctx: JobContext) -> Any:
    """A sync function that returns a coroutine (a wrapper that lost ``async``)."""
    return asyncio.sleep(0)


@job("tests.async_to_thread")
async def async_to_thread(ctx: JobContext) -> dict[str, Any]:
    """The sync ORM through ``asyncio.to_thread``: the loop's default executor."""

    def record() -> dict[str, Any]:
        Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker="to_thread")
        return {"thread": threading.current_thread().name}

    return await asyncio.to_thread(record)


@job("tests.value")
def value(ctx: JobContext) -> Any:
    """Record the execution; return ``payload["value"]``."""
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    return ctx.payload.get("value")


@job("tests.parents")
def parents(ctx: JobContext) -> dict[str, Any]:
    """Record the execution; return ``ctx.parent_results`` (ids as text)."""
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    return {str(parent): result for parent, result in ctx.parent_results.items()}


@job("tests.async_parents")
async def async_parents(ctx: JobContext) -> dict[str, Any]:
    """``ctx.parent_results`` from a coroutine (ids as text)."""
    return {str(parent): result for parent, result in ctx.parent_results.items()}


# Traces (tests/integration/test_tracing.py): OpenTelemetry is imported in the
# handler, not here, so that this module imports where it is not installed.


def _current_span_ids() -> dict[str, str]:
    from opentelemetry import trace

    span_context = trace.get_current_span().get_span_context()
    return {"trace_id": f"{span_context.trace_id:032x}", "span_id": f"{span_context.span_id:016x}"}


@job("tests.traced")
def traced(ctx: JobContext) -> dict[str, str]:
    """Make a span of its own, ``handler work``; fail until ``payload["succeed_on"]``
    (default 1); return the ids of the span current when it started."""
    from opentelemetry import trace

    seen = _current_span_ids()
    with trace.get_tracer("tests").start_as_current_span("handler work"):
        if ctx.attempt < int(ctx.payload.get("succeed_on", 1)):
            raise ValueError(f"attempt {ctx.attempt} fails")
    return seen


@job("tests.atraced")
async def atraced(ctx: JobContext) -> dict[str, str]:
    """``tests.traced`` as an ``async def`` handler, its span across an await."""
    from opentelemetry import trace

    seen = _current_span_ids()
    with trace.get_tracer("tests").start_as_current_span("handler work"):
        await asyncio.sleep(0)
        if ctx.attempt < int(ctx.payload.get("succeed_on", 1)):
            raise ValueError(f"async attempt {ctx.attempt} fails")
    return seen


# -- durable steps (issue 24): tests/e2e/test_durable_steps.py, tests/chaos -----


def _step_run(ctx: JobContext, step: str, active: int | None = None) -> dict[str, Any]:
    from .models import StepRun

    StepRun.objects.create(
        job_id=ctx.id, step=step, attempt=ctx.attempt, worker=ctx.worker_id, active=active
    )
    return {"step": step, "attempt": ctx.attempt}


@job("tests.three_steps", max_attempts=25)
def three_steps(ctx: JobContext) -> dict[str, Any]:
    """Steps ``one``, ``two``, ``three``, each writing a ``StepRun`` row in its function.

    Between ``two`` and ``three`` it sleeps ``payload["pause"]`` seconds
    (plain ``time.sleep``, default 0) on its first attempt only: the window
    in which the e2e test SIGKILLs its worker. A later attempt replays
    ``one`` and ``two`` from their records and runs ``three``.
    """
    first = ctx.step("one", _step_run, ctx, "one")
    second = ctx.step("two", _step_run, ctx, "two")
    pause = float(ctx.payload.get("pause", 0))
    if pause and ctx.attempt == 1:
        time.sleep(pause)
    third = ctx.step("three", _step_run, ctx, "three")
    return {"one": first["attempt"], "two": second["attempt"], "three": third["attempt"]}


@job("tests.atomic_steps", max_attempts=50)
def atomic_steps(ctx: JobContext) -> dict[str, Any]:
    """An ``atomic=True`` step writing a ``StepRun`` row (the chaos suite counts them).

    Sleeps ``payload["sleep"]`` seconds inside the atomic step (the
    transaction stays open meanwhile: a SIGKILL or a terminated backend
    there rolls the row back with the record) and again after it.
    """
    Execution.objects.create(job_id=ctx.id, attempt=ctx.attempt, worker=ctx.worker_id)
    seconds = float(ctx.payload.get("sleep", 0))

    def write() -> dict[str, Any]:
        row = _step_run(ctx, "write")
        if seconds:
            time.sleep(seconds)
        return row

    written = ctx.step("write", write, atomic=True)
    if seconds:
        time.sleep(seconds)
    return {"written_on": written["attempt"]}


_sleepers = [0]  # tests.step_sleeper handlers running now in this process


@job("tests.step_sleeper")
def step_sleeper(ctx: JobContext) -> dict[str, Any]:
    """A step, then ``ctx.sleep("nap", payload["seconds"])``, then another step.

    Each step's row records how many of these handlers the process was
    running as it ran (``StepRun.active``): what holds a slot, unlike the
    jobs the worker claimed ahead (``running`` in the table, not started).
    """
    with _concurrent_lock:
        _sleepers[0] += 1
    try:
        ctx.step("before", lambda: _step_run(ctx, "before", _sleepers[0]))
        ctx.sleep("nap", float(ctx.payload.get("seconds", 1)))
        ctx.step("after", lambda: _step_run(ctx, "after", _sleepers[0]))
        return {"woke": True}
    finally:
        with _concurrent_lock:
            _sleepers[0] -= 1


@job("tests.step_waiter")
def step_waiter(ctx: JobContext) -> dict[str, Any]:
    """Waits for the event ``payload["key"]`` (timeout ``payload.get("timeout")``)."""
    from django_durable_jobs import EventTimeout

    ctx.step("before", _step_run, ctx, "before")
    try:
        event = ctx.wait_for_event(ctx.payload["key"], timeout=ctx.payload.get("timeout"))
    except EventTimeout:
        return {"timed_out": True}
    ctx.step("after", _step_run, ctx, "after")
    return {"event": event}


@job("tests.step_parent")
def step_parent(ctx: JobContext) -> dict[str, Any]:
    """Runs ``payload["child"]`` with ``payload["payload"]`` as a child job; returns its result."""
    from django_durable_jobs import ChildJobFailed

    try:
        result = ctx.run_job(ctx.payload["child"], ctx.payload.get("payload") or {})
    except ChildJobFailed as exc:
        return {"child_failed": str(exc)}
    return {"child_result": result}


# Durable steps (tests/integration/test_steps*.py).
from . import step_jobs as step_jobs  # noqa: E402
