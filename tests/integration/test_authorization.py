"""One authorization model at every door (issue 22, findings 3 and 4).

Each operator action needs its own permission (authorization.py), checked
the same way at each door that offers it: the admin (a job's or a queue's
button, the list's action, the bulk view), the REST API and ``manage.py
jobs --user``. For every (action, door):

- a user holding every other permission (``change_job`` too, which once
  allowed everything), or only ``is_staff``, is refused (403, or a
  CommandError) and nothing changes, nothing is recorded;
- a user holding only that permission (and ``view_job`` in the admin, whose
  pages need it) succeeds, as does a superuser, and the change leaves exactly
  one audit entry: the action, the door, who, and the job or queue.

The doors per action: REST has no "run now" and no bulk run; the CLI has
no "run now"; bulk runs start from the admin's bulk view and ``--all``;
emitting an event is REST's and the CLI's (the admin has no emit button).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from django_durable_jobs import bulk
from django_durable_jobs.authorization import os_login
from django_durable_jobs.models import AuditEntry, Event, Job, JobStatus, JobStep, QueueState
from tests import factories
from tests.factories import OPERATOR_PERMISSIONS, Api, client_for, make_job, make_user

pytestmark = pytest.mark.django_db

JOBS = "/admin/durable_jobs/job/"
DEAD_JOBS = "/admin/durable_jobs/deadjob/"
QUEUES = "/admin/durable_jobs/queuestate/"
QUEUE = "emails"


# -- what each action works on, and how to tell it happened ---------------------------------


@dataclass(frozen=True)
class Action:
    name: str  # the audit trail's action
    permission: str
    setup: Callable[[], Any]  # -> the target: a Job, a queue name, or the jobs a bulk run takes
    done: Callable[[Any], bool]  # whether the target changed as the action changes it
    # The admin's job page button slug / list action name, the REST path, the CLI arguments.
    button: str | None = None
    list_action: str | None = None
    rest: Callable[[Any], str] | None = None
    cli: Callable[[Any], list[str]] | None = None
    #: The REST body and the admin button's form data ({} and none by default).
    body: Callable[[Any], dict[str, Any]] | None = None


def dead_job() -> Job:
    return make_job(status=JobStatus.DEAD, attempts=3)


def dead_job_with_steps() -> Job:
    job = dead_job()
    factories.add_steps(job, "charge", "record")
    return job


def retried_from_record(job: Job) -> bool:
    steps = list(JobStep.objects.filter(job=job).values_list("name", flat=True))
    return status(job) == JobStatus.PENDING and steps == ["charge"]


#: The key emit's cases emit (its audit entry names it).
EVENT_KEY = "authz:1"


def event_key() -> str:
    return EVENT_KEY


def emitted(key: str) -> bool:
    return Event.objects.filter(pk=key).exists()


def delayed_job() -> Job:
    return make_job(available_at=timezone.now() + timedelta(days=1))


def status(job: Job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


def unpaused_queue() -> str:
    QueueState.objects.create(name=QUEUE)
    make_job(queue=QUEUE)
    return QUEUE


def paused_queue() -> str:
    # Set on the row directly: pause_queue() from Python would be an entry of its own.
    QueueState.objects.create(name=QUEUE, paused_at=timezone.now())
    make_job(queue=QUEUE)
    return QUEUE


def is_paused(name: str) -> bool:
    return QueueState.objects.paused().filter(name=name).exists()


def jobs_in(status_: str) -> Callable[[], list[Job]]:
    def make() -> list[Job]:
        return [make_job(status=status_), make_job(status=status_)]

    return make


ACTIONS = {
    "requeue": Action(
        "requeue",
        "requeue_job",
        dead_job,
        lambda job: status(job) == JobStatus.PENDING,
        button="requeue",
        list_action="requeue_jobs",
        rest=lambda job: f"/api/jobs/{job.pk}/requeue",
        cli=lambda job: ["requeue", str(job.pk)],
    ),
    "retry_from_step": Action(
        "retry_from_step",
        "requeue_job",
        dead_job_with_steps,
        retried_from_record,
        button="retry-from-step",
        rest=lambda job: f"/api/jobs/{job.pk}/requeue",
        cli=lambda job: ["requeue", str(job.pk), "--from-step", "record"],
        body=lambda job: {"from_step": "record"},
    ),
    "emit": Action(
        "emit",
        "emit_event",
        event_key,
        emitted,
        rest=lambda key: "/api/events",
        cli=lambda key: ["emit", key, "--payload", "1"],
        body=lambda key: {"key": key, "payload": 1},
    ),
    "cancel": Action(
        "cancel",
        "cancel_job",
        make_job,
        lambda job: status(job) == JobStatus.CANCELLED,
        button="cancel",
        list_action="cancel_jobs",
        rest=lambda job: f"/api/jobs/{job.pk}/cancel",
        cli=lambda job: ["cancel", str(job.pk)],
    ),
    "run_now": Action(
        "run_now",
        "run_job_now",
        delayed_job,
        lambda job: Job.objects.get(pk=job.pk).available_at <= timezone.now(),
        button="run-now",
        list_action="run_jobs_now",
    ),
    "pause": Action(
        "pause",
        "pause_queue",
        unpaused_queue,
        is_paused,
        button="pause",
        list_action="pause_queues",
        rest=lambda name: f"/api/queues/{name}/pause",
        cli=lambda name: ["pause", name],
    ),
    "resume": Action(
        "resume",
        "pause_queue",
        paused_queue,
        lambda name: not is_paused(name),
        button="resume",
        list_action="resume_queues",
        rest=lambda name: f"/api/queues/{name}/resume",
        cli=lambda name: ["resume", name],
    ),
    "bulk_requeue": Action(
        "bulk_requeue",
        "requeue_job",
        jobs_in(JobStatus.DEAD),
        # From the admin: the bulk job was started; from the CLI: the jobs were requeued.
        lambda jobs: (
            Job.objects.filter(type=bulk.BULK_REQUEUE).exists()
            or all(status(job) == JobStatus.PENDING for job in jobs)
        ),
        button="bulk",
        cli=lambda jobs: ["requeue", "--all-dead"],
    ),
    "bulk_cancel": Action(
        "bulk_cancel",
        "cancel_job",
        jobs_in(JobStatus.PENDING),
        lambda jobs: (
            Job.objects.filter(type=bulk.BULK_CANCEL).exists()
            or all(status(job) == JobStatus.CANCELLED for job in jobs)
        ),
        button="bulk",
        cli=lambda jobs: ["cancel", "--all", "--status", "pending"],
    ),
}

DOORS = ("admin-button", "admin-list", "rest", "cli")


def doors_of(action: Action) -> list[str]:
    offered = {
        "admin-button": action.button is not None,
        "admin-list": action.list_action is not None,
        "rest": action.rest is not None,
        "cli": action.cli is not None,
    }
    return [door for door in DOORS if offered[door]]


CASES = [(name, door) for name, action in ACTIONS.items() for door in doors_of(action)]


# -- each door, as a user would go through it -------------------------------------------------


def token_of(html: str) -> str:
    match = re.search(r'name="token" value="([0-9a-f]{32})"', html)
    return match.group(1) if match else uuid.uuid4().hex


def through_admin_button(action: Action, user: User, target: Any) -> int:
    """The page's button: a job's (requeue, cancel, run now), a queue's, the bulk view."""
    client = client_for(user)
    if action.name in ("pause", "resume"):
        verb = action.name
        return client.post(f"{QUEUES}{target}/{verb}/", {f"_{verb}": "1"}).status_code
    if action.button == "bulk":
        operation = action.name.removeprefix("bulk_")
        status_ = "dead" if operation == "requeue" else "pending"
        url = f"{JOBS}bulk-{operation}/?status__exact={status_}"
        page = client.get(url)
        token = token_of(page.content.decode()) if page.status_code == 200 else uuid.uuid4().hex
        return client.post(url, {"token": token}).status_code
    data = action.body(target) if action.body is not None else {}
    return client.post(f"{JOBS}{target.pk}/{action.button}/", data).status_code


