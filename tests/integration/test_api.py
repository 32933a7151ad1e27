"""The REST API through Django's test client, against the real PostgreSQL.

Every row of DESIGN.md's endpoint table, every validation case, auth per
endpoint, paths with and without the trailing slash, and 64 concurrent
identical POSTs.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import OperationalError, connections
from django.test import Client, override_settings
from django.utils import timezone
from django.utils.crypto import get_random_string
from rest_framework.authtoken.models import Token

from django_durable_jobs import db, enqueue, enqueue_many
from django_durable_jobs.api.errors import PayloadTooLarge
from django_durable_jobs.api.parsers import BoundedJSONParser
from django_durable_jobs.models import AuditEntry, Job, JobStatus, QueueState
from tests.factories import PASSWORD, Api, make_operator, make_user
from tests.factories import basic_auth as basic

from .helpers import ECHO_TYPE as TYPE
from .helpers import SLASHES, assert_error, job_body, make_echo_job, run_in_threads

pytestmark = pytest.mark.django_db


# --- POST /api/jobs ------------------------------------------------------------


@SLASHES
def test_enqueue_creates_then_replays_the_same_job(staff: Api, slash: str) -> None:
    first = staff.post(f"/api/jobs{slash}", job_body(priority=-3, queue="narrow", max_attempts=2))
    assert first.status_code == 201, first.content
    job = first.json()
    assert first["Location"] == f"/api/jobs/{job['id']}"
    assert (job["type"], job["queue"], job["priority"], job["max_attempts"]) == (
        TYPE,
        "narrow",
        -3,
        2,
    )
    assert job["payload"] == {"n": 1}
    assert job["status"] == "pending" and job["attempts"] == 0
    assert {"result", "errors", "created_at", "available_at", "last_error"} <= set(job)

    replay = staff.post(f"/api/jobs{slash}", job_body(priority=-3, queue="narrow", max_attempts=2))
    assert replay.status_code == 200
    assert replay.json()["id"] == job["id"]
    assert Job.objects.count() == 1


def test_enqueue_with_other_parameters_for_the_same_key_is_a_409(staff: Api) -> None:
    job_id = staff.post("/api/jobs", job_body()).json()["id"]
    response = staff.post("/api/jobs", job_body(payload={"n": 2}, priority=-1))
    body = assert_error(response, 409, "idempotency_conflict")
    assert body["job_id"] == job_id
    assert body["differences"] == ["payload", "priority"]
    assert Job.objects.count() == 1


def test_delay_and_run_at_set_available_at(staff: Api) -> None:
    before = timezone.now()
    delayed = staff.post("/api/jobs", job_body("d", delay_seconds=60)).json()
    assert Job.objects.get(pk=delayed["id"]).available_at >= before + timedelta(seconds=59)
    at = "2031-01-02T03:04:05+01:00"
    scheduled = staff.post("/api/jobs", job_body("r", run_at=at)).json()
    assert Job.objects.get(pk=scheduled["id"]).available_at.isoformat() == (
        "2031-01-02T02:04:05+00:00"
    )


def test_the_key_may_come_as_a_header(staff: Api) -> None:
    body = {"type": TYPE, "payload": {}}
    first = staff.post("/api/jobs", body, HTTP_IDEMPOTENCY_KEY="hdr-1")
    assert first.status_code == 201
    assert first.json()["idempotency_key"] == "hdr-1"
    same = staff.post(
        "/api/jobs", {**body, "idempotency_key": "hdr-1"}, HTTP_IDEMPOTENCY_KEY="hdr-1"
    )
    assert same.status_code == 200 and same.json()["id"] == first.json()["id"]


def test_header_and_body_keys_that_disagree_are_a_400(staff: Api) -> None:
    response = staff.post("/api/jobs", job_body("body-key"), HTTP_IDEMPOTENCY_KEY="header-key")
    body = assert_error(response, 400, "invalid")
    assert list(body["detail"]) == ["idempotency_key"]
    assert not Job.objects.exists()


def test_payload_is_optional_and_defaults_to_an_empty_object(staff: Api) -> None:
    response = staff.post("/api/jobs", {"type": TYPE, "idempotency_key": "np"})
    assert response.status_code == 201 and response.json()["payload"] == {}


INVALID_BODIES: list[tuple[str, dict[str, Any], str]] = [
    ("missing type", {"idempotency_key": "k"}, "type"),
    ("empty type", {"type": "", "idempotency_key": "k"}, "type"),
    ("blank type", {"type": "   ", "idempotency_key": "k"}, "type"),
    ("type not a string", {"type": 5, "idempotency_key": "k"}, "type"),
    ("unregistered type", {"type": "nobody.handles.this", "idempotency_key": "k"}, "type"),
    ("missing key", {"type": TYPE}, "idempotency_key"),
    ("empty key", {"type": TYPE, "idempotency_key": ""}, "idempotency_key"),
    ("key not a string", {"type": TYPE, "idempotency_key": 7}, "idempotency_key"),
    ("key too long", {"type": TYPE, "idempotency_key": "k" * 256}, "idempotency_key"),
    ("payload a list", job_body(payload=[1, 2]), "payload"),
    ("payload a string", job_body(payload="x"), "payload"),
    ("payload null", job_body(payload=None), "payload"),
    ("payload with NUL", job_body(payload={"a": "\x00"}), "payload"),
    ("priority a string", job_body(priority="5"), "priority"),
    ("priority a float", job_body(priority=1.5), "priority"),
    ("priority a bool", job_body(priority=True), "priority"),
    ("priority too high", job_body(priority=40000), "priority"),
    ("priority too low", job_body(priority=-40000), "priority"),
    ("negative delay", job_body(delay_seconds=-1), "delay_seconds"),
    ("delay a string", job_body(delay_seconds="10"), "delay_seconds"),
    ("delay too long", job_body(delay_seconds=10**12), "delay_seconds"),
    ("delay and run_at", job_body(delay_seconds=5, run_at="2030-01-01T00:00:00Z"), "delay_seconds"),
    ("max_attempts 0", job_body(max_attempts=0), "max_attempts"),
    ("max_attempts negative", job_body(max_attempts=-3), "max_attempts"),
    ("max_attempts a string", job_body(max_attempts="3"), "max_attempts"),
    ("naive run_at", job_body(run_at="2030-01-01T00:00:00"), "run_at"),
    ("malformed run_at", job_body(run_at="tomorrow"), "run_at"),
    ("run_at a number", job_body(run_at=1893456000), "run_at"),
    ("bad queue", job_body(queue="a,b"), "queue"),
    ("empty queue", job_body(queue=""), "queue"),
    ("unknown field", job_body(delay=5), "delay"),
]


@pytest.mark.parametrize(
    ("body", "field"), [case[1:] for case in INVALID_BODIES], ids=[c[0] for c in INVALID_BODIES]
)
def test_invalid_input_is_a_400_naming_the_field(
    staff: Api, body: dict[str, Any], field: str
) -> None:
    response = staff.post("/api/jobs", body)
    detail = assert_error(response, 400, "invalid")["detail"]
    assert field in detail, detail
    assert all(isinstance(m, str) and m for m in detail[field])
    assert not Job.objects.exists()


def test_unregistered_types_are_allowed_when_configured(staff: Api) -> None:
    with override_settings(DURABLE_JOBS={"API_ALLOW_UNREGISTERED_TYPES": True}):
        response = staff.post("/api/jobs", {"type": "elsewhere.job", "idempotency_key": "u"})
    assert response.status_code == 201


@pytest.mark.parametrize(
    "raw",
    [b"{", b"{'type': 'x'}", b'{"type": NaN}', b"\xff\xfe", b"[" * 200 + b"]" * 200],
    ids=["truncated", "single-quotes", "nan", "not-utf8", "too-deep"],
)
def test_malformed_json_is_a_400(staff: Api, raw: bytes) -> None:
    body = assert_error(staff.post("/api/jobs", raw), 400, "parse_error")
    assert "body" in body["detail"]


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"job"', b"null", b"3"])
def test_a_body_that_is_not_an_object_is_a_400(staff: Api, raw: bytes) -> None:
    assert_error(staff.post("/api/jobs", raw), 400, "invalid")


def test_a_non_json_body_is_a_415(staff: Api) -> None:
    response = staff.post("/api/jobs", b"type=x", content_type="application/x-www-form-urlencoded")
    assert_error(response, 415, "unsupported_media_type")


def test_a_body_over_the_default_limit_is_a_413(staff: Api) -> None:
    big = json.dumps(job_body(payload={"blob": "x" * (1024 * 1024)})).encode()
    assert len(big) > 1_048_576
    body = assert_error(staff.post("/api/jobs", big), 413, "payload_too_large")
    assert body["limit_bytes"] == 1_048_576
    assert not Job.objects.exists()


def test_a_body_just_under_the_limit_is_accepted(staff: Api) -> None:
    filler = 1_048_576 - len(json.dumps(job_body(payload={"blob": ""}))) - 16
    response = staff.post("/api/jobs", job_body(payload={"blob": "x" * filler}))
    assert response.status_code == 201


def test_the_size_limit_is_a_setting_and_is_checked_before_authentication() -> None:
    anonymous = Api()
    with override_settings(DURABLE_JOBS={"API_MAX_BODY_BYTES": 100}):
        response = anonymous.post("/api/jobs", job_body(payload={"blob": "x" * 200}))
    assert_error(response, 413, "payload_too_large")


def test_the_parser_reads_at_most_the_limit_plus_one_byte() -> None:
    """A body whose length was not announced is cut off at the limit, not read whole."""
    stream = io.BytesIO(b'{"a": "' + b"x" * 5000 + b'"}')
    with (
        override_settings(DURABLE_JOBS={"API_MAX_BODY_BYTES": 1000}),
        pytest.raises(PayloadTooLarge),
    ):
        BoundedJSONParser().parse(stream, "application/json", {})
    assert stream.tell() == 1001


def test_a_chunked_body_without_length_is_a_411(staff: Api) -> None:
    response = staff.post("/api/jobs", b"", HTTP_TRANSFER_ENCODING="chunked")
    assert_error(response, 411, "length_required")


# --- GET /api/jobs -----------------------------------------------------------------


@SLASHES
def test_list_is_newest_first_and_filters(staff: Api, slash: str) -> None:
    # One test transaction gives every job the same created_at (now()): set them apart.
    now = timezone.now()
    old, other, new = (
        make_echo_job(JobStatus.DEAD),
        enqueue("example.noop", queue="low").job,
        make_echo_job(),
    )
    for minutes, job in enumerate((new, other, old)):
        Job.objects.filter(pk=job.pk).update(created_at=now - timedelta(minutes=minutes))

    listed = staff.get(f"/api/jobs{slash}").json()
    assert [j["id"] for j in listed["results"]] == [str(new.pk), str(other.pk), str(old.pk)]
    # Summaries: payload, result, last_error and errors only with ?include= (test_api_list_size).
    assert set(listed["results"][0]) == {
        "id", "type", "queue", "idempotency_key", "status", "priority", "attempts",
        "max_attempts", "available_at", "started_at", "completed_at", "created_at", "updated_at",
    }  # fmt: skip

    def ids(query: str) -> list[str]:
        response = staff.get(f"/api/jobs{slash}?{query}")
        assert response.status_code == 200, response.content
        return [j["id"] for j in response.json()["results"]]

    assert ids("status=dead") == [str(old.pk)]
    assert ids("status=pending") == [str(new.pk), str(other.pk)]
    assert ids("type=example.noop") == [str(other.pk)]
    assert ids("queue=low") == [str(other.pk)]
    assert ids("status=pending&queue=default") == [str(new.pk)]
    assert ids("status=cancelled") == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=lost", "status"),
        ("type=", "type"),
        ("queue=", "queue"),
        ("page_size=0", "page_size"),
        ("page_size=abc", "page_size"),
        ("page_size=100000", "page_size"),
        ("cursor=garbage", "cursor"),
    ],
)
def test_bad_list_parameters_are_a_400(staff: Api, query: str, field: str) -> None:
    body = assert_error(staff.get(f"/api/jobs?{query}"), 400, "invalid")
    assert field in body["detail"]


def test_cursor_pagination_walks_every_job_once_in_order(staff: Api) -> None:
    # Two batches: one created_at shared inside each (one statement), so the
    # cursor must also order by id to be stable.
    enqueue_many([{"type": TYPE, "payload": {"i": i}} for i in range(4)])
    enqueue_many([{"type": TYPE, "payload": {"i": i}} for i in range(4, 7)])
    expected = [
        str(pk) for pk in Job.objects.order_by("-created_at", "-id").values_list("pk", flat=True)
    ]
    seen: list[str] = []
    url: str | None = "/api/jobs?page_size=3"
    pages = 0
    while url:
        page = staff.get(url).json()
        assert len(page["results"]) <= 3
        seen += [j["id"] for j in page["results"]]
        url = page["next"]
        pages += 1
    assert pages == 3
    assert seen == expected
    assert len(set(seen)) == 7


def test_page_size_defaults_to_the_setting(staff: Api) -> None:
    enqueue_many([{"type": TYPE} for _ in range(3)])
    with override_settings(DURABLE_JOBS={"API_PAGE_SIZE": 2}):
        page = staff.get("/api/jobs").json()
    assert len(page["results"]) == 2 and page["next"]


# --- GET /api/jobs/{id} ----------------------------------------------------------


@SLASHES
def test_detail_has_result_and_errors(staff: Api, slash: str) -> None:
    errors = [{"attempt": 1, "at": "2030-01-01T00:00:00Z", "error": "boom"}]
    job = make_echo_job(JobStatus.COMPLETED, result={"ok": True}, errors=errors)
    body = staff.get(f"/api/jobs/{job.pk}{slash}").json()
    assert body["id"] == str(job.pk)
    assert (body["status"], body["result"], body["errors"]) == ("completed", {"ok": True}, errors)


@SLASHES
@pytest.mark.parametrize("job_id", [str(uuid.uuid4()), "not-a-uuid", "123", "a.b", "%20"])
def test_detail_of_an_unknown_or_malformed_id_is_a_json_404(
    staff: Api, slash: str, job_id: str
) -> None:
    assert_error(staff.get(f"/api/jobs/{job_id}{slash}"), 404, "not_found")


# --- requeue and cancel --------------------------------------------------------------


@SLASHES
@pytest.mark.parametrize("status", [JobStatus.DEAD, JobStatus.CANCELLED])
def test_requeue_puts_a_finished_job_back(staff: Api, slash: str, status: str) -> None:
    history = [{"attempt": 5, "error": "boom"}]
    job = make_echo_job(status, attempts=5, errors=history, last_error="boom")
    response = staff.post(f"/api/jobs/{job.pk}/requeue{slash}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["attempts"], body["errors"]) == ("pending", 0, history)


@pytest.mark.parametrize("status", [JobStatus.PENDING, JobStatus.RUNNING, JobStatus.COMPLETED])
def test_requeue_of_a_job_that_is_not_dead_or_cancelled_is_a_409(staff: Api, status: str) -> None:
    job = make_echo_job(status)
    body = assert_error(staff.post(f"/api/jobs/{job.pk}/requeue"), 409, "invalid_state")
    assert body["job_status"] == status and body["allowed"] == ["dead", "cancelled"]
    assert Job.objects.get(pk=job.pk).status == status


@SLASHES
def test_cancel_cancels_a_pending_job(staff: Api, slash: str) -> None:
    job = make_echo_job()
    response = staff.post(f"/api/jobs/{job.pk}/cancel{slash}")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert response.json()["completed_at"] is not None


@SLASHES
def test_cancel_of_a_running_job_is_a_202_and_asks_its_worker(staff: Api, slash: str) -> None:
    job = make_echo_job(JobStatus.RUNNING)
    response = staff.post(f"/api/jobs/{job.pk}/cancel{slash}")
    assert response.status_code == 202, response.content
    body = response.json()
    # Accepted, not done: still running until its handler stops.
    assert body["status"] == "running" and body["completed_at"] is None
    assert body["cancel_requested_at"] is not None
    first = Job.objects.get(pk=job.pk).cancel_requested_at
    assert first is not None
    # Asking again is harmless: 202, the first request's time kept.
    again = staff.post(f"/api/jobs/{job.pk}/cancel{slash}")
    assert again.status_code == 202
    assert Job.objects.get(pk=job.pk).cancel_requested_at == first


@pytest.mark.parametrize("status", [JobStatus.COMPLETED, JobStatus.DEAD, JobStatus.CANCELLED])
def test_cancel_of_a_finished_job_is_a_409(staff: Api, status: str) -> None:
    job = make_echo_job(status)
    body = assert_error(staff.post(f"/api/jobs/{job.pk}/cancel"), 409, "invalid_state")
    assert body["job_status"] == status
    assert body["allowed"] == ["pending", "waiting", "running"]
    assert Job.objects.get(pk=job.pk).cancel_requested_at is None


@SLASHES
@pytest.mark.parametrize("operation", ["requeue", "cancel"])
@pytest.mark.parametrize("job_id", [str(uuid.uuid4()), "nope"])
def test_operations_on_unknown_jobs_are_a_404(
    staff: Api, slash: str, operation: str, job_id: str
) -> None:
    assert_error(staff.post(f"/api/jobs/{job_id}/{operation}{slash}"), 404, "not_found")


def test_wrong_methods_are_a_json_405(staff: Api) -> None:
    job = make_echo_job()
    assert_error(
        staff.client.delete(f"/api/jobs/{job.pk}", **staff.auth), 405, "method_not_allowed"
    )
    assert_error(staff.get(f"/api/jobs/{job.pk}/cancel"), 405, "method_not_allowed")
    assert_error(staff.post("/api/jobs/stats"), 405, "method_not_allowed")
    assert_error(staff.post("/api/schedules"), 405, "method_not_allowed")


# --- stats and health ------------------------------------------------------------------


@SLASHES
def test_stats_counts_by_queue_and_status(staff: Api, slash: str) -> None:
    empty = staff.get(f"/api/jobs/stats{slash}").json()
    assert empty["total"] == 0 and empty["oldest_pending_age_seconds"] is None
    waiting = make_echo_job(available_at=timezone.now() - timedelta(minutes=10))
    make_echo_job(JobStatus.DEAD)
    enqueue(TYPE, queue="low", delay=timedelta(hours=1))  # pending, not waiting yet
    assert waiting.queue == "default"

    stats = staff.get(f"/api/jobs/stats{slash}").json()
    assert stats["total"] == 3
    assert stats["statuses"] == {
        "pending": 2, "running": 0, "completed": 0, "dead": 1, "cancelled": 0, "waiting": 0,
    }  # fmt: skip
    default, low = stats["queues"]["default"], stats["queues"]["low"]
    assert (default["pending"], default["dead"], default["total"]) == (1, 1, 2)
    assert (low["pending"], low["total"]) == (1, 1)
    assert 590 < default["oldest_pending_age_seconds"] < 900
    assert low["oldest_pending_age_seconds"] is None
    assert stats["oldest_pending_age_seconds"] == default["oldest_pending_age_seconds"]
    assert stats["estimated"] == [] and default["estimated"] == []


def test_stats_count_the_finished_history_exactly_on_a_small_table(staff: Api) -> None:
    # A queue that holds only finished jobs, long done: known from its history.
    for status, n in ((JobStatus.COMPLETED, 3), (JobStatus.CANCELLED, 2)):
        for _ in range(n):
            make_echo_job(status, queue="old")
    make_echo_job(JobStatus.COMPLETED)
    stats = staff.get("/api/jobs/stats").json()
    assert stats["statuses"] == {
        "pending": 0, "running": 0, "completed": 4, "dead": 0, "cancelled": 2, "waiting": 0,
    }  # fmt: skip
    old = stats["queues"]["old"]
    assert (old["completed"], old["cancelled"], old["total"], old["estimated"]) == (3, 2, 5, [])
    assert stats["queues"]["default"]["completed"] == 1
    assert stats["total"] == 6 and stats["estimated"] == []


@SLASHES
def test_health_needs_no_credentials(slash: str) -> None:
    response = Client().get(f"/api/health{slash}")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "live_workers": 0,
        "oldest_pending_age_seconds": None,
    }


def test_health_is_a_503_when_the_database_does_not_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection to server at 10.0.0.1 refused, user secret")

    monkeypatch.setattr(connections[db.database_alias()], "cursor", refuse)
    response = Client().get("/api/health")
    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["database"], body["error"]) == (
        "unavailable",
        "unavailable",
        "database_unavailable",
    )
    assert "10.0.0.1" not in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_an_unreachable_database_is_a_json_503_not_an_html_500() -> None:
    # What the chaos suite saw with the server's connections all taken
    # ("remaining connection slots are reserved"): Django's HTML error page.
    staff = make_operator("staff")
    connection = connections["default"]
    port = connection.settings_dict["PORT"]
    with socket.socket() as probe:  # a port nothing listens on: connecting is refused
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    connection.close()
    connection.settings_dict["PORT"] = str(closed)
    try:
        for method, path in (("post", "/api/jobs"), ("get", "/api/jobs"), ("get", "/api/queues")):
            body = (
                {"type": TYPE, "payload": {}, "idempotency_key": "k"} if method == "post" else None
            )
            response = getattr(Client(), method)(
                path, body, content_type="application/json", **basic(staff)
            )
            assert response.status_code == 503, (path, response.content[:200])
            assert response["Content-Type"] == "application/json"
            assert response["Retry-After"] == "1"
            assert response.json()["error"] == "database_unavailable"
            assert str(closed) not in response.content.decode()  # no connection details
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port


# --- security ----------------------------------------------------------------------------

# (method, path maker, permission that grants it, expected status for the allowed users)
Endpoint = tuple[str, Callable[[Job, Job], str], str, int]
ENDPOINTS: dict[str, Endpoint] = {
    "enqueue": ("post", lambda p, d: "/api/jobs", "add_job", 201),
    "list": ("get", lambda p, d: "/api/jobs", "view_job", 200),
    "detail": ("get", lambda p, d: f"/api/jobs/{p.pk}", "view_job", 200),
    "requeue": ("post", lambda p, d: f"/api/jobs/{d.pk}/requeue", "requeue_job", 200),
    "cancel": ("post", lambda p, d: f"/api/jobs/{p.pk}/cancel", "cancel_job", 200),
    "stats": ("get", lambda p, d: "/api/jobs/stats", "view_job", 200),
    "schedules": ("get", lambda p, d: "/api/schedules", "view_job", 200),
    "queues": ("get", lambda p, d: "/api/queues", "view_job", 200),
    "pause": ("post", lambda p, d: "/api/queues/default/pause", "pause_queue", 200),
    "resume": ("post", lambda p, d: "/api/queues/default/resume", "pause_queue", 200),
    "emit": ("post", lambda p, d: "/api/events", "emit_event", 201),
}
#: Permissions that do not grant the endpoint's: change_job (which once allowed every
#: action) and another action's.
WRONG_PERMISSIONS = {
    "add_job": ("view_job", "change_job"),
    "view_job": ("add_job",),
    "requeue_job": ("change_job", "cancel_job"),
    "cancel_job": ("change_job", "requeue_job"),
    "pause_queue": ("change_job", "run_job_now"),
    "emit_event": ("change_job", "requeue_job"),
}


def call(api: Api, endpoint: str) -> Any:
    method, path, _, _ = ENDPOINTS[endpoint]
    pending, dead = make_echo_job(), make_echo_job(JobStatus.DEAD)
    url = path(pending, dead)
    if method == "post":
        if endpoint == "emit":
            return api.post(url, {"key": f"auth.{uuid.uuid4().hex}"})
        return api.post(url, job_body("auth") if endpoint == "enqueue" else None)
    return api.get(url)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_anonymous_callers_get_a_401_without_data(endpoint: str) -> None:
    response = call(Api(), endpoint)
    body = assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Basic")
    assert set(body) == {"error", "detail"}
    assert "pending" not in response.content.decode()


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_wrong_credentials_are_a_401(endpoint: str) -> None:
    make_user("someone")
    api = Api()
    api.auth = {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(b"someone:wrong").decode()}
    assert_error(call(api, endpoint), 401, "authentication_failed")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_users_without_the_permission_get_a_403(endpoint: str) -> None:
    perm = ENDPOINTS[endpoint][2]
    # is_staff alone grants nothing at the REST door.
    users = [make_user("staff-only", staff=True), make_user("plain", staff=False)]
    users += [make_user(f"other-{wrong}", wrong) for wrong in WRONG_PERMISSIONS[perm]]
    for user in users:
        response = call(Api(user), endpoint)
        body = assert_error(response, 403, "permission_denied")
        assert set(body) == {"error", "detail"}
    assert Job.objects.filter(idempotency_key="auth").count() == 0
    # Nothing changed: each call's pending and dead job are as made, no queue was
    # paused, nothing was recorded.
    statuses = sorted(Job.objects.values_list("status", flat=True))
    assert statuses == sorted([JobStatus.PENDING, JobStatus.DEAD] * len(users))
    assert not QueueState.objects.filter(paused_at__isnull=False).exists()
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_users_with_the_permission_or_superusers_are_allowed(endpoint: str) -> None:
    expected = ENDPOINTS[endpoint][3]
    allowed = make_user("allowed", ENDPOINTS[endpoint][2], staff=False)
    assert call(Api(allowed), endpoint).status_code == expected
    Job.objects.all().delete()
    superuser = make_user("root", superuser=True)
    assert call(Api(superuser), endpoint).status_code == expected


def test_change_job_also_allows_reading() -> None:
    api = Api(make_user("operator", "change_job"))
    assert api.get("/api/jobs").status_code == 200
    assert api.get("/api/schedules").status_code == 200
    assert api.post("/api/jobs", job_body()).status_code == 403


def test_permission_classes_are_a_setting() -> None:
    make_echo_job()
    setting = {"API_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"]}
    with override_settings(DURABLE_JOBS=setting):
        assert Api().get("/api/jobs").status_code == 200
    assert Api().get("/api/jobs").status_code == 401


def test_token_authentication() -> None:
    user = make_user("robot", "add_job")
    token = Token.objects.create(user=user)
    client = Client()
    response = client.post(
        "/api/jobs",
        json.dumps(job_body()),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token.key}",
    )
    assert response.status_code == 201
    bad = client.get("/api/jobs", HTTP_AUTHORIZATION="Token nope")
    assert_error(bad, 401, "authentication_failed")


def test_session_authentication_enforces_csrf() -> None:
    make_user("browser", "view_job", "add_job")
    client = Client(enforce_csrf_checks=True)
    assert client.login(username="browser", password=PASSWORD)
    assert client.get("/api/jobs").status_code == 200  # safe methods need no token
    body = json.dumps(job_body())
    refused = client.post("/api/jobs", body, content_type="application/json")
    assert_error(refused, 403, "permission_denied")
    assert "CSRF" in refused.json()["detail"]
    assert not Job.objects.exists()

    # What a page rendering {% csrf_token %} would set: the cookie and the header match.
    token = get_random_string(32)
    client.cookies[settings.CSRF_COOKIE_NAME] = token
    accepted = client.post(
        "/api/jobs", body, content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert accepted.status_code == 201


def test_a_post_is_never_redirected(staff: Api) -> None:
    job = make_echo_job()
    for path in ("/api/jobs", "/api/jobs/", f"/api/jobs/{job.pk}/cancel"):
        response = staff.post(path, job_body("nr") if "cancel" not in path else None)
        assert response.status_code in (200, 201), (path, response.status_code)


# --- concurrency ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_64_concurrent_identical_posts_make_one_job_and_one_201() -> None:
    user = make_user("racer", "add_job")
    body = job_body("race-64", payload={"same": True})

    def post(_: int) -> tuple[int, str]:
        response = Api(user).post("/api/jobs", body)
        return response.status_code, response.json()["id"]

    results = run_in_threads(64, post)
    codes = sorted(code for code, _ in results)
    assert codes == [200] * 63 + [201]
    assert len({job_id for _, job_id in results}) == 1
    assert Job.objects.filter(idempotency_key="race-64").count() == 1
    assert Job.objects.count() == 1
