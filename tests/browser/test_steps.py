"""Durable steps in the admin, in a real browser: a dead job's steps table, why a
suspended job waits (a sleep, an event), and "Retry from step" through its
button, the select of the job's steps and the confirmation, by an operator who
holds only view_job and requeue_job; the History page then names them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
from django.utils import formats, timezone
from selenium.webdriver.common.by import By

from django_durable_jobs.models import (
    AuditEntry,
    EventWaiter,
    Job,
    JobStatus,
    JobStep,
    StepKind,
    StepStatus,
)
from tests.factories import PASSWORD, make_job, make_user

from .pages import AdminPages, Screenshot

pytestmark = pytest.mark.browser

#: When the sleeping job wakes: far ahead, so it is still asleep when its page is read.
WAKES = datetime(2030, 1, 1, 9, 30, tzinfo=dt_timezone.utc)
EVENT_KEY = "signup-confirmed:1042"
SMTP_ERROR = "SMTPUnavailable: SMTP server unavailable, receipt for ada@example.com not sent"


@dataclass
class StepJobs:
    dead: Job
    sleeping: Job
    waiting: Job


def _step(job: Job, position: int, name: str, **fields: Any) -> JobStep:
    started = timezone.now() - timedelta(minutes=10 - position)
    values: dict[str, Any] = {
        "kind": StepKind.STEP,
        "status": StepStatus.COMPLETED,
        "attempt": 1,
        "started_at": started,
        "finished_at": started + timedelta(milliseconds=250),
    }
    values.update(fields)
    return JobStep.objects.create(job=job, name=name, position=position, **values)


def build_step_jobs() -> StepJobs:
    """A dead job with four step records, a job asleep, a job waiting for an event."""
    dead = make_job(
        "tests.record",
        {"order_id": 1042},
        status=JobStatus.DEAD,
        attempts=3,
        max_attempts=3,
        completed_at=timezone.now(),
        last_error=SMTP_ERROR,
    )
    _step(dead, 0, "charge", result={"charge_id": "ch_3PqL"}, result_bytes=24)
    _step(dead, 1, "record", result={"row": 7}, result_bytes=10)
    _step(dead, 2, "email", result="x" * 2046, result_bytes=2048)
    _step(dead, 3, "receipt", status=StepStatus.FAILED, attempt=3, error=SMTP_ERROR)

    sleeping = make_job(
        "tests.record",
        status=JobStatus.PENDING,
        available_at=WAKES,
        waiting_for={"until": WAKES.isoformat()},
    )
    _step(sleeping, 0, "charge", result={"charge_id": "ch_9"}, result_bytes=21)
    _step(
        sleeping,
        1,
        "cool-off",
        kind=StepKind.SLEEP,
        status=StepStatus.SUSPENDED,
        finished_at=None,
        wake_at=WAKES,
    )

    waiting = make_job("tests.record", status=JobStatus.WAITING, waiting_for={"event": EVENT_KEY})
    _step(
        waiting,
        0,
        "confirmation",
        kind=StepKind.EVENT,
        status=StepStatus.SUSPENDED,
        finished_at=None,
        event_key=EVENT_KEY,
    )
    EventWaiter.objects.create(job_id=waiting.pk, key=EVENT_KEY)
    return StepJobs(dead=dead, sleeping=sleeping, waiting=waiting)


@pytest.fixture
def step_jobs(transactional_db: None) -> StepJobs:
    return build_step_jobs()


def step_names(job: Job) -> list[str]:
    return list(JobStep.objects.filter(job=job).order_by("position").values_list("name", flat=True))


def object_tools(pages: AdminPages) -> list[str]:
    """The classes of the links above the open job page's form (its buttons, History)."""
    tools = pages.wait_for(By.CSS_SELECTOR, ".object-tools")
    return [link.get_attribute("class") for link in tools.find_elements(By.TAG_NAME, "a")]


