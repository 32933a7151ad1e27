"""Schedules without a database: ticks (cron, intervals, DST), keys, policy, validation."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings

from django_durable_jobs import job
from django_durable_jobs.exceptions import InvalidSchedule
from django_durable_jobs.registry import registry
from django_durable_jobs.schedules import (
    MISSED_COUNT_LIMIT,
    MISSED_TICK_GRACE,
    NAME_MAX_LENGTH,
    Schedule,
    due_tick,
    load_schedules,
    missed_tick_count,
    schedule_for_job,
    schedule_from_entry,
    tick_from_key,
)

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def at(text: str) -> datetime:
    """An aware UTC datetime from ``2026-01-01T10:00:00``."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def cron(expr: str, tz: str = "UTC") -> Schedule:
    return Schedule("s", "s", cron=expr, timezone=tz)


def ticks(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    found = []
    tick = schedule.next_tick(start)
    while tick is not None and tick <= end:
        found.append(tick)
        tick = schedule.next_tick(tick)
    return found


# -- intervals ---------------------------------------------------------------


def test_interval_ticks_are_anchored_at_the_epoch() -> None:
    every2 = Schedule("s", "s", every=timedelta(seconds=2))
    assert every2.latest_tick(at("2026-01-01T10:00:01.500")) == at("2026-01-01T10:00:00")
    assert every2.next_tick(at("2026-01-01T10:00:01.500")) == at("2026-01-01T10:00:02")
    every5m = Schedule("s", "s", every=timedelta(minutes=5))
    assert every5m.latest_tick(at("2026-01-01T10:07:59")) == at("2026-01-01T10:05:00")
    # 7 s does not divide a minute: still the same ticks on every host.
    every7 = Schedule("s", "s", every=timedelta(seconds=7))
    latest = every7.latest_tick(at("2026-01-01T10:00:00"))
    assert latest is not None and latest.timestamp() % 7 == 0


def test_a_tick_exactly_now_is_the_latest_and_not_the_next() -> None:
    for schedule in (Schedule("s", "s", every=timedelta(seconds=10)), cron("*/5 * * * *")):
        now = at("2026-01-01T10:05:00")
        assert schedule.latest_tick(now) == now
        next_tick = schedule.next_tick(now)
        assert next_tick is not None and next_tick > now


def test_ticks_do_not_depend_on_the_zone_of_now() -> None:
    schedule = cron("0 9 * * *", "Europe/Berlin")
    now = at("2026-06-01T12:00:00")
    assert schedule.latest_tick(now) == schedule.latest_tick(now.astimezone(BERLIN))


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        cron("* * * * *").latest_tick(datetime(2026, 1, 1))


# -- cron and time zones -----------------------------------------------------


def test_cron_ticks_in_utc() -> None:
    schedule = cron("*/15 * * * *")
    assert schedule.latest_tick(at("2026-01-01T10:29:59")) == at("2026-01-01T10:15:00")
    assert schedule.next_tick(at("2026-01-01T10:29:59")) == at("2026-01-01T10:30:00")


def test_cron_ticks_follow_the_schedules_time_zone() -> None:
    nine_in_new_york = cron("0 9 * * *", "America/New_York")
    assert nine_in_new_york.next_tick(at("2026-01-10T00:00:00")) == at("2026-01-10T14:00:00")
    assert nine_in_new_york.next_tick(at("2026-07-10T00:00:00")) == at("2026-07-10T13:00:00")


def test_the_default_time_zone_is_settings_time_zone() -> None:
    schedule = Schedule("s", "s", cron="0 9 * * *")
    with override_settings(TIME_ZONE="Asia/Tokyo"):
        assert schedule.next_tick(at("2026-01-10T01:00:00")) == at("2026-01-11T00:00:00")
    with override_settings(TIME_ZONE="UTC"):
        assert schedule.next_tick(at("2026-01-10T01:00:00")) == at("2026-01-10T09:00:00")


def test_dst_spring_forward_runs_a_skipped_wall_time_once_just_after_the_gap() -> None:
    # Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    schedule = cron("30 2 * * *", "Europe/Berlin")
    found = ticks(schedule, at("2026-03-28T00:00:00"), at("2026-03-31T00:00:00"))
    assert found == [
        at("2026-03-28T01:30:00"),  # 02:30 CET
        at("2026-03-29T01:00:00"),  # 03:00 CEST, the first minute after the gap
        at("2026-03-30T00:30:00"),  # 02:30 CEST
    ]


def test_dst_fall_back_runs_a_repeated_wall_time_once() -> None:
    # Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    schedule = cron("30 2 * * *", "Europe/Berlin")
    found = ticks(schedule, at("2026-10-24T12:00:00"), at("2026-10-26T12:00:00"))
    assert found == [at("2026-10-25T00:30:00"), at("2026-10-26T01:30:00")]


def test_dst_fall_back_keeps_minute_schedules_in_real_time() -> None:
    # Every half hour means every 30 real minutes, through the repeated hour:
    # two ticks read 02:00 on the wall clock, at distinct instants (and keys).
    schedule = cron("*/30 * * * *", "Europe/Berlin")
    found = ticks(schedule, at("2026-10-24T23:45:00"), at("2026-10-25T02:00:00"))
    assert found == [at("2026-10-25T00:00:00") + timedelta(minutes=30 * i) for i in range(5)]
    walls = [t.astimezone(BERLIN).strftime("%H:%M") for t in found]
    assert walls == ["02:00", "02:30", "02:00", "02:30", "03:00"]
    assert len({schedule.idempotency_key(t) for t in found}) == 5


@pytest.mark.parametrize(
    ("expr", "tz"),
    [
        ("30 2 * * *", "Europe/Berlin"),
        ("*/30 * * * *", "Europe/Berlin"),
        ("0 */3 * * *", "Europe/Berlin"),
        ("15 1-3 * * *", "America/New_York"),
        ("0 0 * * 0", "Australia/Lord_Howe"),
    ],
)
def test_latest_tick_agrees_with_next_tick_through_dst_changes(expr: str, tz: str) -> None:
    schedule = cron(expr, tz)
    for start, end in (
        (at("2026-03-07T00:00:00"), at("2026-04-07T00:00:00")),
        (at("2026-09-30T00:00:00"), at("2026-11-05T00:00:00")),
    ):
        found = ticks(schedule, start, end)
        assert found
        for previous, tick in itertools.pairwise(found):
            assert schedule.latest_tick(tick) == tick
            assert schedule.latest_tick(tick - timedelta(seconds=1)) == previous
            assert schedule.latest_tick(tick - timedelta(microseconds=1)) == previous


def test_cron_aliases() -> None:
    assert schedule_for_job("t", "@daily").cron == "0 0 * * *"
    assert schedule_for_job("t", "@HOURLY").cron == "0 * * * *"


# -- keys ----------------------------------------------------------------------


def test_idempotency_key_is_the_name_and_the_utc_tick() -> None:
    schedule = cron("0 9 * * *", "Europe/Berlin")
    tick = datetime(2026, 1, 10, 9, 0, tzinfo=BERLIN)
    assert schedule.idempotency_key(tick) == "schedule:s:2026-01-10T08:00:00Z"
    assert tick_from_key(schedule.idempotency_key(tick)) == at("2026-01-10T08:00:00")


def test_tick_from_key_ignores_other_keys() -> None:
    for key in (None, "", "welcome-42", "schedule:", "schedule:x:not-a-time-at-all!!"):
        assert tick_from_key(key) is None


# -- the missed-tick policy ------------------------------------------------------


NOW = at("2026-01-01T12:00:00")
LONG_AGO = at("2025-12-01T00:00:00")


def test_an_on_time_tick_is_due_under_both_policies() -> None:
    tick = NOW - timedelta(seconds=1)
    for missed in ("latest", "skip"):
        assert due_tick(tick, now=NOW, last_tick=None, first_seen=LONG_AGO, missed=missed) == tick


def test_a_tick_already_enqueued_is_not_due_again() -> None:
    tick = NOW - timedelta(seconds=1)
    assert due_tick(tick, now=NOW, last_tick=tick, first_seen=LONG_AGO, missed="latest") is None
    later = tick + timedelta(seconds=2)
    assert due_tick(tick, now=NOW, last_tick=later, first_seen=LONG_AGO, missed="latest") is None


def test_after_downtime_latest_runs_the_last_missed_tick_and_skip_runs_none() -> None:
    # Down for ten hours: the tick at 03:00 was missed.
    tick = at("2026-01-01T03:00:00")
    last = at("2025-12-31T03:00:00")
    assert due_tick(tick, now=NOW, last_tick=last, first_seen=LONG_AGO, missed="latest") == tick
    assert due_tick(tick, now=NOW, last_tick=last, first_seen=LONG_AGO, missed="skip") is None


def test_skip_still_runs_a_tick_that_is_only_a_little_late() -> None:
    tick = NOW - MISSED_TICK_GRACE
    assert due_tick(tick, now=NOW, last_tick=None, first_seen=LONG_AGO, missed="skip") == tick
    too_late = tick - timedelta(seconds=1)
    assert due_tick(too_late, now=NOW, last_tick=None, first_seen=LONG_AGO, missed="skip") is None


def test_a_new_schedule_does_not_catch_up_on_a_tick_from_before_it_existed() -> None:
    tick = at("2026-01-01T03:00:00")
    assert due_tick(tick, now=NOW, last_tick=None, first_seen=NOW, missed="latest") is None
    # ...but a tick just before it was first seen (a worker slow to start) runs.
    recent = NOW - timedelta(seconds=5)
    assert due_tick(recent, now=NOW, last_tick=None, first_seen=NOW, missed="latest") == recent


def test_no_tick_and_future_ticks_are_never_due() -> None:
    assert due_tick(None, now=NOW, last_tick=None, first_seen=LONG_AGO, missed="latest") is None
    future = NOW + timedelta(seconds=1)
    assert due_tick(future, now=NOW, last_tick=None, first_seen=LONG_AGO, missed="latest") is None


# -- validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"cron": "0 3 * *"}, "needs 5 fields"),
        ({"cron": "0 3 * * * *"}, "needs 5 fields"),
        ({"cron": "61 * * * *"}, "not a valid cron expression: Bad minute"),
        ({"cron": "0 0 30 2 *"}, "not a valid cron expression"),
        ({"cron": 5}, "cron must be a string"),
        ({"every": 0}, "at least 1 second"),
        ({"every": -5}, "at least 1 second"),
        ({"every": 1.5}, "whole number of seconds"),
        ({"every": float("nan")}, "finite"),
        ({"every": True}, "every must be a timedelta"),
        ({"every": "2 minutes"}, "is not a duration"),
        ({"every": timedelta(days=365 * 101)}, "at most"),
        ({"cron": "* * * * *", "every": 5}, "exactly one of 'cron' and 'every'"),
        ({"type": "t"}, "exactly one of 'cron' and 'every'"),
        ({"every": 5, "timezone": "Europe/Berln"}, "unknown timezone 'Europe/Berln'"),
        # A directory of the zone database: IsADirectoryError, before.
        ({"every": 5, "timezone": "America"}, "unknown timezone 'America'"),
        # An int no float holds: OverflowError, before.
        ({"every": 10**400}, "at most"),
        ({"every": 5, "timezone": "../etc/passwd"}, "unknown timezone"),
        ({"every": 5, "timezone": ""}, "timezone must be a zone name"),
        ({"every": 5, "payload": [1]}, "payload must be a JSON object"),
        ({"every": 5, "payload": {"when": datetime(2026, 1, 1)}}, "not JSON-serialisable"),
        ({"every": 5, "queue": "bad queue"}, "not a valid queue name"),
        ({"every": 5, "priority": 10**6}, "priority must be between"),
        ({"every": 5, "missed": "all"}, "missed must be 'latest' or 'skip'"),
        ({"every": 5, "enabled": "yes"}, "enabled must be True or False"),
        ({"every": 5, "crom": "* * * * *"}, "unknown key(s) 'crom'"),
        ({"every": 5, "type": ""}, "type must not be empty"),
        ("*/5 * * * *", "the entry must be a dict"),
    ],
)
def test_invalid_entries_are_refused_with_a_clear_message(entry: object, message: str) -> None:
    with pytest.raises(InvalidSchedule) as excinfo:
        schedule_from_entry("reports.nightly", entry)
    assert message in str(excinfo.value)
    assert str(excinfo.value).startswith("Schedule 'reports.nightly': ")
    assert isinstance(excinfo.value, ValueError)


