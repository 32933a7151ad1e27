"""depends_on, chain and group on the database: enqueue, release, cancel, races.

Outcomes are written through the gateway here, as a worker's completer or
the reaper writes them; tests/integration/test_dependencies_worker.py runs
the same shapes on in-process workers.
"""

from __future__ import annotations

import functools
import random
import threading
import uuid
from typing import Any

import pytest
from django.db import DatabaseError, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_durable_jobs import (
    InvalidJob,
    chain,
    db,
    enqueue,
    enqueue_many,
    group,
    hooks,
    operations,
)
from django_durable_jobs.constants import PRIORITY_MAX
from django_durable_jobs.context import JobContext
from django_durable_jobs.db.records import ClaimedJob, Outcome
from django_durable_jobs.enqueueing import EnqueueResult
from django_durable_jobs.exceptions import IdempotencyConflict
from django_durable_jobs.models import Job, JobDependency, JobStatus
from django_durable_jobs.worker.completer import Completer
from django_durable_jobs.worker.outcomes import Failure, complete, dead
from tests.factories import expire, queue_connection, reaper

from .helpers import new_connection, run_in_threads, wait_for_lock_waiters

pytestmark = pytest.mark.django_db(transaction=True)

T = "tests.record"


def status(job: Job | uuid.UUID) -> str:
    pk = job if isinstance(job, uuid.UUID) else job.pk
    return str(Job.objects.values_list("status", flat=True).get(pk=pk))


def claim(job: Job) -> ClaimedJob:
    """Claim ``job`` (runnable) as a worker would: first in line, by the top priority."""
    Job.objects.filter(pk=job.pk).update(priority=PRIORITY_MAX)
    (claimed,) = db.claim(db.database_alias(), worker_id=f"w-{job.pk}", lease_seconds=30, limit=1)
    assert claimed.id == job.pk
    return claimed


def finish(*outcomes: Outcome) -> set[uuid.UUID]:
    return db.record_outcomes(db.database_alias(), list(outcomes), history_limit=20)


def fail(job: ClaimedJob) -> Outcome:
    return dead(job, "w", Failure("boom", "ValueError", ""))


# --- enqueue -------------------------------------------------------------------------


def test_a_job_waits_for_its_parents_and_they_know_it() -> None:
    a, b = enqueue(T).job, enqueue(T).job
    child = enqueue(T, depends_on=[a, str(b.pk), a]).job
    assert (child.status, child.waiting_on, child.parent_count) == (JobStatus.WAITING, 2, 2)
    stored = Job.objects.get(pk=child.pk)
    assert (stored.status, stored.waiting_on, stored.parent_count) == ("waiting", 2, 2)
    assert stored.parent_ids() == sorted([a.pk, b.pk])
    assert Job.objects.get(pk=a.pk).dependent_ids() == [child.pk]
    assert Job.objects.get(pk=a.pk).dependent_count == 1
    assert not JobDependency.objects.filter(resolved=True).exists()


def test_enqueue_results_and_jobs_are_accepted_as_parents() -> None:
    result = enqueue(T)
    child = enqueue(T, depends_on=[result, enqueue(T).job, enqueue(T).job.pk]).job
    assert child.parent_count == 3


def test_parents_already_finished_count_at_enqueue() -> None:
    done = make_finished(JobStatus.COMPLETED)
    assert enqueue(T, depends_on=[done]).job.status == JobStatus.PENDING
    failed = make_finished(JobStatus.DEAD)
    child = enqueue(T, depends_on=[done, failed]).job
    assert child.status == JobStatus.CANCELLED
    assert child.last_error == f"Cancelled: parent job {failed.pk} ended dead."
    assert Job.objects.get(pk=child.pk).completed_at is not None
    runs = enqueue(T, depends_on=[failed], on_parent_failure="run").job
    assert runs.status == JobStatus.PENDING
    assert JobDependency.objects.get(child_id=runs.pk).resolved


def make_finished(new_status: str) -> Job:
    job = enqueue(T).job
    Job.objects.filter(pk=job.pk).update(status=new_status)
    return job


