"""What a scenario did to its jobs, from the rows: one summary line, and what is wrong.

Counted over the scenario's jobs, once every worker has stopped:

- **executions**: handler runs (``tests.testapp``'s ``Execution`` rows);
- **duplicates**: runs beyond each job's first;
- **lost**: jobs that ended otherwise than expected (``dead`` or
  ``cancelled`` instead of ``completed``), or ``completed`` without a run;
- **stuck**: jobs left ``pending``, ``running`` or ``waiting``.

A scenario fails on any lost or stuck job, and on duplicates beyond what
was in flight at its faults:

- **allowed**: the runs that the faults may repeat. For a SIGKILL it is
  exact, per job: the jobs running under the victim's id just after it
  died (``Fleet.in_flight``); a job may run again once per kill that found
  it in flight, and no other job may run twice. For a fault of the
  database (a restart, terminated backends), it is a count: the jobs
  running at each fault, summed.
- **unexplained**: a rerun with no failed attempt before it on record. Every
  run but a job's last must be an attempt that ended in an ``errors``
  entry (its lease expired, or its handler failed), and no attempt number
  may run twice (which a release at shutdown would do). Always a failure.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db.models import Count

from django_durable_jobs.models import Job, JobStatus
from tests.testapp.models import Execution

#: Every summary line of the session, for the terminal summary (conftest.py).
SUMMARIES: list[str] = []
UNFINISHED = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.WAITING)
SHOWN = 5


@dataclass
class Tally:
    scenario: str
    mode: str
    jobs: int
    executions: int
    duplicates: int
    allowed: int
    lost: int
    stuck: int
    seconds: float
    notes: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        notes = " ".join(f"{key}={value}" for key, value in self.notes.items())
        return (
            f"chaos {self.scenario} [{self.mode}]: jobs={self.jobs} executions={self.executions} "
            f"duplicates={self.duplicates} lost={self.lost} stuck={self.stuck} "
            f"seconds={self.seconds:.1f} | in flight at faults={self.allowed}"
            + (f" {notes}" if notes else "")
        )


def count(
    alias: str,
    scenario: str,
    mode: str,
    started: float,
    *,
    jobs: Collection[uuid.UUID] | None = None,
    in_flight: Mapping[uuid.UUID, int] | int = 0,
    expected: Mapping[uuid.UUID, str] | None = None,
    **notes: Any,
) -> Tally:
    """Count the scenario's ``jobs`` (default: every job in the database).

    ``in_flight``: a ``Counter`` of job ids (exact, per job: SIGKILLs) or a
    number (a bound on the total: faults of the database). ``expected``: the
    jobs meant to end otherwise than ``completed`` (a poison job's ``dead``).
    """
    seconds = time.monotonic() - started
    rows = Job.objects.using(alias)
    if jobs is not None:
        rows = rows.filter(pk__in=list(jobs))
    state = {pk: (status, attempts, errors) for pk, status, attempts, errors in
             rows.values_list("pk", "status", "attempts", "errors")}  # fmt: skip
    runs: defaultdict[uuid.UUID, list[int]] = defaultdict(list)
    for job_id, attempt in Execution.objects.using(alias).values_list("job_id", "attempt"):
        if job_id in state:
            runs[job_id].append(attempt)
    expected = expected or {}
    exact = not isinstance(in_flight, int)
    allowed = sum(in_flight.values()) if not isinstance(in_flight, int) else in_flight

    lost, stuck, beyond, unexplained = [], [], [], []
    for pk, (status, _attempts, errors) in state.items():
        attempts_run = sorted(runs.get(pk, []))
        if status in UNFINISHED:
            stuck.append(pk)
        elif status != expected.get(pk, JobStatus.COMPLETED) or (
            status == JobStatus.COMPLETED and not attempts_run
        ):
            # An expected dead job may have no run: all its attempts lost unrun.
            lost.append(pk)
        if exact and len(attempts_run) - 1 > in_flight.get(pk, 0):  # type: ignore[union-attr]
            beyond.append(pk)
        failed = {entry.get("attempt") for entry in errors or []}
        if len(set(attempts_run)) < len(attempts_run) or any(
            attempt not in failed for attempt in attempts_run[:-1]
        ):
            unexplained.append(pk)
    executions = sum(len(attempts) for attempts in runs.values())
    # Jobs that took more than one attempt (a fault failed or orphaned one).
    notes = {"retried": sum(1 for _, attempts, _ in state.values() if attempts > 1), **notes}
    duplicates = sum(max(0, len(attempts) - 1) for attempts in runs.values())

    def show(pks: list[uuid.UUID]) -> str:
        def errors(pk: uuid.UUID) -> list[tuple[Any, ...]]:
            return [
                (e.get("attempt"), e.get("exception"), e.get("worker")) for e in state[pk][2] or []
            ]

        return "; ".join(
            f"{pk} status={state[pk][0]} attempts={state[pk][1]} runs={sorted(runs.get(pk, []))} "
            f"errors={errors(pk)}"
            for pk in pks[:SHOWN]
        )

    problems = []
    if lost:
        problems.append(f"{len(lost)} lost: {show(lost)}")
    if stuck:
        problems.append(f"{len(stuck)} stuck: {show(stuck)}")
    if beyond:
        problems.append(
            f"{len(beyond)} ran more often than kills found them in flight: {show(beyond)}"
        )
    if not exact and duplicates > allowed:
        problems.append(f"{duplicates} duplicates, more than the {allowed} in flight at the faults")
    if unexplained:
        problems.append(f"{len(unexplained)} reran without a failed attempt: {show(unexplained)}")
    return Tally(
        scenario, mode, len(state), executions, duplicates, allowed, len(lost), len(stuck),
        seconds, notes, problems,
    )  # fmt: skip


def check(tally: Tally, details: Callable[[], str] = str) -> None:
    """Record the summary line (the terminal summary prints it); fail on any problem it found."""
    line = tally.line()
    SUMMARIES.append(line + ("" if not tally.problems else "  FAILED"))
    if tally.problems:
        pytest.fail("\n".join([line, *tally.problems, details()]), pytrace=False)


def unfinished(alias: str) -> int:
    """Jobs of the scenario's database not finished yet (pending, running or waiting)."""
    return Job.objects.using(alias).filter(status__in=UNFINISHED).count()


def finished(alias: str) -> int:
    return Job.objects.using(alias).exclude(status__in=UNFINISHED).count()


def by_status(alias: str) -> dict[str, int]:
    rows = Job.objects.using(alias).values("status").annotate(n=Count("pk"))
    return {row["status"]: row["n"] for row in rows}
