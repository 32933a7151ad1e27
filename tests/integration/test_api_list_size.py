"""``GET /api/jobs`` answers summaries, and pages bounded by size with ``?include=``.

Each row of a list once carried the job's payload and traceback: 1,000 rows
of 1 MiB payloads made one page a gigabyte (issue 22, finding 5).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs import enqueue_many
from django_durable_jobs.models import Job, JobStatus
from tests.factories import Api, make_job, queue_connection

from .helpers import assert_error

pytestmark = pytest.mark.django_db

MIB = 1_048_576
TYPE = "example.echo"
BUDGET = 3 * MIB + MIB // 2


def _big_jobs(count: int) -> list[str]:
    """``count`` jobs of a 1 MiB payload each, newest first as the list orders them.

    Each its own ``created_at``: DRF's cursor counts rows of one time by offset,
    and its ``previous`` link from a short last page of such ties is off (with
    or without ``include``).
    """
    jobs = enqueue_many(
        [{"type": TYPE, "payload": {"i": i, "blob": "x" * MIB}} for i in range(count)]
    )
    now = timezone.now()
    for i, result in enumerate(jobs):
        Job.objects.filter(pk=result.job.pk).update(created_at=now - timedelta(seconds=i))
    return [
        str(pk) for pk in Job.objects.order_by("-created_at", "-id").values_list("pk", flat=True)
    ]


def _walk(api: Api, url: str | None) -> tuple[list[dict[str, Any]], list[int]]:
    """Every row following ``next`` from ``url``, and each page's size in bytes."""
    rows: list[dict[str, Any]] = []
    sizes: list[int] = []
    while url:
        response = api.get(url)
        assert response.status_code == 200, response.content[:500]
        sizes.append(len(response.content))
        page = response.json()
        rows += page["results"]
        url = page["next"]
    return rows, sizes


def test_a_list_row_is_a_summary_and_the_detail_has_everything(staff: Api) -> None:
    job = make_job(TYPE, {"blob": "x" * MIB}, status=JobStatus.DEAD, last_error="boom\n" * 1000)
    page = staff.get("/api/jobs?page_size=1000")
    assert page.status_code == 200
    (row,) = page.json()["results"]
    assert row["id"] == str(job.pk)
    assert not {"payload", "result", "last_error", "errors"} & set(row)
    assert len(page.content) < 2000
    detail = staff.get(f"/api/jobs/{job.pk}").json()
    assert detail["payload"] == {"blob": "x" * MIB}
    assert detail["last_error"] == "boom\n" * 1000
    assert {"result", "errors"} <= set(detail)


def test_a_summary_page_of_large_jobs_is_small_and_reads_no_payload(staff: Api) -> None:
    ids = _big_jobs(8)
    with CaptureQueriesContext(queue_connection) as queries:
        response = staff.get("/api/jobs?page_size=1000")
    assert [row["id"] for row in response.json()["results"]] == ids
    assert len(response.content) < 8 * 1000
    # The payload column is not even read from the database.
    (listing,) = (q["sql"] for q in queries if 'FROM "durable_jobs_job"' in q["sql"])
    assert '"payload"' not in listing and '"last_error"' not in listing


@pytest.mark.parametrize("reverse", [False, True], ids=["next", "previous"])
def test_included_fields_bound_the_page_by_size_and_the_cursor_reaches_every_row_once(
    staff: Api, reverse: bool
) -> None:
    ids = _big_jobs(9)
    with override_settings(DURABLE_JOBS={"API_MAX_PAGE_BYTES": BUDGET}):
        rows, sizes = _walk(staff, "/api/jobs?page_size=1000&include=payload")
        # Three 1 MiB rows fit in 3.5 MiB, a fourth does not.
        assert [len(p) for p in _pages(staff, "/api/jobs?page_size=1000&include=payload")] == [
            3,
            3,
            3,
        ]
        assert [row["id"] for row in rows] == ids
        assert all(row["payload"]["blob"] == "x" * MIB for row in rows)
        # The rows, and a few hundred bytes of links around them.
        assert all(size <= BUDGET + 1000 for size in sizes)
        if reverse:
            # Backwards from the last page, with the previous links: each row once too.
            last = _pages(staff, "/api/jobs?page_size=1000&include=payload", links=True)[-1]
            back: list[str] = []
            url = last["previous"]
            while url:
                page = staff.get(url).json()
                assert len(page["results"]) <= 3
                back = [row["id"] for row in page["results"]] + back
                url = page["previous"]
            assert back + [row["id"] for row in last["results"]] == ids


def _pages(api: Api, url: str | None, *, links: bool = False) -> list[Any]:
    pages: list[Any] = []
    while url:
        page = api.get(url).json()
        pages.append(page if links else page["results"])
        url = page["next"]
    return pages


def test_a_row_larger_than_the_budget_comes_alone(staff: Api) -> None:
    ids = _big_jobs(3)
    with override_settings(DURABLE_JOBS={"API_MAX_PAGE_BYTES": MIB // 2}):
        pages = _pages(staff, "/api/jobs?include=payload")
    assert [[row["id"] for row in page] for page in pages] == [[i] for i in ids]


def test_the_budget_counts_the_rows_as_rendered(staff: Api) -> None:
    # Newlines and quotes take two bytes each in JSON: PostgreSQL's measure
    # of the text is short of the page's, and the second cut catches it.
    text = '"\n' * 200_000
    for _ in range(4):
        make_job(TYPE, {}, status=JobStatus.DEAD, last_error=text)
    with override_settings(DURABLE_JOBS={"API_MAX_PAGE_BYTES": 1_700_000}):
        rows, sizes = _walk(staff, "/api/jobs?include=last_error,errors")
    assert len(rows) == 4 and all(row["last_error"] == text for row in rows)
    assert all(size <= 1_700_000 + 1000 for size in sizes)
    # 400 kB a row by PostgreSQL's measure (four would fit), 800 kB as JSON: two a page.
    assert len(sizes) == 2


def test_include_takes_each_field_and_refuses_others(staff: Api) -> None:
    make_job(TYPE, {"n": 1}, status=JobStatus.COMPLETED, result={"ok": True}, last_error="e")
    (row,) = staff.get("/api/jobs?include=result&include=errors,last_error").json()["results"]
    assert (row["result"], row["errors"], row["last_error"]) == ({"ok": True}, [], "e")
    assert "payload" not in row
    body = assert_error(staff.get("/api/jobs?include=payload,secret"), 400, "invalid")
    assert "secret" in body["detail"]["include"][0]
    # An empty name (the schema's items are field names) is a client's bug: said so.
    for query in ("include=", "include=payload,,result", "include=payload,"):
        body = assert_error(staff.get(f"/api/jobs?{query}"), 400, "invalid")
        assert "an empty field name" in body["detail"]["include"][0]
