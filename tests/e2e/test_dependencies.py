"""Chains drained by real ``runjobworker`` processes."""

from __future__ import annotations

import collections
import itertools
import signal
import uuid

import pytest
from django.db.models import Min

from django_durable_jobs import chain
from django_durable_jobs.models import Job, JobStatus, WorkerProcess
from tests.testapp.models import Execution

from .helpers import Workers, size, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

#: 1,000 with E2E=long (tests/e2e/helpers.py, ``size``).
CHAINS = size(250, 1_000)
LENGTH = 5


def test_chains_of_5_on_four_workers_run_once_in_order(workers: Workers) -> None:
    procs = [workers.start("--concurrency", "4", "--poll-interval", "1") for _ in range(4)]
    # Every worker up (registered, its signal handlers installed) before the
    # chains exist: on a loaded machine, three workers started first could
    # run every chain before the fourth is up, and the SIGTERM below would
    # kill a worker still starting (exit -15).
    wait_for(lambda: WorkerProcess.objects.count() >= 4, 60, "every worker to register")
    chains = [
        [result.job.pk for result in chain(*({"type": "tests.record"} for _ in range(LENGTH)))]
        for _ in range(CHAINS)
    ]
    total = CHAINS * LENGTH
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


def test_chains_survive_sigkilled_workers_in_order_with_nothing_left_waiting(
    workers: Workers,
) -> None:
    # A parent's outcome and its children's release are one transaction: a
    # worker killed at any moment leaves each parent either running (its
    # lease expires, it runs again) or ended with its children released.
    spec = {"type": "tests.record", "payload": {"sleep": 0.05}}
    chains = [[r.job.pk for r in chain(spec, spec, spec, spec)] for _ in range(40)]
    total = 40 * 4
    args = ("--concurrency", "4", "--lease-seconds", "1.5", "--poll-interval", "0.2")
    in_flight: collections.Counter[uuid.UUID] = collections.Counter()
    for kill in range(4):
        victim = workers.start(*args)
        wait_for(
            lambda n=kill: Execution.objects.count() >= (n + 1) * 20, 60, f"executions ({kill})"
        )
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        # In flight at the kill: the jobs it held (running, or run and their
        # outcome not yet written): each may run once more.
        in_flight.update(Job.objects.filter(status=JobStatus.RUNNING).values_list("pk", flat=True))
    rescuer = workers.start(*args)
    wait_for(
        lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == total,
        120,
        "every job to complete after the kills",
    )
    rescuer.send_signal(signal.SIGTERM)
    assert rescuer.wait(60) == 0, workers.output()
    assert not Job.objects.exclude(status=JobStatus.COMPLETED).exists()
    times = {
        row["pk"]: (row["started_at"], row["completed_at"])
        for row in Job.objects.values("pk", "started_at", "completed_at")
    }
    ran_first = {
        row["job_id"]: row["first"]
        for row in Execution.objects.values("job_id").annotate(first=Min("at"))
    }
    for jobs in chains:
        for before, after in itertools.pairwise(jobs):
            # Each run of a child (the first included) began after its parent completed.
            assert ran_first[after] >= times[before][1], (before, after)
    # A job ran again only because a kill took it while in flight, once per kill.
    runs = collections.Counter(Execution.objects.values_list("job_id", flat=True))
    again = {job: n - 1 for job, n in runs.items() if n > 1}
    assert all(extra <= in_flight[job] for job, extra in again.items()), (again, in_flight)
