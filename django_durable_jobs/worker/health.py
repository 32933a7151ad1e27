"""What a worker's ``/healthz`` says (``metrics_server.py`` serves it)."""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError

from .. import doctor
from .config import WorkerConfig
from .listener import Listener
from .maintenance import Maintenance


class WorkerHealth:
    """``/healthz``'s questions, asked of a ``Worker`` (its base class): answered from the
    state the worker keeps, by the functions below."""

    config: WorkerConfig
    listener: Listener | None
    maintenance: Maintenance
    loop_alive: bool
    claim_failing: bool

    def healthy(self, now: float | None = None) -> bool:
        """The loop, its claims and the heartbeats work."""
        return healthy(
            time.monotonic() if now is None else now,
            loop_alive=self.loop_alive,
            claim_failing=self.claim_failing,
            maintenance=self.maintenance,
            poll_interval=self.config.poll_interval,
        )

    @property
    def notifications_arriving(self) -> bool | None:
        """Whether the last probe of the LISTEN connection arrived (None: not known)."""
        return notifications_arriving(self.listener)

    def health_notes(self) -> list[str]:
        """Lines that qualify ``/healthz``'s answer."""
        return health_notes(self.listener, self.config.poll_interval, self.config.alias)


def healthy(
    now: float,
    *,
    loop_alive: bool,
    claim_failing: bool,
    maintenance: Maintenance,
    poll_interval: float,
) -> bool:
    """The loop runs, its last claim worked, and the maintenance thread reached the
    database within three heartbeats."""
    last = maintenance.last_heartbeat_ok
    return (
        loop_alive
        and not claim_failing
        and last is not None
        and now - last <= 3 * maintenance.heartbeat_interval + poll_interval
    )


def notifications_arriving(listener: Listener | None) -> bool | None:
    """Whether the last probe of the LISTEN connection arrived (None: not known yet,
    or the worker does not listen)."""
    if listener is None or listener.probe is None:
        return None
    return listener.probe.arriving


logger = logging.getLogger("django_durable_jobs.worker")


def health_notes(
    listener: Listener | None, poll_interval: float, alias: str | None = None
) -> list[str]:
    """Lines that qualify the answer, never change it: notifications not arriving (the
    worker polls), the database's vacuum horizon held too long and job tables with too
    many dead tuples (``doctor.health_notes``: restarting the worker would not help)."""
    notes = []
    if notifications_arriving(listener) is False:
        notes.append(
            f"notifications: not arriving (polling every {poll_interval:g}s; "
            "see DURABLE_JOBS['LISTEN_DATABASE'])"
        )
    try:
        notes += doctor.health_notes(doctor.cached_reading(alias))
    except DatabaseError as exc:  # the first line says whether the database answers
        logger.debug("Database health for /healthz unavailable: %s", exc)
    return notes
