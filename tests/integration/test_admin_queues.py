"""The admin's "Queues" page: the queues listed, pause and resume actions, permissions."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client, override_settings

from django_durable_jobs.models import JobStatus, QueueState
from django_durable_jobs.pausing import pause_queue, paused_queues
from tests.factories import client_for, make_job, user_with

from .helpers import LIMITED, hold_jobs_back

pytestmark = pytest.mark.django_db

QUEUES = "/admin/durable_jobs/queuestate/"


def client_with(*codenames: str) -> Client:
    return client_for(user_with(*codenames))


def act(client: Client, action: str, names: list[str]) -> Any:
    return client.post(QUEUES, {"action": action, "_selected_action": names}, follow=True)


def test_the_list_shows_busy_declared_and_paused_queues(admin_client: Client) -> None:
    make_job(queue="emails")
    make_job(queue="history", status=JobStatus.COMPLETED)  # finished only: not added
    pause_queue("parked")
    with override_settings(DURABLE_JOBS={"QUEUES": {"throttled": {"rate_limit": "5/s"}}}):
        response = admin_client.get(QUEUES)
        html = response.content.decode()
    assert response.status_code == 200
    names = [row.name for row in response.context["cl"].result_list]
    assert names == ["emails", "parked", "throttled"]
    assert "rate_limit 5/s" in html
    assert 'value="pause_queues"' in html and 'value="resume_queues"' in html
    paused = {row.name: row.is_paused for row in response.context["cl"].result_list}
    assert paused == {"emails": False, "parked": True, "throttled": False}


def test_the_list_shows_what_limits_hold_back(admin_client: Client) -> None:
    with override_settings(DURABLE_JOBS=LIMITED):
        hold_jobs_back()
        response = admin_client.get(QUEUES)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Held back</span>" in html
    cells = dict(re.findall(r'/">([\w.-]+)</a></th>.*?"field-held_back_now">([^<]*)<', html))
    assert cells == {
        **dict.fromkeys(["both", "other", "roomy", "throttled"], "-"),
        "narrow": "3 (concurrency)",
        "parked": "3 (paused)",
        "default": "2 (key)",
    }


def test_pause_resume_and_pause_briefly_actions(admin_client: Client) -> None:
    make_job(queue="emails")
    make_job(queue="reports")
    admin_client.get(QUEUES)  # adds the rows
    html = act(admin_client, "pause_queues", ["emails", "reports"]).content.decode()
    assert "2 queues were paused." in html
    assert paused_queues() == {"emails": None, "reports": None}
    html = act(admin_client, "resume_queues", ["reports"]).content.decode()
    assert "1 queue was resumed." in html
    assert paused_queues() == {"emails": None}
    act(admin_client, "pause_queues_briefly", ["reports"])
    assert paused_queues()["reports"] is not None


def test_a_reader_sees_the_list_without_actions_and_cannot_pause() -> None:
    pause_queue("parked")
    reader = client_with("view_job")
    response = reader.get(QUEUES)
    assert response.status_code == 200
    assert 'value="pause_queues"' not in response.content.decode()
    act(reader, "resume_queues", ["parked"])
    assert paused_queues() == {"parked": None}
    # No row page to edit, nothing to add or delete.
    assert reader.get(f"{QUEUES}add/").status_code == 403
    page = reader.get(f"{QUEUES}parked/change/")
    assert page.status_code == 200 and "Save" not in page.content.decode()


def test_an_operator_with_pause_queue_may_pause_and_resume() -> None:
    make_job(queue="emails")
    operator = client_with("view_job", "pause_queue")
    operator.get(QUEUES)
    act(operator, "pause_queues", ["emails"])
    assert paused_queues() == {"emails": None}
    act(operator, "resume_queues", ["emails"])
    assert paused_queues() == {}


def test_change_job_alone_may_not_pause() -> None:
    make_job(queue="emails")
    operator = client_with("change_job")
    assert 'value="pause_queues"' not in operator.get(QUEUES).content.decode()
    act(operator, "pause_queues", ["emails"])
    assert paused_queues() == {}


def test_a_user_without_job_permissions_gets_no_page() -> None:
    assert client_with().get(QUEUES).status_code == 403
    assert not QueueState.objects.exists()
