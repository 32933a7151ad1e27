"""The LISTEN loop's read (db/listening.py): an interrupt ends it at once.

A stopping worker joins its listener thread. Each test gives the read an
hour's timeout, so a loop that ends did so through the interrupt, not by
waiting its read out.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

import psycopg
import pytest

from django_durable_jobs import db
from django_durable_jobs.worker.listener import Listener
from tests.factories import WAIT_SECONDS, wait_until

from .helpers import new_connection

pytestmark = pytest.mark.django_db(transaction=True)

AN_HOUR = 3600.0


class Loop:
    """``listen_loop`` on a channel of its own, in a thread, with an interrupt."""

    def __init__(self) -> None:
        self.channel = f"tests_listening_{uuid.uuid4().hex[:12]}"
        self.interrupt = db.Interrupt()
        self.stop = threading.Event()
        self.connected = threading.Event()
        self.heard: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        db.listen_loop(
            db.connection_params("default"),
            [self.channel],
            read_timeout=AN_HOUR,
            interrupt=self.interrupt,
            should_end=self.stop.is_set,
            pause=self.stop.wait,
            on_connect=self.connected.set,
            on_notify=lambda notify: self.heard.append(notify.payload),
            on_lost=lambda: None,
            logger=logging.getLogger("tests.listening"),
            what="test LISTEN connection",
            meanwhile="",
        )

    def __enter__(self) -> Loop:
        self.thread.start()
        assert self.connected.wait(WAIT_SECONDS), "the loop never connected"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.interrupt.set()
        self.thread.join(WAIT_SECONDS)
        self.interrupt.close()


def test_an_interrupt_ends_a_read_that_would_wait_an_hour() -> None:
    with Loop() as loop:
        loop.stop.set()
        loop.interrupt.set()
        loop.thread.join(WAIT_SECONDS)
        assert not loop.thread.is_alive(), "the read waited on past its interrupt"


def test_notifications_come_one_read_at_a_time_while_no_interrupt_is_set() -> None:
    with Loop() as loop, new_connection() as other:
        for payload in ("first", "second"):
            other.execute("SELECT pg_notify(%s, %s)", [loop.channel, payload])
            wait_until(lambda p=payload: p in loop.heard, what=f"the {payload} notification")
        assert loop.heard == ["first", "second"]
        assert loop.thread.is_alive()


def test_a_notification_received_during_another_statement_is_read_at_once() -> None:
    """libpq keeps it in its buffer: the socket says nothing of it, the read still returns it."""
    interrupt = db.Interrupt()
    try:
        with new_connection() as listening, new_connection() as other:
            db.listen(listening, "tests_listening_backlog")
            other.execute("NOTIFY tests_listening_backlog, 'held'")
            wait_until(lambda: _one_row(listening), what="a statement after the NOTIFY")
            with db.InterruptibleReads(listening, interrupt) as reads:
                heard = reads.read(AN_HOUR)
        assert [n.payload for n in heard] == ["held"]
    finally:
        interrupt.close()


def _one_row(conn: psycopg.Connection[Any]) -> bool:
    """Run a statement on ``conn``: a notification arriving meanwhile goes to its backlog."""
    conn.execute("SELECT pg_sleep(0.01)")
    return bool(conn._notifies_backlog)


def test_a_read_returns_nothing_once_interrupted() -> None:
    interrupt = db.Interrupt()
    try:
        with new_connection() as listening:
            db.listen(listening, "tests_listening_quiet")
            interrupt.set()
            with db.InterruptibleReads(listening, interrupt) as reads:
                assert reads.read(AN_HOUR) == []
    finally:
        interrupt.close()


def test_an_interrupt_set_after_close_does_nothing() -> None:
    interrupt = db.Interrupt()
    interrupt.close()
    interrupt.set()
    interrupt.close()


def test_a_worker_listener_stops_in_the_middle_of_its_read() -> None:
    connected = threading.Event()
    listener = Listener("default", "tests_listening_worker", None, wake=connected.set)
    listener.read_timeout = AN_HOUR
    listener.start()
    assert connected.wait(WAIT_SECONDS), "the listener never connected"
    assert listener.stop(timeout=WAIT_SECONDS), "the listener waited its read out"
    assert not listener.alive
