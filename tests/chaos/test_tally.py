"""The suite's own judge: the tally finds each kind of failure it exists to find.

No worker runs here: rows are written as faults would leave them, and the
tally must call each one what it is (a scenario whose checks cannot fail
proves nothing).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import pytest

from django_durable_jobs import enqueue_many
from django_durable_jobs.models import Job, JobStatus
from tests.testapp.models import Execution

from .scenario import Database
from .tally import count

pytestmark = [pytest.mark.chaos]

LEASE_EXPIRED = {"exception": "django_durable_jobs.LeaseExpired", "worker": "w-0"}


def test_the_tally_tells_lost_stuck_repeated_and_unexplained_runs_apart(
    database: Database,
) -> None:
    alias = database.alias
    names = ["fine", "never_ran", "died", "pending", "rerun", "twice", "silent", "dead_poison",
             "dead_unrun"]  # fmt: skip
    ids = dict(
        zip(
            names,
            [r.job.pk for r in enqueue_many([{"type": "tests.record"}] * len(names), using=alias)],
            strict=True,
        )
    )

    def finish(name: str, status: str, runs: list[int], failed: tuple[int, ...] = ()) -> None:
        errors: list[dict[str, Any]] = [{"attempt": a, **LEASE_EXPIRED} for a in failed]
        Job.objects.using(alias).filter(pk=ids[name]).update(
            status=status, attempts=max(runs, default=1), errors=errors
        )
        for attempt in runs:
            Execution.objects.using(alias).create(job_id=ids[name], attempt=attempt, worker="w")

    finish("fine", JobStatus.COMPLETED, [1])
    finish("never_ran", JobStatus.COMPLETED, [])
    finish("died", JobStatus.DEAD, [1])
    finish("rerun", JobStatus.COMPLETED, [1, 2], failed=(1,))  # a kill found it in flight
    finish("twice", JobStatus.COMPLETED, [1, 1])  # one attempt run twice
    finish("silent", JobStatus.COMPLETED, [1, 2])  # no failure recorded for attempt 1
    finish("dead_poison", JobStatus.DEAD, [1, 2], failed=(1, 2))
    # A poison job whose attempts were all lost unrun (claimed by workers another killed).
    Job.objects.using(alias).filter(pk=ids["dead_unrun"]).update(
        status=JobStatus.DEAD,
        attempts=3,
        errors=[{"attempt": a, **LEASE_EXPIRED} for a in (1, 2, 3)],
    )
    in_flight: Counter[uuid.UUID] = Counter({ids["rerun"]: 1, ids["dead_poison"]: 2})

    tally = count(
        alias, "tally", "short", time.monotonic(), jobs=ids.values(), in_flight=in_flight,
        expected={ids["dead_poison"]: JobStatus.DEAD, ids["dead_unrun"]: JobStatus.DEAD},
    )  # fmt: skip
    assert (tally.jobs, tally.executions, tally.duplicates) == (9, 10, 4)
    assert (tally.lost, tally.stuck, tally.allowed) == (2, 1, 3)  # never_ran, died; pending
    problems = "\n".join(tally.problems)
    for name in ("never_ran", "died", "pending"):
        assert str(ids[name]) in problems, name
    assert str(ids["dead_unrun"]) not in problems
    beyond = next(p for p in tally.problems if "more often than kills" in p)
    assert str(ids["twice"]) in beyond and str(ids["silent"]) in beyond
    assert str(ids["rerun"]) not in beyond and str(ids["dead_poison"]) not in beyond
    unexplained = next(p for p in tally.problems if "without a failed attempt" in p)
    assert str(ids["twice"]) in unexplained and str(ids["silent"]) in unexplained
    assert str(ids["rerun"]) not in unexplained

    # Faults of the database: a bound on the count, not per job.
    loose = count(alias, "tally", "short", time.monotonic(), jobs=[ids["rerun"]], in_flight=0)
    assert any("more than the 0 in flight" in p for p in loose.problems)
    assert not count(
        alias, "tally", "short", time.monotonic(), jobs=[ids["rerun"]], in_flight=1
    ).problems
