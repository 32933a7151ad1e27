"""A job's page in the admin: its buttons (requeue, cancel, run now), their confirmation
and POST, permissions and CSRF, a state changed meanwhile, and the attempt timeline."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone

from django_durable_jobs.admin.timeline import CANCELLED_EXCEPTION, attempt_timeline
from django_durable_jobs.models import Job, JobStatus
from tests.factories import client_for, user_with

pytestmark = pytest.mark.django_db

JOBS = "/admin/durable_jobs/job/"
DEAD_JOBS = "/admin/durable_jobs/deadjob/"
XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
BUTTONS = {"requeue": "Requeue", "cancel": "Cancel", "run-now": "Run now"}


def make_job(**fields: Any) -> Job:
    return Job.objects.create(**{"type": "tests.record", **fields})


def buttons(html: str) -> set[str]:
    """The slugs of the action buttons on a job's page."""
    return set(re.findall(r'class="durable-jobs-(requeue|cancel|run-now)"', html))


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def csrf_token(html: str) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert match, "no CSRF token in the form"
    return match.group(1)


def status_of(job: Job) -> str:
    return str(Job.objects.values_list("status", flat=True).get(pk=job.pk))


# -- the buttons ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (JobStatus.PENDING, {"cancel", "run-now"}),
        (JobStatus.WAITING, {"cancel"}),
        (JobStatus.RUNNING, {"cancel"}),
        (JobStatus.DEAD, {"requeue"}),
        (JobStatus.CANCELLED, {"requeue"}),
        (JobStatus.COMPLETED, set()),
    ],
)
def test_the_page_has_a_button_for_each_operation_its_state_allows(
    admin_client: Client, status: str, expected: set[str]
) -> None:
    job = make_job(status=status)
    html = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert buttons(html) == expected
    for slug in expected:
        assert f'href="{JOBS}{job.pk}/{slug}/"' in html
    assert "History" in html  # Django's own tool stays


def test_a_dead_jobs_page_has_the_requeue_button_too(admin_client: Client) -> None:
    job = make_job(status=JobStatus.DEAD)
    html = admin_client.get(f"{DEAD_JOBS}{job.pk}/change/").content.decode()
    assert buttons(html) == {"requeue"}
    response = admin_client.post(f"{DEAD_JOBS}{job.pk}/requeue/")
    # Back to the job's page under "Jobs": it is no longer dead.
    assert response.status_code == 302
    assert response["Location"] == f"{JOBS}{job.pk}/change/"
    assert status_of(job) == JobStatus.PENDING


def test_a_user_who_can_only_view_sees_no_button_and_gets_403() -> None:
    client = client_for(user_with("view_job"))
    job = make_job(status=JobStatus.DEAD)
    response = client.get(f"{JOBS}{job.pk}/change/")
    assert response.status_code == 200
    assert buttons(response.content.decode()) == set()
    for url in (f"{JOBS}{job.pk}/requeue/", f"{DEAD_JOBS}{job.pk}/requeue/"):
        assert client.get(url).status_code == 403
        assert client.post(url).status_code == 403
    assert status_of(job) == JobStatus.DEAD


def test_a_staff_user_without_job_permissions_gets_403() -> None:
    client = client_for(user_with())
    job = make_job()
    assert client.post(f"{JOBS}{job.pk}/cancel/").status_code == 403
    assert status_of(job) == JobStatus.PENDING


