"""A real worker tells the enqueues when it needs their NOTIFY (``worker/wakefulness.py``).

With a poll interval of 60 s, a job that completes within 30 s was claimed
because of a notification or because the worker kept its promise to claim
on its own while awake, never because of the poll.
"""

from __future__ import annotations

import signal
import threading

import pytest
from django.db import connection, connections, transaction

from django_durable_jobs import enqueue, enqueue_many
from django_durable_jobs.models import Job, JobStatus
from tests.factories import WAIT_SECONDS
from tests.integration.helpers import new_connection

from .helpers import Workers, status, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

WORKER_ID = "e2e-wakefulness"


def sleeping() -> bool | None:
    """What the worker's row says (None: no row)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sleeping FROM durable_jobs_listener WHERE worker_id = %s", [WORKER_ID]
        )
        row = cursor.fetchone()
    return None if row is None else bool(row[0])


def test_a_busy_worker_needs_no_notify_and_one_going_to_sleep_waits_for_open_enqueues(
    workers: Workers,
) -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM durable_jobs_listener")  # a killed worker's, earlier
    listener = new_connection()
    listener.execute("LISTEN durable_jobs")
    proc = workers.start(
        "--concurrency", "2", "--poll-interval", "60", "--worker-id", WORKER_ID
    )  # fmt: skip
    try:
        wait_for(lambda: sleeping() is True, 60, "the worker to mark itself sleeping")
        # Asleep: an enqueue notifies it, and it runs the job.
        first = enqueue("tests.record", queue="default").job
        assert [n.payload for n in listener.notifies(timeout=10, stop_after=1)] == ["default"]
        wait_for(lambda: status(first) == JobStatus.COMPLETED, 30, "the first job")

        # A backlog: its first claim is full, so the worker marks itself awake,
        # and stays awake while it works through 5 s of jobs.
        enqueue_many([{"type": "tests.record", "payload": {"sleep": 0.25}}] * 40)
        wait_for(lambda: sleeping() is False, 30, "the worker to mark itself awake")
        list(listener.notifies(timeout=0.2))  # the backlog's own
        inserted, commit = threading.Event(), threading.Event()
        held: list[Job] = []

        def enqueue_and_hold() -> None:
            try:
                with transaction.atomic():
                    held.append(enqueue("tests.record", queue="default").job)
                    inserted.set()
                    commit.wait(WAIT_SECONDS * 4)
            finally:
                connections.close_all()

        thread = threading.Thread(target=enqueue_and_hold)
        thread.start()
        assert inserted.wait(WAIT_SECONDS)
        # The backlog done, the worker goes to sleep while that enqueue, which
        # saw it awake and sent no NOTIFY, is still open.
        wait_for(lambda: sleeping() is True, 60, "the worker to go back to sleep")
        commit.set()
        thread.join(WAIT_SECONDS)
        (job,) = held
        wait_for(lambda: status(job) == JobStatus.COMPLETED, 30, "the held enqueue's job")
        assert [n.payload for n in listener.notifies(timeout=0.3)] == []

        # Asleep again: notified again.
        last = enqueue("tests.record", queue="default").job
        assert [n.payload for n in listener.notifies(timeout=10, stop_after=1)] == ["default"]
        wait_for(lambda: status(last) == JobStatus.COMPLETED, 30, "the last job")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, workers.output()
        assert sleeping() is None  # its row went with it
        assert Job.objects.filter(status=JobStatus.COMPLETED, attempts=1).count() == 43
    finally:
        listener.close()
