"""Groups, chains and diamonds run by in-process workers (tests/factories.py)."""

from __future__ import annotations

import itertools

import pytest

from django_durable_jobs import chain, enqueue, group
from django_durable_jobs.models import Job, JobStatus
from tests.factories import burst
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def fresh(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def started_after_all(child: Job, parents: list[Job]) -> bool:
    child = fresh(child)
    ends = [fresh(parent).completed_at for parent in parents]
    assert child.started_at is not None and None not in ends
    return all(child.started_at >= end for end in ends if end is not None)


def test_a_group_callback_runs_after_every_member_with_their_results() -> None:
    *members, callback = (
        r.job
        for r in group(
            [{"type": "tests.value", "payload": {"value": v, "sleep": 0}} for v in (1, 2, 3)],
            then={"type": "tests.parents"},
        )
    )
    burst(concurrency=4)
    assert [fresh(m).status for m in members] == ["completed"] * 3
    done = fresh(callback)
    assert done.status == JobStatus.COMPLETED
    assert done.result == {str(m.pk): v for m, v in zip(members, (1, 2, 3), strict=True)}
    assert started_after_all(callback, members)
    assert Execution.objects.filter(job_id=callback.pk).count() == 1


def test_a_dead_parent_cancels_its_child_and_grandchild() -> None:
    parent, child, grandchild = (
        r.job
        for r in chain(
            {"type": "tests.discard"}, {"type": "tests.record"}, {"type": "tests.record"}
        )
    )
    burst(concurrency=2)
    assert [fresh(j).status for j in (parent, child, grandchild)] == [
        "dead",
        "cancelled",
        "cancelled",
    ]
    assert str(parent.pk) in fresh(child).last_error
    assert str(child.pk) in fresh(grandchild).last_error
    assert not Execution.objects.exists()


def test_run_lets_the_child_of_a_dead_parent_run() -> None:
    failed, fine, callback = (
        r.job
        for r in group(
            [{"type": "tests.discard"}, {"type": "tests.value", "payload": {"value": 5}}],
            then={"type": "tests.parents", "on_parent_failure": "run"},
        )
    )
    burst(concurrency=2)
    done = fresh(callback)
    assert done.status == JobStatus.COMPLETED
    assert done.result == {str(failed.pk): None, str(fine.pk): 5}


def test_a_diamond_runs_its_last_job_once_after_both_branches() -> None:
    top = enqueue("tests.value", {"value": 1}).job
    left = enqueue("tests.value", {"value": 2}, depends_on=[top]).job
    right = enqueue("tests.value", {"value": 3}, depends_on=[top]).job
    bottom = enqueue("tests.parents", depends_on=[left, right]).job
    burst(concurrency=4)
    assert Execution.objects.filter(job_id=bottom.pk).count() == 1
    assert fresh(bottom).result == {str(left.pk): 2, str(right.pk): 3}
    assert started_after_all(left, [top]) and started_after_all(right, [top])
    assert started_after_all(bottom, [left, right])


def test_sum_parents_adds_its_parents_results() -> None:
    *_, total = group(
        [{"type": "tests.value", "payload": {"value": v}} for v in (2, 3.5, "x", None)],
        then={"type": "example.sum_parents"},
    )
    burst(concurrency=4)
    assert fresh(total.job).result == 5.5


def test_chains_run_in_order_on_several_slots() -> None:
    chains = [
        [r.job for r in chain(*({"type": "tests.record"} for _ in range(4)))] for _ in range(20)
    ]
    burst(concurrency=8)
    assert Execution.objects.count() == 80
    assert Execution.objects.values("job_id").distinct().count() == 80
    for jobs in chains:
        for before, after in itertools.pairwise(jobs):
            assert started_after_all(after, [before])