def test_a_full_entry() -> None:
    schedule = schedule_from_entry(
        "nightly",
        {
            "type": "reports.build",
            "cron": "0  3 * * MON-FRI",
            "payload": {"kind": "daily"},
            "queue": "reports",
            "priority": 5,
            "timezone": "Europe/Berlin",
            "missed": "skip",
            "enabled": False,
        },
    )
    assert schedule == Schedule(
        "nightly",
        "reports.build",
        cron="0 3 * * MON-FRI",
        payload={"kind": "daily"},
        queue="reports",
        priority=5,
        timezone="Europe/Berlin",
        missed="skip",
        enabled=False,
        origin="DURABLE_JOBS['SCHEDULES']",
    )
    assert schedule.timing == "cron 0 3 * * MON-FRI"


def test_an_entry_without_type_runs_the_job_type_of_its_name() -> None:
    schedule = schedule_from_entry("cleanup.sessions", {"every": "5m"})
    assert (schedule.type, schedule.every, schedule.timing) == (
        "cleanup.sessions",
        timedelta(minutes=5),
        "every 5m",
    )


def test_interval_spellings() -> None:
    for value in (120, 120.0, "2m", timedelta(minutes=2)):
        assert schedule_from_entry("s", {"every": value}).every == timedelta(minutes=2)


