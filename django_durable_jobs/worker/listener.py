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
from ..conf import jobs_settings
from ..constants import CANCEL_NOTIFY_PREFIX, QUEUE_STATE_NOTIFY_PREFIX
from ..services import Service
from .probe import NotificationProbe

logger = logging.getLogger("django_durable_jobs.worker")


class Listener(Service):
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
        on_connected: Callable[[], None] | None = None,
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
        # Told before the wake-up of each (re)connect (the worker's wakefulness.py).
        self._on_connected = on_connected
        self._stop = threading.Event()
        # Ends the thread's read at once at a stop; the thread's own (_run).
        self._interrupt: db.Interrupt | None = None
        super().__init__("durable-jobs-listener")
        self.connected = threading.Event()

    stop_timeout = 2.0
    #: The longest one read waits: the probe's ticks (on_tick) run at least this often.
    read_timeout = 0.25

    @classmethod
    def for_worker(
        cls,
        alias: str,
        listen_alias: str | None,
        queues: frozenset[str] | None,
        poll_interval: float,
        wake: Callable[[], None],
        *,
        on_cancel: Callable[[uuid.UUID], None],
        queue_state: Callable[[str | None], None],
        on_connected: Callable[[], None] | None = None,
    ) -> Listener:
        """A worker's listener on ``NOTIFY_CHANNEL``, with its probe."""
        listen_alias = listen_alias or alias
        return cls(
            alias,
            str(jobs_settings.NOTIFY_CHANNEL),
            queues,
            wake,
            on_cancel=on_cancel,
            queue_state=queue_state,
            listen_alias=listen_alias,
            on_connected=on_connected,
            probe=NotificationProbe(
                alias=alias, listen_alias=listen_alias, poll_interval=poll_interval
            ),
        )

    def _request_stop(self) -> None:
        self._stop.set()
        # None before the thread made it: the loop sees _stop before its first read.
        interrupt = self._interrupt
        if interrupt is not None:
            interrupt.set()

    def stop(self, timeout: float | None = None) -> bool:
        stopped = super().stop(timeout)
        if self.probe is not None:
            self.probe.forget()
        return stopped

    def _run(self) -> None:
        self._interrupt = interrupt = db.Interrupt()
        try:
            self._listen(interrupt)
        finally:
            interrupt.close()

    def _listen(self, interrupt: db.Interrupt) -> None:
        probe = self.probe
        db.listen_loop(
            self._params,
            [self._channel] if probe is None else [self._channel, probe.channel],
            read_timeout=self.read_timeout,
            interrupt=interrupt,
            should_end=self._stop.is_set,
            pause=self._stop.wait,
            on_connect=self._connected,
            on_notify=self._heard,
            on_lost=self._lost,
            on_tick=None if probe is None else probe.tick,
            logger=logger,
            what="LISTEN connection",
            meanwhile="polling meanwhile",
        )

    def _connected(self) -> None:
        if self.probe is not None:
            self.probe.listening()
        self.connected.set()
        if self._on_connected is not None:
            self._on_connected()
        # Whatever was enqueued (or paused) while we were not listening.
        self._wake()
        if self._queue_state is not None:
            self._queue_state(None)

    def _lost(self) -> None:
        self.connected.clear()
        if self.probe is not None:
            self.probe.not_listening()

    def _heard(self, notify: psycopg.Notify) -> None:
        payload = notify.payload
        if self.probe is not None and notify.channel == self.probe.channel:
            self.probe.heard(payload)
        elif payload.startswith(CANCEL_NOTIFY_PREFIX):
            self._cancel_notified(payload)
        elif payload.startswith(QUEUE_STATE_NOTIFY_PREFIX):
            if self._queue_state is not None:
                self._queue_state(payload[len(QUEUE_STATE_NOTIFY_PREFIX) :])
        elif self._queues is None or payload in self._queues:
            self._wake()

    def _cancel_notified(self, payload: str) -> None:
        if self._on_cancel is None:
            return
        try:
            job_id = uuid.UUID(payload[len(CANCEL_NOTIFY_PREFIX) :])
        except ValueError:
            logger.warning("Ignoring a malformed cancel notification %r", payload)
            return
        self._on_cancel(job_id)
