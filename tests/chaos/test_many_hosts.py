"""Several hosts against one PostgreSQL; one host dies, the others reap its jobs.

Three "hosts" of two workers each. Where ``unshare`` works (root), each host
is a UTS namespace with a host name of its own (``host-a``...; the workers
table records it) and a network namespace with nothing but a loopback of
its own, from which the workers reach PostgreSQL through the cluster's Unix
socket: no host shares another's network. Elsewhere, the hosts are told
apart by their workers' ids only.

At a third of the flow, every worker of ``host-b`` is SIGKILLed at once, as
when a machine is lost. The workers of the other hosts reap what it held
(its leases expire) and run it; nothing is lost, and only what host-b had
in flight runs twice.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from django_durable_jobs.models import Job, WorkerProcess
from tests.testapp.models import Execution

from .fleet import Fleet, Worker, namespaces_available, wait_until
from .scenario import Database, Mode, process_env
from .tally import check, count, finished
from .workload import drain, enqueue_flow, rng, stop_cleanly

pytestmark = [pytest.mark.chaos]

HOSTS = ("host-a", "host-b", "host-c")
ARGS = ("--concurrency", "4", "--lease-seconds", "4", "--poll-interval", "0.5")
LEASE_EXPIRED_PATH = "django_durable_jobs.LeaseExpired"


def start(fleet: Fleet, host: str, isolated: bool) -> Worker:
    """A worker of ``host``: in its namespaces, or (without them) named after it only."""
    if isolated:
        return fleet.start(*ARGS, host=host, network=True)
    return fleet.start(*ARGS, prefix=host)


def test_the_other_hosts_reap_a_dead_host_s_jobs(
    database: Database, mode: Mode, tmp_path: Path
) -> None:
    random, seed = rng()
    alias = database.alias
    isolated = namespaces_available()
    # In network namespaces of their own, the hosts reach the server by its socket only.
    fleet = Fleet(alias, process_env(database.socket_url if isolated else database.url), tmp_path)
    try:
        total = mode.pick(short=800, long=6_000)
        jobs = enqueue_flow(alias, total, sleep=(0.01, 0.05), random_=random)
        started = time.monotonic()
        hosts = {host: [start(fleet, host, isolated) for _ in range(2)] for host in HOSTS}
        fleet.wait_up(*(worker for workers in hosts.values() for worker in workers))
        seen = dict(WorkerProcess.objects.using(alias).values_list("id", "host"))
        if isolated:
            assert {seen[w.id] for w in hosts["host-b"]} == {"host-b"}, seen
            assert set(seen.values()) == set(HOSTS), seen
        # A third done, and host-b holding jobs: once in CI (five lanes on two
        # cores) host-b held none when a third was done, and died having tested
        # nothing. A worker writes its heartbeat row (wait_up) before its first
        # claim, so a slow start can leave it without jobs at that moment.
        wait_until(
            lambda: (
                finished(alias) >= total / 3
                and any(fleet.held_by(worker) for worker in hosts["host-b"])
            ),
            120,
            "a third of the flow, with host-b holding jobs",
            fleet.tails,
        )
        lost_host = fleet.kill(*hosts["host-b"])
        drain(fleet, mode.pick(short=180, long=600))
        stop_cleanly(fleet)
    finally:
        fleet.close()

    assert lost_host, "host-b held no job when it died"
    rescued = Job.objects.using(alias).filter(pk__in=lost_host)
    for job in rescued:
        entry = job.errors[-1]
        assert entry["exception"] == LEASE_EXPIRED_PATH, job.errors
        assert entry["worker"].startswith("host-b-"), job.errors
        last = Execution.objects.using(alias).filter(job_id=job.pk).latest("at")
        assert not last.worker.startswith("host-b-"), (job.pk, last.worker)
    tally = count(
        alias, "many-hosts", mode.name, started, jobs=jobs, in_flight=fleet.in_flight,
        hosts=len(HOSTS), namespaces="uts+net" if isolated else "none",
        lost_with_host_b=len(lost_host), seed=seed,
    )  # fmt: skip
    check(tally, fleet.tails)
