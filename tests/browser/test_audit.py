"""The audit trail in a real browser (issue 22): an operator who holds only the requeue
permission requeues a dead job through its button and the confirmation, and the job's
History page then names them, the door ("admin") and the action; and one job acted on
through the three doors (admin, REST, CLI) shows all three there, newest first."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from django_durable_jobs.authorization import os_login
from django_durable_jobs.models import AuditEntry, JobStatus
from tests.factories import PASSWORD, Api, make_job, make_user

from .demo import DemoState
from .pages import AdminPages, Screenshot

pytestmark = pytest.mark.browser


def test_a_requeue_in_the_admin_shows_on_the_job_s_history_page(
    pages: AdminPages, demo: DemoState, screenshot: Screenshot
) -> None:
    make_user("olivia", "view_job", "requeue_job")
    pages.log_in("olivia", PASSWORD)
    pages.collapse_nav_sidebar()
    dead = demo.dead_receipt
    assert pages.history(dead) == []  # nothing recorded yet
    assert "No operator action has been recorded for it." in pages.text("#audit-trail")

    assert pages.requeue(dead) == [f"Job {dead.pk} was requeued: pending, runnable now."]
    dead.refresh_from_db()
    assert dead.status == JobStatus.PENDING

    assert pages.history(dead) == [
        {"actor": "olivia (127.0.0.1)", "door": "admin", "action": "requeue"}
    ]
    screenshot("job-history")
    (entry,) = AuditEntry.objects.filter(job_id=dead.pk)
    assert (entry.actor, entry.door, entry.job_id) == ("olivia", "admin", dead.pk)


def test_one_job_acted_on_through_three_doors_shows_them_all_newest_first(
    pages: AdminPages, screenshot: Screenshot
) -> None:
    """The admin requeues it (its button), REST cancels it, the CLI requeues it again."""
    make_user("olivia", "view_job", "requeue_job")
    rita = make_user("rita", "cancel_job", staff=False)
    make_user("carl", "requeue_job", staff=False)
    job = make_job(status=JobStatus.DEAD, last_error="boom")
    pages.log_in("olivia", PASSWORD)
    pages.collapse_nav_sidebar()

    # The admin: the Requeue button and its confirmation, in the browser.
    assert pages.requeue(job) == [f"Job {job.pk} was requeued: pending, runnable now."]
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING

    # REST: rita cancels it, with HTTP Basic credentials.
    response = Api(rita).post(f"/api/jobs/{job.pk}/cancel", {})
    assert response.status_code == 200, response.content
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED

    # The CLI: carl requeues it (--user: his permission checked, the OS login recorded).
    out = StringIO()
    call_command("jobs", "requeue", str(job.pk), "--user", "carl", stdout=out, stderr=StringIO())
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING

    assert pages.history(job) == [
        {"actor": f"carl (os:{os_login()})", "door": "cli", "action": "requeue"},
        {"actor": "rita (127.0.0.1)", "door": "rest", "action": "cancel"},
        {"actor": "olivia (127.0.0.1)", "door": "admin", "action": "requeue"},
    ]
    screenshot("job-history-three-doors")
    rows = AuditEntry.objects.filter(job_id=job.pk).order_by("-at", "-id")
    assert [(e.actor, e.door, e.action) for e in rows] == [
        (f"carl (os:{os_login()})", "cli", "requeue"),
        ("rita", "rest", "cancel"),
        ("olivia", "admin", "requeue"),
    ]
