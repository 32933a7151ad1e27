"""``async def`` handlers against the real PostgreSQL, on workers in this process:
outcomes, slots, time limits, cancellation and the ORM's async rules."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
from django.test import override_settings

from django_durable_jobs import enqueue, enqueue_many, operations
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker import WorkerConfig
from django_durable_jobs.worker import event_loop as event_loop_module
from django_durable_jobs.worker.event_loop import THREAD_NAME
from django_durable_jobs.worker.loop import EXIT_OK, EXIT_RECYCLE
from tests.factories import (
    FAST_BACKOFF,
    HANDLER_THREAD_PREFIX,
    WAIT_SECONDS,
    RunningWorker,
    burst,
    join_handler_threads,
    wait_until,
    worker_config,
)
from tests.testapp.jobs import gate
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_backoff")]

TIMEOUT_PATH = "django_durable_jobs.exceptions.JobTimeout"
CANCELLED_PATH = "django_durable_jobs.exceptions.JobCancelled"


def config(**overrides: object) -> WorkerConfig:
    values: dict[str, object] = {"burst": False, "concurrency": 2, "schedules": False}
    return worker_config(**{**values, **overrides})


def jobs(specs: list[dict[str, object]]) -> list[Job]:
    return [r.job for r in enqueue_many(specs)]


def status_of(job_id: uuid.UUID) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job_id)


def finished(job_id: uuid.UUID) -> Callable[[], bool]:
    return lambda: status_of(job_id) in (JobStatus.COMPLETED, JobStatus.DEAD, JobStatus.CANCELLED)


def saw_cancelled_error(job_id: uuid.UUID) -> int:
    """How many times the handler caught the worker's CancelledError (tests.async_cancelled)."""
    return Execution.objects.filter(job_id=job_id, worker="cancelled").count()


# --- running, slots, outcomes -----------------------------------------------------


def test_sync_and_async_handlers_side_by_side_in_one_worker() -> None:
    asleep = jobs([{"type": "tests.asleep", "payload": {"sleep": 0.05}}] * 12)
    synced = jobs([{"type": "tests.record", "payload": {"sleep": 0.05}}] * 12)
    worker = burst(concurrency=4)
    for job in asleep + synced:
        assert status_of(job.pk) == JobStatus.COMPLETED
    results = [Job.objects.get(pk=j.pk).result for j in asleep]
    # On the worker's one event loop, never more at once than the slots.
    assert {r["thread"] for r in results} == {THREAD_NAME}
    assert max(r["most"] for r in results) <= 4
    assert [Job.objects.get(pk=j.pk).result for j in synced] == [{"attempt": 1}] * 12
    assert Execution.objects.count() == 24
    assert worker.event_loop.started and not worker.event_loop.running  # stopped at shutdown


def test_a_worker_of_sync_handlers_never_starts_the_event_loop() -> None:
    enqueue("tests.record")
    worker = burst()
    assert not worker.event_loop.started


def test_async_outcomes_are_those_of_sync_handlers() -> None:
    returned = enqueue("tests.async_outcome", {"do": "return", "value": [1, 2]}).job
    raised = enqueue("tests.async_outcome", {"do": "raise"}, max_attempts=2).job
    retried = enqueue("tests.async_outcome", {"do": "retry"}, max_attempts=3).job
    discarded = enqueue("tests.async_outcome", {"do": "discard"}, max_attempts=5).job
    for _ in range(50):
        burst()
        if all(finished(j.pk)() for j in (returned, raised, retried, discarded)):
            break
    row = Job.objects.get(pk=returned.pk)
    assert (row.status, row.result, row.attempts) == (JobStatus.COMPLETED, {"returned": [1, 2]}, 1)
    row = Job.objects.get(pk=raised.pk)
    assert (row.status, row.attempts) == (JobStatus.DEAD, 2)
    assert [e["exception"] for e in row.errors] == ["builtins.ValueError"] * 2
    assert "in async_outcome" in row.errors[0]["traceback"]  # the coroutine's own frames
    row = Job.objects.get(pk=retried.pk)
    assert (row.status, row.attempts) == (JobStatus.DEAD, 3)
    assert [e["exception"] for e in row.errors] == ["django_durable_jobs.exceptions.Retry"] * 3
    row = Job.objects.get(pk=discarded.pk)
    assert (row.status, row.attempts) == (JobStatus.DEAD, 1)
    assert row.errors[0]["exception"] == "django_durable_jobs.exceptions.Discard"


def test_a_sync_handler_returning_a_coroutine_fails_instead_of_completing() -> None:
    job = enqueue("tests.returns_coroutine").job
    burst()
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.DEAD and row.result is None
    assert row.errors[0]["exception"] == "builtins.TypeError"
    assert "returned a coroutine without being an async function" in row.last_error


# --- the ORM --------------------------------------------------------------------------


