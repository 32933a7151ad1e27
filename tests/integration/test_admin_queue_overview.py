"""The admin's Queues page as an overview: counts that link to the job list, estimates past
the cap, the oldest pending job, the last hour's chart, and the per-row pause and resume
(a confirmation page, then a POST with CSRF and the job permissions)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from html import unescape

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from django_durable_jobs import queue_overview as overview_module
from django_durable_jobs.models import Job, JobStatus, QueueMinuteStats, QueueState
from django_durable_jobs.pausing import pause_queue, paused_queues
from django_durable_jobs.queue_overview import CHART_MINUTES, queue_overview
from tests.factories import client_for, make_job, queue_connection, user_with

pytestmark = pytest.mark.django_db

QUEUES = "/admin/durable_jobs/queuestate/"
JOBS = "/admin/durable_jobs/job/"


def client_with(*codenames: str) -> Client:
    return client_for(user_with(*codenames))


def cells(html: str, column: str) -> dict[str, str]:
    """``{queue name: the inner HTML of its cell in column}`` of the changelist."""
    rows = re.findall(r"<tr>(.*?)</tr>", html, re.S)
    found = {}
    for row in rows:
        name = re.search(r'<th class="field-name"><a href="[^"]*">(.*?)</a></th>', row)
        cell = re.search(rf'<td class="field-{column}[^"]*">(.*?)</td>', row, re.S)
        if name and cell:
            found[unescape(name.group(1))] = cell.group(1)
    return found


def fill_emails() -> None:
    for _ in range(3):
        make_job(queue="emails")
    for _ in range(2):
        make_job(queue="emails", status=JobStatus.RUNNING, lease_expires_at=timezone.now())
    make_job(queue="emails", status=JobStatus.WAITING)
    for _ in range(4):
        make_job(queue="emails", status=JobStatus.DEAD)
    make_job(queue="emails", status=JobStatus.COMPLETED)
    make_job(queue="reports")


def test_each_count_links_to_the_job_list_filtered_to_it(admin_client: Client) -> None:
    fill_emails()
    html = admin_client.get(QUEUES).content.decode()
    expected = {"pending": 3, "running": 2, "waiting": 1, "dead": 4}
    for status, count in expected.items():
        cell = cells(html, f"{status}_jobs")["emails"]
        (href,) = re.findall(r'href="([^"]+)"', cell)
        assert unescape(href) == f"{JOBS}?queue=emails&status__exact={status}"
        assert re.search(rf">{count}</a>", cell), cell
        listed = admin_client.get(unescape(href))
        assert listed.status_code == 200
        assert listed.context["cl"].result_count == count
        assert {job.status for job in listed.context["cl"].result_list} == {status}
    assert ">1</a>" in cells(html, "pending_jobs")["reports"]
    assert ">0</a>" in cells(html, "dead_jobs")["reports"]


def test_a_count_past_the_cap_is_the_planners_estimate(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview_module, "EXACT_COUNT_CAP", 5)
    with queue_connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO durable_jobs_job (id, type, queue, payload, status, priority, attempts,
                max_attempts, available_at, created_at, updated_at, last_error, errors)
            SELECT gen_random_uuid(), 'tests.record', 'bulk', '{}',
                   CASE WHEN i <= 1200 THEN 'pending' ELSE 'dead' END, 0, 0, 5,
                   now(), now(), now(), '', '[]'
            FROM generate_series(1, 1203) AS i
            """
        )
        cursor.execute("ANALYZE durable_jobs_job")
    bulk = queue_overview(["bulk"])["bulk"]
    assert bulk.pending.estimated and 1_000 <= bulk.pending.value <= 1_500
    # The planner's estimate from ANALYZE's sample: ~1k or ~1.2k, never the exact 1,200.
    assert re.fullmatch(r"~1(\.\d)?k", str(bulk.pending))
    assert not bulk.dead.estimated and bulk.dead.value == 3
    cell = cells(admin_client.get(QUEUES).content.decode(), "pending_jobs")["bulk"]
    assert re.search(r"~1(\.\d)?k", cell) and "estimate" in cell


