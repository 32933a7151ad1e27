"""Scenario: ``atomic=True`` durable steps under SIGKILLs and ``pg_terminate_backend`` storms.

Four workers drain ``tests.atomic_steps`` jobs (1,500; 10,000 in the long
mode): each run writes an ``Execution`` row, then its ``atomic=True`` step
``write`` writes a ``StepRun`` row and sleeps a little inside the
transaction (so faults find it open), then the handler sleeps a little
after the step (so faults find jobs whose step is recorded but whose
attempt has not ended). Meanwhile:

- every 1 to 2.5 s one worker, at random, is SIGKILLed and replaced, until
  95 % of the jobs have finished (and at least 3 kills; 15 in the long mode);
- twice, at a quarter and at a half of the jobs, a storm of 5 s (15 s in
  the long mode): twice a second, every backend of the workers' role in
  the scenario's database is terminated (claims, checkpoints mid-transaction,
  heartbeats, LISTEN).

What must hold: every job completes (0 lost, 0 stuck); each job has
exactly one ``StepRun`` row and one completed ``write`` record: a run cut
inside the step rolled its row back with its record, and a run after the
step was recorded replayed it instead of writing again (``replayed``
counts the jobs whose final attempt returned the recorded result of an
earlier one); reruns only of attempts that failed, at most as many as were
in flight at the faults (the tally's usual rules).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from random import Random

import pytest
from django.db import connections

from django_durable_jobs import enqueue_many
from django_durable_jobs.models import Job, JobStep, StepStatus
from tests.testapp.models import StepRun

from .fleet import Fleet
from .scenario import Database, Mode
from .tally import check, count, finished
from .workload import BATCH, drain, rng, stop_cleanly

pytestmark = [pytest.mark.chaos]

ARGS = ("--concurrency", "4", "--lease-seconds", "5", "--poll-interval", "0.5")
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


def enqueue_atomic(alias: str, n: int, random_: Random) -> list[uuid.UUID]:
    ids: list[uuid.UUID] = []
    for start in range(0, n, BATCH):
        rows = [
            {
                "type": "tests.atomic_steps",
                "payload": {"i": i, "sleep": round(random_.uniform(0.005, 0.03), 4)},
            }
            for i in range(start, min(n, start + BATCH))
        ]
        ids += [result.job.pk for result in enqueue_many(rows, using=alias)]
    return ids


def test_atomic_steps_write_once_under_sigkills_and_terminate_storms(
    database: Database, fleet: Fleet, mode: Mode
) -> None:
    random, seed = rng()
    alias = database.alias
    total = mode.pick(short=1_500, long=10_000)
    storm_seconds = mode.pick(short=5, long=15)
    least = mode.pick(short=3, long=15)
    jobs = enqueue_atomic(alias, total, random)
    started = time.monotonic()
    for _ in range(4):
        fleet.start(*ARGS)
    next_kill = time.monotonic() + random.uniform(1.0, 2.5)
    storms_at = [0.25, 0.5]
    storm_ends = 0.0
    next_tick = 0.0
    ticks = terminated = db_in_flight = 0

    def faults() -> None:
        nonlocal next_kill, storm_ends, next_tick, ticks, terminated, db_in_flight
        now = time.monotonic()
        done = finished(alias)
        if storms_at and done >= storms_at[0] * total and not storm_ends:
            storms_at.pop(0)
            storm_ends = now + storm_seconds
        if storm_ends:
            if now >= storm_ends:
                storm_ends = 0.0
            elif now >= next_tick:
                with database.cluster.admin(database.name) as conn:
                    were_running, killed = conn.execute(TERMINATE).fetchone()  # type: ignore[misc]
                db_in_flight += were_running
                terminated += killed
                ticks += 1
                next_tick = now + 0.5
        if now >= next_kill and not (fleet.kills >= least and done >= 0.95 * total):
            victim = random.choice(fleet.alive())
            fleet.kill(victim)
            fleet.replace(victim)
            next_kill = now + random.uniform(1.0, 2.5)

    drain(fleet, mode.pick(short=240, long=1500), during=faults, interval=0.1)
    dead = [worker.id for worker in fleet.workers if not worker.alive and not worker.accounted]
    assert not dead, f"workers died of the faults: {dead}\n{fleet.tails()}"
    stop_cleanly(fleet)
    connections[alias].close()  # a storm may have cut this process's connection too

    rows = Counter(StepRun.objects.using(alias).values_list("job_id", flat=True))
    records = Counter(
        JobStep.objects.using(alias)
        .filter(name="write", status=StepStatus.COMPLETED)
        .values_list("job_id", flat=True)
    )
    results = Job.objects.using(alias).filter(pk__in=jobs).values_list("attempts", "result")
    replayed = sum(1 for attempts, result in results if result and result["written_on"] < attempts)
    tally = count(
        alias, "steps-under-faults", mode.name, started,
        jobs=jobs, in_flight=sum(fleet.in_flight.values()) + db_in_flight,
        kills=fleet.kills, storm_ticks=ticks, terminated=terminated,
        step_rows=sum(rows.values()), replayed=replayed, seed=seed,
    )  # fmt: skip
    missing = [pk for pk in jobs if rows[pk] == 0]
    doubled = [pk for pk, n in rows.items() if n > 1]
    unrecorded = [pk for pk in jobs if records[pk] != 1]
    if missing:
        tally.problems.append(f"{len(missing)} jobs without their step's row: {missing[:5]}")
    if doubled:
        tally.problems.append(f"{len(doubled)} jobs with their step's row twice: {doubled[:5]}")
    if unrecorded:
        tally.problems.append(
            f"{len(unrecorded)} jobs without one 'write' record: {unrecorded[:5]}"
        )
    assert fleet.kills >= least, tally.line()
    assert terminated >= ticks > 0, tally.line()  # every tick found backends to cut
    check(tally, fleet.tails)