def test_the_async_orm_and_sync_to_async_work_on_the_slots_connection() -> None:
    job = enqueue("tests.async_orm").job
    burst(concurrency=1)
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.COMPLETED, row.last_error
    assert row.result["fetched"] == str(job.pk) and row.result["counted"] == 1
    assert row.result["loop_thread"] == THREAD_NAME
    # sync_to_async ran on the job's own slot thread, whose connection the
    # worker checks before each job (not on a shared asgiref thread).
    assert row.result["sync_thread"].startswith(HANDLER_THREAD_PREFIX)
    assert sorted(Execution.objects.filter(job_id=job.pk).values_list("worker", flat=True)) == [
        "async",
        "sync_to_async",
    ]


def test_sync_to_async_reaches_the_slot_thread_with_an_older_asgiref_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # asgiref < 3.13 has no ThreadSensitiveContext(executor=): the fallback.
    monkeypatch.setattr(event_loop_module, "_CONTEXT_TAKES_EXECUTOR", False)
    job = enqueue("tests.async_orm").job
    burst(concurrency=1)
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.COMPLETED, row.last_error
    assert row.result["sync_thread"].startswith(HANDLER_THREAD_PREFIX)


def test_the_sync_orm_in_a_coroutine_raises_synchronous_only_operation() -> None:
    job = enqueue("tests.async_sync_orm").job
    burst()
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.DEAD
    assert row.errors[0]["exception"] == "django.core.exceptions.SynchronousOnlyOperation"
    assert not Execution.objects.filter(job_id=job.pk).exists()


def test_to_thread_calls_close_their_connections_after_each_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: list[str] = []
    real = event_loop_module.connections.close_all

    def spy() -> None:
        closed.append(threading.current_thread().name)
        real()

    monkeypatch.setattr(event_loop_module.connections, "close_all", spy)
    job = enqueue("tests.async_to_thread").job
    burst(concurrency=1)
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.COMPLETED, row.last_error
    pool_thread = row.result["thread"]
    assert pool_thread.startswith(f"{THREAD_NAME}-pool")
    assert pool_thread in closed  # after the call, in the pool's thread
    assert Execution.objects.filter(job_id=job.pk, worker="to_thread").count() == 1


def test_an_async_handler_reads_its_parents_results() -> None:
    parent = enqueue("tests.value", {"value": {"n": 7}}).job
    child = enqueue("tests.async_parents", depends_on=[parent]).job
    for _ in range(20):
        burst()
        if finished(child.pk)():
            break
    row = Job.objects.get(pk=child.pk)
    assert row.status == JobStatus.COMPLETED, row.last_error
    assert row.result == {str(parent.pk): {"n": 7}}


# --- time limits ----------------------------------------------------------------------


def test_an_async_handler_past_its_time_limit_is_cancelled_and_retried() -> None:
    # One await of 60 s under a 0.3 s limit: at each deadline the worker
    # cancels the task, the handler sees CancelledError, the attempt fails
    # with JobTimeout and is retried; the slot is free again at once.
    job = enqueue("tests.async_cancelled", {"sleep": 60}, timeout=0.3, max_attempts=3).job
    running = RunningWorker(config(concurrency=1), daemon=True)
    try:
        wait_until(finished(job.pk), what="the job to go dead")
        wait_until(lambda: not running.worker.attempts, what="the cancelled tasks to end")
        # The handler's own record of each CancelledError goes through
        # sync_to_async (a thread, a connection): under load the third one can
        # still be on its way when the attempt has ended; a stop would cancel it.
        wait_until(
            lambda: saw_cancelled_error(job.pk) == 3, what="the third CancelledError's record"
        )
        assert running.worker.watchdog.timed_out == 3
        assert running.worker.watchdog.stuck() == []
    finally:
        assert running.stop() == EXIT_OK  # no recycle: every task stopped when cancelled
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == (JobStatus.DEAD, 3)
    assert [e["exception"] for e in row.errors] == [TIMEOUT_PATH] * 3
    assert "time limit of 0.3 s" in row.last_error
    # Where the coroutine was at the deadline: in its await.
    assert "Handler coroutine at the deadline" in row.errors[0]["traceback"]
    assert "in async_cancelled" in row.errors[0]["traceback"]
    assert saw_cancelled_error(job.pk) == 3
    assert Execution.objects.filter(job_id=job.pk).exclude(worker="cancelled").count() == 3


