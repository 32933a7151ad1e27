"""Cursor pagination over jobs, newest first.

A cursor (not an offset) stays correct while jobs are being inserted at the
top, and costs the same on page 1000 as on page 1. ``id`` breaks ties
between jobs created in the same transaction (``enqueue_many`` gives them
one ``created_at``).

A page whose rows carry what ``?include=`` asked for (payloads, results,
tracebacks) is also bounded by size: ``paginate_within_budget`` ends it
before the row that would take its ``results`` over ``API_MAX_PAGE_BYTES``
(one row at least, or a cursor could not move past a row larger than the
budget), and its next cursor continues after the last row served.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db.models import Field, Func, IntegerField, QuerySet, TextField, Value
from django.db.models.functions import Cast, Coalesce
from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from ..conf import API_MAX_PAGE_SIZE, jobs_settings
from ..models import Job

#: What a listed row weighs without its included fields, for the first,
#: estimated, cut (ids, type, key, times: a few hundred bytes); the second
#: cut measures the rows as they are rendered.
SUMMARY_BYTES_ESTIMATE = 512
_TEXT = TextField()
#: The annotation with a row's included fields' size.
_SIZE = "included_bytes"


class JobCursorPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size_query_param = "page_size"
    max_page_size = API_MAX_PAGE_SIZE
    #: A smaller page than asked, set while ``paginate_within_budget`` cuts a page.
    _limit: int | None = None

    def get_page_size(self, request: Request) -> int:
        """``?page_size=`` (1 to the maximum) or ``API_PAGE_SIZE``; anything else is a 400."""
        if self._limit is not None:
            return self._limit
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

    def paginate_within_budget(
        self,
        queryset: QuerySet[Job],
        request: Request,
        view: APIView,
        include: Sequence[str],
        serialize: Callable[[list[Job]], list[dict[str, Any]]],
    ) -> list[dict[str, Any]]:
        """The page's rows, serialized, with ``include``'s fields, within ``API_MAX_PAGE_BYTES``.

        ``queryset`` defers the included fields: they are loaded only for the
        rows served. Two cuts, each a new page of fewer rows (DRF's own
        pagination again, so that its cursors stay right, backwards too): the
        database's measure of the included fields first, so that the process
        never loads much more than the budget; then the rows as rendered
        (JSON escapes make a text longer than its bytes). Rows are kept from
        the cursor's side: the first ones, or the last ones on a previous page.
        """
        budget = int(jobs_settings.API_MAX_PAGE_BYTES)
        measured = queryset.annotate(**{_SIZE: _bytes_of(include)})
        self._limit = None
        try:
            while True:
                page: list[Job] = self.paginate_queryset(measured, request, view) or []
                estimates = [SUMMARY_BYTES_ESTIMATE + getattr(row, _SIZE) for row in page]
                fit = self._fitting(estimates, budget)
                if fit < len(page):
                    self._limit = fit
                    continue
                _load(page, include)
                rows = serialize(page)
                renderer = JSONRenderer()
                fit = self._fitting([len(renderer.render(row)) for row in rows], budget)
                if fit == len(page):
                    return rows
                self._limit = fit
        finally:
            self._limit = None

    def _fitting(self, sizes: list[int], budget: int) -> int:
        """How many rows, from the cursor's side, fit in ``budget`` bytes (one at least).

        The rows as a JSON array: each row, a comma between rows, two brackets.
        """
        reverse = self.cursor is not None and self.cursor.reverse
        total = 2
        count = 0
        for size in reversed(sizes) if reverse else sizes:
            total += size + (1 if count else 0)
            if count and total > budget:
                break
            count += 1
        return count

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


def _bytes_of(include: Sequence[str]) -> Any:
    """The included fields' size in the row, as PostgreSQL's text of them (an integer)."""
    total: Any = Value(0)
    for name in include:
        size = Func(Cast(name, output_field=_TEXT), function="OCTET_LENGTH")
        total = total + Coalesce(size, Value(0), output_field=IntegerField())
    return Cast(total, output_field=IntegerField())


def _load(page: list[Job], include: Sequence[str]) -> None:
    """Load ``include``'s deferred fields for the page's rows, in one query."""
    if not page or not include:
        return
    using = page[0]._state.db
    values = Job.objects.using(using).filter(pk__in=[job.pk for job in page])
    loaded = {row[0]: row[1:] for row in values.values_list("pk", *include)}
    # A row pruned since the page was read: its fields' defaults, not a query per row.
    gone = tuple(_default(name) for name in include)
    for job in page:
        for name, value in zip(include, loaded.get(job.pk, gone), strict=True):
            # A deferred field is a plain attribute once set.
            setattr(job, name, value)


def _default(name: str) -> Any:
    field = Job._meta.get_field(name)
    return field.get_default() if isinstance(field, Field) else None
