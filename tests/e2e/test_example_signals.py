"""The example project's receiver of ``job_finished`` (example/receivers.py), in a real worker."""

from __future__ import annotations

import signal

import pytest
from example.models import JobOutcome

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus

from .helpers import Workers, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker_env() -> dict[str, str]:
    return {"EXAMPLE_RECORD_OUTCOMES": "1"}


def test_the_receiver_sees_each_outcome_once(workers: Workers) -> None:
    expected = {}
    for n in range(2):
        expected[enqueue("example.echo", {"n": n}).job.pk] = ["completed"]
        flaky = enqueue("example.flaky", {"succeed_on_attempt": 2, "n": n}).job
        expected[flaky.pk] = ["retry", "completed"]
        failing = enqueue("example.fail", {"n": n}, max_attempts=2).job
        expected[failing.pk] = ["retry", "dead"]
    proc = workers.start("--concurrency", "2")

    finished = (JobStatus.COMPLETED, JobStatus.DEAD)
    wait_for(
        lambda: Job.objects.filter(status__in=finished).count() == len(expected),
        60,
        "every job completed or dead",
    )
    # The receiver runs after each outcome commits: wait for the last rows too.
    total = sum(len(outcomes) for outcomes in expected.values())
    wait_for(lambda: JobOutcome.objects.count() >= total, 30, f"{total} recorded outcomes")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, workers.output()

    seen: dict[object, list[str]] = {pk: [] for pk in expected}
    for job_id, outcome in JobOutcome.objects.order_by("id").values_list("job_id", "outcome"):
        seen[job_id].append(outcome)
    assert seen == expected
    assert set(JobOutcome.objects.values_list("type", flat=True)) == {
        "example.echo",
        "example.flaky",
        "example.fail",
    }
