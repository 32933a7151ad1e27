"""``django_durable_jobs.testing`` as a project's tests use it: inside Django's ``TestCase``
(the test's transaction, never committed) and pytest-django's ``db`` fixture, through the
``durable_jobs`` fixture of the package's pytest plugin."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import TestCase

from django_durable_jobs import chain, emit_event, enqueue
from django_durable_jobs.models import Job, JobStatus, JobStep
from django_durable_jobs.pytest_plugin import DurableJobs
from django_durable_jobs.testing import (
    assert_enqueued,
    assert_not_enqueued,
    enqueued_jobs,
    run_jobs,
)
from tests.factories import Api, make_user, queue_connection
from tests.testapp.models import Execution, StepCall


class EnqueuedAssertions(TestCase):
    def test_a_payload_matches_as_a_subset(self) -> None:
        enqueue("tests.record", {"user": {"id": 7, "name": "ada"}, "plan": "pro"})
        (job,) = assert_enqueued(type="tests.record", payload={"user": {"id": 7}})
        assert job.payload["plan"] == "pro"
        assert_not_enqueued(type="tests.record", payload={"user": {"id": 8}})
        assert_not_enqueued(type="tests.other")

    def test_a_miss_lists_what_was_enqueued_instead(self) -> None:
        enqueue("tests.record", {"to": "ada@example.com"}, queue="emails")
        with pytest.raises(AssertionError) as raised:
            assert_enqueued(type="tests.record", payload={"to": "bob@example.com"})
        message = str(raised.value)
        assert "payload={'to': 'bob@example.com'}" in message
        assert "found 0" in message
        assert "tests.record queue='emails' status=pending payload={'to': 'ada@example.com'}" in (
            message
        )

    def test_count_is_exact(self) -> None:
        for i in range(3):
            enqueue("tests.record", {"i": i})
        assert len(assert_enqueued(type="tests.record", count=3)) == 3
        with pytest.raises(AssertionError, match="Expected 2 enqueued"):
            assert_enqueued(type="tests.record", count=2)

    def test_not_enqueued_names_the_jobs_found(self) -> None:
        enqueue("tests.record", {"i": 1})
        with pytest.raises(AssertionError, match=r"Expected no enqueued job .*found 1"):
            assert_not_enqueued(type="tests.record")

    def test_finished_jobs_are_not_enqueued_but_can_be_asked_for(self) -> None:
        enqueue("tests.record")
        run_jobs()
        assert enqueued_jobs() == []
        assert len(enqueued_jobs(status=JobStatus.COMPLETED)) == 1

    def test_a_job_enqueued_by_a_view_is_found(self) -> None:
        user = make_user("api", "add_job")
        response = Api(user).post(
            "/api/jobs",
            {"type": "tests.record", "payload": {"from": "api"}, "idempotency_key": "k1"},
        )
        assert response.status_code == 201, response.content
        assert_enqueued(type="tests.record", payload={"from": "api"}, count=1)


class RunJobs(TestCase):
    """Each test's data stays uncommitted; the next test starts clean (the connection open)."""

    def test_a_job_runs_through_the_real_path_and_its_result_is_stored(self) -> None:
        job = enqueue("tests.record", {"x": 1}).job
        (ran,) = run_jobs()
        assert (ran.id, ran.status, ran.attempt, ran.result) == (
            job.pk,
            JobStatus.COMPLETED,
            1,
            {"attempt": 1},
        )
        assert Execution.objects.filter(job_id=job.pk, worker="testing.run_jobs").count() == 1
        assert ran.job.completed_at is not None
        # The test's connection is the one the job used, still open, still in the test's
        # transaction (a worker would have closed it).
        assert queue_connection.in_atomic_block
        assert Job.objects.filter(pk=job.pk, status=JobStatus.COMPLETED).exists()

    def test_retries_run_until_the_job_completes_their_delays_passed_over(self) -> None:
        job = enqueue("tests.fail_until", {"succeed_on": 3}, max_attempts=5).job
        ran = run_jobs()
        assert [(r.attempt, r.status) for r in ran] == [
            (1, JobStatus.PENDING),
            (2, JobStatus.PENDING),
            (3, JobStatus.COMPLETED),
        ]
        assert "attempt 2 fails" in ran[1].last_error
        assert ran[-1].job.attempts == 3 and ran[-1].result == 3
        assert Execution.objects.filter(job_id=job.pk).count() == 3

    def test_without_retries_a_failed_job_waits_for_its_retry(self) -> None:
        enqueue("tests.fail_until", {"succeed_on": 2}, max_attempts=5)
        (ran,) = run_jobs(with_retries=False)
        assert ran.status == JobStatus.PENDING
        assert ran.job.available_at > ran.job.updated_at  # its retry, later
        # The next call with retries runs it.
        assert [r.status for r in run_jobs()] == [JobStatus.COMPLETED]

    def test_a_job_out_of_attempts_ends_dead(self) -> None:
        enqueue("tests.fail_until", {"succeed_on": 9}, max_attempts=2)
        ran = run_jobs()
        assert [r.status for r in ran] == [JobStatus.PENDING, JobStatus.DEAD]

    def test_a_chain_runs_in_order_each_child_released_by_its_parent(self) -> None:
        results = chain(*({"type": "tests.record", "payload": {"i": i}} for i in range(3)))
        ran = run_jobs()
        assert [r.id for r in ran] == [result.job.pk for result in results]
        assert {r.status for r in ran} == {JobStatus.COMPLETED}

    def test_without_until_empty_only_the_jobs_runnable_at_the_call_run(self) -> None:
        first, second = chain({"type": "tests.record"}, {"type": "tests.record"})
        assert [r.id for r in run_jobs(until_empty=False)] == [first.job.pk]
        assert [r.id for r in run_jobs()] == [second.job.pk]

    def test_filters_by_queue_and_type(self) -> None:
        emails = enqueue("tests.record", queue="emails").job
        other = enqueue("tests.fail_until", {"succeed_on": 1}).job
        assert [r.id for r in run_jobs(queue="emails")] == [emails.pk]
        assert [r.id for r in run_jobs(type="tests.fail_until")] == [other.pk]

    def test_jobs_for_later_wait_unless_asked_for(self) -> None:
        job = enqueue("tests.record", delay=timedelta(hours=1)).job
        assert run_jobs() == []
        assert [r.id for r in run_jobs(with_scheduled=True)] == [job.pk]

    def test_a_day_long_sleep_ends_inside_the_call(self) -> None:
        job = enqueue("tests.steps.nap", {"seconds": 86_400}).job
        ran = run_jobs()
        assert [r.status for r in ran] == [JobStatus.PENDING, JobStatus.COMPLETED]
        assert ran[-1].result == {"woke": True}
        # The handler runs again from the top after its sleep: "before" is not a step.
        calls = StepCall.objects.filter(job_id=job.pk).order_by("id")
        assert list(calls.values_list("name", flat=True)) == ["before", "before", "after"]
        assert ran[-1].job.attempts == 1  # a suspension is not an attempt

    def test_steps_are_recorded_and_replayed_on_a_retry(self) -> None:
        job = enqueue("tests.steps.three", {"fail_after": "b"}).job
        ran = run_jobs()
        assert [r.status for r in ran] == [JobStatus.PENDING, JobStatus.COMPLETED]
        assert set(JobStep.objects.filter(job=job).values_list("name", flat=True)) == {
            "a",
            "b",
            "c",
        }
        # a and b ran once (replayed on attempt 2), c once.
        calls = list(
            StepCall.objects.filter(job_id=job.pk).values_list("name", "attempt").order_by("id")
        )
        assert calls == [("a", 1), ("b", 1), ("c", 2)]

    def test_an_event_wait_ends_when_the_test_emits_the_event(self) -> None:
        job = enqueue("tests.steps.wait", {"key": "signup:1"}).job
        (ran,) = run_jobs()
        assert ran.status == JobStatus.WAITING  # no timeout: it waits for the event
        assert run_jobs() == []
        emit_event("signup:1", {"confirmed": True})
        (ran,) = run_jobs()
        assert (ran.id, ran.status, ran.result) == (
            job.pk,
            JobStatus.COMPLETED,
            {"event": {"confirmed": True}},
        )

    def test_a_child_job_runs_and_its_parent_gets_the_result(self) -> None:
        parent = enqueue(
            "tests.steps.parent", {"child": "tests.record", "payload": {"from": "parent"}}
        ).job
        ran = run_jobs()
        assert [(r.type, r.status) for r in ran] == [
            ("tests.steps.parent", JobStatus.WAITING),
            ("tests.record", JobStatus.COMPLETED),
            ("tests.steps.parent", JobStatus.COMPLETED),
        ]
        assert Job.objects.get(pk=parent.pk).result == {"child_result": {"attempt": 1}}

    def test_an_async_handler_runs_with_the_tests_data(self) -> None:
        job = enqueue("tests.async_orm").job
        (ran,) = run_jobs()
        assert ran.status == JobStatus.COMPLETED, ran.last_error
        assert Execution.objects.filter(job_id=job.pk).exists()

    def test_a_job_that_enqueues_for_ever_is_an_error_not_a_hang(self) -> None:
        enqueue("tests.fail_until", {"succeed_on": 100}, max_attempts=100)
        with pytest.raises(RuntimeError, match="ran 5 attempts and jobs are still runnable"):
            run_jobs(max_attempts=5)


