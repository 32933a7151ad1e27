"""``runjobworker --reload``'s two halves, without a database: the child's watcher turns
a change into a graceful stop (and exit code 3); the parent restarts on 3 only."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.utils import autoreload

from django_durable_jobs.worker import reloading


class FakeReloader(autoreload.BaseReloader):
    """Notices one change to ``path`` as soon as it runs, as Django's reloaders do."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def tick(self):  # type: ignore[no-untyped-def]
        self.notify_file_changed(Path(self.path))  # Django's trigger_reload: SystemExit(3)
        yield


class FakeWorker:
    """Runs until ``stop`` is called (with ``reload_of`` for a reload), as ``Worker.run`` does."""

    def __init__(self) -> None:
        self.reloaded: list[str] = []
        self._stopped = threading.Event()
        self.signalled = False

    def run(self) -> int:
        assert self._stopped.wait(10)
        return 0

    def stop(self, reload_of: str | None = None) -> None:
        if reload_of is not None:
            self.reloaded.append(reload_of)
        self._stopped.set()

    @property
    def reloading(self) -> bool:
        return bool(self.reloaded) and not self.signalled


def test_a_change_is_a_graceful_stop_then_exit_code_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autoreload, "get_reloader", lambda: FakeReloader("/app/jobs.py"))
    worker = FakeWorker()
    assert reloading.serve(worker) == reloading.EXIT_RELOAD == 3
    assert worker.reloaded == ["/app/jobs.py"]


def test_a_signal_during_the_reload_means_stop_not_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(autoreload, "get_reloader", lambda: FakeReloader("/app/jobs.py"))
    worker = FakeWorker()
    worker.signalled = True
    assert reloading.serve(worker) == 0
    assert worker.reloaded == ["/app/jobs.py"]


def child_exiting_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, codes: list[int]) -> Path:
    """The parent's child: a script that exits with ``codes`` in turn (one per run)."""
    runs = tmp_path / "runs"
    script = (
        "import os, pathlib, signal, sys\n"
        f"runs = pathlib.Path({str(runs)!r})\n"
        "n = len(runs.read_text()) if runs.exists() else 0\n"
        "runs.write_text('x' * (n + 1))\n"
        f"code = {codes!r}[n]\n"
        f"assert os.environ[{autoreload.DJANGO_AUTORELOAD_ENV!r}] == 'true'\n"
        "if code < 0: os.kill(os.getpid(), -code)\n"
        "sys.exit(code)\n"
    )
    monkeypatch.setattr(autoreload, "get_child_arguments", lambda: [sys.executable, "-c", script])
    # supervise() installs handlers of SIGTERM and SIGINT: not in the test run.
    monkeypatch.setattr(signal, "signal", lambda signum, handler: None)
    return runs


@pytest.mark.parametrize(
    ("codes", "exit_code", "runs"),
    [([3, 3, 0], 0, 3), ([3, 1], 1, 2), ([0], 0, 1), ([-signal.SIGKILL], 128 + 9, 1)],
)
def test_the_parent_restarts_the_child_on_3_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, codes: list[int], exit_code: int, runs: int
) -> None:
    counter = child_exiting_with(monkeypatch, tmp_path, codes)
    assert reloading.supervise() == exit_code
    assert len(counter.read_text()) == runs


def test_a_signal_during_a_reloads_stop_is_the_first_press_not_a_forced_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django_durable_jobs.worker import Worker, stopping
    from tests.factories import worker_config

    installed: dict[str, Any] = {}
    monkeypatch.setattr(stopping, "install_signal_handlers", lambda **kw: installed.update(kw))
    worker = Worker(worker_config(burst=False))
    worker._install_signal_handlers()
    forced: list[bool] = []
    installed["force_exit"] = lambda: forced.append(True)
    handle = stopping.signal_handler(**installed, clock=iter([0.0, 5.0]).__next__)
    worker.stop(reload_of="/app/jobs.py")
    assert worker.reloading
    handle(signal.SIGTERM, None)  # during the reload's stop: the first press
    assert (forced, worker.reloading) == ([], False)  # a stop now, not a restart
    handle(signal.SIGTERM, None)  # five seconds later: the second
    assert forced == [True]
