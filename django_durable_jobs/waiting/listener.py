"""One LISTEN connection per process for every ``wait()`` and ``await_job()``.

``record_outcomes`` (and a cancel of pending jobs) NOTIFYs the ids of the
jobs it finished on ``db.finished_channel()``, delivered at commit. A
daemon thread, started by the first waiter, holds a psycopg connection of
its own LISTENing there and wakes the waiters of the ids it hears of; the
waiters then read the job themselves. However many threads or coroutines
wait, the process holds this one connection (per database alias), and
closes it once nobody has waited for ``IDLE_SECONDS``.

A notification can be lost (the connection drops, a pooler eats it, the
listener is not connected yet): each (re)connection wakes every waiter to
look again, and waiters poll anyway every ``WAIT_POLL_INTERVAL_SECONDS``.
A wake-up says "look again", never "it finished": the waiter reads the row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any, Protocol

from .. import db
from ..constants import FINISHED_NOTIFY_PREFIX
from ..services import Service

logger = logging.getLogger("django_durable_jobs.waiting")

#: Close the connection (and end the thread) after this long without waiters.
IDLE_SECONDS = 30.0
#: How often the thread looks up from its connection (close and idle checks).
TICK_SECONDS = 0.5


class Waiter(Protocol):
    def wake(self) -> None:
        """Look at the job again (called from the listener's thread)."""


class ThreadWaiter:
    """A blocked thread's wake-up: an ``Event``."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def wake(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def sleep(self, seconds: float) -> bool:
        """Until woken (True), or ``seconds`` passed (False)."""
        return self._event.wait(seconds)


class LoopWaiter:
    """A coroutine's wake-up: an ``asyncio.Event`` set on its loop's own thread.

    No thread per waiter: the listener's thread hands the wake-up to the
    loop with ``call_soon_threadsafe``.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def wake(self) -> None:
        # A closed loop: nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._event.set)

    def clear(self) -> None:
        self._event.clear()

    async def sleep(self, seconds: float) -> bool:
        """Until woken (True), or ``seconds`` passed (False)."""
        # asyncio's TimeoutError: the builtin one from Python 3.11 only.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._event.wait(), seconds)
        return self._event.is_set()


class WaitListener(Service):
    """The LISTEN thread of one database alias, and the waiters it wakes, by job id.

    Thread-safe: waiters come and go from any thread (or event loop) while
    the listener's thread dispatches notifications. A ``Service`` whose
    thread starts with the first waiter (``add``), ends after
    ``IDLE_SECONDS`` without one, and starts again with the next, until
    ``stop()`` (``close()``).
    """

    stop_timeout = 2 * TICK_SECONDS + 1

    def __init__(self, alias: str) -> None:
        super().__init__(f"durable-jobs-wait-listener-{alias}")
        self.alias = alias
        #: Set while LISTEN is established (tests and diagnostics read it).
        self.connected = threading.Event()
        self._lock = threading.Lock()
        self._waiters: dict[uuid.UUID, set[Waiter]] = {}
        # The connection's parameters, read by add() on a waiter's thread.
        self._params: dict[str, Any] = {}
        #: When the last waiter left (monotonic seconds).
        self._idle_since = time.monotonic()
        self._closed = threading.Event()

    # -- waiters -------------------------------------------------------------

    def add(self, job_id: uuid.UUID, waiter: Waiter) -> None:
        """Wake ``waiter`` when ``job_id`` is heard of; start the thread if it is not running."""
        with self._lock:
            self._waiters.setdefault(job_id, set()).add(waiter)
            if self._thread is None and not self._closed.is_set():
                # The connection's parameters are read here, on the caller's
                # thread: Django's connection objects are per thread. Those of
                # LISTEN_DATABASE, when set (a pooler in front of the alias).
                self._params = db.connection_params(db.listen_alias(self.alias))
                self.start()

    def remove(self, job_id: uuid.UUID, waiter: Waiter) -> None:
        with self._lock:
            waiters = self._waiters.get(job_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[job_id]
                    if not self._waiters:
                        self._idle_since = time.monotonic()

    def waiting(self) -> int:
        """How many waiters are registered (for tests and diagnostics)."""
        with self._lock:
            return sum(len(waiters) for waiters in self._waiters.values())

    def close(self) -> None:
        """End the thread and keep it from starting again (tests; an interpreter's end)."""
        self.stop()

    def stop(self, timeout: float | None = None) -> bool:
        with self._lock:
            self._closed.set()
            # Taken under the lock: an ending thread forgets itself (_should_end).
            thread = self._thread
        if thread is not None:
            thread.join(self.stop_timeout if timeout is None else timeout)
        return thread is None or not thread.is_alive()

    def _request_stop(self) -> None:
        with self._lock:
            self._closed.set()

    def _wake(self, job_ids: Iterable[uuid.UUID] | None) -> None:
        """Wake the waiters of ``job_ids`` (None: all of them)."""
        with self._lock:
            if job_ids is None:
                woken = [w for waiters in self._waiters.values() for w in waiters]
            else:
                woken = [w for job_id in job_ids for w in self._waiters.get(job_id, ())]
        for waiter in woken:
            waiter.wake()

    # -- the thread ----------------------------------------------------------

    def _should_end(self) -> bool:
        """Closed, or idle for ``IDLE_SECONDS``: then forget the thread.

        The next waiter starts another one.
        """
        with self._lock:
            idle = not self._waiters and time.monotonic() - self._idle_since >= IDLE_SECONDS
            if not self._closed.is_set() and not idle:
                return False
            self._thread = None
            self.connected.clear()
            return True

    def _run(self) -> None:
        try:
            db.listen_loop(
                self._params,
                [db.finished_channel()],
                read_timeout=TICK_SECONDS,
                should_end=self._should_end,
                pause=self._closed.wait,
                # Whatever finished while this connection was not listening.
                on_connect=self._connected,
                on_notify=lambda notify: self._wake(finished_ids(notify.payload)),
                on_lost=self.connected.clear,
                logger=logger,
                what="LISTEN connection for wait()",
                meanwhile="waiters poll meanwhile",
            )
        finally:
            # Ended by an unexpected error too: the next waiter starts a new thread.
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None
            self.connected.clear()

    def _connected(self) -> None:
        self.connected.set()
        self._wake(None)


def finished_ids(payload: str) -> list[uuid.UUID]:
    """The job ids of a finished notification (``finished:<id>,<id>,...``).

    A payload of another shape, or a malformed id in it, is logged and
    skipped: the poll still finds those jobs.
    """
    if not payload.startswith(FINISHED_NOTIFY_PREFIX):
        logger.warning("Ignoring a notification of another shape on the finished channel")
        return []
    ids = []
    for text in payload[len(FINISHED_NOTIFY_PREFIX) :].split(","):
        try:
            ids.append(uuid.UUID(text))
        except ValueError:
            logger.warning("Ignoring a malformed job id %r in a finished notification", text)
    return ids


_listeners: dict[str, WaitListener] = {}
_listeners_lock = threading.Lock()


def listener_for(alias: str) -> WaitListener:
    """This process's listener for ``alias``, made on first use."""
    with _listeners_lock:
        listener = _listeners.get(alias)
        if listener is None:
            listener = _listeners[alias] = WaitListener(alias)
        return listener


def close_listeners() -> None:
    """Close this process's listeners and forget them (tests, benchmarks).

    Their LISTEN connections go; the next waiter starts a new listener.
    """
    with _listeners_lock:
        closing = list(_listeners.values())
        _listeners.clear()
    for listener in closing:
        listener.close()


def _forget_listeners() -> None:
    # A forked child has none of its parent's threads: it makes its own
    # listeners (and must not reuse a lock some parent thread held).
    global _listeners_lock
    _listeners.clear()
    _listeners_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_listeners)
