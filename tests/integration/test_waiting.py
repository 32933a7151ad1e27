"""``wait()`` and ``await_job()`` against the real PostgreSQL, and the NOTIFY they hear.

The NOTIFY path is told from the poll by making the poll and the waits'
deadlines an hour away (far beyond any wait of these tests): a waiter that
returns at all was woken. The poll path is told by dropping every
notification the listener hears. How soon a waiter returns is measured in
benchmarks/waiting.py, never asserted here.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings

from django_durable_jobs import await_job, db, enqueue, operations, wait
from django_durable_jobs.db.records import Outcome, Transition
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.waiting import listener as listening
from tests.factories import (
    WAIT_SECONDS,
    RunningWorker,
    claim_directly,
    complete_next,
    dead_outcome,
    finish,
    wait_until,
    worker_config,
)

from .helpers import new_connection

pytestmark = pytest.mark.django_db(transaction=True)

#: Beyond any wait of these tests: neither a poll nor a deadline this far off
#: can explain a waiter's return.
NEVER = 3600.0
SLOW_POLL = {"WAIT_POLL_INTERVAL_SECONDS": NEVER}


#: How many times each waiter went to sleep after a look that found its job unfinished.
naps: dict[object, int] = {}


@pytest.fixture(autouse=True)
def count_naps(monkeypatch: pytest.MonkeyPatch, fresh_wait_listeners: None) -> None:
    """Count each waiter's naps: once it naps, its look is done, so a job
    finished after that can only be found by a wake-up or a poll.
    """
    thread_sleep = listening.ThreadWaiter.sleep
    loop_sleep = listening.LoopWaiter.sleep

    def thread_nap(self: listening.ThreadWaiter, seconds: float) -> bool:
        naps[self] = naps.get(self, 0) + 1
        return thread_sleep(self, seconds)

    async def loop_nap(self: listening.LoopWaiter, seconds: float) -> bool:
        naps[self] = naps.get(self, 0) + 1
        return await loop_sleep(self, seconds)

    monkeypatch.setattr(listening.ThreadWaiter, "sleep", thread_nap)
    monkeypatch.setattr(listening.LoopWaiter, "sleep", loop_nap)
    naps.clear()


def listener() -> listening.WaitListener:
    return listening.listener_for(db.database_alias())


def wait_in_thread(job_id: uuid.UUID, **kwargs: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """``wait()`` on a thread; the dict gets ``job`` (or ``error``)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["job"] = wait(job_id, **kwargs)
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            connections.close_all()

    # A daemon: a waiter never woken must not keep the test run alive for an hour.
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def until_waiting(count: int = 1, naps_each: int = 1) -> None:
    """Until ``count`` waiters napped ``naps_each`` times after a look, and the listener LISTENs."""
    wait_until(
        lambda: (
            sum(n >= naps_each for n in naps.values()) >= count and listener().connected.is_set()
        ),
        what=f"{count} waiter(s) asleep and a LISTEN connection",
    )


def returned(thread: threading.Thread, outcome: dict[str, Any]) -> Job:
    """The job ``wait_in_thread`` returned, once its thread has (``WAIT_SECONDS`` at most).

    Its wait's deadline (and, under ``SLOW_POLL``, its poll) is an hour away,
    so a return at all shows the wake-up (or the poll) under test did it.
    """
    thread.join(WAIT_SECONDS)
    assert not thread.is_alive(), "wait() did not return: its job's end never reached it"
    assert "error" not in outcome, outcome.get("error")
    job: Job = outcome["job"]
    assert job.completed_at is not None
    return job


