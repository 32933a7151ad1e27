"""What a REST caller may enqueue (rest_policy.py), and the package's own types at every door.

Issue 22, finding 1: a client holding only ``add_job`` could enqueue
``durable_jobs.bulk_cancel`` and have the next worker cancel every pending
job. The package's own types are refused by ``enqueue()`` itself, by
``@job`` outside the package and by REST; REST callers get registered
unscheduled types, declared queues, and a priority and attempts within the
settings' ceilings. Finding 7: a client that may enqueue but not read gets
no job data on a replay or a conflict. (The same over HTTP with a real
worker: tests/e2e/test_security.py.)
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from django_durable_jobs import bulk, enqueue, enqueue_many
from django_durable_jobs.exceptions import InvalidJob
from django_durable_jobs.models import AuditEntry, Job, JobStatus
from django_durable_jobs.registry import job
from tests.factories import Api, make_job, make_operator, make_user

from .helpers import assert_error

pytestmark = pytest.mark.django_db

TYPE = "example.echo"


def body(key: str = "k", **fields: Any) -> dict[str, Any]:
    return {"type": TYPE, "payload": {"n": 1}, "idempotency_key": key, **fields}


def refused(response: Any, field: str) -> str:
    """The 400's message for ``field`` (one message), after checking nothing was enqueued."""
    detail = assert_error(response, 400, "invalid")["detail"]
    assert list(detail) == [field], detail
    (message,) = detail[field]
    return str(message)


# -- the package's own types -----------------------------------------------------------


@pytest.mark.parametrize("job_type", [bulk.BULK_CANCEL, bulk.BULK_REQUEUE, "durable_jobs.other"])
def test_an_enqueue_only_client_cannot_start_a_bulk_run(job_type: str) -> None:
    pending = make_job(TYPE)
    enqueuer = Api(make_user("enqueuer", "add_job", staff=False))
    response = enqueuer.post(
        "/api/jobs",
        {
            "type": job_type,
            "payload": {"filter": {"status": "pending"}, "requested_by": "someone else"},
            "idempotency_key": "attack",
        },
    )
    message = refused(response, "type")
    assert job_type in message and "own job types" in message
    assert list(Job.objects.values_list("pk", "status")) == [(pending.pk, JobStatus.PENDING)]


def test_not_even_a_superuser_enqueues_them_over_rest() -> None:
    response = Api(make_user("root", superuser=True)).post(
        "/api/jobs", body(type=bulk.BULK_CANCEL, payload={"filter": {"status": "pending"}})
    )
    refused(response, "type")
    assert not Job.objects.exists()


@pytest.mark.parametrize("job_type", [bulk.BULK_CANCEL, bulk.BULK_REQUEUE, "durable_jobs.x"])
def test_enqueue_from_python_refuses_the_package_s_own_types(job_type: str) -> None:
    payload = {"filter": {"status": "pending"}}
    with pytest.raises(InvalidJob, match="own job types") as caught:
        enqueue(job_type, payload)
    assert caught.value.field == "type"
    with pytest.raises(InvalidJob, match="own job types"):
        enqueue_many([{"type": job_type, "payload": payload}])
    assert not Job.objects.exists()


@pytest.mark.usefixtures("clean_registry")
def test_job_outside_the_package_may_not_take_one_of_its_names() -> None:
    def impostor(ctx: Any) -> None:
        pass

    with pytest.raises(InvalidJob, match="own job types"):
        job("durable_jobs.bulk_cancel")(impostor)
    with pytest.raises(InvalidJob, match="own job types"):
        job("durable_jobs.anything")(impostor)
    from django_durable_jobs.handlers import registry

    assert registry.get(bulk.BULK_CANCEL).func is not impostor  # type: ignore[union-attr]
    assert registry.get("durable_jobs.anything") is None


def test_bulk_start_records_who_asked_not_what_a_payload_says() -> None:
    from uuid import uuid4

    from django_durable_jobs.authorization import Actor

    operator = make_operator("alice")
    actor = Actor(door="admin", name="alice", user=operator)
    result = bulk.start("cancel", bulk.JobFilter(status="pending"), actor=actor, token=uuid4())
    assert result.job.payload["requested_by"] == "alice"
    (entry,) = AuditEntry.objects.all()
    assert (entry.actor, entry.door, entry.job_id) == ("alice", "admin", result.job.pk)


# -- types REST callers may enqueue ----------------------------------------------------------


@pytest.fixture
def scheduled_type(clean_registry: None) -> str:
    """A registered handler declared with a schedule: it runs on its schedule."""

    @job("tests.nightly", schedule=3600)
    def nightly(ctx: Any) -> None:
        pass

    return "tests.nightly"


def test_a_scheduled_type_is_refused_over_rest_by_default(staff: Api, scheduled_type: str) -> None:
    message = refused(staff.post("/api/jobs", body(type=scheduled_type)), "type")
    assert "runs on its schedule" in message and "API_ENQUEUE_TYPES" in message
    assert not Job.objects.exists()


def test_a_scheduled_type_listed_in_api_enqueue_types_is_accepted(
    staff: Api, scheduled_type: str
) -> None:
    with override_settings(DURABLE_JOBS={"API_ENQUEUE_TYPES": [scheduled_type]}):
        response = staff.post("/api/jobs", body(type=scheduled_type))
    assert response.status_code == 201, response.content
    assert Job.objects.get().type == scheduled_type


