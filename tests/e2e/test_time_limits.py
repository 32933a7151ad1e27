"""Time limits with real ``runjobworker`` processes: Python spinners and a thread stuck in C."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker.loop import EXIT_RECYCLE
from tests.testapp.models import Execution

from .helpers import Workers, status, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TIMEOUT_PATH = "django_durable_jobs.exceptions.JobTimeout"


@pytest.fixture
def worker_env() -> dict[str, str]:
    return {"DJANGO_SETTINGS_MODULE": "tests.e2e.settings_time_limits"}


def test_a_python_spinner_back_within_the_grace_and_the_worker_keeps_serving(
    workers: Workers,
) -> None:
    # tests.spin declares timeout=1 and ignores ctx.cancelled; it spins for 2.5 s,
    # within the 3 s grace past its deadline.
    spinner = enqueue("tests.spin", {"spin": 2.5}, max_attempts=1, priority=10).job
    others = [enqueue("tests.record", {"i": i}).job for i in range(3)]
    proc = workers.start("--concurrency", "1", "--poll-interval", "0.2")
    wait_for(lambda: status(spinner) == JobStatus.DEAD, 60, "the spinner to fail at its limit")
    # The only slot's thread returned by itself and went back to serving jobs.
    wait_for(lambda: all(status(j) == JobStatus.COMPLETED for j in others), 60, "the next jobs")
    # Past the grace (deadline 1 s + grace 3 s after the start, and 3 s more
    # for a busy machine): the worker still claims and runs a job, so it did
    # not decide to recycle (a recycling worker claims nothing more).
    spun_from = Execution.objects.get(job_id=spinner.pk).at
    probe = enqueue("tests.record", run_at=spun_from + timedelta(seconds=7)).job
    wait_for(lambda: status(probe) == JobStatus.COMPLETED, 60, "a job run past the grace")
    assert proc.poll() is None, workers.output()  # no recycle
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, workers.output()

    spinner.refresh_from_db()
    (entry,) = spinner.errors
    assert entry["exception"] == TIMEOUT_PATH
    assert "time limit of 1 s" in entry["error"]
    assert "in spin" in entry["traceback"]
    assert spinner.result is None  # its late outcome was dropped
    spun_from = Execution.objects.get(job_id=spinner.pk).at
    # Not before its deadline (1 s from the attempt's start): an order, with room for the
    # two clocks (the row's time is Python's, taken after the start; the outcome's, the
    # database's): 0.9998 s was seen in CI.
    assert (spinner.completed_at - spun_from).total_seconds() > 0.5
    for job in others:
        (execution,) = Execution.objects.filter(job_id=job.pk)
        assert (execution.at - spun_from).total_seconds() >= 2.5  # the slot was held
    assert Execution.objects.filter(job_id=spinner.pk).count() == 1
    output = workers.output()
    assert "ran past its time limit" in output
    assert "Late outcome of job" in output
    # Failed at the deadline, not when the thread returned: the watchdog took the
    # job first, so the thread's outcome came late (dropped: no result above).
    assert output.index("ran past its time limit") < output.index("Late outcome of job")
    assert "Recycling worker" not in output


def test_a_python_spinner_that_never_returns_recycles_the_worker_after_its_other_jobs(
    workers: Workers,
) -> None:
    # Spins in pure Python for ever, ignoring ctx.cancelled: 1 s limit, 3 s grace.
    spinner = enqueue("tests.spin", max_attempts=1, priority=10).job
    # In flight on the other slots when the worker decides to recycle (about 4 s in).
    others = [enqueue("tests.record", {"sleep": 8, "i": i}).job for i in range(2)]
    proc = workers.start("--concurrency", "3", "--poll-interval", "0.2")
    try:
        code = proc.wait(90)
    except Exception:
        raise AssertionError(f"the worker did not recycle\n{workers.output()}") from None
    assert code == EXIT_RECYCLE, workers.output()
    # It waited for its other jobs: completed below, not released.

    spinner.refresh_from_db()
    assert spinner.status == JobStatus.DEAD  # failed at its deadline, its last attempt
    assert [e["exception"] for e in spinner.errors] == [TIMEOUT_PATH]
    assert "in spin" in spinner.errors[0]["traceback"]
    spun_from = Execution.objects.get(job_id=spinner.pk).at
    # Not before its deadline (1 s from the attempt's start): an order, with room for the
    # two clocks (the row's time is Python's, taken after the start; the outcome's, the
    # database's): 0.9998 s was seen in CI.
    assert (spinner.completed_at - spun_from).total_seconds() > 0.5
    # The other in-flight jobs finished normally before the exit: none released,
    # none lost, none run twice.
    for job in others:
        job.refresh_from_db()
        assert (job.status, job.attempts) == (JobStatus.COMPLETED, 1), workers.output()
        assert Execution.objects.filter(job_id=job.pk).count() == 1
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()
    output = workers.output()
    assert "has not returned 3.0s after its time limit" in output
    assert "Recycling worker" in output
    # Failed at its deadline, before the worker gave up on the thread (not at the recycle).
    failed_at = output.index("ran past its time limit")
    assert failed_at < output.index("has not returned 3.0s after its time limit")


def test_a_thread_stuck_in_c_recycles_the_worker_after_its_other_jobs(workers: Workers) -> None:
    # Blocks in time.sleep(120); 1 s limit, 3 s grace.
    stuck = enqueue("tests.sleep_in_c", {"sleep": 120}, timeout=1, max_attempts=1, priority=10).job
    # In flight on the other slots when the worker decides to recycle (about 4 s in).
    others = [enqueue("tests.record", {"sleep": 8, "i": i}).job for i in range(2)]
    proc = workers.start("--concurrency", "3", "--poll-interval", "0.2")
    try:
        # Within 90 s: it did not wait for the 120 s sleep.
        code = proc.wait(90)
    except Exception:
        raise AssertionError(f"the worker did not recycle\n{workers.output()}") from None
    assert code == EXIT_RECYCLE, workers.output()

    stuck.refresh_from_db()
    assert stuck.status == JobStatus.DEAD  # failed at its deadline, its last attempt
    assert [e["exception"] for e in stuck.errors] == [TIMEOUT_PATH]
    assert "sleep_in_c" in stuck.errors[0]["traceback"]
    # The other in-flight jobs finished normally before the exit: none released,
    # none lost, none run twice.
    for job in others:
        job.refresh_from_db()
        assert (job.status, job.attempts) == (JobStatus.COMPLETED, 1), workers.output()
        assert Execution.objects.filter(job_id=job.pk).count() == 1
    assert Execution.objects.filter(job_id=stuck.pk).count() == 1
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()
    output = workers.output()
    assert "has not returned 3.0s after its time limit" in output
    assert "Recycling worker" in output
