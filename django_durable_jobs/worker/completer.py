"""Write attempts' outcomes in batches, off the handlers' threads.

Handlers hand their outcome over and take the next job at once; this
thread writes whatever has accumulated in one fenced ``record_outcomes``
statement, then the next batch. Under load the batches grow by themselves
(as a group commit does); when idle an outcome is written immediately.
One connection does the bookkeeping of every handler thread.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from .. import db, hooks
from ..db.records import Outcome
from ..services import Service
from . import other_databases

logger = logging.getLogger("django_durable_jobs.worker")

MAX_BATCH = 1_000
# Connection trouble: wait this long, doubling, up to the cap.
RETRY_BASE_SECONDS = 0.1
RETRY_CAP_SECONDS = 5.0


class Completer(Service):
    def __init__(
        self,
        alias: str,
        history_limit: int,
        on_written: Callable[[list[Outcome], set[uuid.UUID]], None],
    ) -> None:
        self._alias = alias
        self._history_limit = history_limit
        self._on_written = on_written
        self._pending: list[Outcome] = []
        self._writing = 0
        # Reentrant: a forced exit reads it from the signal handler, which
        # may interrupt the main thread while it holds this lock.
        self._cond = threading.Condition(threading.RLock())
        self._stopping = False
        # Set while a batch cannot be written for connection trouble: the
        # loop claims nothing meanwhile (see ``failing``).
        self._failing = False
        super().__init__("durable-jobs-completer")

    def submit(self, outcome: Outcome) -> None:
        with self._cond:
            self._pending.append(outcome)
            self._cond.notify_all()

    def unwritten(self) -> list[Outcome]:
        """Outcomes submitted and not yet written (a forced exit writes them itself)."""
        with self._cond:
            return list(self._pending)

    def backlog(self) -> int:
        """Outcomes handed over but not yet written."""
        with self._cond:
            return len(self._pending) + self._writing

    @property
    def failing(self) -> bool:
        """Whether the last write failed for connection trouble and is being retried.

        The claim may still work meanwhile (its connection is another one), so a
        worker that kept claiming would run jobs whose outcomes pile up
        unwritten, up to the backlog cap, each of them to be run again if the
        worker dies before the database is back. The loop stops claiming instead.
        """
        return self._failing

    def flush(self, timeout: float) -> bool:
        """Wait until every outcome submitted so far is written; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._writing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    #: After the flush: the thread has only to see the stop.
    stop_timeout = 1.0

    def stop(self, timeout: float | None = None) -> bool:
        """Write what was submitted (up to ``timeout`` s), then end; False: some was not."""
        written = self.flush(self.stop_timeout if timeout is None else timeout)
        super().stop()
        return written

    def _request_stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._stopping:
                        self._cond.wait()
                    if self._stopping and not self._pending:
                        return
                    batch = self._pending[:MAX_BATCH]
                    del self._pending[:MAX_BATCH]
                    self._writing = len(batch)
                other_databases.refresh(self._alias)  # for the receivers of what it announces
                written = self._write(batch)
                with self._cond:
                    self._writing = 0
                    self._cond.notify_all()
                self._on_written(batch, written)
        finally:
            connections.close_all()  # the queue's, and what receivers opened

    def _write(self, batch: list[Outcome]) -> set[uuid.UUID]:
        """Write ``batch``; retry through connection trouble, never drop it silently."""
        delay = RETRY_BASE_SECONDS
        while True:
            try:
                recorded = self._finish(batch)
                self._failing = False
                return recorded
            except (OperationalError, InterfaceError) as exc:
                self._failing = True
                logger.warning(
                    "Could not record %s outcome(s), retrying in %.1fs: %s", len(batch), delay, exc
                )
                connections[self._alias].close()
                if self._stopping and delay >= RETRY_CAP_SECONDS:
                    logger.error(
                        "Giving up on %s outcome(s) at shutdown; their leases will expire "
                        "and the reaper will retry them.",
                        len(batch),
                    )
                    self._failing = False
                    return set()
                time.sleep(delay)
                delay = min(RETRY_CAP_SECONDS, delay * 2)
            except DatabaseError:
                # The database answered (it refused a row): not connection
                # trouble, and the loop must not wait for a write that may
                # never come.
                self._failing = False
                if len(batch) == 1:
                    logger.exception(
                        "Could not record the outcome of job %s; its lease will expire "
                        "and the reaper will retry it.",
                        batch[0].job_id,
                    )
                    return set()
                # Isolate the row the database refuses from the others.
                written: set[uuid.UUID] = set()
                for outcome in batch:
                    written |= self._write([outcome])
                return written

    def _finish(self, batch: list[Outcome]) -> set[uuid.UUID]:
        cancelled: set[uuid.UUID] = set()
        written = db.record_outcomes(
            self._alias, batch, history_limit=self._history_limit, cancelled_children=cancelled
        )
        # Committed: the waiting jobs that a dead or cancelled parent
        # cancelled finished too, without a handler (Django tasks listen).
        hooks.jobs_finished(cancelled, self._alias)
        return written
