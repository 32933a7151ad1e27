"""``wait()`` and ``?wait=`` against a real ``runjobworker`` process that idle-polls every 5 s.

The waiters' own poll and the Python waits' deadline are an hour away: a
return at all is the NOTIFY's doing (the outcome's commit), not a poll's.
How soon it comes is measured in benchmarks/waiting.py, never asserted here.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from django.test import Client, override_settings

from django_durable_jobs import enqueue, wait
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.waiting import listener as listening
from tests.factories import PASSWORD, WAIT_SECONDS, make_user, wait_until
from tests.testapp.models import Execution

from .helpers import Workers

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

#: Beyond any wait of these tests: no poll or deadline this far off explains a return.
NEVER = 3600.0


@pytest.fixture
def worker(workers: Workers) -> Iterator[Workers]:
    proc = workers.start("--poll-interval", "5")
    # Up once it ran a first job; idle after it, far from its next poll.
    enqueue("tests.record")
    wait_until(Execution.objects.exists, 60, "the worker to start")
    yield workers
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0


def wait_on_a_thread(job: Job) -> Job:
    """``wait(job)`` with a deadline an hour away, given ``WAIT_SECONDS`` to return."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["job"] = wait(job, timeout=NEVER)
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            connections.close_all()

    # A daemon: a waiter never woken must not keep the test run alive for an hour.
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT_SECONDS)
    assert not thread.is_alive(), "wait() did not return: the job's end never reached it"
    assert "error" not in outcome, outcome.get("error")
    finished: Job = outcome["job"]
    return finished


@override_settings(DURABLE_JOBS={"WAIT_POLL_INTERVAL_SECONDS": NEVER})
def test_wait_is_woken_by_the_job_s_completion(worker: Workers) -> None:
    for _ in range(3):
        # The job sleeps, so the waiter's first look finds it unfinished.
        job = enqueue("tests.record", {"sleep": 0.5}).job
        finished = wait_on_a_thread(job)
        assert finished.status == JobStatus.COMPLETED
        assert finished.completed_at is not None


@override_settings(DURABLE_JOBS={"WAIT_POLL_INTERVAL_SECONDS": NEVER})
def test_the_rest_long_poll_answers_with_the_completed_job(
    worker: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    # How each nap of the request's waiter ended: woken (True) or at its end (False).
    naps: list[bool] = []
    sleep = listening.ThreadWaiter.sleep

    def nap(self: listening.ThreadWaiter, seconds: float) -> bool:
        naps.append(sleep(self, seconds))
        return naps[-1]

    monkeypatch.setattr(listening.ThreadWaiter, "sleep", nap)
    make_user("reader", "view_job")
    client = Client()
    client.login(username="reader", password=PASSWORD)
    job = enqueue("tests.record", {"sleep": 0.5}).job
    response = client.get(f"/api/jobs/{job.pk}?wait=20")
    assert response.status_code == 200
    assert response.json()["status"] == JobStatus.COMPLETED
    # Woken (or found finished at the first look), never answered at the 20 s deadline.
    assert all(naps), naps
