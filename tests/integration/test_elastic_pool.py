"""The elastic pool (``--concurrency 2-8``), in this process, on the real PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
from django.db.models import Count
from prometheus_client import REGISTRY

from django_durable_jobs import enqueue_many
from django_durable_jobs.models import Job, JobStatus, WorkerProcess
from django_durable_jobs.worker import Worker, WorkerConfig
from tests.factories import (
    WAIT_SECONDS,
    RunningWorker,
    handler_threads,
    join_handler_threads,
    worker_config,
)
from tests.factories import wait_until as wait_for
from tests.testapp.jobs import gate
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


def config(**overrides: object) -> WorkerConfig:
    values: dict[str, object] = {
        "burst": False,
        "concurrency": 8,
        "poll_interval": 0.1,
        "lease_seconds": 3.0,
        "grace_period": 10.0,
        "worker_id": f"pool-{uuid.uuid4().hex[:6]}",
        "scale_down_after": 1.0,
    }
    return worker_config(**{**values, **overrides})


def gated(count: int, name: str, queue: str = "default") -> list[uuid.UUID]:
    """Jobs that run until the gate ``name`` opens."""
    results = enqueue_many(
        [{"type": "tests.gated", "queue": queue, "payload": {"gate": name}}] * count
    )
    return [result.job.pk for result in results]


def backlog(count: int, sleep: float, queue: str = "default") -> list[uuid.UUID]:
    results = enqueue_many(
        [{"type": "tests.concurrent", "queue": queue, "payload": {"sleep": sleep}}] * count
    )
    return [result.job.pk for result in results]


def assert_each_ran_exactly_once(ids: list[uuid.UUID]) -> None:
    completed = Job.objects.filter(pk__in=ids, status=JobStatus.COMPLETED, attempts=1)
    assert completed.count() == len(ids)
    runs = Execution.objects.filter(job_id__in=ids).values("job_id").annotate(n=Count("id"))
    assert sorted(r["n"] for r in runs) == [1] * len(ids)


def gauge() -> float | None:
    return REGISTRY.get_sample_value("durable_jobs_worker_slots")


class Running(RunningWorker):
    """A Worker on a thread of its own; stopped (gracefully) at the end."""

    def stop(self, timeout: float = 30) -> int | None:
        code = super().stop(timeout)
        assert code == 0
        return code


@pytest.fixture
def running() -> Callable[[Worker], Running]:
    started: list[Running] = []

    def start(worker: Worker) -> Running:
        started.append(Running(worker))
        return started[-1]

    yield start  # type: ignore[misc]
    for each in started:
        if each.thread.is_alive():
            each.stop()


def test_the_pool_grows_under_a_backlog_and_shrinks_when_idle(
    running: Callable[[Worker], Running],
) -> None:
    threads_before = handler_threads()
    worker = Worker(config(concurrency=2, max_concurrency=8))
    ids = backlog(40, 0.4)
    run = running(worker)
    wait_for(lambda: worker.slots == 2, WAIT_SECONDS, "the pool to start at its minimum")
    # The backlog keeps every slot busy: the pool grows to its maximum.
    wait_for(lambda: worker.slots == 8, WAIT_SECONDS, "the pool to grow to 8")
    # The gauge is set just after the pool grew (a loaded machine showed 7 between).
    wait_for(lambda: gauge() == 8, WAIT_SECONDS, "the slots gauge to show 8")
    peak = 0

    def sampled_until_done() -> bool:
        nonlocal peak
        assert worker.slots <= 8
        peak = max(peak, len(handler_threads() - threads_before))
        return Job.objects.filter(pk__in=ids, status=JobStatus.COMPLETED).count() == len(ids)

    wait_for(sampled_until_done, 60, "the backlog", interval=0.05)
    assert peak <= 8
    # Quiet for scale_down_after (1 s): back to the minimum, threads stopped.
    wait_for(lambda: worker.slots == 2, WAIT_SECONDS, "the pool to shrink to 2")
    wait_for(lambda: gauge() == 2, WAIT_SECONDS, "the slots gauge to show 2")
    wait_for(
        lambda: len(handler_threads() - threads_before) == 2, WAIT_SECONDS, "idle threads to exit"
    )
    # The workers table shows the current size from the next heartbeat (every 1 s).
    wait_for(
        lambda: WorkerProcess.objects.filter(id=worker.config.worker_id, concurrency=2).exists(),
        WAIT_SECONDS,
        "the workers table to show 2 slots",
    )
    # The smaller pool still works, and can grow again.
    more = backlog(12, 0.3)
    wait_for(lambda: worker.slots > 2, WAIT_SECONDS, "the pool to grow again")
    wait_for(
        lambda: Job.objects.filter(pk__in=more, status=JobStatus.COMPLETED).count() == 12,
        30,
        "the second backlog",
    )
    run.stop()
    assert_each_ran_exactly_once(ids + more)
    assert max(Job.objects.get(pk=pk).result["concurrent"] for pk in ids) <= 8
    assert gauge() == 0
    join_handler_threads(10, besides=threads_before)


def test_a_busy_slot_is_never_stopped_a_job_runs_to_its_end(
    running: Callable[[Worker], Running],
) -> None:
    name = f"long-{uuid.uuid4().hex}"
    long = gated(2, name)
    Job.objects.filter(pk__in=long).update(priority=1)  # claimed first
    short = backlog(6, 0.3)
    worker = Worker(config(concurrency=1, max_concurrency=4))
    try:
        running(worker)
        wait_for(lambda: worker.slots == 4, WAIT_SECONDS, "the pool to grow to 4")
        wait_for(
            lambda: Job.objects.filter(pk__in=short, status=JobStatus.COMPLETED).count() == 6,
            WAIT_SECONDS,
            "the short jobs",
        )
        # The long jobs run until their gate opens: the pool shrinks around
        # them, to the two slots they use, not to its minimum of one.
        wait_for(lambda: worker.slots == 2, WAIT_SECONDS, "the pool to shrink to 2")
        assert Job.objects.filter(pk__in=long, status=JobStatus.RUNNING).count() == 2
        # Another quiet period: the group looks again (a new window starts,
        # or it shrinks), and keeps its two busy slots.
        (group,) = worker._groups
        window = group.next_shrink_at()
        wait_for(lambda: group.next_shrink_at() != window, WAIT_SECONDS, "another quiet period")
        assert worker.slots == 2
    finally:
        gate(name).set()
    wait_for(
        lambda: Job.objects.filter(pk__in=long, status=JobStatus.COMPLETED).count() == 2,
        WAIT_SECONDS,
        "the long jobs",
    )
    wait_for(lambda: worker.slots == 1, WAIT_SECONDS, "the pool to shrink to 1")
    assert_each_ran_exactly_once([*long, *short])


def test_shutdown_drains_a_grown_pool_and_releases_what_is_left(
    running: Callable[[Worker], Running],
) -> None:
    threads_before = handler_threads()
    name = f"slow-{uuid.uuid4().hex}"
    slow = gated(6, name)
    quick = backlog(6, 0.2)
    worker = Worker(config(concurrency=2, max_concurrency=12, grace_period=0.5))
    try:
        run = running(worker)
        wait_for(lambda: Execution.objects.filter(job_id__in=slow).count() == 6, 30, "all to start")
        wait_for(
            lambda: Job.objects.filter(pk__in=quick, status=JobStatus.COMPLETED).count() == 6,
            30,
            "the quick jobs",
        )
        assert worker.slots >= 6
        run.stop()
        # The slow jobs outlived the grace period: given back, attempt not counted.
        assert Job.objects.filter(pk__in=slow, status=JobStatus.PENDING, attempts=0).count() == 6
        assert not Job.objects.filter(status=JobStatus.RUNNING).exists()
        assert_each_ran_exactly_once(quick)
    finally:
        gate(name).set()
    # The abandoned handlers end when their gate opens; once their threads
    # have exited, their late outcomes have been dropped.
    join_handler_threads(15, besides=threads_before)
    assert Job.objects.filter(pk__in=slow, status=JobStatus.PENDING, attempts=0).count() == 6


def test_elastic_slots_per_queue(running: Callable[[Worker], Running]) -> None:
    emails = backlog(20, 0.3, queue="emails")
    webhooks = backlog(4, 0.3, queue="webhooks")
    worker = Worker(config(queue_slots={"emails": (1, 3), "webhooks": 1}))
    run = running(worker)
    wait_for(lambda: worker.slots_by_group()["emails"] == 3, WAIT_SECONDS, "emails to grow to 3")
    assert worker.slots_by_group()["webhooks"] == 1  # a fixed group never grows
    wait_for(lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == 24, 30, "every job")
    wait_for(
        lambda: worker.slots_by_group() == {"emails": 1, "webhooks": 1}, WAIT_SECONDS, "shrinking"
    )
    run.stop()
    assert_each_ran_exactly_once(emails + webhooks)
    results = Job.objects.values_list("queue", "result")
    assert max(r["concurrent"] for q, r in results if q == "emails") <= 3
    assert max(r["concurrent"] for q, r in results if q == "webhooks") == 1


def test_a_fixed_pool_never_changes_size(running: Callable[[Worker], Running]) -> None:
    ids = backlog(16, 0.1)
    worker = Worker(config(concurrency=3))
    running(worker)
    sizes = set()

    def sampled_until_done() -> bool:
        sizes.add(worker.slots)
        return Job.objects.filter(pk__in=ids, status=JobStatus.COMPLETED).count() == 16

    wait_for(sampled_until_done, 30, "the jobs")
    assert sizes == {3}


def test_bad_pool_sizes_are_clear_errors() -> None:
    for options, message in [
        ({"concurrency": 0}, "concurrency: slots must satisfy 1 <= minimum"),
        ({"concurrency": 4, "max_concurrency": 2}, "got 4-2"),
        ({"concurrency": 2, "max_concurrency": 1001}, "maximum <= 1000"),
        ({"scale_down_after": 0}, "scale_down_after must be > 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            config(**options)


def test_racing_elastic_and_per_queue_workers_run_each_job_exactly_once() -> None:
    ids = backlog(90, 0.05, queue="emails") + backlog(90, 0.05, queue="default")
    workers = [
        Worker(config(burst=True, concurrency=1, max_concurrency=6)),
        Worker(config(burst=True, queue_slots={"emails": (1, 3), "default": 2})),
        Worker(config(burst=True, concurrency=2, max_concurrency=4, queues=frozenset({"emails"}))),
    ]
    codes: list[int] = []
    threads = [threading.Thread(target=lambda w=w: codes.append(w.run())) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert codes == [0, 0, 0]
    assert_each_ran_exactly_once(ids)
    # Each took part: the claims raced, SKIP LOCKED kept them apart.
    assert Execution.objects.values("worker").distinct().count() == 3
