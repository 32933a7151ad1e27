"""The audit trail (issue 22, finding 4): who did what, listed by the CLI, REST and the admin.

Every operator action from every door is an ``AuditEntry`` (who: a user, a
token or the OS login; when; which door; what it touched; a bulk run's
filter and count), written in the change's transaction. Here: the CLI's
actor (``os:<login>``, ``--user``, ``$DURABLE_JOBS_USER``,
``CLI_REQUIRE_USER``), ``jobs audit``, ``GET /api/audit``, the History
pages of a job and a queue, and bulk runs' entries completed by the worker.
"""

from __future__ import annotations

import json
import uuid
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token

from django_durable_jobs import bulk
from django_durable_jobs.authorization import Actor, os_login
from django_durable_jobs.models import AuditEntry, Job, JobStatus, QueueState
from tests.factories import Api, burst, client_for, make_job, make_operator, make_user

from .helpers import assert_error

pytestmark = pytest.mark.django_db

JOBS = "/admin/durable_jobs/job/"
QUEUES = "/admin/durable_jobs/queuestate/"


def jobs_command(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def status(job: Job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


# -- the CLI's actor -------------------------------------------------------------------------


def test_without_user_the_cli_records_the_os_login(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABLE_JOBS_USER", raising=False)
    job = make_job()
    jobs_command("cancel", str(job.pk))
    assert status(job) == JobStatus.CANCELLED
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.door, entry.actor) == ("cancel", "cli", f"os:{os_login()}")
    assert entry.user_pk is None and entry.job_id == job.pk and entry.address is None


def test_durable_jobs_user_names_the_user_as_user_does(monkeypatch: pytest.MonkeyPatch) -> None:
    carol = make_user("carol", "cancel_job", staff=False)
    monkeypatch.setenv("DURABLE_JOBS_USER", "carol")
    job = make_job()
    jobs_command("cancel", str(job.pk))
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.user_pk) == (f"carol (os:{os_login()})", str(carol.pk))
    # Its permissions are checked as --user's are.
    make_user("dave", "view_job", staff=False)
    monkeypatch.setenv("DURABLE_JOBS_USER", "dave")
    other = make_job()
    with pytest.raises(CommandError, match=r"lacks the permission durable_jobs\.cancel_job"):
        jobs_command("cancel", str(other.pk))
    assert status(other) == JobStatus.PENDING
    assert AuditEntry.objects.count() == 1


@override_settings(DURABLE_JOBS={"CLI_REQUIRE_USER": True})
def test_cli_require_user_refuses_to_act_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DURABLE_JOBS_USER", raising=False)
    job = make_job()
    for args in (["cancel", str(job.pk)], ["pause", "default"], ["list"]):
        with pytest.raises(CommandError, match="CLI_REQUIRE_USER"):
            jobs_command(*args)
    assert status(job) == JobStatus.PENDING
    assert not QueueState.objects.exists() and not AuditEntry.objects.exists()
    make_user("erin", "cancel_job", staff=False)
    jobs_command("cancel", str(job.pk), "--user", "erin")
    assert status(job) == JobStatus.CANCELLED


@pytest.mark.parametrize(
    ("args", "needed"),
    [
        (["requeue", "{dead}"], "requeue_job"),
        (["cancel", "{pending}"], "cancel_job"),
        (["requeue", "--all-dead"], "requeue_job"),
        (["cancel", "--all"], "cancel_job"),
        (["pause", "default"], "pause_queue"),
        (["resume", "default"], "pause_queue"),
        (["audit"], "view_auditentry"),
    ],
)
def test_user_without_the_permission_is_refused_and_nothing_changes(
    args: list[str], needed: str
) -> None:
    dead, pending = make_job(status=JobStatus.DEAD), make_job()
    QueueState.objects.create(name="default", paused_at=None)
    # change_job and every other permission: not the one needed.
    others = {"view_job", "add_job", "change_job", "requeue_job", "cancel_job", "pause_queue"}
    make_user("frank", *(others - {needed}), staff=False)
    filled = [arg.format(dead=dead.pk, pending=pending.pk) for arg in args]
    with pytest.raises(CommandError, match=f"durable_jobs.{needed}"):
        jobs_command(*filled, "--user", "frank")
    assert (status(dead), status(pending)) == (JobStatus.DEAD, JobStatus.PENDING)
    assert not QueueState.objects.paused().exists()
    assert not AuditEntry.objects.exists()


def test_an_unknown_or_inactive_user_is_refused() -> None:
    job = make_job()
    with pytest.raises(CommandError, match="no user 'nobody'"):
        jobs_command("cancel", str(job.pk), "--user", "nobody")
    gone = make_user("gone", "cancel_job")
    gone.is_active = False
    gone.save()
    with pytest.raises(CommandError, match="not an active user"):
        jobs_command("cancel", str(job.pk), "--user", "gone")
    assert status(job) == JobStatus.PENDING


# -- jobs audit -------------------------------------------------------------------------------


def some_history() -> dict[str, Any]:
    """Entries from three doors: alice (REST) cancels, bob (admin) pauses, the CLI requeues."""
    alice = make_user("alice", "cancel_job", staff=False)
    bob = make_user("bob", "view_job", "pause_queue")
    cancelled, dead = make_job(), make_job(status=JobStatus.DEAD)
    assert Api(alice).post(f"/api/jobs/{cancelled.pk}/cancel", {}).status_code == 200
    QueueState.objects.create(name="emails")
    response = client_for(bob).post(f"{QUEUES}emails/pause/", {"_pause": "1"})
    assert response.status_code == 302
    jobs_command("requeue", str(dead.pk))
    return {"cancelled": cancelled, "dead": dead}


def test_jobs_audit_lists_the_entries_newest_first_with_filters() -> None:
    made = some_history()
    rows = json.loads(jobs_command("audit", "--json"))
    assert [(r["action"], r["door"], r["actor"]) for r in rows] == [
        ("requeue", "cli", f"os:{os_login()}"),
        ("pause", "admin", "bob"),
        ("cancel", "rest", "alice"),
    ]
    assert rows[2]["job_id"] == str(made["cancelled"].pk) and rows[2]["address"] == "127.0.0.1"
    assert rows[1]["queue"] == "emails" and rows[1]["details"] == {"until": None}
    assert {"id", "at", "details"} <= set(rows[0])

    def only(*args: str) -> list[str]:
        return [row["action"] for row in json.loads(jobs_command("audit", "--json", *args))]

    assert only("--action", "cancel") == ["cancel"]
    assert only("--queue", "emails") == ["pause"]
    assert only("--job", str(made["dead"].pk)) == ["requeue"]
    assert only("--actor", "alice") == ["cancel"]
    assert only("--actor", "ali") == []  # exact
    assert only("--limit", "1") == ["requeue"]
    text = jobs_command("audit", "--actor", "bob")
    assert "bob" in text and "pause" in text and "(1 entry)" in text
    with pytest.raises(CommandError, match="--action: unknown action 'delete'"):
        jobs_command("audit", "--action", "delete")
    with pytest.raises(CommandError):
        jobs_command("audit", "--job", "not-an-id")


def test_jobs_audit_with_user_needs_view_auditentry() -> None:
    some_history()
    make_user("reader", "view_job", staff=False)
    with pytest.raises(CommandError, match="view_auditentry"):
        jobs_command("audit", "--user", "reader")
    make_user("auditor", "view_auditentry", staff=False)
    assert len(json.loads(jobs_command("audit", "--json", "--user", "auditor"))) == 3


# -- GET /api/audit -------------------------------------------------------------------------------


def test_rest_audit_lists_entries_for_view_auditentry_only() -> None:
    made = some_history()
    assert_error(Api().get("/api/audit"), 401, "not_authenticated")
    for refused in (make_user("reader", "view_job"), make_operator("op", staff=True)):
        refused.user_permissions.remove(
            *refused.user_permissions.filter(codename="view_auditentry")
        )
        assert_error(Api(refused).get("/api/audit"), 403, "permission_denied")
    auditor = Api(make_user("auditor", "view_auditentry", staff=False))
    for path in ("/api/audit", "/api/audit/"):
        page = auditor.get(path)
        assert page.status_code == 200, page.content
        results = page.json()["results"]
        assert [(r["action"], r["door"], r["actor"]) for r in results] == [
            ("requeue", "cli", f"os:{os_login()}"),
            ("pause", "admin", "bob"),
            ("cancel", "rest", "alice"),
        ]
    assert set(results[0]) == {
        "id", "at", "action", "door", "actor", "address", "job_id", "queue", "details"
    }  # fmt: skip

    def only(query: str) -> list[str]:
        response = auditor.get(f"/api/audit?{query}")
        assert response.status_code == 200, response.content
        return [row["action"] for row in response.json()["results"]]

    assert only(f"job={made['cancelled'].pk}") == ["cancel"]
    assert only("queue=emails") == ["pause"]
    assert only("action=requeue") == ["requeue"]
    assert only("actor=bob") == ["pause"]
    assert only(f"actor=os:{os_login()}") == ["requeue"]
    assert only(f"job={uuid.uuid4()}") == []
    assert Api(make_user("root", superuser=True)).get("/api/audit").status_code == 200


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("job=not-a-uuid", "job"),
        ("queue=bad%20queue", "queue"),
        ("action=delete", "action"),
        ("actor=" + "x" * 201, "actor"),
        ("actor=a%00b", "actor"),
    ],
)
def test_rest_audit_bad_filters_are_a_400_naming_them(query: str, field: str) -> None:
    auditor = Api(make_user("auditor", "view_auditentry", staff=False))
    body = assert_error(auditor.get(f"/api/audit?{query}"), 400, "invalid")
    assert list(body["detail"]) == [field]


