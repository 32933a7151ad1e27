"""Time as the queue reads it: a number of seconds, and a duration text.

Each is defined once, here, and every reader uses it:

- *a number of seconds* (``seconds``, ``parse_seconds`` for command-line
  text): an ``int`` or a ``float`` (never a ``bool``), or a ``timedelta``
  where the caller takes one; finite; not negative, or more than 0 where
  zero makes no sense; at most a bound where one applies. Time limits,
  delays, the worker's options and the ``*_SECONDS`` settings read time
  this way. A refusal is a ``SecondsError`` whose ``reason`` says which
  part of the rule failed, so that each caller words it for its own users
  (``InvalidJob`` for ``enqueue``, an argparse error for the CLI).
- *a duration text* (``parse_duration``): ``45s``, ``15m``, ``12h``, ``7d``,
  ``2w``, as operators type them. Used by ``manage.py jobs prune
  --older-than``, the ``RETENTION`` setting and a schedule's ``every``, so
  that a period reads the same on the command line and in settings. One
  number and one unit only: ``1d12h`` would be easy to misread and ``36h``
  says the same.
"""

from __future__ import annotations

import math
import re
import sys
from datetime import timedelta
from typing import Any

from .constants import MAX_DELAY_SECONDS

#: The longest time the queue accepts where it bounds one (100 years): a
#: longer one is surely a unit mistake (milliseconds for seconds), and it
#: stays far inside what ``timedelta`` and PostgreSQL intervals hold.
MAX_SECONDS = float(MAX_DELAY_SECONDS)
MAX_DURATION = timedelta(seconds=MAX_DELAY_SECONDS)


class SecondsError(ValueError):
    """A value that is not an acceptable number of seconds.

    ``reason`` is one of the class's constants; ``seconds`` is the value as
    a number once it was one (``None`` for a ``TYPE`` error), ``maximum``
    the bound that applied.
    """

    TYPE = "type"
    NOT_FINITE = "not_finite"
    NEGATIVE = "negative"
    ZERO = "zero"
    TOO_LONG = "too_long"

    def __init__(
        self, reason: str, value: Any, seconds: float | None, maximum: float | None
    ) -> None:
        super().__init__(f"{value!r} is not an acceptable number of seconds ({reason})")
        self.reason = reason
        self.value = value
        self.seconds = seconds
        self.maximum = maximum


def is_number(value: Any) -> bool:
    """An ``int`` or a ``float``, not a ``bool`` (``True`` is no number of seconds)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def seconds(
    value: Any,
    *,
    allow_zero: bool = True,
    maximum: float | None = MAX_SECONDS,
    allow_timedelta: bool = True,
) -> float:
    """``value`` as a number of seconds, or ``SecondsError`` saying which rule it breaks.

    The checks run in this order, and the first that fails is the reason:
    the type, finiteness, the sign (zero refused unless ``allow_zero``),
    then ``maximum`` (``None``: no bound).
    """
    if allow_timedelta and isinstance(value, timedelta):
        number = value.total_seconds()
    elif is_number(value):
        try:
            number = float(value)
        except OverflowError:
            # An int beyond any float: as far from zero as a number of seconds gets.
            number = sys.float_info.max if value > 0 else -sys.float_info.max
    else:
        raise SecondsError(SecondsError.TYPE, value, None, maximum)
    if not math.isfinite(number):
        raise SecondsError(SecondsError.NOT_FINITE, value, number, maximum)
    if number < 0:
        raise SecondsError(SecondsError.NEGATIVE, value, number, maximum)
    if number == 0 and not allow_zero:
        raise SecondsError(SecondsError.ZERO, value, number, maximum)
    if maximum is not None and number > maximum:
        raise SecondsError(SecondsError.TOO_LONG, value, number, maximum)
    return number


def is_seconds(
    value: Any,
    *,
    allow_zero: bool = True,
    maximum: float | None = MAX_SECONDS,
    allow_timedelta: bool = True,
) -> bool:
    """Whether ``seconds`` accepts ``value`` under the same rule (for settings checks)."""
    try:
        seconds(value, allow_zero=allow_zero, maximum=maximum, allow_timedelta=allow_timedelta)
    except SecondsError:
        return False
    return True


def parse_seconds(text: str, *, allow_zero: bool) -> float:
    """``"2.5"`` -> ``2.5``: a number of seconds typed on a command line (no upper bound).

    ``ValueError`` with the message the CLI shows: ``'soon' is not a number
    of seconds``, ``must be a number of seconds > 0, got 0``.
    """
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if not is_seconds(number, allow_zero=allow_zero, maximum=None):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"must be a number of seconds {bound}, got {text}")
    return number


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# ASCII digits only (re.ASCII: \d would take any script's digits).
_DURATION_RE = re.compile(r"(\d+)([smhdw])", re.ASCII)
#: More significant digits than this is longer than MAX_SECONDS in any unit;
#: checked before int() (which refuses more than 4,300 digits).
_MAX_DIGITS = len(str(MAX_DELAY_SECONDS))


def parse_duration(text: str) -> timedelta:
    """``"7d"`` -> ``timedelta(days=7)``; raise ``ValueError`` with a readable message.

    Zero (``0s``) is allowed: ``prune --older-than 0s`` means "every finished job".
    """
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a duration such as '45s', '15m', '12h' or '7d'")
    match = _DURATION_RE.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: write a whole number and a unit, "
            "s (seconds), m (minutes), h (hours), d (days) or w (weeks), e.g. '45s' or '7d'"
        )
    digits = match.group(1).lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS:
        raise ValueError(f"{text!r} is longer than {MAX_DURATION.days} days")
    total = int(digits) * _UNITS[match.group(2)]
    if total > MAX_SECONDS:
        raise ValueError(f"{text!r} is longer than {MAX_DURATION.days} days")
    return timedelta(seconds=total)


def format_duration(value: timedelta) -> str:
    """The shortest exact ``parse_duration`` spelling of ``value`` (whole seconds)."""
    total = int(value.total_seconds())
    # Days, not weeks: "7d" is how retention periods are usually written.
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if total and total % size == 0:
            return f"{total // size}{unit}"
    return f"{total}s"
