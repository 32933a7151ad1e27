"""Scenario 4: poison jobs that SIGKILL their own worker on every attempt.

Three workers drain the flow; among its jobs are two ``tests.crash`` jobs
(five in the long mode; ``max_attempts=3``), whose handler kills its process. A supervisor, as
systemd or Kubernetes would, starts a new worker for each one that dies.
Each poison job ends ``dead`` after three attempts (each one reaped when
the dead worker's lease expired; an attempt can also be lost unrun, claimed
by a worker that the other poison job killed); the other jobs all
complete, and only those the crashes found in flight run twice.
"""

from __future__ import annotations

import time

import pytest

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus
from tests.testapp.models import Execution

from .fleet import Fleet
from .scenario import Database, Mode
from .tally import check, count
from .workload import drain, enqueue_flow, rng, stop_cleanly

pytestmark = [pytest.mark.chaos]

ARGS = ("--concurrency", "4", "--lease-seconds", "4", "--poll-interval", "0.5")
POISON_ATTEMPTS = 3


def test_poison_jobs_end_dead_and_the_rest_flows(
    database: Database, fleet: Fleet, mode: Mode
) -> None:
    random, seed = rng()
    total = mode.pick(short=800, long=6_000)
    jobs = enqueue_flow(database.alias, total // 2, random_=random)
    poison = [
        enqueue("tests.crash", max_attempts=POISON_ATTEMPTS, using=database.alias).job.pk
        for _ in range(mode.pick(short=2, long=5))
    ]
    jobs += poison + enqueue_flow(database.alias, total - total // 2, random_=random)
    started = time.monotonic()
    for _ in range(3):
        fleet.start(*ARGS)

    def supervise() -> None:
        for worker in fleet.crashed():
            fleet.died(worker)
            fleet.replace(worker)

    drain(fleet, mode.pick(short=180, long=600), during=supervise, interval=0.1)
    stop_cleanly(fleet)
    tally = count(
        database.alias, "poison-job", mode.name, started,
        jobs=jobs, in_flight=fleet.in_flight, expected=dict.fromkeys(poison, JobStatus.DEAD),
        crashes=fleet.kills, seed=seed,
    )  # fmt: skip
    poison_runs: list[int] = []
    for pk in poison:
        job = Job.objects.using(database.alias).get(pk=pk)
        assert (job.status, job.attempts) == (JobStatus.DEAD, POISON_ATTEMPTS), tally.line()
        assert job.last_error.startswith("Abandoned"), job.last_error
        # An attempt may be lost unrun: claimed (started, or still in the claim-ahead
        # buffer) by a worker that another poison job killed. With five of them, a
        # long run saw one lose all three attempts so, without ever running.
        runs = Execution.objects.using(database.alias).filter(job_id=pk).count()
        assert 0 <= runs <= POISON_ATTEMPTS, (pk, runs)
        poison_runs.append(runs)
    # Every crash was a poison job's run; runs of two of them may share one, not of one.
    assert 1 <= max(poison_runs) <= fleet.kills <= sum(poison_runs), tally.line()
    check(tally, fleet.tails)
