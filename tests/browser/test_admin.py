"""The operators' admin in a real browser: log in, the Queues page, pause and resume,
the job list, a dead job's page, requeue, and escaping.

Each scenario saves a screenshot (``screenshot`` fixture); with
``DURABLE_JOBS_SCREENSHOTS=docs/images/admin`` these are the images of the
admin guide.
"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By

from django_durable_jobs.models import Job, JobStatus, QueueState
from django_durable_jobs.pausing import paused_queues

from .demo import EMAILS_QUEUE, PAUSED_QUEUE, SUPERUSER, DemoState
from .pages import DEAD_JOBS, JOBS, QUEUES, AdminPages, Screenshot

pytestmark = pytest.mark.browser

XSS_PAYLOAD = "<script>alert('payload')</script>"
XSS_ERROR = "<img src=x onerror=\"alert('error')\">"


def test_log_in_through_the_form_and_find_the_queues(
    pages: AdminPages, screenshot: Screenshot
) -> None:
    pages.open("/admin/")
    pages.wait_for_path("/admin/login/?next=/admin/")  # not logged in: the login form

    pages.submit_login(SUPERUSER[0], "wrong password")  # refused, back on the form
    assert "Please enter the correct username and password" in pages.text(".errornote")

    pages.log_in(*SUPERUSER)
    assert "welcome, admin" in pages.text("#user-tools").lower()  # CSS capitalises it
    section = pages.driver.find_element(By.CSS_SELECTOR, ".app-durable_jobs")
    entries = [link.text for link in section.find_elements(By.CSS_SELECTOR, "th a")]
    assert {"Jobs", "Dead jobs", "Queues"} <= set(entries), entries
    screenshot("index")


def test_pause_and_resume_a_queue(
    admin_pages: AdminPages, demo: DemoState, screenshot: Screenshot
) -> None:
    admin_pages.click_link("Queues")
    assert admin_pages.driver.current_url == f"{admin_pages.base_url}{QUEUES}"
    assert admin_pages.row_flag(PAUSED_QUEUE, "paused") is True
    assert admin_pages.row_flag(EMAILS_QUEUE, "paused") is False
    assert "2 (paused)" in admin_pages.row_cell(PAUSED_QUEUE, "held_back_now").text

    assert admin_pages.run_action("pause_queues", [EMAILS_QUEUE]) == ["1 queue was paused."]
    assert admin_pages.row_flag(EMAILS_QUEUE, "paused") is True
    assert set(paused_queues()) == {EMAILS_QUEUE, PAUSED_QUEUE}
    assert QueueState.objects.get(name=EMAILS_QUEUE).paused_at is not None
    screenshot("queues")

    assert admin_pages.run_action("resume_queues", [EMAILS_QUEUE]) == ["1 queue was resumed."]
    assert admin_pages.row_flag(EMAILS_QUEUE, "paused") is False
    assert admin_pages.row_flag(PAUSED_QUEUE, "paused") is True
    assert set(paused_queues()) == {PAUSED_QUEUE}
    assert QueueState.objects.get(name=EMAILS_QUEUE).paused_at is None


def test_the_job_list_and_a_dead_jobs_page(
    admin_pages: AdminPages, demo: DemoState, screenshot: Screenshot
) -> None:
    admin_pages.open(JOBS)
    rows = admin_pages.driver.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == Job.objects.count() == 12
    dead = demo.dead_receipt
    assert admin_pages.row_cell(dead.pk, "status").text == "dead"
    assert admin_pages.row_cell(dead.pk, "attempts_display").text == "3/3"
    assert admin_pages.row_cell(dead.pk, "short_error").text.startswith(
        "tests.browser.demo.SMTPUnavailable: SMTP server unavailable"
    )
    screenshot("job-list")

    admin_pages.open(DEAD_JOBS)
    listed = admin_pages.driver.find_elements(By.CSS_SELECTOR, "#result_list input.action-select")
    assert {box.get_attribute("value") for box in listed} == {str(job.pk) for job in demo.dead}
    screenshot("dead-jobs")

    admin_pages.driver.find_element(By.LINK_TEXT, str(dead.pk)).click()
    admin_pages.wait_for_path(f"{DEAD_JOBS}{dead.pk}/change/")
    assert admin_pages.text(".field-status .readonly") == "dead"
    assert '"email": "ada@example.com"' in admin_pages.text(".field-payload_display pre")
    error = admin_pages.text(".field-last_error_display pre")
    assert "Traceback (most recent call last)" in error
    assert "ConnectionRefusedError: [Errno 111] Connection refused: smtp.example.com:587" in error
    history = admin_pages.driver.find_elements(By.CSS_SELECTOR, ".field-error_history pre")
    assert len(history) == 3  # one traceback per attempt
    screenshot("job-dead")
    admin_pages.scroll_to(".field-error_history")
    screenshot("job-dead-errors")


def test_requeue_a_dead_job(
    admin_pages: AdminPages, demo: DemoState, screenshot: Screenshot
) -> None:
    dead = demo.dead_receipt
    admin_pages.open_job(dead)
    assert admin_pages.text(".field-status .readonly") == "dead"

    assert admin_pages.requeue(dead) == [f"Job {dead.pk} was requeued: pending, runnable now."]
    screenshot("requeued")
    dead.refresh_from_db()
    assert (dead.status, dead.attempts) == (JobStatus.PENDING, 0)
    assert len(dead.errors) == 3  # the history is kept
    others = Job.objects.filter(pk__in=[job.pk for job in demo.dead if job.pk != dead.pk])
    assert set(others.values_list("status", flat=True)) == {JobStatus.DEAD}

    admin_pages.open_job(dead)
    assert admin_pages.text(".field-status .readonly") == "pending"


def test_a_jobs_page_shows_html_in_payload_and_errors_as_text(
    admin_pages: AdminPages, screenshot: Screenshot
) -> None:
    from tests.factories import make_job

    job = make_job(
        "tests.record",
        {"comment": XSS_PAYLOAD},
        status=JobStatus.DEAD,
        last_error=f"ValueError: {XSS_ERROR}",
        errors=[{"attempt": 1, "error": XSS_ERROR, "exception": XSS_PAYLOAD, "traceback": ""}],
    )
    admin_pages.open_job(job)  # asserts that no alert opened
    assert XSS_PAYLOAD in admin_pages.text(".field-payload_display pre")
    assert XSS_ERROR in admin_pages.text(".field-last_error_display pre")
    history = admin_pages.text(".field-error_history")
    assert XSS_ERROR in history and XSS_PAYLOAD in history
    # Text, not elements: no <script> or <img> came out of the job's data.
    for field in ("payload_display", "last_error_display", "error_history"):
        elements = admin_pages.driver.find_elements(
            By.CSS_SELECTOR, f".field-{field} script, .field-{field} img"
        )
        assert elements == [], field
    admin_pages.scroll_to("fieldset:has(.field-payload_display)")
    screenshot("job-escaped")