def test_unknown_parents_are_an_error_naming_them_and_store_nothing() -> None:
    known = enqueue(T).job
    ghost, other = uuid.uuid4(), uuid.uuid4()
    with pytest.raises(InvalidJob) as error:
        enqueue(T, depends_on=[known, ghost, other])
    assert error.value.field == "depends_on"
    assert str(ghost) in error.value.message and str(other) in error.value.message
    with pytest.raises(InvalidJob) as error:
        enqueue_many([{"type": T}, {"type": T, "depends_on": [ghost]}])
    assert error.value.field == "jobs[1].depends_on"
    with pytest.raises(InvalidJob, match="chain"):
        chain({"type": T}, {"type": T, "depends_on": [ghost]})
    assert list(Job.objects.values_list("pk", flat=True)) == [known.pk]
    assert Job.objects.get(pk=known.pk).dependent_count == 0
    assert not JobDependency.objects.exists()


@pytest.mark.parametrize(
    ("depends_on", "message"),
    [
        ("01a23", "must be a list"),
        ({"a": 1}, "must be a list"),
        (5, "must be a list"),
        (["not-a-uuid"], "is not a job id"),
        ([3], "not int"),
    ],
)
def test_malformed_depends_on_is_refused_before_the_database(
    depends_on: Any, message: str, django_assert_num_queries: Any
) -> None:
    with (
        django_assert_num_queries(0, connection=queue_connection),
        pytest.raises(InvalidJob, match=message),
    ):
        enqueue(T, depends_on=depends_on)


def test_on_parent_failure_takes_cancel_or_run() -> None:
    with pytest.raises(InvalidJob, match="on_parent_failure"):
        enqueue(T, on_parent_failure="ignore")


def test_a_replay_returns_the_waiting_job_and_compares_its_parents() -> None:
    a, b = enqueue(T).job, enqueue(T).job
    first = enqueue(T, idempotency_key="k", depends_on=[a])
    again = enqueue(T, idempotency_key="k", depends_on=[str(a.pk)])
    assert first.created and not again.created
    assert again.job.pk == first.job.pk and again.job.status == JobStatus.WAITING
    assert JobDependency.objects.count() == 1
    assert Job.objects.get(pk=a.pk).dependent_count == 1
    with pytest.raises(IdempotencyConflict) as conflict:
        enqueue(T, idempotency_key="k", depends_on=[a, b])
    assert conflict.value.differences == ["depends_on"]
    with pytest.raises(IdempotencyConflict, match="on_parent_failure"):
        enqueue(T, idempotency_key="k", depends_on=[a], on_parent_failure="run")
    with pytest.raises(IdempotencyConflict, match="depends_on"):
        enqueue(T, idempotency_key="k")
    replayed = enqueue_many([{"type": T, "idempotency_key": "k", "depends_on": [a]}])
    assert not replayed[0].created


# --- chain and group ---------------------------------------------------------------------


def test_chain_links_each_job_to_the_previous_one() -> None:
    first, second, third = chain({"type": T}, {"type": T, "priority": 3}, {"type": T})
    assert [r.job.status for r in (first, second, third)] == ["pending", "waiting", "waiting"]
    assert Job.objects.get(pk=second.job.pk).parent_ids() == [first.job.pk]
    assert Job.objects.get(pk=third.job.pk).parent_ids() == [second.job.pk]
    assert second.job.priority == 3
    assert chain() == []


def test_group_waits_for_every_member() -> None:
    outside = enqueue(T).job
    *members, callback = group(
        [{"type": T}, {"type": T}, {"type": T}],
        then={"type": T, "depends_on": [outside]},
    )
    stored = Job.objects.get(pk=callback.job.pk)
    assert stored.parent_ids() == sorted([outside.pk, *(m.job.pk for m in members)])
    assert (stored.status, stored.waiting_on) == (JobStatus.WAITING, 4)
    assert [m.job.status for m in members] == ["pending"] * 3
    assert len(group([{"type": T}])) == 1


