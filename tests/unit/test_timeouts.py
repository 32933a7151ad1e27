"""Time limits without a database: validation, the context, the watchdog's thread handling."""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import django_durable_jobs
from django_durable_jobs import InvalidJob, JobContext, JobTimeout, job
from django_durable_jobs.conf import jobs_settings
from django_durable_jobs.context import CancelFlag
from django_durable_jobs.db.records import ClaimedJob, Transition
from django_durable_jobs.registry import registry
from django_durable_jobs.validation import build_spec, validate_timeout
from django_durable_jobs.worker.attempts import AttemptTable, State
from django_durable_jobs.worker.executor import execute, timed_out
from django_durable_jobs.worker.watchdog import Watchdog, effective_timeout
from tests.factories import WAIT_SECONDS, wait_until

from .helpers import POLICY, Recorder, claimed, context, make_watchdog

# --- validation ------------------------------------------------------------------


@pytest.mark.parametrize("value", [0.5, 1, 30, timedelta(minutes=2)])
def test_valid_timeouts(value: Any) -> None:
    expected = value.total_seconds() if isinstance(value, timedelta) else float(value)
    assert validate_timeout(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "more than 0"),
        (-1, "more than 0"),
        (timedelta(0), "more than 0"),
        (math.inf, "finite"),
        (math.nan, "finite"),
        (1e12, "at most"),
        ("30", "number of seconds"),
        (True, "number of seconds"),
        (None, "number of seconds"),
    ],
)
def test_invalid_timeouts_name_the_field(value: Any, message: str) -> None:
    with pytest.raises(InvalidJob, match=message) as info:
        validate_timeout(value)
    assert info.value.field == "timeout"


def test_build_spec_keeps_only_an_explicit_timeout() -> None:
    # The handler's timeout is applied by the worker when the job runs, not stored.
    assert build_spec("tests.spin").timeout is None
    assert build_spec("tests.spin", timeout=2).timeout == 2.0
    with pytest.raises(InvalidJob, match="timeout"):
        build_spec("tests.spin", timeout=-3)


def test_job_decorator_validates_timeout() -> None:
    with pytest.raises(InvalidJob, match="timeout: must be more than 0"):
        job("unit.bad_timeout", timeout=0)
    with pytest.raises(InvalidJob, match="timeout: must be a number of seconds"):
        job("unit.bad_timeout", timeout="5")  # type: ignore[arg-type]
    assert "unit.bad_timeout" not in registry


def test_job_decorator_stores_timeout() -> None:
    @job("unit.timeboxed", timeout=timedelta(seconds=90))
    def timeboxed(ctx: JobContext) -> None:
        pass

    try:
        handler = registry.get("unit.timeboxed")
        assert handler is not None
        assert handler.timeout == 90.0
    finally:
        registry.unregister("unit.timeboxed")


def test_settings_default_to_no_limit_and_are_checked() -> None:
    assert jobs_settings.TIMEOUT_SECONDS is None
    assert jobs_settings.API_MAX_TIMEOUT_SECONDS == 3600.0
    with (
        override_settings(DURABLE_JOBS={"TIMEOUT_SECONDS": 0}),
        pytest.raises(ImproperlyConfigured, match="TIMEOUT_SECONDS"),
    ):
        _ = jobs_settings.TIMEOUT_SECONDS


def test_job_timeout_is_exported_and_carries_the_limit() -> None:
    assert django_durable_jobs.JobTimeout is JobTimeout
    assert isinstance(JobTimeout(2), django_durable_jobs.DurableJobsError)
    assert JobTimeout(2.5).timeout == 2.5
    assert "2.5 s" in str(JobTimeout(2.5))
    assert JobTimeout().timeout is None
    assert str(JobTimeout()) == "the attempt ran past its time limit"


# --- the effective limit ---------------------------------------------------------


def test_effective_timeout_prefers_the_job_then_the_handler_then_the_setting() -> None:
    assert effective_timeout(1.0, 2.0, 3.0) == 1.0
    assert effective_timeout(None, 2.0, 3.0) == 2.0
    assert effective_timeout(None, None, 3) == 3.0
    assert effective_timeout(None, None, None) is None


