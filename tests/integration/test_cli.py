"""``manage.py jobs``: every subcommand, with and without --json, and bad input."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.utils import timezone

from django_durable_jobs.held_back import nothing_held
from django_durable_jobs.models import Job, JobStatus, QueueState
from django_durable_jobs.pausing import paused_queues
from tests.factories import make_job

from .helpers import HELD_BY_HOLD_JOBS_BACK, LIMITED, hold_jobs_back

pytestmark = pytest.mark.django_db(transaction=True)


def make(status: str = JobStatus.PENDING, job_type: str = "tests.cli", **fields: Any) -> Job:
    if status != JobStatus.PENDING:
        fields["status"] = status
    return make_job(job_type, queue=fields.pop("queue", "default"), **fields)


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json"))


def test_stats() -> None:
    make()
    make(JobStatus.DEAD, queue="emails")
    data = run_json("stats")
    assert data["total"] == 2
    assert data["statuses"]["dead"] == 1
    assert data["queues"]["emails"]["dead"] == 1
    text = run("stats")
    assert "pending" in text and "emails" in text and "Total: 2" in text


def test_stats_show_limits_and_what_they_hold_back() -> None:
    with override_settings(DURABLE_JOBS=LIMITED):
        hold_jobs_back()
        data = run_json("stats")
        text = run("stats")
    queues = data["queues"]
    for name, held in HELD_BY_HOLD_JOBS_BACK.items():
        assert queues[name]["held_back"] == held, name
    assert queues["other"]["held_back"] == nothing_held()
    assert queues["narrow"]["limits"] == {"rate_limit": None, "concurrency": 2}
    assert queues["other"]["limits"] is None
    rows = {row["queue"]: row for row in read_table(text.split("\n\n")[-1])}
    assert rows["narrow"]["limits"] == "concurrency 2"
    assert rows["narrow"]["held back"] == "3 (concurrency)"
    assert rows["parked"]["paused"] == "yes" and rows["parked"]["held back"] == "3 (paused)"
    assert rows["default"]["held back"] == "2 (key)"
    # No limit, nothing held: empty cells.
    assert [rows["other"][c] for c in ("pending", "limits", "paused", "held back")] == [
        "2",
        "",
        "",
        "",
    ]


def read_table(text: str) -> list[dict[str, str]]:
    """The rows of ``jobs_command.table``'s output, by column (cut where its dashes are)."""
    header, dashes, *lines = text.splitlines()
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]
    names = [header[a:b].strip() for a, b in spans]
    return [
        {name: line[a:b].strip() for name, (a, b) in zip(names, spans, strict=True)}
        for line in lines
    ]


def test_list_newest_first_with_filters_and_limit() -> None:
    old = make(created_at=timezone.now() - timedelta(hours=1))
    new = make()
    dead = make(JobStatus.DEAD, job_type="tests.other", queue="emails")
    rows = run_json("list")
    assert [row["id"] for row in rows] == [str(dead.pk), str(new.pk), str(old.pk)]
    assert [row["id"] for row in run_json("list", "--status", "dead")] == [str(dead.pk)]
    assert [row["id"] for row in run_json("list", "--type", "tests.other")] == [str(dead.pk)]
    assert [row["id"] for row in run_json("list", "--queue", "emails")] == [str(dead.pk)]
    assert len(run_json("list", "--limit", "2")) == 2
    text = run("list", "--status", "pending")
    assert str(new.pk) in text and str(dead.pk) not in text and "(2 jobs)" in text


def test_show() -> None:
    job = make(JobStatus.DEAD, last_error="boom", errors=[{"attempt": 1, "error": "boom"}])
    data = run_json("show", str(job.pk))
    assert data["id"] == str(job.pk) and data["status"] == "dead"
    assert data["errors"] == [{"attempt": 1, "error": "boom"}]
    text = run("show", str(job.pk))
    assert f"id: {job.pk}" in text and "last_error: boom" in text


#: What a REST client (or a handler's error) could put in a job's data, and
#: what a terminal would do with it: clear the screen, send the cursor home,
#: retitle the window, reverse the text, hide what came before on the line.
CLEAR_SCREEN = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;owned\x07"


