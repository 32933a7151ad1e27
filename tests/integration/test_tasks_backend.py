"""DurableJobsBackend: Django's Tasks API on the job table, run by the real worker.

On Django 6 (``django.tasks``) and on Django 5.2 with the ``django-tasks``
backport: the names come from ``compat``, as the backend's do. Workers run
in this process on the test database, hence ``transaction=True`` throughout.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core import checks
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_durable_jobs import IdempotencyConflict, InvalidJob, db, enqueue
from django_durable_jobs.constants import QUEUE_MAX_LENGTH
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.tasks import task_options
from django_durable_jobs.tasks.backend import DurableJobsBackend
from django_durable_jobs.tasks.compat import (
    TASKS_MODULE,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_durable_jobs.worker import Worker
from django_durable_jobs.worker.event_loop import THREAD_NAME
from tests.factories import burst as burst_worker
from tests.factories import handler_threads, join_handler_threads, queue_connection
from tests.testapp import tasks
from tests.testapp.models import Execution

from .helpers import run_in_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_backoff")]

DURABLE = "django_durable_jobs.tasks.backend.DurableJobsBackend"


def burst(**overrides: Any) -> Worker:
    """Run one burst worker in this process until nothing runnable is left."""
    return burst_worker(**{"concurrency": 2, "lease_seconds": 10.0, **overrides})


def drain(**overrides: Any) -> Worker:
    """Burst workers until no task is pending or running (retries wait a little)."""
    for _ in range(200):
        worker = burst(**overrides)
        if not Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists():
            return worker
    raise AssertionError(list(Job.objects.values("type", "status", "available_at")))


class Signals:
    """Collects (signal name, result id, status, attempts) as the signals fire."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, int]] = []

    def __enter__(self) -> Signals:
        for name, signal in self._signals():
            signal.connect(self._receiver(name), weak=False, dispatch_uid=f"test-{name}")
        return self

    def __exit__(self, *exc: object) -> None:
        for name, signal in self._signals():
            signal.disconnect(dispatch_uid=f"test-{name}")

    @staticmethod
    def _signals() -> list[tuple[str, Any]]:
        return [("enqueued", task_enqueued), ("started", task_started), ("finished", task_finished)]

    def _receiver(self, name: str) -> Any:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            assert sender is DurableJobsBackend
            self.seen.append((name, task_result.id, task_result.status, task_result.attempts))

        return receive

    def names(self, result_id: str) -> list[tuple[str, str, int]]:
        return [(n, s, a) for n, i, s, a in self.seen if i == result_id]


def test_a_task_is_a_job_row_that_the_worker_runs() -> None:
    with Signals() as signals:
        result = tasks.add.enqueue(2, 3)
        assert result.status == TaskResultStatus.READY
        job = Job.objects.get(pk=result.id)
        assert (job.type, job.queue, job.priority, job.max_attempts) == (
            "tests.testapp.tasks.add",
            "default",
            0,
            3,  # OPTIONS["max_attempts"] in tests/settings.py
        )
        assert job.payload == {"args": [2, 3], "kwargs": {}, "backend": "default"}
        worker = drain()
        done = tasks.add.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.worker_ids == [worker.config.worker_id]
    assert done.attempts == 1 and done.errors == []
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.last_attempted_at == done.started_at
    assert (done.args, done.kwargs, done.backend) == ([2, 3], {}, "default")
    assert signals.names(result.id) == [
        ("enqueued", TaskResultStatus.READY, 0),
        ("started", TaskResultStatus.RUNNING, 1),
        ("finished", TaskResultStatus.SUCCESSFUL, 1),
    ]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5