def test_the_handlers_timeout_reaches_the_context() -> None:
    # tests.spin declares timeout=1; a job's own timeout overrides it.
    seen: list[JobContext] = []
    jobs = [claimed(type="unit.sees_context"), claimed(timeout=0.5, type="unit.sees_context")]
    watchdog = make_watchdog()

    @job("unit.sees_context", timeout=7)
    def sees_context(ctx: JobContext) -> None:
        seen.append(ctx)

    try:
        for claimed_job in jobs:
            watchdog.attempts.claimed(claimed_job, None)
            execute(claimed_job, "w", POLICY, watchdog)
            watchdog.attempts.returned(claimed_job.lease_token)
    finally:
        registry.unregister("unit.sees_context")
    assert [ctx.timeout for ctx in seen] == [7.0, 0.5]
    ctx = seen[0]
    assert ctx.deadline is not None and ctx.deadline.tzinfo is not None
    left = (ctx.deadline - datetime.now(dt_timezone.utc)).total_seconds()
    assert 0 < left < 7.5  # a little slack: the wall clock may be stepped (NTP)


# --- the context -----------------------------------------------------------------


def test_a_context_without_a_limit_is_never_cancelled_by_time() -> None:
    ctx = context()
    assert ctx.deadline is None and ctx.timeout is None and ctx.remaining is None
    assert ctx.cancelled is False
    ctx.check()


def test_the_context_is_cancelled_past_its_deadline() -> None:
    # No sleeping to the deadline: a test process paused by a busy host
    # would find the first context past its deadline too.
    ahead = context(timeout=5, _deadline_monotonic=time.monotonic() + 5)
    assert not ahead.cancelled
    assert ahead.remaining is not None and 0 < ahead.remaining <= 5
    ahead.check()
    ctx = context(timeout=0.05, _deadline_monotonic=time.monotonic() - 0.001)
    assert ctx.cancelled
    assert ctx.remaining == 0.0
    with pytest.raises(JobTimeout, match=r"0\.05 s"):
        ctx.check()


def test_the_context_is_cancelled_when_the_worker_gives_up() -> None:
    flag = CancelFlag()
    ctx = context(_cancel=flag, _deadline_monotonic=time.monotonic() + 60)
    assert not ctx.cancelled
    flag.set()
    assert ctx.cancelled
    with pytest.raises(JobTimeout):
        ctx.check()


def test_the_private_fields_stay_out_of_equality_and_repr() -> None:
    job_id = uuid.uuid4()
    a = context(id=job_id, _cancel=CancelFlag())
    b = context(id=job_id)
    assert a == b
    assert "_cancel" not in repr(a)


# --- the failed attempt ----------------------------------------------------------


def test_timed_out_is_a_failed_attempt_with_a_job_timeout_error() -> None:
    job = claimed(timeout=2)
    outcome = timed_out(job, "w1", POLICY, 2.0, 2.1, stack='  File "x.py", line 1, in spin\n')
    assert outcome.transition is Transition.RETRY
    assert outcome.delay_us is not None and outcome.delay_us > 0
    entry = json.loads(outcome.error_entry_json)
    assert entry["exception"] == "django_durable_jobs.exceptions.JobTimeout"
    assert entry["error"].endswith("ran past its time limit of 2 s")
    assert "in spin" in entry["traceback"]
    assert entry["attempt"] == 1 and entry["worker"] == "w1"


def test_timed_out_on_the_last_attempt_is_dead() -> None:
    outcome = timed_out(claimed(attempt=3), "w1", POLICY, 1.0, 1.0)
    assert outcome.transition is Transition.DEAD and outcome.announce
    assert "JobTimeout" in (outcome.last_error or "")


# --- the watchdog ----------------------------------------------------------------


def run_in_thread(watchdog: Watchdog, job: ClaimedJob, body: Any) -> dict[str, Any]:
    """Run ``body(attempt)`` as a handler thread would: begin, body, end."""
    state: dict[str, Any] = {"done": threading.Event()}

    watchdog.attempts.claimed(job, None)
    started = threading.Event()

    def target() -> None:
        attempt = watchdog.begin(job, None)
        state["attempt"] = attempt
        started.set()
        try:
            state["result"] = body(attempt)
        except BaseException as exc:  # nothing may reach the thread from outside
            state["raised"] = exc
        finally:
            watchdog.attempts.returned(job.lease_token)
            state["done"].set()

    state["thread"] = threading.Thread(target=target, daemon=True)
    state["thread"].start()
    started.wait(10)
    return state


