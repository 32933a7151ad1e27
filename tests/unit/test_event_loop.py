"""The worker's event loop for async handlers, without a database: how a slot thread
runs a coroutine, serves its sync calls, and how a give-up cancels it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from django_durable_jobs.context import CancelFlag, JobContext
from django_durable_jobs.exceptions import JobCancelled, JobTimeout
from django_durable_jobs.worker import event_loop as event_loop_module
from django_durable_jobs.worker.attempts import Attempt
from django_durable_jobs.worker.event_loop import THREAD_NAME, EventLoop, SlotThreadExecutor
from django_durable_jobs.worker.stacks import coroutine_stack
from tests.factories import WAIT_SECONDS, claimed_job, wait_until


def context(flag: CancelFlag | None = None, timeout: float | None = None) -> JobContext:
    return JobContext(
        id=uuid.uuid4(), type="unit.async", queue="default", payload={}, attempt=1,
        max_attempts=3, timeout=timeout, _cancel=flag,
    )  # fmt: skip


def attempt() -> Attempt:
    return Attempt(claimed_job(), None)


@pytest.fixture
def loop() -> Iterator[EventLoop]:
    running = EventLoop()
    yield running
    running.stop()


# --- the cancel flag's give-up callback --------------------------------------------


def test_the_give_up_callback_runs_once_at_set_and_not_at_a_cancel_request() -> None:
    flag = CancelFlag()
    calls: list[int] = []
    flag.on_give_up(lambda: calls.append(1))
    flag.request_cancel()  # a request leaves the handler its grace
    assert flag.is_set() and calls == []
    flag.set()
    flag.set()
    assert calls == [1]


def test_a_callback_registered_after_the_give_up_runs_at_once_and_none_forgets_it() -> None:
    flag = CancelFlag()
    flag.set()
    calls: list[int] = []
    flag.on_give_up(lambda: calls.append(1))
    assert calls == [1]
    other = CancelFlag()
    other.on_give_up(lambda: calls.append(2))
    other.on_give_up(None)
    other.set()
    assert calls == [1]


# --- the slot thread's executor ----------------------------------------------------


def test_the_slot_thread_runs_the_calls_submitted_until_the_finish() -> None:
    executor = SlotThreadExecutor()
    ran_on: list[str] = []
    results: list[int] = []

    def where() -> int:
        ran_on.append(threading.current_thread().name)
        return 1

    def elsewhere() -> None:
        first, second = executor.submit(where), executor.submit(lambda: 2)
        results.append(first.result(5) + second.result(5))
        executor.finish()

    threading.Thread(target=elsewhere, name="other").start()
    executor.serve()
    assert results == [3]
    assert ran_on == [threading.current_thread().name]
    late: list[BaseException] = []

    def submit_late() -> None:
        try:
            executor.submit(lambda: None)
        except RuntimeError as exc:
            late.append(exc)

    thread = threading.Thread(target=submit_late)
    thread.start()
    thread.join(5)
    (error,) = late
    assert "attempt this slot thread ran is over" in str(error)
    with pytest.raises(RuntimeError, match="cannot submit work to itself"):
        executor.submit(lambda: None)


# --- running a coroutine -----------------------------------------------------------


def test_a_coroutine_runs_on_the_loop_thread_and_its_sync_calls_on_the_caller(
    loop: EventLoop,
) -> None:
    async def handler(ctx: JobContext) -> dict[str, str]:
        sync = await sync_to_async(lambda: threading.current_thread().name)()
        return {"loop": threading.current_thread().name, "sync": sync}

    assert not loop.started
    assert loop.run(handler, context()) == {
        "loop": THREAD_NAME,
        "sync": threading.current_thread().name,
    }
    assert loop.started and loop.running


def test_the_older_asgiref_path_sends_sync_calls_to_the_caller_too(
    loop: EventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_loop_module, "_CONTEXT_TAKES_EXECUTOR", False)

    async def handler(ctx: JobContext) -> str:
        return await sync_to_async(lambda: threading.current_thread().name)()

    assert loop.run(handler, context()) == threading.current_thread().name


def test_exceptions_and_base_exceptions_reach_the_slot_thread(loop: EventLoop) -> None:
    async def raises(ctx: JobContext) -> None:
        raise ValueError("boom")

    async def exits(ctx: JobContext) -> None:
        raise SystemExit(3)

    with pytest.raises(ValueError, match="boom"):
        loop.run(raises, context())
    with pytest.raises(SystemExit):
        loop.run(exits, context())
    assert loop.running  # the loop itself never saw them


def test_each_job_runs_in_a_fresh_context(loop: EventLoop) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def reads_then_sets(ctx: JobContext) -> str:
        seen = var.get()
        var.set("set by a job")
        return seen

    assert loop.run(reads_then_sets, context()) == "unset"
    assert loop.run(reads_then_sets, context()) == "unset"


@pytest.mark.parametrize(
    ("requested", "expected"), [(False, JobTimeout), (True, JobCancelled)], ids=["limit", "cancel"]
)
def test_a_give_up_cancels_the_task_and_the_reason_is_raised(
    loop: EventLoop, requested: bool, expected: type[Exception]
) -> None:
    held = attempt()
    seen: list[str] = []

    async def waits(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    def give_up() -> None:
        time.sleep(0.1)
        if requested:
            held.cancel.request_cancel()
        held.cancel.set()

    threading.Thread(target=give_up).start()
    with pytest.raises(expected):
        loop.run(waits, context(held.cancel, timeout=0.1), held)
    assert seen == ["cancelled"]


@pytest.mark.parametrize(
    ("requested", "expected"), [(False, JobTimeout), (True, JobCancelled)], ids=["limit", "cancel"]
)
def test_a_give_up_before_the_task_s_first_step_ends_the_run(
    loop: EventLoop, requested: bool, expected: type[Exception]
) -> None:
    """Given up before ``run`` (so the cancel lands between the task's creation and its
    first step): the coroutine never starts, and the run still ends with the reason."""
    held = attempt()
    started: list[bool] = []

    async def never_started(ctx: JobContext) -> None:
        started.append(True)

    if requested:
        held.cancel.request_cancel()
    held.cancel.set()
    raised: list[BaseException] = []

    def slot_thread() -> None:
        try:
            loop.run(never_started, context(held.cancel, timeout=0.1), held)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=slot_thread, daemon=True)
    thread.start()
    thread.join(WAIT_SECONDS)
    assert not thread.is_alive(), "the slot thread still waits for a task that never started"
    assert started == []
    assert len(raised) == 1 and isinstance(raised[0], expected), raised


def test_a_cancelled_error_not_from_the_worker_is_a_failure(loop: EventLoop) -> None:
    async def cancels_itself(ctx: JobContext) -> None:
        raise asyncio.CancelledError()

    with pytest.raises(RuntimeError, match="cancelled by something other than the worker"):
        loop.run(cancels_itself, context(CancelFlag()), attempt())


def stack_while_running(loop: EventLoop, held: Any, handler: Any) -> str:
    """What the watchdog reads of ``held``'s task 0.1 s after it started, ``handler`` running."""
    stacks: list[str] = []

    def read() -> None:
        wait_until(lambda: held.task_stack is not None, WAIT_SECONDS, "the task")
        time.sleep(0.1)
        assert held.task_stack is not None
        stacks.append(held.task_stack())

    reader = threading.Thread(target=read)
    reader.start()
    loop.run(handler, context(held.cancel), held)
    reader.join(5)
    (stack,) = stacks
    return stack


