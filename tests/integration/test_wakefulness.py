"""A worker's move to sleep against a real enqueue that looked before it (``wakefulness.py``).

The enqueue's NOTIFY depends on a look at ``durable_jobs_listener`` made in
its INSERT; the worker's mark can commit after that look and before the
enqueue commits. These tests hold such an enqueue open at exactly that
moment and check that the worker learns to claim once more after it ends,
and not before.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction
from django.db.models.functions import Now

from django_durable_jobs import db, enqueue
from django_durable_jobs.models import WorkerProcess
from django_durable_jobs.worker.wakefulness import IDLE_POLLS, Wakefulness
from tests.factories import WAIT_SECONDS, burst

from .helpers import new_connection, sleeping_worker

pytestmark = pytest.mark.django_db(transaction=True)


def listener_row(worker_id: str) -> tuple[list[str] | None, bool] | None:
    with connections[db.database_alias()].cursor() as cursor:
        cursor.execute(
            "SELECT queues, sleeping FROM durable_jobs_listener WHERE worker_id = %s", [worker_id]
        )
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1])


class OpenEnqueue(threading.Thread):
    """``enqueue()`` in a transaction that stays open until ``commit`` is set."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.inserted = threading.Event()
        self.commit = threading.Event()
        self.xid = ""
        self.error: BaseException | None = None

    def run(self) -> None:
        alias = db.database_alias()
        try:
            with transaction.atomic(using=alias):
                enqueue("tests.record", queue="emails")
                with connections[alias].cursor() as cursor:
                    cursor.execute("SELECT txid_current()::text")
                    (self.xid,) = cursor.fetchone()
                self.inserted.set()
                self.commit.wait(WAIT_SECONDS)
        except BaseException as exc:  # re-raised by the test
            self.error = exc
            self.inserted.set()
        finally:
            connections[alias].close()


def settle(w: Wakefulness) -> None:
    """Claim rounds until the move to sleep is over: its snapshot of open transactions
    is the whole cluster's, and other tests' databases may hold some for a while."""
    for _ in range(100):
        if not w.polling:
            return
        w.before_claim()
        w.after_claim(0, False)
    raise AssertionError("still waiting for open transactions after 100 claim rounds")


def test_a_worker_going_to_sleep_waits_for_an_enqueue_that_saw_it_awake() -> None:
    alias = db.database_alias()
    listener = new_connection()
    w = Wakefulness(
        alias, "w1", frozenset({"emails"}), poll_interval=60.0, forget_after_seconds=60.0,
        enabled=True,
    )  # fmt: skip
    try:
        with sleeping_worker("other", ["reports"]):  # clears the table; sleeps on another queue
            listener.execute("LISTEN durable_jobs")
            w.before_claim()
            w.after_claim(0, False)
            settle(w)
            assert listener_row("w1") == (["emails"], True)
            w.after_claim(4, True)  # a full claim: awake
            assert listener_row("w1") == (["emails"], False) and w.awake

            enqueuer = OpenEnqueue()
            enqueuer.start()
            assert enqueuer.inserted.wait(WAIT_SECONDS) and enqueuer.error is None
            # The worker goes to sleep while that enqueue, which saw it awake, is open.
            for _ in range(IDLE_POLLS):
                w.after_claim(0, False)
            assert listener_row("w1") == (["emails"], True) and not w.awake
            # It must claim again after the enqueue ends, which it has not yet: the
            # enqueue's transaction is among those it waits for.
            assert enqueuer.xid in (w._settling or [])
            w.before_claim()
            w.after_claim(0, False)
            assert w.polling and enqueuer.xid in (w._settling or [])
            enqueuer.commit.set()
            enqueuer.join(WAIT_SECONDS)
            assert enqueuer.error is None
            w.before_claim()  # it ended: no longer waited for
            assert enqueuer.xid not in (w._settling or [])
            assert burst(queues=frozenset({"emails"})).claimed == 1
            w.after_claim(1, False)
            settle(w)
            # That enqueue sent no NOTIFY: the claim after the wait was the only way.
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
            # Now that the worker sleeps, an enqueue notifies it.
            enqueue("tests.record", queue="emails")
            assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["emails"]
    finally:
        listener.close()


def test_the_rows_of_workers_gone_without_a_goodbye_are_forgotten() -> None:
    """A sleeping row left by a killed worker would cost every enqueue a NOTIFY."""
    alias = db.database_alias()
    with sleeping_worker("gone"):
        db.mark_listener(alias, "alive", None, sleeping=True, forget_after_seconds=60)
        WorkerProcess.objects.create(
            id="alive", host="h", pid=1, concurrency=1, lease_seconds=30,
            started_at=Now(), last_heartbeat=Now(),
        )  # fmt: skip
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "UPDATE durable_jobs_listener SET changed_at = now() - interval '2 minutes'"
            )
        db.mark_listener(alias, "new", None, sleeping=True, forget_after_seconds=60)
        # Old, and no live heartbeat: forgotten. Old, but alive: kept. New: kept
        # (its worker has not written its first heartbeat yet).
        assert listener_row("gone") is None
        assert listener_row("alive") == (None, True)
        assert listener_row("new") == (None, True)