def test_a_failing_task_is_retried_then_succeeds_with_its_history() -> None:
    result = tasks.fail_until.enqueue(succeed_on=3)
    with Signals() as signals:
        drain()
    done = tasks.fail_until.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    runs = list(Execution.objects.filter(job_id=result.id).order_by("attempt"))
    assert [r.attempt for r in runs] == [1, 2, 3]
    # The context saw the attempt number and one worker id per attempt.
    assert done.return_value == {
        "attempt": 3,
        "worker_ids": [r.worker for r in runs],
        "errors": 2,
    }
    assert done.worker_ids == [r.worker for r in runs]
    assert [e.exception_class_path for e in done.errors] == ["tests.testapp.tasks.TaskFailure"] * 2
    assert "attempt 1 fails" in done.errors[0].traceback
    assert done.errors[0].exception_class is tasks.TaskFailure
    # Started on every attempt, finished once: failures with a retry left are not final.
    assert signals.names(result.id) == [
        ("started", TaskResultStatus.RUNNING, 1),
        ("started", TaskResultStatus.RUNNING, 2),
        ("started", TaskResultStatus.RUNNING, 3),
        ("finished", TaskResultStatus.SUCCESSFUL, 3),
    ]


def test_a_task_out_of_attempts_is_failed() -> None:
    with task_options(max_attempts=2):
        result = tasks.fail_until.enqueue(succeed_on=99)
    with Signals() as signals:
        drain()
    done = tasks.fail_until.get_result(result.id)
    assert Job.objects.get(pk=result.id).status == JobStatus.DEAD
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 2 and len(done.errors) == 2
    assert done.finished_at is not None
    with pytest.raises(ValueError, match="Task failed"):
        done.return_value  # noqa: B018
    assert signals.names(result.id)[-1] == ("finished", TaskResultStatus.FAILED, 2)
    assert Execution.objects.filter(job_id=result.id).count() == 2


def test_a_cancelled_task_reads_as_failed() -> None:
    from django_durable_jobs.operations import cancel

    result = tasks.add.enqueue(1, 1)
    cancel(uuid.UUID(result.id))
    assert tasks.add.get_result(result.id).status == TaskResultStatus.FAILED


def test_cancelling_a_task_sends_task_finished_after_the_commit() -> None:
    from django_durable_jobs.operations import cancel, cancel_many

    first = tasks.add.enqueue(1, 1)
    rolled_back = tasks.add.enqueue(2, 2)
    plain = enqueue("tests.record").job
    with Signals() as signals:
        with transaction.atomic(using=db.database_alias()):
            cancel(uuid.UUID(first.id))
            assert signals.seen == []  # not before the commit
        with pytest.raises(RuntimeError), transaction.atomic(using=db.database_alias()):
            cancel(uuid.UUID(rolled_back.id))
            raise RuntimeError("rolled back")
        assert signals.names(first.id) == [("finished", TaskResultStatus.FAILED, 0)]
        assert signals.names(rolled_back.id) == []
        # A bulk cancel of a task and a plain job: one signal, for the task.
        assert len(cancel_many([uuid.UUID(rolled_back.id), plain.pk]).changed) == 2
        assert [i for _, i, _, _ in signals.seen] == [first.id, rolled_back.id]


def dead(*results: Any) -> list[uuid.UUID]:
    """Mark the tasks' jobs dead (as a reap would), and return their ids."""
    ids = [uuid.UUID(result.id) for result in results]
    Job.objects.filter(pk__in=ids).update(status=JobStatus.DEAD)
    return ids


def test_the_finished_listener_picks_the_tasks_among_any_jobs(
    django_assert_num_queries: Any,
) -> None:
    """The core announces every job it finished without a handler; only tasks are sent."""
    from django_durable_jobs import hooks

    ids = dead(tasks.add.enqueue(1, 1))
    pending = tasks.add.enqueue(2, 2)
    plain = enqueue("tests.record").job
    shaped = enqueue("tests.record", {"args": [], "kwargs": {}, "backend": "default"}).job
    Job.objects.filter(pk__in=[plain.pk, shaped.pk]).update(status=JobStatus.DEAD)
    others = [uuid.UUID(pending.id), plain.pk, shaped.pk, uuid.uuid4()]
    with Signals() as signals, django_assert_num_queries(1, connection=queue_connection):
        hooks.jobs_finished([*ids, *others], db.database_alias())
    assert [(i, status) for _, i, status, _ in signals.seen] == [
        (str(ids[0]), TaskResultStatus.FAILED)
    ]


