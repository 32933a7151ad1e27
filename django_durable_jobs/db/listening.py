"""The LISTEN loop: one psycopg connection of its own, reconnected with backoff.

Shared by the worker's listener (``worker/listener.py``: enqueue, pause,
cancel and probe notifications) and ``wait()``'s (``waiting/listener.py``:
finished jobs). Each says what to do on a (re)connection, on a notification
and between reads; this module owns the connection, the ``LISTEN``
statements and the reconnect delays. Notifications can be lost while the
connection is down: ``on_connect`` is where a caller looks again at what
may have happened meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import psycopg

from ..conf import jobs_settings

RECONNECT_BASE_SECONDS = 0.5
RECONNECT_CAP_SECONDS = 30.0


def listen_alias(using: str) -> str:
    """The database alias to LISTEN on for the job database ``using``.

    ``LISTEN_DATABASE`` when set: a transaction pooler in front of ``using``
    runs each statement on whichever server connection is free, so a LISTEN
    through it lands on a connection the listener no longer holds, and
    nothing it LISTENs for ever reaches it.
    """
    alias = jobs_settings.LISTEN_DATABASE
    return using if alias is None else str(alias)


class Interrupt:
    """Ends a ``listen_loop`` read at once, rather than at its ``read_timeout``.

    A stopping worker waits for its listener thread: without this, for up
    to a whole read (a quarter of a second), which every ``--burst`` run and
    every graceful stop paid. ``set()`` writes a byte to a socket pair the
    read also waits on (a socket, not a pipe: ``select`` on Windows takes
    only sockets). Once set it stays set; ``close()`` when no loop reads it
    any more.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)
        self._closed = False

    def fileno(self) -> int:
        return self._reader.fileno()

    def set(self) -> None:
        with self._lock:
            if self._closed:
                return
            # A full buffer: it is set already.
            with contextlib.suppress(OSError):
                self._writer.send(b"\0")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._reader.close()
                self._writer.close()


class InterruptibleReads:
    """The reads of notifications on one connection, each ended at once by an ``Interrupt``.

    A selector (epoll on Linux: no limit on descriptor numbers, unlike
    ``select``) waits on both the connection and the interrupt. Made per
    connection, closed with it.
    """

    def __init__(self, conn: psycopg.Connection[Any], interrupt: Interrupt) -> None:
        self._conn = conn
        self._selector = selectors.DefaultSelector()
        self._selector.register(conn.fileno(), selectors.EVENT_READ, True)
        self._selector.register(interrupt, selectors.EVENT_READ, False)
        self._first = True

    def read(self, timeout: float) -> list[psycopg.Notify]:
        """The notifications of the first read that has any, within ``timeout``;
        none once the interrupt is set (the caller then reads no more)."""
        if self._first:
            # Those received during the LISTEN statements (psycopg keeps them)
            # are not signalled by the socket. Later reads take all the
            # socket holds, and nothing else runs on this connection.
            self._first = False
            received = list(self._conn.notifies(timeout=0))
            if received:
                return received
        ready = self._selector.select(timeout)
        if not any(key.data for key, _ in ready):
            return []
        return list(self._conn.notifies(timeout=0))

    def close(self) -> None:
        self._selector.close()

    def __enter__(self) -> InterruptibleReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def listen(conn: psycopg.Connection[Any], channel: str) -> None:
    """``LISTEN`` on ``channel`` (an identifier: it cannot be a bound parameter)."""
    conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))


def listen_loop(
    params: Mapping[str, Any],
    channels: Iterable[str],
    *,
    read_timeout: float,
    should_end: Callable[[], bool],
    pause: Callable[[float], object],
    on_connect: Callable[[], None],
    on_notify: Callable[[psycopg.Notify], None],
    on_lost: Callable[[], None],
    on_tick: Callable[[], None] | None = None,
    interrupt: Interrupt | None = None,
    logger: logging.Logger,
    what: str,
    meanwhile: str,
) -> None:
    """LISTEN on ``channels`` until ``should_end()``, reconnecting after an error.

    ``read_timeout``: how long one read waits for notifications (and so how
    soon ``should_end`` is seen, unless ``interrupt`` is set when it becomes
    true); ``on_tick`` runs before each read.
    ``on_lost`` runs when the connection fails, then (unless the loop
    should end) ``pause(delay)`` waits before the next try: 0.5 s, doubling
    up to 30 s. ``what`` and ``meanwhile`` word the log lines
    (``"LISTEN connection"``, ``"polling meanwhile"``).
    """
    delay = RECONNECT_BASE_SECONDS
    while not should_end():
        try:
            with psycopg.connect(**params, autocommit=True) as conn:
                names = list(channels)
                for channel in names:
                    listen(conn, channel)
                if delay > RECONNECT_BASE_SECONDS:
                    logger.info("%s listening again on channel %s", what, names[0])
                delay = RECONNECT_BASE_SECONDS
                on_connect()
                with contextlib.ExitStack() as stack:
                    read: Callable[..., Iterable[psycopg.Notify]] = (
                        conn.notifies
                        if interrupt is None
                        else stack.enter_context(InterruptibleReads(conn, interrupt)).read
                    )
                    while not should_end():
                        if on_tick is not None:
                            on_tick()
                        for notify in read(timeout=read_timeout):
                            on_notify(notify)
                return
        except psycopg.Error as exc:
            on_lost()
            if should_end():
                return
            logger.warning("%s lost (%s); reconnecting in %.1fs, %s", what, exc, delay, meanwhile)
            pause(delay)
            delay = min(RECONNECT_CAP_SECONDS, delay * 2)
