"""``runjobworker --reload``: a new process on each code change, as ``runserver``, gracefully.

Django's ``autoreload.run_with_reloader`` does not fit a worker as it is:
its child runs the command on a thread and the file watcher on the main
thread, where a change ends the process at once (``sys.exit(3)``), running
jobs and all; the worker's signal handlers must be installed on the main
thread; and its parent (``restart_with_reloader``, a ``subprocess.run``)
kills the child 0.25 s after a Ctrl-C and exits at a SIGTERM without
passing it on. So the two halves are written here, with Django's reloader
(``StatReloader``, or ``WatchmanReloader`` when pywatchman is installed)
and its child command line:

- the parent (``supervise``) starts the child (the same command line, with
  ``DJANGO_AUTORELOAD_ENV`` set), passes SIGTERM and SIGINT on to it, waits
  for it however long its grace period takes, and starts it again when it
  exits with ``EXIT_RELOAD`` (unless a signal asked to stop);
- the child (``serve``) runs the worker on the main thread, as without
  ``--reload``, and Django's reloader on a thread of its own: a change asks
  the worker for a graceful stop (``Worker.reload``: no new jobs, running
  ones get the grace period, then are released uncounted, as at a SIGTERM),
  and the process exits with ``EXIT_RELOAD``.

A worker that recycles itself (a handler stuck past its time limit) exits
with the same code 3: under ``--reload`` it starts again at once.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from types import FrameType
from typing import Protocol

from django.apps import apps
from django.utils import autoreload

from .stopping import EXIT_RECYCLE

logger = logging.getLogger("django_durable_jobs.worker")

#: The child's exit code that makes the parent start it again: Django's
#: (``trigger_reload``), which is also the worker's recycle code.
EXIT_RELOAD = EXIT_RECYCLE


def is_child() -> bool:
    """Whether this process is the reloader's child (the one that runs the worker)."""
    return os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true"


class Reloadable(Protocol):
    """What ``serve`` needs of a ``Worker``."""

    def run(self) -> int: ...
    def stop(self, reload_of: str | None = None) -> None: ...
    @property
    def reloading(self) -> bool: ...


def serve(worker: Reloadable) -> int:
    """The child: run ``worker`` here, Django's reloader beside it; the exit code."""
    reloader = autoreload.get_reloader()
    watcher = threading.Thread(
        target=_watch, args=(reloader, worker), name="durable-jobs-reloader", daemon=True
    )
    watcher.start()
    try:
        code = worker.run()
    finally:
        reloader.stop()
    return EXIT_RELOAD if worker.reloading else code


def _watch(reloader: autoreload.BaseReloader, worker: Reloadable) -> None:
    """The reloader's thread: wait for a change to a module (or a watched file), then
    ask the worker to stop for a reload.

    ``BaseReloader.run`` without its import of the URLconf, which a worker
    never serves (its views need not be watched). A change makes Django's
    ``trigger_reload`` raise ``SystemExit(3)`` here, on this thread: caught,
    it becomes a graceful stop. A ``file_changed`` receiver that handles the
    change itself (Django's template reloading) still prevents it.
    """
    changed: list[str] = []

    def note(sender: object, file_path: object, **kwargs: object) -> None:
        changed.append(str(file_path))  # returns None: does not prevent the reload

    autoreload.file_changed.connect(note, weak=False)
    try:
        reloader.wait_for_apps_ready(apps, threading.main_thread())
        autoreload.autoreload_started.send(sender=reloader)
        logger.info("Watching for code changes with %s (--reload)", type(reloader).__name__)
        reloader.run_loop()
    except SystemExit:
        path = changed[-1] if changed else "a watched file"
        logger.info(
            "%s changed: reloading (no new jobs; in-flight jobs get the grace period, then a "
            "new process runs the new code)", path,
        )  # fmt: skip
        worker.stop(reload_of=path)
    finally:
        autoreload.file_changed.disconnect(note)


def supervise() -> int:
    """The parent: run the child until it exits other than for a reload; its exit code."""
    args = autoreload.get_child_arguments()
    env = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    child: subprocess.Popen[bytes] | None = None
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        # A terminal's Ctrl-C reaches the child too: passed on, it arrives
        # twice within a second, which the worker counts as one press.
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        child = subprocess.Popen(args, env=env, close_fds=False)  # noqa: S603 (our own command line)
        code = child.wait()
        if code != EXIT_RELOAD or stopping:
            # Killed by a signal: the shell's convention, 128 + its number.
            return 128 - code if code < 0 else code
        logger.info("Starting the worker again with the new code (--reload)")
