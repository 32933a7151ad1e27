"""A Django ``@task`` enqueued through DurableJobsBackend, run by a real worker process."""

from __future__ import annotations

import pytest

from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.tasks.compat import TaskResultStatus

pytestmark = pytest.mark.e2e


def test_the_example_add_task_runs_in_runjobworker(manage) -> None:  # type: ignore[no-untyped-def]
    from example.tasks import add

    result = add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert Job.objects.get(pk=result.id).type == "example.tasks.add"

    worker = manage("runjobworker", "--burst")
    assert worker.returncode == 0, worker.stderr

    done = add.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL, Job.objects.get(pk=result.id).last_error
    assert done.return_value == 5
    assert done.attempts == 1
    # The worker process, not this one, ran it: its id is the attempt's worker.
    job = Job.objects.get(pk=result.id)
    assert job.status == JobStatus.COMPLETED
    assert done.worker_ids == [job.result["worker_id"]] and done.worker_ids[0]
    # Django's own task_started/task_finished receivers logged in the worker.
    assert f"Task id={result.id} path=example.tasks.add state=SUCCESSFUL" in worker.stderr


def test_a_task_failing_in_the_worker_reads_as_failed(manage) -> None:  # type: ignore[no-untyped-def]
    from example.tasks import add

    result = add.enqueue("two", 3)  # str + int: TypeError in the worker
    worker = manage("runjobworker", "--burst")
    assert worker.returncode == 0, worker.stderr
    runs = 0
    while add.get_result(result.id).status == TaskResultStatus.READY and runs < 20:
        # Retries (OPTIONS max_attempts=3 in the example) wait out a short backoff.
        worker = manage("runjobworker", "--burst")
        assert worker.returncode == 0, worker.stderr
        runs += 1
    done = add.get_result(result.id)
    assert done.status == TaskResultStatus.FAILED
    assert done.attempts == 3
    assert [e.exception_class_path for e in done.errors] == ["builtins.TypeError"] * 3
    assert "can only concatenate str" in done.errors[-1].traceback
