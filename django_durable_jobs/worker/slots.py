"""How many slots a worker runs: the rule, and the command line's spelling of it.

A slot range is ``8`` (fixed) or ``2-16`` (elastic, from 2 up to 16): at
least 1, at most ``MAX_SLOTS``, the minimum not above the maximum. Per
queue (``emails:4,webhooks:1-8``) each queue is a valid queue name, listed
once, and the queues' maxima add up to at most ``MAX_SLOTS``.

Written once, here, and read by both doors: ``WorkerConfig`` (``Slots``,
``check_queue_slots``: a ``ValueError``) and ``runjobworker --concurrency /
--queues`` (``Slots.parse``, ``parse_queues``: a ``ValueError`` in the
command line's words, which the command turns into an argparse error).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..names import is_queue_name

#: The most handler threads one worker process may run, all groups together.
MAX_SLOTS = 1_000


class SlotsError(ValueError):
    """A slot range that breaks the rule; ``reason`` says which part."""

    #: A bound is below 1 or above ``MAX_SLOTS``.
    RANGE = "range"
    #: The minimum is above the maximum.
    ORDER = "order"

    def __init__(self, reason: str, minimum: int, maximum: int) -> None:
        super().__init__(
            f"slots must satisfy 1 <= minimum <= maximum <= {MAX_SLOTS}, got {minimum}-{maximum}"
        )
        self.reason = reason
        self.minimum = minimum
        self.maximum = maximum


@dataclass(frozen=True)
class Slots:
    """How many slots a group has: ``minimum == maximum`` for a fixed size."""

    minimum: int
    maximum: int

    def __post_init__(self) -> None:
        if not (1 <= self.minimum <= MAX_SLOTS and 1 <= self.maximum <= MAX_SLOTS):
            raise SlotsError(SlotsError.RANGE, self.minimum, self.maximum)
        if self.minimum > self.maximum:
            raise SlotsError(SlotsError.ORDER, self.minimum, self.maximum)

    @property
    def elastic(self) -> bool:
        return self.minimum < self.maximum

    def __str__(self) -> str:
        return f"{self.minimum}-{self.maximum}" if self.elastic else str(self.minimum)

    @classmethod
    def of(cls, value: int | tuple[int, int] | Slots) -> Slots:
        """From ``4`` (fixed) or ``(2, 16)`` (elastic)."""
        if isinstance(value, Slots):
            return value
        if isinstance(value, tuple):
            return cls(*value)
        return cls(value, value)

    @classmethod
    def parse(cls, text: str) -> Slots:
        """From ``"8"`` or ``"2-16"``, as typed; ``ValueError`` in the command line's words."""
        low, dash, high = text.strip().partition("-")
        try:
            minimum = int(low)
            maximum = int(high) if dash else minimum
        except ValueError:
            raise ValueError(
                f"{text!r} is not a number of slots N or a range MIN-MAX (e.g. '8' or '2-16')"
            ) from None
        try:
            return cls(minimum, maximum)
        except SlotsError as exc:
            if exc.reason == SlotsError.RANGE:
                raise ValueError(f"must be between 1 and {MAX_SLOTS}, got {text.strip()}") from None
            raise ValueError(
                f"{text.strip()}: the minimum {minimum} is more than the maximum {maximum}"
            ) from None


def check_queue_name(name: Any) -> str:
    """``name`` if it is a valid queue name (``names.validate_queue``), else ``ValueError``."""
    if not is_queue_name(name):
        raise ValueError(f"{name!r} is not a valid queue name (letters, digits, '_', '-' and '.')")
    return str(name)


def check_queue_slots(queue_slots: Mapping[str, int | tuple[int, int] | Slots]) -> dict[str, Slots]:
    """Validate per-queue slots; ``ValueError`` says what is wrong."""
    if not queue_slots:
        raise ValueError("queue_slots needs at least one queue")
    checked: dict[str, Slots] = {}
    for name, value in queue_slots.items():
        check_queue_name(name)
        try:
            checked[name] = Slots.of(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"queue {name!r}: {exc}") from None
    total = sum(slots.maximum for slots in checked.values())
    if total > MAX_SLOTS:
        raise ValueError(f"the queues' slots add up to {total}, over the limit of {MAX_SLOTS}")
    return checked


def parse_queues(text: str) -> frozenset[str] | dict[str, Slots]:
    """``"emails,default"`` (names: the queues share the pool) or
    ``"emails:4,default:2-8"`` (each queue has slots of its own), as typed.

    Every queue has a count or none does: with a mix it would be unclear how
    many slots the uncounted queues get. ``ValueError`` in the command
    line's words.
    """
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ValueError(
            f"{text!r} is not a comma-separated list of queue names "
            "(e.g. 'emails,default' or 'emails:4,default:8')"
        )
    counted: dict[str, Slots] = {}
    names: list[str] = []
    for item in items:
        name, colon, count = (part.strip() for part in item.partition(":"))
        if not name:
            raise ValueError(f"{item!r} has no queue name before ':'")
        check_queue_name(name)
        if name in names:
            raise ValueError(f"queue {name!r} is listed twice")
        names.append(name)
        if colon:
            try:
                counted[name] = Slots.parse(count)
            except ValueError as exc:
                raise ValueError(f"{item!r}: {exc}") from None
    if not counted:
        return frozenset(names)
    if len(counted) < len(names):
        uncounted = ", ".join(name for name in names if name not in counted)
        raise ValueError(
            f"{text!r} gives slots to some queues but not to {uncounted}: give every queue "
            "its slots (e.g. 'emails:4,default:8') or none (they then share --concurrency)"
        )
    return check_queue_slots(counted)
