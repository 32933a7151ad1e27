"""``runjobworker --processes N``: N worker processes from one start-up, for every core.

A worker runs its handlers on threads, so one process runs Python on one
core at a time (the GIL): a busy queue of short jobs, or handlers that
compute, need more processes. Started one by one, each pays the whole
start-up (the imports, ``django.setup()``: about 0.35 s of CPU on the
example project, as much as serving 10,000 no-op jobs). With ``--processes
N`` the command sets Django up once, then forks N children; a forked child
starts in milliseconds and shares the parent's pages until it writes them.

Each child is a whole worker: its own claim loop, completer, slots,
connections and worker id (``--worker-id NAME`` becomes ``NAME-1`` ...
``NAME-N``). The parent runs no worker and holds no connection; it:

- passes SIGTERM and SIGINT on to every child, which stops as any worker
  does (the first signal lets running jobs finish within the grace period,
  a second exits at once), and waits for them however long that takes;
- forks a child again when it exits to be recycled (``EXIT_RECYCLE``: a
  handler stuck past its time limit), unless the worker is stopping;
- when a child exits with an error or is killed, stops the others as at a
  SIGTERM and exits with that child's code, so that the process manager
  (systemd, Kubernetes) restarts the whole worker rather than it running
  short of processes unseen;
- with ``--burst``, exits 0 once every child has.

A child asks the kernel for a SIGTERM when the parent dies (Linux's
``PR_SET_PDEATHSIG``), so a parent killed with SIGKILL leaves no orphan
claiming jobs: each stops gracefully. Elsewhere nothing does that.

Fork needs a parent without threads and without open connections: the
parent closes its database connections before forking and starts no
thread. Signals are blocked around each fork, so that a SIGTERM arriving
meanwhile reaches the child through its own handlers, never the parent's
copy of ``forward`` (which would signal the child's siblings).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

from django.db import connections

from .stopping import EXIT_FORCED, EXIT_OK, EXIT_RECYCLE

logger = logging.getLogger("django_durable_jobs.worker")

#: The most processes one command forks.
MAX_PROCESSES = 256
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
#: Linux's prctl option: the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def fork_available() -> bool:
    return hasattr(os, "fork")


def supervise(count: int, run_child: Callable[[int], int]) -> int:
    """Fork ``count`` children, each exiting with ``run_child(index)``; supervise them
    until every one has exited (see the module docstring). Returns the exit code."""
    connections.close_all()  # a child must not share the parent's sockets
    supervisor = _Supervisor(run_child)
    previous = {signum: signal.signal(signum, supervisor.forward) for signum in _STOP_SIGNALS}
    try:
        return supervisor.run(count)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _Supervisor:
    """The parent's state: its children, and whether a stop was asked for."""

    def __init__(self, run_child: Callable[[int], int]) -> None:
        self.run_child = run_child
        self.children: dict[int, int] = {}  # pid: index
        self.stopping = False
        self.parent = os.getpid()

    def forward(self, signum: int, frame: FrameType | None) -> None:
        """The parent's SIGTERM and SIGINT handler: pass the signal on to every child."""
        self.stopping = True
        for pid in list(self.children):
            _signal(pid, signum)

    def run(self, count: int) -> int:
        code = EXIT_OK
        for index in range(count):
            self.start(index)
        logger.info("Worker processes started: %s (--processes %s)", sorted(self.children), count)
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:  # pragma: no cover (children counted but none left)
                break
            if pid not in self.children:
                continue  # not a worker process (a child the parent started otherwise)
            index = self.children.pop(pid)
            exited = os.waitstatus_to_exitcode(status)
            if exited == EXIT_RECYCLE and not self.stopping:
                logger.warning(
                    "Worker process %s exited to be recycled (code %s): forking it again",
                    pid, exited,
                )  # fmt: skip
                self.start(index)
            elif _failed(exited, self.stopping) and code == EXIT_OK:
                # The shell's convention for a death by signal: 128 + its number.
                code = 128 - exited if exited < 0 else exited
                if not self.stopping:
                    logger.error(
                        "Worker process %s %s: stopping the other %s, then exiting with "
                        "code %s (the process manager restarts the worker)",
                        pid,
                        f"was killed by {signal.Signals(-exited).name}"
                        if exited < 0
                        else f"exited with code {exited}",
                        len(self.children),
                        code,
                    )
                    self.forward(signal.SIGTERM, None)
        return code

    def start(self, index: int) -> None:
        # Or the child would write what the parent had buffered, again.
        sys.stdout.flush()
        sys.stderr.flush()
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:  # the child: never returns
                _child(index, self.parent, self.run_child)
            self.children[pid] = index
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def _failed(exited: int, stopping: bool) -> bool:
    """Whether a child's exit is a failure: not 0, and not the signal we passed on."""
    if exited == EXIT_OK:
        return False
    # Not while stopping: killed by the SIGTERM or SIGINT passed on before its
    # own handlers were installed, or exiting to be recycled (not forked again).
    return not (stopping and (-exited in _STOP_SIGNALS or exited == EXIT_RECYCLE))


def _child(index: int, parent: int, run_child: Callable[[int], int]) -> None:
    code = EXIT_FORCED
    try:
        # Not the parent's forward(); the worker installs its own handlers.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _die_with(parent)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        code = run_child(index)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_FORCED
    except BaseException:
        logger.exception("Worker process %s failed", os.getpid())
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            logging.shutdown()
        finally:
            # Not sys.exit: the parent's atexit handlers and the stack above
            # (manage.py's) are the parent's, not this process's.
            os._exit(code)


def _die_with(parent: int) -> None:
    """Get a SIGTERM when the parent dies (Linux); at once if it already has."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):  # pragma: no cover (a libc without prctl)
            return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # exited meanwhile; os.wait() says how
        os.kill(pid, signum)