class DjangoTasks(TestCase):
    """A ``@task`` enqueued through the Tasks backend is a job: the same helpers find and run it.

    On Django 6 (``django.tasks``) and on Django 5.2 with the ``django-tasks`` backport.
    """

    def test_a_task_is_found_by_its_type_and_run_with_its_result_stored(self) -> None:
        from django_durable_jobs.tasks.compat import TaskResultStatus
        from tests.testapp import tasks

        result = tasks.add.enqueue(2, 3)
        (job,) = assert_enqueued(type="tests.testapp.tasks.add", payload={"args": [2, 3]})
        assert str(job.pk) == result.id
        assert_not_enqueued(type="tests.testapp.tasks.add", payload={"args": [3, 2]})

        (ran,) = run_jobs()
        assert (ran.type, ran.status, ran.result["return_value"]) == (
            "tests.testapp.tasks.add",
            JobStatus.COMPLETED,
            5,
        )
        done = tasks.add.get_result(result.id)
        assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 5)

    def test_a_failing_task_is_retried_inside_run_jobs(self) -> None:
        from django_durable_jobs.tasks.compat import TaskResultStatus
        from tests.testapp import tasks

        result = tasks.fail_until.enqueue(succeed_on=2)
        ran = run_jobs(type="tests.testapp.tasks.fail_until")
        assert [(r.attempt, r.status) for r in ran] == [
            (1, JobStatus.PENDING),
            (2, JobStatus.COMPLETED),
        ]
        done = tasks.fail_until.get_result(result.id)
        assert done.status == TaskResultStatus.SUCCESSFUL
        assert done.return_value["attempt"] == 2
        assert Execution.objects.filter(job_id=result.id).count() == 2


