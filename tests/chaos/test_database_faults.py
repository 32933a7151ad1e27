"""Scenario 2: the database restarted mid-run, then its backends terminated twice a second.

On the suite's own cluster (never a shared server). Four workers drain the
flow (3,000 jobs; 10,000 in the long mode) while:

1. at a fifth of it, PostgreSQL restarts (``pg_ctl restart -m fast``: every
   session is disconnected, the server is down for a moment);
2. at two fifths, it restarts as after a crash (``-m immediate``: no
   shutdown checkpoint; crash recovery at start);
3. then, for 10 s (30 s in the long mode), twice a second, every backend of
   the workers' role in the scenario's database is terminated
   (``pg_terminate_backend``): claims, completions, heartbeats, LISTEN and
   the handlers' own queries. A second batch of jobs is enqueued when the
   storm begins, so that it hits a busy fleet.

Every worker stays up through all of it, every job completes, and reruns
are only of attempts that failed (a handler whose query was cut, a lease
that expired), at most as many as were running at the faults.
"""

from __future__ import annotations

import time

import pytest
from django.db import connections

from .fleet import Fleet
from .scenario import Database, Mode
from .tally import check, count, finished
from .workload import drain, enqueue_flow, rng, stop_cleanly

pytestmark = [pytest.mark.chaos]

ARGS = ("--concurrency", "4", "--lease-seconds", "10", "--poll-interval", "0.5")
RUNNING = "SELECT count(*) FROM durable_jobs_job WHERE status = 'running'"
#: One statement, one snapshot: the jobs running as the workers' backends are terminated.
TERMINATE = """
WITH running AS (SELECT count(*) AS n FROM durable_jobs_job WHERE status = 'running'),
killed AS (
    SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n
    FROM pg_stat_activity
    WHERE usename = 'chaos' AND datname = current_database() AND pid <> pg_backend_pid()
)
SELECT running.n, killed.n FROM running, killed
"""


def test_restarts_and_terminate_storms_lose_nothing(
    database: Database, fleet: Fleet, mode: Mode
) -> None:
    random, seed = rng()
    cluster = database.cluster
    first = mode.pick(short=1_500, long=10_000)
    second = mode.pick(short=800, long=6_000)
    storm_seconds = mode.pick(short=10, long=30)
    jobs = enqueue_flow(database.alias, first, sleep=(0.02, 0.06), random_=random)
    started = time.monotonic()
    for _ in range(4):
        fleet.start(*ARGS)
    in_flight = 0
    downtime: list[float] = []

    def running() -> int:
        with cluster.admin(database.name) as conn:
            return int(conn.execute(RUNNING).fetchone()[0])  # type: ignore[index]

    def restart(how: str) -> None:
        nonlocal in_flight
        in_flight += running()
        downtime.append(cluster.restart(how))
        in_flight += running()
        connections[database.alias].close()  # this process's connection died with it

    def until_finished(share: float) -> None:
        drain_to = share * len(jobs)
        deadline = time.monotonic() + 120
        while finished(database.alias) < drain_to:
            assert time.monotonic() < deadline, f"no progress to {share:.0%}\n{fleet.tails()}"
            time.sleep(0.1)

    until_finished(0.2)
    restart("fast")
    until_finished(0.4)
    restart("immediate")
    jobs += enqueue_flow(database.alias, second, sleep=(0.02, 0.06), random_=random)
    ticks = terminated = 0
    with cluster.admin(database.name) as conn:
        storm_ends = time.monotonic() + storm_seconds
        while time.monotonic() < storm_ends:
            were_running, killed = conn.execute(TERMINATE).fetchone()  # type: ignore[misc]
            in_flight += were_running
            terminated += killed
            ticks += 1
            time.sleep(0.5)
    dead = [worker.id for worker in fleet.workers if not worker.alive]
    assert not dead, f"workers died of the faults: {dead}\n{fleet.tails()}"
    drain(fleet, mode.pick(short=180, long=900))
    stop_cleanly(fleet)
    output = fleet.output()
    tally = count(
        database.alias, "database-faults", mode.name, started,
        jobs=jobs, in_flight=in_flight, restarts=len(downtime),
        down=f"{max(downtime):.1f}s", storm_ticks=ticks, terminated=terminated, seed=seed,
    )  # fmt: skip
    assert terminated >= ticks, tally.line()  # every tick found backends to cut
    assert "Claim failed" in output, output
    check(tally, fleet.tails)
