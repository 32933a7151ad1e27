"""Cursor pagination over jobs, newest first.

A cursor (not an offset) stays correct while jobs are being inserted at the
top, and costs the same on page 1000 as on page 1. ``id`` breaks ties
between jobs created in the same transaction (``enqueue_many`` gives them
one ``created_at``).
"""

from __future__ import annotations

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
        if not raw.isdigit() or not 1 <= int(raw) <= API_MAX_PAGE_SIZE:
            raise ValidationError(
                {"page_size": [f"must be an integer from 1 to {API_MAX_PAGE_SIZE}."]}
            )
        return int(raw)

    def decode_cursor(self, request: Request) -> Cursor | None:
        # DRF answers a bad cursor with 404, which reads as "no such job".
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise ValidationError({"cursor": ["is not a valid cursor."]}) from None