def test_someone_not_logged_in_is_sent_to_the_login_page() -> None:
    job = make_job(status=JobStatus.DEAD)
    response = Client().post(f"{JOBS}{job.pk}/requeue/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert status_of(job) == JobStatus.DEAD


def test_change_job_gives_no_button_and_no_action() -> None:
    client = client_for(user_with("view_job", "change_job"))
    job = make_job()
    assert buttons(client.get(f"{JOBS}{job.pk}/change/").content.decode()) == set()
    for slug in ("cancel", "run-now"):
        assert client.post(f"{JOBS}{job.pk}/{slug}/").status_code == 403
    assert status_of(job) == JobStatus.PENDING


@pytest.mark.parametrize(
    ("codename", "expected"),
    [("cancel_job", {"cancel"}), ("run_job_now", {"run-now"}), ("requeue_job", set())],
)
def test_each_button_shows_for_the_permission_of_its_action(
    codename: str, expected: set[str]
) -> None:
    client = client_for(user_with("view_job", codename))
    job = make_job()
    assert buttons(client.get(f"{JOBS}{job.pk}/change/").content.decode()) == expected


# -- CSRF -------------------------------------------------------------------------------


def test_a_post_without_the_csrf_token_is_refused() -> None:
    client = client_for(user_with("view_job", "requeue_job"), csrf=True)
    job = make_job(status=JobStatus.DEAD)
    assert client.post(f"{JOBS}{job.pk}/requeue/").status_code == 403
    assert status_of(job) == JobStatus.DEAD
    # With the token of the confirmation page's form, the same POST works.
    page = client.get(f"{JOBS}{job.pk}/requeue/")
    assert page.status_code == 200
    token = csrf_token(page.content.decode())
    response = client.post(f"{JOBS}{job.pk}/requeue/", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert status_of(job) == JobStatus.PENDING


# -- confirmation, effect and message ------------------------------------------------------


def test_the_confirmation_page_says_what_happens_and_changes_nothing(admin_client: Client) -> None:
    job = make_job(status=JobStatus.DEAD, type=f"tests.{XSS}")
    response = admin_client.get(f"{JOBS}{job.pk}/requeue/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Requeue this job?" in html
    assert "attempts reset to 0" in html
    assert 'method="post"' in html and "csrfmiddlewaretoken" in html
    assert f'href="{JOBS}{job.pk}/change/"' in html  # "No, take me back"
    assert XSS not in html and ESCAPED in html
    assert status_of(job) == JobStatus.DEAD


def test_requeue_resets_the_job_and_says_so(admin_client: Client) -> None:
    job = make_job(
        status=JobStatus.DEAD, attempts=5, last_error="boom", completed_at=timezone.now()
    )
    response = admin_client.post(f"{JOBS}{job.pk}/requeue/", follow=True)
    assert response.redirect_chain == [(f"{JOBS}{job.pk}/change/", 302)]
    assert messages_of(response) == [f"Job {job.pk} was requeued: pending, runnable now."]
    job.refresh_from_db()
    assert (job.status, job.attempts, job.completed_at, job.last_error) == (
        "pending",
        0,
        None,
        "boom",
    )
    assert buttons(response.content.decode()) == {"cancel", "run-now"}


def test_cancel_of_a_pending_job(admin_client: Client) -> None:
    job = make_job()
    response = admin_client.post(f"{JOBS}{job.pk}/cancel/", follow=True)
    assert messages_of(response) == [f"Job {job.pk} was cancelled."]
    assert status_of(job) == JobStatus.CANCELLED


def test_cancel_of_a_running_job_asks_it_to_stop(admin_client: Client) -> None:
    job = make_job(status=JobStatus.RUNNING, attempts=1, lease_holder="host:1:w")
    response = admin_client.post(f"{JOBS}{job.pk}/cancel/", follow=True)
    assert messages_of(response) == [
        f"Cancel requested for job {job.pk}: it is running, and ends cancelled when its "
        "handler stops."
    ]
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.cancel_requested_at is not None
    assert "running, cancel requested" in response.content.decode()  # the timeline's row


def test_run_now_makes_a_delayed_job_runnable(admin_client: Client) -> None:
    job = make_job(available_at=timezone.now() + timedelta(days=1))
    response = admin_client.post(f"{JOBS}{job.pk}/run-now/", follow=True)
    assert messages_of(response) == [f"Job {job.pk} will run now: the next free worker claims it."]
    job.refresh_from_db()
    assert job.available_at <= timezone.now()


def test_a_job_whose_state_changed_meanwhile_gets_a_message_not_a_500(
    admin_client: Client,
) -> None:
    job = make_job(status=JobStatus.DEAD)
    assert admin_client.get(f"{JOBS}{job.pk}/requeue/").status_code == 200
    # Someone else requeued it, and a worker claimed it, before the confirmation.
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    response = admin_client.post(f"{JOBS}{job.pk}/requeue/", follow=True)
    assert response.status_code == 200
    assert messages_of(response) == [
        f"Nothing was done: Job {job.pk} is running: “Requeue” applies to dead or cancelled "
        "jobs only."
    ]
    assert status_of(job) == JobStatus.RUNNING


def test_a_button_of_another_state_redirects_with_a_warning(admin_client: Client) -> None:
    job = make_job(status=JobStatus.COMPLETED)
    response = admin_client.get(f"{JOBS}{job.pk}/cancel/", follow=True)
    assert response.redirect_chain == [(f"{JOBS}{job.pk}/change/", 302)]
    assert messages_of(response) == [
        f"Job {job.pk} is completed: “Cancel” applies to pending, waiting or running jobs only."
    ]


@pytest.mark.parametrize("object_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_an_unknown_job_redirects_to_the_list(admin_client: Client, object_id: str) -> None:
    response = admin_client.post(f"{JOBS}{object_id}/requeue/", follow=True)
    assert response.redirect_chain == [(JOBS, 302)]
    assert messages_of(response) == [f"There is no job with id {object_id} (pruned, perhaps)."]


def test_other_methods_are_not_allowed(admin_client: Client) -> None:
    job = make_job(status=JobStatus.DEAD)
    assert admin_client.put(f"{JOBS}{job.pk}/requeue/").status_code == 405
    assert status_of(job) == JobStatus.DEAD


# -- the page: timeline, parents and children, escaping ---------------------------------------


def entry(attempt: int, minute: int, **fields: Any) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "at": f"2025-01-01T10:{minute:02d}:00+00:00",
        "error": f"builtins.ValueError: failure {attempt}",
        "exception": "builtins.ValueError",
        "traceback": f"Traceback (most recent call last):\n  attempt {attempt}",
        "worker": f"host:{attempt}:w",
        **fields,
    }


def outcomes(job: Job) -> list[tuple[str, int | None, str]]:
    return [(row.kind, row.attempt, row.outcome) for row in attempt_timeline(job)]


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2025, 1, 1, 10, minute, second, tzinfo=dt_timezone.utc)


def test_the_timeline_of_a_job_that_failed_then_completed() -> None:
    job = make_job(
        status=JobStatus.COMPLETED,
        attempts=3,
        started_at=at(5),
        completed_at=at(5, 2),
        errors=[entry(1, 1), entry(2, 3)],
    )
    assert outcomes(job) == [
        ("attempt", 1, "failed, retried"),
        ("attempt", 2, "failed, retried"),
        ("attempt", 3, "completed"),
    ]
    rows = attempt_timeline(job)
    assert (rows[0].worker, rows[0].ended, rows[0].started) == ("host:1:w", at(1), None)
    assert (rows[2].started, rows[2].ended, rows[2].duration_text) == (at(5), at(5, 2), "2.00 s")


def test_the_timeline_of_a_dead_job_requeued_and_running_again() -> None:
    job = make_job(
        status=JobStatus.RUNNING,
        attempts=2,
        started_at=at(9),
        lease_holder="host:9:w",
        errors=[entry(1, 1), entry(2, 2), entry(1, 5)],
    )
    assert outcomes(job) == [
        ("attempt", 1, "failed, retried"),
        ("attempt", 2, "failed"),
        ("requeue", None, "requeued: attempts reset to 0"),
        ("attempt", 1, "failed, retried"),
        ("attempt", 2, "running"),
    ]
    assert attempt_timeline(job)[-1].worker == "host:9:w"


def test_the_timeline_of_a_dead_job_shows_when_its_last_attempt_started() -> None:
    job = make_job(
        status=JobStatus.DEAD, attempts=2, started_at=at(1, 30), errors=[entry(1, 0), entry(2, 2)]
    )
    assert outcomes(job) == [("attempt", 1, "failed, retried"), ("attempt", 2, "failed, dead")]
    last = attempt_timeline(job)[-1]
    assert (last.started, last.ended, last.duration_text) == (at(1, 30), at(2), "30.0 s")


def test_the_timeline_of_jobs_waiting_for_an_attempt_or_cancelled_without_one() -> None:
    retry = make_job(attempts=1, errors=[entry(1, 1)], available_at=at(2))
    assert outcomes(retry)[0] == ("attempt", 1, "failed, retry scheduled")
    assert outcomes(retry)[1][:2] == ("next", 2)
    assert make_job(status=JobStatus.WAITING, waiting_on=2).status == "waiting"
    assert outcomes(Job.objects.get(status="waiting")) == [("next", 1, "waiting for 2 parent jobs")]
    by_parent = make_job(status=JobStatus.CANCELLED, last_error="Cancelled: parent job x.")
    assert outcomes(by_parent) == [("end", None, "cancelled")]
    assert attempt_timeline(by_parent)[0].error == "Cancelled: parent job x."
    while_running = make_job(
        status=JobStatus.CANCELLED,
        attempts=1,
        errors=[entry(1, 1, exception=CANCELLED_EXCEPTION, error="JobCancelled: ...")],
    )
    assert outcomes(while_running) == [("attempt", 1, "cancelled while running")]


def test_the_page_shows_the_timeline_payload_and_result_escaped(admin_client: Client) -> None:
    job = make_job(
        status=JobStatus.DEAD,
        attempts=1,
        payload={"html": XSS, "nested": {"n": 1}},
        result={"echo": XSS},
        last_error=f"RuntimeError: {XSS}",
        errors=[
            entry(1, 1, error=f"RuntimeError: {XSS}", traceback=XSS, worker=XSS, exception=XSS)
        ],
    )
    html = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert XSS not in html
    # payload, result, last error, and the entry's error, traceback, worker and exception
    assert html.count(ESCAPED) >= 7
    assert re.search(r"<pre>\{\s+&quot;html&quot;: &quot;" + re.escape(ESCAPED), html)  # indented
    assert '<table class="durable-jobs-timeline">' in html
    assert "failed, dead" in html and "2025-01-01 10:01:00" in html


def test_the_page_links_parents_and_children(admin_client: Client) -> None:
    from django_durable_jobs import enqueue

    parent = enqueue("tests.record").job
    child = enqueue("tests.record", depends_on=[parent]).job
    html = admin_client.get(f"{JOBS}{parent.pk}/change/").content.decode()
    assert f'<a href="{JOBS}{child.pk}/change/">{child.pk}</a> (waiting)' in html
    html = admin_client.get(f"{JOBS}{child.pk}/change/").content.decode()
    assert f'<a href="{JOBS}{parent.pk}/change/">{parent.pk}</a> (pending)' in html
