"""Whether the worker's LISTEN connection hears what its main connection NOTIFYs.

A transaction pooler (PgBouncer in transaction mode, RDS Proxy, Supavisor's
transaction port) accepts ``LISTEN`` and answers it like PostgreSQL does,
then hands the server connection that ran it to other clients: the
notifications go there, never to the listener, and nothing says so. The
worker still works, by polling, but every job starts up to a poll interval
late. So the worker checks: on its main connection's route (the job
database's alias, which enqueues take too) it NOTIFYs a probe on a channel
of its own, which only its listener LISTENs on, when the listener
connects (and after each reconnect), then every ``PROBE_INTERVAL_SECONDS``;
the listener must hear it within ``PROBE_TIMEOUT_SECONDS``.

One missed probe: one WARNING that names LISTEN and ``LISTEN_DATABASE``,
``/healthz`` says "notifications: not arriving", and the gauge
``durable_jobs_worker_notifications_ok`` drops to 0. The next probe heard:
one INFO line, and the gauge back at 1. It catches more than poolers: a
``LISTEN_DATABASE`` that points at another database or at a read replica
(NOTIFY does not reach replicas) misses its probes too.

The probe runs on the listener's thread (``listener.py`` calls ``tick``
and ``heard``); its NOTIFY goes on a short connection of its own, opened
once per probe: a few minutes apart, that costs less than holding one more
connection open for the life of the worker.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from .. import db, metrics
from ..constants import PROBE_CHANNEL_PREFIX

logger = logging.getLogger("django_durable_jobs.worker")

#: How often a connected listener is probed again.
PROBE_INTERVAL_SECONDS = 120.0
#: How long a probe may take to arrive before notifications count as lost.
#: A NOTIFY sent in autocommit arrives in milliseconds; a busy machine may
#: take a little longer, a pooler never delivers it.
PROBE_TIMEOUT_SECONDS = 5.0
#: After a probe could not be sent (the main connection's database away), try again this soon.
PROBE_RETRY_SECONDS = 15.0
#: How long the probe's connection may take to open.
PROBE_CONNECT_TIMEOUT_SECONDS = 5


def probe_channel() -> str:
    """A channel for one worker's probes: ``durable_jobs_probe_`` and 20 random hex digits."""
    return f"{PROBE_CHANNEL_PREFIX}{uuid.uuid4().hex[:20]}"


class NotificationProbe:
    """The probe's state: when to send one, whether the last one arrived.

    ``arriving`` is None until a probe arrived or was missed, then True or
    False. ``send(payload)`` NOTIFYs ``payload`` on ``channel`` through the
    main connection's route (``notify_through(alias)`` by default; tests
    give their own). Only the listener's thread calls ``listening``,
    ``not_listening``, ``tick`` and ``heard``; any thread may read
    ``arriving``.
    """

    def __init__(
        self,
        *,
        alias: str,
        listen_alias: str,
        poll_interval: float,
        send: Callable[[str], None] | None = None,
        channel: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval: float = PROBE_INTERVAL_SECONDS,
        timeout: float = PROBE_TIMEOUT_SECONDS,
    ) -> None:
        self.alias = alias
        self.listen_alias = listen_alias
        self.channel = channel or probe_channel()
        self.poll_interval = poll_interval
        self.interval = interval
        self.timeout = timeout
        self.arriving: bool | None = None
        self._send = send or notify_through(alias, self.channel)
        self._clock = clock
        # When to send the next probe (None: not listening, no probe).
        self._next_at: float | None = None
        # When the probe in flight was sent (None: none in flight).
        self._sent_at: float | None = None
        self._sent = 0

    def listening(self) -> None:
        """The listener (re)connected and LISTENs on ``channel``: probe now."""
        self._next_at = self._clock()
        self._sent_at = None

    def not_listening(self) -> None:
        """The listener lost its connection: a probe in flight proves nothing."""
        self._next_at = None
        self._sent_at = None

    def tick(self) -> None:
        """Count a probe in flight for too long as missed; send the next one when due."""
        now = self._clock()
        if self._sent_at is not None and now - self._sent_at >= self.timeout:
            self._sent_at = None
            self._missed()
        if self._next_at is not None and now >= self._next_at:
            self._probe()

    def heard(self, payload: str) -> None:
        """A probe of this channel arrived (any of them: each proves delivery)."""
        self._sent_at = None
        if self.arriving is False:
            logger.info(
                "Notifications arrive again on the LISTEN connection (database %r): jobs "
                "start when they are enqueued, not at the next poll",
                self.listen_alias,
            )
        if self.arriving is not True:
            self.arriving = True
            metrics.set_notifications_ok(self.listen_alias, True)

    def forget(self) -> None:
        """The listener stopped: no more probes, and the gauge goes."""
        self.not_listening()
        metrics.set_notifications_ok(self.listen_alias, None)

    def _probe(self) -> None:
        self._sent += 1
        try:
            self._send(str(self._sent))
        except (psycopg.Error, OSError) as exc:
            # The claim and the heartbeat log the database's absence; retry soon.
            logger.debug("Could not send the notification probe: %s", exc)
            self._next_at = self._clock() + min(self.interval, PROBE_RETRY_SECONDS)
            return
        now = self._clock()
        # A probe still in flight keeps its own deadline: a new one must not
        # push it back.
        if self._sent_at is None:
            self._sent_at = now
        self._next_at = now + self.interval

    def _missed(self) -> None:
        if self.arriving is not False:
            if self.listen_alias == self.alias:
                fix = (
                    "A transaction pooler (PgBouncer in transaction mode, RDS Proxy, "
                    "Supavisor's port 6543) drops LISTEN: set DURABLE_JOBS['LISTEN_DATABASE'] "
                    "to the alias of a direct connection to the same database."
                )
            else:
                fix = (
                    "DURABLE_JOBS['LISTEN_DATABASE'] must reach the same database as the jobs, "
                    "directly or through a session-mode pool: not a transaction pooler, not "
                    "another database, not a read replica."
                )
            logger.warning(
                "Notifications are not arriving: this worker's LISTEN connection (database "
                "%r) did not hear, within %.0fs, the probe NOTIFY its main connection "
                "(database %r) sent. Jobs start at the next poll instead of at once (polling "
                "every %ss). %s Logged once, until notifications arrive again",
                self.listen_alias, self.timeout, self.alias, self.poll_interval, fix,
            )  # fmt: skip
            self.arriving = False
            metrics.set_notifications_ok(self.listen_alias, False)


def notify_through(alias: str, channel: str) -> Callable[[str], None]:
    """``send`` for the database ``alias``: a connection per probe, as Django's settings say.

    The parameters are read here, on the caller's thread: Django's
    connection objects are per thread.
    """
    params: dict[str, Any] = db.connection_params(alias)
    params.setdefault("connect_timeout", PROBE_CONNECT_TIMEOUT_SECONDS)

    def send(payload: str) -> None:
        with psycopg.connect(**params, autocommit=True) as conn:
            db.send_probe(conn, channel, payload)

    return send
