"""How a worker process stops: its exit codes, its signals, and a forced exit.

First SIGTERM/SIGINT: a graceful stop (no new jobs; the in-flight ones get
the grace period). A second one: ``force_exit``, at once.
"""

from __future__ import annotations

import logging
import os
import signal
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


def install_signal_handlers(
    *,
    stopping: Callable[[], bool],
    stop: Callable[[], None],
    force_exit: Callable[[], None],
    grace_period: float,
) -> None:
    """SIGTERM and SIGINT: ``stop()`` the first time, ``force_exit()`` the second."""

    def handle(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stopping():
            logger.warning("Second %s: exiting now", name)
            force_exit()
        logger.info(
            "%s received: no new jobs; in-flight jobs have %ss to finish (send it again "
            "to exit at once)",
            name, grace_period,
        )  # fmt: skip
        stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


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
