"""``GET /api/jobs/{id}?wait=S``: the long poll, its validation and its bound on threads."""

from __future__ import annotations

import base64
import socket
import threading
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test import override_settings

from django_durable_jobs import db, enqueue, operations
from django_durable_jobs.api import long_poll
from django_durable_jobs.api.long_poll import waiting_requests
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.waiting import listener as listening
from tests.factories import WAIT_SECONDS, Api, complete_next, make_operator, make_user, wait_until

from .helpers import assert_error

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_POLL = {"WAIT_POLL_INTERVAL_SECONDS": 60.0}
#: A request's wait beyond the test's own (WAIT_SECONDS): its end cannot be what the test sees.
LONGER_THAN_WAIT_SECONDS = 4 * WAIT_SECONDS


def get_in_thread(api: Api, path: str) -> tuple[threading.Thread, dict[str, Any]]:
    """``api.get(path)`` on a thread; the dict gets ``response``."""
    answer: dict[str, Any] = {}

    def run() -> None:
        try:
            answer["response"] = api.get(path)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, answer


def until_requests_wait(count: int) -> None:
    """Until ``count`` requests hold a slot, and the listener LISTENs."""
    listener = listening.listener_for(db.database_alias())
    wait_until(
        lambda: (
            waiting_requests.held == count
            and listener.waiting() >= count
            and listener.connected.is_set()
        ),
        what=f"{count} waiting request(s)",
    )


