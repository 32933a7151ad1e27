"""The job list's bounds (issue 22): only its declared filters, no sorting, and
"Select all N" through a confirmation and the bulk path, never the whole table at once."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from django_durable_jobs import bulk
from django_durable_jobs.admin.jobs import JobAdmin
from django_durable_jobs.models import Job, JobStatus
from tests.factories import client_for, make_operator

from .helpers import DEAD_JOBS, JOBS, bulk_jobs, make_jobs, messages_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> Client:
    return client_for(make_operator())


def select_all(client: Client, url: str, action: str, **extra: str) -> Any:
    """The changelist's action form with "Select all N" clicked (one row ticked, as the
    page sends it)."""
    first = Job.objects.order_by("-created_at").values_list("pk", flat=True)[0]
    data = {"action": action, "select_across": "1", "index": "0", "_selected_action": [first]}
    return client.post(url, {**data, **extra})


@pytest.mark.parametrize(
    "query",
    [
        "last_error__iregex=bo+m",
        "payload__contains=x",
        "idempotency_key__startswith=a",
        "status__in=dead,pending",
        "created_at__gte=2000-01-01",
    ],
)
def test_a_lookup_no_filter_declares_is_refused(operator: Client, query: str) -> None:
    make_jobs(2, JobStatus.DEAD, last_error="boom")
    for url in (JOBS, DEAD_JOBS):
        response = operator.get(f"{url}?{query}")
        assert response.status_code == 400, (url, query)


@pytest.mark.parametrize(
    "query",
    [
        "status__exact=dead",
        "type=tests.record",
        "queue=default",
        "created_at__year=2030",
        "q=tests.record",
        "status__exact=dead&queue=default&p=1",
    ],
)
def test_the_declared_filters_still_work(operator: Client, query: str) -> None:
    make_jobs(2, JobStatus.DEAD)
    assert operator.get(f"{JOBS}?{query}").status_code == 200


def test_sorting_by_a_column_is_ignored(operator: Client) -> None:
    ids = make_jobs(3, JobStatus.DEAD)
    Job.objects.filter(pk=ids[0]).update(queue="zzz")
    unsorted = operator.get(JOBS).context["cl"].queryset.query.order_by
    for order in ("3", "-3", "1.2", "x"):
        response = operator.get(f"{JOBS}?o={order}")
        assert response.status_code == 200
        assert response.context["cl"].queryset.query.order_by == unsorted, order


def test_select_all_and_requeue_goes_to_the_bulk_confirmation_and_changes_nothing(
    operator: Client,
) -> None:
    dead = make_jobs(3, JobStatus.DEAD)
    response = select_all(operator, f"{JOBS}?status__exact=dead&queue=default", "requeue_jobs")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/durable_jobs/job/bulk-requeue/?")
    assert "queue=default" in response["Location"] and "status__exact=dead" in response["Location"]
    assert set(Job.objects.filter(pk__in=dead).values_list("status", flat=True)) == {"dead"}
    page = operator.get(response["Location"])
    assert page.status_code == 200 and page.context["matched"] == 3
    # Its POST starts the durable bulk job, which the tests of test_admin_bulk.py follow.
    token = page.context["token"]
    operator.post(response["Location"], {"token": token})
    (started,) = bulk_jobs()
    assert started.type == bulk.BULK_REQUEUE


def test_select_all_on_the_dead_jobs_page_requeues_through_the_bulk_path(operator: Client) -> None:
    make_jobs(2, JobStatus.DEAD)
    response = select_all(operator, DEAD_JOBS, "requeue_jobs")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/durable_jobs/deadjob/bulk-requeue/")


@pytest.mark.parametrize(
    ("query", "action"),
    [
        ("", "cancel_jobs"),  # no status filter: no bulk job can say what is listed
        ("status__exact=completed", "requeue_jobs"),  # nothing a requeue applies to
        ("status__exact=dead", "cancel_jobs"),
    ],
)
def test_select_all_that_no_bulk_job_expresses_is_refused_with_a_message(
    operator: Client, query: str, action: str
) -> None:
    pending = make_jobs(2, JobStatus.PENDING)
    make_jobs(2, JobStatus.DEAD)
    response = select_all(operator, f"{JOBS}?{query}", action)
    assert response.status_code == 302
    assert response["Location"] == f"{JOBS}?{query}".rstrip("?")
    (message,) = messages_of(response)
    assert "Nothing was changed" in message
    assert set(Job.objects.filter(pk__in=pending).values_list("status", flat=True)) == {"pending"}
    assert not bulk_jobs()


def test_select_all_and_run_now_asks_first_then_runs_the_listed_jobs(operator: Client) -> None:
    later = make_jobs(3, JobStatus.PENDING)
    other = make_jobs(1, JobStatus.PENDING, queue="other")
    Job.objects.update(available_at="2099-01-01T00:00:00Z")
    url = f"{JOBS}?status__exact=pending&queue=default"
    page = select_all(operator, url, "run_jobs_now")
    assert page.status_code == 200 and page.context["matched"] == 3
    assert Job.objects.filter(available_at__year=2099).count() == 4  # nothing changed yet

    # The page's form: the same action on all of them, confirmed.
    data = {
        "action": "run_jobs_now",
        "select_across": "1",
        page.context["checkbox_name"]: page.context["selected"],
        page.context["confirmed_name"]: "yes",
    }
    done = operator.post(page.context["changelist_url"], data)
    assert done.status_code == 302
    assert not Job.objects.filter(pk__in=later, available_at__year=2099).exists()
    assert Job.objects.filter(pk__in=other, available_at__year=2099).exists()


def test_select_all_and_run_now_is_refused_above_its_limit(
    operator: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(JobAdmin, "run_now_select_all_limit", 2)
    make_jobs(3, JobStatus.PENDING)
    Job.objects.update(available_at="2099-01-01T00:00:00Z")
    response = select_all(operator, JOBS, "run_jobs_now", durable_jobs_select_all_confirmed="yes")
    assert response.status_code == 302
    (message,) = messages_of(response)
    assert "at most 2 jobs" in message
    assert Job.objects.filter(available_at__year=2099).count() == 3


def test_a_few_selected_rows_still_act_at_once(operator: Client) -> None:
    ids = make_jobs(3, JobStatus.DEAD)
    response = operator.post(
        JOBS, {"action": "requeue_jobs", "index": "0", "_selected_action": ids[:2]}
    )
    assert response.status_code == 302
    assert Job.objects.filter(pk__in=ids[:2], status=JobStatus.PENDING).count() == 2
    assert Job.objects.get(pk=ids[2]).status == JobStatus.DEAD