@pytest.mark.usefixtures("clean_registry")
def test_the_finished_listener_leaves_a_type_a_job_handler_declares() -> None:
    # The executor runs such a row as the @job, never as the task it names.
    from django_durable_jobs import hooks
    from django_durable_jobs.registry import job

    ids = dead(tasks.add.enqueue(1, 1))
    job("tests.testapp.tasks.add")(lambda ctx: None)
    with Signals() as signals:
        hooks.jobs_finished(ids, db.database_alias())
    assert signals.seen == []


def test_the_finished_listener_reads_nothing_without_a_durable_backend(
    django_assert_num_queries: Any,
) -> None:
    from django_durable_jobs import hooks

    ids = dead(tasks.add.enqueue(1, 1))
    immediate = {"default": {"BACKEND": f"{TASKS_MODULE}.backends.immediate.ImmediateBackend"}}
    with (
        override_settings(TASKS=immediate),
        django_assert_num_queries(0, connection=queue_connection),
    ):
        hooks.jobs_finished(ids, db.database_alias())


def test_a_task_the_reaper_kills_sends_task_finished() -> None:
    from django_durable_jobs.worker.maintenance import Maintenance

    with task_options(max_attempts=1):
        result = tasks.add.enqueue(1, 2)
    Job.objects.filter(pk=result.id).update(
        status=JobStatus.RUNNING, attempts=1, started_at=timezone.now(),
        lease_holder="gone", lease_token=uuid.uuid4(),
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )  # fmt: skip
    reaper = Maintenance(
        db.database_alias(), "reaper", 30.0, dict, lambda lost: None, (0.01, 0.05, 0), 20
    )
    with Signals() as signals:
        assert reaper.reap() == 1
    assert signals.names(result.id) == [("finished", TaskResultStatus.FAILED, 1)]
    assert tasks.add.get_result(result.id).status == TaskResultStatus.FAILED


def test_a_task_failed_at_its_time_limit_sends_task_finished_once() -> None:
    """The watchdog's failure is announced; the function's late return is not."""
    with task_options(max_attempts=1):
        result = tasks.nap.enqueue(1.0)
    limits = {"TIMEOUT_SECONDS": 0.3, "TIMEOUT_GRACE_SECONDS": 30}
    others = handler_threads()
    with override_settings(DURABLE_JOBS=limits), Signals() as signals:
        burst()
        assert Job.objects.get(pk=result.id).status == JobStatus.DEAD
        assert signals.names(result.id) == [
            ("started", TaskResultStatus.RUNNING, 1),
            ("finished", TaskResultStatus.FAILED, 1),
        ]
        # The function returns after the worker stopped; once its thread has
        # exited, its late outcome has been dropped: nothing more is sent.
        join_handler_threads(besides=others)
        assert signals.names(result.id)[-1] == ("finished", TaskResultStatus.FAILED, 1)
        assert len(signals.names(result.id)) == 2
    done = tasks.nap.get_result(result.id)
    assert done.errors[-1].exception_class_path == "django_durable_jobs.exceptions.JobTimeout"


def test_an_unstorable_return_value_fails_the_task_without_a_retry() -> None:
    result = tasks.returns_a_set.enqueue()
    drain()
    done = tasks.returns_a_set.get_result(result.id)
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 1  # not retried: the work was done once
    last_error = Job.objects.get(pk=result.id).last_error
    assert "tests.testapp.tasks.returns_a_set returned an unstorable value" in last_error
    assert "not JSON-serialisable" in last_error


