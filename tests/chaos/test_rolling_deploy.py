"""Scenario 3: a rolling deploy under load: each worker SIGTERMed and replaced, one after another.

Four workers serve a flow kept busy for the whole deploy (more jobs are
enqueued whenever fewer than 600 are left). Each round replaces every
worker in turn, as a deploy does: start the new one, wait until it is up,
SIGTERM the old one, wait for it to exit. The grace period outlasts every
job, so a stop interrupts nothing: no job may run twice, and every stop
exits 0 without releasing a started job.
"""

from __future__ import annotations

import time

import pytest

from .fleet import Fleet
from .scenario import Database, Mode
from .tally import check, count, unfinished
from .workload import drain, enqueue_flow, rng, stop_cleanly

pytestmark = [pytest.mark.chaos]

ARGS = ("--concurrency", "4", "--lease-seconds", "10", "--grace-period", "30",
        "--poll-interval", "0.5")  # fmt: skip
#: The flow never runs dry while workers are replaced.
LOW_WATER, REFILL = 600, 600


def test_a_rolling_restart_runs_no_job_twice(database: Database, fleet: Fleet, mode: Mode) -> None:
    random, seed = rng()
    rounds = mode.pick(short=1, long=5)
    sleep = (0.02, 0.2)
    jobs = enqueue_flow(database.alias, 2 * REFILL, sleep=sleep, random_=random)
    started = time.monotonic()
    current = [fleet.start(*ARGS) for _ in range(4)]
    fleet.wait_up(*current)
    restarts = 0
    for _ in range(rounds):
        for slot, old in enumerate(current):
            if unfinished(database.alias) < LOW_WATER:
                jobs += enqueue_flow(database.alias, REFILL, sleep=sleep, random_=random)
            new = fleet.start(*ARGS)
            fleet.wait_up(new)
            code = fleet.stop(old)
            assert code == 0, f"{old.id} exited {code}\n{fleet.tails()}"
            current[slot] = new
            restarts += 1
    drain(fleet, mode.pick(short=120, long=300))
    stop_cleanly(fleet)
    output = fleet.output()
    tally = count(
        database.alias, "rolling-deploy", mode.name, started,
        jobs=jobs, in_flight=fleet.in_flight, restarts=restarts, seed=seed,
        given_back_unstarted=output.count("not started yet"),
    )  # fmt: skip
    assert "still running at the end of the grace period" not in output, output
    assert tally.notes["retried"] == 0, tally.line()
    check(tally, fleet.tails)
