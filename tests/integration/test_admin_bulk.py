"""Bulk by filter in the admin: "Requeue all N matching" / "Cancel all N matching" on the
job list, the confirmation page, the bulk job it enqueues, and that job run by a worker."""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs

import pytest
from django.contrib.admin.sites import site
from django.test import Client
from django.utils import timezone

from django_durable_jobs import bulk
from django_durable_jobs.context import CancelFlag, JobContext
from django_durable_jobs.enqueueing import enqueue_own
from django_durable_jobs.exceptions import JobCancelled
from django_durable_jobs.models import DeadJob, Job, JobStatus
from tests.factories import burst, client_for, user_with

from .helpers import DEAD_JOBS, JOBS, bulk_jobs, make_jobs, messages_of

XSS = "<script>alert(1)</script>"


def bulk_links(html: str) -> dict[str, tuple[str, str]]:
    """``{operation: (href, text)}`` of the bulk buttons on a list page."""
    found = re.findall(r'<a href="([^"]+)" class="durable-jobs-bulk-(\w+)">([^<]+)</a>', html)
    return {operation: (href.replace("&amp;", "&"), text) for href, operation, text in found}


def token_of(html: str) -> str:
    match = re.search(r'name="token" value="([0-9a-f]{32})"', html)
    assert match
    return match.group(1)


# -- the buttons on the list -------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status__exact=dead", {"requeue": "Requeue all 3 matching"}),
        ("status__exact=cancelled", {"requeue": "Requeue the 1 matching job"}),
        ("status__exact=pending&queue=q", {"cancel": "Cancel all 2 matching"}),
        ("status__exact=waiting", {}),  # none here: no button for an empty list
        ("status__exact=completed", {}),
        ("", {}),  # no status filter, no bulk
        ("queue=q", {}),
    ],
)
def test_the_list_offers_bulk_for_the_statuses_it_applies_to(
    admin_client: Client, query: str, expected: dict[str, str]
) -> None:
    make_jobs(3, JobStatus.DEAD)
    make_jobs(1, JobStatus.CANCELLED)
    make_jobs(2, JobStatus.PENDING, queue="q")
    make_jobs(1, JobStatus.COMPLETED)
    links = bulk_links(admin_client.get(f"{JOBS}?{query}").content.decode())
    assert {operation: text for operation, (_, text) in links.items()} == expected
    for operation, (href, _) in links.items():
        path, _, href_query = href.partition("?")
        assert path == f"{JOBS}bulk-{operation}/"
        assert parse_qs(href_query) == parse_qs(query)


@pytest.mark.django_db
def test_the_dead_jobs_page_offers_a_bulk_requeue(admin_client: Client) -> None:
    make_jobs(2, JobStatus.DEAD, type="tests.a")
    make_jobs(1, JobStatus.DEAD, type="tests.b")
    links = bulk_links(admin_client.get(f"{DEAD_JOBS}?type=tests.a").content.decode())
    assert links == {
        "requeue": (f"{DEAD_JOBS}bulk-requeue/?type=tests.a", "Requeue all 2 matching")
    }


@pytest.mark.django_db
def test_a_user_who_can_only_view_gets_no_bulk_button_and_403() -> None:
    make_jobs(2, JobStatus.DEAD)
    client = client_for(user_with("view_job"))
    assert bulk_links(client.get(f"{JOBS}?status__exact=dead").content.decode()) == {}
    url = f"{JOBS}bulk-requeue/?status__exact=dead"
    assert client.get(url).status_code == 403
    assert client.post(url, {"token": uuid.uuid4().hex}).status_code == 403
    assert bulk_jobs() == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "params",
    [
        {"status__exact": "dead"},
        {"status__exact": "dead", "type": "tests.a"},
        {"status__exact": "pending", "queue": "q"},
        {"status__exact": "dead", "q": "key-7"},
        {"status__exact": "dead", "created_at__year": "2023"},
        {"status__exact": "dead", "created_at__year": "2023", "created_at__month": "5"},
        {
            "status__exact": "dead",
            "created_at__year": "2023",
            "created_at__month": "5",
            "created_at__day": "2",
        },
    ],
)
def test_the_bulk_filter_matches_exactly_what_the_list_shows(
    admin_client: Client, params: dict[str, str]
) -> None:
    for day in (datetime(2023, 5, 1), datetime(2023, 5, 2), datetime(2023, 6, 1)):
        make_jobs(2, JobStatus.DEAD, created_at=timezone.make_aware(day))
    make_jobs(2, JobStatus.DEAD, type="tests.a")
    make_jobs(2, JobStatus.PENDING, queue="q")
    make_jobs(2, JobStatus.PENDING)
    Job.objects.filter(pk=make_jobs(1, JobStatus.DEAD)[0]).update(idempotency_key="key-7")
    response = admin_client.get(JOBS, params)
    listed = set(response.context["cl"].queryset.values_list("pk", flat=True))
    job_filter = site._registry[Job].bulk_filter(params)  # type: ignore[attr-defined]
    assert job_filter is not None
    assert set(job_filter.queryset().values_list("pk", flat=True)) == listed
    assert listed


