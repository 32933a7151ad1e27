"""The admin's Workers page: what each heartbeat says (slots in use, version), live
workers first, stale ones flagged."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from django_durable_jobs import __version__, db, enqueue
from django_durable_jobs.models import WorkerListener, WorkerProcess
from tests.factories import RunningWorker, wait_until, worker_config
from tests.testapp.jobs import gate
from tests.testapp.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = "/admin/durable_jobs/workerprocess/"


def add_worker(worker_id: str, heartbeat_age: float, **fields: object) -> None:
    now = timezone.now()
    WorkerProcess.objects.create(
        id=worker_id,
        host="h",
        pid=1,
        queues=["emails"],
        concurrency=4,
        lease_seconds=30.0,
        started_at=now - timedelta(hours=1),
        last_heartbeat=now - timedelta(seconds=heartbeat_age),
        **fields,
    )


def test_the_heartbeat_writes_the_slots_in_use_and_the_version() -> None:
    name = f"gate-{uuid.uuid4().hex[:6]}"
    running = RunningWorker(worker_config(burst=False, concurrency=3))
    worker = running.worker
    try:
        for _ in range(2):
            enqueue("tests.gated", {"gate": name})
        wait_until(lambda: Execution.objects.count() == 2, what="two jobs running")
        worker.maintenance.heartbeat()
        row = WorkerProcess.objects.get(pk=worker.config.worker_id)
        assert (row.slots_in_use, row.concurrency, row.version) == (2, 3, __version__)
        gate(name).set()
        wait_until(lambda: not worker.attempts.busy(), what="the jobs to end")
        worker.maintenance.heartbeat()
        assert WorkerProcess.objects.get(pk=worker.config.worker_id).slots_in_use == 0
    finally:
        gate(name).set()
        running.stop()


def test_the_page_lists_live_workers_first_and_flags_stale_ones(admin_client: Client) -> None:
    add_worker("a-gone", 600, slots_in_use=4, version="0.0.9")
    add_worker("b-live", 2, slots_in_use=3, version=__version__)
    add_worker("c-live", 5)
    html = admin_client.get(WORKERS).content.decode()
    order = re.findall(r'<a href="[^"]+/([\w-]+)/change/">', html)
    assert order == ["b-live", "c-live", "a-gone"]
    rows = dict(re.findall(r'/([\w-]+)/change/">.*?</th>(.*?)</tr>', html, re.S))
    assert '<td class="field-slots">3 / 4</td>' in rows["b-live"]
    assert f'<td class="field-version">{__version__}</td>' in rows["b-live"]
    assert "stale" not in rows["b-live"] and "s ago" in rows["b-live"]
    assert "stale</strong> 10 min ago" in rows["a-gone"]
    assert '<td class="field-version">0.0.9</td>' in rows["a-gone"]


def test_the_page_says_which_workers_sleep_and_which_are_awake(admin_client: Client) -> None:
    add_worker("b-asleep", 2)
    add_worker("c-awake", 2)
    add_worker("d-burst", 2)
    try:
        db.mark_listener("default", "b-asleep", None, sleeping=True, forget_after_seconds=60)
        db.mark_listener("default", "c-awake", ["emails"], sleeping=False, forget_after_seconds=60)
        html = admin_client.get(WORKERS).content.decode()
        cells = dict(
            re.findall(r'/([\w-]+)/change/">.*?<td class="field-listening">(.*?)</td>', html, re.S)
        )
        assert cells["b-asleep"] == "asleep, woken by NOTIFY (0 s)"
        assert cells["c-awake"] == "awake, claiming on its own every few ms (0 s)"
        assert cells["d-burst"] == "-"
    finally:
        WorkerListener.objects.filter(worker_id__in=["b-asleep", "c-awake"]).delete()


def test_a_running_worker_shows_asleep_once_it_listens(admin_client: Client) -> None:
    running = RunningWorker(worker_config(burst=False))
    worker_id = running.worker.config.worker_id
    try:
        wait_until(
            lambda: WorkerListener.objects.filter(worker_id=worker_id, sleeping=True).exists(),
            what="the worker's mark",
        )
        running.worker.maintenance.heartbeat()
        html = admin_client.get(WORKERS).content.decode()
        cells = dict(
            re.findall(
                r'/([\w.:-]+)/change/">.*?<td class="field-listening">(.*?)</td>', html, re.S
            )
        )
        assert cells[worker_id].startswith("asleep, woken by NOTIFY")
    finally:
        running.stop()
    assert not WorkerListener.objects.filter(worker_id=worker_id).exists()
