"""Durable steps without a database: names, the retry policy, the attempt table's
``suspended`` state, and the refusal outside a worker."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest

from django_durable_jobs import StepRetry, Suspended
from django_durable_jobs.steps import StepRuntime
from django_durable_jobs.worker.attempts import AttemptTable, State

from .helpers import claimed, context


def runtime() -> StepRuntime:
    return StepRuntime(
        job_id=uuid.uuid4(),
        type="unit.t",
        queue="default",
        attempt=1,
        token=uuid.uuid4(),
        lease_seconds=30.0,
        using="default",
    )


def test_a_repeated_name_counts_its_uses_and_others_do_not_shift() -> None:
    steps = runtime()
    assert [steps.occurrence(n) for n in ("a", "b", "a", "a", "b")] == [
        "a",
        "b",
        "a#2",
        "a#3",
        "b#2",
    ]


@pytest.mark.parametrize("name", ["", "  ", "a#2", 3])
def test_a_bad_step_name_is_refused(name: object) -> None:
    with pytest.raises(ValueError, match="name"):
        runtime().occurrence(name)  # type: ignore[arg-type]


def test_step_retry_waits_grow_to_their_cap() -> None:
    policy = StepRetry(attempts=5, delay=1, backoff=3, max_delay=5)
    assert [policy.wait_before(n) for n in (1, 2, 3)] == [1.0, 3.0, 5.0]
    assert policy.retries(ValueError(), 4)
    assert not policy.retries(ValueError(), 5)
    assert not policy.retries(KeyboardInterrupt(), 1)
    assert not StepRetry(on=(KeyError,)).retries(ValueError(), 1)


@pytest.mark.parametrize(
    "kwargs", [{"attempts": 0}, {"delay": -1}, {"backoff": 0.5}, {"attempts": True}]
)
def test_a_bad_step_retry_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        StepRetry(**kwargs)  # type: ignore[arg-type]


def test_suspended_is_not_an_exception() -> None:
    assert not issubclass(Suspended, Exception)


def test_steps_need_a_worker() -> None:
    ctx = context()
    with pytest.raises(RuntimeError, match="run by a worker"):
        ctx.step("a", lambda: 1)


def test_a_suspended_attempt_leaves_the_table_without_an_outcome() -> None:
    table = AttemptTable()
    job = claimed()
    table.claimed(job, None)
    attempt = table.begin(job.lease_token, None)
    assert attempt is not None
    attempt.suspended = "sleep"
    attempt.wakes_at = datetime.now(dt_timezone.utc) + timedelta(seconds=5)
    returned = table.returned(job.lease_token)
    assert returned is attempt and returned.state is State.SUSPENDED
    # Nothing to write, no lease to extend, no slot held: a burst need not wait.
    assert len(table) == 0
    assert table.leases_to_extend() == {}
    assert not table.busy() and not table.outcomes_unwritten()