def test_show_escapes_control_characters_and_keeps_a_tracebacks_lines() -> None:
    key = f"order-1{CLEAR_SCREEN}"
    error = (
        "Traceback (most recent call last):\n"
        '  File "app/jobs.py", line 3, in handle\n'
        f"ValueError: boom\rall good{TITLE}\u202etxt.exe"
    )
    job = make(JobStatus.DEAD, idempotency_key=key, last_error=error)
    text = run("show", str(job.pk))
    for raw in ("\x1b", "\x07", "\r", "\u202e"):
        assert raw not in text, repr(raw)
    assert "idempotency_key: order-1\\x1b[2J\\x1b[H\n" in text
    assert (
        "last_error: Traceback (most recent call last):\n"
        '  File "app/jobs.py", line 3, in handle\n'
        "ValueError: boom\\rall good\\x1b]0;owned\\x07\\u202etxt.exe\n"
    ) in text
    # --json is exact: the values as stored, escaped by JSON's own rules.
    data = run_json("show", str(job.pk))
    assert (data["idempotency_key"], data["last_error"]) == (key, error)


def test_list_escapes_control_characters_in_every_cell() -> None:
    # (Queue names cannot hold them: enqueue refuses such a name.)
    job = make(job_type=f"tests.cli{CLEAR_SCREEN}\r{TITLE}")
    text = run("list")
    assert not any(raw in text for raw in ("\x1b", "\x07", "\r")), text
    assert "tests.cli\\x1b[2J\\x1b[H\\r\\x1b]0;owned\\x07" in text
    assert run_json("list")[0]["type"] == job.type == f"tests.cli{CLEAR_SCREEN}\r{TITLE}"


def test_requeue_ids() -> None:
    dead, cancelled = make(JobStatus.DEAD), make(JobStatus.CANCELLED)
    data = run_json("requeue", str(dead.pk))
    assert data["requeued"] == 1 and data["ids"] == [str(dead.pk)]
    assert "1 job(s) requeued." in run("requeue", str(cancelled.pk))
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.PENDING}


def test_requeue_of_a_job_in_the_wrong_state_fails_after_doing_the_rest() -> None:
    dead, pending = make(JobStatus.DEAD), make()
    out = StringIO()
    with pytest.raises(CommandError, match="only dead or cancelled") as excinfo:
        call_command("jobs", "requeue", str(dead.pk), str(pending.pk), "--json", stdout=out)
    assert excinfo.value.returncode == 1
    assert json.loads(out.getvalue())["skipped"] == 1
    assert Job.objects.get(pk=dead.pk).status == JobStatus.PENDING


def test_requeue_all_dead_with_filters() -> None:
    wanted = [make(JobStatus.DEAD, job_type="tests.a", queue="q1") for _ in range(5)]
    other_type = make(JobStatus.DEAD, job_type="tests.b", queue="q1")
    other_queue = make(JobStatus.DEAD, job_type="tests.a", queue="q2")
    args = ("requeue", "--all-dead", "--type", "tests.a", "--queue", "q1", "--batch-size", "2")
    data = run_json(*args)
    assert data == {
        "requeued": 5,
        "batches": 3,
        "matched": 5,
        "matched_is_estimate": False,
        "filter": {"status": "dead", "type": "tests.a", "queue": "q1"},
    }
    assert {j.status for j in Job.objects.filter(pk__in=[j.pk for j in wanted])} == {"pending"}
    assert Job.objects.get(pk=other_type.pk).status == JobStatus.DEAD
    assert Job.objects.get(pk=other_queue.pk).status == JobStatus.DEAD
    assert "1 dead job(s) requeued." in run("requeue", "--all-dead", "--queue", "q2")
    assert run_json("requeue", "--all-dead")["requeued"] == 1


def test_requeue_all_by_status_and_filters() -> None:
    now = timezone.now()
    old = [make(JobStatus.CANCELLED, created_at=now - timedelta(days=3)) for _ in range(3)]
    young = make(JobStatus.CANCELLED)
    smtp = make(JobStatus.DEAD, last_error="ConnectionError: SMTP down")
    plain_dead = make(JobStatus.DEAD, last_error="ValueError")
    data = run_json("requeue", "--all", "--status", "cancelled", "--created-before", "2d")
    assert (data["requeued"], data["filter"]["status"]) == (3, "cancelled")
    assert {Job.objects.get(pk=j.pk).status for j in old} == {"pending"}
    assert Job.objects.get(pk=young.pk).status == JobStatus.CANCELLED
    after = (now - timedelta(hours=1)).isoformat()
    assert "1 cancelled job(s) requeued." in run(
        "requeue", "--all", "--status", "cancelled", "--created-after", after
    )
    assert "1 dead job(s) requeued." in run("requeue", "--all", "--error-contains", "smtp")
    assert Job.objects.get(pk=smtp.pk).status == JobStatus.PENDING
    assert Job.objects.get(pk=plain_dead.pk).status == JobStatus.DEAD


