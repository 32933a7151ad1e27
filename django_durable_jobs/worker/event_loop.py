"""The worker's event loop, where ``async def`` handlers run.

One loop per worker, on a daemon thread of its own, started at the first
async job (a worker that only runs sync handlers never starts it) and
stopped at shutdown. An async handler takes a slot exactly like a sync
one: the slot thread submits the coroutine to the loop and waits for it,
so ``--concurrency 4`` runs at most four jobs at once, async or not, and
everything else about the attempt (its deadline, lease, heartbeat and
outcome) is the same code as for a sync handler. The loop buys no extra
concurrency; it lets handlers written for asyncio run, and keeps their
awaits cheap while they wait.

The waiting slot thread is not idle: like ``asgiref``'s ``async_to_sync``,
it serves the handler's thread-sensitive ``sync_to_async`` calls (the
default, and what Django's async ORM methods use). So an async handler's
queries run on its slot's own database connection, the one
``close_old_connections`` checks before every job and that is closed when
the slot stops, and two async handlers' sync calls never queue behind each
other. Calls made with ``thread_sensitive=False``, ``asyncio.to_thread`` and
``loop.run_in_executor(None, ...)`` go to the loop's default executor, whose
threads close their connections after each call.

When the worker gives up on the attempt (its deadline, the end of a cancel
request's grace, a lost lease, the end of a shutdown's grace) the
attempt's cancel flag calls back here and the task is cancelled
(``task.cancel()``, on the loop's thread). Unlike a thread, a coroutine
can be interrupted safely: the ``CancelledError`` arrives at an ``await``,
where the handler's own code is between steps. A coroutine that swallows
it and goes on keeps its slot, like a sync handler that ignores its
deadline, and the watchdog's grace and recycle deal with it the same way.

Each job's task runs in a fresh ``contextvars.Context``: nothing a handler
sets in a context variable reaches the next job.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import queue
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import AsyncToSync, SyncToAsync, ThreadSensitiveContext
from django.db import connections

from ..context import JobContext, _current_job
from ..exceptions import JobCancelled, JobTimeout
from .attempts import Attempt
from .stacks import coroutine_stack

__all__ = ["AsyncHandler", "EventLoop", "SlotThreadExecutor", "run_once"]

logger = logging.getLogger("django_durable_jobs.worker")

P = ParamSpec("P")
T = TypeVar("T")
AsyncHandler = Callable[[JobContext], Awaitable[Any]]

THREAD_NAME = "durable-jobs-event-loop"
#: How long ``stop()`` waits for the loop's thread to end.
STOP_SECONDS = 5.0
#: At stop, how long the tasks still running get to end once cancelled.
CANCEL_LEFT_SECONDS = 1.0

# asgiref >= 3.13 lets a ThreadSensitiveContext be given the executor that
# its block's thread-sensitive calls use: the public way to say "this thread".
_CONTEXT_TAKES_EXECUTOR = "executor" in inspect.signature(ThreadSensitiveContext).parameters


class SlotThreadExecutor(Executor):
    """Runs the calls submitted to it on the thread that made it, while that thread waits.

    The slot thread's side of an async attempt: ``serve()`` runs the
    submitted calls, one at a time, until ``finish()`` (from the loop's
    thread, when the coroutine has ended). After that a submit raises
    ``RuntimeError``: a task that the handler left running cannot reach a
    thread that has gone back to serving other jobs.

    A ``SimpleQueue`` rather than a condition variable: the common case is
    no call at all, only the wake-up at the end, and a queue's ``put`` and
    ``get`` do that in C, without Python's ``Condition`` bookkeeping on
    the loop's thread for every job.
    """

    def __init__(self) -> None:
        self._thread = threading.get_ident()
        # A call to run, or None: the coroutine has ended.
        self._calls: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        # Taken by submit and by the close: no call is queued after the close.
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        if threading.get_ident() == self._thread:
            raise RuntimeError("a slot thread cannot submit work to itself")
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(
                    "the attempt this slot thread ran is over: a task the handler left "
                    "running cannot call sync code through it"
                )
            self._calls.put((future, functools.partial(fn, *args, **kwargs)))
        return future

    def finish(self) -> None:
        """The coroutine has ended (any thread): ``serve()`` returns once the calls before
        this are done."""
        self._calls.put(None)

    def serve(self) -> None:
        """Run the submitted calls until ``finish()``."""
        while (item := self._calls.get()) is not None:
            future, call = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = call()
            except BaseException as exc:  # handed to the awaiting coroutine, as asgiref does
                future.set_exception(exc)
            else:
                future.set_result(result)
        with self._lock:
            self._closed = True


class ConnectionClosingExecutor(ThreadPoolExecutor):
    """The loop's default executor: its threads close their database connections
    after each call.

    Its threads are shared by every async handler and end when the loop
    stops, without a word to Django: a connection kept open between calls
    would be left open for ever (or collected unclosed) and would count
    against the database's limit beside the slots' own. A call that uses
    the ORM here connects afresh; thread-sensitive calls (the default, and
    the async ORM's) run on the slot's thread and keep its connection.
    """

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return super().submit(_closing_connections, functools.partial(fn, *args, **kwargs))


def _closing_connections(call: Callable[[], T]) -> T:
    try:
        return call()
    finally:
        connections.close_all()


class _Run:
    """One attempt's coroutine on the loop: its task, and how it ended."""

    __slots__ = (
        "cancelled_by_worker", "ctx", "ended", "error", "executor", "func", "task", "value"
    )  # fmt: skip

    def __init__(self, func: AsyncHandler, ctx: JobContext) -> None:
        self.func = func
        self.ctx = ctx
        self.executor = SlotThreadExecutor()
        #: The coroutine ended, or was abandoned: what ``result()`` reads is set.
        self.ended = False
        self.task: asyncio.Task[None] | None = None
        self.value: Any = None
        self.error: BaseException | None = None
        self.cancelled_by_worker = False

    async def main(self) -> None:
        # The handler's thread-sensitive sync_to_async calls go to the slot
        # thread's executor (see the module docstring).
        _current_job.set(self.ctx)  # the task's own context (start)
        try:
            if _CONTEXT_TAKES_EXECUTOR:
                async with ThreadSensitiveContext(executor=self.executor):  # type: ignore[call-arg,unused-ignore]
                    self.value = await self.func(self.ctx)
            else:
                # Older asgiref: what its async_to_sync does for the thread
                # that calls it. The task runs in a context of its own
                # (``start``), so this reaches the task and its children only.
                AsyncToSync.executors.current = self.executor
                self.value = await self.func(self.ctx)
        except GeneratorExit:  # the coroutine is closed unfinished (the loop went away)
            self.error = RuntimeError("the worker's event loop stopped before the handler returned")
            raise
        except BaseException as exc:  # CancelledError, SystemExit too: the slot thread decides
            self.error = exc
        finally:
            self._end()

    def _end(self) -> None:
        if not self.ended:  # once: the coroutine's end and a stop's abandon may race
            self.ended = True
            self.executor.finish()

    # -- on the loop's thread ---------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        # A fresh context for each job: create_task copies the current one.
        self.task = contextvars.Context().run(
            loop.create_task, self.main(), name=f"{self.ctx.type} {self.ctx.id}"
        )
        self.task.add_done_callback(self._task_done)
        if self.cancelled_by_worker:
            self.task.cancel()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A task cancelled before its first step never enters ``main`` (so never reaches
        its ``finally``): end the run here, or the slot thread would wait for ever. That
        happens when the worker gives up on the attempt (a cancel, a time limit) between
        ``start`` and the task's first step, on a busy loop."""
        if not self.ended:
            if self.error is None and task.cancelled():
                self.error = asyncio.CancelledError()
            self._end()

    def cancel(self) -> None:
        if self.cancelled_by_worker:
            return  # told twice (see CancelFlag.on_give_up): one CancelledError is the request
        self.cancelled_by_worker = True
        if self.task is not None:
            self.task.cancel()

    # -- on the slot thread -----------------------------------------------

    def result(self) -> Any:
        """What the handler returned, or raise what it raised.

        A ``CancelledError`` of the worker's own cancel becomes the reason
        the worker gave up, as ``ctx.check()`` would have raised it: an
        ordinary exception, never the ``BaseException`` that would stop the
        worker.
        """
        error, self.error = self.error, None
        if error is None:
            return self.value
        if isinstance(error, asyncio.CancelledError):
            if self.cancelled_by_worker:
                flag = self.ctx._cancel
                if flag is not None and flag.requested:
                    raise JobCancelled() from error
                raise JobTimeout(self.ctx.timeout) from error
            raise RuntimeError(
                "the handler's task was cancelled by something other than the worker"
            ) from error
        raise error

    def abandon(self) -> None:
        """The loop stopped with the task unfinished (or never started it): let the slot
        thread go."""
        if not self.ended:
            self.error = RuntimeError("the worker's event loop stopped before the handler returned")
            self._end()


class EventLoop:
    """The worker's event loop for async handlers, on a thread started at the first one."""

    def __init__(self, name: str = THREAD_NAME) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._stopped = False
        # In flight: a stop lets their slot threads go.
        self._runs: set[_Run] = set()

    @property
    def started(self) -> bool:
        """Whether an async handler ever started the loop."""
        return self._thread is not None

    @property
    def running(self) -> bool:
        """Whether the loop's thread is alive (started, and not stopped yet)."""
        return self._thread is not None and self._thread.is_alive()

    def run(self, func: AsyncHandler, ctx: JobContext, attempt: Attempt | None = None) -> Any:
        """Run ``func(ctx)`` on the loop, from a slot thread; return or raise what it does.

        Blocks the calling thread until the coroutine ends, running its
        thread-sensitive sync calls meanwhile. With the ``attempt``, the task
        is cancelled when the worker gives up on it, and the watchdog can
        read where it is.
        """
        run = _Run(func, ctx)
        loop = self._loop if self._loop is not None and not self._stopped else self._start()
        # The slot thread's asgiref state (which loop an async_to_sync in a
        # later sync handler would use): put back as it was, so that one
        # async job does not tie the thread's next jobs to this loop.
        thread_state = vars(SyncToAsync.threadlocal)
        saved = dict(thread_state)
        # No lock on the hot path: a stop() frees the runs it finds in the
        # set, and one added after its look sees _stopped (set before it).
        self._runs.add(run)
        try:
            try:
                if attempt is not None:
                    # Before the start: a give-up already made (or made meanwhile) is
                    # queued ahead of it, so the task is cancelled before its first
                    # step and the handler's body never begins.
                    attempt.task_stack = functools.partial(self._stack, run)
                    attempt.cancel.on_give_up(functools.partial(self._cancel_soon, loop, run))
                if self._stopped:
                    run.abandon()
                else:
                    try:
                        loop.call_soon_threadsafe(run.start, loop)
                    except RuntimeError:  # the loop closed meanwhile
                        run.abandon()
                run.executor.serve()
            finally:
                if attempt is not None:
                    attempt.cancel.on_give_up(None)
        finally:
            self._runs.discard(run)
            thread_state.clear()
            thread_state.update(saved)
        return run.result()

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Stop the loop (if it started); tasks still running are cancelled, then abandoned."""
        with self._lock:
            self._stopped = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # closed already
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            logger.warning(
                "The event loop of async handlers did not stop within %ss: a coroutine "
                "blocks it (a sync call in an async def handler?)",
                timeout,
            )
        for run in list(self._runs):
            run.abandon()

    # -- internals --------------------------------------------------------

    def _start(self) -> asyncio.AbstractEventLoop:
        """The loop, started now if this is the first async job."""
        with self._lock:
            return self._started_loop()

    def _started_loop(self) -> asyncio.AbstractEventLoop:
        if self._stopped:
            raise RuntimeError("the worker's event loop is stopped: no async handler can start")
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._pool = ConnectionClosingExecutor(thread_name_prefix=f"{self.name}-pool")
            loop.set_default_executor(self._pool)
            thread = threading.Thread(target=self._serve, args=(loop,), name=self.name, daemon=True)
            self._loop, self._thread = loop, thread
            thread.start()
            logger.info("Event loop started for async handlers")
        return self._loop

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()
        # Stopped: what still runs is cancelled and gets a moment to end.
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = loop.run_until_complete(asyncio.wait(tasks, timeout=CANCEL_LEFT_SECONDS))
            if pending:
                # Closed all the same: the process is stopping, and a loop
                # left open would only leak its sockets until it exits.
                logger.warning(
                    "%s async handler task(s) still running after the worker's cancel at "
                    "shutdown (swallowing CancelledError?): abandoned",
                    len(pending),
                )
        loop.run_until_complete(loop.shutdown_asyncgens())
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        loop.close()

    def _cancel_soon(self, loop: asyncio.AbstractEventLoop, run: _Run) -> None:
        """The worker gave up on the attempt (any thread): cancel its task on the loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: the task is gone
            loop.call_soon_threadsafe(run.cancel)

    def _stack(self, run: _Run) -> str:
        task = run.task
        thread = self._thread
        return coroutine_stack(
            None if task is None else task.get_coro(), None if thread is None else thread.ident
        )


def run_once(func: AsyncHandler, ctx: JobContext, attempt: Attempt | None = None) -> Any:
    """Run one async handler on a loop of its own (for a caller without a worker's loop)."""
    loop = EventLoop()
    try:
        return loop.run(func, ctx, attempt)
    finally:
        loop.stop()