def test_api_enqueue_types_is_the_whole_list(staff: Api) -> None:
    with override_settings(DURABLE_JOBS={"API_ENQUEUE_TYPES": ["tests.*"]}):
        assert staff.post("/api/jobs", body("a", type="tests.record")).status_code == 201
        message = refused(staff.post("/api/jobs", body("b")), "type")
    assert "not one REST callers may enqueue" in message
    with override_settings(DURABLE_JOBS={"API_ENQUEUE_TYPES": ["durable_jobs.*"]}):
        # Listing them changes nothing (and is durable_jobs.E010).
        refused(staff.post("/api/jobs", body("c", type=bulk.BULK_CANCEL)), "type")
    assert list(Job.objects.values_list("type", flat=True)) == ["tests.record"]


# -- queues, priority, attempts -----------------------------------------------------------


def test_an_undeclared_queue_is_refused(staff: Api) -> None:
    message = refused(staff.post("/api/jobs", body(queue="emails")), "queue")
    assert "'emails' is not declared" in message
    assert not Job.objects.exists()


@pytest.mark.parametrize("queue", ["default", "throttled", "narrow"])
def test_a_declared_queue_is_accepted(staff: Api, queue: str) -> None:
    # The default queue, and the example project's QUEUES.
    response = staff.post("/api/jobs", body(queue=queue))
    assert response.status_code == 201, response.content
    assert Job.objects.get().queue == queue


@pytest.mark.usefixtures("clean_registry")
def test_a_queue_a_handler_declares_is_accepted(staff: Api) -> None:
    @job("tests.mailer", queue="mail")
    def mailer(ctx: Any) -> None:
        pass

    response = staff.post("/api/jobs", body(type="tests.mailer", queue="mail"))
    assert response.status_code == 201, response.content


def test_api_enqueue_queues_is_the_whole_list(staff: Api) -> None:
    with override_settings(DURABLE_JOBS={"API_ENQUEUE_QUEUES": ["emails"]}):
        assert staff.post("/api/jobs", body("a", queue="emails")).status_code == 201
        message = refused(staff.post("/api/jobs", body("b", queue="default")), "queue")
    assert "API_ENQUEUE_QUEUES" in message


def test_a_priority_above_api_max_priority_is_a_400(staff: Api) -> None:
    message = refused(staff.post("/api/jobs", body("p", priority=1)), "priority")
    assert "at most 0" in message
    assert staff.post("/api/jobs", body("q", priority=0)).status_code == 201
    assert staff.post("/api/jobs", body("r", priority=-5)).status_code == 201
    with override_settings(DURABLE_JOBS={"API_MAX_PRIORITY": 10}):
        assert staff.post("/api/jobs", body("s", priority=10)).status_code == 201
        refused(staff.post("/api/jobs", body("t", priority=11)), "priority")
    assert sorted(Job.objects.values_list("priority", flat=True)) == [-5, 0, 10]


def test_attempts_above_api_max_attempts_are_a_400(staff: Api) -> None:
    message = refused(staff.post("/api/jobs", body("a", max_attempts=26)), "max_attempts")
    assert "at most 25" in message
    assert staff.post("/api/jobs", body("b", max_attempts=25)).status_code == 201
    with override_settings(DURABLE_JOBS={"API_MAX_ATTEMPTS": 3}):
        refused(staff.post("/api/jobs", body("c", max_attempts=4)), "max_attempts")
    assert list(Job.objects.values_list("max_attempts", flat=True)) == [25]


# -- what a client that may not read jobs is told (finding 7) ----------------------------------


RECEIPT = {"id", "type", "queue", "idempotency_key", "created_at"}


def test_an_enqueue_only_client_gets_a_receipt_on_create_and_replay() -> None:
    enqueuer = Api(make_user("enqueuer", "add_job", staff=False))
    created = enqueuer.post("/api/jobs", body("mine", payload={"secret": "s"}))
    assert created.status_code == 201
    assert set(created.json()) == RECEIPT
    replay = enqueuer.post("/api/jobs", body("mine", payload={"secret": "s"}))
    assert replay.status_code == 200
    assert set(replay.json()) == RECEIPT
    assert replay.json()["id"] == created.json()["id"]
    for absent in ("payload", "status", "result", "errors", "last_error"):
        assert absent not in replay.json()


def test_an_enqueue_only_client_s_conflict_names_no_job() -> None:
    # Another client's job holds the key: its id and how it differs are not this client's.
    other = enqueue(TYPE, {"secret": "theirs"}, idempotency_key="shared").job
    enqueuer = Api(make_user("enqueuer", "add_job", staff=False))
    response = enqueuer.post("/api/jobs", body("shared", payload={"mine": 1}))
    answer = assert_error(response, 409, "idempotency_conflict")
    assert "job_id" not in answer and "differences" not in answer
    assert str(other.pk) not in response.content.decode()
    assert "theirs" not in response.content.decode()


def test_a_reader_still_gets_the_whole_job_and_the_conflict_s_details() -> None:
    reader = Api(make_user("reader", "add_job", "view_job", staff=False))
    created = reader.post("/api/jobs", body("r"))
    job_data = reader.post("/api/jobs", body("r")).json()
    assert job_data["id"] == created.json()["id"]
    assert job_data["payload"] == {"n": 1} and job_data["status"] == "pending"
    conflict = assert_error(
        reader.post("/api/jobs", body("r", payload={"n": 2})), 409, "idempotency_conflict"
    )
    assert conflict["job_id"] == job_data["id"] and conflict["differences"] == ["payload"]
