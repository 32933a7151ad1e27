"""Pausing and resuming a queue: the Python API, the gateway and the worker, on PostgreSQL.

Workers here poll once an hour, far beyond any wait of these tests, so that an
event that comes at all shows the notification (or the pause's own end time)
did the work, not a poll. How soon it comes is measured in
benchmarks/reaction.py, never asserted here.
"""

from __future__ import annotations

import datetime as dt
import itertools
import statistics
import time
from collections.abc import Iterator
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from django_durable_jobs import db, enqueue
from django_durable_jobs.exceptions import InvalidPause
from django_durable_jobs.models import Job, JobStatus, QueueState
from django_durable_jobs.pausing import pause_queue, paused_queues, resume_queue
from tests.factories import (
    WAIT_SECONDS,
    RunningWorker,
    burst,
    make_job,
    wait_until,
    worker_config,
)

from .helpers import new_connection

pytestmark = pytest.mark.django_db(transaction=True)

RARE_POLL = 3600.0


def status(job: Job) -> str:
    return Job.objects.get(pk=job.pk).status


def completed(job: Job) -> bool:
    return status(job) == JobStatus.COMPLETED


@pytest.fixture
def running() -> Iterator[RunningWorker]:
    """A worker of every queue that learns of pauses only by notification (or end time)."""
    worker = RunningWorker(worker_config(burst=False, poll_interval=RARE_POLL))
    try:
        wait_until(
            lambda: (
                worker.worker.listener is not None and worker.worker.listener.connected.is_set()
            ),
            what="the worker to listen",
        )
        yield worker
    finally:
        worker.stop()


# -- the Python API -------------------------------------------------------------


def test_pause_and_resume_change_the_row_and_paused_queues() -> None:
    assert paused_queues() == {}
    state = pause_queue("emails")
    assert state.paused_at is not None and state.paused_until is None
    assert paused_queues() == {"emails": None}
    until = timezone.now() + timedelta(hours=1)
    pause_queue("reports", until)
    assert paused_queues() == {"emails": None, "reports": until}
    resumed = resume_queue("emails")
    assert resumed.paused_at is None
    assert paused_queues() == {"reports": until}
    # The row stays, not paused: the admin still lists the queue.
    assert QueueState.objects.get(name="emails").paused_at is None


def test_pause_for_a_timedelta_ends_that_long_from_now() -> None:
    before = timezone.now()
    state = pause_queue("emails", timedelta(minutes=15))
    assert state.paused_until is not None
    assert (
        before + timedelta(minutes=15)
        <= state.paused_until
        <= timezone.now() + timedelta(minutes=15)
    )


def test_pausing_a_paused_queue_replaces_its_end_time() -> None:
    pause_queue("emails", timedelta(hours=1))
    pause_queue("emails")
    assert paused_queues() == {"emails": None}
    assert QueueState.objects.count() == 1


def test_resuming_a_queue_never_paused_is_no_error_and_writes_nothing() -> None:
    state = resume_queue("never")
    assert state.name == "never" and state.paused_at is None
    assert not QueueState.objects.exists()


@pytest.mark.parametrize(
    ("name", "until", "field", "words"),
    [
        ("bad name", None, "queue", "not a valid queue name"),
        ("", None, "queue", "must not be empty"),
        (42, None, "queue", "must be a string"),
        ("emails", timezone.now() - timedelta(seconds=1), "until", "must be in the future"),
        ("emails", dt.datetime(2999, 1, 1), "until", "naive"),
        ("emails", timedelta(0), "until", "more than 0 seconds"),
        ("emails", timedelta(seconds=-5), "until", "more than 0 seconds"),
        ("emails", "2999-01-01T00:00Z", "until", "must be a datetime or a timedelta"),
    ],
)
def test_bad_input_is_an_invalid_pause_naming_the_field(
    name: object, until: object, field: str, words: str
) -> None:
    with pytest.raises(InvalidPause) as caught:
        pause_queue(name, until)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert words in caught.value.message
    assert not QueueState.objects.exists()


