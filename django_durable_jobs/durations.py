"""Durations written the way operators type them: ``45s``, ``15m``, ``12h``, ``7d``.

Used by ``manage.py jobs prune --older-than`` and the ``RETENTION`` setting,
so that a retention period reads the same on the command line and in
settings. One number and one unit only: ``1d12h`` would be easy to misread
and ``36h`` says the same.
"""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_RE = re.compile(r"^(\d+)([smhdw])$")
#: Far past any sensible retention, and far inside what ``timedelta`` and
#: PostgreSQL intervals hold, so a typo (``7000000d``) is an error, not an overflow.
MAX_DURATION = timedelta(days=100 * 365)


def parse_duration(text: str) -> timedelta:
    """``"7d"`` -> ``timedelta(days=7)``; raise ``ValueError`` with a readable message.

    Zero (``0s``) is allowed: ``prune --older-than 0s`` means "every finished job".
    """
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a duration such as '45s', '15m', '12h' or '7d'")
    match = _DURATION_RE.match(text.strip().lower())
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: write a whole number and a unit, "
            "s (seconds), m (minutes), h (hours), d (days) or w (weeks), e.g. '45s' or '7d'"
        )
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"{text!r} is longer than {MAX_DURATION.days} days")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest exact ``parse_duration`` spelling of ``value`` (whole seconds)."""
    seconds = int(value.total_seconds())
    # Days, not weeks: "7d" is how retention periods are usually written.
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
