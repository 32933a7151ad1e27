"""A JSON parser that never reads more than ``API_MAX_BODY_BYTES``.

DRF's ``JSONParser`` reads the whole stream before parsing. Here the
``Content-Length`` is checked before anything is read (``check_body_size``,
called from the views before authentication), and the parser itself reads
at most the limit plus one byte, so a body whose length was not announced
cannot make the process buffer more than the limit either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from django.utils.http import parse_header_parameters
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.parsers import BaseParser
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request

from ..conf import jobs_settings
from ..names import has_surrogates
from .errors import LengthRequired, PayloadTooLarge

#: Deeper JSON than this is refused: Python's and PostgreSQL's JSON code both
#: recurse, and a deep enough document would fail there with a 500.
MAX_JSON_DEPTH = 100


def too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The request body is larger than {limit} bytes (DURABLE_JOBS['API_MAX_BODY_BYTES']).",
        extra={"limit_bytes": limit},
    )


def announced_length(request: Request) -> int | None:
    value = request.META.get("CONTENT_LENGTH")
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def check_body_size(request: Request) -> None:
    """413 when the announced body is over the limit, 411 for a chunked POST.

    Django reads no body without a ``Content-Length`` (WSGI), and DRF treats
    such a request as empty; answering 411 beats a confusing "type is
    required" for a body that was sent but never read.
    """
    limit = jobs_settings.API_MAX_BODY_BYTES
    length = announced_length(request)
    if length is not None and length > limit:
        raise too_large(limit)
    chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    if chunked and not length and request.method == "POST":
        raise LengthRequired()


def check_json_content_type(request: Request) -> None:
    """415 unless a state-changing request says its body is ``application/json``.

    Whether or not the view reads a body: a cross-site HTML form can only send
    ``application/x-www-form-urlencoded``, ``multipart/form-data`` or
    ``text/plain``, and a cross-site ``fetch()`` that sends
    ``application/json`` needs a CORS preflight the API never grants. So no
    page of another site can make a browser requeue, cancel, pause or enqueue
    with the HTTP Basic credentials (or the token) it holds for this one.
    Checked before authentication: such a request costs no password check.
    """
    if request.method in SAFE_METHODS:
        return
    raw = request.META.get("CONTENT_TYPE", "")
    try:
        media_type, _ = parse_header_parameters(raw)
    except ValueError:  # an RFC 2231 parameter in an unknown charset
        media_type = ""
    if media_type != "application/json":
        shown = f"{raw[:100]!r}" if raw else "none"
        raise UnsupportedMediaType(
            raw,
            detail=(
                f"Send a JSON body with Content-Type: application/json ({{}} when there is "
                f"nothing to say); the request's Content-Type was {shown}."
            ),
        )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers deeper than ``limit`` (iterative, no recursion)."""
    return _walk(value, limit)[0]


def _walk(value: Any, limit: int) -> tuple[bool, bool]:
    """(nested deeper than ``limit``, holds a string with a lone surrogate), in one pass."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    surrogates = False
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            surrogates = surrogates or has_surrogates(item)
            continue
        if isinstance(item, Mapping):
            children: Any = [*item.keys(), *item.values()]
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True, surrogates
        stack.extend((child, depth + 1) for child in children)
    return False, surrogates


class BoundedJSONParser(BaseParser):
    """``application/json`` bodies up to ``API_MAX_BODY_BYTES``; strict JSON only."""

    media_type = "application/json"

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = jobs_settings.API_MAX_BODY_BYTES
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise too_large(limit)
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        try:
            text = raw.decode(encoding)
            data = json.loads(text, parse_constant=_reject_constant)
        except UnicodeDecodeError as exc:
            raise ParseError({"body": [f"is not valid {encoding}: {exc.reason}."]}) from None
        except ValueError as exc:
            raise ParseError({"body": [f"is not valid JSON: {exc}."]}) from None
        except RecursionError:
            raise ParseError({"body": ["is nested too deeply."]}) from None
        too_deep, surrogates = _walk(data, MAX_JSON_DEPTH)
        if too_deep:
            raise ParseError({"body": [f"is nested deeper than {MAX_JSON_DEPTH} levels."]})
        if surrogates:
            # json.loads() takes "\ud800" escapes alone; no UTF-8 text holds one,
            # and PostgreSQL refused the statement (a 500).
            raise ParseError(
                {"body": ["is not valid JSON text: a \\u escape is a lone surrogate."]}
            )
        return data
