"""``timeout`` over REST (up to API_MAX_TIMEOUT_SECONDS; shown in detail), the CLI and the admin."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job
from tests.factories import Api

from .helpers import assert_error, job_body

pytestmark = pytest.mark.django_db


def test_post_with_a_timeout_stores_it_and_detail_shows_it(staff: Api) -> None:
    response = staff.post("/api/jobs", job_body("t-1", timeout=2.5))
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    assert Job.objects.get(pk=job_id).timeout == 2.5
    detail = staff.get(f"/api/jobs/{job_id}").json()
    assert detail["timeout"] == 2.5
    # Not in the list's rows (DESIGN.md's fixed fields), only in the detail.
    assert "timeout" not in staff.get("/api/jobs").json()["results"][0]


def test_without_a_timeout_detail_shows_null(staff: Api) -> None:
    job_id = staff.post("/api/jobs", job_body("t-2")).json()["id"]
    assert staff.get(f"/api/jobs/{job_id}").json()["timeout"] is None


def test_a_replay_with_another_timeout_is_a_conflict(staff: Api) -> None:
    assert staff.post("/api/jobs", job_body("t-3", timeout=5)).status_code == 201
    assert staff.post("/api/jobs", job_body("t-3", timeout=5)).status_code == 200
    body = assert_error(
        staff.post("/api/jobs", job_body("t-3", timeout=6)), 409, "idempotency_conflict"
    )
    assert body["differences"] == ["timeout"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "more than 0"),
        (-1, "more than 0"),
        (3600.5, "at most 3600"),
        ("10", "must be a number"),
        (True, "must be a number"),
        (None, "may not be null"),
    ],
)
def test_an_invalid_timeout_is_a_400_on_the_field(staff: Api, value: Any, message: str) -> None:
    body = assert_error(staff.post("/api/jobs", job_body("t-bad", timeout=value)), 400, "invalid")
    assert list(body["detail"]) == ["timeout"], body
    assert message in body["detail"]["timeout"][0], body
    assert not Job.objects.exists()


def test_the_maximum_is_a_setting(staff: Api) -> None:
    with override_settings(DURABLE_JOBS={"API_MAX_TIMEOUT_SECONDS": 10}):
        assert_error(staff.post("/api/jobs", job_body("t-4", timeout=11)), 400, "invalid")
        assert staff.post("/api/jobs", job_body("t-4", timeout=10)).status_code == 201


def test_the_schema_documents_the_timeout() -> None:
    response = Client().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schemas = response.json()["components"]["schemas"]
    request = next(s for name, s in schemas.items() if "timeout" in s.get("properties", {}))
    assert "API_MAX_TIMEOUT_SECONDS" in request["properties"]["timeout"]["description"]


def test_jobs_show_includes_the_timeout() -> None:
    job = enqueue("tests.record", timeout=2.5).job
    out = io.StringIO()
    call_command("jobs", "show", str(job.pk), "--json", stdout=out)
    assert json.loads(out.getvalue())["timeout"] == 2.5
    out = io.StringIO()
    call_command("jobs", "show", str(job.pk), stdout=out)
    assert "timeout: 2.5" in out.getvalue().splitlines()


def test_the_admin_detail_shows_the_timeout(admin_client: Client) -> None:
    job = enqueue("tests.record", timeout=7.25).job
    response = admin_client.get(f"/admin/durable_jobs/job/{job.pk}/change/")
    assert response.status_code == 200
    content = response.content.decode()
    assert "Timeout" in content and "7.25" in content
