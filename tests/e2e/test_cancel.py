"""Cancelling a running job with real ``runjobworker`` processes: over REST, and a
worker killed while its cancelled job runs."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from django.test import Client

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus
from tests.factories import client_for, make_operator
from tests.testapp.models import Execution

from .helpers import Workers, status, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CANCELLED_PATH = "django_durable_jobs.exceptions.JobCancelled"


@pytest.fixture
def worker_env() -> dict[str, str]:
    return {"E2E_LOG_LEVEL": "INFO"}  # the cancel's log lines


def staff_client() -> Client:
    return client_for(make_operator())


def cancel_over_rest(job: Job) -> Any:
    return staff_client().post(f"/api/jobs/{job.pk}/cancel", {}, content_type="application/json")


def test_example_cancellable_stops_on_the_rest_call(workers: Workers) -> None:
    job = enqueue("example.cancellable", {"seconds": 120}, max_attempts=3).job
    proc = workers.start("--concurrency", "2", "--poll-interval", "0.2")
    wait_for(lambda: status(job) == JobStatus.RUNNING, 60, "the job to start")
    response = cancel_over_rest(job)
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "running"
    # Long before its 120 s loop ends: it stopped because it was told. How soon
    # ("within about a second") is measured in benchmarks/reaction.py.
    wait_for(lambda: status(job) == JobStatus.CANCELLED, 60, "the job to end cancelled")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, workers.output()

    job.refresh_from_db()
    assert job.attempts == 1 and job.result is None
    assert job.cancel_requested_at is not None and job.completed_at is not None
    assert job.completed_at >= job.cancel_requested_at
    (entry,) = job.errors
    assert entry["exception"] == CANCELLED_PATH
    assert "its handler stopped" in entry["error"]
    output = workers.output()
    assert f"Cancel requested for job {job.pk}" in output
    assert f"Job cancelled id={job.pk}" in output


def test_a_cancelled_job_of_a_killed_worker_is_reaped_cancelled(workers: Workers) -> None:
    # tests.ignores_cancel never checks: its worker (grace 10 s) cannot end it
    # before it is killed; the reaper, in another worker, must not retry it.
    job = enqueue("tests.ignores_cancel", {"seconds": 120}, max_attempts=5).job
    first = workers.start("--concurrency", "1", "--lease-seconds", "1", "--poll-interval", "0.2")
    wait_for(lambda: Execution.objects.filter(job_id=job.pk).exists(), 60, "the job to start")
    assert cancel_over_rest(job).status_code == 202
    wait_for(
        lambda: f"Cancel requested for job {job.pk}" in workers.output(), 30, "the worker to hear"
    )
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    assert status(job) == JobStatus.RUNNING
    second = workers.start("--concurrency", "1", "--lease-seconds", "1", "--poll-interval", "0.2")
    wait_for(lambda: status(job) == JobStatus.CANCELLED, 60, "the reaper to end it cancelled")
    second.send_signal(signal.SIGTERM)
    assert second.wait(60) == 0, workers.output()

    job.refresh_from_db()
    assert job.attempts == 1  # not retried
    assert job.errors[-1]["exception"] == CANCELLED_PATH
    assert "stopped before the attempt ended" in job.last_error
    assert Execution.objects.filter(job_id=job.pk).count() == 1