def test_run_after_defers_the_task() -> None:
    later = tasks.add.using(run_after=timezone.now() + timedelta(minutes=10)).enqueue(1, 2)
    soon = tasks.add.enqueue(3, 4)
    burst(concurrency=1)
    assert tasks.add.get_result(soon.id).status == TaskResultStatus.SUCCESSFUL
    assert tasks.add.get_result(later.id).status == TaskResultStatus.READY
    job = Job.objects.get(pk=later.id)
    assert job.available_at > timezone.now() + timedelta(minutes=9)


def test_higher_priority_runs_first() -> None:
    low = tasks.record.using(priority=-10).enqueue("low")
    normal = tasks.record.enqueue("normal")
    high = tasks.record.using(priority=100).enqueue("high")
    assert Job.objects.get(pk=high.id).priority == 100
    drain(concurrency=1)
    order = Execution.objects.order_by("at", "id").values_list("job_id", flat=True)
    assert [str(job_id) for job_id in order] == [high.id, normal.id, low.id]


def test_priority_outside_djangos_range_is_rejected() -> None:
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)


def test_queues_are_validated_against_queues_and_kept_on_the_job() -> None:
    result = tasks.record_other.enqueue()
    assert Job.objects.get(pk=result.id).queue == "other"
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        tasks.add.using(queue_name="nope")
    # A worker of another queue leaves it alone; one of "other" runs it.
    burst(queues=("default",))
    assert tasks.record_other.get_result(result.id).status == TaskResultStatus.READY
    drain(queues=("other",))
    assert tasks.record_other.get_result(result.id).status == TaskResultStatus.SUCCESSFUL


def test_an_invalid_queue_name_is_rejected_even_when_queues_is_open() -> None:
    with override_settings(TASKS={"default": {"BACKEND": DURABLE, "QUEUES": []}}):
        assert tasks.add.using(queue_name="anything-goes").queue_name == "anything-goes"
        with pytest.raises(InvalidTask, match="not a valid queue name"):
            tasks.add.using(queue_name="a,b")


def test_a_queue_name_over_the_length_limit_is_rejected() -> None:
    # The rule every job's queue follows (validation.validate_queue), length included.
    longest, too_long = "q" * QUEUE_MAX_LENGTH, "q" * (QUEUE_MAX_LENGTH + 1)
    with override_settings(TASKS={"default": {"BACKEND": DURABLE, "QUEUES": []}}):
        assert tasks.add.using(queue_name=longest).queue_name == longest
        with pytest.raises(InvalidTask, match=f"at most {QUEUE_MAX_LENGTH} characters") as caught:
            tasks.add.using(queue_name=too_long)
    assert "tests.testapp.tasks.add" in str(caught.value)
    assert check_ids(QUEUES=["default", too_long]) == ["durable_jobs.E101"]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("args", "kwargs", "field"),
    [
        ((object(), 1), {}, "args[0]"),
        ((1, (2, 3)), {}, "args[1]"),
        ((1,), {"b": {1: "x"}}, "kwargs['b']"),
        ((float("nan"), 1), {}, "args[0]"),
        ((1,), {"b": {"when": timezone.now()}}, "kwargs['b']"),
    ],
)
def test_arguments_must_survive_a_json_round_trip(
    args: tuple[Any, ...], kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidJob) as caught:
        tasks.add.enqueue(*args, **kwargs)
    assert caught.value.field == field
    assert "tests.testapp.tasks.add" in str(caught.value)
    assert not Job.objects.exists()


def test_a_task_not_importable_by_its_path_is_rejected_at_enqueue() -> None:
    with pytest.raises(InvalidTask, match="does not import as this task"):
        tasks.renamed.enqueue(1)
    assert not Job.objects.exists()


def test_get_result_of_an_unknown_id_raises() -> None:
    backend = task_backends["default"]
    for missing in (str(uuid.uuid4()), "not-a-uuid", ""):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(missing)
    # A plain job is not a task result either.
    plain = enqueue("tests.record").job
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(str(plain.pk))
    # Another task's result: Django's own check on Task.get_result.
    other = tasks.record.enqueue()
    with pytest.raises(TaskResultMismatch):
        tasks.add.get_result(other.id)
    # A task of another TASKS alias is not this backend's.
    with override_settings(TASKS={"default": {"BACKEND": DURABLE}, "second": {"BACKEND": DURABLE}}):
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["second"].get_result(other.id)
        assert task_backends["default"].get_result(other.id).id == other.id


