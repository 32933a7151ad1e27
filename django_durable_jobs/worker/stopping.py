"""How a worker process stops: its exit codes, its signals, and a forced exit.

First SIGTERM/SIGINT: a graceful stop (no new jobs; the in-flight ones get
the grace period). A second one: ``force_exit``, at once, unless it comes
within ``SAME_PRESS_SECONDS`` of the first: one Ctrl-C reaches every process
of the terminal's process group, so a wrapper that forwards it (``timeout
--foreground``, a shell script, ``./dev demo``) doubled it, and 2 of 5 presses
were a cold stop.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

from . import handoff
from .attempts import AttemptTable
from .completer import Completer

logger = logging.getLogger("django_durable_jobs.worker")

#: Exit codes of ``runjobworker``.
EXIT_OK = 0
EXIT_FORCED = 1
#: A handler thread ignored its time limit: the worker finished its other
#: jobs and exited so that its process manager starts a fresh process.
EXIT_RECYCLE = 3
#: A signal this soon after the first is the same press, not the second.
SAME_PRESS_SECONDS = 1.0


def install_signal_handlers(
    *,
    stopping: Callable[[], bool],
    stop: Callable[[], None],
    force_exit: Callable[[], None],
    grace_period: float,
) -> None:
    """SIGTERM and SIGINT: ``stop()`` the first time, ``force_exit()`` the second."""
    handle = signal_handler(
        stopping=stopping, stop=stop, force_exit=force_exit, grace_period=grace_period
    )
    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def signal_handler(
    *,
    stopping: Callable[[], bool],
    stop: Callable[[], None],
    force_exit: Callable[[], None],
    grace_period: float,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[int, FrameType | None], None]:
    """The handler ``install_signal_handlers`` installs (a function of its own, for tests).

    Python runs a signal handler between two bytecodes of the main thread, and that
    includes the bytecodes of a handler already running: the two SIGINTs of one press
    nest. So the press is recorded first, in one step (``append``), and which press
    came first is read from the record, never from a check made before it: a nested
    call that records itself before the outer one is the first press, and the outer
    one, resuming, sees that it is the copy (CI saw the copy taken for a second press
    when the decision came from ``stopping()`` read before the record).
    """
    presses: list[tuple[float]] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        press = (clock(),)  # a new object: this call's own record
        presses.append(press)
        first = presses[0]
        name = signal.Signals(signum).name
        if first is not press:
            elapsed = press[0] - first[0]
            if elapsed < SAME_PRESS_SECONDS:
                logger.info(
                    "%s again %.0f ms after the first: the same press (a terminal or a "
                    "wrapper sends it to every process of the group), still stopping "
                    "gracefully; send it again to exit at once",
                    name, elapsed * 1000,
                )  # fmt: skip
                return
            logger.warning("Second %s: exiting now", name)
            force_exit()
            return  # (it exits the process; a test's stand-in returns)
        if stopping():
            # Stopping for another reason (a burst's end, a recycle): no first press left.
            logger.warning("%s while stopping: exiting now", name)
            force_exit()
            return
        logger.info(
            "%s received: no new jobs; in-flight jobs have %ss to finish (send it again "
            "to exit at once)",
            name, grace_period,
        )  # fmt: skip
        stop()

    return handle


def log_recycle(worker_id: str, in_flight: int) -> None:
    logger.error(
        "Recycling worker=%s: a handler thread is stuck past its time limit; no new jobs, "
        "waiting for %s in-flight job(s), then exiting with code %s for a restart",
        worker_id, in_flight, EXIT_RECYCLE, extra={"worker_id": worker_id},
    )  # fmt: skip


def force_exit(
    alias: str, attempts: AttemptTable, completer: Completer, history_limit: int
) -> NoReturn:
    """Record what is known and give back what runs (best effort, 2 s); exit 1.

    Outcomes still waiting for the completer are written too, so jobs that
    finished are not run again by the reaper.
    """
    handoff.write_last(alias, attempts, completer, history_limit)
    logging.shutdown()
    os._exit(EXIT_FORCED)
