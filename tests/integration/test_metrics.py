"""Prometheus metrics: scrape the web process' ``/metrics`` and watch values change.

Counters are process-wide, so each test uses a queue of its own and
compares before and after.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs import enqueue, enqueue_many, metrics
from django_durable_jobs.models import Job, JobStatus, ScheduleState
from django_durable_jobs.schedules import find_schedule, load_schedules
from django_durable_jobs.worker import Worker
from django_durable_jobs.worker.scheduler import Scheduler
from tests.factories import (
    RunningWorker,
    claim_directly,
    expire,
    handler_threads,
    join_handler_threads,
    make_job,
    queue_connection,
    reaper,
    wait_until,
)
from tests.factories import worker_config as config
from tests.testapp.jobs import gate

from .helpers import drain_until_settled, scrape, value

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_backoff")]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def queue() -> str:
    return f"m{uuid.uuid4().hex[:10]}"


@pytest.fixture
def fresh_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read the queue depth on every scrape (no cache), for exact assertions."""
    assert metrics._collector is not None
    monkeypatch.setattr(metrics._collector, "_ttl", 0.0)


def test_enqueued_counts_new_jobs_only(queue: str) -> None:
    before = scrape()
    enqueue("tests.record", queue=queue, idempotency_key=f"{queue}-a")
    enqueue("tests.record", queue=queue, idempotency_key=f"{queue}-a")  # a replay
    enqueue_many(
        [
            {"type": "tests.record", "queue": queue},
            {"type": "tests.record", "queue": queue, "idempotency_key": f"{queue}-a"},
        ]
    )
    after = scrape()
    name = "durable_jobs_enqueued_total"
    labels = {"queue": queue, "type": "tests.record"}
    assert value(after, name, **labels) - value(before, name, **labels) == 2


def test_worker_counts_each_attempt_once_and_in_flight_returns_to_zero(queue: str) -> None:
    enqueue("tests.record", queue=queue)
    enqueue("tests.fail_until", {"succeed_on": 2}, queue=queue)
    enqueue("tests.discard", queue=queue)
    drain_until_settled(queues=frozenset({queue}))
    s = scrape()
    processed = "durable_jobs_processed_total"
    assert value(s, processed, queue=queue, type="tests.record", result="completed") == 1
    assert value(s, processed, queue=queue, type="tests.fail_until", result="failed") == 1
    assert value(s, processed, queue=queue, type="tests.fail_until", result="completed") == 1
    assert value(s, processed, queue=queue, type="tests.discard", result="dead") == 1
    assert value(s, "durable_jobs_in_flight", queue=queue) == 0
    duration = "durable_jobs_processing_duration_seconds_count"
    assert value(s, duration, queue=queue, type="tests.fail_until") == 2
    assert value(s, "durable_jobs_wait_seconds_count", queue=queue) == 4


def test_a_handler_exiting_leaves_nothing_in_flight_and_counts_no_attempt(queue: str) -> None:
    enqueue("tests.exit", queue=queue)
    assert Worker(config(burst=False, queues=frozenset({queue}))).run() == 0
    s = scrape()
    assert value(s, "durable_jobs_in_flight", queue=queue) == 0
    for result in metrics.RESULTS:
        assert (
            value(s, "durable_jobs_processed_total", queue=queue, type="tests.exit", result=result)
            == 0
        )


def test_shutdown_release_takes_the_job_out_of_flight(queue: str) -> None:
    # Long enough that the scrapes catch it running on a loaded machine (a scrape
    # reads the database); the stop releases it at once (no grace period).
    enqueue("tests.record", {"sleep": 5.0}, queue=queue)
    others = handler_threads()
    running = RunningWorker(config(burst=False, grace_period=0.0, queues=frozenset({queue})))
    try:
        wait_until(lambda: value(scrape(), "durable_jobs_in_flight", queue=queue) == 1)
    finally:
        running.stop()
    assert value(scrape(), "durable_jobs_in_flight", queue=queue) == 0
    # The handler returns after the release; once its thread has exited,
    # whatever it would count is counted: still nothing.
    join_handler_threads(besides=others)
    s = scrape()
    assert value(s, "durable_jobs_in_flight", queue=queue) == 0
    assert (
        value(
            s, "durable_jobs_processed_total", queue=queue, type="tests.record", result="completed"
        )
        == 0
    )