def test_enqueue_joins_the_callers_transaction_and_signals_after_commit() -> None:
    with Signals() as signals:
        with pytest.raises(RuntimeError), transaction.atomic(using=db.database_alias()):
            rolled_back = tasks.add.enqueue(1, 1)
            raise RuntimeError("rollback")
        with transaction.atomic(using=db.database_alias()):
            kept = tasks.add.enqueue(2, 2)
            assert signals.names(kept.id) == []  # not before the commit
        assert signals.names(kept.id) == [("enqueued", TaskResultStatus.READY, 0)]
    assert signals.names(rolled_back.id) == []
    assert list(Job.objects.values_list("id", flat=True)) == [uuid.UUID(kept.id)]


def test_an_idempotency_key_replays_the_same_task() -> None:
    with Signals() as signals, task_options(idempotency_key="sum-1-2"):
        first = tasks.add.enqueue(1, 2)
        again = tasks.add.enqueue(1, 2)
        with pytest.raises(IdempotencyConflict):
            tasks.add.enqueue(9, 9)
    assert first.id == again.id
    assert Job.objects.count() == 1
    assert Job.objects.get().idempotency_key == "sum-1-2"
    assert [n for n, *_ in signals.seen] == ["enqueued"]  # the replay is not a new task
    # Outside the block, no key.
    assert Job.objects.get(pk=tasks.add.enqueue(1, 2).id).idempotency_key is None


def test_racing_enqueues_with_one_key_make_one_task() -> None:
    def enqueue_once(index: int) -> str:
        with task_options(idempotency_key="race"):
            return tasks.add.enqueue(1, 2).id

    with Signals() as signals:
        ids = run_in_threads(8, enqueue_once)
    assert len(set(ids)) == 1
    assert Job.objects.count() == 1
    assert [n for n, *_ in signals.seen] == ["enqueued"]


def test_racing_workers_run_each_task_once() -> None:
    results = [tasks.record.enqueue(f"t{i}") for i in range(30)]
    run_in_threads(3, lambda index: burst(concurrency=4, worker_id=f"racer-{index}"))
    drain()  # anything a racer left for a retry
    runs = Execution.objects.values_list("job_id", flat=True)
    assert sorted(str(job_id) for job_id in runs) == sorted(r.id for r in results)
    assert {tasks.record.get_result(r.id).status for r in results} == {TaskResultStatus.SUCCESSFUL}


def test_task_options_are_validated_at_the_with_line() -> None:
    with pytest.raises(InvalidJob, match="max_attempts"), task_options(max_attempts=0):
        pass
    with pytest.raises(InvalidJob, match="idempotency_key"), task_options(idempotency_key=""):
        pass
    with pytest.raises(InvalidJob, match="timeout"), task_options(timeout=0):
        pass
    with pytest.raises(InvalidJob, match="timeout"), task_options(timeout="30"):  # type: ignore[arg-type]
        pass


def test_a_task_time_limit_comes_from_task_options_then_options_then_the_setting() -> None:
    backend = {"BACKEND": DURABLE, "QUEUES": [], "OPTIONS": {"timeout": 20}}
    with override_settings(TASKS={"default": backend}):
        from_options = tasks.add.enqueue(1, 1)
        with task_options(timeout=timedelta(seconds=5)):
            from_call = tasks.add.enqueue(1, 2)
    plain = tasks.add.enqueue(1, 3)  # tests/settings.py: no OPTIONS timeout
    timeouts = dict(Job.objects.values_list("pk", "timeout"))
    assert timeouts[uuid.UUID(from_options.id)] == 20.0
    assert timeouts[uuid.UUID(from_call.id)] == 5.0
    assert timeouts[uuid.UUID(plain.id)] is None  # TIMEOUT_SECONDS applies at run time


