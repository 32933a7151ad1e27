"""``GET /api/health``: live workers from heartbeats, the oldest pending job's age;
and the read-only workers admin."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, WorkerProcess
from django_durable_jobs.worker import Worker
from tests.factories import worker_config as config

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = "/admin/durable_jobs/workerprocess/"


def add_worker(worker_id: str, heartbeat_age: float, lease: float = 30.0) -> None:
    now = timezone.now()
    WorkerProcess.objects.create(
        id=worker_id,
        host="h",
        pid=1,
        queues=["emails"],
        concurrency=4,
        lease_seconds=lease,
        started_at=now - timedelta(hours=1),
        last_heartbeat=now - timedelta(seconds=heartbeat_age),
    )


def test_live_workers_are_those_with_a_heartbeat_younger_than_their_lease() -> None:
    add_worker("fresh", 5)
    add_worker("late-but-alive", 25)
    add_worker("dead", 31)
    add_worker("short-lease-dead", 5, lease=3.0)
    body = Client().get("/api/health").json()
    assert body["live_workers"] == 2


def test_the_oldest_runnable_pending_job_age() -> None:
    job = enqueue("tests.record").job
    enqueue("tests.record", delay=timedelta(hours=1))  # not runnable yet: not late
    Job.objects.filter(pk=job.pk).update(available_at=timezone.now() - timedelta(minutes=10))
    body = Client().get("/api/health").json()
    assert 590 < body["oldest_pending_age_seconds"] < 700


def test_a_worker_registers_on_its_heartbeat_and_leaves_at_a_graceful_stop() -> None:
    add_worker("killed-yesterday", 25 * 3600)
    add_worker("killed-an-hour-ago", 3600)
    worker = Worker(config(burst=False, concurrency=2, queues=frozenset({"x"})))
    worker.maintenance.heartbeat()
    # A day-old row of a killed worker is forgotten; a recent one is kept for the admin.
    assert not WorkerProcess.objects.filter(pk="killed-yesterday").exists()
    WorkerProcess.objects.filter(pk="killed-an-hour-ago").delete()
    row = WorkerProcess.objects.get()
    assert (row.id, row.queues, row.concurrency) == (worker.config.worker_id, ["x"], 2)
    first = row.last_heartbeat
    worker.maintenance.heartbeat()
    assert WorkerProcess.objects.get().last_heartbeat > first
    assert Client().get("/api/health").json()["live_workers"] == 1
    worker.presence.remove()
    assert not WorkerProcess.objects.exists()


def test_the_admin_lists_workers_read_only(admin_client: Client) -> None:
    add_worker("w-1", 2)
    add_worker("w-2", 300)
    response = admin_client.get(WORKERS)
    assert response.status_code == 200
    content = response.content.decode()
    assert "w-1" in content and "w-2" in content and "emails" in content
    assert admin_client.get(f"{WORKERS}add/").status_code == 403
    detail = admin_client.get(f"{WORKERS}w-1/change/")
    assert detail.status_code == 200
    assert b'name="_save"' not in detail.content
