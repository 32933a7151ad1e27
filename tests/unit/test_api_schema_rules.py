"""The OpenAPI schema's patterns state enqueue()'s name rules exactly (api/schema.py).

schemathesis sends what a pattern allows expecting a 2xx, and what it forbids
expecting a 4xx; a pattern wider or narrower than ``names.py`` fails there.
Here the two are compared directly, character by character and on drawn text.
"""

from __future__ import annotations

import re
import sys

from hypothesis import example, given
from hypothesis import strategies as st

from django_durable_jobs.api.schema import KEY_PATTERN, TYPE_PATTERN, WHITESPACE_CLASS
from django_durable_jobs.constants import QUEUE_NAME_PATTERN
from django_durable_jobs.exceptions import InvalidJob
from django_durable_jobs.names import validate_idempotency_key, validate_queue, validate_type


def accepts(validate: object, value: str) -> bool:
    try:
        validate(value)  # type: ignore[operator]
    except InvalidJob:
        return False
    return True


def test_the_whitespace_class_is_pythons_whitespace() -> None:
    python = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    schema = {
        chr(c) for c in range(sys.maxunicode + 1) if re.match(f"[{WHITESPACE_CLASS}]", chr(c))
    }
    assert schema == python


names = st.text(
    st.characters(codec="utf-8") | st.sampled_from([" ", "\x00", "\x1c", "\x85", "\ufeff"]),
    max_size=12,
)


@given(value=names)
@example(value="a\n")
@example(value="\ufeff")
@example(value=" a")
def test_the_type_pattern_accepts_what_validate_type_accepts(value: str) -> None:
    assert bool(re.fullmatch(TYPE_PATTERN, value)) == accepts(validate_type, value)


@given(value=names)
@example(value="\x85")
@example(value="\ufeff")
def test_the_key_pattern_accepts_what_validate_idempotency_key_accepts(value: str) -> None:
    assert bool(re.fullmatch(KEY_PATTERN, value)) == accepts(validate_idempotency_key, value)


@given(value=names | st.from_regex(QUEUE_NAME_PATTERN, fullmatch=True).map(lambda s: s[:100]))
@example(value="default\n")
def test_the_queue_pattern_accepts_what_validate_queue_accepts(value: str) -> None:
    # re.fullmatch: the schema's $ is the end of the string (ECMA-262), not
    # Python's "end, or before a final newline".
    assert bool(re.fullmatch(QUEUE_NAME_PATTERN, value)) == accepts(validate_queue, value)