@pytest.mark.django_db
def test_a_filter_the_bulk_filter_cannot_reproduce_offers_no_bulk(admin_client: Client) -> None:
    admin = site._registry[Job]
    assert admin.bulk_filter({"status__exact": "dead", "priority": "1"}) is None  # type: ignore[attr-defined]
    assert admin.bulk_filter({"status__exact": "dead", "created_at__year": "x"}) is None  # type: ignore[attr-defined]
    assert site._registry[DeadJob].bulk_filter({}).status == "dead"  # type: ignore[attr-defined]
    make_jobs(1, JobStatus.DEAD)
    response = admin_client.get(f"{JOBS}bulk-requeue/?status__exact=dead&priority=1", follow=True)
    assert response.redirect_chain[0][0] == f"{JOBS}?priority=1&status__exact=dead"
    # A lookup no filter declares: the list refuses it (400), its message left unread.
    assert response.status_code == 400
    assert "needs the list filtered to dead or cancelled jobs" in messages_of(response)[0]
    response = admin_client.get(f"{JOBS}bulk-cancel/?status__exact=dead", follow=True)
    assert "needs the list filtered to pending or waiting jobs" in messages_of(response)[-1]
    assert bulk_jobs() == []


# -- the confirmation page and the POST ---------------------------------------------------------


@pytest.mark.django_db
def test_the_confirmation_page_says_what_and_how_many_and_changes_nothing(
    admin_client: Client,
) -> None:
    ids = make_jobs(4, JobStatus.DEAD, type="tests.a", queue="emails")
    response = admin_client.get(f"{JOBS}bulk-requeue/?status__exact=dead&type=tests.a&p=2")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<strong>4</strong> jobs match: dead jobs of type tests.a." in html
    assert "durable_jobs.bulk_requeue" in html
    assert 'name="token"' in html and "csrfmiddlewaretoken" in html
    assert f'href="{JOBS}?status__exact=dead&amp;type=tests.a"' in html  # back, without the page
    assert set(Job.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"dead"}
    assert bulk_jobs() == []


@pytest.mark.django_db
def test_the_search_term_is_escaped_on_the_confirmation_page(admin_client: Client) -> None:
    Job.objects.filter(pk=make_jobs(1, JobStatus.DEAD)[0]).update(idempotency_key=XSS)
    html = admin_client.get(f"{JOBS}bulk-requeue/", {"status__exact": "dead", "q": XSS})
    assert XSS not in html.content.decode()
    assert "<strong>1</strong> job matches" in html.content.decode()


@pytest.mark.django_db
def test_the_post_enqueues_one_bulk_job_and_links_to_it(admin_client: Client) -> None:
    make_jobs(3, JobStatus.DEAD, queue="emails")
    url = f"{JOBS}bulk-requeue/?queue=emails&status__exact=dead"
    token = token_of(admin_client.get(url).content.decode())
    response = admin_client.post(url, {"token": token}, follow=True)
    assert response.redirect_chain == [(f"{JOBS}?queue=emails&status__exact=dead", 302)]
    (job,) = bulk_jobs()
    assert job.type == bulk.BULK_REQUEUE and job.status == JobStatus.PENDING
    assert job.payload == {
        "filter": {"status": "dead", "queue": "emails"},
        "batch_size": bulk.DEFAULT_BATCH_SIZE,
        "requested_by": "admin",
    }
    assert job.idempotency_key == f"durable_jobs.bulk:{uuid.UUID(token)}"
    (message,) = messages_of(response)
    link = f'<a href="{JOBS}{job.pk}/change/">{job.pk}</a>'
    assert message == (
        f"Bulk requeue of dead jobs in queue emails started as job {link}: its page shows the "
        "progress."
    )
    assert f'<a href="{JOBS}{job.pk}/change/">' in response.content.decode()  # rendered as a link
    # The same form again: the same job.
    response = admin_client.post(url, {"token": token}, follow=True)
    assert len(bulk_jobs()) == 1
    assert "was already started as job" in messages_of(response)[0]


@pytest.mark.django_db
def test_the_post_needs_the_csrf_token_and_a_form_token() -> None:
    make_jobs(2, JobStatus.PENDING)
    client = client_for(user_with("view_job", "cancel_job"), csrf=True)
    url = f"{JOBS}bulk-cancel/?status__exact=pending"
    assert client.post(url, {"token": uuid.uuid4().hex}).status_code == 403
    page = client.get(url).content.decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert csrf
    response = client.post(url, {"csrfmiddlewaretoken": csrf.group(1)}, follow=True)
    assert messages_of(response) == ["The form was incomplete; nothing was done."]
    assert bulk_jobs() == []
    client.post(url, {"csrfmiddlewaretoken": csrf.group(1), "token": token_of(page)})
    assert [job.type for job in bulk_jobs()] == [bulk.BULK_CANCEL]


