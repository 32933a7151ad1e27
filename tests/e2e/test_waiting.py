"""``wait()`` and ``?wait=`` against a real ``runjobworker`` process that idle-polls every 5 s.

The waiters' own poll is set to 60 s: a return within 2 s of the job's
completion is the NOTIFY's doing (the outcome's commit), not a poll's.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path

import pytest
from django.test import Client, override_settings

from django_durable_jobs import enqueue, wait
from django_durable_jobs.models import JobStatus
from tests.factories import PASSWORD, make_user, wait_until
from tests.testapp.models import Execution

from .test_worker_processes import Workers

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Workers]:
    running = Workers(tmp_path)
    try:
        proc = running.start("--poll-interval", "5")
        # Up once it ran a first job; idle after it, far from its next poll.
        enqueue("tests.record")
        wait_until(Execution.objects.exists, 30, "the worker to start")
        yield running
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        running.close()


@override_settings(DURABLE_JOBS={"WAIT_POLL_INTERVAL_SECONDS": 60.0})
def test_wait_returns_within_2s_of_the_job_s_completion(worker: Workers) -> None:
    for _ in range(3):
        # The job sleeps, so the waiter's first look finds it unfinished.
        job = enqueue("tests.record", {"sleep": 0.5}).job
        finished = wait(job, timeout=20)
        returned = datetime.now(dt_timezone.utc)
        assert finished.status == JobStatus.COMPLETED
        assert finished.completed_at is not None
        assert returned - finished.completed_at < timedelta(seconds=2)


@override_settings(DURABLE_JOBS={"WAIT_POLL_INTERVAL_SECONDS": 60.0})
def test_the_rest_long_poll_answers_with_the_completed_job(worker: Workers) -> None:
    make_user("reader", "view_job")
    client = Client()
    client.login(username="reader", password=PASSWORD)
    job = enqueue("tests.record", {"sleep": 0.5}).job
    started = time.monotonic()
    response = client.get(f"/api/jobs/{job.pk}?wait=20")
    assert response.status_code == 200
    assert response.json()["status"] == JobStatus.COMPLETED
    assert time.monotonic() - started < 10  # not the 20 s deadline