def until_cancelled(attempt: Any) -> str:
    """A cooperative handler body: polls its cancel flag, as ``ctx.cancelled`` does."""
    while not attempt.cancel.is_set():
        time.sleep(0.005)
    return "stopped"


class Spinner:
    """A handler body spinning in pure Python, ignoring ``ctx.cancelled``, until released."""

    def __init__(self) -> None:
        self.released = False
        self.spins = 0

    def __call__(self, attempt: Any) -> int:
        while not self.released:
            self.spins += 1
        return self.spins


def test_a_spinner_is_failed_at_its_deadline_and_its_thread_left_alone() -> None:
    recorder = Recorder()
    watchdog = make_watchdog(recorder, grace=30)
    watchdog.start()
    spinner = Spinner()
    try:
        job = claimed(timeout=0.2)
        started = time.monotonic()
        state = run_in_thread(watchdog, job, spinner)
        wait_until(lambda: recorder.submitted, WAIT_SECONDS, "the failed attempt")
        assert time.monotonic() - started >= 0.2
        (outcome,) = recorder.submitted
        assert outcome.transition is Transition.RETRY and outcome.job_id == job.id
        entry = json.loads(outcome.error_entry_json)
        assert entry["exception"] == "django_durable_jobs.exceptions.JobTimeout"
        assert "in __call__" in entry["traceback"]  # where the spinner was at the deadline
        attempt = state["attempt"]
        assert attempt.state is State.TIMED_OUT and attempt.cancel.is_set()
        # Nothing is raised in the thread: it keeps spinning, within the grace.
        spins = spinner.spins
        time.sleep(0.5)
        assert not state["done"].is_set() and spinner.spins > spins
        assert recorder.stuck == [] and watchdog.stuck() == []
        spinner.released = True
        assert state["done"].wait(10)
        assert "raised" not in state and state["result"] == spinner.spins
        assert attempt.state is State.TIMED_OUT and not attempt.thread_running
        assert watchdog.deadlines() == {}
        assert len(recorder.submitted) == 1
    finally:
        spinner.released = True
        watchdog.stop()


def test_a_cooperative_handler_sees_cancelled_and_returns_within_the_grace() -> None:
    clock = [100.0]
    recorder = Recorder()
    watchdog = make_watchdog(recorder, grace=1.5, clock=lambda: clock[0])
    state = run_in_thread(watchdog, claimed(timeout=0.1), until_cancelled)
    clock[0] += 0.1  # the deadline
    watchdog.check()
    assert state["done"].wait(10)
    assert state["result"] == "stopped"
    assert [o.transition for o in recorder.submitted] == [Transition.RETRY]
    clock[0] += 10  # long past the grace: a thread that returned is not stuck
    watchdog.check()
    assert recorder.stuck == [] and watchdog.stuck() == []


@pytest.mark.parametrize("blocked_in", ["python", "c"])
def test_a_thread_not_back_within_the_grace_is_reported_stuck_once(blocked_in: str) -> None:
    recorder = Recorder()
    watchdog = make_watchdog(recorder, grace=0.4)
    watchdog.start()
    spinner = Spinner()
    slept = threading.Event()
    body = spinner if blocked_in == "python" else lambda attempt: slept.wait(30)
    try:
        job = claimed(timeout=0.2)
        started = time.monotonic()
        state = run_in_thread(watchdog, job, body)
        assert recorder.stuck_event.wait(10), "the busy thread was not reported"
        # The grace counts from the deadline.
        assert time.monotonic() - started >= 0.2 + 0.4
        assert recorder.stuck == [job.id]
        assert [a.job.id for a in watchdog.stuck()] == [job.id]
        assert not state["done"].is_set()
        assert len(recorder.submitted) == 1  # the attempt failed at the deadline, once
        watchdog.check()  # look again, as the watchdog's thread keeps doing
        watchdog.check()
        assert recorder.stuck == [job.id]  # reported once
        # When the thread returns at last, it goes on; the attempt is no longer stuck.
        spinner.released = True
        slept.set()
        assert state["done"].wait(10)
        assert "raised" not in state
        assert watchdog.stuck() == []
    finally:
        spinner.released = True
        slept.set()
        watchdog.stop()