def test_reaped_leases_are_counted() -> None:
    before = value(scrape(), "durable_jobs_reaped_total")
    enqueue("tests.record")
    expire(claim_directly("gone-worker").id)
    assert reaper().reap() == 1
    assert value(scrape(), "durable_jobs_reaped_total") - before == 1


def test_worker_slots_is_the_concurrency_while_running(queue: str) -> None:
    running = RunningWorker(config(burst=False, concurrency=3, queues=frozenset({queue})))
    try:
        wait_until(lambda: value(scrape(), "durable_jobs_worker_slots") == 3)
    finally:
        running.stop()
    assert value(scrape(), "durable_jobs_worker_slots") == 0


@pytest.mark.usefixtures("fresh_depth")
def test_queue_depth_and_oldest_pending_age_are_read_at_scrape_time(queue: str) -> None:
    assert value(scrape(), "durable_jobs_queue_depth", queue=queue, status="pending") == 0
    enqueue_many([{"type": "tests.record", "queue": queue} for _ in range(3)])
    s = scrape()
    assert value(s, "durable_jobs_queue_depth", queue=queue, status="pending") == 3
    assert (
        "durable_jobs_oldest_pending_age_seconds",
        frozenset({("queue", queue)}),
    ) in s
    enqueue("tests.discard", queue=queue)
    drain_until_settled(queues=frozenset({queue}))
    s = scrape()
    assert value(s, "durable_jobs_queue_depth", queue=queue, status="pending") == 0
    assert value(s, "durable_jobs_queue_depth", queue=queue, status="dead") == 1


def test_scrapes_within_the_cache_window_query_once() -> None:
    collector = metrics.QueueDepthCollector(ttl=60.0)
    with CaptureQueriesContext(queue_connection) as queries:
        list(collector.collect())
        list(collector.collect())
    # One reading: the depth's statement and the suspended jobs' one.
    assert len([q for q in queries if "durable_jobs_job" in q["sql"]]) == 2


@pytest.mark.usefixtures("fresh_depth")
def test_suspended_jobs_by_reason_are_read_at_scrape_time(queue: str) -> None:
    later = "2030-01-01T00:00:00+00:00"
    for _ in range(2):
        make_job(
            queue=queue,
            waiting_for={"until": later},
            available_at=datetime(2030, 1, 1, tzinfo=dt_timezone.utc),
        )
    # Woken by time (due, its column not cleared yet): runnable, not suspended.
    make_job(queue=queue, waiting_for={"until": "2026-01-01T00:00:00+00:00"})
    make_job(queue=queue, status=JobStatus.WAITING, waiting_for={"event": "k"})
    make_job(queue=queue, status=JobStatus.WAITING, waiting_for={"job": str(uuid.uuid4())})
    # Not suspended: running (its waiting_for is stale), or plain pending.
    make_job(queue=queue, status=JobStatus.RUNNING, waiting_for={"until": later})
    make_job(queue=queue)
    s = scrape()
    assert value(s, "durable_jobs_suspended", queue=queue, reason="sleep") == 2
    assert value(s, "durable_jobs_suspended", queue=queue, reason="event") == 1
    assert value(s, "durable_jobs_suspended", queue=queue, reason="child") == 1


# -- schedules: last and next tick -------------------------------------------------

LAST_TICK = "durable_jobs_schedule_last_tick_timestamp_seconds"
NEXT_TICK = "durable_jobs_schedule_next_tick_timestamp_seconds"
SCHEDULES = {
    "tests.m_minutely": {"type": "tests.record", "every": 60},
    "tests.m_weekdays": {"type": "tests.record", "cron": "0 8 * * MON-FRI", "timezone": "UTC"},
    "tests.m_off": {"type": "tests.record", "every": 60, "enabled": False},
}


