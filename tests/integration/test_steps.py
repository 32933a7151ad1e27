"""Durable steps run by in-process workers: replays, atomic steps, fencing, sleeps,
event waits and child jobs (handlers: tests/testapp/step_jobs.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from django_durable_jobs import db, emit_event, enqueue, operations
from django_durable_jobs.models import (
    DependencyKind,
    EventWaiter,
    Job,
    JobDependency,
    JobStatus,
    JobStep,
)
from tests import queue_database
from tests.factories import burst as burst_worker
from tests.factories import run_worker_until
from tests.testapp.models import Execution, StepCall
from tests.testapp.step_jobs import seen

pytestmark = pytest.mark.django_db(transaction=True)


def burst(**overrides: Any) -> None:
    """Burst workers until no job is left runnable now or in a moment (a retry's backoff).

    One burst worker may exit while a retry it wrote is a few milliseconds from
    due; a job suspended for longer (a sleep of an hour) is left pending.
    """
    for _ in range(100):
        burst_worker(**overrides)
        soon = timezone.now() + timedelta(seconds=1)
        if not Job.objects.filter(status=JobStatus.PENDING, available_at__lte=soon).exists():
            return
    raise AssertionError(list(Job.objects.values("type", "status", "available_at")))


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def calls(job: Job, name: str | None = None) -> list[tuple[str, int]]:
    rows = StepCall.objects.filter(job_id=job.pk).order_by("id")
    if name is not None:
        rows = rows.filter(name=name)
    return list(rows.values_list("name", "attempt"))


def steps(job: Job) -> dict[str, JobStep]:
    return {step.name: step for step in JobStep.objects.filter(job_id=job.pk)}


def fall_due(job: Job) -> None:
    """Time passes for a suspended job: its sleep's end (or wait's deadline) is now past."""
    past = timezone.now() - timedelta(seconds=1)
    JobStep.objects.filter(job_id=job.pk, wake_at__isnull=False).update(wake_at=past)
    Job.objects.filter(pk=job.pk, status=JobStatus.PENDING).update(available_at=past)


# -- steps ------------------------------------------------------------------------


def test_a_retry_replays_the_finished_steps_and_runs_the_rest(fast_backoff: None) -> None:
    job = enqueue("tests.steps.three", {"fail_after": "b"}).job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED
    assert done.attempts == 2
    # a and b ran once (attempt 1), c once (attempt 2); the results are the records'.
    assert calls(job) == [("a", 1), ("b", 1), ("c", 2)]
    assert done.result == ["a-1", "b-1", "c-2"]
    records = steps(job)
    assert {name: (s.status, s.attempt) for name, s in records.items()} == {
        "a": ("completed", 1),
        "b": ("completed", 1),
        "c": ("completed", 2),
    }
    assert [s.name for s in sorted(records.values(), key=lambda s: s.position)] == ["a", "b", "c"]
    assert records["a"].result_bytes == len('"a-1"')


def test_a_name_repeated_in_a_loop_counts_its_uses(fast_backoff: None) -> None:
    job = enqueue("tests.steps.loop").job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED
    assert done.result == [0, 10, 20]
    assert set(steps(job)) == {"item", "item#2", "item#3"}
    assert calls(job) == [("item0", 1), ("item1", 1), ("item2", 1)]


def test_gathered_async_steps_replay_by_name(fast_backoff: None) -> None:
    job = enqueue("tests.steps.gather").job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED
    assert done.result == [1, 2]
    assert sorted(calls(job)) == [("x", 1), ("y", 1)]
    assert {name: s.result for name, s in steps(job).items()} == {"x": 1, "y": 2}


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        ({}, "step 'odd': its result is not JSON"),
        ({"big": True}, "more than STEP_RESULT_MAX_BYTES"),
    ],
)
def test_a_result_not_json_or_too_big_fails_naming_the_step(
    payload: dict[str, Any], words: str, settings: Any
) -> None:
    settings.DURABLE_JOBS = {"STEP_RESULT_MAX_BYTES": 100}
    job = enqueue("tests.steps.bad_result", payload).job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.DEAD
    assert "StepResultError" in done.last_error
    assert words in done.last_error
    assert not JobStep.objects.filter(job_id=job.pk, status="completed").exists()


def test_a_step_retry_policy_calls_again_in_the_same_attempt() -> None:
    job = enqueue("tests.steps.retry").job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED, done.last_error
    assert done.result == "ok"
    assert done.attempts == 1
    assert calls(job) == [("flaky", 1)] * 3


def test_a_step_failing_every_try_fails_the_attempt_and_records_why() -> None:
    job = enqueue("tests.steps.retry", {"attempts": 2}).job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.DEAD
    assert "ConnectionError: not yet" in done.last_error
    record = steps(job)["flaky"]
    assert record.status == "failed"
    assert "ConnectionError" in record.error


# -- atomic steps -----------------------------------------------------------------


@queue_database.not_in_this_mode(
    "an atomic step covers the queue's database only; its StepCall row is on 'default'"
)
def test_an_atomic_steps_rows_and_record_commit_together(fast_backoff: None) -> None:
    job = enqueue("tests.steps.atomic", {"fail_in_step": True}).job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED
    # Attempt 1's row rolled back with its step; attempt 2's committed with its record.
    assert calls(job) == [("write", 2)]
    assert done.result == {"row": StepCall.objects.get(job_id=job.pk).pk}
    assert steps(job)["write"].status == "completed"


@queue_database.not_in_this_mode(
    "an atomic step covers the queue's database only; its StepCall row is on 'default'"
)
def test_a_fence_failure_rolls_an_atomic_steps_rows_back() -> None:
    job = enqueue("tests.steps.atomic", {"take_over": True}).job
    burst()
    assert "was lost" in seen[str(job.pk)]["lease_lost"]
    assert calls(job) == []
    assert not JobStep.objects.filter(job_id=job.pk).exists()


# -- fencing ----------------------------------------------------------------------


def test_a_worker_whose_lease_was_taken_over_writes_no_checkpoint() -> None:
    job = enqueue("tests.steps.fenced").job
    burst()
    assert seen[str(job.pk)] == {"lease_lost": True}
    # The first step's record stays; the second's function ran, its record did not land.
    assert set(steps(job)) == {"one"}
    assert calls(job) == [("one", 1), ("two", 1)]
    # Still running under the other lease: this worker's outcome was refused too.
    assert fresh(job).status == JobStatus.RUNNING


def test_a_checkpoint_reports_a_cancel_request() -> None:
    job = enqueue("tests.steps.sees_cancel").job
    burst()
    assert seen[str(job.pk)] == {"before": False, "after": True}
    assert fresh(job).status == JobStatus.CANCELLED


def test_a_job_without_steps_reads_no_step_records(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[Any] = []
    real = db.load_steps
    monkeypatch.setattr(db, "load_steps", lambda *a: loads.append(a) or real(*a))
    plain = enqueue("tests.record").job
    burst()
    assert fresh(plain).status == JobStatus.COMPLETED
    assert loads == []
    stepped = enqueue("tests.steps.three").job
    burst()
    assert fresh(stepped).status == JobStatus.COMPLETED
    assert len(loads) == 1  # one query for three steps


# -- sleeps -----------------------------------------------------------------------


def test_a_sleep_suspends_the_job_then_it_wakes_and_completes() -> None:
    job = enqueue("tests.steps.nap", {"seconds": 3600}).job
    burst()  # a burst worker does not wait for a sleeper
    suspended = fresh(job)
    assert suspended.status == JobStatus.PENDING
    assert suspended.attempts == 0  # a suspension is no failed attempt
    assert suspended.lease_token is None and suspended.lease_holder is None
    assert set(suspended.waiting_for or {}) == {"until"}
    assert suspended.available_at > timezone.now() + timedelta(minutes=50)
    record = steps(job)["nap"]
    assert (record.kind, record.status) == ("sleep", "suspended")
    assert record.wake_at == suspended.available_at
    fall_due(job)
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED
    assert done.result == {"woke": True}
    assert done.attempts == 1
    assert done.waiting_for is None  # cleared when it ran again
    assert steps(job)["nap"].status == "completed"
    # The handler ran twice from the top: "before" each time, "after" once.
    assert calls(job) == [("before", 1), ("before", 1), ("after", 1)]


def test_a_short_sleep_wakes_by_itself() -> None:
    job = enqueue("tests.steps.nap", {"seconds": 0.2}).job
    run_worker_until(lambda: fresh(job).status == JobStatus.COMPLETED, what="the nap's end")
    assert fresh(job).result == {"woke": True}


def test_sleep_until_a_past_time_returns_at_once() -> None:
    past = (timezone.now() - timedelta(minutes=1)).isoformat()
    job = enqueue("tests.steps.nap_until", {"until": past}).job
    burst()
    assert fresh(job).status == JobStatus.COMPLETED
    assert fresh(job).attempts == 1


def test_a_suspension_inside_a_transaction_is_refused() -> None:
    job = enqueue("tests.steps.in_transaction").job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.DEAD
    assert "inside transaction.atomic()" in done.last_error


def test_cancelling_a_sleeping_job_cancels_it_at_once() -> None:
    job = enqueue("tests.steps.nap", {"seconds": 3600}).job
    burst()
    assert fresh(job).status == JobStatus.PENDING
    operations.cancel(job.pk)
    assert fresh(job).status == JobStatus.CANCELLED
    fall_due(job)
    burst()
    assert fresh(job).status == JobStatus.CANCELLED
    assert calls(job, "after") == []


# -- events -----------------------------------------------------------------------


def test_an_event_emitted_before_the_wait_is_found() -> None:
    emit_event("signup:1", {"email": "a@example.com"})
    job = enqueue("tests.steps.wait", {"key": "signup:1"}).job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED
    assert done.result == {"event": {"email": "a@example.com"}}
    assert steps(job)["event:signup:1"].status == "completed"


def test_an_event_emitted_after_the_wait_wakes_the_job() -> None:
    job = enqueue("tests.steps.wait", {"key": "signup:2"}).job
    burst()
    waiting = fresh(job)
    assert waiting.status == JobStatus.WAITING
    assert waiting.waiting_for == {"event": "signup:2"}
    assert waiting.attempts == 0
    assert EventWaiter.objects.filter(job_id=job.pk, key="signup:2").exists()
    emit_event("signup:2", [1, 2])
    assert fresh(job).status == JobStatus.PENDING
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED
    assert done.result == {"event": [1, 2]}
    assert not EventWaiter.objects.exists()


def test_an_event_that_never_comes_times_out_the_same_on_every_run(fast_backoff: None) -> None:
    job = enqueue(
        "tests.steps.wait", {"key": "signup:3", "timeout": 3600, "fail_after_timeout": True}
    ).job
    burst()
    waiting = fresh(job)
    assert waiting.status == JobStatus.PENDING
    assert set(waiting.waiting_for or {}) == {"event", "deadline"}
    fall_due(job)
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED
    assert done.result == {"timed_out": True}
    # Attempt 1 timed out and failed; attempt 2 got the same timeout from the record.
    assert calls(job) == [("timed out", 1), ("timed out", 2)]
    assert steps(job)["event:signup:3"].result == {"timed_out": True}
    assert not EventWaiter.objects.filter(job_id=job.pk).exists()
    emit_event("signup:3", "late")
    assert fresh(job).status == JobStatus.COMPLETED


def test_an_emit_rolled_back_wakes_nothing() -> None:
    job = enqueue("tests.steps.wait", {"key": "signup:4"}).job
    burst()
    assert fresh(job).status == JobStatus.WAITING
    with pytest.raises(RuntimeError), transaction.atomic(using=db.database_alias()):
        emit_event("signup:4", "x")
        raise RuntimeError("roll it back")
    assert fresh(job).status == JobStatus.WAITING
    burst()
    assert fresh(job).status == JobStatus.WAITING


def test_cancelling_a_job_waiting_for_an_event_cancels_it_at_once() -> None:
    job = enqueue("tests.steps.wait", {"key": "signup:5"}).job
    burst()
    assert EventWaiter.objects.filter(job_id=job.pk).exists()
    operations.cancel(job.pk)
    assert fresh(job).status == JobStatus.CANCELLED
    # The waiter row goes in the cancel's transaction, not at the next emit.
    assert not EventWaiter.objects.filter(job_id=job.pk).exists()
    emit_event("signup:5", "x")
    assert fresh(job).status == JobStatus.CANCELLED
    assert not EventWaiter.objects.filter(job_id=job.pk).exists()


def test_an_async_handler_steps_sleeps_and_waits() -> None:
    job = enqueue("tests.steps.async_all", {"key": "signup:6", "sleep": 3600}).job
    burst()
    assert fresh(job).status == JobStatus.PENDING
    fall_due(job)
    burst()
    assert fresh(job).status == JobStatus.WAITING
    emit_event("signup:6", {"ok": 1})
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED, done.last_error
    assert done.result == {"first": 1, "event": {"ok": 1}}
    assert calls(job) == [("first", 1)]


# -- child jobs -------------------------------------------------------------------


def test_a_child_job_that_completes_gives_its_result() -> None:
    job = enqueue("tests.steps.parent", {"child": "tests.value", "payload": {"value": 7}}).job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED, done.last_error
    assert done.result == {"child_result": 7}
    assert done.attempts == 1
    assert done.waiting_for is None  # cleared when the child's end woke it
    (edge,) = JobDependency.objects.filter(child_id=job.pk)
    assert edge.kind == DependencyKind.AWAITS and edge.resolved
    child = Job.objects.get(pk=edge.parent_id)
    assert child.status == JobStatus.COMPLETED
    # The waits are not depends_on links: no parents shown, no parent_results.
    assert done.parent_ids() == [] and child.dependent_ids() == []
    assert steps(job)["run_job:tests.value"].child_id == child.pk
    assert calls(job) == [("parent run", 1), ("parent run", 1)]


def test_a_dead_child_raises_child_job_failed() -> None:
    job = enqueue("tests.steps.parent", {"child": "tests.discard"}).job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED, done.last_error
    (child,) = Job.objects.filter(type="tests.discard")
    assert child.status == JobStatus.DEAD
    assert done.result == {"child_failed": "dead", "child": str(child.pk)}


def test_many_parents_on_two_slots_all_finish() -> None:
    parents = [
        enqueue("tests.steps.parent", {"child": "tests.value", "payload": {"value": i}}).job
        for i in range(50)
    ]
    burst(concurrency=2)
    results = {p.pk: fresh(p) for p in parents}
    assert {j.status for j in results.values()} == {JobStatus.COMPLETED}
    assert sorted(j.result["child_result"] for j in results.values()) == list(range(50))
    assert Job.objects.filter(type="tests.value", status=JobStatus.COMPLETED).count() == 50
    assert Execution.objects.count() == 50  # each child ran once


# -- retention --------------------------------------------------------------------


def test_pruning_a_job_deletes_its_steps_and_waiters() -> None:
    from django_durable_jobs.db import prune_batch

    job = enqueue("tests.steps.wait", {"key": "signup:7", "timeout": 3600}).job
    burst()
    assert EventWaiter.objects.filter(job_id=job.pk).exists()
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.COMPLETED, completed_at=timezone.now() - timedelta(days=9)
    )
    result = prune_batch(
        db.database_alias(), ["completed"], timedelta(days=7), limit=10, lock_key=None
    )
    assert result.deleted == 1
    assert not Job.objects.filter(pk=job.pk).exists()
    assert not JobStep.objects.filter(job_id=job.pk).exists()
    assert not EventWaiter.objects.filter(job_id=job.pk).exists()


# -- the example project's handlers ---------------------------------------------------


def test_the_example_checkout_records_one_receipt_per_order(fast_backoff: None) -> None:
    from example.models import Receipt

    ok = enqueue("example.checkout", {"order": "o-1"}).job
    failing = enqueue("example.checkout", {"order": "o-2", "fail_at": "email"}, max_attempts=3).job
    burst()
    done = fresh(ok)
    assert done.status == JobStatus.COMPLETED, done.last_error
    assert done.result == {"order": "o-1", "receipt": Receipt.objects.get(order="o-1").pk}
    dead = fresh(failing)
    assert dead.status == JobStatus.DEAD
    assert dead.attempts == 3
    # The atomic step ran once although the attempt after it failed three times.
    assert Receipt.objects.filter(order="o-2").count() == 1


def test_the_example_parent_gets_its_childs_result() -> None:
    job = enqueue("example.parent_of", {"child": "example.echo", "payload": {"a": 1}}).job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED, done.last_error
    assert done.result == {"child_result": {"a": 1}}


def test_a_job_cancelled_while_it_runs_is_cancelled_instead_of_suspended() -> None:
    job = enqueue("tests.steps.cancel_then_sleep").job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.CANCELLED
    assert done.attempts == 1
    assert not JobStep.objects.filter(job_id=job.pk).exists()  # rolled back with it


def test_a_checkpoint_extends_a_lease_running_out() -> None:
    job = enqueue("tests.steps.extends").job
    burst(lease_seconds=20.0)
    left = seen[str(job.pk)]
    assert left["before"] <= 1.0
    assert left["after"] > 10.0  # now() + the worker's 20 s lease


def test_steps_and_suspensions_are_counted(fast_backoff: None) -> None:
    from tests.integration.helpers import scrape, value

    labels = {"queue": "default", "type": "tests.steps.three"}
    before = scrape()
    enqueue("tests.steps.three", {"fail_after": "b"})
    enqueue("tests.steps.nap", {"seconds": 3600})
    burst()
    after = scrape()

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("durable_jobs_steps_total", result="run", **labels) == 3
    assert grew("durable_jobs_steps_total", result="replayed", **labels) == 2
    assert grew("durable_jobs_suspensions_total", queue="default", reason="sleep") == 1
    assert grew("durable_jobs_in_flight", queue="default") == 0


def test_a_requeue_keeps_the_step_records() -> None:
    job = enqueue("tests.steps.three", {"fail_after": "b"}, max_attempts=1).job
    burst()
    assert fresh(job).status == JobStatus.DEAD
    operations.requeue(job.pk)
    burst()
    # Its attempts start again at 1 (and fail again after b): a and b are replayed.
    assert fresh(job).status == JobStatus.DEAD
    assert calls(job) == [("a", 1), ("b", 1)]
    assert {s.status for s in steps(job).values()} == {"completed"}


def test_a_worker_wakes_a_sleeper_when_due_not_at_its_next_poll() -> None:
    job = enqueue("tests.steps.nap", {"seconds": 0.3}).job
    # A poll interval far longer than the wait: the suspension itself tells
    # the worker when to claim again.
    run_worker_until(
        lambda: fresh(job).status == JobStatus.COMPLETED,
        timeout=20,
        what="the sleeper's wake-up",
        poll_interval=120.0,
        listen=False,
    )


def test_a_retry_from_a_step_runs_it_and_the_later_ones_again() -> None:
    job = enqueue("tests.steps.three", {"fail_after": "c"}, max_attempts=1).job
    burst()
    assert fresh(job).status == JobStatus.DEAD
    operations.requeue(job.pk, from_step="b")
    assert set(steps(job)) == {"a"}
    burst()
    # Attempt 1 again (a requeue starts over), failing after c again: b and c ran twice.
    assert calls(job) == [("a", 1), ("b", 1), ("c", 1), ("b", 1), ("c", 1)]


def test_the_sync_step_api_in_an_async_handler_names_the_async_twins() -> None:
    job = enqueue("tests.steps.sync_call_in_async").job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.DEAD
    assert "await ctx.astep" in done.last_error


def test_run_job_of_a_finished_child_returns_at_once() -> None:
    child = enqueue("tests.value", {"value": 3}, idempotency_key="child-done").job
    burst()
    assert fresh(child).status == JobStatus.COMPLETED
    job = enqueue(
        "tests.steps.parent",
        {"child": "tests.value", "payload": {"value": 3}, "key": "child-done"},
    ).job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED, done.last_error
    assert done.result == {"child_result": 3}
    assert calls(job) == [("parent run", 1)]  # no suspension
    assert not JobDependency.objects.filter(child_id=job.pk).exists()


def test_run_job_of_a_child_already_running_waits_for_its_end() -> None:
    from tests.factories import RunningWorker, wait_until, worker_config
    from tests.testapp.jobs import gate

    payload = {"gate": "steps-running-child"}
    child = enqueue("tests.gated", payload, idempotency_key="child-running").job
    running = RunningWorker(worker_config(burst=False, concurrency=2))
    try:
        wait_until(lambda: Execution.objects.filter(job_id=child.pk).exists(), what="the child")
        job = enqueue(
            "tests.steps.parent",
            {"child": "tests.gated", "payload": payload, "key": "child-running"},
        ).job
        wait_until(lambda: fresh(job).status == JobStatus.WAITING, what="the parent's wait")
        assert fresh(child).status == JobStatus.RUNNING
        gate("steps-running-child").set()
        wait_until(lambda: fresh(job).status == JobStatus.COMPLETED, what="the parent's end")
    finally:
        gate("steps-running-child").set()
        running.stop()
    assert fresh(job).result == {"child_result": {"opened": True}}
    assert fresh(child).dependent_count == 1


def test_a_step_costs_one_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    from django_durable_jobs.db.queries import _read, parse_queries

    step_queries = set(parse_queries(_read("steps.sql")))
    ran: list[str] = []
    real = db._run

    def counting(using: str, name: str, params: Any) -> Any:
        if name in step_queries:
            ran.append(name)
        return real(using, name, params)

    monkeypatch.setattr(db, "_run", counting)
    job = enqueue("tests.steps.three").job
    burst()
    assert fresh(job).status == JobStatus.COMPLETED
    assert ran == ["load_steps", "record_step", "record_step", "record_step"]


def test_the_example_steps_handler_runs_its_steps() -> None:
    job = enqueue("example.steps", {"steps": 3}).job
    burst()
    done = fresh(job)
    assert done.status == JobStatus.COMPLETED, done.last_error
    assert done.result == 3
    assert set(steps(job)) == {"noop", "noop#2", "noop#3"}


def test_a_job_reaped_between_steps_resumes_after_its_last_record() -> None:
    from tests.factories import RunningWorker, expire, reaper, wait_until, worker_config
    from tests.testapp.jobs import gate

    job = enqueue("tests.steps.reaped").job
    running = RunningWorker(worker_config(burst=False, concurrency=1))
    try:
        # Step a's record, not only its call: a reap between the call and the record's
        # commit refuses a's checkpoint instead of b's (CI saw it once).
        wait_until(lambda: calls(job) == [("a", 1)] and "a" in steps(job), what="step a's record")
        # The worker "died" (its lease ran out): the reaper gives the job back.
        expire(job.pk)
        assert reaper().reap() == 1
        gate("steps-reaped").set()
        wait_until(lambda: str(job.pk) in seen, what="the old attempt's refused checkpoint")
        wait_until(lambda: fresh(job).status == JobStatus.COMPLETED, what="the retry")
    finally:
        gate("steps-reaped").set()
        running.stop()
    assert seen[str(job.pk)] == {"lease_lost_on_attempt": 1}
    done = fresh(job)
    assert done.result == ["A", "B"]
    # a ran once; b's first call (the reaped attempt's) was refused its record,
    # then b ran again in the retry, which holds the slot only after it.
    assert calls(job) == [("a", 1), ("b", 1), ("b", 2)]
    assert steps(job)["b"].attempt == 2
