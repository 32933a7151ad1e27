"""``wait_result()`` and ``await_result()``: waiting for a Django task's result.

On Django 6 and on Django 5.2 with the ``django-tasks`` backport; the
worker runs in this process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from django_durable_jobs.models import Job
from django_durable_jobs.tasks import await_result, wait_result
from django_durable_jobs.tasks.compat import (
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
)
from tests.factories import RunningWorker, worker_config
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker() -> Iterator[RunningWorker]:
    running = RunningWorker(worker_config(burst=False))
    try:
        yield running
    finally:
        running.stop()


def test_wait_result_refreshes_the_result_in_place_once_the_task_finished(
    worker: RunningWorker,
) -> None:
    result = tasks.add.enqueue(2, 3)
    assert wait_result(result, timeout=20) is result
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.finished_at is not None


def test_await_result_is_the_async_twin(worker: RunningWorker) -> None:
    result = tasks.add.enqueue(4, 5)

    async def main() -> Any:
        try:
            return await await_result(result, timeout=20)
        finally:
            await sync_to_async(connections.close_all)()

    assert asyncio.run(main()) is result
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 9


def test_a_timeout_leaves_the_result_as_it_was() -> None:
    result = tasks.add.enqueue(1, 1)
    with pytest.raises(TimeoutError):
        wait_result(result, timeout=0.2)
    assert result.status == TaskResultStatus.READY


def test_a_pruned_task_is_task_result_does_not_exist() -> None:
    result = tasks.add.enqueue(1, 1)
    Job.objects.filter(pk=result.id).delete()
    with pytest.raises(TaskResultDoesNotExist):
        wait_result(result, timeout=1)


def test_only_a_durable_backend_s_results_can_be_waited_for() -> None:
    immediate = tasks.add.using(backend="immediate").enqueue(1, 2)
    assert task_backends["immediate"].alias == immediate.backend
    with pytest.raises(ValueError, match="only a DurableJobsBackend"):
        wait_result(immediate, timeout=1)
    with pytest.raises(TypeError, match="TaskResult"):
        wait_result("not a result", timeout=1)  # type: ignore[arg-type]
