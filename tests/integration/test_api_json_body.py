"""Every state-changing REST call takes a JSON body, so that no cross-site form can make one.

A page of another site can make the browser POST an HTML form (form-encoded,
multipart or text/plain) to the API, and the browser adds the HTTP Basic
credentials it holds for it; it cannot send ``Content-Type:
application/json`` without a CORS preflight the API never grants. Before
this rule, requeue, cancel, pause and resume read no body, and such a form
requeued or cancelled jobs (issue 22, finding 2).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from django_durable_jobs.models import Event, Job, JobStatus, QueueState
from django_durable_jobs.pausing import pause_queue, paused_queues
from tests.factories import Api, make_operator
from tests.factories import basic_auth as basic

from .helpers import assert_error, job_body, make_echo_job

pytestmark = pytest.mark.django_db

FORMS = {
    "urlencoded": ("application/x-www-form-urlencoded", "a=1"),
    "multipart": (
        "multipart/form-data; boundary=xyz",
        '--xyz\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--xyz--\r\n',
    ),
    "text-plain": ("text/plain", '{"a": 1}'),
    "json-lookalike": ("application/jsonx", "{}"),
}


def state() -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """What a call could change: every job's status, the paused queues, the events."""
    jobs = sorted((str(pk), status) for pk, status in Job.objects.values_list("pk", "status"))
    return jobs, sorted(paused_queues()), sorted(Event.objects.values_list("key", flat=True))


def calls() -> dict[str, str]:
    """Each state-changing call, on rows it would change if accepted."""
    dead, pending = make_echo_job(JobStatus.DEAD), make_echo_job()
    pause_queue("parked")
    return {
        "requeue": f"/api/jobs/{dead.pk}/requeue",
        "cancel": f"/api/jobs/{pending.pk}/cancel",
        "pause": "/api/queues/default/pause",
        "resume": "/api/queues/parked/resume",
        "enqueue": "/api/jobs",
        "emit": "/api/events",
    }


CALLS = ["requeue", "cancel", "pause", "resume", "enqueue", "emit"]


def raw_post(path: str, content_type: str | None, body: str, **extra: Any) -> Any:
    """A POST with exactly this Content-Type (``None``: none) and body.

    Django's test client leaves out the Content-Type of an empty body; a
    browser or curl sends it.
    """
    meta: dict[str, Any] = dict(extra)
    if content_type is not None:
        meta["CONTENT_TYPE"] = content_type
    return Client().generic("POST", path, body.encode(), content_type=content_type or "", **meta)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("call", CALLS)
def test_a_form_post_with_valid_basic_credentials_is_a_415_and_changes_nothing(
    call: str, form: str
) -> None:
    staff = make_operator("staff")
    path = calls()[call]
    before = state()
    content_type, body = FORMS[form]
    response = raw_post(path, content_type, body, **basic(staff))
    detail = assert_error(response, 415, "unsupported_media_type")["detail"]
    assert "application/json" in detail
    assert state() == before


@pytest.mark.parametrize("call", CALLS)
def test_a_post_without_content_type_is_a_415_and_changes_nothing(call: str) -> None:
    staff = make_operator("staff")
    path = calls()[call]
    before = state()
    for body in ("", "{}"):
        assert_error(raw_post(path, None, body, **basic(staff)), 415, "unsupported_media_type")
    assert state() == before


@pytest.mark.parametrize("call", ["requeue", "cancel", "pause", "resume"])
@pytest.mark.parametrize("body", ["{}", ""], ids=["empty-object", "empty-body"])
def test_json_with_nothing_to_say_is_accepted(call: str, body: str) -> None:
    staff = make_operator("staff")
    response = raw_post(calls()[call], "application/json; charset=utf-8", body, **basic(staff))
    assert response.status_code == 200, response.content


def test_the_form_is_refused_before_authentication() -> None:
    """No password is checked for a request refused anyway (and anonymous gets 415 too)."""
    job = make_echo_job(JobStatus.DEAD)
    response = raw_post(f"/api/jobs/{job.pk}/requeue", "application/x-www-form-urlencoded", "")
    assert_error(response, 415, "unsupported_media_type")
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD


@pytest.mark.parametrize(
    "body",
    [{"later_option": "x"}, [], "x", None, 1],
    ids=["unknown-key", "list", "string", "null", "number"],
)
@pytest.mark.parametrize("call", ["requeue", "cancel", "resume"])
def test_a_call_without_options_refuses_a_body_that_is_not_an_empty_object(
    call: str, body: Any
) -> None:
    """A key is refused, not ignored: a client asking for an option this server
    lacks (a later version's) learns so instead of a plain requeue. (Requeue
    takes one option, ``from_step``.)"""
    staff = Api(make_operator("staff"))
    path = calls()[call]
    before = state()
    response = staff.post(path, json.dumps(body).encode())
    detail = assert_error(response, 400, "invalid")["detail"]
    if isinstance(body, dict) and call == "requeue":
        assert detail == {"later_option": ["is not a field of this request."]}
    elif isinstance(body, dict):
        assert detail == {"later_option": ["is not an option of this call; send {}."]}
    else:
        assert detail == {"body": ["must be a JSON object: {} when there is nothing to say."]}
    assert state() == before


def test_a_body_that_is_not_json_is_a_400_and_changes_nothing() -> None:
    staff = Api(make_operator("staff"))
    path = calls()["requeue"]
    before = state()
    assert_error(staff.post(path, b"{not json"), 400, "parse_error")
    assert state() == before


def test_a_method_the_route_does_not_take_stays_a_405_whatever_its_content_type() -> None:
    staff = make_operator("staff")
    job = make_echo_job()
    response = Client().put(
        f"/api/jobs/{job.pk}/cancel", "a=1", "application/x-www-form-urlencoded", **basic(staff)
    )
    assert_error(response, 405, "method_not_allowed")


def test_reads_need_no_content_type() -> None:
    staff = Api(make_operator("staff"))
    make_echo_job()
    assert staff.get("/api/jobs", CONTENT_TYPE="text/plain").status_code == 200


def test_pause_still_reads_its_options() -> None:
    staff = Api(make_operator("staff"))
    response = staff.post("/api/queues/emails/pause", {"until": None})
    assert response.status_code == 200 and response.json()["paused"] is True
    assert QueueState.objects.filter(name="emails").exists()


def test_enqueue_with_a_json_body_still_works() -> None:
    staff = Api(make_operator("staff"))
    assert staff.post("/api/jobs", job_body("json-ok")).status_code == 201
