"""``runjobworker --metrics-port``: a real worker process, scraped over HTTP."""

from __future__ import annotations

import signal
import socket
import time

import pytest
from django.test import Client

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus, WorkerProcess
from tests.factories import WAIT_SECONDS
from tests.ports import free_port

from .helpers import Workers, database_urls_through, get, sample, wait_for
from .proxy import Proxy

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_worker_serves_metrics_and_healthz(workers: Workers) -> None:
    port = free_port()
    proc = workers.start(
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
        "--concurrency", "2", "--poll-interval", "0.2", "--queues", "wm",
    )  # fmt: skip
    wait_for(lambda: get(port, "/healthz")[0] == 200, 30, "/healthz to answer 200")
    assert sample(port, "durable_jobs_worker_slots") == 2
    wait_for(lambda: WorkerProcess.objects.exists(), WAIT_SECONDS, "the worker's heartbeat row")
    health = Client().get("/api/health").json()
    assert health["live_workers"] == 1

    enqueue("tests.record", queue="wm")
    enqueue("tests.discard", queue="wm")
    processed = "durable_jobs_processed_total"
    wait_for(
        lambda: (
            sample(port, processed, queue="wm", type="tests.record", result="completed") == 1
            and sample(port, processed, queue="wm", type="tests.discard", result="dead") == 1
        ),
        30,
        "the outcomes to be counted",
    )
    assert sample(port, "durable_jobs_in_flight", queue="wm") == 0
    wait_for(  # read from the database, cached for a second or two
        lambda: sample(port, "durable_jobs_queue_depth", queue="wm", status="dead") == 1,
        WAIT_SECONDS,
        "the queue depth to show the dead job",
    )
    assert get(port, "/nope")[0] == 404

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, workers.output()
    assert get(port, "/healthz")[0] == 0  # the port is closed
    assert not WorkerProcess.objects.exists()  # deregistered at a graceful stop


def test_healthz_is_503_while_the_database_is_away(workers: Workers) -> None:
    from django.db import connection

    settings = connection.settings_dict
    proxy = Proxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
    proxy.start()
    workers.env.update(database_urls_through("127.0.0.1", proxy.port))
    port = free_port()
    proc = workers.start(
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
        "--poll-interval", "0.2", "--lease-seconds", "1.5",
    )  # fmt: skip
    wait_for(lambda: get(port, "/healthz")[0] == 200, 30, "/healthz to answer 200")
    proxy.cut()
    cut_at = time.monotonic()
    wait_for(lambda: get(port, "/healthz")[0] == 503, 30, "/healthz to answer 503")
    # As the outage test does: give the proxy's old sockets time to go.
    time.sleep(max(0.0, 4 - (time.monotonic() - cut_at)))
    proxy.start()
    wait_for(lambda: get(port, "/healthz")[0] == 200, 40, "/healthz to recover")
    job = enqueue("tests.record").job
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED, 30, "the job")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, workers.output()


def test_metrics_port_in_use_is_a_clear_error(workers: Workers) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = workers.start("--metrics-port", str(port), "--metrics-host", "127.0.0.1")
        assert proc.wait(30) == 1
    assert "--metrics-port" in workers.output()
