"""REST doors of durable steps: POST /api/events, the job detail's steps and
waiting_for, and POST /api/jobs/{id}/requeue with from_step.

Step records are written with the ORM, as the runtime would leave them.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
from django.utils import timezone

from django_durable_jobs import step_records
from django_durable_jobs.models import (
    AuditEntry,
    Event,
    EventWaiter,
    Job,
    JobDependency,
    JobStatus,
    JobStep,
    StepKind,
    StepStatus,
)
from tests.factories import Api, basic_auth, make_job, make_operator, make_user

from .helpers import assert_error, make_echo_job
from .test_api_json_body import FORMS, raw_post

pytestmark = pytest.mark.django_db


def add_steps(job: Job, *names: str, **fields: Any) -> list[JobStep]:
    now = timezone.now()
    return [
        JobStep.objects.create(
            job=job,
            name=name,
            kind=fields.get("kind", StepKind.STEP),
            status=fields.get("status", StepStatus.COMPLETED),
            attempt=1,
            position=position,
            started_at=now + timedelta(seconds=position),
            finished_at=now + timedelta(seconds=position, milliseconds=250),
            result={"secret": name},
            result_bytes=len(json.dumps({"secret": name})),
        )
        for position, name in enumerate(names)
    ]


# --- POST /api/events --------------------------------------------------------------


def test_emit_201_then_200_for_the_same_payload_then_409(staff: Api) -> None:
    first = staff.post("/api/events", {"key": "signup:1", "payload": {"email": "a@x"}})
    assert first.status_code == 201, first.content
    body = first.json()
    assert body["key"] == "signup:1" and body["payload"] == {"email": "a@x"}
    assert body["created"] is True and body["created_at"]
    again = staff.post("/api/events/", {"key": "signup:1", "payload": {"email": "a@x"}})
    assert again.status_code == 200 and again.json()["created"] is False
    conflict = staff.post("/api/events", {"key": "signup:1", "payload": {"email": "b@x"}})
    body = assert_error(conflict, 409, "event_conflict")
    assert body["key"] == "signup:1"
    assert "b@x" not in conflict.content.decode() and "a@x" not in conflict.content.decode()
    assert Event.objects.get(pk="signup:1").payload == {"email": "a@x"}


def test_emit_without_payload_is_null(staff: Api) -> None:
    response = staff.post("/api/events", {"key": "bare"})
    assert response.status_code == 201 and response.json()["payload"] is None
    assert staff.post("/api/events", {"key": "bare", "payload": None}).status_code == 200


def test_emit_wakes_the_waiters(staff: Api) -> None:
    job = make_job(status=JobStatus.WAITING, waiting_for={"event": "paid"})
    EventWaiter.objects.create(job=job, key="paid")
    assert staff.post("/api/events", {"key": "paid", "payload": 1}).status_code == 201
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.PENDING and row.waiting_for is None
    assert not EventWaiter.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"key": ""}, "key"),
        ({"key": "a b"}, "key"),
        ({"key": "x" * 201}, "key"),
        ({"key": 5}, "key"),
        ({"key": None}, "key"),
        ({}, "key"),
        ({"key": "ok", "payload": "a\x00b"}, "payload"),
        ({"key": "ok", "other": 1}, "other"),
    ],
)
def test_emit_bad_input_is_a_400_naming_the_field(
    staff: Api, body: dict[str, Any], field: str
) -> None:
    detail = assert_error(staff.post("/api/events", body), 400, "invalid")["detail"]
    assert field in detail, detail
    assert not Event.objects.exists()


@pytest.mark.parametrize("body", [[], "x", 1, None])
def test_emit_body_that_is_not_an_object_is_a_400(staff: Api, body: Any) -> None:
    assert_error(staff.post("/api/events", json.dumps(body).encode()), 400, "invalid")
    assert not Event.objects.exists()


def test_emit_body_that_is_not_json_is_a_400(staff: Api) -> None:
    assert_error(staff.post("/api/events", b"{nope"), 400, "parse_error")


@pytest.mark.parametrize("form", FORMS)
def test_emit_form_encoded_is_a_415(form: str) -> None:
    content_type, body = FORMS[form]
    user = make_operator("ops")
    response = raw_post("/api/events", content_type, body, **basic_auth(user))
    assert_error(response, 415, "unsupported_media_type")
    assert not Event.objects.exists()


def test_emit_needs_emit_event() -> None:
    for user in (
        make_user("staff-only", staff=True),
        make_user("reader", "view_job", "change_job", "requeue_job", "add_job"),
    ):
        assert_error(Api(user).post("/api/events", {"key": "k"}), 403, "permission_denied")
    assert_error(Api().post("/api/events", {"key": "k"}), 401, "not_authenticated")
    assert not Event.objects.exists() and not AuditEntry.objects.exists()
    emitter = make_user("emitter", "emit_event", staff=False)
    assert Api(emitter).post("/api/events", {"key": "k"}).status_code == 201
    root = make_user("root", superuser=True)
    assert Api(root).post("/api/events", {"key": "k2"}).status_code == 201


def test_emit_is_recorded_with_the_rest_actor() -> None:
    user = make_user("emitter", "emit_event", staff=False)
    Api(user).post("/api/events", {"key": "audited", "payload": [1]})
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.door, entry.actor) == ("emit", "rest", "emitter")
    assert entry.details == {"key": "audited"} and entry.user_pk == str(user.pk)
    assert entry.address == "127.0.0.1"
    # A replay records nothing more.
    Api(user).post("/api/events", {"key": "audited", "payload": [1]})
    assert AuditEntry.objects.count() == 1
    trail = Api(make_operator("ops")).get("/api/audit?action=emit").json()["results"]
    assert [row["details"] for row in trail] == [{"key": "audited"}]


# --- GET /api/jobs/{id}: steps and waiting_for ---------------------------------------


def test_detail_lists_the_steps_without_their_results(staff: Api) -> None:
    job = make_echo_job(JobStatus.DEAD)
    add_steps(job, "charge", "record")
    JobStep.objects.create(
        job=job,
        name="email",
        status=StepStatus.FAILED,
        attempt=2,
        position=2,
        started_at=timezone.now(),
        error="SMTPError: down",
    )
    body = staff.get(f"/api/jobs/{job.pk}").json()
    assert [step["name"] for step in body["steps"]] == ["charge", "record", "email"]
    first = body["steps"][0]
    assert set(first) == {
        "name",
        "kind",
        "attempt",
        "started_at",
        "finished_at",
        "status",
        "error",
        "result_bytes",
    }
    assert first["kind"] == "step" and first["status"] == "completed"
    assert first["result_bytes"] == len('{"secret": "charge"}')
    assert body["steps"][2]["error"] == "SMTPError: down"
    assert body["steps"][2]["finished_at"] is None
    assert body["steps_truncated"] is False
    assert "secret" not in json.dumps(body)
    assert body["waiting_for"] is None


def test_a_job_without_steps_has_an_empty_list(staff: Api) -> None:
    body = staff.get(f"/api/jobs/{make_echo_job().pk}").json()
    assert body["steps"] == [] and body["steps_truncated"] is False


def test_lists_carry_no_steps(staff: Api) -> None:
    add_steps(make_echo_job(), "a")
    (row,) = staff.get("/api/jobs").json()["results"]
    assert "steps" not in row and "waiting_for" not in row
    (row,) = staff.get("/api/jobs?include=payload,result").json()["results"]
    assert "steps" not in row


def test_steps_are_bounded(staff: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_records, "STEPS_SHOWN", 3)
    job = make_echo_job()
    add_steps(job, *[f"s{i}" for i in range(5)])
    body = staff.get(f"/api/jobs/{job.pk}").json()
    assert [step["name"] for step in body["steps"]] == ["s0", "s1", "s2"]
    assert body["steps_truncated"] is True


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (JobStatus.PENDING, {"until": "2030-01-01T00:00:00+00:00"}),
        (JobStatus.WAITING, {"event": "signup:1", "deadline": "2030-01-01T00:00:00+00:00"}),
        (JobStatus.WAITING, {"event": "signup:1"}),
        (JobStatus.WAITING, {"job": "01234567-89ab-7cde-8f01-23456789abcd"}),
    ],
)
def test_waiting_for_of_a_suspended_job(staff: Api, status: str, reason: dict[str, Any]) -> None:
    wakes = datetime(2030, 1, 1, tzinfo=dt_timezone.utc)  # a sleep not over yet
    job = make_echo_job(status, waiting_for=reason, available_at=wakes)
    assert staff.get(f"/api/jobs/{job.pk}").json()["waiting_for"] == reason


@pytest.mark.parametrize(
    "reason",
    [
        {"until": "2026-01-01T00:00:00+00:00"},
        {"event": "signup:1", "deadline": "2026-01-01T00:00:00+00:00"},
    ],
)
def test_a_pending_job_whose_wait_is_over_waits_for_nothing(
    staff: Api, reason: dict[str, Any]
) -> None:
    # Woken by time, it keeps the column until its next run's first step call
    # clears it; the doors show it runnable (the REST API, the CLI, the admin).
    job = make_echo_job(waiting_for=reason, available_at=timezone.now() - timedelta(seconds=1))
    assert staff.get(f"/api/jobs/{job.pk}").json()["waiting_for"] is None
    assert step_records.waiting_for(job) is None
    assert step_records.describe_waiting_for(step_records.waiting_for(job)) == ""


@pytest.mark.parametrize("status", [JobStatus.RUNNING, JobStatus.COMPLETED, JobStatus.DEAD])
def test_waiting_for_is_null_unless_pending_or_waiting(staff: Api, status: str) -> None:
    job = make_echo_job(status, waiting_for={"until": "2030-01-01T00:00:00+00:00"})
    assert staff.get(f"/api/jobs/{job.pk}").json()["waiting_for"] is None


def test_waiting_for_parents(staff: Api) -> None:
    done, running = make_echo_job(JobStatus.COMPLETED), make_echo_job(JobStatus.RUNNING)
    child = make_echo_job(JobStatus.WAITING, waiting_on=1)
    JobDependency.objects.create(child=child, parent=done, resolved=True)
    JobDependency.objects.create(child=child, parent=running)
    body = staff.get(f"/api/jobs/{child.pk}").json()
    assert body["waiting_for"] == {"parents": [str(running.pk)]}
    assert staff.get(f"/api/jobs/{make_echo_job().pk}").json()["waiting_for"] is None


# --- POST /api/jobs/{id}/requeue with from_step --------------------------------------


def names(job: Job) -> list[str]:
    return list(JobStep.objects.filter(job=job).values_list("name", flat=True))


def test_requeue_keeps_the_steps(staff: Api) -> None:
    job = make_echo_job(JobStatus.DEAD)
    add_steps(job, "a", "b")
    response = staff.post(f"/api/jobs/{job.pk}/requeue")
    assert response.status_code == 200 and response.json()["status"] == "pending"
    assert names(job) == ["a", "b"]


def test_requeue_from_step_forgets_that_step_and_later_ones(staff: Api) -> None:
    job = make_echo_job(JobStatus.DEAD, attempts=3)
    add_steps(job, "charge", "record", "email", "email#2")
    other = make_echo_job(JobStatus.DEAD)
    add_steps(other, "charge", "record")
    response = staff.post(f"/api/jobs/{job.pk}/requeue", {"from_step": "record"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "pending" and body["attempts"] == 0
    assert [step["name"] for step in body["steps"]] == ["charge"]
    assert names(job) == ["charge"]
    assert names(other) == ["charge", "record"]
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.door, entry.job_id) == ("retry_from_step", "rest", job.pk)
    assert entry.details == {"from_step": "record"}


def test_requeue_from_step_orders_by_position_then_id(staff: Api) -> None:
    job = make_echo_job(JobStatus.CANCELLED)
    now = timezone.now()
    for name, position in (("x", 0), ("y", 1), ("z", 1), ("w", 0)):
        JobStep.objects.create(
            job=job, name=name, status="completed", attempt=1, position=position, started_at=now
        )
    staff.post(f"/api/jobs/{job.pk}/requeue", {"from_step": "y"})
    assert sorted(names(job)) == ["w", "x"]


def test_requeue_from_an_unknown_step_is_a_400_and_changes_nothing(staff: Api) -> None:
    job = make_echo_job(JobStatus.DEAD)
    add_steps(job, "a")
    detail = assert_error(
        staff.post(f"/api/jobs/{job.pk}/requeue", {"from_step": "nope"}), 400, "invalid"
    )["detail"]
    assert "nope" in detail["from_step"][0] and "'a'" in detail["from_step"][0]
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD
    assert names(job) == ["a"] and not AuditEntry.objects.exists()


@pytest.mark.parametrize("body", [{"from_step": 3}, {"from_step": None}, {"later": 1}, [], "x"])
def test_requeue_bad_body_is_a_400(staff: Api, body: Any) -> None:
    job = make_echo_job(JobStatus.DEAD)
    assert_error(
        staff.post(f"/api/jobs/{job.pk}/requeue", json.dumps(body).encode()), 400, "invalid"
    )
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD


def test_requeue_from_step_of_a_job_not_dead_is_a_409(staff: Api) -> None:
    job = make_echo_job(JobStatus.RUNNING)
    add_steps(job, "a")
    assert_error(
        staff.post(f"/api/jobs/{job.pk}/requeue", {"from_step": "a"}), 409, "invalid_state"
    )
    assert names(job) == ["a"]


def test_requeue_from_step_of_no_job_is_a_404(staff: Api) -> None:
    path = "/api/jobs/01234567-89ab-7cde-8f01-23456789abcd/requeue"
    assert_error(staff.post(path, {"from_step": "a"}), 404, "not_found")


def test_requeue_from_step_needs_requeue_job() -> None:
    job = make_echo_job(JobStatus.DEAD)
    add_steps(job, "a")
    user = make_user("nope", "view_job", "change_job", "cancel_job", "emit_event")
    assert_error(
        Api(user).post(f"/api/jobs/{job.pk}/requeue", {"from_step": "a"}), 403, "permission_denied"
    )
    assert names(job) == ["a"] and not AuditEntry.objects.exists()
    allowed = make_user("yes", "requeue_job", staff=False)
    assert Api(allowed).post(f"/api/jobs/{job.pk}/requeue", {"from_step": "a"}).status_code == 200
    assert names(job) == []


def test_a_job_just_enqueued_answers_no_steps_without_reading_them(staff: Api) -> None:
    from django.test.utils import CaptureQueriesContext

    from tests.factories import queue_connection

    from .helpers import job_body

    with CaptureQueriesContext(queue_connection) as queries:
        response = staff.post("/api/jobs", job_body("fresh"))
    assert response.status_code == 201
    body = response.json()
    assert body["steps"] == [] and body["steps_truncated"] is False
    assert body["waiting_for"] is None
    assert not [q for q in queries if "durable_jobs_step" in q["sql"]]
    # A replay reads them (the job may have run since).
    with CaptureQueriesContext(queue_connection) as queries:
        assert staff.post("/api/jobs", job_body("fresh")).status_code == 200
    assert [q for q in queries if "durable_jobs_step" in q["sql"]]