def test_a_token_client_shows_as_token_username() -> None:
    robot = make_user("robot", "cancel_job", staff=False)
    token = Token.objects.create(user=robot)
    job = make_job()
    response = Client().post(
        f"/api/jobs/{job.pk}/cancel",
        "{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token.key}",
    )
    assert response.status_code == 200
    assert AuditEntry.objects.get().actor == "token:robot"


# -- the History pages ---------------------------------------------------------------------------


def test_a_job_s_history_page_lists_its_entries(admin_client: Client) -> None:
    made = some_history()
    job = made["dead"]
    assert admin_client.post(f"{JOBS}{job.pk}/cancel/").status_code == 302  # requeued: pending
    html = admin_client.get(f"{JOBS}{job.pk}/history/").content.decode()
    rows = html.split('class="audit-entry')[1:]
    assert len(rows) == 2  # its own two, newest first; not the other job's, not the queue's
    assert "audit-cancel" in rows[0] and "audit-requeue" in rows[1]
    assert '<td class="audit-actor">admin' in rows[0] and '<td class="audit-door">admin' in rows[0]
    assert f"os:{os_login()}" in rows[1] and '<td class="audit-door">cli' in rows[1]
    other = admin_client.get(f"{JOBS}{made['cancelled'].pk}/history/").content.decode()
    assert "alice" in other and '<td class="audit-door">rest' in other and "127.0.0.1" in other
    quiet = admin_client.get(f"{JOBS}{make_job().pk}/history/").content.decode()
    assert "No operator action has been recorded for it." in quiet


