"""Cancelling a running job, without a database: the context, the attempt table, the
watchdog on a fake clock, the executor's outcome and the metric's label."""

from __future__ import annotations

import time
from typing import Any

import pytest

import django_durable_jobs
from django_durable_jobs import JobCancelled, JobContext, JobTimeout
from django_durable_jobs import metrics as metrics_module
from django_durable_jobs.context import CancelFlag
from django_durable_jobs.db.records import Transition
from django_durable_jobs.worker.attempts import State
from django_durable_jobs.worker.executor import execute

from .helpers import POLICY, Recorder, claimed, context, make_watchdog

CANCELLED_PATH = "django_durable_jobs.exceptions.JobCancelled"


def test_job_cancelled_is_exported_and_distinct_from_a_time_limit() -> None:
    assert django_durable_jobs.JobCancelled is JobCancelled
    assert "JobCancelled" in django_durable_jobs.__all__
    assert not issubclass(JobCancelled, JobTimeout)
    assert str(JobCancelled()) == "the job was cancelled while it ran"


def test_check_raises_job_cancelled_for_a_cancel_and_job_timeout_otherwise() -> None:
    requested = CancelFlag()
    ctx = context(_cancel=requested, _deadline_monotonic=time.monotonic() + 60)
    ctx.check()
    requested.request_cancel()
    assert ctx.cancelled and requested.is_set() and requested.requested
    with pytest.raises(JobCancelled):
        ctx.check()
    # Past the deadline too: the cancel is the reason that counts.
    past = context(_cancel=requested, timeout=1, _deadline_monotonic=time.monotonic() - 1)
    with pytest.raises(JobCancelled):
        past.check()
    given_up = CancelFlag()
    given_up.set()
    assert not given_up.requested
    with pytest.raises(JobTimeout):
        context(_cancel=given_up).check()


def test_a_request_tells_only_attempts_the_handler_owns_once() -> None:
    watchdog = make_watchdog()
    running, queued, other = claimed(), claimed(), claimed()
    for job in (running, queued, other):
        watchdog.attempts.claimed(job, None)
    assert watchdog.begin(running, None) is not None
    assert set(watchdog.attempts.untold()) == {running.id, queued.id, other.id}
    told = watchdog.request_cancel({running.id, queued.id})
    assert {a.job.id for a in told} == {running.id, queued.id}
    assert all(a.cancel.requested for a in told)
    assert set(watchdog.attempts.untold()) == {other.id}
    assert watchdog.request_cancel({running.id}) == []  # told once


def test_the_watchdog_ends_an_ignoring_handler_cancelled_after_the_grace_then_recycles() -> None:
    clock = [100.0]
    recorder = Recorder()
    watchdog = make_watchdog(recorder, grace=2, clock=lambda: clock[0])
    job = claimed(timeout=60)  # the time limit is far: the cancel's grace comes first
    watchdog.attempts.claimed(job, None)
    attempt = watchdog.begin(job, None)
    assert attempt is not None and attempt.deadline == 160.0
    clock[0] = 105.0
    (told,) = watchdog.request_cancel({job.id})
    assert told is attempt and attempt.deadline == 107.0 and attempt.cancel.requested
    clock[0] = 106.999
    watchdog.check()
    assert recorder.submitted == [] and attempt.state is State.RUNNING
    clock[0] = 107.0
    watchdog.check()
    (outcome,) = recorder.submitted
    assert outcome.transition is Transition.CANCEL and outcome.announce
    assert CANCELLED_PATH in outcome.error_entry_json
    assert "had not stopped 2 s after the request" in (outcome.last_error or "")
    assert attempt.state is State.TIMED_OUT and watchdog.cancelled == 1
    assert watchdog.timed_out == 0
    clock[0] = 108.999
    watchdog.check()
    assert recorder.stuck == []
    clock[0] = 109.0
    watchdog.check()
    assert recorder.stuck == [job.id]  # the same recycle as past a time limit
    assert len(recorder.submitted) == 1


def test_a_request_keeps_an_earlier_time_limit() -> None:
    clock = [100.0]
    watchdog = make_watchdog(grace=10, clock=lambda: clock[0])
    job = claimed(timeout=3)
    watchdog.attempts.claimed(job, None)
    attempt = watchdog.begin(job, None)
    assert attempt is not None
    watchdog.request_cancel({job.id})
    assert attempt.deadline == 103.0  # not pushed back to 110


def run(handler: Any, job_type: str, *, cancel_before: bool = False) -> Any:
    """Run one attempt of ``handler`` (as ``job_type``) under a watchdog; the cancel
    request arrives while it runs (or, with ``cancel_before``, before it begins)."""
    watchdog = make_watchdog()
    job = claimed(type=job_type)
    calls: list[JobContext] = []

    @django_durable_jobs.job(job_type)
    def wrapped(ctx: JobContext) -> Any:
        calls.append(ctx)
        watchdog.request_cancel({ctx.id})
        return handler(ctx)

    watchdog.attempts.claimed(job, None)
    if cancel_before:
        watchdog.request_cancel({job.id})
    return execute(job, "w1", POLICY, watchdog), calls


@pytest.mark.usefixtures("clean_registry")
@pytest.mark.parametrize(
    ("name", "handler", "detail"),
    [
        ("checks", lambda ctx: ctx.check(), "its handler stopped"),
        ("raises", lambda ctx: 1 / 0, "raised builtins.ZeroDivisionError"),
        ("returns", lambda ctx: {"done": True}, "returned after the request"),
    ],
)
def test_whatever_the_handler_does_after_the_request_the_outcome_is_cancel(
    name: str, handler: Any, detail: str
) -> None:
    outcome, calls = run(handler, f"unit.cancel.{name}")
    assert len(calls) == 1
    assert outcome.transition is Transition.CANCEL
    assert outcome.result_json == "null"
    assert detail in (outcome.last_error or "")


@pytest.mark.usefixtures("clean_registry")
def test_an_attempt_cancelled_before_it_began_never_runs_its_handler() -> None:
    outcome, calls = run(lambda ctx: None, "unit.cancel.queued", cancel_before=True)
    assert calls == []
    assert outcome.transition is Transition.CANCEL
    assert "before its handler started" in (outcome.last_error or "")


@pytest.mark.skipif(not metrics_module.ENABLED, reason="prometheus-client not installed")
def test_a_cancelled_attempt_has_its_own_result_label() -> None:
    assert metrics_module.RESULT_OF_TRANSITION[Transition.CANCEL] == "cancelled"
    assert "cancelled" in metrics_module.RESULTS
    assert Transition.RELEASE not in metrics_module.RESULT_OF_TRANSITION
