"""The audit trail in a real browser (issue 22): an operator who holds only the requeue
permission requeues a dead job through its button and the confirmation, and the job's
History page then names them, the door ("admin") and the action."""

from __future__ import annotations

import pytest

from django_durable_jobs.models import AuditEntry, JobStatus
from tests.factories import PASSWORD, make_user

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