def test_the_history_page_escapes_what_it_shows(admin_client: Client) -> None:
    job = make_job()
    xss = "<script>alert(1)</script>"
    AuditEntry.objects.create(
        action="cancel", door="cli", actor=xss, job_id=job.pk, details={"note": xss}
    )
    html = admin_client.get(f"{JOBS}{job.pk}/history/").content.decode()
    assert xss not in html and "&lt;script&gt;" in html


def test_a_queue_s_page_and_history_list_its_pause_and_resume(admin_client: Client) -> None:
    some_history()  # bob paused emails from the admin
    jobs_command("resume", "emails")
    for url in (f"{QUEUES}emails/change/", f"{QUEUES}emails/history/"):
        html = admin_client.get(url).content.decode()
        rows = html.split('class="audit-entry')[1:]
        assert len(rows) == 2, url
        assert "audit-resume" in rows[0] and f"os:{os_login()}" in rows[0]
        assert "audit-pause" in rows[1] and '<td class="audit-actor">bob' in rows[1]
        assert "cancel" not in "".join(rows)


def test_the_audit_trail_list_is_read_only(admin_client: Client) -> None:
    some_history()
    page = admin_client.get("/admin/durable_jobs/auditentry/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "alice" in html and "bob" in html
    entry = AuditEntry.objects.first()
    assert entry is not None
    assert admin_client.get("/admin/durable_jobs/auditentry/add/").status_code == 403
    delete = admin_client.post(f"/admin/durable_jobs/auditentry/{entry.pk}/delete/")
    assert delete.status_code == 403
    assert AuditEntry.objects.count() == 3


# -- bulk runs --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_bulk_start_records_one_entry_and_the_worker_completes_it() -> None:
    # In a queue the worker does not serve: requeued, they stay pending.
    dead = [make_job(status=JobStatus.DEAD, queue="q").pk for _ in range(3)]
    make_job(status=JobStatus.DEAD, queue="other")
    actor = Actor(door="admin", name="alice", user=make_operator("alice"))
    job_filter = bulk.JobFilter(status="dead", queue="q")
    result = bulk.start("requeue", job_filter, actor=actor, token=uuid.uuid4())
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.door, entry.actor, entry.job_id) == (
        "bulk_requeue",
        "admin",
        "alice",
        result.job.pk,
    )
    assert entry.details["filter"] == {"status": "dead", "queue": "q"}
    assert entry.details["matched"] == 3 and entry.details["done"] is False
    burst(queues=frozenset({"default"}))
    assert Job.objects.get(pk=result.job.pk).status == JobStatus.COMPLETED
    assert set(Job.objects.filter(pk__in=dead).values_list("status", flat=True)) == {"pending"}
    (entry,) = AuditEntry.objects.all()  # the same entry, completed; the worker adds none
    assert entry.details["changed"] == 3 and entry.details["done"] is True
    assert entry.details["filter"] == {"status": "dead", "queue": "q"}


