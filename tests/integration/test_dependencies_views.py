"""Dependencies over REST, in ``manage.py jobs`` and in the admin."""

from __future__ import annotations

import json
import uuid
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobDependency
from tests.factories import Api

from .helpers import job_body

pytestmark = pytest.mark.django_db

TYPE = "example.echo"


def test_rest_enqueue_with_depends_on_waits_and_lists_both_sides(staff: Api) -> None:
    parent = enqueue(TYPE).job
    response = staff.post(
        "/api/jobs", job_body(depends_on=[str(parent.pk)], on_parent_failure="run")
    )
    assert response.status_code == 201, response.content
    child = response.json()
    assert child["status"] == "waiting"
    assert child["depends_on"] == [str(parent.pk)] and child["dependents"] == []
    assert (child["on_parent_failure"], child["waiting_on"]) == ("run", 1)
    detail = staff.get(f"/api/jobs/{parent.pk}").json()
    assert detail["dependents"] == [child["id"]] and detail["depends_on"] == []
    replay = staff.post("/api/jobs", job_body(depends_on=[str(parent.pk)], on_parent_failure="run"))
    assert replay.status_code == 200 and replay.json()["id"] == child["id"]
    listed = staff.get("/api/jobs?status=waiting").json()["results"]
    assert [job["id"] for job in listed] == [child["id"]]
    assert "depends_on" not in listed[0]  # the list stays one query


@pytest.mark.parametrize(
    ("depends_on", "message"),
    [
        ("not-a-list", "must be an array of job ids"),
        ([1], "item 0 is a number"),
        (["nope"], "is not a job id"),
    ],
)
def test_rest_refuses_malformed_depends_on(staff: Api, depends_on: Any, message: str) -> None:
    response = staff.post("/api/jobs", job_body(depends_on=depends_on))
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid" and message in body["detail"]["depends_on"][0]


def test_rest_unknown_parents_are_a_400_naming_them(staff: Api) -> None:
    ghost = uuid.uuid4()
    response = staff.post("/api/jobs", job_body(depends_on=[str(ghost)]))
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    (message,) = response.json()["detail"]["depends_on"]
    assert str(ghost) in message
    assert not Job.objects.exists()


def test_rest_refuses_an_unknown_on_parent_failure(staff: Api) -> None:
    response = staff.post("/api/jobs", job_body(on_parent_failure="ignore"))
    assert response.status_code == 400
    assert "on_parent_failure" in response.json()["detail"]


def test_rest_cancel_of_a_waiting_job_cancels_it_and_its_dependents(staff: Api) -> None:
    parent = enqueue(TYPE).job
    waiting = enqueue(TYPE, depends_on=[parent]).job
    below = enqueue(TYPE, depends_on=[waiting]).job
    response = staff.post(f"/api/jobs/{waiting.pk}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert Job.objects.get(pk=below.pk).status == "cancelled"


def test_jobs_show_lists_parents_and_dependents() -> None:
    a, b = enqueue(TYPE).job, enqueue(TYPE).job
    child = enqueue(TYPE, depends_on=[a, b]).job
    out = StringIO()
    call_command("jobs", "show", str(child.pk), "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert shown["depends_on"] == sorted([str(a.pk), str(b.pk)])
    assert (shown["status"], shown["waiting_on"], shown["dependents"]) == ("waiting", 2, [])
    text = StringIO()
    call_command("jobs", "show", str(a.pk), stdout=text)
    assert f"dependents: {child.pk}" in text.getvalue()
    listing = StringIO()
    call_command("jobs", "list", "--status", "waiting", "--json", stdout=listing)
    assert [row["id"] for row in json.loads(listing.getvalue())] == [str(child.pk)]


def admin_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
    return client


def test_the_admin_links_parents_and_dependents_and_filters_waiting_jobs() -> None:
    parent = enqueue(TYPE).job
    child = enqueue(TYPE, depends_on=[parent]).job
    client = admin_client()
    page = client.get(f"/admin/durable_jobs/job/{child.pk}/change/").content.decode()
    assert f'href="/admin/durable_jobs/job/{parent.pk}/change/">{parent.pk}</a> (pending)' in page
    page = client.get(f"/admin/durable_jobs/job/{parent.pk}/change/").content.decode()
    assert f'href="/admin/durable_jobs/job/{child.pk}/change/">{child.pk}</a> (waiting)' in page
    listed = client.get("/admin/durable_jobs/job/?status__exact=waiting")
    assert [job.pk for job in listed.context["cl"].result_list] == [child.pk]


def test_the_admin_cancels_a_waiting_job() -> None:
    parent = enqueue(TYPE).job
    child = enqueue(TYPE, depends_on=[parent]).job
    response = admin_client().post(
        "/admin/durable_jobs/job/",
        {"action": "cancel_jobs", "_selected_action": [str(child.pk)]},
        follow=True,
    )
    assert "1 job was cancelled." in response.content.decode()
    assert Job.objects.get(pk=child.pk).status == "cancelled"
    assert JobDependency.objects.get().child_id == child.pk
