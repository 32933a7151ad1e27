"""Slots per queue (``--queues emails:2,default:3``), in this process, on the real PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any
from unittest import mock

import pytest
from django.db.models import Count

from django_durable_jobs import db as gateway
from django_durable_jobs import enqueue_many
from django_durable_jobs.constants import CLAIM_QUEUE_INDEX
from django_durable_jobs.db.queries import QUERIES
from django_durable_jobs.db.records import ClaimedJob
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker import Worker, WorkerConfig
from django_durable_jobs.worker.pool import Slots
from tests.factories import RunningWorker, queue_connection, wait_until, worker_config
from tests.testapp.jobs import gate
from tests.testapp.models import Execution

from .helpers import explain, seq_scanned

pytestmark = pytest.mark.django_db(transaction=True)


def config(**overrides: object) -> WorkerConfig:
    values: dict[str, object] = {
        "concurrency": 8,
        "lease_seconds": 10.0,
        "worker_id": f"slots-{uuid.uuid4().hex[:6]}",
    }
    return worker_config(**{**values, **overrides})


def backlog(queue: str, count: int, sleep: float) -> list[uuid.UUID]:
    results = enqueue_many(
        [{"type": "tests.concurrent", "queue": queue, "payload": {"sleep": sleep}}] * count
    )
    return [result.job.pk for result in results]


def peak(queue: str) -> int:
    """The most jobs of ``queue`` this process ran at once (each job's result says)."""
    return max(
        job.result["concurrent"]
        for job in Job.objects.filter(queue=queue, status=JobStatus.COMPLETED)
    )


def assert_each_ran_exactly_once(ids: list[uuid.UUID]) -> None:
    assert Job.objects.filter(pk__in=ids, status=JobStatus.COMPLETED, attempts=1).count() == len(
        ids
    )
    runs = Execution.objects.filter(job_id__in=ids).values("job_id").annotate(n=Count("id"))
    assert sorted(r["n"] for r in runs) == [1] * len(ids)


def test_no_queue_ever_runs_more_jobs_than_its_slots() -> None:
    ids = backlog("emails", 12, 0.15) + backlog("default", 15, 0.15)
    worker = Worker(config(queue_slots={"emails": 2, "default": 3}))
    assert worker.run() == 0
    assert_each_ran_exactly_once(ids)
    # Both reached their slots (a backlog of 12 and 15), neither went past them.
    assert peak("emails") == 2
    assert peak("default") == 3
    assert worker.slots_by_group() == {"emails": 0, "default": 0}  # stopped


def test_a_queue_makes_progress_while_another_is_saturated_with_slow_jobs() -> None:
    name = f"webhooks-{uuid.uuid4().hex}"
    slow = [
        result.job.pk
        for result in enqueue_many(
            [{"type": "tests.gated", "queue": "webhooks", "payload": {"gate": name}}] * 6
        )
    ]
    running = RunningWorker(config(queue_slots={"webhooks": 2, "emails": 2}, burst=False))
    try:
        wait_until(lambda: Execution.objects.filter(job_id__in=slow).count() == 2)
        # Both webhook slots are busy until the gate opens, four more webhooks
        # wait; emails enqueued now run all the same, in their own slots.
        fast = backlog("emails", 10, 0.0)
        done = Job.objects.filter(pk__in=fast, status=JobStatus.COMPLETED)
        wait_until(lambda: done.count() == 10, what="the emails")
        # The webhooks never took more than their two slots meanwhile.
        assert Execution.objects.filter(job_id__in=slow).count() == 2
        assert Job.objects.filter(pk__in=slow, status=JobStatus.RUNNING).count() == 2
    finally:
        gate(name).set()
        running.stop()
    assert_each_ran_exactly_once(fast)
    assert peak("emails") <= 2
    # Shutdown let the two running webhooks finish or gave them back: none is left running.
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()


def test_each_claim_asks_each_queue_for_its_own_free_slots_in_one_statement() -> None:
    backlog("emails", 8, 0.05)
    backlog("default", 8, 0.05)
    calls: list[dict[str, object]] = []
    original = gateway.claim_per_queue

    def spy(using: str, **params: Any) -> list[ClaimedJob]:
        jobs = original(using, **params)
        limits = dict(params["limits"])
        got: dict[str, int] = {}
        for job in jobs:
            got[job.queue] = got.get(job.queue, 0) + 1
        calls.append({"limits": limits, "got": got})
        return jobs

    with (
        mock.patch.object(gateway, "claim_per_queue", spy),
        mock.patch.object(gateway, "claim", side_effect=AssertionError("claim_per_queue only")),
    ):
        Worker(config(queue_slots={"emails": 1, "default": 3})).run()
    assert calls[0]["limits"] == {"emails": 1, "default": 3}
    for call in calls:
        limits, got = call["limits"], call["got"]
        assert all(got[q] <= limits[q] for q in got), call  # type: ignore[index]
        assert set(limits.values()) <= {1, 2, 3}, call  # type: ignore[union-attr]
    assert sum(sum(c["got"].values()) for c in calls) == 16  # type: ignore[union-attr]


def test_queues_without_slots_of_their_own_are_not_served() -> None:
    other = backlog("reports", 3, 0.0)
    ids = backlog("emails", 3, 0.0)
    Worker(config(queue_slots={"emails": 2})).run()
    assert_each_ran_exactly_once(ids)
    assert Job.objects.filter(pk__in=other, status=JobStatus.PENDING).count() == 3


def test_bad_queue_slots_are_clear_errors() -> None:
    for slots, message in [
        ({"emails": 0}, "queue 'emails': slots must satisfy 1 <= minimum"),
        ({"emails": (4, 2)}, "queue 'emails'"),
        ({"bad queue": 2}, "not a valid queue name"),
        ({}, "at least one queue"),
        ({"a": 600, "b": 600}, "add up to 1200"),
    ]:
        with pytest.raises(ValueError, match=message):
            config(queue_slots=slots)
    with pytest.raises(ValueError, match="differ from the queues of queue_slots"):
        config(queue_slots={"emails": 2}, queues=frozenset({"default"}))
    assert config(queue_slots={"emails": (1, 4)}).slots_per_queue == {"emails": Slots(1, 4)}


def test_the_per_queue_claim_uses_the_claim_by_queue_index(big_table: None) -> None:
    params = {
        "worker_id": "w",
        "lease_seconds": 30,
        "queues": ["default", "emails"],
        "limits": [4, 2],
        "total": 6,
        "keyed_types": [],
    }
    plan = explain(QUERIES["claim_jobs_per_queue"], params)
    assert CLAIM_QUEUE_INDEX in plan, plan
    assert "durable_jobs_job" not in seq_scanned(plan), plan


def test_the_per_queue_claim_takes_each_queues_best_jobs_up_to_its_limit(
    big_table: None,
) -> None:
    with queue_connection.cursor() as cursor:
        expected: set[uuid.UUID] = set()
        for queue, limit in (("default", 4), ("emails", 2)):
            cursor.execute(
                """
                SELECT id FROM durable_jobs_job
                WHERE status = 'pending' AND available_at <= now() AND queue = %s
                ORDER BY priority DESC, available_at, created_at LIMIT %s
                """,
                [queue, limit],
            )
            expected |= {row[0] for row in cursor.fetchall()}
        cursor.execute(
            QUERIES["claim_jobs_per_queue"],
            {"worker_id": "w", "lease_seconds": 30, "queues": ["default", "emails"],
             "limits": [4, 2], "total": 6, "keyed_types": []},
        )  # fmt: skip
        rows = cursor.fetchall()
    assert {row[0] for row in rows} == expected
    assert sorted(row[2] for row in rows) == ["default"] * 4 + ["emails"] * 2
    assert all(row[4] == 1 for row in rows)  # the attempt is counted


def test_a_queue_of_few_rows_is_claimed_by_index_past_a_big_backlog(big_table: None) -> None:
    plan = explain(
        QUERIES["claim_jobs_per_queue"],
        {
            "worker_id": "w",
            "lease_seconds": 30,
            "queues": ["small"],
            "limits": [3],
            "total": 3,
            "keyed_types": [],
        },
    )
    assert CLAIM_QUEUE_INDEX in plan, plan
    assert "durable_jobs_job" not in seq_scanned(plan), plan


def test_runjobworker_with_slots_per_queue_through_call_command() -> None:
    from django.core.management import call_command

    ids = backlog("emails", 5, 0.05) + backlog("default", 5, 0.05)
    call_command("runjobworker", burst=True, queues={"emails": 2, "default": (1, 3)})
    assert_each_ran_exactly_once(ids)
    assert peak("emails") <= 2
    assert peak("default") <= 3