def test_names_are_checked() -> None:
    with pytest.raises(InvalidSchedule, match="at most"):
        schedule_from_entry("n" * (NAME_MAX_LENGTH + 1), {"every": 5})
    with pytest.raises(InvalidSchedule, match="non-empty"):
        schedule_from_entry(" padded ", {"every": 5})
    # The longest name still makes a key that fits the column.
    longest = schedule_from_entry("n" * NAME_MAX_LENGTH, {"every": 5})
    assert len(longest.idempotency_key(NOW)) == 255


# -- @job(schedule=...) ---------------------------------------------------------


def test_job_schedule_takes_a_cron_string_or_an_interval(clean_registry: None) -> None:
    @job("unit.every_five_minutes", schedule="*/5 * * * *")
    def a(ctx: object) -> None: ...

    @job("unit.every_ten_seconds", schedule=10)
    def b(ctx: object) -> None: ...

    @job("unit.hourly", schedule=timedelta(hours=1), queue="reports")
    def c(ctx: object) -> None: ...

    handler = registry.get("unit.every_five_minutes")
    assert handler is not None and handler.schedule is not None
    assert (handler.schedule.name, handler.schedule.cron) == (
        "unit.every_five_minutes",
        "*/5 * * * *",
    )
    handler = registry.get("unit.every_ten_seconds")
    assert handler is not None and handler.schedule is not None
    assert handler.schedule.every == timedelta(seconds=10)
    handler = registry.get("unit.hourly")
    assert handler is not None and handler.schedule is not None
    # The handler's own queue applies when the job is enqueued.
    assert handler.schedule.queue is None and handler.queue == "reports"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("every 5 minutes", "needs 5 fields"),
        ("2s", "For an interval, give a timedelta or a number of seconds"),
        (0, "at least 1 second"),
        ({"cron": "* * * * *"}, "DURABLE_JOBS['SCHEDULES']"),
        ([5], "every must be a timedelta"),
    ],
)
def test_job_schedule_is_checked_when_declared(
    clean_registry: None, value: object, message: str
) -> None:
    with pytest.raises(InvalidSchedule) as excinfo:

        @job("unit.bad_schedule", schedule=value)  # type: ignore[arg-type]
        def handler(ctx: object) -> None: ...

    assert message in str(excinfo.value)
    assert "unit.bad_schedule" not in registry


