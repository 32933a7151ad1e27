"""Flow control's rules: the per-queue limits of ``DURABLE_JOBS["QUEUES"]``.

``{"emails": {"rate_limit": "10/s", "concurrency": 4}}``: at most 10 starts
of ``emails`` jobs in any one-second window, and at most 4 running at once,
both counted over every worker. This module reads and checks the setting,
so the system check, the worker, the REST API and the CLI agree on what it
says, and holds the one rule that applies it: ``room()``, how many jobs of a
queue may start now given what the database counts (``FlowCounts``). The
claim (``db.claim_limited``, under the queue's lock) and the held-back
counts (``held_back.py``) both call it; neither reads the database here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from .names import is_queue_name
from .rates import RATE_LIMIT_MAX, RATE_UNITS, FlowError, RateLimit, parse_rate_limit

__all__ = [
    "CONCURRENCY_MAX",
    "RATE_LIMIT_MAX",
    "RATE_UNITS",
    "FlowCounts",
    "FlowError",
    "QueueLimits",
    "RateLimit",
    "Room",
    "parse_queues",
    "parse_rate_limit",
    "queue_limits",
    "room",
]

#: The most jobs of one queue the ``concurrency`` limit may allow.
CONCURRENCY_MAX = 10_000
QUEUE_OPTIONS = ("rate_limit", "concurrency")
#: Why a claim held work back: the ``reason`` label of ``durable_jobs_throttled_total``.
THROTTLE_REASONS = ("rate_limit", "concurrency", "key", "paused")
#: The queue limits ``room()`` applies, in its order: a job held back by
#: several is counted under the first (``held_back.py``).
QUEUE_LIMIT_REASONS = ("concurrency", "rate_limit")


@dataclass(frozen=True)
class QueueLimits:
    """A queue's cluster-wide limits; ``None``: not limited that way."""

    rate_limit: RateLimit | None = None
    concurrency: int | None = None

    @property
    def limited(self) -> bool:
        return self.rate_limit is not None or self.concurrency is not None

    def as_dict(self) -> dict[str, Any]:
        """For the REST API and the CLI: ``{"rate_limit": "10/s", "concurrency": 4}``."""
        return {
            "rate_limit": None if self.rate_limit is None else str(self.rate_limit),
            "concurrency": self.concurrency,
        }


@dataclass(frozen=True)
class FlowCounts:
    """What the cluster-wide limits of one queue count, now, over every worker.

    Read by ``db/`` (``throttle_state``: each column, by name, is a field
    here); a new rule that counts something new adds its field here and its
    column there.
    """

    #: Jobs of the queue running on a live lease (a dead worker's stop counting
    #: when their lease expires).
    running: int = 0
    #: Starts within the queue's rate window (0 without a rate limit).
    recent_starts: int = 0


class Room(NamedTuple):
    """How many jobs of a queue may start now, and which limit (if any) says no more."""

    allowed: int
    #: The limit that cut ``want`` down (a ``THROTTLE_REASONS`` entry); None: none did.
    held_by: str | None


def room(limits: QueueLimits, counts: FlowCounts, want: int) -> Room:
    """How many of ``want`` jobs of a queue with ``limits`` may start now, and why not more.

    The one statement of "which limit wins": each limit with less room than
    what is left cuts it down and becomes the reason, in this order, so that
    a queue whose concurrency is full is held by its concurrency even when
    its rate window is full too (the later limit cuts only below what the
    earlier left). ``want=1`` asks "is the queue full, and by what".
    """
    allowed, held_by = want, None
    if limits.concurrency is not None and limits.concurrency - counts.running < allowed:
        allowed, held_by = max(0, limits.concurrency - counts.running), "concurrency"
    rate = limits.rate_limit
    if rate is not None and rate.count - counts.recent_starts < allowed:
        allowed, held_by = max(0, rate.count - counts.recent_starts), "rate_limit"
    return Room(allowed, held_by)


def describe_limits(limits: Mapping[str, Any] | None) -> str:
    """``QueueLimits.as_dict()`` as text for people (the CLI, the admin):
    ``"rate_limit 10/s, concurrency 4"``; ``""`` for none."""
    return ", ".join(f"{key} {value}" for key, value in (limits or {}).items() if value)


def parse_concurrency(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= CONCURRENCY_MAX:
        raise FlowError(
            f"concurrency must be an integer from 1 to {CONCURRENCY_MAX}, got {value!r}"
        )
    return value


def parse_queues(value: Any) -> dict[str, QueueLimits]:
    """The whole ``QUEUES`` setting; ``FlowError`` naming the first bad entry."""
    if not isinstance(value, Mapping):
        raise FlowError(f"QUEUES must be a dict of queue names to options, got {value!r}")
    limits: dict[str, QueueLimits] = {}
    for name, options in value.items():
        if not isinstance(name, str) or not is_queue_name(name):
            raise FlowError(f"QUEUES: {name!r} is not a valid queue name")
        if not isinstance(options, Mapping):
            raise FlowError(f"QUEUES[{name!r}] must be a dict of options, got {options!r}")
        unknown = sorted(set(options) - set(QUEUE_OPTIONS))
        if unknown:
            raise FlowError(
                f"QUEUES[{name!r}]: unknown option(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(QUEUE_OPTIONS)}"
            )
        try:
            rate = options.get("rate_limit")
            concurrency = options.get("concurrency")
            limits[name] = QueueLimits(
                rate_limit=None if rate is None else parse_rate_limit(rate),
                concurrency=None if concurrency is None else parse_concurrency(concurrency),
            )
        except FlowError as exc:
            raise FlowError(f"QUEUES[{name!r}]: {exc}") from None
    return limits


def is_queues(value: Any) -> bool:
    try:
        parse_queues(value)
    except FlowError:
        return False
    return True


def queue_limits() -> dict[str, QueueLimits]:
    """The limited queues of the current settings (read each time: override_settings works)."""
    from .conf import jobs_settings

    return {name: q for name, q in parse_queues(jobs_settings.QUEUES).items() if q.limited}