def test_an_attempt_the_worker_no_longer_owns_is_cancelled_but_not_recorded() -> None:
    clock = [100.0]
    recorder = Recorder()
    watchdog = make_watchdog(recorder, grace=5, clock=lambda: clock[0])
    job = claimed(timeout=1)
    watchdog.attempts.claimed(job, None)
    attempt = watchdog.begin(job, None)
    assert attempt is not None
    (lost,) = watchdog.attempts.lose_leases({job.id})  # say, its lease was reaped
    assert lost is attempt and attempt.cancel.is_set()
    clock[0] += 1.5
    watchdog.check()
    assert recorder.submitted == [] and watchdog.timed_out == 0
    assert attempt.state is State.LEASE_LOST
    # Its thread still counts towards a recycle, from its deadline on.
    clock[0] += 5
    watchdog.check()
    assert recorder.stuck == [job.id]


def test_the_watchdog_acts_on_its_clock_not_the_wall_clock() -> None:
    clock = [100.0]
    recorder = Recorder()
    watchdog = make_watchdog(recorder, grace=2, clock=lambda: clock[0])
    job = claimed(timeout=10)
    watchdog.attempts.claimed(job, None)
    attempt = watchdog.begin(job, None)
    assert attempt is not None and attempt.deadline == 110.0
    clock[0] = 109.999
    watchdog.check()
    assert recorder.submitted == [] and attempt.state is State.RUNNING
    clock[0] = 110.0
    watchdog.check()
    assert [o.transition for o in recorder.submitted] == [Transition.RETRY]
    assert attempt.state is State.TIMED_OUT and attempt.cancel.is_set()
    watchdog.check()  # once only
    assert len(recorder.submitted) == 1
    clock[0] = 111.999
    watchdog.check()
    assert recorder.stuck == []
    clock[0] = 112.0
    watchdog.check()
    assert recorder.stuck == [job.id] and watchdog.stuck() == [attempt]
    watchdog.check()
    assert recorder.stuck == [job.id]  # reported once
    watchdog.attempts.returned(job.lease_token)
    assert watchdog.stuck() == []


def test_a_handler_that_returns_in_time_is_left_alone() -> None:
    clock = [100.0]
    recorder = Recorder()
    watchdog = make_watchdog(recorder, clock=lambda: clock[0])
    job = claimed(timeout=2)
    watchdog.attempts.claimed(job, None)
    watchdog.begin(job, None)
    clock[0] += 1.9
    watchdog.attempts.returned(job.lease_token)
    clock[0] += 10
    watchdog.check()
    assert recorder.submitted == [] and recorder.stuck == []


def test_returned_forgets_the_deadline_and_cancels_the_context() -> None:
    watchdog = make_watchdog()
    job = claimed(timeout=60)
    watchdog.attempts.claimed(job, None)
    attempt = watchdog.begin(job, None)
    assert attempt is not None
    assert watchdog.deadlines() == {job.lease_token: attempt.deadline}
    watchdog.attempts.returned(job.lease_token)
    assert attempt.state is State.FINISHED and attempt.cancel.is_set()
    assert watchdog.deadlines() == {}
    assert watchdog.attempts.returned(job.lease_token) is attempt  # again: nothing changes
    assert attempt.state is State.FINISHED


def test_an_attempt_released_before_its_thread_starts_is_not_run() -> None:
    watchdog = make_watchdog()
    job = claimed()
    watchdog.attempts.claimed(job, None)
    (released,) = watchdog.attempts.release_all()
    assert released.job is job and released.cancel.is_set()
    assert watchdog.begin(job, None) is None


def test_a_lease_lost_while_queued_still_gives_its_slot_back() -> None:
    """The job waits in its group's queue; the heartbeat finds its lease gone meanwhile."""

    class Group:
        running = 1

        def finished(self) -> None:
            self.running -= 1

    group = Group()
    table = AttemptTable()
    job = claimed()
    table.claimed(job, group)  # type: ignore[arg-type]
    (lost,) = table.lose_leases({job.id})
    assert lost.state is State.LEASE_LOST
    assert table.leases_to_extend() == {}
    # The handler thread takes the job from the queue at last: not run, slot back.
    assert table.begin(job.lease_token, None) is None
    assert table.returned(job.lease_token) is lost
    assert group.running == 0
    assert len(table) == 0
