"""``manage.py jobs`` doors of durable steps: ``emit``, ``requeue --from-step``,
``show``'s steps and waiting_for. Step records are written with the ORM."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.utils import timezone

from django_durable_jobs.authorization import os_login
from django_durable_jobs.models import (
    AuditEntry,
    Event,
    EventWaiter,
    Job,
    JobStatus,
    JobStep,
    StepKind,
    StepStatus,
)
from tests.factories import make_job, make_user

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json"))


def add_steps(job: Job, *names: str) -> None:
    now = timezone.now()
    for position, name in enumerate(names):
        JobStep.objects.create(
            job=job,
            name=name,
            status=StepStatus.COMPLETED,
            attempt=1,
            position=position,
            started_at=now,
            finished_at=now + timedelta(milliseconds=1500),
            result={"v": position},
            result_bytes=8,
        )


# --- jobs emit ---------------------------------------------------------------------


def test_emit_creates_then_replays_then_conflicts() -> None:
    data = run_json("emit", "signup:9", "--payload", '{"email": "a@x"}')
    assert data["created"] is True and data["payload"] == {"email": "a@x"}
    assert data["key"] == "signup:9"
    assert "emitted" in run("emit", "signup:9", "--payload", '{"email":"a@x"}')
    assert run_json("emit", "signup:9", "--payload", '{"email":"a@x"}')["created"] is False
    with pytest.raises(CommandError, match=r"signup:9.*different payload"):
        run("emit", "signup:9", "--payload", '{"email": "b@x"}')
    assert Event.objects.get(pk="signup:9").payload == {"email": "a@x"}


def test_emit_without_payload_and_wakes() -> None:
    job = make_job(status=JobStatus.WAITING, waiting_for={"event": "go"})
    EventWaiter.objects.create(job=job, key="go")
    assert "Event go emitted." in run("emit", "go")
    assert Event.objects.get(pk="go").payload is None
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["emit", "a b"], "KEY: 'a b' is not a valid event key"),
        (["emit", "x" * 201], "KEY: must be at most 200"),
        (["emit", "ok", "--payload", "{nope"], "--payload: not JSON"),
        (["emit", "ok", "--payload", "NaN"], "--payload: is not JSON-serialisable"),
        (["emit", "bad\x1bkey"], "bad\\x1bkey"),
    ],
)
def test_emit_bad_input_is_a_command_error(args: list[str], words: str) -> None:
    with pytest.raises(CommandError) as raised:
        run(*args)
    assert words in str(raised.value)
    assert "\x1b" not in str(raised.value)
    assert not Event.objects.exists()


def test_emit_is_recorded_as_the_os_user_or_the_named_user() -> None:
    run("emit", "one")
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.door, entry.actor) == ("emit", "cli", f"os:{os_login()}")
    assert entry.details == {"key": "one"}
    make_user("emitter", "emit_event")
    run("emit", "two", "--user", "emitter")
    entry = AuditEntry.objects.get(details__key="two")
    assert entry.actor == f"emitter (os:{os_login()})"


def test_emit_with_a_user_lacking_emit_event_is_refused() -> None:
    make_user("reader", "view_job", "requeue_job")
    with pytest.raises(CommandError, match=r"durable_jobs\.emit_event"):
        run("emit", "k", "--user", "reader")
    assert not Event.objects.exists() and not AuditEntry.objects.exists()


@override_settings(DURABLE_JOBS={"CLI_REQUIRE_USER": True})
def test_emit_requires_a_user_when_the_setting_says_so() -> None:
    with pytest.raises(CommandError, match="CLI_REQUIRE_USER"):
        run("emit", "k")
    assert not Event.objects.exists()


# --- jobs requeue --from-step ----------------------------------------------------------


def test_requeue_from_step() -> None:
    job = make_job(status=JobStatus.DEAD, attempts=3)
    add_steps(job, "charge", "record", "email")
    data = run_json("requeue", str(job.pk), "--from-step", "record")
    assert data == {"requeued": 1, "ids": [str(job.pk)], "from_step": "record"}
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.PENDING and row.attempts == 0
    assert list(JobStep.objects.filter(job=job).values_list("name", flat=True)) == ["charge"]
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.door, entry.details) == (
        "retry_from_step",
        "cli",
        {"from_step": "record"},
    )


def test_requeue_keeps_steps_without_from_step() -> None:
    job = make_job(status=JobStatus.DEAD)
    add_steps(job, "a", "b")
    run("requeue", str(job.pk))
    assert JobStep.objects.filter(job=job).count() == 2


def test_requeue_from_an_unknown_step_is_a_command_error() -> None:
    job = make_job(status=JobStatus.DEAD)
    add_steps(job, "a")
    with pytest.raises(CommandError, match=r"--from-step: .*no step 'nope'.*'a'"):
        run("requeue", str(job.pk), "--from-step", "nope")
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD
    assert JobStep.objects.filter(job=job).count() == 1


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--all-dead"], "not --all"),
        (["SECOND"], "give one id"),
        ([], "it is pending"),
    ],
)
def test_requeue_from_step_bad_use(extra: list[str], words: str) -> None:
    dead = make_job(status=JobStatus.DEAD)
    pending = make_job()
    add_steps(pending, "a")
    args = [str(pending.pk) if not extra else str(dead.pk)]
    args += [str(pending.pk) if item == "SECOND" else item for item in extra]
    with pytest.raises(CommandError, match=words):
        run("requeue", *args, "--from-step", "a")
    assert JobStep.objects.filter(job=pending).count() == 1


def test_requeue_from_step_with_a_user_lacking_requeue_job_is_refused() -> None:
    job = make_job(status=JobStatus.DEAD)
    add_steps(job, "a")
    make_user("nope", "view_job", "cancel_job")
    with pytest.raises(CommandError, match=r"durable_jobs\.requeue_job"):
        run("requeue", str(job.pk), "--from-step", "a", "--user", "nope")
    assert JobStep.objects.filter(job=job).count() == 1


# --- jobs show ---------------------------------------------------------------------


def test_show_lists_steps_and_waiting_for() -> None:
    job = make_job(status=JobStatus.WAITING, waiting_for={"event": "signup:1"})
    add_steps(job, "charge")
    JobStep.objects.create(
        job=job,
        name="wait\x1b[2J",
        kind=StepKind.EVENT,
        status=StepStatus.SUSPENDED,
        attempt=1,
        position=1,
        started_at=timezone.now(),
        event_key="signup:1",
    )
    JobStep.objects.create(
        job=job,
        name="boom",
        status=StepStatus.FAILED,
        attempt=2,
        position=2,
        started_at=timezone.now(),
        error="ValueError: bad\nTraceback...",
    )
    text = run("show", str(job.pk))
    assert "waiting_for: waiting for event 'signup:1'" in text
    assert "steps: 3" in text
    assert "charge" in text and "1.500s" in text and "8 bytes" in text
    assert "wait\\x1b[2J" in text and "\x1b" not in text
    assert "ValueError: bad" in text and "Traceback..." not in text
    data = run_json("show", str(job.pk))
    assert data["waiting_for"] == {"event": "signup:1"}
    assert [step["name"] for step in data["steps"]] == ["charge", "wait\x1b[2J", "boom"]
    assert data["steps"][0]["result_bytes"] == 8 and "result" not in data["steps"][0]
    assert data["steps"][2]["error"].startswith("ValueError")
    assert data["steps_truncated"] is False


def test_show_without_steps_or_suspension() -> None:
    job = make_job()
    text = run("show", str(job.pk))
    assert "steps: -" in text and "waiting_for: -" in text
    data = run_json("show", str(job.pk))
    assert data["steps"] == [] and data["waiting_for"] is None


def test_show_sleep_and_child() -> None:
    sleeper = make_job(
        waiting_for={"until": "2030-01-01T00:00:00+00:00"},
        available_at=datetime(2030, 1, 1, tzinfo=dt_timezone.utc),
    )
    assert "sleeping until 2030-01-01T00:00:00+00:00" in run("show", str(sleeper.pk))
    parent = make_job(status=JobStatus.WAITING, waiting_for={"job": str(sleeper.pk)})
    assert f"waiting for child job {sleeper.pk}" in run("show", str(parent.pk))


def test_show_a_sleep_that_is_over_as_runnable() -> None:
    woken = make_job(
        waiting_for={"until": "2026-01-01T00:00:00+00:00"},
        available_at=timezone.now() - timedelta(seconds=1),
    )
    assert "sleeping until" not in run("show", str(woken.pk))
