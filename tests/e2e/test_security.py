"""Issue 22, finding 1, as an attacker tried it: over HTTP against the example project's
``runserver``, then a real ``runjobworker --burst``.

A client holding only ``add_job`` (the "enqueue only" client of the REST
guide) POSTed ``durable_jobs.bulk_cancel`` with a filter of every pending
job, and the next worker cancelled them all. Now the door refuses the type
(400, naming it) and the worker finds nothing of the sort to run.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus
from tests.factories import make_user
from tests.ports import free_port

from .helpers import MANAGE, ROOT, Workers, queue_database_env, test_database_url, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


class Server:
    """The example project's ``manage.py runserver`` on the test database."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.log = log
        env = {
            **os.environ,
            "DATABASE_URL": test_database_url(),
            **queue_database_env(),
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
            "DJANGO_DEBUG": "1",  # plain HTTP, as the demo serves it
        }
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(MANAGE), "runserver", f"127.0.0.1:{self.port}", "--noreload"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def request(
        self, method: str, path: str, body: object = None, token: str = ""
    ) -> tuple[int, dict[str, object]]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            headers = {"Content-Type": "application/json"}
            if token:
                headers["Authorization"] = f"Token {token}"
            conn.request(method, path, json.dumps(body) if body is not None else None, headers)
            response = conn.getresponse()
            text = response.read()
            return response.status, json.loads(text) if text else {}
        finally:
            conn.close()

    def wait_up(self) -> None:
        def up() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                return self.request("GET", "/api/health")[0] == 200
            except OSError:
                return False

        wait_for(up, 60, "the example project's runserver to answer")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(tmp_path / "runserver.log")
    try:
        running.wait_up()
        yield running
    finally:
        running.stop()


def test_an_enqueue_only_client_cannot_cancel_every_pending_job(
    server: Server, workers: Workers
) -> None:
    # Pending, not yet runnable: what a bulk cancel of "status: pending" would take.
    waiting = [enqueue("example.echo", {"i": i}, delay=timedelta(hours=1)).job.pk for i in range(5)]
    token = Token.objects.create(user=make_user("partner", "add_job", staff=False)).key

    status, answer = server.request(
        "POST",
        "/api/jobs",
        {
            "type": "durable_jobs.bulk_cancel",
            "payload": {"filter": {"status": "pending"}, "requested_by": "the admin"},
            "idempotency_key": "cancel-everything",
        },
        token,
    )
    assert status == 400, answer
    assert answer["error"] == "invalid"
    detail = answer["detail"]
    assert isinstance(detail, dict) and list(detail) == ["type"]
    assert "durable_jobs.bulk_cancel" in detail["type"][0]

    # What the client may do still works: a job of a registered type, which the worker runs.
    status, receipt = server.request(
        "POST",
        "/api/jobs",
        {"type": "example.echo", "payload": {"ok": True}, "idempotency_key": "fine"},
        token,
    )
    assert status == 201, receipt
    assert "payload" not in receipt and "status" not in receipt  # a receipt: add_job only

    worker = workers.start("--burst", "--concurrency", "2", "--poll-interval", "0.1")
    assert worker.wait(120) == 0, workers.output()
    assert Job.objects.get(pk=receipt["id"]).status == JobStatus.COMPLETED
    assert not Job.objects.filter(type__startswith="durable_jobs.").exists()
    statuses = dict(Job.objects.filter(pk__in=waiting).values_list("pk", "status"))
    assert statuses == dict.fromkeys(waiting, JobStatus.PENDING)
