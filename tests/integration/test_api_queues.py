"""``GET /api/queues`` and ``POST /api/queues/{name}/pause|resume`` (permissions: test_api.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_durable_jobs.held_back import nothing_held
from django_durable_jobs.models import JobStatus, QueueState
from django_durable_jobs.pausing import pause_queue, paused_queues
from tests.factories import Api, make_job, make_user

from .helpers import HELD_BY_HOLD_JOBS_BACK, LIMITED, SLASHES, assert_error, hold_jobs_back

pytestmark = pytest.mark.django_db

QUEUES = {"QUEUES": {"emails": {"rate_limit": "10/s", "concurrency": 4}, "quiet": {}}}


def by_name(body: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {queue["name"]: queue for queue in body}


@SLASHES
def test_queues_lists_declared_busy_and_paused_queues(staff: Api, slash: str) -> None:
    make_job(queue="default")
    make_job(queue="default", status=JobStatus.RUNNING)
    make_job(queue="emails", status=JobStatus.DEAD)
    make_job(queue="emails", status=JobStatus.WAITING)
    make_job(queue="history", status=JobStatus.COMPLETED)  # finished only: not listed
    until = timezone.now() + timedelta(hours=1)
    pause_queue("parked", until)
    with override_settings(DURABLE_JOBS=QUEUES):
        response = staff.get(f"/api/queues{slash}")
    assert response.status_code == 200
    body = response.json()
    assert [queue["name"] for queue in body] == ["default", "emails", "parked", "quiet"]
    queues = by_name(body)
    assert queues["default"]["counts"] == {"pending": 1, "running": 1, "waiting": 0, "dead": 0}
    assert queues["default"]["oldest_pending_age_seconds"] is not None
    assert queues["default"]["limits"] is None
    assert queues["default"]["paused"] is False and queues["default"]["paused_until"] is None
    assert queues["emails"]["counts"] == {"pending": 0, "running": 0, "waiting": 1, "dead": 1}
    assert queues["emails"]["limits"] == {"rate_limit": "10/s", "concurrency": 4}
    assert queues["quiet"]["limits"] is None  # declared, without limits
    assert queues["parked"]["paused"] is True
    assert parse_datetime(queues["parked"]["paused_until"]) == until


def test_queues_and_stats_show_limits_and_what_they_hold_back(staff: Api) -> None:
    with override_settings(DURABLE_JOBS=LIMITED):
        hold_jobs_back()
        queues = by_name(staff.get("/api/queues").json())
        stats = staff.get("/api/jobs/stats").json()["queues"]
        paused = staff.post("/api/queues/parked/pause").json()
    for name, held in HELD_BY_HOLD_JOBS_BACK.items():
        assert queues[name]["held_back"] == held, name
        assert stats[name]["held_back"] == held, name
    assert paused["held_back"] == HELD_BY_HOLD_JOBS_BACK["parked"]
    # Queues without limits, holding nothing back: limits null, every count 0.
    for entry in (queues["other"], stats["other"], queues["throttled"]):
        assert entry["held_back"] == nothing_held()
    assert queues["other"]["limits"] is None and stats["other"]["limits"] is None
    assert stats["default"]["limits"] is None
    assert stats["narrow"]["limits"] == {"rate_limit": None, "concurrency": 2}
    assert queues["throttled"]["limits"] == {"rate_limit": "2/m", "concurrency": None}
    assert "throttled" not in stats  # holds no job: listed by /api/queues only


@SLASHES
def test_pause_without_a_body_pauses_until_resumed(staff: Api, slash: str) -> None:
    make_job(queue="emails")
    response = staff.post(f"/api/queues/emails/pause{slash}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["name"] == "emails" and body["paused"] is True and body["paused_until"] is None
    assert body["counts"]["pending"] == 1
    assert paused_queues() == {"emails": None}
    assert by_name(staff.get("/api/queues").json())["emails"]["paused"] is True


def test_pause_until_a_time_then_resume(staff: Api) -> None:
    until = (timezone.now() + timedelta(minutes=15)).replace(microsecond=0)
    body = staff.post("/api/queues/emails/pause", {"until": until.isoformat()}).json()
    assert body["paused"] is True and parse_datetime(body["paused_until"]) == until
    assert staff.post("/api/queues/emails/pause", {"until": None}).json()["paused_until"] is None
    response = staff.post("/api/queues/emails/resume/")
    assert response.status_code == 200
    assert response.json()["paused"] is False
    assert paused_queues() == {}
    # Resuming again, or a queue never paused: no error.
    assert staff.post("/api/queues/emails/resume").status_code == 200
    assert staff.post("/api/queues/never/resume").json()["paused"] is False


def test_stats_show_paused_queues(staff: Api) -> None:
    make_job(queue="default")
    pause_queue("emails")  # holds no job: listed anyway
    queues = staff.get("/api/jobs/stats").json()["queues"]
    assert queues["default"]["paused"] is False
    assert queues["emails"]["paused"] is True and queues["emails"]["total"] == 0


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"until": "2000-01-01T00:00:00Z"}, "until", "must be in the future"),
        ({"until": "tomorrow"}, "until", "ISO 8601"),
        ({"until": "2999-01-01T00:00:00"}, "until", "UTC offset"),
        ({"until": 1234}, "until", "must be an ISO 8601 string"),
        ([1, 2], "non_field_errors", "Invalid data"),
    ],
)
def test_a_bad_until_is_a_400_naming_it(staff: Api, body: Any, field: str, words: str) -> None:
    response = staff.post("/api/queues/emails/pause", body)
    detail = assert_error(response, 400, "invalid")["detail"]
    assert words in " ".join(detail[field]), detail
    assert not QueueState.objects.exists()


@pytest.mark.parametrize("operation", ["pause", "resume"])
@pytest.mark.parametrize("name", ["a%2Cb", "bad%20name", "x" * 101])
def test_a_bad_queue_name_is_a_400(staff: Api, operation: str, name: str) -> None:
    response = staff.post(f"/api/queues/{name}/{operation}")
    detail = assert_error(response, 400, "invalid")["detail"]
    assert list(detail) == ["queue"], detail
    assert not QueueState.objects.exists()


def test_wrong_methods_are_a_json_405(staff: Api) -> None:
    assert_error(staff.post("/api/queues"), 405, "method_not_allowed")
    assert_error(staff.get("/api/queues/emails/pause"), 405, "method_not_allowed")


def test_a_reader_may_list_queues_but_not_pause_them() -> None:
    reader = Api(make_user("reader", "view_job"))
    assert reader.get("/api/queues").status_code == 200
    assert_error(reader.post("/api/queues/emails/pause"), 403, "permission_denied")
    assert not QueueState.objects.exists()