def test_resume_checks_the_name() -> None:
    with pytest.raises(InvalidPause, match=r"queue: .*not a valid queue name"):
        resume_queue("a,b")


def test_a_pause_with_an_end_time_lifts_itself() -> None:
    pause_queue("emails", timedelta(seconds=0.3))
    assert "emails" in paused_queues()
    wait_until(lambda: "emails" not in paused_queues(), what="the pause to lift")
    assert QueueState.objects.get(name="emails").paused_at is not None  # nothing rewrote it


def test_pause_and_resume_notify_the_workers_at_commit() -> None:
    with new_connection() as listener:
        db.listen(listener, "durable_jobs")
        pause_queue("emails")
        resume_queue("emails")
        resume_queue("emails")  # not paused: no notification
        payloads = [n.payload for n in listener.notifies(timeout=WAIT_SECONDS, stop_after=2)]
        assert payloads == ["queue_state:emails", "queue_state:emails"]
        assert list(listener.notifies(timeout=0.3)) == []


def test_a_paused_queue_still_accepts_jobs() -> None:
    pause_queue("emails")
    result = enqueue("tests.record", {}, queue="emails")
    assert result.created and status(result.job) == JobStatus.PENDING


# -- the gateway ----------------------------------------------------------------


def test_the_claims_leave_paused_queues_out() -> None:
    for queue in ("default", "emails", "emails", "reports"):
        make_job(queue=queue)
    args = {"worker_id": "w", "lease_seconds": 30.0}
    assert (
        db.claim(db.database_alias(), **args, limit=10, queues={"emails"}, excluded={"emails"})
        == []
    )
    both = {"emails", "reports"}
    claimed = db.claim(db.database_alias(), **args, limit=10, queues=both, excluded={"emails"})
    assert [job.queue for job in claimed] == ["reports"]
    per_queue = db.claim_per_queue(
        db.database_alias(), **args, limits=[("emails", 5)], excluded={"emails"}
    )
    assert per_queue == []
    any_queue = db.claim(db.database_alias(), **args, limit=10, excluded={"emails"})
    assert [job.queue for job in any_queue] == ["default"]
    # Only the paused queue's jobs are left.
    assert set(Job.objects.pending().values_list("queue", flat=True)) == {"emails"}
    assert db.claim(db.database_alias(), **args, limit=10, excluded=()) != []


def test_next_available_at_leaves_paused_queues_out() -> None:
    job = make_job(queue="emails")
    assert db.next_available_at(db.database_alias(), None) == job.available_at
    assert db.next_available_at(db.database_alias(), None, {"emails"}) is None
    assert db.next_available_at(db.database_alias(), {"emails"}, {"emails"}) is None


def test_paused_queues_reads_the_seconds_left_by_the_database_clock() -> None:
    pause_queue("forever")
    pause_queue("brief", timedelta(seconds=60))
    pause_queue("over", timedelta(seconds=60))
    QueueState.objects.filter(name="over").update(paused_until=timezone.now() - timedelta(1))
    paused = db.paused_queues(db.database_alias())
    assert set(paused) == {"forever", "brief"}
    assert paused["forever"] is None
    assert 55 < paused["brief"] <= 60  # type: ignore[operator]


# -- the worker ---------------------------------------------------------------------


def test_a_running_worker_stops_claiming_a_paused_queue_when_notified(
    running: RunningWorker,
) -> None:
    before = enqueue("tests.record", {}, queue="emails").job
    wait_until(lambda: completed(before), what="the first job")
    pause_queue("emails")
    # Enqueued after the pause: its notification comes after the pause's.
    held = enqueue("tests.record", {}, queue="emails").job
    other = enqueue("tests.record", {}, queue="default").job
    wait_until(lambda: completed(other), what="the other queue's job")
    # The next poll is an hour away: the pause's notification told the worker.
    wait_until(lambda: running.worker.paused.names == {"emails"}, what="the worker to hear")
    assert status(held) == JobStatus.PENDING
    # Resumed: the held job runs on the resume's notification, not at the next poll.
    resume_queue("emails")
    wait_until(lambda: completed(held), what="the held job after resume")
    assert running.worker.paused.names == frozenset()