def test_bulk_start_needs_the_permission() -> None:
    reader = make_user("reader", "view_job", "change_job", "requeue_job")
    with pytest.raises(PermissionDenied, match="cancel_job"):
        bulk.start(
            "cancel",
            bulk.JobFilter(status="pending"),
            actor=Actor(door="admin", name="reader", user=reader),
            token=uuid.uuid4(),
        )
    assert not Job.objects.exists() and not AuditEntry.objects.exists()


def test_jobs_requeue_all_with_user_records_one_entry_with_filter_and_count() -> None:
    make_user("ops", "requeue_job", staff=False)
    dead = [make_job(status=JobStatus.DEAD, queue="emails").pk for _ in range(5)]
    make_job(status=JobStatus.DEAD, queue="other")
    jobs_command("requeue", "--all", "--status", "dead", "--queue", "emails", "--batch-size", "2",
                 "--user", "ops")  # fmt: skip
    assert set(Job.objects.filter(pk__in=dead).values_list("status", flat=True)) == {"pending"}
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.door, entry.actor, entry.job_id) == (
        "bulk_requeue",
        "cli",
        f"ops (os:{os_login()})",
        None,
    )
    assert entry.details["filter"] == {"status": "dead", "queue": "emails"}
    assert (entry.details["matched"], entry.details["changed"], entry.details["done"]) == (
        5,
        5,
        True,
    )