def schedule_samples(collector: metrics.ScheduleCollector) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels["schedule"]): sample.value
        for family in collector.collect()
        for sample in family.samples
    }


def tick_minutely(now: datetime | None = None) -> ScheduleState:
    """What a worker's scheduler does: enqueue the due tick and record it."""
    schedules = [s for s in load_schedules()[0] if s.name == "tests.m_minutely"]
    assert Scheduler(queue_connection.alias, "metrics-test", schedules).run_once(now)
    return ScheduleState.objects.get(name="tests.m_minutely")


@override_settings(DURABLE_JOBS={"SCHEDULES": SCHEDULES})
def test_schedule_ticks_are_the_tables_and_absent_before_the_first_tick() -> None:
    collector = metrics.ScheduleCollector(ttl=0.0)
    minutely, weekdays = find_schedule("tests.m_minutely"), find_schedule("tests.m_weekdays")
    assert minutely is not None and weekdays is not None
    before = timezone.now()
    s = schedule_samples(collector)
    after = timezone.now()
    # No worker has ticked anything: no last tick; the next tick is the next from now.
    assert set(s) == {(NEXT_TICK, "tests.m_minutely"), (NEXT_TICK, "tests.m_weekdays")}
    for schedule in (minutely, weekdays):
        expected = {schedule.next_tick(moment).timestamp() for moment in (before, after)}
        assert s[(NEXT_TICK, schedule.name)] in expected

    state = tick_minutely()
    s = schedule_samples(collector)
    assert state.last_tick is not None
    assert s[(LAST_TICK, "tests.m_minutely")] == state.last_tick.timestamp()
    assert s[(NEXT_TICK, "tests.m_minutely")] == state.last_tick.timestamp() + 60
    assert (LAST_TICK, "tests.m_weekdays") not in s  # still never ticked
    assert not any(name == "tests.m_off" for _, name in s)  # disabled: not exported


@override_settings(DURABLE_JOBS={"SCHEDULES": SCHEDULES})
def test_schedule_ticks_are_on_the_web_metrics_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    assert metrics._schedule_collector is not None
    monkeypatch.setattr(metrics._schedule_collector, "_ttl", 0.0)
    assert (LAST_TICK, frozenset({("schedule", "tests.m_minutely")})) not in scrape()
    state = tick_minutely()
    assert state.last_tick is not None
    s = scrape()
    assert value(s, LAST_TICK, schedule="tests.m_minutely") == state.last_tick.timestamp()
    assert value(s, NEXT_TICK, schedule="tests.m_minutely") == state.last_tick.timestamp() + 60


def stalled_alert(samples: dict[tuple[str, str], float], name: str, now: float) -> bool:
    """The documented alert: ``time() - last > 2 * (next - last)``."""
    last, following = samples[(LAST_TICK, name)], samples[(NEXT_TICK, name)]
    return now - last > 2 * (following - last)


@override_settings(DURABLE_JOBS={"SCHEDULES": SCHEDULES})
def test_a_schedule_that_stopped_ticking_fires_the_alert_and_a_running_one_does_not() -> None:
    collector = metrics.ScheduleCollector(ttl=0.0)
    tick_minutely()
    assert not stalled_alert(schedule_samples(collector), "tests.m_minutely", time.time())
    # The workers stopped: the last tick was ten minutes ago. The next tick
    # stays the one after it, so next - last is still one period.
    stalled = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=10)
    ScheduleState.objects.filter(name="tests.m_minutely").update(last_tick=stalled)
    # Weekdays at 08:00: the tick after a Friday's is the Monday's.
    friday = datetime(2020, 11, 27, 8, tzinfo=dt_timezone.utc)
    ScheduleState.objects.create(
        name="tests.m_weekdays", timing="cron 0 8 * * MON-FRI", first_seen=friday,
        last_tick=friday,
    )  # fmt: skip
    s = schedule_samples(collector)
    assert s[(NEXT_TICK, "tests.m_minutely")] - s[(LAST_TICK, "tests.m_minutely")] == 60
    assert s[(NEXT_TICK, "tests.m_weekdays")] == (friday + timedelta(days=3)).timestamp()
    assert stalled_alert(s, "tests.m_minutely", time.time())
    assert stalled_alert(s, "tests.m_weekdays", time.time())
    # Two days after that Friday (Sunday) is not two periods (three days): no alert.
    assert not stalled_alert(s, "tests.m_weekdays", (friday + timedelta(days=2)).timestamp())