def test_a_task_timeout_fails_the_attempt_then_retries() -> None:
    with task_options(max_attempts=2, timeout=0.3):
        result = tasks.nap.enqueue(0.6)
    others = handler_threads()
    with override_settings(DURABLE_JOBS={"TIMEOUT_GRACE_SECONDS": 30}):
        drain()
    join_handler_threads(besides=others)  # the last late function returned: it changed nothing
    done = tasks.nap.get_result(result.id)
    assert (done.status, done.attempts) == (TaskResultStatus.FAILED, 2)
    assert [e.exception_class_path for e in done.errors] == [
        "django_durable_jobs.exceptions.JobTimeout"
    ] * 2


def test_async_task_with_aenqueue_and_aget_result() -> None:
    result = async_to_sync(tasks.async_multiply.aenqueue)(6, 7)
    assert result.status == TaskResultStatus.READY
    drain()

    async def read() -> Any:
        done = await tasks.async_multiply.aget_result(result.id)
        await result.arefresh()
        return done

    done = async_to_sync(read)()
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 42
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42


def test_an_async_task_runs_on_the_workers_event_loop_with_its_signals() -> None:
    with Signals() as signals:
        result = tasks.async_record.enqueue(seconds=0.01)
        drain()
    done = tasks.async_record.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    # Awaited on the worker's loop, not run to completion on a loop of its own.
    assert done.return_value == {"thread": THREAD_NAME, "attempt": 1}
    assert Execution.objects.filter(job_id=result.id).count() == 1  # the async ORM worked
    assert signals.names(result.id) == [
        ("enqueued", TaskResultStatus.READY, 0),
        ("started", TaskResultStatus.RUNNING, 1),
        ("finished", TaskResultStatus.SUCCESSFUL, 1),
    ]


def test_a_failing_async_task_is_retried_then_failed() -> None:
    with task_options(max_attempts=2):
        result = tasks.async_record.enqueue(fail=True)
    with Signals() as signals:
        drain()
    done = tasks.async_record.get_result(result.id)
    assert (done.status, done.attempts) == (TaskResultStatus.FAILED, 2)
    assert [e.exception_class_path for e in done.errors] == ["tests.testapp.tasks.TaskFailure"] * 2
    assert signals.names(result.id)[-1] == ("finished", TaskResultStatus.FAILED, 2)


def test_an_async_task_past_its_time_limit_is_cancelled_and_retried() -> None:
    # Each attempt awaits 60 s under a 0.3 s limit: cancelled at the deadline,
    # so the drain takes about two limits, not two minutes.
    with task_options(max_attempts=2, timeout=0.3):
        result = tasks.async_record.enqueue(seconds=60)
    others = handler_threads()
    drain()
    join_handler_threads(besides=others, timeout=10)  # the tasks ended when cancelled
    done = tasks.async_record.get_result(result.id)
    assert (done.status, done.attempts) == (TaskResultStatus.FAILED, 2)
    assert [e.exception_class_path for e in done.errors] == [
        "django_durable_jobs.exceptions.JobTimeout"
    ] * 2
    assert Execution.objects.filter(job_id=result.id).count() == 2


def test_task_options_reach_aenqueue() -> None:
    with task_options(idempotency_key="async-key", max_attempts=7):
        result = async_to_sync(tasks.async_multiply.aenqueue)(1, 1)
    job = Job.objects.get(pk=result.id)
    assert (job.idempotency_key, job.max_attempts) == ("async-key", 7)


