"""``concurrency_key`` over REST: stored, shown in the detail, refused with a 400 when invalid."""

from __future__ import annotations

import pytest

from django_durable_jobs.models import Job
from tests.factories import Api

from .helpers import assert_error, job_body

pytestmark = pytest.mark.django_db


def test_post_with_a_concurrency_key_stores_it_and_detail_shows_it(staff: Api) -> None:
    response = staff.post("/api/jobs", job_body("ck-1", concurrency_key="customer:42"))
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    assert Job.objects.get(pk=job_id).concurrency_key == "customer:42"
    assert staff.get(f"/api/jobs/{job_id}").json()["concurrency_key"] == "customer:42"


@pytest.mark.parametrize("key", ["", "x" * 256, 7, None])
def test_a_bad_concurrency_key_is_a_400_naming_the_field(staff: Api, key: object) -> None:
    response = staff.post("/api/jobs", job_body("ck-2", concurrency_key=key))
    body = assert_error(response, 400, "invalid")
    assert list(body["detail"]) == ["concurrency_key"], body
    assert not Job.objects.exists()
