"""The admin's job page for durable steps: the steps table, why a suspended job
waits, and the "Retry from step" button (a select of the job's steps, a POST
with CSRF, requeue_job, the audit trail and the History page)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import formats, timezone

from django_durable_jobs.models import (
    AuditEntry,
    Job,
    JobDependency,
    JobStatus,
    JobStep,
    StepKind,
    StepStatus,
)
from tests import factories
from tests.factories import client_for, user_with

pytestmark = pytest.mark.django_db

JOBS = "/admin/durable_jobs/job/"
DEAD_JOBS = "/admin/durable_jobs/deadjob/"
XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
RETRY = 'class="durable-jobs-retry-from-step"'


def make_job(**fields: Any) -> Job:
    return Job.objects.create(**{"type": "tests.record", **fields})


def add_steps(job: Job, *names: str) -> None:
    now = timezone.now()
    factories.add_steps(
        job,
        *names,
        started_at=now,
        finished_at=now + timedelta(milliseconds=1250),
        result={"secret": "s3cr3t"},
        result_bytes=2048,
    )


def page(client: Client, job: Job, base: str = JOBS) -> str:
    response = client.get(f"{base}{job.pk}/change/")
    assert response.status_code == 200
    return str(response.content.decode())


def names(job: Job) -> list[str]:
    return list(JobStep.objects.filter(job=job).values_list("name", flat=True))


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


# -- the steps table and the suspension line -------------------------------------------


def test_the_page_lists_the_steps_escaped_without_results(admin_client: Client) -> None:
    job = make_job(status=JobStatus.DEAD)
    add_steps(job, "charge", f"record{XSS}")
    JobStep.objects.create(
        job=job,
        name="email",
        status=StepStatus.FAILED,
        attempt=3,
        position=2,
        started_at=timezone.now(),
        error=f"SMTPError {XSS}",
    )
    html = page(admin_client, job)
    assert 'class="durable-jobs-steps"' in html
    assert "charge" in html and "1.250 s" in html and "2.0\xa0KB" in html
    assert f"record{ESCAPED}" in html and f"SMTPError {ESCAPED}" in html
    assert XSS not in html
    assert "s3cr3t" not in html


def test_a_job_without_steps_shows_none(admin_client: Client) -> None:
    html = page(admin_client, make_job())
    assert 'class="durable-jobs-steps"' not in html
    assert RETRY not in html


@pytest.mark.parametrize(
    ("status", "reason", "words"),
    [
        (
            JobStatus.PENDING,
            {"until": "2030-01-01T00:00:00+00:00"},
            'Sleeping until <time datetime="2030-01-01T00:00:00+00:00">{shown}</time>',
        ),
        (
            JobStatus.WAITING,
            {"event": f"signup:{XSS}"},
            f"Waiting for the event <code>signup:{ESCAPED}</code>",
        ),
        (
            JobStatus.WAITING,
            {"event": "k", "deadline": "2030-01-01T00:00:00+00:00"},
            'times out at <time datetime="2030-01-01T00:00:00+00:00">{shown}</time>',
        ),
    ],
)
def test_the_page_says_why_a_suspended_job_waits(
    admin_client: Client, status: str, reason: dict[str, Any], words: str
) -> None:
    wakes = datetime(2030, 1, 1, tzinfo=dt_timezone.utc)  # a sleep not over yet
    html = page(admin_client, make_job(status=status, waiting_for=reason, available_at=wakes))
    # In the admin's time zone and format, as its other times are; the instant in UTC.
    shown = formats.date_format(timezone.localtime(wakes), "DATETIME_FORMAT")
    assert words.replace("{shown}", shown) in html
    assert XSS not in html


def test_a_job_waiting_for_a_child_links_it(admin_client: Client) -> None:
    child = make_job(status=JobStatus.RUNNING)
    parent = make_job(status=JobStatus.WAITING, waiting_for={"job": str(child.pk)})
    html = page(admin_client, parent)
    assert "Waiting for the child job" in html
    assert f'href="{JOBS}{child.pk}/change/"' in html


def test_a_job_waiting_for_parents_links_them(admin_client: Client) -> None:
    first = make_job(status=JobStatus.RUNNING)
    child = make_job(status=JobStatus.WAITING, waiting_on=1)
    JobDependency.objects.create(child=child, parent=first)
    html = page(admin_client, child)
    assert "Waiting for its parents:" in html and f"{first.pk}</a> (running)" in html


# -- retry from step -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "shown"),
    [
        (JobStatus.DEAD, True),
        (JobStatus.CANCELLED, True),
        (JobStatus.PENDING, False),
        (JobStatus.COMPLETED, False),
    ],
)
def test_the_button_shows_on_dead_and_cancelled_jobs_with_steps(
    admin_client: Client, status: str, shown: bool
) -> None:
    job = make_job(status=status)
    add_steps(job, "a")
    assert (RETRY in page(admin_client, job)) is shown


def test_the_dead_jobs_page_has_the_button_too(admin_client: Client) -> None:
    job = make_job(status=JobStatus.DEAD)
    add_steps(job, "a", "b")
    assert RETRY in page(admin_client, job, DEAD_JOBS)
    response = admin_client.post(f"{DEAD_JOBS}{job.pk}/retry-from-step/", {"from_step": "b"})
    assert response.status_code == 302 and response["Location"] == f"{JOBS}{job.pk}/change/"
    assert names(job) == ["a"]


def test_the_confirmation_page_offers_the_steps(admin_client: Client) -> None:
    job = make_job(status=JobStatus.DEAD)
    add_steps(job, "charge", f"x{XSS}")
    html = admin_client.get(f"{JOBS}{job.pk}/retry-from-step/").content.decode()
    assert "Retry this job from a step?" in html
    assert '<select name="from_step"' in html
    assert '<option value="charge">charge</option>' in html
    assert f'<option value="x{ESCAPED}">x{ESCAPED}</option>' in html
    assert XSS not in html
    assert names(job) == ["charge", f"x{XSS}"]


def test_no_steps_no_confirmation_page(admin_client: Client) -> None:
    job = make_job(status=JobStatus.DEAD)
    response = admin_client.get(f"{JOBS}{job.pk}/retry-from-step/", follow=True)
    assert messages_of(response) == [f"Job {job.pk} has no recorded steps."]


def test_retry_from_step_with_csrf_requeues_forgets_and_records() -> None:
    user = user_with("view_job", "requeue_job")
    client = client_for(user, csrf=True)
    job = make_job(status=JobStatus.DEAD, attempts=3)
    add_steps(job, "charge", "record", "email")
    assert (
        client.post(f"{JOBS}{job.pk}/retry-from-step/", {"from_step": "record"}).status_code == 403
    )
    assert names(job) == ["charge", "record", "email"]
    form = client.get(f"{JOBS}{job.pk}/retry-from-step/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token
    response = client.post(
        f"{JOBS}{job.pk}/retry-from-step/",
        {"csrfmiddlewaretoken": token.group(1), "from_step": "record"},
        follow=True,
    )
    assert messages_of(response) == [
        f"Job {job.pk} was requeued from the chosen step: pending, runnable now."
    ]
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts) == (JobStatus.PENDING, 0)
    assert names(job) == ["charge"]
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.door, entry.actor, entry.job_id) == (
        "retry_from_step",
        "admin",
        user.get_username(),
        job.pk,
    )
    assert entry.details == {"from_step": "record"}
    history = client.get(f"{JOBS}{job.pk}/history/").content.decode()
    assert "retry from step" in history or "retry_from_step" in history
    assert "record" in history


def test_an_unknown_step_changes_nothing(admin_client: Client) -> None:
    job = make_job(status=JobStatus.DEAD)
    add_steps(job, "a")
    response = admin_client.post(
        f"{JOBS}{job.pk}/retry-from-step/", {"from_step": "nope"}, follow=True
    )
    (message,) = messages_of(response)
    assert message.startswith("Nothing was done:") and "'nope'" in message
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD and names(job) == ["a"]
    assert not AuditEntry.objects.exists()


def test_a_job_no_longer_dead_is_not_retried(admin_client: Client) -> None:
    job = make_job(status=JobStatus.PENDING)
    add_steps(job, "a")
    response = admin_client.post(
        f"{JOBS}{job.pk}/retry-from-step/", {"from_step": "a"}, follow=True
    )
    (message,) = messages_of(response)
    assert message.startswith("Nothing was done:")
    assert names(job) == ["a"]


@pytest.mark.parametrize("codenames", [("view_job",), ("view_job", "change_job", "cancel_job")])
def test_without_requeue_job_no_button_and_403(codenames: tuple[str, ...]) -> None:
    client = client_for(user_with(*codenames))
    job = make_job(status=JobStatus.DEAD)
    add_steps(job, "a")
    assert RETRY not in page(client, job)
    assert client.get(f"{JOBS}{job.pk}/retry-from-step/").status_code == 403
    assert client.post(f"{JOBS}{job.pk}/retry-from-step/", {"from_step": "a"}).status_code == 403
    assert names(job) == ["a"] and Job.objects.get(pk=job.pk).status == JobStatus.DEAD


def test_a_step_of_kind_sleep_shows_its_kind(admin_client: Client) -> None:
    job = make_job(status=JobStatus.PENDING, waiting_for={"until": "2030-01-01T00:00:00+00:00"})
    JobStep.objects.create(
        job=job,
        name="nap",
        kind=StepKind.SLEEP,
        status=StepStatus.SUSPENDED,
        attempt=1,
        started_at=timezone.now(),
    )
    html = page(admin_client, job)
    assert "<td>sleep</td>" in html and "<td>suspended</td>" in html