def test_load_schedules_merges_code_and_settings(clean_registry: None) -> None:
    @job("unit.coded", schedule="0 * * * *")
    def coded(ctx: object) -> None: ...

    with override_settings(
        DURABLE_JOBS={
            "SCHEDULES": {
                "b.settings": {"type": "unit.coded", "every": 60},
                "unit.coded": {"every": 60},
                "c.broken": {"cron": "nope"},
            }
        }
    ):
        schedules, errors = load_schedules()
    assert [s.name for s in schedules] == ["b.settings", "unit.coded"]
    assert schedules[1].cron == "0 * * * *"  # the @job one, not the clashing entry
    messages = sorted(str(e) for e in errors)
    assert len(messages) == 2
    assert messages[0].startswith("Schedule 'c.broken': 'nope' is not a cron expression")
    assert "already the schedule of @job handler 'unit.coded'" in messages[1]


# -- counting missed ticks for the log line ----------------------------------


def test_missed_tick_count_for_intervals_is_exact() -> None:
    every = Schedule("s", "t", every=timedelta(seconds=5))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert missed_tick_count(every, start, start) == "0"
    assert missed_tick_count(every, start, start + timedelta(seconds=5)) == "1"
    assert missed_tick_count(every, start, start + timedelta(seconds=25)) == "5"


def test_missed_tick_count_for_cron_counts_and_stops_at_the_limit() -> None:
    hourly = Schedule("s", "t", cron="0 * * * *", timezone="UTC")
    start = datetime(2026, 1, 1, 1, tzinfo=UTC)
    assert missed_tick_count(hourly, start, start + timedelta(hours=3)) == "3"
    minutely = Schedule("s", "t", cron="* * * * *", timezone="UTC")
    assert missed_tick_count(minutely, start, start + timedelta(days=7)) == (
        f"{MISSED_COUNT_LIMIT}+"
    )
