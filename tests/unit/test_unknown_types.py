"""The rule for a job whose type the worker has no handler for, and its rate-limited warning."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from django_durable_jobs.db.records import Transition
from django_durable_jobs.worker import unknown_types
from tests.factories import claimed_job

HOUR = 3600.0


def job_aged(seconds: float | None):  # type: ignore[no-untyped-def]
    job = claimed_job(type="deploy.next")
    created = None if seconds is None else job.started_at - timedelta(seconds=seconds)
    return job._replace(created_at=created)


@pytest.mark.parametrize("age", [0.0, 60.0, HOUR - 1, None])
def test_a_job_younger_than_the_wait_is_given_back_after_a_delay(age: float | None) -> None:
    job = job_aged(age)
    outcome = unknown_types.outcome(job, "w1", now=job.started_at, dead_after=HOUR)
    assert outcome.transition is Transition.RELEASE
    assert outcome.delay_us == unknown_types.GIVE_BACK_DELAY_SECONDS * 1_000_000
    assert outcome.lease_token == job.lease_token
    assert (outcome.last_error, outcome.error_entry_json) == (None, "null")  # nothing counted


@pytest.mark.parametrize("age", [HOUR, 2 * HOUR])
def test_a_job_as_old_as_the_wait_goes_dead_naming_the_missing_handler(age: float) -> None:
    job = job_aged(age)
    outcome = unknown_types.outcome(job, "w1", now=job.started_at, dead_after=HOUR)
    assert outcome.transition is Transition.DEAD
    assert outcome.last_error is not None
    assert outcome.last_error.startswith(
        "No handler is registered for job type 'deploy.next' in worker w1, nor in any worker "
        "that claimed it in the 1 h since it was enqueued"
    )
    assert unknown_types.EXCEPTION in outcome.error_entry_json


def test_a_wait_of_zero_is_dead_at_once_even_without_a_creation_time() -> None:
    job = job_aged(None)
    outcome = unknown_types.outcome(job, "w1", now=job.started_at, dead_after=0)
    assert outcome.transition is Transition.DEAD
    assert outcome.last_error is not None and "nor in any worker" not in outcome.last_error


def test_the_warning_is_logged_once_per_type_and_period_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    warnings = unknown_types.Warnings(every=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.worker"):
        for _ in range(3):
            warnings.given_back(job_aged(1), "w1", HOUR)
        warnings.given_back(claimed_job(type="other.type"), "w1", HOUR)
        now[0] = 61.0
        warnings.given_back(job_aged(1), "w1", HOUR)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "deploy.next" in lines[0] and "more job(s)" not in lines[0]
    assert "other.type" in lines[1]
    assert "deploy.next" in lines[2] and "(2 more job(s) of this type" in lines[2]
