"""The NOTIFY of finished jobs: at the outcome's commit, one per statement, on its own channel.

``wait()`` and ``await_job()`` hear it (tests/integration/test_waiting.py);
here a plain LISTEN connection counts what arrives.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from django.test import override_settings

from django_durable_jobs import db, enqueue, operations, wait
from django_durable_jobs.constants import FINISHED_NOTIFY_PREFIX
from django_durable_jobs.db.records import Outcome, Transition
from tests.factories import claim_directly, complete_next, dead_outcome, finish

from .helpers import new_connection, sleeping_worker

pytestmark = pytest.mark.django_db(transaction=True)


def finished_notifications(conn: psycopg.Connection[Any]) -> list[list[str]]:
    """The finished notifications ``conn`` received so far, each as its list of ids."""
    conn.execute("SELECT 1")  # notifications are read with the next answer
    found = []
    for notify in conn.notifies(timeout=0.5):
        assert notify.payload.startswith(FINISHED_NOTIFY_PREFIX), notify.payload
        found.append(notify.payload[len(FINISHED_NOTIFY_PREFIX) :].split(","))
    return found


def test_one_notification_per_statement_for_300_completions() -> None:
    ids = [enqueue("tests.record").job.pk for _ in range(300)]
    claimed = db.claim(db.database_alias(), worker_id="w", lease_seconds=30.0, limit=300)
    assert len(claimed) == 300
    with new_connection() as conn:
        db.listen(conn, db.finished_channel())
        written = db.record_outcomes(
            db.database_alias(),
            [Outcome(c.id, c.lease_token, Transition.COMPLETE) for c in claimed],
            history_limit=20,
        )
        assert len(written) == 300
        notifications = finished_notifications(conn)
    # One statement: 200 ids in the first (a payload stays under 8,000 bytes), 100 in the next.
    assert sorted(len(ids_) for ids_ in notifications) == [100, 200]
    assert {uuid.UUID(i) for ids_ in notifications for i in ids_} == set(ids)


def test_retries_and_releases_are_not_notified_as_finished() -> None:
    for _ in range(3):
        enqueue("tests.record")
    a, b, c = db.claim(db.database_alias(), worker_id="w", lease_seconds=30.0, limit=3)
    with new_connection() as conn:
        db.listen(conn, db.finished_channel())
        db.record_outcomes(
            db.database_alias(),
            [
                Outcome(a.id, a.lease_token, Transition.RETRY, delay_us=10**9),
                Outcome(b.id, b.lease_token, Transition.RELEASE),
                Outcome(c.id, c.lease_token, Transition.DEAD, last_error="boom"),
            ],
            history_limit=20,
        )
        assert finished_notifications(conn) == [[str(c.id)]]


def test_an_outcome_that_writes_nothing_sends_no_notification() -> None:
    enqueue("tests.record")
    claimed = claim_directly()
    with new_connection() as conn:
        db.listen(conn, db.finished_channel())
        # A stale lease token: nothing is written, so nothing is notified...
        assert not finish(Outcome(claimed.id, uuid.uuid4(), Transition.COMPLETE))
        # ...and then a finish that is: the only notification, in commit order.
        assert finish(Outcome(claimed.id, claimed.lease_token, Transition.COMPLETE))
        assert finished_notifications(conn) == [[str(claimed.id)]]


def test_cancelling_pending_jobs_notifies_them_once() -> None:
    ids = [enqueue("tests.record").job.pk for _ in range(3)]
    with new_connection() as conn:
        db.listen(conn, db.finished_channel())
        assert sorted(operations.cancel_many(ids).changed) == sorted(ids)
        (notification,) = finished_notifications(conn)
    assert sorted(notification) == sorted(str(i) for i in ids)


def test_the_workers_channel_hears_no_finished_job() -> None:
    enqueue("tests.record")
    with new_connection() as conn, sleeping_worker():
        db.listen(conn, "durable_jobs")  # the workers' NOTIFY_CHANNEL
        complete_next()
        operations.cancel(enqueue("tests.record").job.pk)
        conn.execute("SELECT 1")
        payloads = [n.payload for n in conn.notifies(timeout=0.5)]
    # The second enqueue's wake-up only: no finished ids.
    assert payloads == ["default"]


def test_a_forced_exit_s_last_write_notifies_too() -> None:
    enqueue("tests.record")
    claimed = claim_directly()
    with new_connection() as conn:
        db.listen(conn, db.finished_channel())
        db.record_outcomes_directly(
            db.database_alias(),
            [Outcome(claimed.id, claimed.lease_token, Transition.COMPLETE)],
            history_limit=20,
            timeout_seconds=5,
        )
        assert finished_notifications(conn) == [[str(claimed.id)]]


def test_with_notify_finished_off_nothing_is_notified_and_wait_polls() -> None:
    ids = [enqueue("tests.record").job.pk for _ in range(2)]
    with (
        override_settings(DURABLE_JOBS={"NOTIFY_FINISHED": False}),
        new_connection() as conn,
        sleeping_worker(),
    ):
        db.listen(conn, db.finished_channel())
        db.listen(conn, "durable_jobs")  # the workers' channel, for the event that follows
        complete_next()
        operations.cancel(ids[1])
        enqueue("tests.record")  # its wake-up comes after whatever the two sent
        conn.execute("SELECT 1")
        heard = [(n.channel, n.payload) for n in conn.notifies(timeout=0.5)]
    assert heard == [("durable_jobs", "default")]
    with override_settings(
        DURABLE_JOBS={"NOTIFY_FINISHED": False, "WAIT_POLL_INTERVAL_SECONDS": 0.1}
    ):
        assert wait(ids[0], timeout=5).status == "completed"


def test_children_a_dead_parent_cancels_are_notified_too() -> None:
    parent = enqueue("tests.record").job
    child = enqueue("tests.record", depends_on=[parent]).job
    grandchild = enqueue("tests.record", depends_on=[child]).job
    (claimed,) = db.claim(db.database_alias(), worker_id="w", lease_seconds=30.0, limit=1)
    assert claimed.id == parent.pk
    with new_connection() as conn:
        db.listen(conn, db.finished_channel())
        db.record_outcomes(
            db.database_alias(),
            [dead_outcome(claimed)],
            history_limit=20,
        )
        notifications = finished_notifications(conn)
    # One statement a level: the parent's outcome, its child, its grandchild.
    assert notifications == [[str(parent.pk)], [str(child.pk)], [str(grandchild.pk)]]


def test_cancelling_a_parent_notifies_the_children_it_cancels() -> None:
    parent = enqueue("tests.record").job
    child = enqueue("tests.record", depends_on=[parent]).job
    with new_connection() as conn:
        db.listen(conn, db.finished_channel())
        operations.cancel(parent.pk)
        heard = {i for ids in finished_notifications(conn) for i in ids}
    assert heard == {str(parent.pk), str(child.pk)}
