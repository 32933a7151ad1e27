"""The LISTEN connection: wakes an idle worker as soon as a job is enqueued.

Enqueue sends ``NOTIFY <channel>, '<queue>'`` in its transaction, so the
notification arrives at commit. A pause or resume sends
``'queue_state:<queue>'`` on the same channel (``pausing.py``); those go to
``queue_state`` instead. Notifications can be missed (while this
connection reconnects, for example), which is why the worker also polls.

A cancel of a running job comes on the same channel as
``'cancel:<job id>'`` (``constants.CANCEL_NOTIFY_PREFIX``; a queue name
cannot contain ":"): ``on_cancel`` hears of it. Its fallback is the
maintenance thread's poll (``maintenance.py``).

The connection is ``listen_alias``'s (``LISTEN_DATABASE``), or the job
database's own. With a ``probe`` (``probe.py``) it also LISTENs on the
probe's channel, and this thread sends the probes and times them: the way
to learn that a transaction pooler swallows the notifications.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable

import psycopg

from .. import db
from ..constants import CANCEL_NOTIFY_PREFIX, QUEUE_STATE_NOTIFY_PREFIX
from .probe import NotificationProbe

logger = logging.getLogger("django_durable_jobs.worker")

RECONNECT_BASE_SECONDS = 0.5
RECONNECT_CAP_SECONDS = 30.0


class Listener:
    def __init__(
        self,
        alias: str,
        channel: str,
        queues: frozenset[str] | None,
        wake: Callable[[], None],
        on_cancel: Callable[[uuid.UUID], None] | None = None,
        *,
        queue_state: Callable[[str | None], None] | None = None,
        listen_alias: str | None = None,
        probe: NotificationProbe | None = None,
    ) -> None:
        self.listen_alias = alias if listen_alias is None else listen_alias
        self._params = db.connection_params(self.listen_alias)
        self._channel = channel
        self.probe = probe
        self._queues = queues
        self._wake = wake
        self._on_cancel = on_cancel
        # Called with the queue paused or resumed; None after a reconnect.
        self._queue_state = queue_state
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="durable-jobs-listener", daemon=True)
        self.connected = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        if self.probe is not None:
            self.probe.forget()

    def _run(self) -> None:
        delay = RECONNECT_BASE_SECONDS
        while not self._stop.is_set():
            try:
                with psycopg.connect(**self._params, autocommit=True) as conn:
                    db.listen(conn, self._channel)
                    probe = self.probe
                    if probe is not None:
                        db.listen(conn, probe.channel)
                        probe.listening()
                    if delay > RECONNECT_BASE_SECONDS:
                        logger.info("Listening again on channel %s", self._channel)
                    delay = RECONNECT_BASE_SECONDS
                    self.connected.set()
                    # Whatever was enqueued (or paused) while we were not listening.
                    self._wake()
                    if self._queue_state is not None:
                        self._queue_state(None)
                    while not self._stop.is_set():
                        if probe is not None:
                            probe.tick()
                        # A short timeout: stop() is noticed quickly at shutdown.
                        for notify in conn.notifies(timeout=0.25):
                            if probe is not None and notify.channel == probe.channel:
                                probe.heard(notify.payload)
                            elif notify.payload.startswith(CANCEL_NOTIFY_PREFIX):
                                self._cancel_notified(notify.payload)
                            elif notify.payload.startswith(QUEUE_STATE_NOTIFY_PREFIX):
                                if self._queue_state is not None:
                                    self._queue_state(
                                        notify.payload[len(QUEUE_STATE_NOTIFY_PREFIX) :]
                                    )
                            elif self._queues is None or notify.payload in self._queues:
                                self._wake()
            except psycopg.Error as exc:
                self.connected.clear()
                if self.probe is not None:
                    self.probe.not_listening()
                if self._stop.is_set():
                    return
                logger.warning(
                    "LISTEN connection lost (%s); reconnecting in %.1fs, polling meanwhile",
                    exc, delay,
                )  # fmt: skip
                self._stop.wait(delay)
                delay = min(RECONNECT_CAP_SECONDS, delay * 2)

    def _cancel_notified(self, payload: str) -> None:
        if self._on_cancel is None:
            return
        try:
            job_id = uuid.UUID(payload[len(CANCEL_NOTIFY_PREFIX) :])
        except ValueError:
            logger.warning("Ignoring a malformed cancel notification %r", payload)
            return
        self._on_cancel(job_id)