def test_a_pause_for_a_while_lifts_itself_in_a_running_worker(running: RunningWorker) -> None:
    state = pause_queue("emails", timedelta(seconds=1))
    held = enqueue("tests.record", {}, queue="emails").job
    wait_until(lambda: running.worker.paused.names == {"emails"}, what="the worker to hear")
    # No notification lifts it, and the next poll is an hour away: the worker
    # woke at the end time by itself.
    wait_until(lambda: completed(held), what="the job after the pause lifted")
    started = Job.objects.get(pk=held.pk).started_at
    assert state.paused_until is not None and started is not None
    assert started >= state.paused_until


def test_a_worker_without_notifications_sees_a_pause_at_its_next_poll() -> None:
    worker = RunningWorker(worker_config(burst=False, poll_interval=0.2, listen=False))
    try:
        wait_until(lambda: worker.worker.loop_alive)
        pause_queue("emails")
        wait_until(lambda: worker.worker.paused.names == {"emails"}, what="the next poll")
        held = enqueue("tests.record", {}, queue="emails").job
        other = enqueue("tests.record", {}, queue="default").job
        wait_until(lambda: completed(other), what="the other queue's job")
        assert status(held) == JobStatus.PENDING
        resume_queue("emails")
        wait_until(lambda: completed(held), what="the held job after resume")
    finally:
        worker.stop()


def test_a_worker_with_slots_per_queue_leaves_a_paused_queue_alone() -> None:
    pause_queue("emails")
    held = make_job(queue="emails")
    other = make_job(queue="default")
    burst(queue_slots={"emails": 2, "default": 2})
    assert status(held) == JobStatus.PENDING
    assert status(other) == JobStatus.COMPLETED


def test_a_burst_worker_exits_leaving_the_paused_queues_jobs_pending() -> None:
    pause_queue("emails")
    held = make_job(queue="emails")
    named = make_job(queue="emails")
    burst()
    burst(queues=frozenset({"emails"}))
    assert status(held) == status(named) == JobStatus.PENDING


def test_an_idle_worker_does_not_spin_on_a_paused_queues_runnable_jobs() -> None:
    pause_queue("emails")
    make_job(queue="emails")
    calls: list[float] = []
    original = db.claim

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(time.monotonic())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    with mock.patch.object(db, "claim", counting):
        worker = RunningWorker(worker_config(burst=False, poll_interval=0.25, listen=False))
        try:
            wait_until(lambda: len(calls) >= 6, what="six polls")
        finally:
            worker.stop()
    # About one claim per poll interval (0.25 s), never a busy loop (whose gaps
    # are milliseconds). A gap can only grow on a busy machine, never shrink.
    gaps = [later - earlier for earlier, later in itertools.pairwise(calls)]
    assert statistics.median(gaps) >= 0.2, gaps


def test_a_claim_that_has_not_heard_of_a_pause_still_leaves_the_paused_queue_alone() -> None:
    # The worker read the paused queues (none), then a pause and a job
    # committed before its claim ran: the claim itself leaves the queue out.
    pause_queue("emails")
    held = make_job(queue="emails")
    other = make_job(queue="default")
    claimed = db.claim(
        db.database_alias(), worker_id="stale", lease_seconds=30, limit=10, excluded=()
    )
    assert [job.id for job in claimed] == [other.id]
    assert status(held) == JobStatus.PENDING
    resume_queue("emails")
    again = db.claim(
        db.database_alias(), worker_id="stale", lease_seconds=30, limit=10, excluded=()
    )
    assert [job.id for job in again] == [held.id]