def test_the_watchdog_reads_where_the_coroutine_waits(loop: EventLoop) -> None:
    held = attempt()

    async def nested(ctx: JobContext) -> None:
        await deep_wait()

    async def deep_wait() -> None:
        await asyncio.sleep(0.3)

    stack = stack_while_running(loop, held, nested)
    assert "in nested" in stack and "in deep_wait" in stack
    assert stack.index("in nested") < stack.index("in deep_wait")  # outermost first


def test_a_coroutine_blocking_the_loop_shows_the_loop_thread_s_stack(loop: EventLoop) -> None:
    held = attempt()

    async def blocks(ctx: JobContext) -> None:
        time.sleep(0.3)  # what an async handler must not do

    stack = stack_while_running(loop, held, blocks)
    assert "in blocks" in stack and "time.sleep(0.3)" in stack
    assert "run_forever" in stack  # the loop thread's own frames: it is stuck in the call


def test_coroutine_stack_of_nothing_is_empty() -> None:
    assert coroutine_stack(None, None) == ""


def test_stop_lets_a_slot_thread_waiting_for_a_stuck_task_go(loop: EventLoop) -> None:
    async def swallows(ctx: JobContext) -> None:
        while True:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(60)

    errors: list[BaseException] = []

    def slot() -> None:
        try:
            loop.run(swallows, context())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=slot)
    thread.start()
    wait_until(lambda: loop.running, WAIT_SECONDS, "the loop")
    time.sleep(0.1)
    loop.stop(timeout=5)
    thread.join(5)
    assert not thread.is_alive()
    (error,) = errors
    assert isinstance(error, RuntimeError) and "event loop stopped" in str(error)
    with pytest.raises(RuntimeError, match="event loop is stopped"):
        loop.run(swallows, context())
