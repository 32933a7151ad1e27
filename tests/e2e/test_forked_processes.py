"""``manage.py runjobworker --processes N``: one start-up, N worker processes, real signals."""

from __future__ import annotations

import os
import signal
import socket

import pytest

from django_durable_jobs import enqueue_many
from django_durable_jobs.models import Job, JobStatus, WorkerProcess
from tests.ports import free_port
from tests.testapp.models import Execution

from .helpers import Workers, get, sample, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie (exited, not yet reaped: an orphan
    waits for whoever adopts it) has ended."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def children_of(parent: int) -> set[int]:
    """The worker processes' pids, from their rows (each child registers its own)."""
    pids = set(WorkerProcess.objects.values_list("pid", flat=True))
    assert parent not in pids  # the parent runs no worker
    return pids


def test_each_process_serves_jobs_exactly_once_and_a_burst_exits_0(workers: Workers) -> None:
    # Jobs of 0.2 s: no process claims ahead, each takes what its 2 slots can run.
    enqueue_many([{"type": "tests.record", "payload": {"sleep": 0.2}} for _ in range(36)])
    proc = workers.start(
        "--burst", "--processes", "3", "--concurrency", "2", "--worker-id", "forked"
    )
    assert proc.wait(120) == 0, workers.output()
    assert Job.objects.filter(status=JobStatus.COMPLETED, attempts=1).count() == 36
    assert Execution.objects.count() == 36
    assert Execution.objects.values("job_id").distinct().count() == 36
    # Three workers of their own, each named after the --worker-id.
    assert set(Execution.objects.values_list("worker", flat=True)) == {
        "forked-1", "forked-2", "forked-3"
    }  # fmt: skip
    assert not WorkerProcess.objects.exists()


def test_a_sigterm_to_the_parent_stops_every_process_gracefully(workers: Workers) -> None:
    enqueue_many([{"type": "tests.record", "payload": {"sleep": 2}} for _ in range(6)])
    proc = workers.start("--processes", "3", "--concurrency", "2", "--poll-interval", "0.2")
    wait_for(lambda: Execution.objects.count() == 6, 60, "every job to start")
    assert len(set(Execution.objects.values_list("worker", flat=True))) == 3
    pids = children_of(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, workers.output()
    # The jobs finished within the grace period, each once; no process is left.
    assert Job.objects.filter(status=JobStatus.COMPLETED, attempts=1).count() == 6
    assert Execution.objects.count() == 6
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()
    assert not WorkerProcess.objects.exists()
    assert not any(alive(pid) for pid in pids)


def test_a_killed_process_stops_the_others_and_the_parent_exits_with_its_code(
    workers: Workers,
) -> None:
    proc = workers.start("--processes", "2", "--concurrency", "1", "--poll-interval", "0.2")
    wait_for(lambda: WorkerProcess.objects.count() == 2, 60, "both processes' rows")
    victim, other = sorted(children_of(proc.pid))
    os.kill(victim, signal.SIGKILL)
    # The shell's convention: 128 + SIGKILL's number.
    assert proc.wait(60) == 128 + signal.SIGKILL, workers.output()
    assert not alive(other)
    # The other one stopped as at a SIGTERM: it removed its row; the killed one could not.
    assert list(WorkerProcess.objects.values_list("pid", flat=True)) == [victim]
    assert f"Worker process {victim} was killed by SIGKILL" in workers.output()


def test_a_killed_parent_leaves_no_process_claiming_jobs(workers: Workers) -> None:
    proc = workers.start("--processes", "2", "--concurrency", "1", "--poll-interval", "0.2")
    wait_for(lambda: WorkerProcess.objects.count() == 2, 60, "both processes' rows")
    pids = children_of(proc.pid)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL
    # Each child got a SIGTERM when its parent died, and stopped gracefully.
    wait_for(lambda: not WorkerProcess.objects.exists(), 60, "the children to stop")
    wait_for(lambda: not any(alive(pid) for pid in pids), 30, "the children to exit")


def two_free_ports() -> int:
    """A port P such that P and P + 1 are both free now."""
    for _ in range(50):
        port = free_port()
        if port < 65535:
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise AssertionError("no two free ports in a row")


def test_each_process_serves_metrics_on_a_port_of_its_own(workers: Workers) -> None:
    port = two_free_ports()
    proc = workers.start(
        "--processes", "2", "--metrics-port", str(port), "--concurrency", "3",
        "--poll-interval", "0.2",
    )  # fmt: skip
    for each in (port, port + 1):
        wait_for(lambda each=each: get(each, "/healthz")[0] == 200, 30, f"/healthz on {each}")
        assert sample(each, "durable_jobs_worker_slots") == 3
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, workers.output()
    assert get(port, "/healthz")[0] == 0 and get(port + 1, "/healthz")[0] == 0
