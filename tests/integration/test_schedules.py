"""Schedules against the real PostgreSQL: one job per tick under races, missed ticks,
the state table, the worker's scheduler thread, the checks, the CLI and the admin."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import checks
from django.core.management import call_command
from django.test import Client, override_settings
from django.utils import timezone

from django_durable_jobs import JobContext, enqueue, job
from django_durable_jobs.checks import check_schedules
from django_durable_jobs.models import Job, JobStatus, ScheduleState
from django_durable_jobs.schedules import MISSED_TICK_GRACE, Schedule, tick_from_key
from django_durable_jobs.worker import Worker, WorkerConfig
from django_durable_jobs.worker.scheduler import Scheduler
from tests.factories import Api, make_user, queue_connection, run_worker_until, wait_until

from .helpers import SLASHES, assert_error, run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)

EVERY_MINUTE = Schedule("tests.minutely", "tests.record", every=timedelta(minutes=1))


def scheduler(*schedules: Schedule) -> Scheduler:
    return Scheduler(queue_connection.alias, "test-worker", list(schedules))


def set_state(name: str, **fields: Any) -> None:
    ScheduleState.objects.filter(name=name).update(**fields)


def minute(now: datetime) -> datetime:
    return now.replace(second=0, microsecond=0)


# -- one job per tick ---------------------------------------------------------


def test_racing_schedulers_enqueue_exactly_one_job_per_tick() -> None:
    now = timezone.now()
    tick = minute(now)
    results = run_in_threads(8, lambda i: scheduler(EVERY_MINUTE).run_once(now))
    jobs = list(Job.objects.all())
    assert len(jobs) == 1
    job_row = jobs[0]
    assert job_row.idempotency_key == f"schedule:tests.minutely:{tick:%Y-%m-%dT%H:%M:%SZ}"
    assert (job_row.type, job_row.available_at, job_row.status) == (
        "tests.record",
        tick,
        JobStatus.PENDING,
    )
    # Exactly one thread created it; the others replayed the key.
    assert sum(1 for r in results if r) == 1
    state = ScheduleState.objects.get(name="tests.minutely")
    assert (state.last_tick, state.last_job_id) == (tick, job_row.pk)


def test_racing_schedulers_over_several_ticks_leave_no_duplicate_and_no_gap() -> None:
    start = minute(timezone.now()) - timedelta(minutes=10)
    five_seconds = Schedule("tests.fast", "tests.record", every=timedelta(seconds=5))
    schedulers = [scheduler(five_seconds) for _ in range(4)]
    ScheduleState.objects.create(name="tests.fast", timing="every 5s", first_seen=start)

    def race(index: int) -> None:
        for step in range(0, 60):
            schedulers[index].run_once(start + timedelta(seconds=step))

    run_in_threads(4, race)
    keys = sorted(Job.objects.values_list("idempotency_key", flat=True))
    expected = [five_seconds.idempotency_key(start + timedelta(seconds=s)) for s in range(0, 60, 5)]
    assert keys == expected


def test_the_job_takes_the_schedules_payload_queue_and_priority() -> None:
    schedule = Schedule(
        "tests.with_options",
        "tests.record",
        every=timedelta(minutes=1),
        payload={"report": "daily"},
        queue="reports",
        priority=7,
    )
    now = timezone.now()
    assert scheduler(schedule).run_once(now) == {"tests.with_options": minute(now)}
    job_row = Job.objects.get()
    assert (job_row.payload, job_row.queue, job_row.priority) == ({"report": "daily"}, "reports", 7)
    assert tick_from_key(job_row.idempotency_key) == minute(now)


def test_a_handlers_queue_applies_to_its_scheduled_jobs(clean_registry: None) -> None:
    @job("tests.sched_queue", queue="nightly", max_attempts=2)
    def handler(ctx: object) -> None: ...

    scheduler(Schedule("s", "tests.sched_queue", every=timedelta(minutes=1))).run_once()
    assert Job.objects.values_list("queue", "max_attempts").get() == ("nightly", 2)


# -- missed ticks ---------------------------------------------------------------


def test_after_a_long_downtime_latest_enqueues_one_catch_up_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="django_durable_jobs.worker")
    hourly = Schedule("tests.hourly", "tests.record", cron="0 * * * *", timezone="UTC")
    now = timezone.now()
    long_ago = now - timedelta(days=3)
    ScheduleState.objects.create(
        name="tests.hourly", timing=hourly.timing, first_seen=long_ago - timedelta(days=30),
        last_tick=long_ago.replace(minute=0, second=0, microsecond=0),
    )  # fmt: skip
    # Three days of hourly ticks were missed: one job, for the latest.
    for _ in range(3):
        scheduler(hourly).run_once(now)
    latest = now.replace(minute=0, second=0, microsecond=0)
    assert list(Job.objects.values_list("available_at", flat=True)) == [latest]
    assert ScheduleState.objects.get(name="tests.hourly").last_tick == latest
    # Said once, by the scheduler that enqueued the catch-up: 71 hourly ticks
    # lie strictly between the last tick three days ago and the latest.
    missed = [r.getMessage() for r in caplog.records if "missed" in r.getMessage()]
    assert len(missed) == 1
    assert missed[0].startswith("Schedule tests.hourly missed 71 tick(s) from ")


def test_a_scheduler_that_wakes_late_runs_the_latest_tick_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="django_durable_jobs.worker")
    every = Schedule("tests.every", "tests.record", every=timedelta(seconds=1))
    start = timezone.now().replace(microsecond=0)
    runner = scheduler(every)
    assert runner.run_once(start + timedelta(milliseconds=5)) == {"tests.every": start}
    assert runner.run_once(start + timedelta(seconds=1, milliseconds=5)) == {
        "tests.every": start + timedelta(seconds=1)
    }
    assert not [r for r in caplog.records if "missed" in r.getMessage()]
    # A stall of 2.5 s: the ticks at +2 s and +3 s passed unseen; +4 s runs.
    late = start + timedelta(seconds=4, milliseconds=500)
    assert runner.run_once(late) == {"tests.every": start + timedelta(seconds=4)}
    [message] = [r.getMessage() for r in caplog.records if "missed" in r.getMessage()]
    assert message == (
        f"Schedule tests.every missed 2 tick(s) from {(start + timedelta(seconds=2)).isoformat()}"
        f" (the last before {(start + timedelta(seconds=4)).isoformat()});"
        " only the latest was enqueued (missed=latest)"
    )
    assert Job.objects.count() == 3


def test_after_a_long_downtime_skip_enqueues_nothing_until_the_next_tick() -> None:
    hourly = Schedule("tests.hourly", "tests.record", cron="0 * * * *", missed="skip")
    now = timezone.now().replace(minute=30)
    ScheduleState.objects.create(
        name="tests.hourly", timing=hourly.timing, first_seen=now - timedelta(days=30),
        last_tick=now - timedelta(days=3),
    )  # fmt: skip
    runner = scheduler(hourly)
    assert runner.run_once(now) == {}
    assert not Job.objects.exists()
    # The next tick, on time, runs.
    next_tick = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    assert runner.run_once(next_tick + timedelta(seconds=3)) == {"tests.hourly": next_tick}
    assert Job.objects.count() == 1


def test_a_pruned_ticks_job_is_not_enqueued_again() -> None:
    # Ten seconds into a minute (the last one): a second later is the same tick,
    # whenever the test runs (timezone.now() at :59 would cross into a new one).
    now = timezone.now().replace(second=10, microsecond=0) - timedelta(minutes=1)
    scheduler(EVERY_MINUTE).run_once(now)
    Job.objects.all().delete()  # retention pruned it (or an operator deleted it)
    # A fresh worker (nothing in memory) at the same moment: the state row remembers.
    assert scheduler(EVERY_MINUTE).run_once(now + timedelta(seconds=1)) == {}
    assert not Job.objects.exists()


def test_a_new_schedule_waits_for_its_first_tick() -> None:
    daily = Schedule("tests.daily", "tests.record", cron="0 3 * * *")
    now = timezone.now()
    if now.hour == 3 and now.minute < 2:
        now += timedelta(hours=1)  # keep the 03:00 tick out of the grace period
    assert scheduler(daily).run_once(now) == {}
    assert not Job.objects.exists()
    state = ScheduleState.objects.get(name="tests.daily")
    assert (state.first_seen, state.last_tick, state.timing) == (now, None, "cron 0 3 * * *")


def test_changing_the_timing_counts_as_a_new_schedule() -> None:
    now = timezone.now()
    if now.hour in (3, 4) and now.minute < 2:
        now += timedelta(hours=2)
    old = Schedule("tests.daily", "tests.record", cron="0 3 * * *")
    ScheduleState.objects.create(
        name="tests.daily", timing=old.timing, first_seen=now - timedelta(days=30),
        last_tick=now - timedelta(days=2),
    )  # fmt: skip
    new = Schedule("tests.daily", "tests.record", cron="0 4 * * *")
    # Its latest 04:00 tick was never "missed": the schedule did not exist yet.
    assert scheduler(new).run_once(now) == {}
    state = ScheduleState.objects.get(name="tests.daily")
    assert (state.timing, state.first_seen) == ("cron 0 4 * * *", now)
    # Under the old timing, the same downtime would have caught up once.
    ScheduleState.objects.filter(name="tests.daily").update(
        timing=old.timing, first_seen=now - timedelta(days=30)
    )
    assert list(scheduler(old).run_once(now)) == ["tests.daily"]


def test_a_rolling_deploy_that_changes_the_interval_runs_each_tick_once() -> None:
    """Old workers (every 10 s) and new ones (every 5 s) run side by side.

    Each look by a worker of the other version counts as a timing change (the
    state's first_seen moves to now); that must neither drop a tick nor
    enqueue one twice: a 10 s tick is also a 5 s tick, with the same key.
    """
    start = minute(timezone.now()) - timedelta(minutes=5)
    old = Schedule("tests.rolling", "tests.record", every=timedelta(seconds=10))
    new = Schedule("tests.rolling", "tests.record", every=timedelta(seconds=5))
    ScheduleState.objects.create(name="tests.rolling", timing=old.timing, first_seen=start)
    old_worker, new_worker = scheduler(old), scheduler(new)
    for second in range(60):
        now = start + timedelta(seconds=second, milliseconds=10)
        old_worker.run_once(now)
        new_worker.run_once(now)
    keys = list(Job.objects.order_by("available_at").values_list("idempotency_key", flat=True))
    assert keys == [new.idempotency_key(start + timedelta(seconds=s)) for s in range(0, 60, 5)]
    assert ScheduleState.objects.get(name="tests.rolling").last_tick == start + timedelta(
        seconds=55
    )


def test_a_key_taken_by_a_job_with_other_parameters_is_not_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = timezone.now()
    existing = enqueue(
        "tests.record", {"old": True}, idempotency_key=EVERY_MINUTE.idempotency_key(minute(now))
    ).job
    assert scheduler(EVERY_MINUTE).run_once(now) == {}
    assert Job.objects.count() == 1
    assert "already has job" in caplog.text
    assert ScheduleState.objects.get(name="tests.minutely").last_job_id == existing.pk


def test_state_never_moves_back_to_an_older_tick() -> None:
    now = timezone.now()
    scheduler(EVERY_MINUTE).run_once(now)
    # A worker whose clock runs two minutes late: its tick is older.
    scheduler(EVERY_MINUTE).run_once(now - timedelta(minutes=2))
    assert ScheduleState.objects.get(name="tests.minutely").last_tick == minute(now)


def test_disabled_schedules_are_not_run() -> None:
    off = Schedule("tests.off", "tests.record", every=timedelta(seconds=1), enabled=False)
    assert scheduler(off).run_once() == {}
    assert not ScheduleState.objects.exists()


def test_grace_is_what_the_policy_documents() -> None:
    assert timedelta(seconds=60) == MISSED_TICK_GRACE


# -- the worker's scheduler thread ---------------------------------------------------


@pytest.fixture
def every_second(clean_registry: None) -> None:
    @job("tests.sched_tick", schedule=1)
    def handler(ctx: JobContext) -> dict[str, Any]:
        return {"tick": str(tick_from_key(ctx.idempotency_key))}


def run_worker(until: Callable[[], object], what: str, **options: Any) -> Worker:
    """A worker (with its scheduler thread, unless told otherwise) until ``until`` holds."""
    return run_worker_until(until, 60, what, concurrency=2, poll_interval=0.2, **options)


def test_a_worker_enqueues_and_runs_each_tick(
    every_second: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="django_durable_jobs.worker")
    ticks = Job.objects.filter(type="tests.sched_tick")
    run_worker(
        lambda: ticks.count() >= 3 and ticks.filter(status=JobStatus.COMPLETED).exists(),
        "three ticks enqueued and one run",
    )
    jobs = list(Job.objects.filter(type="tests.sched_tick").order_by("available_at"))
    ticks = [j.available_at for j in jobs]
    assert len(ticks) >= 3
    # One job per tick, on whole seconds, no duplicate.
    assert all(t.microsecond == 0 for t in ticks)
    assert all(b > a for a, b in itertools.pairwise(ticks))
    # No silent gap: a tick is skipped only when the scheduler woke more than
    # a second late (a stalled CI host), and then it says so.
    missed = [r.getMessage() for r in caplog.records if "missed" in r.getMessage()]
    for a, b in itertools.pairwise(ticks):
        if b - a != timedelta(seconds=1):
            first = (a + timedelta(seconds=1)).isoformat()
            assert any(f"from {first} (the last before {b.isoformat()})" in m for m in missed)
    done = [j for j in jobs if j.status == JobStatus.COMPLETED]
    assert done and done[0].result == {"tick": str(done[0].available_at)}
    state = ScheduleState.objects.get(name="tests.sched_tick")
    assert state.last_tick == ticks[-1]


def test_no_schedules_and_burst_workers_enqueue_no_tick(every_second: None) -> None:
    # A job due 2.5 s from now (the database's clock), run by the worker: it
    # served through two ticks and more; a scheduling worker would have enqueued them.
    probe = enqueue("tests.record", delay=2.5).job
    worker = run_worker(
        lambda: Job.objects.filter(pk=probe.pk, status=JobStatus.COMPLETED).exists(),
        "the delayed probe",
        schedules=False,
    )
    assert worker.scheduler is None
    burst = Worker(WorkerConfig(burst=True, install_signal_handlers=False))
    assert burst.scheduler is None
    burst.run()
    assert not Job.objects.filter(type="tests.sched_tick").exists()


def test_a_worker_without_schedules_has_no_scheduler_thread() -> None:
    worker = Worker(WorkerConfig(install_signal_handlers=False))
    assert worker.scheduler is None


def test_invalid_settings_schedules_are_logged_and_the_valid_ones_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entries = {"bad": {"cron": "61 * * * *"}, "tests.good": {"type": "tests.record", "every": 60}}
    with override_settings(DURABLE_JOBS={"SCHEDULES": entries}):
        runner = Scheduler.from_declarations(queue_connection.alias, "w")
    assert runner is not None
    assert [s.name for s in runner.schedules] == ["tests.good"]
    assert "Schedule ignored: Schedule 'bad'" in caplog.text


# -- checks ----------------------------------------------------------------------


def ids(messages: list[checks.CheckMessage]) -> list[str]:
    return [m.id for m in messages if m.id is not None]


def test_valid_schedules_pass_the_checks() -> None:
    entries = {"tests.ok": {"type": "tests.record", "cron": "*/5 * * * *"}}
    with override_settings(DURABLE_JOBS={"SCHEDULES": entries}):
        assert check_schedules() == []


# databases=[]: what run_checks() did by default before Django 6.1, which opens
# every database alias (the tests' in-memory sqlite one too) for model checks.
def test_e006_a_schedule_without_a_handler() -> None:
    entries = {"reports.nightly": {"type": "reports.build", "cron": "0 3 * * *"}}
    with override_settings(DURABLE_JOBS={"SCHEDULES": entries}):
        messages = check_schedules()
        assert "durable_jobs.E006" in ids(checks.run_checks(databases=[]))
    assert ids(messages) == ["durable_jobs.E006"]
    assert "'reports.nightly'" in messages[0].msg and "'reports.build'" in messages[0].msg
    assert messages[0].level == checks.ERROR


def test_e007_an_invalid_schedule() -> None:
    entries = {
        "a": {"type": "tests.record", "cron": "0 3 * *"},
        "b": {"type": "tests.record", "every": 5, "timezone": "Mars/Olympus"},
    }
    with override_settings(DURABLE_JOBS={"SCHEDULES": entries}):
        messages = check_schedules()
    assert ids(messages) == ["durable_jobs.E007", "durable_jobs.E007"]
    assert "needs 5 fields" in messages[0].msg
    assert "unknown timezone 'Mars/Olympus'" in messages[1].msg


def test_an_ill_shaped_schedules_setting_is_e003_only() -> None:
    with override_settings(DURABLE_JOBS={"SCHEDULES": ["a"]}):
        assert check_schedules() == []
        assert "durable_jobs.E003" in ids(checks.run_checks(databases=[]))


# -- CLI ----------------------------------------------------------------------------


def run_cli(*args: str) -> str:
    out = StringIO()
    call_command("jobs", "schedules", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


SETTINGS_SCHEDULES = {
    "tests.minutely": {"type": "tests.record", "every": 60, "queue": "reports"},
    "tests.berlin": {"type": "tests.record", "cron": "0 9 * * *", "timezone": "Europe/Berlin",
                     "missed": "skip", "enabled": False},
    "tests.orphan": {"type": "nobody.handles", "every": "1h"},
}  # fmt: skip


def test_cli_lists_schedules_with_last_and_next_tick() -> None:
    now = timezone.now()
    with override_settings(DURABLE_JOBS={"SCHEDULES": SETTINGS_SCHEDULES}):
        scheduler(EVERY_MINUTE).run_once(now)
        rows = json.loads(run_cli("--json"))
        text = run_cli()
    by_name = {row["name"]: row for row in rows}
    assert list(by_name) == ["tests.berlin", "tests.minutely", "tests.orphan"]
    minutely = by_name["tests.minutely"]
    job_row = Job.objects.get()
    assert minutely["last_tick"] == minute(now).isoformat()
    assert minutely["last_job_id"] == str(job_row.pk)
    assert minutely["last_job_status"] == "pending"
    assert minutely["next_tick"] == (minute(now) + timedelta(minutes=1)).isoformat()
    assert (minutely["timing"], minutely["every_seconds"], minutely["queue"]) == (
        "every 1m",
        60,
        "reports",
    )
    berlin = by_name["tests.berlin"]
    assert (berlin["timezone"], berlin["missed"], berlin["enabled"]) == (
        "Europe/Berlin",
        "skip",
        False,
    )
    assert berlin["next_tick"] is None and berlin["last_tick"] is None
    assert by_name["tests.orphan"]["handler_registered"] is False
    lines = text.splitlines()
    assert lines[0].split() == ["name", "type", "timing", "timezone", "queue", "missed",
                                "last", "tick", "last", "job", "next", "tick"]  # fmt: skip
    assert "tests.berlin (disabled)" in text
    assert "nobody.handles (no handler!)" in text
    assert f"{job_row.pk} (pending)" in text
    assert lines[-1] == "(3 schedules)"


def test_cli_shows_a_pruned_last_job() -> None:
    with override_settings(DURABLE_JOBS={"SCHEDULES": SETTINGS_SCHEDULES}):
        scheduler(EVERY_MINUTE).run_once()
        Job.objects.all().delete()
        rows = json.loads(run_cli("--json"))
    assert {r["name"]: r["last_job_status"] for r in rows}["tests.minutely"] == "pruned"


def test_cli_with_no_schedules() -> None:
    assert run_cli().strip() == "No schedules declared."
    assert json.loads(run_cli("--json")) == []


# -- REST API: GET /api/schedules ------------------------------------------------------


def api_time(value: datetime) -> str:
    """A time as the API writes it: ISO 8601, in UTC (TIME_ZONE), with ``Z``."""
    return value.astimezone(dt_timezone.utc).isoformat().replace("+00:00", "Z")


TIMES = ("first_seen", "last_tick", "next_tick")


def without_next_tick(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key != "next_tick"}


@SLASHES
def test_api_lists_schedules_by_name_with_last_and_next_tick(slash: str) -> None:
    now = timezone.now()
    reader = Api(make_user("reader", "view_job"))
    with override_settings(DURABLE_JOBS={"SCHEDULES": SETTINGS_SCHEDULES}):
        scheduler(EVERY_MINUTE).run_once(now)
        before = timezone.now()
        response = reader.get(f"/api/schedules{slash}")
        after = timezone.now()
        cli = json.loads(run_cli("--json"))
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    rows = response.json()
    assert [row["name"] for row in rows] == ["tests.berlin", "tests.minutely", "tests.orphan"]
    # The same list as `jobs schedules --json`, in the API's time format
    # (next ticks aside: each was computed when its command ran).
    assert [without_next_tick(row) for row in rows] == [
        without_next_tick(
            {key: value.replace("+00:00", "Z") if key in TIMES and value else value
             for key, value in row.items()}
        )
        for row in cli
    ]  # fmt: skip
    by_name = {row["name"]: row for row in rows}
    job_row = Job.objects.get()
    state = ScheduleState.objects.get(name="tests.minutely")
    minutely = by_name["tests.minutely"]
    # The next tick is computed when the request is answered.
    assert minutely.pop("next_tick") in {
        api_time(minute(moment) + timedelta(minutes=1)) for moment in (before, after)
    }
    assert minutely == {
        "name": "tests.minutely",
        "type": "tests.record",
        "cron": None,
        "every_seconds": 60,
        "timing": "every 1m",
        "timezone": "UTC",
        "queue": "reports",
        "missed": "latest",
        "enabled": True,
        "origin": "DURABLE_JOBS['SCHEDULES']",
        "handler_registered": True,
        "first_seen": api_time(state.first_seen),
        "last_tick": api_time(minute(now)),
        "last_job_id": str(job_row.pk),
        "last_job_status": "pending",
    }
    # Disabled, never seen by a worker: no tick behind it, none ahead.
    berlin = by_name["tests.berlin"]
    assert (berlin["cron"], berlin["every_seconds"], berlin["timezone"]) == (
        "0 9 * * *",
        None,
        "Europe/Berlin",
    )
    assert (berlin["enabled"], berlin["missed"]) == (False, "skip")
    for row in (berlin, by_name["tests.orphan"]):
        assert row["first_seen"] is row["last_tick"] is row["last_job_id"] is None
        assert row["last_job_status"] is None
    assert berlin["next_tick"] is None
    # Enabled and never ticked: a next tick, nothing behind it.
    orphan = by_name["tests.orphan"]
    assert orphan["handler_registered"] is False
    assert orphan["next_tick"].endswith(":00:00Z")


def test_api_says_pruned_for_a_last_job_that_retention_deleted() -> None:
    staff = Api(make_user("reader", "view_job"))
    with override_settings(DURABLE_JOBS={"SCHEDULES": SETTINGS_SCHEDULES}):
        scheduler(EVERY_MINUTE).run_once()
        job_id = Job.objects.get().pk
        Job.objects.all().delete()
        rows = staff.get("/api/schedules").json()
    minutely = {row["name"]: row for row in rows}["tests.minutely"]
    assert (minutely["last_job_id"], minutely["last_job_status"]) == (str(job_id), "pruned")
    assert minutely["last_tick"] is not None


def test_api_with_no_schedules_is_an_empty_list() -> None:
    response = Api(make_user("reader", "view_job")).get("/api/schedules/")
    assert response.status_code == 200
    assert response.json() == []


def test_api_schedules_need_the_permission_to_list_jobs() -> None:
    with override_settings(DURABLE_JOBS={"SCHEDULES": SETTINGS_SCHEDULES}):
        scheduler(EVERY_MINUTE).run_once()
        anonymous = Api().get("/api/schedules")
        adder = Api(make_user("adder", "add_job")).get("/api/schedules/")
        operator = Api(make_user("operator", "change_job")).get("/api/schedules")
    assert_error(anonymous, 401, "not_authenticated")
    assert_error(adder, 403, "permission_denied")
    for refused in (anonymous, adder):
        assert b"tests.minutely" not in refused.content
    assert operator.status_code == 200
    assert len(operator.json()) == 3


# -- admin ----------------------------------------------------------------------------

ADMIN = "/admin/durable_jobs/schedulestate/"


def test_admin_lists_schedules_read_only() -> None:
    with override_settings(DURABLE_JOBS={"SCHEDULES": SETTINGS_SCHEDULES}):
        scheduler(EVERY_MINUTE).run_once()
        ScheduleState.objects.create(name="gone", timing="every 5s", first_seen=timezone.now())
        client = Client()
        client.force_login(User.objects.create_superuser("admin", "a@example.com", "x"))
        page = client.get(ADMIN)
        assert page.status_code == 200
        html = page.content.decode()
        job_row = Job.objects.get()
        assert "tests.minutely" in html and "every 1m" in html and "reports" in html
        assert f"/admin/durable_jobs/job/{job_row.pk}/change/" in html
        assert "(no longer declared)" in html
        assert "Add schedule" not in html
        # Declared, enabled, never seen by a worker: named, not silently absent.
        assert "Declared but not yet seen by a worker" in html
        assert "tests.orphan" in html and "tests.berlin" not in html
        detail = client.get(f"{ADMIN}tests.minutely/change/")
        assert detail.status_code == 200
        assert b'name="_save"' not in detail.content
        assert client.get(f"{ADMIN}add/").status_code == 403
        assert client.post(f"{ADMIN}tests.minutely/delete/").status_code == 403


def test_admin_needs_staff() -> None:
    client = Client()
    client.force_login(User.objects.create_user("plain", password="x"))
    assert client.get(ADMIN).status_code == 302


def test_periodic_jobs_need_use_tz(caplog: pytest.LogCaptureFixture) -> None:
    entries = {"tests.ok": {"type": "tests.record", "every": 60}}
    with override_settings(USE_TZ=False, DURABLE_JOBS={"SCHEDULES": entries}):
        messages = check_schedules()
        assert Scheduler.from_declarations(queue_connection.alias, "w") is None
    assert ids(messages) == ["durable_jobs.E007"]
    assert "USE_TZ = True" in messages[0].msg
    assert "need USE_TZ = True" in caplog.text


def test_the_scheduler_thread_survives_an_unexpected_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runner = scheduler(EVERY_MINUTE)
    calls: list[int] = []
    real_run_once = runner.run_once

    def flaky(now: datetime | None = None) -> dict[str, datetime]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real_run_once(now)

    monkeypatch.setattr(runner, "run_once", flaky)
    runner.start()
    try:
        wait_until(Job.objects.exists, 30, "the scheduler to enqueue after its error")
    finally:
        runner.stop()
    assert len(calls) >= 2
    assert Job.objects.count() == 1
    assert "Scheduler error" in caplog.text and "boom" in caplog.text


def test_admin_staff_with_view_permission_sees_but_cannot_change() -> None:
    from django.contrib.auth.models import Permission

    scheduler(EVERY_MINUTE).run_once()
    user = User.objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="durable_jobs",
            codename__in=["view_schedulestate", "change_schedulestate", "delete_schedulestate"],
        )
    )
    client = Client()
    client.force_login(user)
    page = client.get(ADMIN)
    assert page.status_code == 200 and b"tests.minutely" in page.content
    # Even with the change and delete permissions: the rows belong to the workers.
    assert b'name="_save"' not in client.get(f"{ADMIN}tests.minutely/change/").content
    assert client.post(f"{ADMIN}tests.minutely/delete/").status_code == 403
    assert client.post(
        ADMIN, {"action": "delete_selected", "_selected_action": ["tests.minutely"]}
    ).status_code in (200, 302)
    assert ScheduleState.objects.filter(name="tests.minutely").exists()
