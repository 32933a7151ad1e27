"""``wait()`` and ``await_job()`` against the real PostgreSQL, and the NOTIFY they hear.

The NOTIFY path is told from the poll by making the poll slow
(``WAIT_POLL_INTERVAL_SECONDS`` far above the bound asserted); the poll
path by dropping every notification the listener hears.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
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

#: A poll this slow cannot explain a wake-up within the bounds asserted below.
SLOW_POLL = {"WAIT_POLL_INTERVAL_SECONDS": 60.0}


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
    return listening.listener_for("default")


def wait_in_thread(job_id: uuid.UUID, **kwargs: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """``wait()`` on a thread; the dict gets ``job`` (or ``error``) and ``returned_at``."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["job"] = wait(job_id, **kwargs)
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            outcome["returned_at"] = datetime.now(dt_timezone.utc)
            connections.close_all()

    thread = threading.Thread(target=run)
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


def woken_promptly(outcome: dict[str, Any]) -> Job:
    """The job ``wait_in_thread`` returned, having returned within 2 s of its finish.

    Far less than the slow poll and the waits' timeouts, at whose end
    ``wait()`` looks once more and would return the job too.
    """
    job: Job = outcome["job"]
    assert job.completed_at is not None
    assert outcome["returned_at"] - job.completed_at < timedelta(seconds=2)
    return job


# --- wait() --------------------------------------------------------------------


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_wait_returns_within_2s_of_completion_with_the_worker_idle_polling_every_5s() -> None:
    running = RunningWorker(worker_config(burst=False, poll_interval=5.0))
    try:
        job = enqueue("tests.record", {"sleep": 0.3}).job
        thread, outcome = wait_in_thread(job.pk, timeout=20)
        thread.join(30)
    finally:
        running.stop()
    # Woken by the NOTIFY: the poll (60 s) could not have done it.
    finished = woken_promptly(outcome)
    assert finished.status == JobStatus.COMPLETED
    assert finished.result == {"attempt": 1}


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_a_job_finished_before_the_wait_returns_at_once() -> None:
    enqueue("tests.record")
    job_id = complete_next({"done": True})
    started = time.monotonic()
    job = wait(job_id, timeout=30)
    assert time.monotonic() - started < 2  # the first look, not the 60 s poll
    assert job.status == JobStatus.COMPLETED and job.result == {"done": True}
    assert wait(str(job_id), timeout=0).pk == job_id


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_a_dead_job_and_a_cancelled_one_are_returned_too() -> None:
    enqueue("tests.record")
    doomed = claim_directly()
    thread, outcome = wait_in_thread(doomed.id, timeout=20)
    until_waiting()
    finish(Outcome(doomed.id, doomed.lease_token, Transition.DEAD, last_error="boom"))
    thread.join(30)
    assert woken_promptly(outcome).status == JobStatus.DEAD

    pending = enqueue("tests.record").job
    naps.clear()
    thread, outcome = wait_in_thread(pending.pk, timeout=20)
    until_waiting()
    operations.cancel(pending.pk)  # a pending job: cancelled at once, NOTIFYed
    thread.join(30)
    assert woken_promptly(outcome).status == JobStatus.CANCELLED


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
        thread, outcome = wait_in_thread(job.pk, timeout=20)
        until_waiting()
        complete_next()
        wait_until(lambda: heard, what="the (dropped) notification")
        thread.join(30)
    assert woken_promptly(outcome).status == JobStatus.COMPLETED


def test_the_poll_finds_the_job_when_the_listener_cannot_connect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = db.connection_params

    def unreachable(alias: str) -> dict[str, Any]:
        return {**real(alias), "port": 1, "connect_timeout": 1}

    monkeypatch.setattr(listening.db, "connection_params", unreachable)
    job = enqueue("tests.record").job
    with override_settings(DURABLE_JOBS={"WAIT_POLL_INTERVAL_SECONDS": 0.2}):
        thread, outcome = wait_in_thread(job.pk, timeout=20)
        wait_until(lambda: naps, what="the waiter's first nap")
        complete_next()
        thread.join(30)
    assert not listener().connected.is_set()
    assert woken_promptly(outcome).status == JobStatus.COMPLETED


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


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_fifty_waiters_share_one_listen_connection() -> None:
    ids = [enqueue("tests.record").job.pk for _ in range(50)]
    waiting = [wait_in_thread(job_id, timeout=20) for job_id in ids]
    until_waiting(50)
    with new_connection() as conn:
        (row,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE %s",
            ["LISTEN %_finished%"],
        ).fetchall()
    assert row[0] == 1
    claimed = db.claim("default", worker_id="w", lease_seconds=30.0, limit=50)
    db.record_outcomes(
        "default",
        [Outcome(c.id, c.lease_token, Transition.COMPLETE) for c in claimed],
        history_limit=20,
    )
    for thread, _ in waiting:
        thread.join(30)
    assert {woken_promptly(outcome).pk for _, outcome in waiting} == set(ids)
    assert {outcome["job"].status for _, outcome in waiting} == {JobStatus.COMPLETED}


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_the_listener_reconnects_and_waiters_still_hear_of_their_job() -> None:
    job = enqueue("tests.record").job
    thread, outcome = wait_in_thread(job.pk, timeout=20)
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
    thread.join(30)
    assert woken_promptly(outcome).status == JobStatus.COMPLETED


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
            tasks = [asyncio.ensure_future(await_job(job_id, timeout=20)) for job_id in ids]
            while len(naps) < 20 or not listener().connected.is_set():
                await asyncio.sleep(0.02)
            threads_while_waiting = threading.active_count()
            await sync_to_async(complete_all)()
            jobs = await asyncio.gather(*tasks)
            returned_at = datetime.now(dt_timezone.utc)
            # Woken by the NOTIFY, not by the 60 s poll or the 20 s deadline.
            assert all(returned_at - job.completed_at < timedelta(seconds=2) for job in jobs)
            # The listener's thread and asgiref's one executor thread at most.
            assert threads_while_waiting <= threads_before + 2
            with pytest.raises(TimeoutError):
                await await_job(pending, timeout=0.2)
            return jobs
        finally:
            await sync_to_async(connections.close_all)()

    def complete_all() -> None:
        claimed = db.claim("default", worker_id="w", lease_seconds=30.0, limit=20)
        db.record_outcomes(
            "default",
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
    (claimed,) = db.claim("default", worker_id="w", lease_seconds=30.0, limit=1)
    thread, outcome = wait_in_thread(child.pk, timeout=20)
    until_waiting()
    finish(dead_outcome(claimed))
    thread.join(30)
    cancelled = woken_promptly(outcome)
    assert cancelled.status == JobStatus.CANCELLED
    assert cancelled.last_error == f"Cancelled: parent job {parent.pk} ended dead."