def test_cancel_all_pending_of_a_queue_and_waiting_ones() -> None:
    pending = [make(queue="q") for _ in range(4)]
    elsewhere = make(queue="other")
    running = make(JobStatus.RUNNING, queue="q")
    waiting = make(JobStatus.WAITING, queue="q")
    data = run_json("cancel", "--all", "--queue", "q", "--batch-size", "3")
    assert (data["cancelled"], data["batches"], data["filter"]) == (
        4,
        2,
        {"status": "pending", "queue": "q"},
    )
    assert {Job.objects.get(pk=j.pk).status for j in pending} == {"cancelled"}
    assert Job.objects.get(pk=elsewhere.pk).status == JobStatus.PENDING
    assert Job.objects.get(pk=running.pk).status == JobStatus.RUNNING
    assert "1 waiting job(s) cancelled." in run("cancel", "--all", "--status", "waiting")
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.CANCELLED


def test_a_bulk_run_shows_progress_on_a_terminal() -> None:
    class Terminal(StringIO):
        def isatty(self) -> bool:
            return True

    for _ in range(5):
        make(JobStatus.DEAD)
    err, out = Terminal(), StringIO()
    call_command("jobs", "requeue", "--all", "--batch-size", "2", stdout=out, stderr=err)
    assert "requeued 2 of 5 matching job(s) in 1 batch(es)" in err.getvalue()
    assert "requeued 5 of 5 matching job(s) in 3 batch(es)" in err.getvalue()
    assert out.getvalue().strip() == "5 dead job(s) requeued."


def test_cancel() -> None:
    first, second = make(), make()
    data = run_json("cancel", str(first.pk))
    assert data["cancelled"] == 1
    assert "1 job(s) cancelled." in run("cancel", str(second.pk))
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.CANCELLED}


def test_prune_honours_older_than_and_include_dead() -> None:
    now = timezone.now()
    old_completed = make(JobStatus.COMPLETED, completed_at=now - timedelta(days=8))
    old_cancelled = make(JobStatus.CANCELLED, completed_at=now - timedelta(days=8))
    young_completed = make(JobStatus.COMPLETED, completed_at=now - timedelta(days=6))
    old_dead = make(JobStatus.DEAD, completed_at=now - timedelta(days=8))
    pending = make(created_at=now - timedelta(days=30))
    data = run_json("prune", "--older-than", "7d")
    assert data["deleted"] == 2 and data["statuses"] == ["completed", "cancelled"]
    remaining = set(Job.objects.values_list("pk", flat=True))
    assert remaining == {young_completed.pk, old_dead.pk, pending.pk}
    assert old_completed.pk not in remaining and old_cancelled.pk not in remaining
    assert "1 job(s) deleted" in run("prune", "--older-than", "7d", "--include-dead")
    assert set(Job.objects.values_list("pk", flat=True)) == {young_completed.pk, pending.pk}
    assert run_json("prune", "--older-than", "5d")["deleted"] == 1


def test_prune_works_in_batches() -> None:
    old = timezone.now() - timedelta(days=1)
    for _ in range(7):
        make(JobStatus.COMPLETED, completed_at=old)
    data = run_json("prune", "--older-than", "1h", "--batch-size", "3")
    # 3 + 3 + 1: the short third batch ends the loop.
    assert (data["deleted"], data["batches"]) == (7, 3)
    assert not Job.objects.exists()


