"""Pausing a queue served by a real ``runjobworker`` process, with ``manage.py jobs pause``."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable

import pytest

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus, QueueState
from tests.factories import wait_until

from .helpers import Workers

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


#: The next poll of the worker below: beyond any wait of these tests, so only
#: notifications (and a pause's own end) reach it. How soon: benchmarks/reaction.py.
NEVER = "3600"
#: Generous: a worker process on a busy machine; only fails when the event never comes.
WAIT = 60


@pytest.fixture
def worker_env() -> dict[str, str]:
    return {"E2E_LOG_LEVEL": "INFO"}  # the "Queue paused" lines


def status(job: Job) -> str:
    return Job.objects.get(pk=job.pk).status


def test_a_worker_process_holds_a_paused_queue_until_resumed_or_the_pause_ends(
    workers: Workers,
    manage: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    proc = workers.start("--poll-interval", NEVER)
    first = enqueue("tests.record", {}, queue="emails").job
    wait_until(lambda: status(first) == JobStatus.COMPLETED, WAIT, "the worker to start")

    paused = manage("jobs", "pause", "emails")
    assert paused.returncode == 0, paused.stderr
    wait_until(lambda: "Queue paused queue=emails" in workers.output(), WAIT, "the worker's log")
    held = enqueue("tests.record", {}, queue="emails").job
    other = enqueue("tests.record", {}, queue="default").job
    wait_until(lambda: status(other) == JobStatus.COMPLETED, WAIT, "the other queue's job")
    assert status(held) == JobStatus.PENDING

    resumed = manage("jobs", "resume", "emails")
    assert resumed.returncode == 0, resumed.stderr
    wait_until(lambda: status(held) == JobStatus.COMPLETED, WAIT, "the job after resume")

    brief = manage("jobs", "pause", "emails", "--for", "2s")
    assert brief.returncode == 0, brief.stderr
    wait_until(lambda: workers.output().count("Queue paused queue=emails") == 2, WAIT, "the log")
    later = enqueue("tests.record", {}, queue="emails").job
    wait_until(lambda: status(later) == JobStatus.COMPLETED, WAIT, "the pause to lift by itself")
    later.refresh_from_db()
    state = QueueState.objects.get(name="emails")
    assert state.paused_until is not None and later.started_at >= state.paused_until

    bad = manage("jobs", "pause", "emails", "--for", "2s", "--until", "2999-01-01T00:00Z")
    assert bad.returncode == 1 and "not both" in bad.stderr

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(WAIT) == 0, workers.output()
