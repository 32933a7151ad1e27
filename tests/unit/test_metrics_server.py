from __future__ import annotations

import argparse
import urllib.error
import urllib.request

import pytest

from django_durable_jobs import metrics
from django_durable_jobs.management.commands.runjobworker import port
from django_durable_jobs.worker.metrics_server import MetricsServer


def fetch(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
        exc.close()
        return exc.code, body


def test_healthz_follows_the_health_callback_and_metrics_are_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert metrics._collector is not None
    monkeypatch.setattr(metrics._collector, "rows", lambda: [("q", "pending", 2, 1.5)])
    healthy = [True]
    server = MetricsServer("127.0.0.1", 0, lambda: healthy[0])
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert fetch(f"{base}/healthz") == (200, b"ok\n")
        healthy[0] = False
        assert fetch(f"{base}/healthz")[0] == 503
        status, body = fetch(f"{base}/metrics")
        assert status == 200
        assert b"durable_jobs_worker_slots" in body
        assert b'durable_jobs_queue_depth{queue="q",status="pending"} 2.0' in body
        assert fetch(f"{base}/other")[0] == 404
    finally:
        server.stop()


def test_healthz_adds_the_notes_on_lines_of_their_own_without_changing_its_status() -> None:
    notes: list[str] = []
    healthy = [True]
    server = MetricsServer("127.0.0.1", 0, lambda: healthy[0], lambda: notes)
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}/healthz"
        assert fetch(base) == (200, b"ok\n")
        notes.append("notifications: not arriving")
        assert fetch(base) == (200, b"ok\nnotifications: not arriving\n")
        healthy[0] = False
        assert fetch(base) == (503, b"unhealthy\nnotifications: not arriving\n")
    finally:
        server.stop()


def test_refuses_to_run_under_the_autoreloader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUN_MAIN", "true")
    with pytest.raises(RuntimeError, match="autoreloader"):
        MetricsServer("127.0.0.1", 0, lambda: True)


@pytest.mark.parametrize("value", ["0", "65536", "http", "-1"])
def test_bad_ports_are_refused(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        port(value)
