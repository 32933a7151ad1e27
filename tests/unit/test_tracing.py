"""What an attempt's span says it ended in (``executor._span_ending``), state by state.

The spans themselves, with a worker: tests/integration/test_tracing.py.
"""

from __future__ import annotations

import pytest

from django_durable_jobs.backoff import RetryPolicy
from django_durable_jobs.conf import SETTINGS
from django_durable_jobs.worker import outcomes
from django_durable_jobs.worker.attempts import Attempt, State
from django_durable_jobs.worker.executor import StopWorker, _span_ending, _span_ending_by_error
from django_durable_jobs.worker.outcomes import Failure
from tests.factories import claimed_job

TIMEOUT = "django_durable_jobs.exceptions.JobTimeout"
POLICY = RetryPolicy(0.01, 0.05, 0.1)
FAILURE = Failure("builtins.ValueError: boom", "builtins.ValueError", "Traceback...")


def attempt_in(state: State, attempt: int = 1, max_attempts: int = 3) -> Attempt:
    running = Attempt(claimed_job(attempt=attempt, max_attempts=max_attempts), None)
    running.state = state
    return running


def test_the_handlers_own_outcomes() -> None:
    running = attempt_in(State.RUNNING)
    job = running.job
    assert _span_ending(job, outcomes.complete(job, "null"), running) == ("completed", None)
    assert _span_ending(job, outcomes.after_failure(job, "w", POLICY, FAILURE), running) == (
        "retry",
        ("builtins.ValueError", "builtins.ValueError: boom"),
    )
    last = attempt_in(State.RUNNING, attempt=3)
    assert (
        _span_ending(last.job, outcomes.after_failure(last.job, "w", POLICY, FAILURE), last)[0]
        == "dead"
    )
    cancel = outcomes.cancel(job, "w", outcomes.cancelled_failure())
    assert _span_ending(job, cancel, running) == ("cancelled", None)
    released = outcomes.release(job.id, job.lease_token)
    assert _span_ending(job, released, running) == ("released", None)
    # Without a watchdog (no attempt), the outcome is the executor's.
    assert _span_ending(job, outcomes.complete(job, "null"), None) == ("completed", None)


@pytest.mark.parametrize(("attempt", "expected"), [(1, "retry"), (3, "dead")])
def test_past_the_time_limit_the_watchdogs_outcome_not_the_handlers(
    attempt: int, expected: str
) -> None:
    timed_out = attempt_in(State.TIMED_OUT, attempt=attempt)
    late = outcomes.complete(timed_out.job, "null")  # dropped by the worker
    assert _span_ending(timed_out.job, late, timed_out) == (
        expected,
        (TIMEOUT, "the attempt ran past its time limit"),
    )


def test_a_cancel_taken_at_its_grace_is_cancelled() -> None:
    timed_out = attempt_in(State.TIMED_OUT)
    timed_out.cancel_requested = 1.0
    assert _span_ending(timed_out.job, outcomes.complete(timed_out.job, "null"), timed_out) == (
        "cancelled",
        None,
    )


def test_lost_lease_and_released_attempts() -> None:
    lost = attempt_in(State.LEASE_LOST)
    outcome, failure = _span_ending(lost.job, outcomes.complete(lost.job, "null"), lost)
    assert outcome == "lease_lost" and failure is not None
    released = attempt_in(State.RELEASED)
    assert _span_ending(released.job, outcomes.complete(released.job, "null"), released) == (
        "released",
        None,
    )


def test_errors_out_of_the_executor() -> None:
    job = claimed_job(attempt=1, max_attempts=2)
    stop = StopWorker(outcomes.release(job.id, job.lease_token), KeyboardInterrupt())
    assert _span_ending_by_error(job, stop) == ("released", None)
    assert _span_ending_by_error(job, RuntimeError("bug")) == (
        "retry",
        ("builtins.RuntimeError", "bug"),
    )
    last = claimed_job(attempt=2, max_attempts=2)
    assert _span_ending_by_error(last, RuntimeError("bug"))[0] == "dead"


def test_the_tracing_setting_is_a_bool_defaulting_to_on() -> None:
    setting = SETTINGS["TRACING"]
    assert setting.default is True
    assert setting.is_valid(False) and not setting.is_valid("yes")


def test_without_an_sdk_an_attempt_with_nothing_to_pass_on_builds_no_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API installed and no tracer provider set (a project that does not trace, but
    depends on something that pulls opentelemetry-api in): no span is built per attempt,
    which cost 15 % of a no-op job's worker CPU. A job that carries a context still
    passes it on to its handler (tests/integration/test_tracing.py)."""
    from opentelemetry import trace

    from django_durable_jobs import tracing

    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    monkeypatch.setattr(tracing, "_provider_set", False)
    monkeypatch.setattr(tracing, "_no_provider_checked_at", float("-inf"))
    built: list[str] = []

    def tracer() -> trace.Tracer:
        built.append("tracer")
        return trace.NoOpTracer()

    monkeypatch.setattr(tracing, "_get_tracer", tracer)
    assert tracing.start_attempt(claimed_job(), "w-1") is None
    assert built == []
    carried = claimed_job()._replace(
        trace_context={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    )
    span = tracing.start_attempt(carried, "w-1")
    assert built == ["tracer"] and span is not None
    span.end("completed", None)
    # A provider set later is seen within NO_PROVIDER_RECHECK_SECONDS, and then for good.
    monkeypatch.setattr(trace, "get_tracer_provider", object)
    assert tracing._no_sdk()  # "none" is remembered for a moment
    monkeypatch.setattr(tracing, "_no_provider_checked_at", float("-inf"))
    assert not tracing._no_sdk()
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    assert not tracing._no_sdk()
