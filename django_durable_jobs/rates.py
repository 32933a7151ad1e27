"""Rates such as ``"10/s"``: a queue's ``rate_limit`` and ``API_FAILED_AUTH_RATE``.

Below ``conf`` (which validates settings with it) and ``flow`` (which reads
the queues' limits from the settings), so neither imports the other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: Window lengths a ``rate_limit`` may name.
RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
#: The most starts one rate limit may allow per window (the window row stays
#: small whatever the rate: claims close together share an entry).
RATE_LIMIT_MAX = 1_000_000
# ASCII only: \d and \s would otherwise take other scripts' digits and spaces.
_RATE = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*", re.ASCII)


class FlowError(ValueError):
    """A ``QUEUES`` entry that cannot be read; the message says which and why."""


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` starts in any window of ``seconds``."""

    count: int
    seconds: float

    def __str__(self) -> str:
        unit = {1.0: "s", 60.0: "m", 3600.0: "h"}[self.seconds]
        return f"{self.count}/{unit}"


def parse_rate_limit(value: Any) -> RateLimit:
    """``"10/s"``, ``"100/m"``, ``"1000/h"`` as a ``RateLimit``; ``FlowError`` otherwise."""
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise FlowError(f"rate_limit must read N/s, N/m or N/h (say '10/s'), got {value!r}")
    digits = match.group(1).lstrip("0") or "0"
    # Compared as text first: int() refuses more than 4,300 digits.
    count = int(digits) if len(digits) <= len(str(RATE_LIMIT_MAX)) else RATE_LIMIT_MAX + 1
    if not 1 <= count <= RATE_LIMIT_MAX:
        raise FlowError(f"rate_limit must allow from 1 to {RATE_LIMIT_MAX} starts, got {value!r}")
    return RateLimit(count, RATE_UNITS[match.group(2)])
