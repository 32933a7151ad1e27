"""``django_durable_jobs.signals``: sent by a real worker (in this process) after what they
announce committed, once per outcome, with the job's type as the sender."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings

from django_durable_jobs import db, enqueue
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.signals import job_dead, job_finished, job_started
from tests.factories import (
    RunningWorker,
    burst,
    expire,
    reaper,
    wait_until,
    worker_config,
)
from tests.testapp.jobs import record

from .helpers import drain_until_settled, new_connection

pytestmark = pytest.mark.django_db(transaction=True)


class Heard:
    """What the receivers heard, with the job's status as a receiver reads it then."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: list[tuple[str, Any, int]] = []
        self.finished: list[tuple[str, Any, str, str]] = []
        self.dead: list[tuple[str, Any, str]] = []

    def on_started(self, type: str, job_id: Any, attempt: int, **kwargs: Any) -> None:
        with self.lock:
            self.started.append((type, job_id, attempt))

    def on_finished(self, type: str, job_id: Any, outcome: str, **kwargs: Any) -> None:
        status = Job.objects.values_list("status", flat=True).get(pk=job_id)
        with self.lock:
            self.finished.append((type, job_id, outcome, status))

    def on_dead(self, type: str, job_id: Any, last_error: str, **kwargs: Any) -> None:
        with self.lock:
            self.dead.append((type, job_id, last_error))


@pytest.fixture
def heard() -> Iterator[Heard]:
    heard = Heard()
    job_started.connect(heard.on_started, weak=False)
    job_finished.connect(heard.on_finished, weak=False)
    job_dead.connect(heard.on_dead, weak=False)
    try:
        yield heard
    finally:
        job_started.disconnect(heard.on_started)
        job_finished.disconnect(heard.on_finished)
        job_dead.disconnect(heard.on_dead)


@override_settings(DURABLE_JOBS={"BACKOFF_BASE_SECONDS": 0.5, "BACKOFF_MAX_SECONDS": 1.0})
def test_each_outcome_is_heard_once_after_its_commit(heard: Heard) -> None:
    done = enqueue("tests.record").job
    retried = enqueue("tests.fail_until", {"succeed_on": 2}).job
    discarded = enqueue("tests.discard").job
    # Until the retry ran too: a burst worker exits when its retry is not due yet. The
    # backoff is long enough that the retry cannot start before its receiver reads the row.
    drain_until_settled()
    assert sorted(heard.started, key=str) == sorted(
        [
            ("tests.record", done.pk, 1),
            ("tests.fail_until", retried.pk, 1),
            ("tests.fail_until", retried.pk, 2),
            ("tests.discard", discarded.pk, 1),
        ],
        key=str,
    )
    # The status each receiver read is the outcome's: sent after the write committed.
    assert sorted(heard.finished, key=str) == sorted(
        [
            ("tests.record", done.pk, "completed", JobStatus.COMPLETED),
            ("tests.fail_until", retried.pk, "retry", JobStatus.PENDING),
            ("tests.fail_until", retried.pk, "completed", JobStatus.COMPLETED),
            ("tests.discard", discarded.pk, "dead", JobStatus.DEAD),
        ],
        key=str,
    )
    ((sender, job_id, last_error),) = heard.dead
    assert (sender, job_id) == ("tests.discard", discarded.pk)
    assert "not worth retrying" in last_error


def test_a_receiver_can_listen_to_one_type() -> None:
    seen: list[Any] = []

    def on_record(sender: Any, job_id: Any, **kwargs: Any) -> None:
        seen.append((sender, job_id))

    # The sender is the handler function, as a model signal's is the model class.
    job_finished.connect(on_record, sender=record, weak=False)
    try:
        mine = enqueue("tests.record").job
        enqueue("tests.fail_until", {"succeed_on": 1})
        burst()
    finally:
        job_finished.disconnect(on_record, sender=record)
    assert seen == [(record, mine.pk)]


def test_a_receiver_that_raises_is_logged_and_changes_nothing(
    heard: Heard, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("a receiver's bug")

    job_finished.connect(broken, weak=False)
    try:
        job = enqueue("tests.record").job
        burst()
    finally:
        job_finished.disconnect(broken)
    assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED
    assert [outcome for _, _, outcome, _ in heard.finished] == ["completed"]  # the others ran
    assert "Receiver" in caplog.text and "a receiver's bug" in caplog.text


def test_a_job_the_reaper_ends_dead_is_heard_too(heard: Heard) -> None:
    job = enqueue("tests.record", max_attempts=1).job
    (claimed,) = db.claim(db.database_alias(), worker_id="gone", lease_seconds=30, limit=1)
    expire(claimed.id)
    assert reaper().reap() == 1
    assert heard.finished == [("tests.record", job.pk, "dead", JobStatus.DEAD)]
    assert [job_id for _, job_id, _ in heard.dead] == [job.pk]
    assert heard.started == []  # no handler ran


def test_nothing_is_sent_for_a_suspension(heard: Heard) -> None:
    job = enqueue("tests.steps.nap", {"seconds": 3600}).job
    burst()
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING  # asleep
    assert heard.started == [("tests.steps.nap", job.pk, 1)]
    assert heard.finished == [] and heard.dead == []


def test_a_receiver_writing_to_the_projects_database_recovers_after_it_dropped_a_connection() -> (
    None
):
    """A ``job_finished`` receiver runs on the worker's completer thread, on that
    thread's connection to the project's database ("default").

    With the queue on "default" it is the completer's own, which closes it
    after an error and reconnects. With the queue on its own database it was
    nobody's: once the server dropped it, every receiver failed (``connection
    already closed``) until the worker restarted. Now it is dropped and
    reopened as Django does before a request, whichever database the queue is on.
    """
    backends: list[int | BaseException] = []

    def receiver(job_id: Any, **kwargs: Any) -> None:
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backends.append(cursor.fetchone()[0])
        except Exception as exc:
            backends.append(exc)

    job_finished.connect(receiver, weak=False)
    running = RunningWorker(worker_config(burst=False, poll_interval=0.1))
    try:
        enqueue("tests.record")
        wait_until(lambda: len(backends) == 1, what="the first receiver")
        (first,) = backends
        assert isinstance(first, int), first
        with new_connection() as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", [first])
        # The next receiver may find the connection gone; the one after it, at the latest,
        # runs on a new one.
        for seen in (2, 3):
            enqueue("tests.record")
            wait_until(lambda seen=seen: len(backends) == seen, what=f"receiver {seen}")
        assert isinstance(backends[-1], int) and backends[-1] != first, backends
    finally:
        running.stop()
        job_finished.disconnect(receiver)