def test_schedule_ticks_are_one_cached_query_and_none_without_schedules() -> None:
    with override_settings(DURABLE_JOBS={"SCHEDULES": SCHEDULES}):
        collector = metrics.ScheduleCollector(ttl=60.0)
        with CaptureQueriesContext(queue_connection) as queries:
            list(collector.collect())
            list(collector.collect())
        assert len([q for q in queries if "durable_jobs_schedule" in q["sql"]]) == 1
    with CaptureQueriesContext(queue_connection) as queries:
        assert schedule_samples(metrics.ScheduleCollector(ttl=0.0)) == {}
    assert len(queries) == 0


@override_settings(DURABLE_JOBS={"SCHEDULES": SCHEDULES})
def test_schedule_ticks_are_left_out_when_the_database_does_not_answer(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("the database is down")

    monkeypatch.setattr(queue_connection, "cursor", refuse)
    assert schedule_samples(metrics.ScheduleCollector(ttl=0.0)) == {}
    assert "Schedule ticks for metrics unavailable: the database is down" in caplog.text


def run_python(code: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_without_prometheus_client_metrics_are_no_ops() -> None:
    out = run_python(
        "import sys; sys.modules['prometheus_client'] = None\n"
        "from django_durable_jobs import metrics\n"
        "metrics.record_enqueued('q', 't'); metrics.record_reaped(2)\n"
        "metrics.set_worker_slots(4); metrics.register_queue_depth_collector()\n"
        "metrics.register_schedule_collector()\n"
        "print(metrics.ENABLED)\n"
    )
    assert out.strip() == "False"


def test_multiprocess_mode_adds_up_the_processes(tmp_path: Path) -> None:
    code = (
        "from django_durable_jobs import metrics\n"
        "for _ in range(3): metrics.record_enqueued('mp', 'x')\n"
    )
    for _ in range(2):
        run_python(code, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    out = run_python(
        "from prometheus_client import CollectorRegistry, generate_latest, multiprocess\n"
        "r = CollectorRegistry(); multiprocess.MultiProcessCollector(r)\n"
        "print(generate_latest(r).decode())\n",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
    )
    assert 'durable_jobs_enqueued_total{queue="mp",type="x"} 6.0' in out


def test_an_outcome_that_cannot_be_written_is_counted_once_and_as_unrecorded(
    queue: str,
) -> None:
    # The handler runs until the gate opens: the takeover below lands while it
    # runs, however slow the machine (a 3 s sleep was once over before it).
    name = f"takeover-{uuid.uuid4().hex[:6]}"
    job = enqueue("tests.gated", {"gate": name}, queue=queue).job
    before = value(scrape(), "durable_jobs_outcomes_unrecorded_total")
    running = RunningWorker(config(burst=False, lease_seconds=30.0, queues=frozenset({queue})))
    worker = running.worker
    try:
        wait_until(lambda: value(scrape(), "durable_jobs_in_flight", queue=queue) == 1)
        # Another worker took the job over meanwhile: this worker's write is fenced out.
        taken_over = Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING, completed_at=None)
        assert taken_over.update(lease_token=uuid.uuid4()) == 1
        gate(name).set()
        processed = "durable_jobs_processed_total"
        labels = {"queue": queue, "type": "tests.gated", "result": "completed"}
        wait_until(lambda: value(scrape(), processed, **labels) == 1)
        assert worker.completer.flush(10)
    finally:
        gate(name).set()
        running.stop()
    s = scrape()
    assert value(s, processed, **labels) == 1
    assert value(s, "durable_jobs_outcomes_unrecorded_total") - before == 1
    assert value(s, "durable_jobs_in_flight", queue=queue) == 0
    assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING
