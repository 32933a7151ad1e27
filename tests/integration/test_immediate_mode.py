"""The immediate mode (``DURABLE_JOBS["RUN_IMMEDIATELY"]``): jobs run where they are enqueued.

In a ``TestCase`` (the test's transaction does not count: at once, or when
the test runs the ``on_commit`` callbacks of the code's own transaction), in
a transactional test (on the real commit), and never nested inside a run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import checks, mail
from django.db import transaction
from django.test import TestCase, override_settings

from django_durable_jobs import chain, db, enqueue, enqueue_many, group
from django_durable_jobs.checks import check_immediate_mode
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.testing import assert_enqueued, run_jobs
from tests.factories import Api, make_user
from tests.testapp.models import Execution

IMMEDIATE = override_settings(DURABLE_JOBS={"RUN_IMMEDIATELY": True})


def status(job: Any) -> str:
    return str(Job.objects.get(pk=job.pk).status)


@IMMEDIATE
class InATestCase(TestCase):
    def test_a_job_runs_at_once_through_the_run_jobs_path(self) -> None:
        job = enqueue("tests.record", {"x": 1}).job
        row = Job.objects.get(pk=job.pk)
        assert (row.status, row.result) == (JobStatus.COMPLETED, {"attempt": 1})
        assert list(Execution.objects.values_list("job_id", "worker")) == [
            (job.pk, "testing.run_jobs")
        ]
        assert job.status == JobStatus.PENDING  # enqueue() returns the job as enqueued

    def test_retries_run_at_once_to_the_end(self) -> None:
        job = enqueue("tests.fail_until", {"succeed_on": 3}, max_attempts=5).job
        row = Job.objects.get(pk=job.pk)
        assert (row.status, row.attempts, row.result) == (JobStatus.COMPLETED, 3, 3)
        dead = enqueue("tests.fail_until", {"succeed_on": 9}, max_attempts=2).job
        assert status(dead) == JobStatus.DEAD

    def test_inside_the_codes_own_transaction_it_waits_for_the_commit(self) -> None:
        with self.captureOnCommitCallbacks(using=db.database_alias(), execute=True) as callbacks:
            with transaction.atomic(using=db.database_alias()):
                job = enqueue("tests.record").job
                assert status(job) == JobStatus.PENDING
            # Released, not committed: the test's transaction is still open.
            assert status(job) == JobStatus.PENDING
        assert len(callbacks) == 1
        assert status(job) == JobStatus.COMPLETED

    def test_not_captured_the_job_stays_pending_for_run_jobs(self) -> None:
        with transaction.atomic(using=db.database_alias()):
            job = enqueue("tests.record").job
        assert status(job) == JobStatus.PENDING
        assert [r.id for r in run_jobs()] == [job.pk]

    def test_a_rolled_back_enqueue_runs_nothing(self) -> None:
        with (
            self.captureOnCommitCallbacks(using=db.database_alias(), execute=True) as callbacks,
            pytest.raises(RuntimeError),
            transaction.atomic(using=db.database_alias()),
        ):
            enqueue("tests.record")
            raise RuntimeError("roll back")
        assert callbacks == []
        assert not Job.objects.exists() and not Execution.objects.exists()

    def test_many_jobs_a_chain_and_a_group_run_whole(self) -> None:
        many = enqueue_many([{"type": "tests.record", "payload": {"i": i}} for i in range(3)])
        linked = chain({"type": "tests.record"}, {"type": "tests.record"})
        members = group([{"type": "tests.record"}], then={"type": "tests.parents"})
        ids = [r.job.pk for r in [*many, *linked, *members]]
        assert set(Job.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
            JobStatus.COMPLETED
        }
        # Each ran once, a chain's second after its first.
        assert Execution.objects.filter(job_id__in=ids).count() == len(ids)
        first, second = (Execution.objects.get(job_id=r.job.pk) for r in linked)
        assert first.pk < second.pk

    def test_a_job_that_a_job_enqueues_joins_the_run(self) -> None:
        for parent_type in ("tests.enqueues", "tests.aenqueues"):  # sync, async
            parent = enqueue(parent_type, {"type": "tests.parent_status"}).job
            row = Job.objects.get(pk=parent.pk)
            assert row.status == JobStatus.COMPLETED, row.last_error
            child = Job.objects.get(pk=row.result["enqueued"])
            # It ran once its parent's attempt had ended, not inside it.
            assert (child.status, child.result) == (JobStatus.COMPLETED, JobStatus.COMPLETED)

    def test_a_child_job_runs_and_its_parent_completes(self) -> None:
        parent = enqueue("tests.steps.parent", {"child": "tests.record"}).job
        row = Job.objects.get(pk=parent.pk)
        assert (row.status, row.result) == (
            JobStatus.COMPLETED,
            {"child_result": {"attempt": 1}},
        )

    def test_jobs_for_later_and_replays_do_not_run(self) -> None:
        later = enqueue("tests.record", delay=timedelta(hours=1)).job
        assert status(later) == JobStatus.PENDING
        enqueue("tests.record", idempotency_key="once")
        again = enqueue("tests.record", idempotency_key="once")
        assert not again.created
        assert Execution.objects.filter(job_id=again.job.pk).count() == 1

    def test_a_job_posted_to_the_rest_api_runs(self) -> None:
        response = Api(make_user("api", "add_job")).post(
            "/api/jobs",
            {"type": "tests.record", "payload": {"from": "api"}, "idempotency_key": "k1"},
        )
        assert response.status_code == 201, response.content
        assert status(Job.objects.get(pk=response.json()["id"])) == JobStatus.COMPLETED

    def test_run_jobs_runs_no_second_run_inside_its_own(self) -> None:
        with override_settings(DURABLE_JOBS={}):
            enqueue("tests.enqueues", {"type": "tests.record"})
        ran = run_jobs(type="tests.enqueues")
        # The child was not run inside the parent's attempt, nor by this call (its type).
        assert [r.type for r in ran] == ["tests.enqueues"]
        assert_enqueued(type="tests.record", count=1)


class Off(TestCase):
    def test_without_the_setting_nothing_runs(self) -> None:
        job = enqueue("tests.record").job
        assert status(job) == JobStatus.PENDING


@IMMEDIATE
@pytest.mark.django_db(transaction=True)
def test_a_transactional_test_runs_the_job_on_the_real_commit() -> None:
    job = enqueue("tests.record").job
    assert status(job) == JobStatus.COMPLETED
    with transaction.atomic(using=db.database_alias()):
        inside = enqueue("tests.record").job
        assert status(inside) == JobStatus.PENDING
    assert status(inside) == JobStatus.COMPLETED


# -- durable_jobs.W012 ---------------------------------------------------------


def test_w012_when_it_is_on_outside_a_test_run_with_debug_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(mail, "outbox")  # as outside Django's test environment
    with IMMEDIATE, override_settings(DEBUG=False):
        (warning,) = check_immediate_mode()
    assert (warning.id, warning.level) == ("durable_jobs.W012", checks.WARNING)
    assert "RUN_IMMEDIATELY" in warning.msg and "test settings" in (warning.hint or "")


def test_no_w012_in_a_test_run_with_debug_or_with_the_mode_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with IMMEDIATE, override_settings(DEBUG=False):
        assert check_immediate_mode() == []  # pytest-django's test environment
    monkeypatch.delattr(mail, "outbox")
    with IMMEDIATE, override_settings(DEBUG=True):
        assert check_immediate_mode() == []
    with override_settings(DEBUG=False, DURABLE_JOBS={"RUN_IMMEDIATELY": False}):
        assert check_immediate_mode() == []
