"""Periodic jobs with real ``runjobworker`` processes: one job per tick, no leader."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
from datetime import datetime, timedelta

import pytest

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus, ScheduleState

from .helpers import MANAGE, ROOT, Workers, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TICK = timedelta(seconds=2)


@pytest.fixture
def scheduling_workers(workers: Workers) -> Workers:
    workers.env["EXAMPLE_SCHEDULES"] = "1"
    return workers


def tick_times() -> list[datetime]:
    return sorted(Job.objects.filter(type="example.tick").values_list("available_at", flat=True))


def test_two_workers_enqueue_one_job_per_tick_and_survive_either_stopping(
    scheduling_workers: Workers,
) -> None:
    first = scheduling_workers.start("--concurrency", "2", "--poll-interval", "0.5")
    second = scheduling_workers.start("--concurrency", "2", "--poll-interval", "0.5")
    # Both are up once each has claimed: wait for the first ticks rather than
    # guess how long Django takes to start on a busy machine.
    wait_for(lambda: len(tick_times()) >= 2, 90, "the first ticks")
    # Side by side for a few ticks (each tick a race between them).
    side_by_side_from = tick_times()[-1]
    wait_for(
        lambda: tick_times()[-1] >= side_by_side_from + 3 * TICK,
        60,
        "three more ticks with both workers",
    )
    # No leader: stop one worker, the other keeps enqueueing every tick.
    first.send_signal(signal.SIGTERM)
    assert first.wait(30) == 0, scheduling_workers.output()
    stopped_at = tick_times()[-1]
    wait_for(
        lambda: tick_times()[-1] >= stopped_at + 2 * TICK,
        30,
        "ticks after the first worker stopped",
    )
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0, scheduling_workers.output()

    ticks = tick_times()
    assert len(ticks) >= 6, ticks
    # One job per tick: no duplicate (the key), and no silent gap. A tick is
    # skipped only when the scheduler woke more than a tick late (a stalled
    # host: two Djangos starting on a loaded CI machine), and then the worker
    # that enqueued the next tick says so (the missed-tick policy, "latest").
    assert len(set(ticks)) == len(ticks)
    output = scheduling_workers.output()
    for a, b in itertools.pairwise(ticks):
        if b - a != TICK:
            first = (a + TICK).isoformat()
            assert f"from {first} (the last before {b.isoformat()})" in output, (ticks, output)
    assert all(t.timestamp() % 2 == 0 for t in ticks)
    # Each job knows its tick, and the workers ran them.
    completed = Job.objects.filter(type="example.tick", status=JobStatus.COMPLETED)
    assert completed.count() >= len(ticks) - 2
    for job in completed:
        assert job.result == {"tick": job.available_at.isoformat()}
    assert ScheduleState.objects.get(name="example.tick").last_tick == ticks[-1]
    assert "Traceback" not in scheduling_workers.output()


def test_a_no_schedules_worker_enqueues_no_tick(scheduling_workers: Workers) -> None:
    worker = scheduling_workers.start("--no-schedules", "--poll-interval", "0.5")
    probe = enqueue("example.noop").job
    wait_for(
        lambda: Job.objects.filter(pk=probe.pk, status=JobStatus.COMPLETED).exists(),
        90,
        "the worker to run a job",
    )
    # Up and running: a scheduling worker would enqueue a tick every 2 s. A
    # job due 5 s from now (the database's clock), run by this worker: it
    # served through two ticks and more.
    later = enqueue("example.noop", delay=5).job
    wait_for(
        lambda: Job.objects.filter(pk=later.pk, status=JobStatus.COMPLETED).exists(),
        60,
        "the worker to run the delayed job",
    )
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0, scheduling_workers.output()
    assert not Job.objects.filter(type="example.tick").exists()
    assert not ScheduleState.objects.exists()


def test_jobs_schedules_lists_the_example_tick(scheduling_workers: Workers) -> None:
    def jobs_schedules(flag: str) -> subprocess.CompletedProcess[str]:
        env = {**scheduling_workers.env, "EXAMPLE_SCHEDULES": flag}
        return subprocess.run(
            [sys.executable, str(MANAGE), "jobs", "schedules", "--json"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    result = jobs_schedules("1")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["name"], row["timing"], row["enabled"]) == ("example.tick", "every 2s", True)
    # Declared only when asked for.
    result = jobs_schedules("0")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