def test_prune_shows_progress_on_a_terminal_only() -> None:
    class Terminal(StringIO):
        def isatty(self) -> bool:
            return True

    old = timezone.now() - timedelta(days=1)
    for _ in range(4):
        make(JobStatus.COMPLETED, completed_at=old)
    err = Terminal()
    out = StringIO()
    call_command("jobs", "prune", "--older-than", "1h", "--batch-size", "2", stdout=out, stderr=err)
    assert "deleted 4 job(s) in 2 batch(es)" in err.getvalue()
    assert "\r" not in out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", str(uuid.uuid4())], "No job with id"),
        (["show", "not-a-uuid"], "is not a job id"),
        (["requeue", str(uuid.uuid4())], "No job with id"),
        (["requeue", "12"], "is not a job id"),
        (["requeue"], "Give job ids"),
        (["requeue", "--type", "x", str(uuid.uuid4())], "--type only apply with --all"),
        (["requeue", "--all-dead", str(uuid.uuid4())], "not both"),
        (["requeue", "--all", str(uuid.uuid4())], "Give job ids or --all, not both"),
        (["requeue", "--all", "--all-dead"], "Give --all or --all-dead, not both"),
        (["requeue", "--all-dead", "--status", "cancelled"], "--all --status cancelled"),
        (["requeue", "--all", "--status", "pending"], "--status: requeue --all applies to dead"),
        (["requeue", "--all", "--status", "finished"], "not 'finished'"),
        (["requeue", "--status", "dead"], "--status only apply with --all"),
        (["requeue", "--all", "--batch-size", "0"], "--batch-size: must be from 1 to 10000"),
        (["requeue", "--all", "--created-before", "yesterday"], "--created-before: 'yesterday'"),
        (["requeue", "--all", "--created-after", "2025-01-01T00:00"], "has no UTC offset"),
        (
            ["requeue", "--all", "--created-after", "1d", "--created-before", "2d"],
            "--created-before: must be later than created_after",
        ),
        (["requeue", "--all", "--queue", " "], "--queue: must be a non-empty string"),
        (["cancel"], "Give job ids to cancel or --all"),
        (["cancel", "--all", "--status", "running"], "applies to pending or waiting jobs"),
        (["cancel", "--queue", "q", str(uuid.uuid4())], "--queue only apply with --all"),
        (["cancel", str(uuid.uuid4())], "No job with id"),
        (["cancel", "nope"], "is not a job id"),
        (["list", "--status", "finished"], "unknown status 'finished'"),
        (["list", "--limit", "0"], "--limit"),
        (["list", "--limit", "ten"], "not a whole number"),
        (["prune", "--older-than", "7 days"], "--older-than: '7 days' is not a duration"),
        (["prune", "--older-than", "7d", "--batch-size", "0"], "--batch-size"),
    ],
)
def test_bad_input_is_a_command_error(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message) as excinfo:
        run(*args)
    assert excinfo.value.returncode == 1


def test_cancel_of_a_running_job_requests_it() -> None:
    job, other = make(JobStatus.RUNNING), make(JobStatus.RUNNING)
    assert "1 running job(s): cancel requested" in run("cancel", str(job.pk))
    data = run_json("cancel", str(other.pk))
    assert data["cancelled"] == 0 and data["skipped"] == 0
    assert data["cancel_requested"] == 1 and data["cancel_requested_ids"] == [str(other.pk)]
    for running in (job, other):
        running.refresh_from_db()
        assert running.status == JobStatus.RUNNING and running.cancel_requested_at is not None


def test_cancel_of_a_finished_job_is_refused() -> None:
    job = make(JobStatus.COMPLETED)
    with pytest.raises(CommandError, match="only pending, waiting or running jobs can be"):
        run("cancel", str(job.pk))


# -- pause and resume -------------------------------------------------------------


def test_pause_until_resumed_then_resume() -> None:
    make()
    make(queue="emails")
    assert "Queue emails paused until resumed." in run("pause", "emails")
    assert paused_queues() == {"emails": None}
    data = run_json("stats")
    assert data["queues"]["emails"]["paused"] is True
    assert data["queues"]["default"]["paused"] is False
    assert "yes" in run("stats").splitlines()[-1]
    resumed = run_json("resume", "emails")
    assert resumed["name"] == "emails" and resumed["paused"] is False
    assert paused_queues() == {}


def test_pause_for_and_until() -> None:
    before = timezone.now()
    data = run_json("pause", "emails", "--for", "15m")
    assert data["paused"] is True
    until = paused_queues()["emails"]
    assert until is not None
    assert before + timedelta(minutes=15) <= until <= timezone.now() + timedelta(minutes=15)
    assert data["paused_until"] == until.isoformat()
    text = run("pause", "emails", "--until", "2999-12-01T12:00Z")
    assert "until 2999-12-01T12:00:00+00:00" in text
    assert "until 2999-12-01T12:00" in run("stats")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("emails", "--until", "2999-01-01T00:00Z", "--for", "5m"), "not both"),
        (("emails", "--until", "tomorrow"), "--until: 'tomorrow' is not an ISO 8601"),
        (("emails", "--until", "2999-01-01T00:00"), "no UTC offset"),
        (("emails", "--until", "2000-01-01T00:00Z"), "--until: must be in the future"),
        (("emails", "--for", "soon"), "--for: 'soon' is not a duration"),
        (("emails", "--for", "0s"), "--for: a pause must last more than 0 seconds"),
        (("a,b",), "QUEUE: 'a,b' is not a valid queue name"),
    ],
)
def test_pause_bad_input_is_a_command_error(args: tuple[str, ...], words: str) -> None:
    with pytest.raises(CommandError, match=words):
        run("pause", *args)
    assert not QueueState.objects.exists()


def test_resume_bad_queue_name_is_a_command_error() -> None:
    with pytest.raises(CommandError, match=r"QUEUE: .* is not a valid queue name"):
        run("resume", "bad name")
