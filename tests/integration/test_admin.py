from __future__ import annotations

import pytest
from django.test import Client

from django_durable_jobs import enqueue

pytestmark = pytest.mark.django_db


def test_the_job_list_and_detail_render_read_only(admin_client: Client) -> None:
    job = enqueue("tests.admin", {"x": 1}, idempotency_key="admin-1").job
    response = admin_client.get("/admin/durable_jobs/job/")
    assert response.status_code == 200
    assert str(job.pk) in response.content.decode()
    response = admin_client.get(f"/admin/durable_jobs/job/?q={job.pk}")
    assert str(job.pk) in response.content.decode()
    response = admin_client.get(f"/admin/durable_jobs/job/{job.pk}/change/")
    assert response.status_code == 200
    assert "tests.admin" in response.content.decode()
    assert admin_client.get("/admin/durable_jobs/job/add/").status_code == 403
