"""The doors that need the database agree with the one rule too.

tests/unit/test_rules.py feeds queue names, seconds and slot ranges
through the Python, CLI and settings doors; here the REST API takes the
same queue names, says "delay or run_at" in the body it always has, and
``/api/health`` and the admin count live workers by one queryset method.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from django_durable_jobs.models import Job, WorkerProcess
from tests.factories import BAD_QUEUES, GOOD_QUEUES, Api

from .helpers import assert_error, job_body

pytestmark = pytest.mark.django_db

#: REST takes declared queues only (rest_policy.py): here, every good name is one.
EVERY_GOOD_QUEUE = override_settings(DURABLE_JOBS={"API_ENQUEUE_QUEUES": GOOD_QUEUES})


@EVERY_GOOD_QUEUE
@pytest.mark.parametrize("name", GOOD_QUEUES)
def test_the_rest_api_accepts_the_queue_names_every_door_accepts(staff: Api, name: str) -> None:
    response = staff.post("/api/jobs", job_body(f"good-{name}", queue=name))
    assert response.status_code == 201, response.content
    assert Job.objects.get().queue == name


@EVERY_GOOD_QUEUE
@pytest.mark.parametrize("name", [*BAD_QUEUES, "", "a,b", "emails:4"], ids=repr)
def test_the_rest_api_refuses_the_queue_names_every_door_refuses(staff: Api, name: str) -> None:
    detail = assert_error(staff.post("/api/jobs", job_body(queue=name)), 400, "invalid")["detail"]
    assert list(detail) == ["queue"], detail
    assert not Job.objects.exists()


def test_delay_and_run_at_together_is_the_same_400_body_as_ever(staff: Api) -> None:
    response = staff.post("/api/jobs", job_body(delay_seconds=5, run_at="2030-01-01T00:00:00Z"))
    assert response.json() == {
        "error": "invalid",
        "detail": {"delay_seconds": ["give either delay_seconds or run_at, not both."]},
    }
    assert response.status_code == 400


def add_worker(worker_id: str, heartbeat_age: float, lease: float) -> None:
    now = timezone.now()
    WorkerProcess.objects.create(
        id=worker_id,
        host="h",
        pid=1,
        queues=[],
        concurrency=1,
        lease_seconds=lease,
        started_at=now - timedelta(hours=1),
        last_heartbeat=now - timedelta(seconds=heartbeat_age),
    )


def test_health_and_the_admin_count_live_workers_by_one_rule(admin_client: Client) -> None:
    add_worker("alive-1", 1, 30.0)
    add_worker("alive-2", 20, 30.0)
    add_worker("stale-1", 40, 30.0)
    add_worker("stale-2", 5, 3.0)
    alive = set(WorkerProcess.objects.alive().values_list("pk", flat=True))
    stale = set(WorkerProcess.objects.stale().values_list("pk", flat=True))
    assert (alive, stale) == ({"alive-1", "alive-2"}, {"stale-1", "stale-2"})
    flags = dict(WorkerProcess.objects.with_liveness().values_list("pk", "is_alive"))
    assert {pk for pk, live in flags.items() if live} == alive
    assert Client().get("/api/health").json()["live_workers"] == len(alive)
    page = admin_client.get("/admin/durable_jobs/workerprocess/").content.decode()
    shown = dict(re.findall(r'<a href="[^"]+/(\w+-\d)/change/">.*?icon-(yes|no)', page, re.S))
    assert shown == {pk: "yes" if pk in alive else "no" for pk in flags}