def test_retry_a_dead_job_from_a_step(
    pages: AdminPages, step_jobs: StepJobs, screenshot: Screenshot
) -> None:
    make_user("olivia", "view_job", "requeue_job")
    pages.log_in("olivia", PASSWORD)
    pages.collapse_nav_sidebar()
    dead = step_jobs.dead

    pages.open_job(dead)
    assert pages.text(".field-status .readonly") == "dead"
    rows = pages.steps_table()
    # name, kind, status, attempt, started, duration, size or error
    assert [row[:4] for row in rows] == [
        ["charge", "step", "completed", "1"],
        ["record", "step", "completed", "1"],
        ["email", "step", "completed", "1"],
        ["receipt", "step", "failed", "3"],
    ]
    assert [row[5] for row in rows] == ["0.250 s"] * 4
    assert [row[6] for row in rows] == ["24 bytes", "10 bytes", "2.0 KB", SMTP_ERROR]
    assert pages.text(".field-waiting_for_display .readonly") == "-"
    pages.scroll_to("fieldset:has(.field-steps_display)")
    screenshot("job-steps")

    offered, messages = pages.retry_from_step(dead, "record")
    assert offered == ["charge", "record", "email", "receipt"]
    assert messages == [f"Job {dead.pk} was requeued from the chosen step: pending, runnable now."]
    assert pages.text(".field-status .readonly") == "pending"
    assert [row[0] for row in pages.steps_table()] == ["charge"]
    dead.refresh_from_db()
    assert (dead.status, dead.attempts) == (JobStatus.PENDING, 0)
    assert step_names(dead) == ["charge"]  # record, email and the failed receipt: forgotten
    assert JobStep.objects.get(job=dead, name="charge").result == {"charge_id": "ch_3PqL"}

    assert pages.history(dead) == [
        {"actor": "olivia (127.0.0.1)", "door": "admin", "action": "retry from step"}
    ]
    assert '{"from_step": "record"}' in pages.text("#audit-trail .audit-details")
    screenshot("job-steps-history")
    (entry,) = AuditEntry.objects.filter(job_id=dead.pk)
    assert (entry.actor, entry.door, entry.action) == ("olivia", "admin", "retry_from_step")
    assert entry.details == {"from_step": "record"}


def test_a_suspended_jobs_page_says_what_it_waits_for(
    pages: AdminPages, step_jobs: StepJobs, screenshot: Screenshot
) -> None:
    make_user("olivia", "view_job", "requeue_job")
    pages.log_in("olivia", PASSWORD)
    pages.collapse_nav_sidebar()

    pages.open_job(step_jobs.sleeping)
    assert pages.text(".field-status .readonly") == "pending"
    assert pages.text(".field-waiting_for_display .readonly") == (
        # The admin's time zone and format, as for its other times.
        f"Sleeping until {formats.date_format(timezone.localtime(WAKES), 'DATETIME_FORMAT')}"
    )
    rows = pages.steps_table()
    assert [row[:3] for row in rows] == [
        ["charge", "step", "completed"],
        ["cool-off", "sleep", "suspended"],
    ]
    assert object_tools(pages) == ["historylink"]  # no retry: it is not dead or cancelled
    assert rows[0][6] == "21 bytes"
    # Not over yet: no duration, and no result (not an empty one: "0 bytes" was shown).
    assert (rows[1][5], rows[1][6]) == ("-", "-")
    pages.scroll_to("fieldset:has(.field-steps_display)")
    screenshot("job-sleeping")

    pages.open_job(step_jobs.waiting)
    assert pages.text(".field-status .readonly") == "waiting"
    assert pages.text(".field-waiting_for_display .readonly") == (
        f"Waiting for the event {EVENT_KEY}"
    )
    assert pages.text(".field-waiting_for_display code") == EVENT_KEY
    assert object_tools(pages) == ["historylink"]
    assert [row[:3] + row[5:] for row in pages.steps_table()] == [
        ["confirmation", "event", "suspended", "-", "-"]
    ]


def test_without_requeue_job_there_is_no_retry_from_step_button(
    pages: AdminPages, step_jobs: StepJobs
) -> None:
    make_user("viktor", "view_job")
    pages.log_in("viktor", PASSWORD)
    dead = step_jobs.dead
    pages.open_job(dead)
    assert [row[0] for row in pages.steps_table()] == ["charge", "record", "email", "receipt"]
    # The page's tools are drawn (History), the buttons left out.
    assert object_tools(pages) == ["historylink"]
    assert pages.driver.find_elements(By.CSS_SELECTOR, "a.durable-jobs-retry-from-step") == []
    # The same page, for a user who holds requeue_job, has the button.
    make_user("olivia", "view_job", "requeue_job")
    pages.driver.delete_all_cookies()
    pages.log_in("olivia", PASSWORD)
    pages.open_job(dead)
    assert object_tools(pages) == [
        "durable-jobs-requeue",
        "durable-jobs-retry-from-step",
        "historylink",
    ]
    button = pages.driver.find_element(By.CSS_SELECTOR, "a.durable-jobs-retry-from-step")
    assert button.get_attribute("textContent") == "Retry from step"
