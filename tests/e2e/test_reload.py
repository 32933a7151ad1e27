"""``runjobworker --reload`` and a job type the worker does not know, as real processes.

The handlers that change live in an app the test writes into a temporary
directory (``settings_reload.py`` installs it when ``E2E_EXTRA_APP`` says so).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus, WorkerProcess
from tests.factories import WAIT_SECONDS
from tests.testapp.models import Execution

from .helpers import Workers, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

APP = "reloadprobe"
TYPE = f"{APP}.version"


def write_handler(code: Path, version: int) -> None:
    """The app's jobs module: ``TYPE`` returns ``{"version": version}``, padded so that
    each version differs in size too (a .pyc is checked by the source's mtime and size)."""
    package = code / APP
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(
        "from django_durable_jobs import job\n\n\n"
        f"@job({TYPE!r})\n"
        "def version(ctx):\n"
        f"    return {{'version': {version}}}{' ' * version}\n"
    )


@pytest.fixture
def code(tmp_path: Path, workers: Workers) -> Path:
    """A directory on the workers' path holding the app (version 1); settings that can
    install it (``E2E_EXTRA_APP``, set per worker below)."""
    directory = tmp_path / "code"
    directory.mkdir()
    write_handler(directory, 1)
    workers.env["PYTHONPATH"] = os.pathsep.join([str(directory), workers.env["PYTHONPATH"]])
    workers.env["DJANGO_SETTINGS_MODULE"] = "tests.e2e.settings_reload"
    workers.env["PYTHONDONTWRITEBYTECODE"] = "1"
    return directory


@pytest.fixture
def stop_gracefully(workers: Workers) -> Iterator[None]:
    """At the end, SIGTERM first: a --reload parent killed outright leaves its child."""
    yield
    for proc in workers.procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)


def result(job: Job) -> object:
    return Job.objects.values_list("result", flat=True).get(pk=job.pk)


@pytest.mark.usefixtures("stop_gracefully")
def test_an_edited_handler_runs_after_the_reload_and_no_job_is_lost_or_run_twice(
    workers: Workers, code: Path
) -> None:
    workers.env["E2E_EXTRA_APP"] = APP
    proc = workers.start("--reload", "--grace-period", "30", "--poll-interval", "0.2")
    before = enqueue(TYPE).job
    wait_for(lambda: result(before) == {"version": 1}, WAIT_SECONDS, "the old code's result")
    # A job in flight across the reload: it gets its grace period, runs once.
    running = enqueue("tests.record", {"sleep": 1.5}).job
    wait_for(
        lambda: Execution.objects.filter(job_id=running.pk).exists(), WAIT_SECONDS, "it to start"
    )
    write_handler(code, 2)

    # Written again until the reloader has seen a change: its first look at
    # the files may come after the first write.
    def reloading() -> bool:
        assert proc.poll() is None, workers.output()
        if "changed: reloading" in workers.output():
            return True
        os.utime(code / APP / "jobs.py")
        return False

    wait_for(reloading, WAIT_SECONDS, "the reloader to see the change")
    after = enqueue(TYPE).job
    wait_for(lambda: result(after) is not None, WAIT_SECONDS, "the new job's result")
    assert result(after) == {"version": 2}, workers.output()
    for job in (before, running, after):
        job.refresh_from_db()
        assert (job.status, job.attempts) == (JobStatus.COMPLETED, 1), workers.output()
    assert Execution.objects.filter(job_id=running.pk).count() == 1
    output = workers.output()
    assert output.index("changed: reloading") < output.index("Starting the worker again")
    # Ctrl-C (to the parent, which passes it on) still stops gracefully.
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0, workers.output()
    assert not WorkerProcess.objects.exists(), workers.output()
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()


@pytest.mark.usefixtures("stop_gracefully")
def test_a_type_an_old_worker_does_not_know_completes_once_a_worker_that_knows_it_starts(
    workers: Workers, code: Path
) -> None:
    old = workers.start("--poll-interval", "0.2")  # without the app: no handler for TYPE
    job = enqueue(TYPE).job
    wait_for(
        lambda: f"No handler for job type {TYPE}" in workers.output(),
        WAIT_SECONDS,
        "the old worker to give the job back",
    )
    # The line comes as the outcome is handed to the writer: wait for the write.
    wait_for(
        lambda: Job.objects.filter(pk=job.pk, status=JobStatus.PENDING).exists(),
        WAIT_SECONDS,
        "the release to be written",
    )
    job.refresh_from_db()
    assert (job.status, job.attempts, job.errors) == (JobStatus.PENDING, 0, [])
    workers.env["E2E_EXTRA_APP"] = APP
    new = workers.start("--poll-interval", "0.2")
    # A rolling deploy: the new worker up, then the old one stopped. While both run,
    # either may claim the job each time it is available again (the old one gives it
    # back again, uncounted); after the stop only the new one can.
    wait_for(lambda: workers.output().count("Worker starting") >= 2, WAIT_SECONDS, "the new worker")
    old.send_signal(signal.SIGTERM)
    assert old.wait(30) == 0, workers.output()
    wait_for(lambda: result(job) is not None, WAIT_SECONDS, "the new worker to run it")
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result) == (JobStatus.COMPLETED, 1, {"version": 1})
    new.send_signal(signal.SIGTERM)
    assert new.wait(30) == 0, workers.output()
