"""Pausing a queue served by a real ``runjobworker`` process, with ``manage.py jobs pause``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus
from tests.factories import wait_until

from .helpers import MANAGE, ROOT, test_database_url

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A worker of every queue that polls every 30 s: only notifications reach it sooner."""
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "DJANGO_SETTINGS_MODULE": "tests.e2e_settings",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "example_project")]),
        "E2E_LOG_LEVEL": "INFO",
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(MANAGE), "runjobworker", "--poll-interval", "30"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def status(job: Job) -> str:
    return Job.objects.get(pk=job.pk).status


def test_a_worker_process_holds_a_paused_queue_until_resumed_or_the_pause_ends(
    worker: tuple[subprocess.Popen[bytes], Path],
    manage: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    proc, log = worker
    first = enqueue("tests.record", {}, queue="emails").job
    wait_until(lambda: status(first) == JobStatus.COMPLETED, what="the worker to start")

    paused = manage("jobs", "pause", "emails")
    assert paused.returncode == 0, paused.stderr
    wait_until(lambda: "Queue paused queue=emails" in log.read_text(), 5, "the worker's log")
    held = enqueue("tests.record", {}, queue="emails").job
    other = enqueue("tests.record", {}, queue="default").job
    wait_until(lambda: status(other) == JobStatus.COMPLETED, 10, "the other queue's job")
    assert status(held) == JobStatus.PENDING

    resumed = manage("jobs", "resume", "emails")
    assert resumed.returncode == 0, resumed.stderr
    wait_until(lambda: status(held) == JobStatus.COMPLETED, 10, "the job after resume")

    brief = manage("jobs", "pause", "emails", "--for", "2s")
    assert brief.returncode == 0, brief.stderr
    wait_until(lambda: log.read_text().count("Queue paused queue=emails") == 2, 5, "the log")
    later = enqueue("tests.record", {}, queue="emails").job
    wait_until(lambda: status(later) == JobStatus.COMPLETED, 15, "the pause to lift by itself")

    bad = manage("jobs", "pause", "emails", "--for", "2s", "--until", "2999-01-01T00:00Z")
    assert bad.returncode == 1 and "not both" in bad.stderr

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, log.read_text()