def through_admin_list(action: Action, user: User, target: Any) -> int:
    """The list's action on the selected rows; one the user may not run is not offered."""
    client = client_for(user)
    url = QUEUES if action.name in ("pause", "resume") else JOBS
    page = client.get(url)
    selected = target if isinstance(target, str) else str(target.pk)
    offered = page.status_code == 200 and f'value="{action.list_action}"' in page.content.decode()
    response = client.post(url, {"action": action.list_action, "_selected_action": [selected]})
    if not offered:
        assert response.status_code in (200, 302, 403)
        return 403
    return response.status_code


def through_rest(action: Action, user: User, target: Any) -> int:
    assert action.rest is not None
    body = action.body(target) if action.body is not None else {}
    return int(Api(user).post(action.rest(target), body).status_code)


def through_cli(action: Action, user: User, target: Any) -> int:
    assert action.cli is not None
    refusal = ""
    try:
        call_command(
            "jobs",
            *action.cli(target),
            "--user",
            user.get_username(),
            stdout=StringIO(),
            stderr=StringIO(),
        )
    except CommandError as exc:
        refusal = str(exc)
    if not refusal:
        return 200
    assert "--user" in refusal and action.permission in refusal, refusal
    return 403


THROUGH = {
    "admin-button": through_admin_button,
    "admin-list": through_admin_list,
    "rest": through_rest,
    "cli": through_cli,
}
SUCCESS = {
    "admin-button": (200, 302),
    "admin-list": (200, 302),
    "rest": (200, 201),
    "cli": (200,),
}
DOOR_OF_ENTRY = {"admin-button": "admin", "admin-list": "admin", "rest": "rest", "cli": "cli"}