def test_the_oldest_runnable_pending_job_over_every_priority(admin_client: Client) -> None:
    now = timezone.now()
    make_job(queue="emails", priority=5, available_at=now - timedelta(minutes=1))
    make_job(queue="emails", priority=-3, available_at=now - timedelta(minutes=12, seconds=30))
    make_job(queue="emails", priority=0, available_at=now + timedelta(hours=1))
    make_job(queue="later", available_at=now + timedelta(hours=1))
    overview = queue_overview(["emails", "later"])
    assert overview["emails"].oldest_pending is not None
    # now() is the test transaction's start, a little before this test's own clock.
    assert timedelta(minutes=12) <= overview["emails"].oldest_pending < timedelta(minutes=13)
    assert overview["later"].oldest_pending is None
    html = admin_client.get(QUEUES).content.decode()
    assert cells(html, "oldest_pending")["emails"] == "12 min"
    assert cells(html, "oldest_pending")["later"] == "-"


def test_the_chart_reads_the_per_minute_counts(admin_client: Client) -> None:
    """The chart's minutes, read within the minute the counts were written for (a test
    that crossed into the next minute, slowed down on a loaded machine, is run again:
    the window had moved by one minute under it)."""
    for _ in range(3):
        now = timezone.now().replace(second=0, microsecond=0)
        QueueMinuteStats.objects.all().delete()
        Job.objects.all().delete()
        result = _chart_of_this_minute(admin_client, now)
        if timezone.now().replace(second=0, microsecond=0) == now:
            result()
            return
    pytest.fail("three tries each crossed into the next minute")


def _chart_of_this_minute(admin_client: Client, now: datetime) -> Callable[[], None]:
    """Write the counts, read the page; returns the assertions (run once the minute held)."""
    make_job(queue="emails")
    QueueMinuteStats.objects.bulk_create(
        [
            QueueMinuteStats(queue="emails", minute=now, completed=7, failed=1, dead=1),
            QueueMinuteStats(queue="emails", minute=now - timedelta(minutes=5), completed=3),
            QueueMinuteStats(queue="emails", minute=now - timedelta(minutes=59), failed=2),
            # Outside the hour, and another queue's: not in emails' chart.
            QueueMinuteStats(queue="emails", minute=now - timedelta(minutes=60), completed=100),
            QueueMinuteStats(queue="other", minute=now, completed=50),
        ]
    )
    emails = queue_overview(["emails"])["emails"]
    html = admin_client.get(QUEUES).content.decode()

    def check() -> None:
        assert len(emails.minutes) == CHART_MINUTES
        assert emails.minutes[-1] == (7, 1) and emails.minutes[-6] == (3, 0)
        assert emails.minutes[0] == (0, 2)
        assert (emails.completed_last_hour, emails.failed_last_hour) == (10, 3)
        cell = cells(html, "last_hour")["emails"]
        assert "<svg" in cell and "Last 60 minutes: 10 completed, 3 failed" in cell
        assert "10 done, 3 failed" in cell
        # Three minutes with outcomes: two with completions, two with failures.
        assert cell.count("<rect") == 4
        # A queue known only from its recent outcomes gets a row too.
        assert "50 done, 0 failed" in cells(html, "last_hour")["other"]

    return check


def test_html_in_a_queue_name_is_escaped(admin_client: Client) -> None:
    evil = '<img src=x onerror="alert(1)">'
    Job.objects.create(type="tests.record", queue=evil, status=JobStatus.DEAD)
    QueueMinuteStats.objects.create(queue=evil, minute=timezone.now(), completed=1)
    html = admin_client.get(QUEUES).content.decode()
    assert evil not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    (state,) = QueueState.objects.filter(name=evil)
    confirm = admin_client.get(re.findall(r'href="([^"]+/pause/)"', html)[0].replace("&amp;", "&"))
    assert confirm.status_code == 200
    assert evil not in confirm.content.decode()
    assert state.name == evil