def test_the_fixture_finds_and_runs_a_task(durable_jobs: DurableJobs) -> None:
    from tests.testapp import tasks

    tasks.add.enqueue(4, 5)
    durable_jobs.assert_enqueued(type="tests.testapp.tasks.add", count=1)
    assert [r.result["return_value"] for r in durable_jobs.run()] == [9]


# -- pytest-django and the plugin's fixture -------------------------------


def test_the_fixture_runs_what_the_test_enqueued(durable_jobs: DurableJobs) -> None:
    enqueue("tests.record", {"to": "ada@example.com"}, queue="emails")
    (job,) = durable_jobs.assert_enqueued(queue="emails", payload={"to": "ada@example.com"})
    (ran,) = durable_jobs.run()
    assert (ran.id, ran.status) == (job.pk, JobStatus.COMPLETED)
    durable_jobs.assert_not_enqueued(queue="emails")
    assert queue_connection.in_atomic_block  # the db fixture's transaction: rolled back after


@pytest.mark.django_db
def test_the_helpers_work_with_the_db_marker_too() -> None:
    enqueue("tests.record")
    assert [r.status for r in run_jobs()] == [JobStatus.COMPLETED]


@pytest.mark.django_db(transaction=True)
def test_and_with_a_transactional_test(durable_jobs: DurableJobs) -> None:
    enqueue("tests.fail_until", {"succeed_on": 2})
    assert [r.status for r in durable_jobs.run()] == [JobStatus.PENDING, JobStatus.COMPLETED]