def test_an_async_handler_that_swallows_cancellation_recycles_the_worker() -> None:
    # It catches every CancelledError and goes on until the test opens its
    # gate: like a sync handler that ignores its deadline, its attempt fails
    # at the deadline, its slot stays taken, and the worker recycles after
    # the grace once its other job is done.
    name = f"swallow-{uuid.uuid4().hex}"
    stuck = enqueue(
        "tests.async_cancelled",
        {"sleep": 60, "swallow": True, "gate": name},
        timeout=0.3,
        max_attempts=2,
        priority=5,
    ).job
    other = enqueue("tests.asleep", {"sleep": 1.5}, priority=4).job
    with override_settings(DURABLE_JOBS={**FAST_BACKOFF, "TIMEOUT_GRACE_SECONDS": 0.5}):
        running = RunningWorker(config(concurrency=2), daemon=True)
    try:
        running.thread.join(30)
        assert not running.thread.is_alive(), "the worker did not recycle"
        assert running.exit_code == EXIT_RECYCLE
        assert status_of(other.pk) == JobStatus.COMPLETED  # it waited for the other job
        row = Job.objects.get(pk=stuck.pk)
        # Failed once at its deadline and retried; the recycling worker claimed nothing more.
        assert (row.status, row.attempts, row.lease_token) == (JobStatus.PENDING, 1, None)
        assert [e["exception"] for e in row.errors] == [TIMEOUT_PATH]
        assert saw_cancelled_error(stuck.pk) == 1
    finally:
        gate(name).set()
        if running.thread.is_alive():
            running.stop()
        join_handler_threads(10)
    assert status_of(stuck.pk) == JobStatus.PENDING  # its late outcome was dropped


# --- cancellation ---------------------------------------------------------------------


def test_ctx_check_raises_in_an_async_handler_after_a_cancel_request() -> None:
    job = enqueue("tests.async_checks", {"seconds": 60}, max_attempts=3).job
    running = RunningWorker(config(), daemon=True)
    try:
        wait_until(lambda: Execution.objects.filter(job_id=job.pk).exists(), what="the start")
        operations.cancel(job.pk)
        wait_until(lambda: status_of(job.pk) == JobStatus.CANCELLED, what="the cancel")
        assert running.worker.watchdog.cancelled == 0  # the handler stopped by itself
    finally:
        assert running.stop() == EXIT_OK
    row = Job.objects.get(pk=job.pk)
    assert row.attempts == 1 and row.result is None
    assert row.errors[-1]["exception"] == CANCELLED_PATH
    assert "its handler stopped" in row.last_error
    assert "in async_checks" in row.errors[-1]["traceback"]  # raised by ctx.check() there


GRACE = 3.0


def test_a_cancel_request_cancels_the_task_after_the_grace() -> None:
    # The handler never checks ctx.cancelled: TIMEOUT_GRACE_SECONDS after the
    # worker heard of the request, its task is cancelled and the job ends
    # cancelled, as the watchdog ends a sync handler's attempt then.
    job = enqueue("tests.async_cancelled", {"sleep": 60}).job
    # The grace is also the time the cancelled coroutine has to return before the worker
    # counts it as stuck and recycles: its CancelledError handler writes a row through
    # sync_to_async, which took over 1 s once in CI on a two-core machine under load.
    with override_settings(DURABLE_JOBS={**FAST_BACKOFF, "TIMEOUT_GRACE_SECONDS": GRACE}):
        running = RunningWorker(config(concurrency=1), daemon=True)
    try:
        wait_until(lambda: Execution.objects.filter(job_id=job.pk).exists(), what="the start")
        operations.cancel(job.pk)
        wait_until(lambda: status_of(job.pk) == JobStatus.CANCELLED, what="the cancel")
        wait_until(lambda: saw_cancelled_error(job.pk) == 1, what="the task's CancelledError")
        wait_until(lambda: not running.worker.attempts, what="the task to end")
        assert running.worker.watchdog.cancelled == 1
    finally:
        assert running.stop() == EXIT_OK
    row = Job.objects.get(pk=job.pk)
    assert row.attempts == 1 and row.errors[-1]["exception"] == CANCELLED_PATH
    waited = (row.completed_at - row.cancel_requested_at).total_seconds()
    assert waited >= GRACE  # not before the grace
    assert f"had not stopped {GRACE:g} s after the request" in row.last_error
    assert "Handler coroutine at the end of the grace" in row.errors[-1]["traceback"]


def test_a_shutdown_cancels_the_async_handlers_still_running_at_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The cancelled handler's own cleanup writes a row through sync_to_async (a new
    # thread, a new connection): over the 1 s the loop gives it at stop, once, in CI's
    # lane B. The cancel is what is tested here, not how fast the machine is.
    monkeypatch.setattr(event_loop_module, "CANCEL_LEFT_SECONDS", 15.0)
    job = enqueue("tests.async_cancelled", {"sleep": 60}).job
    running = RunningWorker(worker_config(burst=False, grace_period=0.2, schedules=False))
    wait_until(lambda: Execution.objects.filter(job_id=job.pk).exists(), what="the start")
    assert running.stop() == EXIT_OK
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == (JobStatus.PENDING, 0)  # given back, uncounted
    # And its task was cancelled, not left behind.
    wait_until(lambda: saw_cancelled_error(job.pk) == 1, WAIT_SECONDS, "the task's CancelledError")
    join_handler_threads(10)
