"""Scenario 1: workers SIGKILLed at random every few seconds, and replaced.

Four workers drain the flow (2,000 jobs; 20,000 in the long mode). Every
1 to 2.5 s one of them, at random, is SIGKILLed and a new one started in
its place, until 95 % of the jobs have finished (and at least 3 kills; 20
in the long mode); then the rest drain. Each
kill's victim had some jobs in flight; they run again after their lease
expires, and nothing else may.
"""

from __future__ import annotations

import time

import pytest

from .fleet import Fleet
from .scenario import Database, Mode
from .tally import check, count, finished
from .workload import drain, enqueue_flow, rng, stop_cleanly

pytestmark = [pytest.mark.chaos]

ARGS = ("--concurrency", "4", "--lease-seconds", "5", "--poll-interval", "0.5")


def test_random_sigkills_lose_nothing_and_repeat_only_what_was_in_flight(
    database: Database, fleet: Fleet, mode: Mode
) -> None:
    random, seed = rng()
    total = mode.pick(short=1_000, long=20_000)
    jobs = enqueue_flow(database.alias, total, sleep=(0.01, 0.05), random_=random)
    least = mode.pick(short=3, long=20)
    started = time.monotonic()
    for _ in range(4):
        fleet.start(*ARGS)
    next_kill = time.monotonic() + random.uniform(1.0, 2.5)

    def kill_now_and_then() -> None:
        nonlocal next_kill
        if time.monotonic() < next_kill:
            return
        if fleet.kills >= least and finished(database.alias) >= 0.95 * total:
            return  # the tail drains without more faults
        victim = random.choice(fleet.alive())
        fleet.kill(victim)
        fleet.replace(victim)
        next_kill = time.monotonic() + random.uniform(1.0, 2.5)

    drain(fleet, mode.pick(short=240, long=1500), during=kill_now_and_then)
    stop_cleanly(fleet)
    tally = count(
        database.alias, "worker-crashes", mode.name, started,
        jobs=jobs, in_flight=fleet.in_flight, kills=fleet.kills, seed=seed,
    )  # fmt: skip
    assert fleet.kills >= least, tally.line()
    check(tally, fleet.tails)
