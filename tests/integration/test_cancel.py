"""Cancelling a running job against the real PostgreSQL: the request, its delivery
to the worker (NOTIFY and the polling fallback), the handler's side, the watchdog
for handlers that never check, the reaper, and the outcome's fence."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client, override_settings

from django_durable_jobs import db, enqueue, operations
from django_durable_jobs.constants import CANCEL_NOTIFY_PREFIX
from django_durable_jobs.db.records import Transition
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker import Worker, WorkerConfig
from django_durable_jobs.worker.attempts import State
from django_durable_jobs.worker.executor import RetryPolicy, execute
from django_durable_jobs.worker.loop import EXIT_OK, EXIT_RECYCLE
from django_durable_jobs.worker.outcomes import (
    Failure,
    cancel,
    cancelled_failure,
    complete,
    release,
    retry,
)
from django_durable_jobs.worker.watchdog import Watchdog
from tests.factories import (
    RunningWorker,
    claim_directly,
    client_for,
    expire,
    finish,
    join_handler_threads,
    make_operator,
    reaper,
    wait_until,
    worker_config,
)
from tests.testapp.jobs import cancel_seen, gate
from tests.testapp.models import Execution

from .helpers import new_connection, scrape, value

pytestmark = [pytest.mark.django_db(transaction=True)]

CANCELLED_PATH = "django_durable_jobs.exceptions.JobCancelled"
#: The cancel poll of the workers below that must not poll: far beyond any wait
#: of these tests, so what reaches the handler came by NOTIFY. How fast it
#: comes ("within about a second") is measured in benchmarks/reaction.py.
NEVER = 3600.0


def config(**overrides: object) -> WorkerConfig:
    values: dict[str, object] = {"burst": False, "concurrency": 2, "schedules": False}
    return worker_config(**{**values, **overrides})


def started(job_id: uuid.UUID) -> Callable[[], bool]:
    return lambda: Execution.objects.filter(job_id=job_id).exists()


def status_of(job_id: uuid.UUID) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job_id)


def api() -> Client:
    return client_for(make_operator())


def cancel_over_rest(job_id: uuid.UUID) -> tuple[int, dict[str, Any]]:
    """POST /api/jobs/{id}/cancel: (status code, body)."""
    response = api().post(f"/api/jobs/{job_id}/cancel", {}, content_type="application/json")
    return response.status_code, response.json()


def worker_without_poll(**overrides: object) -> Worker:
    """A worker whose maintenance thread never polls for cancels: only NOTIFY can tell it."""
    worker = Worker(config(**overrides))
    worker.maintenance.cancel_poll_interval = NEVER
    return worker


def assert_ended_cancelled(job_id: uuid.UUID, *, attempts: int = 1) -> Job:
    job = Job.objects.get(pk=job_id)
    assert job.status == JobStatus.CANCELLED, (job.status, job.last_error)
    assert job.attempts == attempts  # the attempt counted, none given back, no retry
    assert job.completed_at is not None and job.cancel_requested_at is not None
    assert job.lease_token is None and job.lease_holder is None
    assert job.result is None
    assert job.errors[-1]["exception"] == CANCELLED_PATH
    assert "cancelled while it ran" in job.last_error
    return job


# --- the request ----------------------------------------------------------------------


def test_cancel_of_a_running_job_sets_the_request_and_notifies_at_commit() -> None:
    listener = new_connection()
    try:
        db.listen(listener, "durable_jobs")
        job = enqueue("tests.record").job
        claimed = claim_directly()
        # Drain the enqueue notification.
        list(listener.notifies(timeout=0.2, stop_after=1))
        returned = operations.cancel(job.pk)
        assert returned.status == JobStatus.RUNNING
        assert returned.cancel_requested_at is not None
        (notify,) = list(listener.notifies(timeout=5, stop_after=1))
        assert notify.payload == f"{CANCEL_NOTIFY_PREFIX}{job.pk}"
    finally:
        listener.close()
    # The lease is untouched: the worker still holds the job.
    row = Job.objects.get(pk=job.pk)
    assert row.lease_token == claimed.lease_token and row.status == JobStatus.RUNNING


def test_cancel_many_cancels_pending_requests_running_and_skips_finished() -> None:
    running = enqueue("tests.record").job
    claim_directly()
    pending = enqueue("tests.record").job
    done = enqueue("tests.record").job
    Job.objects.filter(pk=done.pk).update(status=JobStatus.COMPLETED)
    result = operations.cancel_many([pending.pk, str(running.pk), done.pk])
    assert result.changed == [pending.pk]
    assert result.requested == [running.pk]
    assert result.skipped == 1
    assert status_of(pending.pk) == JobStatus.CANCELLED
    assert Job.objects.get(pk=pending.pk).cancel_requested_at is None
    assert status_of(done.pk) == JobStatus.COMPLETED


def test_requeue_clears_the_cancel_request() -> None:
    job = enqueue("tests.record").job
    claimed = claim_directly()
    operations.cancel(job.pk)
    assert finish(retry(claimed, "w", Failure("boom", "ValueError", ""), delay=0)) == {job.pk}
    assert status_of(job.pk) == JobStatus.CANCELLED
    requeued = operations.requeue(job.pk)
    assert requeued.status == JobStatus.PENDING and requeued.cancel_requested_at is None


# --- the outcome's fence --------------------------------------------------------------


def test_a_retry_or_release_that_raced_the_request_ends_cancelled_not_pending() -> None:
    # The handler failed (or the worker shut down) before it heard of the
    # request: the job must not run again.
    failed = enqueue("tests.record").job
    first = claim_directly()
    operations.cancel(failed.pk)
    assert finish(retry(first, "w", Failure("boom", "ValueError", ""), delay=0)) == {failed.pk}
    row = Job.objects.get(pk=failed.pk)
    assert row.status == JobStatus.CANCELLED and row.completed_at is not None
    assert row.attempts == 1

    released = enqueue("tests.record").job
    second = claim_directly()
    operations.cancel(released.pk)
    assert finish(release(second.id, second.lease_token)) == {released.pk}
    row = Job.objects.get(pk=released.pk)
    assert row.status == JobStatus.CANCELLED and row.attempts == 1  # it did run

    # A handler that completed before it heard of the request: its work is done.
    completed = enqueue("tests.record").job
    third = claim_directly()
    operations.cancel(completed.pk)
    assert finish(complete(third, '{"ok": true}')) == {completed.pk}
    row = Job.objects.get(pk=completed.pk)
    assert row.status == JobStatus.COMPLETED and row.result == {"ok": True}


def test_a_cancel_outcome_is_fenced_by_the_lease_token() -> None:
    job = enqueue("tests.record").job
    claimed = claim_directly()
    stale = claimed._replace(lease_token=uuid.uuid4())
    assert finish(cancel(stale, "w", cancelled_failure())) == set()
    assert status_of(job.pk) == JobStatus.RUNNING
    assert finish(cancel(claimed, "w", cancelled_failure())) == {job.pk}
    assert status_of(job.pk) == JobStatus.CANCELLED


# --- the worker: a cooperative handler ------------------------------------------------


def test_a_cooperative_handler_sees_the_cancel_by_notify() -> None:
    queue = f"q-{uuid.uuid4().hex[:6]}"
    job = enqueue("tests.cancellable", queue=queue, max_attempts=3).job
    before = scrape()
    running = RunningWorker(worker_without_poll(queues=frozenset({queue})), daemon=True)
    try:
        wait_until(started(job.pk), what="the handler to start")
        assert str(job.pk) not in cancel_seen
        code, body = cancel_over_rest(job.pk)
        assert code == 202 and body["status"] == "running"
        # The worker never polls for cancels: only the NOTIFY can tell it.
        wait_until(lambda: str(job.pk) in cancel_seen, what="the handler to see ctx.cancelled")
        wait_until(lambda: status_of(job.pk) == JobStatus.CANCELLED, what="the job to end")
    finally:
        assert running.stop() == EXIT_OK
    row = assert_ended_cancelled(job.pk)
    assert "its handler stopped" in row.errors[-1]["error"]
    assert Execution.objects.filter(job_id=job.pk).count() == 1  # not retried
    after = scrape()
    labels = {"queue": queue, "type": "tests.cancellable"}
    name = "durable_jobs_processed_total"
    assert value(after, name, **labels, result="cancelled") == 1
    for result in ("failed", "dead", "completed"):
        assert value(before, name, **labels, result=result) == 0
        assert value(after, name, **labels, result=result) == 0


def test_without_listen_the_poll_tells_the_handler() -> None:
    job = enqueue("tests.cancellable").job
    running = RunningWorker(config(listen=False), daemon=True)
    try:
        wait_until(started(job.pk), what="the handler to start")
        assert str(job.pk) not in cancel_seen
        operations.cancel(job.pk)
        # No LISTEN: only the poll can tell it.
        wait_until(lambda: str(job.pk) in cancel_seen, what="the handler to see ctx.cancelled")
        wait_until(lambda: status_of(job.pk) == JobStatus.CANCELLED, what="the job to end")
    finally:
        assert running.stop() == EXIT_OK
    assert_ended_cancelled(job.pk)


def test_a_handler_that_swallows_the_cancel_and_returns_still_ends_cancelled() -> None:
    job = enqueue("tests.cancellable", {"swallow": True}).job
    running = RunningWorker(config(), daemon=True)
    try:
        wait_until(started(job.pk), what="the handler to start")
        operations.cancel(job.pk)
        wait_until(lambda: status_of(job.pk) == JobStatus.CANCELLED, what="the job to end")
    finally:
        assert running.stop() == EXIT_OK
    row = assert_ended_cancelled(job.pk)
    assert "returned after the request; no result stored" in row.errors[-1]["error"]


def test_cancel_requests_reach_only_the_jobs_asked() -> None:
    asked = enqueue("tests.cancellable").job
    other = enqueue("tests.cancellable", {"seconds": 1.5}).job
    running = RunningWorker(config(), daemon=True)
    try:
        wait_until(lambda: started(asked.pk)() and started(other.pk)(), what="both to start")
        operations.cancel(asked.pk)
        wait_until(lambda: status_of(other.pk) == JobStatus.COMPLETED, what="the other to end")
        wait_until(lambda: status_of(asked.pk) == JobStatus.CANCELLED, what="the asked to end")
    finally:
        assert running.stop() == EXIT_OK
    assert Job.objects.get(pk=other.pk).result == {"looped": True}


# --- the worker: a handler that never checks ------------------------------------------


def test_a_handler_that_ignores_the_cancel_is_ended_by_the_watchdog_after_the_grace() -> None:
    # Grace 2 s: the watchdog ends the attempt 2 s after the worker heard of
    # the request; the handler returns at 3 s, before the 2 s more that would
    # recycle the worker, and its late "completed" is dropped.
    job = enqueue("tests.ignores_cancel", {"seconds": 3.0}).job
    with override_settings(DURABLE_JOBS={"TIMEOUT_GRACE_SECONDS": 2.0}):
        running = RunningWorker(config(concurrency=1), daemon=True)
    try:
        wait_until(started(job.pk), what="the handler to start")
        operations.cancel(job.pk)
        wait_until(lambda: status_of(job.pk) == JobStatus.CANCELLED, what="the watchdog")
        wait_until(lambda: not running.worker.attempts, what="the handler's thread to return")
        assert running.worker.completer.flush(10)  # any (wrong) late outcome is written
        assert running.worker.watchdog.cancelled == 1
        assert running.worker.watchdog.stuck() == []
    finally:
        assert running.stop() == EXIT_OK  # no recycle: the thread came back in time
    row = assert_ended_cancelled(job.pk)
    # Not before the grace (the database's clock); the handler returned at 3 s,
    # and the error below says the watchdog, not that return, ended it.
    assert (row.completed_at - row.cancel_requested_at).total_seconds() >= 2.0
    entry = row.errors[-1]
    assert "had not stopped 2 s after the request" in entry["error"]
    assert "in ignores_cancel" in entry["traceback"]  # where the handler was
    assert Execution.objects.filter(job_id=job.pk).count() == 1


def test_a_handler_stuck_past_the_grace_recycles_the_worker_as_for_a_time_limit() -> None:
    name = f"stuck-{uuid.uuid4().hex}"
    stuck = enqueue("tests.gated", {"gate": name}).job
    with override_settings(DURABLE_JOBS={"TIMEOUT_GRACE_SECONDS": 0.5}):
        running = RunningWorker(config(concurrency=2), daemon=True)
    try:
        wait_until(started(stuck.pk), what="the handler to start")
        operations.cancel(stuck.pk)
        running.thread.join(30)
        assert not running.thread.is_alive(), "the worker did not recycle"
        assert running.exit_code == EXIT_RECYCLE
        assert_ended_cancelled(stuck.pk)  # recorded before the recycle, thread still blocked
    finally:
        gate(name).set()
        if running.thread.is_alive():
            running.stop()
        join_handler_threads(10)
    assert status_of(stuck.pk) == JobStatus.CANCELLED  # the late outcome was dropped


# --- the worker: not yet started, shutdown, death -------------------------------------


def test_a_job_cancelled_before_a_thread_began_it_never_runs_its_handler() -> None:
    job = enqueue("tests.record").job
    claimed = claim_directly()
    worker = Worker(config())
    worker.attempts.claimed(claimed, None)
    operations.cancel(job.pk)
    watchdog: Watchdog = worker.watchdog
    (told,) = watchdog.request_cancel({job.pk})
    assert told.state is State.CLAIMED and told.cancel.requested
    outcome = execute(claimed, "w", RetryPolicy(0.01, 0.05, 0.1), watchdog)
    assert outcome is not None and outcome.transition is Transition.CANCEL
    assert not Execution.objects.filter(job_id=job.pk).exists()
    assert finish(outcome) == {job.pk}
    row = assert_ended_cancelled(job.pk)
    assert "before its handler started" in row.last_error


def test_a_cancelled_job_still_running_at_the_end_of_a_shutdown_ends_cancelled() -> None:
    job = enqueue("tests.ignores_cancel", {"seconds": 3.0}).job
    running = RunningWorker(worker_config(burst=False, grace_period=0.2, schedules=False))
    wait_until(started(job.pk), what="the handler to start")
    operations.cancel(job.pk)
    wait_until(lambda: not running.worker.attempts.untold(), what="the worker to hear of it")
    assert running.stop() == EXIT_OK  # at the end of the grace period: not released, cancelled
    row = assert_ended_cancelled(job.pk)
    assert "still running at the end of the grace period" in row.last_error
    join_handler_threads(10)


def test_the_reaper_ends_a_cancelled_job_of_a_dead_worker_cancelled() -> None:
    job = enqueue("tests.record", max_attempts=5).job
    claimed = claim_directly(worker_id="w-dead")
    operations.cancel(job.pk)
    expire(job.pk)
    assert reaper().reap() == 1
    row = assert_ended_cancelled(job.pk)
    assert row.attempts == claimed.attempt == 1
    assert "its worker w-dead stopped" in row.last_error
    # A reaped job without a request is still retried, as before.
    other = enqueue("tests.record").job
    claim_directly(worker_id="w-dead")
    expire(other.pk)
    assert reaper().reap() == 1
    assert status_of(other.pk) == JobStatus.PENDING
