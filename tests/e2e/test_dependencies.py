"""Chains drained by real ``runjobworker`` processes."""

from __future__ import annotations

import itertools
import signal

import pytest

from django_durable_jobs import chain
from django_durable_jobs.models import Job, JobStatus
from tests.testapp.models import Execution

from .test_worker_processes import Workers, wait_for, workers  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CHAINS = 1_000
LENGTH = 5


def test_1000_chains_of_5_on_four_workers_run_once_in_order(workers: Workers) -> None:  # noqa: F811
    chains = [
        [result.job.pk for result in chain(*({"type": "tests.record"} for _ in range(LENGTH)))]
        for _ in range(CHAINS)
    ]
    total = CHAINS * LENGTH
    procs = [workers.start("--concurrency", "4", "--poll-interval", "1") for _ in range(4)]
    wait_for(
        lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == total,
        300,
        "every job of every chain to complete",
    )
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(60) == 0, workers.output()
    assert Execution.objects.count() == total
    assert Execution.objects.values("job_id").distinct().count() == total
    assert Job.objects.filter(attempts=1).count() == total
    assert Execution.objects.values("worker").distinct().count() == 4
    times = {
        row["pk"]: (row["started_at"], row["completed_at"])
        for row in Job.objects.values("pk", "started_at", "completed_at")
    }
    for jobs in chains:
        for before, after in itertools.pairwise(jobs):
            assert times[after][0] >= times[before][1], (before, after)