def test_the_worker_runs_only_tasks_of_a_durable_backend() -> None:
    # A row claiming to be a task of a non-durable backend, or naming a
    # function that is not a Task: the worker's "no handler" path.
    fake_backend = enqueue(
        "tests.testapp.tasks.immediate_add",
        {"args": [1, 2], "kwargs": {}, "backend": "immediate"},
    ).job
    not_a_task = enqueue(
        "tests.testapp.tasks.undecorated",
        {"args": [1], "kwargs": {}, "backend": "default"},
    ).job
    unknown_alias = enqueue(
        "tests.testapp.tasks.add", {"args": [1, 2], "kwargs": {}, "backend": "gone"}
    ).job
    # Dead at the first claim, not given back for a worker that has a handler.
    with override_settings(DURABLE_JOBS={"UNKNOWN_TYPE_DEAD_AFTER_SECONDS": 0}):
        drain()
    for job in (fake_backend, not_a_task, unknown_alias):
        job.refresh_from_db()
        assert job.status == JobStatus.DEAD
        assert "No handler is registered" in job.last_error


def test_a_receiver_error_fails_neither_the_enqueue_nor_the_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    for signal in (task_enqueued, task_started, task_finished):
        signal.connect(broken, dispatch_uid="broken-receiver")
    try:
        result = tasks.add.enqueue(1, 1)
        drain()
    finally:
        for signal in (task_enqueued, task_started, task_finished):
            signal.disconnect(dispatch_uid="broken-receiver")
    failures = [r for r in caplog.records if r.name == "django_durable_jobs.tasks"]
    assert len(failures) == 3 and all("receiver bug" in str(r.exc_info[1]) for r in failures)
    done = tasks.add.get_result(result.id)
    assert (done.status, done.attempts, done.return_value) == (TaskResultStatus.SUCCESSFUL, 1, 2)


def test_the_job_result_keeps_the_return_value_and_worker() -> None:
    result = tasks.add.enqueue(20, 22)
    worker = drain()
    assert Job.objects.get(pk=result.id).result == {
        "return_value": 42,
        "worker_id": worker.config.worker_id,
    }
    assert json.dumps(Job.objects.get(pk=result.id).payload)


def check_ids(**params: Any) -> list[str]:
    with override_settings(TASKS={"default": {"BACKEND": DURABLE, **params}}):
        return [message.id for message in task_backends["default"].check()]


def test_check_accepts_a_good_configuration() -> None:
    assert check_ids(QUEUES=["default", "emails"], OPTIONS={"max_attempts": 4}) == []
    assert check_ids(OPTIONS={"timeout": 30, "max_attempts": 2}) == []
    assert check_ids(OPTIONS={"timeout": timedelta(minutes=1)}) == []


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"QUEUES": ["default", "bad queue"]}, ["durable_jobs.E101"]),
        ({"OPTIONS": ["max_attempts"]}, ["durable_jobs.E102"]),
        ({"OPTIONS": {"max_attemps": 3}}, ["durable_jobs.E103"]),
        ({"OPTIONS": {"max_attempts": 0}}, ["durable_jobs.E104"]),
        ({"OPTIONS": {"max_attempts": "3"}}, ["durable_jobs.E104"]),
        ({"OPTIONS": {"timeout": 0}}, ["durable_jobs.E106"]),
        ({"OPTIONS": {"timeout": "30s"}}, ["durable_jobs.E106"]),
    ],
)
def test_check_reports_misconfiguration(params: dict[str, Any], expected: list[str]) -> None:
    assert check_ids(**params) == expected


def test_check_reports_the_app_missing_from_installed_apps() -> None:
    with override_settings(
        TASKS={"default": {"BACKEND": DURABLE}},
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"],
    ):
        ids = [m.id for m in task_backends["default"].check()]
    assert ids == ["durable_jobs.E105"]


def test_checks_run_through_djangos_check_framework() -> None:
    # The Tasks API registers check_tasks, which asks every backend (the
    # backport from its AppConfig, or compat when it loads the API).
    from django_durable_jobs.tasks.compat import check_tasks

    assert check_tasks in checks.registry.registry.get_checks()
    with override_settings(TASKS={"default": {"BACKEND": DURABLE, "OPTIONS": {"retries": 3}}}):
        messages = list(check_tasks())
    assert [m.id for m in messages] == ["durable_jobs.E103"]
