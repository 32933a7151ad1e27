"""Durable steps where the handler gets no context: ``current_job()`` (a ``@task``)."""

from __future__ import annotations

from typing import Any

import pytest

from django_durable_jobs import JobContext, emit_event, enqueue, job
from django_durable_jobs.context import current_job
from django_durable_jobs.models import Job, JobStatus, JobStep
from tests.factories import burst

pytestmark = pytest.mark.django_db(transaction=True)


@job("tests.steps.current_job")
def uses_current_job(ctx: JobContext) -> dict[str, Any]:
    here = current_job()
    return {"same": here is ctx, "step": here.step("s", lambda: 5)}


def test_current_job_is_the_running_jobs_context() -> None:
    created = enqueue("tests.steps.current_job").job
    burst()
    done = Job.objects.get(pk=created.pk)
    assert done.status == JobStatus.COMPLETED, done.last_error
    assert done.result == {"same": True, "step": 5}


def test_current_job_outside_a_worker_says_so() -> None:
    with pytest.raises(RuntimeError, match="no durable job is running here"):
        current_job()


def test_a_task_uses_steps_and_waits_through_current_job() -> None:
    from tests.testapp import tasks
    from tests.testapp.models import StepCall

    result = tasks.stepped.enqueue("a")
    burst()
    job_row = Job.objects.get(pk=result.id)
    assert job_row.status == JobStatus.WAITING
    emit_event("task:a", {"ok": True})
    burst()
    job_row = Job.objects.get(pk=result.id)
    assert job_row.status == JobStatus.COMPLETED, job_row.last_error
    assert job_row.result["return_value"] == {"first": "a", "event": {"ok": True}}
    assert StepCall.objects.filter(job_id=job_row.pk).count() == 1
    assert set(JobStep.objects.filter(job_id=job_row.pk).values_list("name", flat=True)) == {
        "first",
        "event:task:a",
    }


def test_a_suspended_task_reads_as_ready_and_starts_again_on_resume() -> None:
    from django_durable_jobs.tasks.compat import TaskResultStatus, task_finished, task_started
    from tests.testapp import tasks

    seen: list[tuple[str, str]] = []

    def started(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(("started", task_result.status))

    def finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(("finished", task_result.status))

    task_started.connect(started, dispatch_uid="test-suspended-started")
    task_finished.connect(finished, dispatch_uid="test-suspended-finished")
    try:
        result = tasks.stepped.enqueue("b")
        burst()
        # Suspended in wait_for_event (the job is waiting): READY, never FAILED,
        # and no task_finished.
        assert Job.objects.get(pk=result.id).status == JobStatus.WAITING
        assert tasks.stepped.get_result(result.id).status == TaskResultStatus.READY
        assert seen == [("started", TaskResultStatus.RUNNING)]
        emit_event("task:b", {"ok": True})
        burst()
        assert tasks.stepped.get_result(result.id).status == TaskResultStatus.SUCCESSFUL
        # Each run of the function sends task_started (documented in the guide).
        assert seen == [
            ("started", TaskResultStatus.RUNNING),
            ("started", TaskResultStatus.RUNNING),
            ("finished", TaskResultStatus.SUCCESSFUL),
        ]
    finally:
        task_started.disconnect(dispatch_uid="test-suspended-started")
        task_finished.disconnect(dispatch_uid="test-suspended-finished")