# -- the bulk job, run by a worker ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_bulk_requeue_from_the_admin_runs_on_a_worker_and_shows_its_progress(
    admin_client: Client,
) -> None:
    targets = make_jobs(2_500, JobStatus.DEAD, queue="q", attempts=5)
    others = make_jobs(20, JobStatus.DEAD, queue="other")
    url = f"{JOBS}bulk-requeue/?queue=q&status__exact=dead"
    admin_client.post(url, {"token": token_of(admin_client.get(url).content.decode())})
    (job,) = bulk_jobs()
    html = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "Dead jobs in queue q" in html and "not started yet" in html
    # The worker serves the bulk job's queue only: the requeued jobs stay pending.
    burst(queues=frozenset({"default"}))
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert job.result["requeued"] == 2_500 and job.result["batches"] == 3
    assert job.result["done"] is True and job.result["matched"] == 2_500
    assert set(Job.objects.filter(pk__in=targets).values_list("status", flat=True)) == {"pending"}
    assert set(Job.objects.filter(pk__in=others).values_list("status", flat=True)) == {"dead"}
    html = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert "Requeued 2500 of 2500 matching job(s) in 3 batch(es)" in html
    assert "done" in html


@pytest.mark.django_db(transaction=True)
def test_a_bulk_job_retried_resumes_after_its_last_batch() -> None:
    ids = make_jobs(12, JobStatus.PENDING, queue="q")
    job_filter = bulk.JobFilter(status="pending", queue="q")
    # An earlier attempt cancelled the 5 newest, then its worker died.
    newest = list(
        Job.objects.filter(pk__in=ids)
        .order_by("-created_at", "-pk")
        .values_list("created_at", "pk")
    )
    Job.objects.filter(pk__in=[pk for _, pk in newest[:5]]).update(status=JobStatus.CANCELLED)
    progress = bulk.BulkProgress("cancel", job_filter, 12, False, 5, 1, newest[4])
    job_type, payload = bulk.bulk_job_payload("cancel", job_filter, batch_size=4)
    job = enqueue_own(job_type, payload, idempotency_key="test:resume").job
    Job.objects.filter(pk=job.pk).update(result=progress.as_dict(), attempts=1)
    # A job above the cursor that became pending again since is not visited.
    Job.objects.filter(pk=newest[0][1]).update(status=JobStatus.PENDING)
    burst(queues=frozenset({"default"}))
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert (job.result["cancelled"], job.result["batches"], job.result["matched"]) == (12, 3, 12)
    assert Job.objects.get(pk=newest[0][1]).status == JobStatus.PENDING
    assert Job.objects.filter(pk__in=ids, status=JobStatus.CANCELLED).count() == 11


@pytest.mark.django_db(transaction=True)
def test_a_bulk_job_with_a_bad_payload_dies_at_once() -> None:
    payload = {"filter": {"status": "pending"}}
    job = enqueue_own(bulk.BULK_REQUEUE, payload, idempotency_key="test:bad").job
    burst(queues=frozenset({"default"}))
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD and job.attempts == 1
    assert "a bulk requeue applies to dead or cancelled jobs, not pending" in job.last_error


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_bulk_job_stops_before_committing_a_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = make_jobs(10, JobStatus.DEAD)
    job_type, payload = bulk.bulk_job_payload("requeue", bulk.JobFilter(status="dead"))
    job = enqueue_own(job_type, payload, idempotency_key="test:cancelled").job
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING)
    flag = CancelFlag()
    flag.request_cancel()
    ctx = JobContext(job.pk, job_type, "default", payload, 1, 5, _cancel=flag)
    with pytest.raises(JobCancelled):
        bulk.run_job(ctx, "requeue")
    assert set(Job.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"dead"}
    assert Job.objects.get(pk=job.pk).result is None
    # Not cancelled: each batch's progress is in the job's row, committed with the batch.
    ctx = JobContext(job.pk, job_type, "default", {**payload, "batch_size": 4}, 1, 5)
    seen: list[Any] = []
    original = bulk.run

    def spy(*args: Any, **kwargs: Any) -> bulk.BulkProgress:
        save = kwargs["on_batch"]

        def on_batch(progress: bulk.BulkProgress) -> None:
            save(progress)
            seen.append(Job.objects.get(pk=job.pk).result["requeued"])

        return original(*args, **{**kwargs, "on_batch": on_batch})

    monkeypatch.setattr(bulk, "run", spy)
    final = bulk.run_job(ctx, "requeue")
    assert seen == [4, 8, 10]
    assert final["requeued"] == 10 and final["done"] is True
