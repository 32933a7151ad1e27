"""Slots per queue and the elastic pool in real ``runjobworker`` processes."""

from __future__ import annotations

import signal

import pytest
from django.db.models import Count

from django_durable_jobs import enqueue_many
from django_durable_jobs.models import Job, JobStatus
from tests.factories import WAIT_SECONDS
from tests.ports import free_port
from tests.testapp.models import Execution

from .helpers import Workers, get, sample, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def backlog(queue: str, count: int, sleep: float) -> None:
    enqueue_many(
        [{"type": "tests.concurrent", "queue": queue, "payload": {"sleep": sleep}}] * count
    )


def assert_every_job_ran_exactly_once(count: int) -> None:
    assert Job.objects.filter(status=JobStatus.COMPLETED, attempts=1).count() == count
    runs = Execution.objects.values("job_id").annotate(n=Count("id"))
    assert sorted(r["n"] for r in runs) == [1] * count


def peak(queue: str) -> int:
    return max(job.result["concurrent"] for job in Job.objects.filter(queue=queue))


def test_a_worker_with_slots_per_queue(workers: Workers) -> None:
    backlog("emails", 12, 0.2)
    backlog("default", 15, 0.2)
    backlog("reports", 2, 0.0)  # not served
    proc = workers.start("--burst", "--queues", "emails:2,default:3", "--poll-interval", "0.1")
    assert proc.wait(120) == 0, workers.output()
    assert Job.objects.filter(queue="reports", status=JobStatus.PENDING).count() == 2
    Job.objects.filter(queue="reports").delete()
    assert_every_job_ran_exactly_once(27)
    assert peak("emails") == 2
    assert peak("default") == 3


def test_an_elastic_worker_grows_shrinks_and_stops_cleanly(workers: Workers) -> None:
    port = free_port()
    proc = workers.start(
        "--concurrency", "1-4", "--scale-down-after", "1", "--poll-interval", "0.2",
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
    )  # fmt: skip
    wait_for(lambda: get(port, "/healthz")[0] == 200, 30, "/healthz to answer 200")
    assert sample(port, "durable_jobs_worker_slots") == 1
    backlog("default", 30, 0.3)
    wait_for(lambda: sample(port, "durable_jobs_worker_slots") == 4, 30, "the pool to grow to 4")
    wait_for(lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == 30, 60, "every job")
    wait_for(
        lambda: sample(port, "durable_jobs_worker_slots") == 1, WAIT_SECONDS, "the pool to shrink"
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, workers.output()
    assert_every_job_ran_exactly_once(30)
    assert peak("default") <= 4
