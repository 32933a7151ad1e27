"""The supervisor of ``runjobworker --processes``, with children that run no worker.

Real forks of the test process: each child runs the given function and
exits with its code (``os._exit``), so nothing of pytest runs twice.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from django_durable_jobs.worker import processes
from django_durable_jobs.worker.stopping import EXIT_OK, EXIT_RECYCLE

pytestmark = pytest.mark.skipif(not processes.fork_available(), reason="needs os.fork()")


def test_a_child_that_exits_to_be_recycled_is_forked_again(tmp_path: Path) -> None:
    def run_child(index: int) -> int:
        runs = tmp_path / f"runs-{index}"
        with runs.open("a") as file:
            file.write(f"{os.getpid()}\n")
        # Child 0 asks to be recycled on its first run only.
        first = len(runs.read_text().split()) == 1
        return EXIT_RECYCLE if index == 0 and first else EXIT_OK

    assert processes.supervise(2, run_child) == EXIT_OK
    runs = (tmp_path / "runs-0").read_text().split()
    assert len(runs) == 2 and runs[0] != runs[1]  # two processes
    assert len((tmp_path / "runs-1").read_text().split()) == 1


def test_a_failed_child_stops_the_others_and_its_code_is_the_exit_code(tmp_path: Path) -> None:
    def run_child(index: int) -> int:
        if index == 0:
            time.sleep(0.2)  # the others are waiting by then
            return 5
        # Waits for the SIGTERM passed on; a handler of its own, as a worker has.
        told: list[int] = []
        signal.signal(signal.SIGTERM, lambda signum, frame: told.append(signum))
        deadline = time.monotonic() + 30
        while not told and time.monotonic() < deadline:
            time.sleep(0.01)
        if told:
            (tmp_path / f"stopped-{index}").touch()
        return EXIT_OK

    assert processes.supervise(3, run_child) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stopped-1", "stopped-2"]


def test_a_child_that_raises_exits_1_and_the_handlers_are_restored() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)

    def run_child(index: int) -> int:
        raise RuntimeError("boom")

    assert processes.supervise(1, run_child) == 1
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_stop_passed_on_is_not_a_failure() -> None:
    assert not processes._failed(EXIT_OK, stopping=False)
    assert processes._failed(-signal.SIGTERM, stopping=False)
    assert not processes._failed(-signal.SIGTERM, stopping=True)
    assert not processes._failed(-signal.SIGINT, stopping=True)
    assert processes._failed(-signal.SIGKILL, stopping=True)
    assert not processes._failed(EXIT_RECYCLE, stopping=True)
    assert processes._failed(1, stopping=True)
