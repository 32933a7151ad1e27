"""Hypothesis strategies for ``enqueue()``'s arguments: valid values, and anything at all.

The valid strategies are written from the documented rules (docs/reference/
python-api.md, DESIGN.md), not from ``validation.py``, so that a rule the
code forgets to apply, or applies too widely, shows up as a failure.
"""

from __future__ import annotations

import string
from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from django_durable_jobs.constants import (
    CONCURRENCY_KEY_MAX_LENGTH,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    MAX_ATTEMPTS_LIMIT,
    MAX_DELAY_SECONDS,
    PRIORITY_MAX,
    PRIORITY_MIN,
    TYPE_MAX_LENGTH,
)
from django_durable_jobs.names import OWN_TYPE_PREFIX

#: Text as PostgreSQL can store it: no NUL, no lone surrogates (not UTF-8).
storable_characters = st.characters(codec="utf-8", exclude_characters="\x00")
storable_text = st.text(storable_characters)


def _name(max_length: int) -> st.SearchStrategy[str]:
    """A non-blank name without NUL (idempotency and concurrency keys)."""
    return st.text(storable_characters, min_size=1, max_size=max_length).filter(str.strip)


#: Names a project may give its job types: the package's own prefix is refused (its types).
type_names = st.text(storable_characters, min_size=1, max_size=TYPE_MAX_LENGTH).filter(
    lambda s: s.strip() == s and s != "" and not s.startswith(OWN_TYPE_PREFIX)
)
#: The package's own names, which enqueue refuses from a project.
own_type_names = st.sampled_from([OWN_TYPE_PREFIX, OWN_TYPE_PREFIX + "bulk_cancel"])
queue_names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}", fullmatch=True)
idempotency_keys = _name(IDEMPOTENCY_KEY_MAX_LENGTH)
concurrency_keys = _name(CONCURRENCY_KEY_MAX_LENGTH)
priorities = st.integers(PRIORITY_MIN, PRIORITY_MAX)
max_attempts = st.integers(1, MAX_ATTEMPTS_LIMIT)

#: JSON values Python's json module writes and PostgreSQL's jsonb stores.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**40), 10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | storable_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(storable_text, children, max_size=4)
    ),
    max_leaves=12,
)
payloads = st.dictionaries(storable_text, json_values, max_size=6)

#: A delay: seconds (int or float) or a timedelta, from 0 to 100 years.
delays = (
    st.integers(0, MAX_DELAY_SECONDS)
    | st.floats(0, MAX_DELAY_SECONDS)
    | st.timedeltas(timedelta(0), timedelta(seconds=MAX_DELAY_SECONDS))
)
#: A time limit: more than 0 s and at most 100 years.
timeouts = (
    st.integers(1, MAX_DELAY_SECONDS)
    | st.floats(0, MAX_DELAY_SECONDS, exclude_min=True)
    | st.timedeltas(timedelta(microseconds=1), timedelta(seconds=MAX_DELAY_SECONDS))
)
_UTC_MIN = datetime(1, 1, 2, tzinfo=timezone.utc)
_UTC_MAX = datetime(9999, 12, 30, tzinfo=timezone.utc)
#: An aware time in any zone (fixed offsets and IANA zones), inside the range
#: that exists in UTC (a naive datetime is refused when USE_TZ is on).
run_ats = st.datetimes(
    min_value=datetime(1, 1, 1),
    max_value=datetime(9999, 12, 31, 23, 59, 59),
    timezones=st.timezones()
    | st.builds(timezone, st.timedeltas(-timedelta(hours=23), timedelta(hours=23))),
).filter(lambda d: _UTC_MIN <= d <= _UTC_MAX)
on_parent_failures = st.sampled_from(["cancel", "run"])

#: Anything a caller might pass by mistake, some of it valid by chance.
anything: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers() | st.integers(-(10**400), 10**400),
    st.floats(),
    st.text(),
    st.lists(st.sampled_from(["\x00", "\ud800", "\udfff", " ", "\n", ":", ",", "\\u0000"])).map(
        "".join
    ),
    st.binary(max_size=8),
    st.timedeltas(),
    st.datetimes(),
    st.datetimes(timezones=st.timezones()),
    st.uuids(),
    st.lists(st.integers() | st.text(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
    st.dictionaries(st.integers() | st.tuples(st.integers()), st.integers(), max_size=2),
    st.just(object()),
    st.just({"nested": [1, {"deep": "\x00"}]}),
    st.just([float("nan")]),
    st.sampled_from(list(string.whitespace)),
)

#: Each argument's valid values (``depends_on`` is drawn by the tests, which
#: need parents that exist).
VALID: dict[str, st.SearchStrategy[Any]] = {
    "payload": payloads,
    "idempotency_key": idempotency_keys,
    "queue": queue_names,
    "priority": priorities,
    "max_attempts": max_attempts,
    "delay": delays,
    "run_at": run_ats,
    "timeout": timeouts,
    "concurrency_key": concurrency_keys,
    "on_parent_failure": on_parent_failures,
}


@st.composite
def valid_arguments(draw: st.DrawFn) -> dict[str, Any]:
    """``enqueue()``'s keyword arguments, each valid and present or not (not delay and run_at)."""
    arguments: dict[str, Any] = {"type": draw(type_names)}
    for name, values in VALID.items():
        if draw(st.booleans()):
            arguments[name] = draw(values)
    if "delay" in arguments and "run_at" in arguments:
        del arguments[draw(st.sampled_from(["delay", "run_at"]))]
    return arguments


@st.composite
def any_arguments(draw: st.DrawFn) -> dict[str, Any]:
    """``enqueue()``'s keyword arguments, each valid, anything or absent (``type`` is given)."""
    arguments: dict[str, Any] = {"type": draw(type_names | own_type_names | anything)}
    for name, values in {**VALID, "depends_on": st.lists(st.uuids(), max_size=2)}.items():
        choice = draw(st.sampled_from(["absent", "valid", "anything"]))
        if choice == "valid":
            arguments[name] = draw(values)
        elif choice == "anything":
            arguments[name] = draw(anything)
    return arguments