def actor_name(user: User, door: str) -> str:
    if door == "cli":
        return f"{user.get_username()} (os:{os_login()})"
    return user.get_username()


# -- the users ----------------------------------------------------------------------------------


def everything_but(permission: str) -> User:
    """Every permission but ``permission``: change_job, delete_job, the other actions'."""
    others = [p for p in (*OPERATOR_PERMISSIONS, "change_job", "delete_job") if p != permission]
    return make_user("all-but", *others)


def only(permission: str, door: str) -> User:
    # The admin's pages need view_job to be opened at all; REST and the CLI need nothing else.
    if door.startswith("admin"):
        return make_user("only", "view_job", permission)
    return make_user("only", permission, staff=False)


# -- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "door"), CASES)
@pytest.mark.parametrize("who", ["all-but-this", "staff-only", "change_deadjob"])
def test_without_the_permission_the_action_is_refused_and_nothing_changes(
    name: str, door: str, who: str
) -> None:
    action = ACTIONS[name]
    if who == "all-but-this":
        user = everything_but(action.permission)
    elif who == "staff-only":
        user = make_user("staff", staff=True)  # is_staff alone: only the admin site's door
    else:
        user = make_user("dead-jobs-admin", "view_deadjob", "change_deadjob")
    target = action.setup()
    assert THROUGH[door](action, user, target) == 403
    assert not action.done(target)
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(("name", "door"), CASES)
@pytest.mark.parametrize("who", ["only-this", "superuser"])
def test_with_the_permission_the_action_is_done_and_recorded_once(
    name: str, door: str, who: str
) -> None:
    action = ACTIONS[name]
    user = only(action.permission, door) if who == "only-this" else make_user(superuser=True)
    target = action.setup()
    assert THROUGH[door](action, user, target) in SUCCESS[door]
    assert action.done(target)
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.door, entry.actor) == (
        action.name,
        DOOR_OF_ENTRY[door],
        actor_name(user, door),
    )
    assert entry.user_pk == str(user.pk)
    if name == "emit":
        assert (entry.queue, entry.job_id, entry.details) == (None, None, {"key": target})
    elif name == "retry_from_step":
        assert (entry.job_id, entry.details) == (target.pk, {"from_step": "record"})
    elif isinstance(target, str):
        assert (entry.queue, entry.job_id) == (target, None)
    elif isinstance(target, Job):
        assert entry.job_id == target.pk
    elif door == "cli":  # a bulk run from the CLI: the filter and the count, no job
        assert entry.job_id is None
        assert entry.details["filter"]["status"] in ("dead", "pending")
        assert (entry.details["matched"], entry.details["changed"]) == (2, 2)
    else:  # a bulk run from the admin: its bulk job
        (bulk_job,) = Job.objects.filter(type__in=bulk.BULK_TYPES)
        assert entry.job_id == bulk_job.pk and entry.details["matched"] == 2
    if door in ("admin-button", "admin-list", "rest"):
        assert entry.address == "127.0.0.1"


