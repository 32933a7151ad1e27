"""``async def`` handlers in real ``runjobworker`` processes: slots, time limits, recycles."""

from __future__ import annotations

import signal

import pytest

from django_durable_jobs import enqueue, enqueue_many
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker.event_loop import THREAD_NAME
from django_durable_jobs.worker.loop import EXIT_RECYCLE
from tests.factories import most_at_once
from tests.testapp.models import Execution

from .helpers import Workers, status, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TIMEOUT_PATH = "django_durable_jobs.exceptions.JobTimeout"


@pytest.fixture
def worker_env() -> dict[str, str]:
    # The time limits' settings: a 3 s grace past a deadline, INFO logs.
    return {"DJANGO_SETTINGS_MODULE": "tests.e2e.settings_time_limits"}


def test_twenty_async_handlers_of_half_a_second_share_four_slots(workers: Workers) -> None:
    jobs = [r.job for r in enqueue_many([{"type": "tests.asleep", "payload": {"sleep": 0.5}}] * 20)]
    proc = workers.start("--burst", "--concurrency", "4")
    assert proc.wait(60) == 0, workers.output()
    rows = list(Job.objects.filter(pk__in=[j.pk for j in jobs]))
    assert all(r.status == JobStatus.COMPLETED and r.attempts == 1 for r in rows)
    results = [r.result for r in rows]
    assert {r["thread"] for r in results} == {THREAD_NAME}  # one event loop
    # From the handlers' side: four at once, never more (20 x 0.5 s in 4 slots).
    assert most_at_once([(r["started"], r["ended"]) for r in results]) == 4
    assert max(r["most"] for r in results) == 4
    # About 2.5 s from the first claim to the last outcome: not less than
    # five rounds of four, and far less than one job after another (10 s).
    started = min(r.started_at for r in rows if r.started_at is not None)
    completed = max(r.completed_at for r in rows if r.completed_at is not None)
    span = (completed - started).total_seconds()
    assert 2.4 <= span <= 6.0, span
    assert "Event loop started for async handlers" in workers.output()


def test_example_asleep_beside_sync_handlers_in_one_worker(workers: Workers) -> None:
    rows = enqueue_many(
        [{"type": "example.asleep", "payload": {"seconds": 0.3}}] * 6
        + [{"type": "example.sleep", "payload": {"seconds": 0.3}}] * 6
    )
    proc = workers.start("--burst", "--concurrency", "4")
    assert proc.wait(60) == 0, workers.output()
    for row in rows:
        job = Job.objects.get(pk=row.job.pk)
        assert (job.status, job.result) == (JobStatus.COMPLETED, {"slept": 0.3})


def test_an_async_handler_past_its_time_limit_is_cancelled_and_retried(workers: Workers) -> None:
    job = enqueue("tests.async_cancelled", {"sleep": 60}, timeout=0.5, max_attempts=2).job
    proc = workers.start("--concurrency", "1", "--poll-interval", "0.2")
    # Each attempt's task is cancelled at 0.5 s and stops, freeing the only
    # slot for the retry: dead after two attempts, long before 60 s.
    wait_for(lambda: status(job) == JobStatus.DEAD, 60, "the job to go dead")
    assert proc.poll() is None, workers.output()  # no recycle
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, workers.output()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.DEAD, 2)
    assert [e["exception"] for e in job.errors] == [TIMEOUT_PATH] * 2
    assert "in async_cancelled" in job.errors[0]["traceback"]
    # The handler saw the CancelledError in both attempts.
    assert Execution.objects.filter(job_id=job.pk, worker="cancelled").count() == 2
    output = workers.output()
    assert "ran past its time limit" in output
    assert "Recycling worker" not in output


def test_an_async_handler_that_swallows_cancellation_recycles_the_worker(workers: Workers) -> None:
    # It swallows every CancelledError for 20 s: the attempt fails at 0.5 s,
    # the only slot stays taken, and 3 s later (the grace) the worker recycles.
    job = enqueue(
        "tests.async_cancelled", {"sleep": 60, "swallow": 20}, timeout=0.5, max_attempts=2
    ).job
    proc = workers.start("--concurrency", "1", "--poll-interval", "0.2")
    wait_for(lambda: proc.poll() is not None, 60, "the worker to recycle")
    assert proc.returncode == EXIT_RECYCLE, workers.output()
    job.refresh_from_db()
    # Failed once at its deadline and retried; the recycling worker took nothing more.
    assert (job.status, job.attempts, job.lease_token) == (JobStatus.PENDING, 1, None)
    assert [e["exception"] for e in job.errors] == [TIMEOUT_PATH]
    assert Execution.objects.filter(job_id=job.pk, worker="cancelled").count() == 1
    output = workers.output()
    assert "Handler coroutine of job" in output and "has not returned 3.0s" in output
    assert "Recycling worker" in output


def test_sigterm_waits_for_running_async_handlers(workers: Workers) -> None:
    job = enqueue("tests.asleep", {"sleep": 1.5}).job
    proc = workers.start("--grace-period", "10")
    # Its handler started (recorded), not only claimed: a stop gives back a
    # job claimed ahead whose handler has not started yet.
    wait_for(lambda: Execution.objects.filter(job_id=job.pk).exists(), 30, "the handler to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, workers.output()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED, workers.output()
    assert Execution.objects.filter(job_id=job.pk).count() == 1