# --- wait() --------------------------------------------------------------------


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_wait_is_woken_by_a_running_worker_s_completion() -> None:
    running = RunningWorker(worker_config(burst=False, poll_interval=5.0))
    try:
        job = enqueue("tests.record", {"sleep": 0.3}).job
        thread, outcome = wait_in_thread(job.pk, timeout=NEVER)
        # Woken by the NOTIFY: the poll (an hour) could not have done it.
        finished = returned(thread, outcome)
    finally:
        running.stop()
    assert finished.status == JobStatus.COMPLETED
    assert finished.result == {"attempt": 1}


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_a_job_finished_before_the_wait_returns_at_once() -> None:
    enqueue("tests.record")
    job_id = complete_next({"done": True})
    thread, outcome = wait_in_thread(job_id, timeout=NEVER)
    job = returned(thread, outcome)
    assert not naps  # the first look found it: the waiter never went to sleep
    assert job.status == JobStatus.COMPLETED and job.result == {"done": True}
    assert wait(str(job_id), timeout=0).pk == job_id


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_a_dead_job_and_a_cancelled_one_are_returned_too() -> None:
    enqueue("tests.record")
    doomed = claim_directly()
    thread, outcome = wait_in_thread(doomed.id, timeout=NEVER)
    until_waiting()
    finish(Outcome(doomed.id, doomed.lease_token, Transition.DEAD, last_error="boom"))
    assert returned(thread, outcome).status == JobStatus.DEAD

    pending = enqueue("tests.record").job
    naps.clear()
    thread, outcome = wait_in_thread(pending.pk, timeout=NEVER)
    until_waiting()
    operations.cancel(pending.pk)  # a pending job: cancelled at once, NOTIFYed
    assert returned(thread, outcome).status == JobStatus.CANCELLED


def test_the_poll_finds_the_job_when_every_notification_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    heard: list[str] = []

    def lost(payload: str) -> list[uuid.UUID]:
        heard.append(payload)
        return []

    monkeypatch.setattr(listening, "finished_ids", lost)
    job = enqueue("tests.record").job
    with override_settings(DURABLE_JOBS={"WAIT_POLL_INTERVAL_SECONDS": 0.2}):
        thread, outcome = wait_in_thread(job.pk, timeout=NEVER)
        until_waiting()
        complete_next()
        wait_until(lambda: heard, what="the (dropped) notification")
        assert returned(thread, outcome).status == JobStatus.COMPLETED


def test_the_poll_finds_the_job_when_the_listener_cannot_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = db.connection_params

    def unreachable(alias: str) -> dict[str, Any]:
        return {**real(alias), "port": 1, "connect_timeout": 1}

    monkeypatch.setattr(listening.db, "connection_params", unreachable)
    job = enqueue("tests.record").job
    with override_settings(DURABLE_JOBS={"WAIT_POLL_INTERVAL_SECONDS": 0.2}):
        thread, outcome = wait_in_thread(job.pk, timeout=NEVER)
        wait_until(lambda: naps, what="the waiter's first nap")
        complete_next()
        assert returned(thread, outcome).status == JobStatus.COMPLETED
    assert not listener().connected.is_set()


def test_a_timeout_raises_timeout_error_naming_the_job_and_its_status() -> None:
    job = enqueue("tests.record").job
    with pytest.raises(TimeoutError, match=f"{job.pk}.*within 0.3 s.*pending"):
        wait(job.pk, timeout=0.3)
    with pytest.raises(TimeoutError):
        wait(job, timeout=timedelta(0))
    assert listener().waiting() == 0  # the waiters are gone


def test_an_unknown_id_raises_does_not_exist() -> None:
    with pytest.raises(Job.DoesNotExist):
        wait(uuid.uuid4(), timeout=1)