@override_settings(DURABLE_JOBS=SLOW_POLL)
def test_wait_answers_with_the_job_once_it_is_finished(
    staff: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # How each nap of the waiter ended: woken (True) or at its end (False).
    naps: list[bool] = []
    sleep = listening.ThreadWaiter.sleep

    def nap(self: listening.ThreadWaiter, seconds: float) -> bool:
        naps.append(sleep(self, seconds))
        return naps[-1]

    monkeypatch.setattr(listening.ThreadWaiter, "sleep", nap)
    job = enqueue("example.echo", {"n": 1}).job
    thread, answer = get_in_thread(staff, f"/api/jobs/{job.pk}?wait=20")
    until_requests_wait(1)
    complete_next({"echo": 1})
    thread.join(30)
    response = answer["response"]
    assert response.status_code == 200
    assert response.json()["status"] == JobStatus.COMPLETED
    assert response.json()["result"] == {"echo": 1}
    # Woken by the job's end, not answered at the 20 s deadline (nor the 60 s
    # poll): no nap ran to its end. None at all when the job ended between the
    # request's registering and its first nap (seen in CI on a loaded machine).
    # How soon: benchmarks/waiting.py.
    assert False not in naps, naps
    assert waiting_requests.held == 0


def test_wait_answers_with_the_current_state_after_s_seconds(staff: Api) -> None:
    job = enqueue("example.echo", {"n": 1}).job
    response = staff.get(f"/api/jobs/{job.pk}/?wait=0.3")
    assert response.status_code == 200
    assert response.json()["status"] == JobStatus.PENDING
    assert response.json()["id"] == str(job.pk)


@pytest.mark.parametrize("value", ["", "abc", "0", "-1", "30.5", "31", "nan", "inf", "1e9"])
def test_a_bad_wait_is_a_400_naming_wait(staff: Api, value: str) -> None:
    job = enqueue("example.echo", {"n": 1}).job
    body = assert_error(staff.get(f"/api/jobs/{job.pk}?wait={value}"), 400, "invalid")
    assert list(body["detail"]) == ["wait"]


def test_wait_on_an_unknown_job_is_a_404(staff: Api) -> None:
    assert_error(
        staff.get("/api/jobs/00000000-0000-7000-8000-000000000000?wait=1"), 404, "not_found"
    )


@override_settings(DURABLE_JOBS={**SLOW_POLL, "API_MAX_WAITING_REQUESTS": 1})
def test_over_the_limit_a_wait_is_a_503_with_retry_after_but_a_finished_job_is_answered(
    staff: Api,
) -> None:
    first, second = (enqueue("example.echo", {"n": n}).job for n in (1, 2))
    thread, answer = get_in_thread(staff, f"/api/jobs/{first.pk}?wait=20")
    until_requests_wait(1)

    refused = staff.get(f"/api/jobs/{second.pk}?wait=5")
    body = assert_error(refused, 503, "too_many_waiting")
    assert refused["Retry-After"] == "1"
    assert body["limit"] == 1
    # Without ?wait=, or for a finished job, nothing waits: answered as usual.
    assert staff.get(f"/api/jobs/{second.pk}").status_code == 200
    operations.cancel(second.pk)
    finished = staff.get(f"/api/jobs/{second.pk}?wait=5")
    assert finished.status_code == 200 and finished.json()["status"] == JobStatus.CANCELLED

    operations.cancel(first.pk)  # the first request is answered, its slot freed
    thread.join(30)
    assert answer["response"].json()["status"] == JobStatus.CANCELLED
    assert waiting_requests.held == 0
    assert staff.get(f"/api/jobs/{second.pk}?wait=1").status_code == 200


def test_wait_needs_the_same_permission_as_the_detail() -> None:
    job = enqueue("example.echo", {"n": 1}).job
    assert Api().get(f"/api/jobs/{job.pk}?wait=1").status_code in (401, 403)
    assert waiting_requests.held == 0


@override_settings(
    DURABLE_JOBS={
        **SLOW_POLL,
        "API_MAX_WAITING_REQUESTS": 4,
        "API_MAX_WAITING_REQUESTS_PER_USER": 1,
    }
)
def test_a_user_at_his_share_gets_a_503_while_another_user_is_served(staff: Api) -> None:
    # issue 22: the slots were per process only, so one client could take them all.
    first, second = (enqueue("example.echo", {"n": n}).job for n in (1, 2))
    thread, answer = get_in_thread(staff, f"/api/jobs/{first.pk}?wait=20")
    until_requests_wait(1)

    body = assert_error(staff.get(f"/api/jobs/{second.pk}?wait=5"), 503, "too_many_waiting")
    assert body["limit"] == 1 and "API_MAX_WAITING_REQUESTS_PER_USER" in body["detail"]
    other = Api(make_user("other", "view_job"))
    served = other.get(f"/api/jobs/{second.pk}?wait=0.2")
    assert served.status_code == 200 and served.json()["status"] == JobStatus.PENDING

    operations.cancel(first.pk)
    thread.join(30)
    assert answer["response"].status_code == 200
    assert waiting_requests.held == 0


@override_settings(DURABLE_JOBS={**SLOW_POLL, "API_MAX_WAITING_REQUESTS": 1})
def test_a_client_that_hangs_up_frees_its_slot(
    live_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real server (runserver's WSGI server on a thread), and a client that
    # closes its connection in the middle of its wait. The wait may be longer
    # than the 30 s clients get, so that its end is far beyond the test's own
    # wait below: only the hang-up can free the slot in time. How soon it does
    # ("about a second under runserver") is not a test's business.
    monkeypatch.setattr(long_poll, "MAX_WAIT_SECONDS", LONGER_THAN_WAIT_SECONDS)
    make_operator("staff")
    job = enqueue("example.echo", {"n": 1}).job
    host, port = live_server.thread.host, live_server.thread.port
    token = base64.b64encode(b"staff:pw").decode()
    client = socket.create_connection((host, port))
    client.sendall(
        f"GET /api/jobs/{job.pk}?wait={LONGER_THAN_WAIT_SECONDS:g} HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Basic {token}\r\n\r\n".encode()
    )
    wait_until(lambda: waiting_requests.held == 1, what="the request to wait")
    client.close()
    # Well before the wait the request asked for: only its hang-up can end it.
    wait_until(lambda: waiting_requests.held == 0, what="the slot to be freed")
    # Still pending, and the slot serves the next client.
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING
    answer = Api(User.objects.get(username="staff")).get(f"/api/jobs/{job.pk}?wait=0.2")
    assert answer.status_code == 200
