"""Cursor pagination over jobs, newest first.

A cursor (not an offset) stays correct while jobs are being inserted at the
top, and costs the same on page 1000 as on page 1. ``id`` breaks ties
between jobs created in the same transaction (``enqueue_many`` gives them
one ``created_at``).
"""

from __future__ import annotations

from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from ..conf import API_MAX_PAGE_SIZE, jobs_settings


class JobCursorPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size_query_param = "page_size"
    max_page_size = API_MAX_PAGE_SIZE

    def get_page_size(self, request: Request) -> int:
        """``?page_size=`` (1 to the maximum) or ``API_PAGE_SIZE``; anything else is a 400."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return int(jobs_settings.API_PAGE_SIZE)
        # ASCII digits, few enough for int(): str.isdigit() also takes '²', which int() refuses.
        digits = raw.lstrip("0") or "0"
        if not (raw.isascii() and raw.isdigit()) or len(digits) > len(str(API_MAX_PAGE_SIZE)):
            digits = "0"
        if not 1 <= int(digits) <= API_MAX_PAGE_SIZE:
            raise ValidationError(
                {"page_size": [f"must be an integer from 1 to {API_MAX_PAGE_SIZE}."]}
            )
        return int(digits)

    def decode_cursor(self, request: Request) -> Cursor | None:
        # DRF answers a bad cursor with 404, which reads as "no such job".
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            cursor = None
            valid = False
        else:
            # The position is a created_at as the page wrote it; DRF filters by
            # whatever the (client-made) cursor holds, and Django's ValidationError
            # on a position that is no time was a 500.
            position = None if cursor is None else cursor.position
            # str(): the stubs type it int; DRF keeps the text of the token.
            valid = position is None or _is_time(str(position))
        if not valid:
            raise ValidationError({"cursor": ["is not a valid cursor."]})
        return cursor


def _is_time(text: str) -> bool:
    try:
        return "\x00" not in text and parse_datetime(text) is not None
    except ValueError:
        return False


class AuditCursorPagination(JobCursorPagination):
    """The audit trail, newest first (``id`` breaks ties within one transaction)."""

    ordering = ("-at", "-id")