@pytest.mark.parametrize(
    ("job_or_id", "timeout", "error", "match"),
    [
        ("not-a-uuid", 1, ValueError, "not a job id"),
        (42, 1, TypeError, "got int"),
        (None, 1, TypeError, "got NoneType"),
        (uuid.uuid4(), -1, ValueError, "timeout must be .* got -1"),
        (uuid.uuid4(), float("nan"), ValueError, "timeout must be"),
        (uuid.uuid4(), "5", TypeError, "timeout must be .* got str"),
        (uuid.uuid4(), True, TypeError, "got bool"),
    ],
)
def test_bad_arguments_raise_a_clear_error(
    job_or_id: Any, timeout: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        wait(job_or_id, timeout=timeout)


WAITERS = 20


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_twenty_waiters_share_one_listen_connection() -> None:
    # Twenty, not more: each waiting thread keeps its own Django connection
    # open while it sleeps, and CI runs this tier in two lanes at once on a
    # server of 100 connections (fifty here once took the other lane's).
    ids = [enqueue("tests.record").job.pk for _ in range(WAITERS)]
    waiting = [wait_in_thread(job_id, timeout=NEVER) for job_id in ids]
    until_waiting(WAITERS)
    with new_connection() as conn:
        (row,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE %s",
            ["LISTEN %_finished%"],
        ).fetchall()
    assert row[0] == 1
    claimed = db.claim(db.database_alias(), worker_id="w", lease_seconds=30.0, limit=WAITERS)
    db.record_outcomes(
        db.database_alias(),
        [Outcome(c.id, c.lease_token, Transition.COMPLETE) for c in claimed],
        history_limit=20,
    )
    assert {returned(thread, outcome).pk for thread, outcome in waiting} == set(ids)
    assert {outcome["job"].status for _, outcome in waiting} == {JobStatus.COMPLETED}


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_the_listener_reconnects_and_waiters_still_hear_of_their_job() -> None:
    job = enqueue("tests.record").job
    thread, outcome = wait_in_thread(job.pk, timeout=NEVER)
    until_waiting()
    with new_connection() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE %s",
            ["LISTEN %_finished%"],
        )
    wait_until(lambda: not listener().connected.is_set(), what="the listener to notice")
    # Connected again, and the waiter woken by the reconnection, looked and asleep again.
    until_waiting(naps_each=2)
    complete_next()
    assert returned(thread, outcome).status == JobStatus.COMPLETED


def test_an_idle_listener_closes_its_connection_and_a_new_waiter_opens_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listening, "IDLE_SECONDS", 0.5)
    job = enqueue("tests.record").job
    with pytest.raises(TimeoutError):
        wait(job.pk, timeout=0.1)
    thread = listener()._thread
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive() and not listener().connected.is_set()
    complete_next()
    assert wait(job.pk, timeout=5).status == JobStatus.COMPLETED


# --- await_job() -------------------------------------------------------------------


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_await_job_is_woken_by_the_notify_without_a_thread_per_waiter() -> None:
    ids = [enqueue("tests.record").job.pk for _ in range(20)]

    async def main() -> list[Job]:
        try:
            tasks = [asyncio.ensure_future(await_job(job_id, timeout=NEVER)) for job_id in ids]
            while len(naps) < 20 or not listener().connected.is_set():
                await asyncio.sleep(0.02)
            threads_while_waiting = threading.active_count()
            await sync_to_async(complete_all)()
            # Woken by the NOTIFY: the poll and the deadline are an hour away.
            jobs = await asyncio.wait_for(asyncio.gather(*tasks), WAIT_SECONDS)
            # The listener's thread and asgiref's one executor thread at most.
            assert threads_while_waiting <= threads_before + 2
            with pytest.raises(TimeoutError):
                await await_job(pending, timeout=0.2)
            return jobs
        finally:
            await sync_to_async(connections.close_all)()

    def complete_all() -> None:
        claimed = db.claim(db.database_alias(), worker_id="w", lease_seconds=30.0, limit=20)
        db.record_outcomes(
            db.database_alias(),
            [Outcome(c.id, c.lease_token, Transition.COMPLETE) for c in claimed],
            history_limit=20,
        )

    pending = enqueue("tests.record", queue="elsewhere").job.pk
    threads_before = threading.active_count()
    jobs = asyncio.run(main())
    assert [job.pk for job in jobs] == ids
    assert {job.status for job in jobs} == {JobStatus.COMPLETED}


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_a_waiter_of_a_child_hears_that_its_dead_parent_cancelled_it() -> None:
    parent = enqueue("tests.record").job
    child = enqueue("tests.record", depends_on=[parent]).job
    (claimed,) = db.claim(db.database_alias(), worker_id="w", lease_seconds=30.0, limit=1)
    thread, outcome = wait_in_thread(child.pk, timeout=NEVER)
    until_waiting()
    finish(dead_outcome(claimed))
    cancelled = returned(thread, outcome)
    assert cancelled.status == JobStatus.CANCELLED
    assert cancelled.last_error == f"Cancelled: parent job {parent.pk} ended dead."