def counts(job: EnqueueResult) -> tuple[str, int, int, int]:
    stored = Job.objects.get(pk=job.job.pk)
    return (stored.status, stored.parent_count, stored.waiting_on, stored.dependent_count)


def test_a_plain_chain_is_one_statement_and_releases_link_by_link(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = StatementLog(monkeypatch)
    with CaptureQueriesContext(queue_connection) as orm:
        first, second, third = chain({"type": T}, {"type": T}, {"type": T})
    assert (log.names, len(orm)) == (["insert_job_shape"], 0), orm.captured_queries
    assert [counts(r) for r in (first, second, third)] == [
        ("pending", 0, 0, 1),
        ("waiting", 1, 1, 1),
        ("waiting", 1, 1, 0),
    ]
    assert not JobDependency.objects.filter(resolved=True).exists()
    finish(complete(claim(first.job), "1"))
    assert [status(r.job) for r in (first, second, third)] == ["completed", "pending", "waiting"]
    finish(fail(claim(second.job)))
    assert status(third.job) == "cancelled"


def test_a_chain_link_that_runs_anyway_is_stored_so_by_the_one_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = StatementLog(monkeypatch)
    first, second = chain({"type": T}, {"type": T, "on_parent_failure": "run"})
    assert log.names == ["insert_job_shape"]
    # One job without a parent (through Django's cursor): pending, and stored so.
    with CaptureQueriesContext(queue_connection) as single:
        alone = enqueue(T, on_parent_failure="run").job
    (sql,) = [query["sql"] for query in single.captured_queries]
    # insert_job_shape's: it stores on_parent_failure and reads (locks) no parent.
    assert "durable_jobs_dependency" in sql and "FOR NO KEY UPDATE" not in sql, sql
    assert Job.objects.get(pk=second.job.pk).on_parent_failure == "run"
    assert (status(alone), Job.objects.get(pk=alone.pk).on_parent_failure) == ("pending", "run")
    finish(fail(claim(first.job)))
    assert status(first.job) == "dead"
    assert status(second.job) == "pending"


def test_a_plain_group_with_a_callback_is_one_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    log = StatementLog(monkeypatch)
    with CaptureQueriesContext(queue_connection) as orm:
        *members, callback = group([{"type": T}] * 3, then={"type": T})
    assert (log.names, len(orm)) == (["insert_job_shape"], 0), orm.captured_queries
    assert [counts(m) for m in members] == [("pending", 0, 0, 1)] * 3
    assert counts(callback) == ("waiting", 3, 3, 0)
    for member in members:
        finish(complete(claim(member.job), "1"))
    assert status(callback.job) == "pending"


def test_chains_with_keys_or_parents_of_their_own_cancel_through_the_batch() -> None:
    # Inserted spec by spec: the first link is cancelled at insert (its
    # parent is dead), and so must be the rest.
    dead_parent = enqueue(T).job
    finish(fail(claim(dead_parent)))
    links = chain({"type": T, "depends_on": [dead_parent]}, {"type": T}, {"type": T})
    assert [status(r.job) for r in links] == ["cancelled"] * 3
    keyed = chain({"type": T, "idempotency_key": "c1"}, {"type": T})
    again = chain({"type": T, "idempotency_key": "c1"}, {"type": T})
    assert again[0].job.pk == keyed[0].job.pk and not again[0].created
    assert Job.objects.get(pk=again[1].job.pk).parent_ids() == [keyed[0].job.pk]


def test_chain_and_group_store_everything_or_nothing() -> None:
    with pytest.raises(InvalidJob) as error:
        chain({"type": T}, {"type": T, "priority": "high"})
    assert error.value.field == "chain[1].priority"
    with pytest.raises(InvalidJob, match=r"then\.type"):
        group([{"type": T}], then={"payload": {}})
    with pytest.raises(InvalidJob, match=r"group\[1\]\.depends_on"):
        group([{"type": T}, {"type": T, "depends_on": [uuid.uuid4()]}], then={"type": T})
    enqueue(T, idempotency_key="taken", payload={"n": 1})
    with pytest.raises(IdempotencyConflict):
        chain({"type": T}, {"type": T, "idempotency_key": "taken"})
    assert Job.objects.count() == 1
    assert not JobDependency.objects.exists()


# --- the release -----------------------------------------------------------------------


def test_a_completed_parent_releases_its_child_in_its_statement() -> None:
    a, b = enqueue(T).job, enqueue(T).job
    child = enqueue(T, depends_on=[a, b], delay=3600).job
    soon = enqueue(T, depends_on=[a]).job
    assert finish(complete(claim(a), '{"n": 1}')) == {a.pk}
    assert status(child) == "waiting" and status(soon) == "pending"
    assert Job.objects.get(pk=child.pk).waiting_on == 1
    assert finish(complete(claim(b), "2")) == {b.pk}
    released = Job.objects.get(pk=child.pk)
    # Pending, still at its own later available_at (the delay it was enqueued with).
    assert (released.status, released.waiting_on) == ("pending", 0)
    assert released.available_at == child.available_at
    assert JobDependency.objects.filter(resolved=False).count() == 0


def test_a_released_child_wakes_the_workers_of_its_queue() -> None:
    parent = enqueue(T).job
    enqueue(T, depends_on=[parent], queue="later")
    claimed = claim(parent)
    listener = new_connection()
    try:
        listener.execute("LISTEN durable_jobs")
        finish(complete(claimed, "null"))
        assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == ["later"]
    finally:
        listener.close()


def test_a_dead_parent_cancels_its_descendants_naming_their_parent() -> None:
    a = enqueue(T).job
    b, c, d = (r.job for r in chain({"type": T, "depends_on": [a]}, {"type": T}, {"type": T}))
    runs = enqueue(T, depends_on=[b], on_parent_failure="run").job
    finish(fail(claim(a)))
    assert [status(j) for j in (a, b, c, d)] == ["dead", "cancelled", "cancelled", "cancelled"]
    assert Job.objects.get(pk=b.pk).last_error == f"Cancelled: parent job {a.pk} ended dead."
    assert Job.objects.get(pk=d.pk).last_error == (f"Cancelled: parent job {c.pk} ended cancelled.")
    assert status(runs) == "pending"  # its parent b was cancelled; "run" counts it done
    assert Job.objects.get(pk=d.pk).completed_at is not None


@pytest.fixture
def announced(monkeypatch: pytest.MonkeyPatch) -> list[set[uuid.UUID]]:
    """What the finished listeners are told (hooks.jobs_finished), call by call."""
    calls: list[set[uuid.UUID]] = []
    monkeypatch.setattr(hooks, "_finished_listeners", [lambda ids, alias: calls.append(set(ids))])
    return calls


def test_the_jobs_a_failed_parent_cancels_are_announced_as_finished(
    announced: list[set[uuid.UUID]],
) -> None:
    # They never run, so no handler tells anyone (a Django task's
    # task_finished): the worker, the reaper and a cancel announce them.
    a = enqueue(T).job
    b, c = (r.job for r in chain({"type": T, "depends_on": [a]}, {"type": T}))
    runs = enqueue(T, depends_on=[b], on_parent_failure="run").job
    completer = Completer(db.database_alias(), 20, lambda outcomes, written: None)
    assert completer._finish([fail(claim(a))]) == {a.pk}
    assert announced == [{b.pk, c.pk}]
    assert status(runs) == "pending"

    announced.clear()
    parent = enqueue(T, max_attempts=1).job
    child = enqueue(T, depends_on=[parent]).job
    expire(claim(parent).id)
    assert reaper().reap() == 1
    assert announced == [{parent.pk, child.pk}]

    announced.clear()
    parent = enqueue(T).job
    child = enqueue(T, depends_on=[parent]).job
    operations.cancel(parent.pk)
    assert announced == [{parent.pk, child.pk}]


def test_run_lets_the_child_run_after_a_failed_parent() -> None:
    a, b = enqueue(T).job, enqueue(T).job
    child = enqueue(T, depends_on=[a, b], on_parent_failure="run").job
    finish(fail(claim(a)))
    assert status(child) == "waiting"
    finish(complete(claim(b), "7"))
    assert status(child) == "pending"


def test_a_parent_that_gained_a_child_after_its_claim_still_releases_it() -> None:
    parent = enqueue(T).job
    claimed = claim(parent)  # dependent_count 0 at the claim
    assert claimed.dependent_count == 0
    child = enqueue(T, depends_on=[parent]).job
    assert finish(complete(claimed, "null")) == {parent.pk}
    assert status(child) == "pending"
    other = enqueue(T).job
    claimed = claim(other)
    failed_child = enqueue(T, depends_on=[other]).job
    grandchild = enqueue(T, depends_on=[failed_child]).job
    assert finish(fail(claimed)) == {other.pk}
    assert status(failed_child) == status(grandchild) == "cancelled"


def test_a_lost_lease_is_still_not_written() -> None:
    parent = enqueue(T).job
    enqueue(T, depends_on=[parent])
    claimed = claim(parent)
    stale = claimed._replace(lease_token=uuid.uuid4())
    assert (
        finish(complete(stale, "null"), complete(stale._replace(dependent_count=0), "1")) == set()
    )
    assert status(parent) == "running"


def test_the_reaper_releases_through_the_same_path() -> None:
    parent = enqueue(T, max_attempts=1).job
    child = enqueue(T, depends_on=[parent]).job
    claimed = claim(parent)
    expire(claimed.id)
    assert reaper().reap() == 1
    assert (status(parent), status(child)) == ("dead", "cancelled")


def test_the_release_is_in_the_transaction_of_the_parents_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent = enqueue(T).job
    child = enqueue(T, depends_on=[parent]).job
    claimed = claim(parent)
    # The statement after the parent's UPDATE fails: the UPDATE is rolled back with it.
    monkeypatch.setitem(db.QUERIES, "release_dependents", "SELECT 1 / 0")
    with pytest.raises(DatabaseError):
        finish(complete(claimed, "null"))
    assert (status(parent), status(child)) == ("running", "waiting")
    monkeypatch.undo()
    assert finish(complete(claimed, "null")) == {parent.pk}
    assert (status(parent), status(child)) == ("completed", "pending")


class StatementLog:
    """The named queries the gateway runs on its fast path, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        run = db._run

        def logged(using: str, name: str, params: Any) -> list[tuple[Any, ...]]:
            self.names.append(name)
            return run(using, name, params)

        monkeypatch.setattr(db, "_run", logged)


def test_outcomes_of_jobs_without_dependents_are_one_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enqueue_many([{"type": T} for _ in range(3)])
    jobs = db.claim(db.database_alias(), worker_id="w", lease_seconds=30, limit=3)
    log = StatementLog(monkeypatch)
    outcomes = [complete(jobs[0], "1"), fail(jobs[1]), complete(jobs[2], "null")]
    assert finish(*outcomes) == {job.id for job in jobs}
    assert log.names == ["record_outcomes"]
    assert "durable_jobs_dependency" not in db.QUERIES["record_outcomes"]


def test_outcomes_of_parents_add_the_release(monkeypatch: pytest.MonkeyPatch) -> None:
    parent, plain = enqueue(T).job, enqueue(T).job
    enqueue(T, depends_on=[parent])
    jobs = db.claim(db.database_alias(), worker_id="w", lease_seconds=30, limit=2)
    log = StatementLog(monkeypatch)
    assert finish(*(complete(job, "null") for job in jobs)) == {parent.pk, plain.pk}
    assert log.names == ["record_outcomes", "release_dependents"]


# --- operations ----------------------------------------------------------------------


def test_cancelling_a_waiting_or_pending_job_cancels_its_dependents() -> None:
    a = enqueue(T).job
    b = enqueue(T, depends_on=[a]).job
    c = enqueue(T, depends_on=[b]).job
    runs = enqueue(T, depends_on=[b], on_parent_failure="run").job
    assert operations.cancel(b.pk).status == JobStatus.CANCELLED  # waiting
    assert [status(j) for j in (a, b, c, runs)] == ["pending", "cancelled", "cancelled", "pending"]
    assert Job.objects.get(pk=c.pk).last_error == f"Cancelled: parent job {b.pk} ended cancelled."
    d = enqueue(T, depends_on=[a]).job
    operations.cancel(a.pk)  # pending
    assert status(d) == "cancelled"


def test_a_requeued_parent_is_waited_for_again() -> None:
    a, b = enqueue(T).job, enqueue(T).job
    child = enqueue(T, depends_on=[a, b], on_parent_failure="run").job
    finish(fail(claim(a)))
    assert Job.objects.get(pk=child.pk).waiting_on == 1
    operations.requeue(a.pk)
    assert Job.objects.get(pk=child.pk).waiting_on == 2
    finish(complete(claim(a), '"again"'))
    assert (status(child), Job.objects.get(pk=child.pk).waiting_on) == ("waiting", 1)
    finish(complete(claim(b), '"b"'))
    assert status(child) == "pending"
    # A requeue of a cancelled child runs it, whatever its parents.
    x = enqueue(T).job
    y = enqueue(T, depends_on=[x]).job
    operations.cancel(y.pk)
    assert operations.requeue(y.pk).status == JobStatus.PENDING


def test_pruning_a_parent_and_its_children_removes_their_edges() -> None:
    from datetime import timedelta

    from django_durable_jobs import pruning

    parent = enqueue(T).job
    child = enqueue(T, depends_on=[parent]).job
    finish(complete(claim(parent), "null"))
    finish(complete(claim(child), "null"))
    Job.objects.update(completed_at=Job.objects.get(pk=child.pk).created_at - timedelta(days=30))
    result = pruning.prune_batch(["completed"], timedelta(days=7), limit=100, lock_key=None)
    assert result.deleted == 2
    assert not JobDependency.objects.exists()


# --- ctx.parent_results --------------------------------------------------------------------


def context(job: Job, parents: int) -> JobContext:
    return JobContext(job.pk, job.type, job.queue, {}, 1, 1, _parent_count=parents)


def test_parent_results_costs_nothing_without_parents(django_assert_num_queries: Any) -> None:
    job = enqueue(T).job
    with django_assert_num_queries(0, connection=queue_connection):
        assert context(job, 0).parent_results == {}


def test_parent_results_maps_each_parent_to_its_result(django_assert_num_queries: Any) -> None:
    a, b = enqueue(T).job, enqueue(T).job
    child = enqueue(T, depends_on=[a, b], on_parent_failure="run").job
    finish(complete(claim(a), '{"n": 1}'))
    finish(fail(claim(b)))
    ctx = context(child, 2)
    with django_assert_num_queries(1, connection=queue_connection):
        assert ctx.parent_results == {a.pk: {"n": 1}, b.pk: None}
        assert ctx.parent_results is ctx.parent_results  # read once


# --- races -----------------------------------------------------------------------------


#: Rounds of each race: each one a fresh set of jobs, released together by a barrier.
ROUNDS = 40


def test_two_parents_completed_at_once_never_leave_their_child_waiting() -> None:
    for round_ in range(ROUNDS):
        a, b = enqueue(T).job, enqueue(T).job
        child = enqueue(T, depends_on=[a, b]).job
        claimed = [claim(a), claim(b)]
        # Half the rounds as a worker writes them (it knew of the child at
        # the claim), half as after a restart (outcome without the count).
        if round_ % 2:
            claimed = [job._replace(dependent_count=0) for job in claimed]
        outcomes = [complete(job, str(i)) for i, job in enumerate(claimed)]
        written = run_in_threads(2, functools.partial(finish_one, outcomes))
        assert set().union(*written) == {a.pk, b.pk}
        assert status(child) == "pending", f"round {round_}"
        assert Job.objects.get(pk=child.pk).waiting_on == 0
        Job.objects.filter(pk=child.pk).update(status=JobStatus.COMPLETED)


def finish_one(outcomes: list[Outcome], index: int) -> set[uuid.UUID]:
    return finish(outcomes[index])


def test_a_child_enqueued_while_its_parent_completes_is_never_left_waiting() -> None:
    for round_ in range(ROUNDS):
        parent = enqueue(T).job
        claimed = claim(parent)
        outcome = complete(claimed, "null") if round_ % 2 else fail(claimed)
        child, _ = run_in_threads(2, functools.partial(enqueue_or_finish, [parent], [outcome]))
        assert isinstance(child, Job)
        expected = "pending" if round_ % 2 else "cancelled"
        assert status(child) == expected, f"round {round_}: enqueued {child.status}"
        Job.objects.filter(pk=child.pk).update(status=JobStatus.COMPLETED)


def enqueue_or_finish(
    parents: list[Job], outcomes: list[Outcome], index: int
) -> Job | set[uuid.UUID]:
    """Thread 0 enqueues a child of ``parents``, thread 1 writes their ``outcomes``."""
    if index == 0:
        return enqueue(T, depends_on=parents).job
    return finish(*outcomes)


def test_one_batch_ending_two_parents_of_a_child_being_enqueued_does_not_deadlock() -> None:
    first, second = sorted((enqueue(T).job, enqueue(T).job), key=lambda job: job.pk)
    # The outcomes in the order opposite to the enqueue's locks (by id).
    outcomes = [complete(claim(second), "2"), complete(claim(first), "1")]
    results: dict[str, Any] = {}

    def run(name: str, call: Any) -> None:
        try:
            results[name] = call()
        except Exception as exc:
            results[name] = exc
        finally:
            connections.close_all()

    holder = new_connection(autocommit=False)
    try:
        # Another session holds the first parent, so the enqueue waits there,
        # then the batch (it would lock the second parent, then wait too).
        holder.execute("SELECT id FROM durable_jobs_job WHERE id = %s FOR UPDATE", [first.pk])
        enqueuer = threading.Thread(
            target=run, args=("child", lambda: enqueue(T, depends_on=[first, second]).job)
        )
        enqueuer.start()
        wait_for_lock_waiters(1)
        writer = threading.Thread(target=run, args=("written", lambda: finish(*outcomes)))
        writer.start()
        wait_for_lock_waiters(2)
    finally:
        holder.rollback()
        holder.close()
    enqueuer.join(30)
    writer.join(30)
    assert results["written"] == {first.pk, second.pk}, results
    child = results["child"]
    assert isinstance(child, Job), results
    assert status(child) == "pending"


def test_concurrent_enqueues_sharing_parents_do_not_deadlock() -> None:
    parents = [enqueue(T).job for _ in range(6)]

    def enqueue_children(i: int) -> None:
        order = random.Random(i).sample(parents, len(parents))
        for _ in range(5):
            with transaction.atomic(using=db.database_alias()):
                enqueue(T, depends_on=order)
                enqueue(T, depends_on=order[::-1])

    run_in_threads(4, enqueue_children)
    assert Job.objects.get(pk=parents[0].pk).dependent_count == 40


def test_a_cancel_racing_a_parents_completion_leaves_no_child_waiting() -> None:
    for round_ in range(ROUNDS):
        a, b = enqueue(T).job, enqueue(T).job
        child = enqueue(T, depends_on=[a, b]).job
        grandchild = enqueue(T, depends_on=[child]).job
        outcome = complete(claim(a), "null")
        run_in_threads(2, functools.partial(finish_or_cancel, outcome, b))
        assert (status(child), status(grandchild)) == ("cancelled", "cancelled"), round_


def finish_or_cancel(outcome: Outcome, other: Job, index: int) -> None:
    """Thread 0 writes ``outcome``, thread 1 cancels ``other``."""
    if index == 0:
        finish(outcome)
    else:
        operations.cancel(other.pk)