def test_every_action_has_a_door_and_every_door_an_action() -> None:
    assert {door for _, door in CASES} == set(DOORS)
    assert {name for name, _ in CASES} == set(ACTIONS)
    assert ("run_now", "rest") not in CASES and ("run_now", "cli") not in CASES


# -- the dead jobs' admin acts on dead jobs only ------------------------------------------


@pytest.mark.parametrize("slug", ["cancel", "run-now"])
def test_the_dead_jobs_admin_has_no_cancel_or_run_now(admin_client: Client, slug: str) -> None:
    job = make_job()
    response = admin_client.post(f"{DEAD_JOBS}{job.pk}/{slug}/")
    # No such view: the URL falls to the admin's object URLs, which change nothing.
    assert response.status_code in (302, 404)
    assert status(job) == JobStatus.PENDING
    assert Job.objects.get(pk=job.pk).available_at == job.available_at
    assert not AuditEntry.objects.exists()


def test_requeue_on_the_dead_jobs_admin_leaves_a_job_that_is_not_dead_alone(
    admin_client: Client,
) -> None:
    cancelled = make_job(status=JobStatus.CANCELLED)
    response = admin_client.post(f"{DEAD_JOBS}{cancelled.pk}/requeue/")
    assert response.status_code == 302
    assert status(cancelled) == JobStatus.CANCELLED
    assert not AuditEntry.objects.exists()
    # A dead one: requeued there, as ever.
    dead = dead_job()
    assert admin_client.post(f"{DEAD_JOBS}{dead.pk}/requeue/").status_code == 302
    assert status(dead) == JobStatus.PENDING
    assert AuditEntry.objects.get().job_id == dead.pk


def test_change_deadjob_alone_cannot_cancel_run_now_or_requeue() -> None:
    client = client_for(make_user("dead-jobs-admin", "view_deadjob", "change_deadjob"))
    pending, delayed, dead = make_job(), delayed_job(), dead_job()
    for url in (
        f"{DEAD_JOBS}{pending.pk}/cancel/",
        f"{DEAD_JOBS}{delayed.pk}/run-now/",
        f"{DEAD_JOBS}{dead.pk}/requeue/",
        f"{JOBS}{pending.pk}/cancel/",
        f"{JOBS}{delayed.pk}/run-now/",
        f"{JOBS}{dead.pk}/requeue/",
    ):
        # 403; or, for the dead jobs' cancel and run-now that no longer exist, the
        # admin's redirect of an unknown object URL to a ".../change/" page.
        response = client.post(url)
        assert response.status_code in (302, 403), url
        if response.status_code == 302:
            assert response["Location"] == f"{url}change/"
    assert (status(pending), status(dead)) == (JobStatus.PENDING, JobStatus.DEAD)
    assert Job.objects.get(pk=delayed.pk).available_at == delayed.available_at
    html = client.get(DEAD_JOBS).content.decode()
    assert 'value="requeue_jobs"' not in html
    client.post(DEAD_JOBS, {"action": "requeue_jobs", "_selected_action": [str(dead.pk)]})
    assert status(dead) == JobStatus.DEAD
    assert not AuditEntry.objects.exists()