def pause_url(name: str) -> str:
    return f"{QUEUES}{name}/pause/"


def resume_url(name: str) -> str:
    return f"{QUEUES}{name}/resume/"


def test_pause_and_resume_a_row_with_a_confirmation(admin_client: Client) -> None:
    make_job(queue="emails")
    make_job(queue="emails")
    html = admin_client.get(QUEUES).content.decode()
    assert f'href="{pause_url("emails")}"' in cells(html, "controls")["emails"]
    confirm = admin_client.get(pause_url("emails"))
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert "csrfmiddlewaretoken" in page and 'name="_pause_briefly"' in page
    assert "holds 2 pending" in page
    assert paused_queues() == {}  # a GET changes nothing
    done = admin_client.post(pause_url("emails"), {"_pause": "1"}, follow=True)
    assert done.redirect_chain[-1][0] == QUEUES
    assert "Queue “emails” was paused until resumed." in done.content.decode()
    assert paused_queues() == {"emails": None}
    html = done.content.decode()
    assert f'href="{resume_url("emails")}"' in cells(html, "controls")["emails"]
    done = admin_client.post(resume_url("emails"), {"_resume": "1"}, follow=True)
    assert "Queue “emails” was resumed." in done.content.decode()
    assert paused_queues() == {}
    admin_client.post(pause_url("emails"), {"_pause_briefly": "1"})
    until = paused_queues()["emails"]
    assert until is not None and until - timezone.now() < timedelta(minutes=15, seconds=5)


def test_an_unknown_queue_is_a_404(admin_client: Client) -> None:
    assert admin_client.get(pause_url("nowhere")).status_code == 404
    assert admin_client.post(pause_url("nowhere"), {"_pause": "1"}).status_code == 404
    assert paused_queues() == {}


def test_a_viewer_sees_no_controls_and_gets_403_on_a_post() -> None:
    make_job(queue="emails")
    pause_queue("parked")
    viewer = client_with("view_job")
    response = viewer.get(QUEUES)
    assert response.status_code == 200
    html = response.content.decode()
    assert "/pause/" not in html and "/resume/" not in html and "field-controls" not in html
    assert ">1</a>" in cells(html, "pending_jobs")["emails"]  # the counts, read-only
    assert viewer.get(pause_url("emails")).status_code == 403
    assert viewer.post(pause_url("emails"), {"_pause": "1"}).status_code == 403
    assert viewer.post(resume_url("parked"), {"_resume": "1"}).status_code == 403
    assert paused_queues() == {"parked": None}


def test_pause_queue_gives_the_controls() -> None:
    make_job(queue="emails")
    operator = client_with("view_job", "pause_queue")
    assert "/pause/" in operator.get(QUEUES).content.decode()
    assert operator.post(pause_url("emails"), {"_pause": "1"}).status_code == 302
    assert paused_queues() == {"emails": None}


def test_change_job_alone_gives_no_controls() -> None:
    make_job(queue="emails")
    operator = client_with("change_job")
    html = operator.get(QUEUES).content.decode()
    assert "/pause/" not in html and "field-controls" not in html
    assert operator.post(pause_url("emails"), {"_pause": "1"}).status_code == 403
    assert paused_queues() == {}


def test_the_post_needs_the_csrf_token(admin_user: User) -> None:
    make_job(queue="emails")
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    client.get(QUEUES)  # adds the row
    assert client.post(pause_url("emails"), {"_pause": "1"}).status_code == 403
    assert paused_queues() == {}
    page = client.get(pause_url("emails")).content.decode()
    # The form's token (the header's logout form has one too).
    token = re.findall(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[-1]
    response = client.post(pause_url("emails"), {"_pause": "1", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert paused_queues() == {"emails": None}
