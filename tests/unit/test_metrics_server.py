from __future__ import annotations

import argparse
import select
import socket
import threading
import time
import types
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from django_durable_jobs import doctor, metrics
from django_durable_jobs.db.health import HorizonHolder, TableHealth, VacuumSettings
from django_durable_jobs.management.commands.runjobworker import Command, port
from django_durable_jobs.worker.metrics_server import MetricsServer

#: A bound for waits on an event that should come in well under a second:
#: it only turns a hang into a failure, nothing asserts how long a wait took.
PATIENCE_SECONDS = 30
#: A database-health reading (metrics.DatabaseHealthCollector), without a database.
HELD_42_SECONDS = doctor.Reading(
    holders=[
        HorizonHolder("session", "7", 7, "psql", "bob", None, "idle in transaction",
                      "client backend", None, None, 10, 42.0, False)
    ],
    hidden=[],
    tables=[TableHealth("durable_jobs_job", 500, 500, None, None, None, True, None)],
    settings=VacuumSettings(True, True, 50, 0.2, "1min", 150000, True),
)  # fmt: skip


def fetch(url: str) -> tuple[int, bytes]:
    try:
        # S310: the tests' own http://127.0.0.1 URLs, never a file: or custom scheme.
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
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
    monkeypatch.setattr(doctor, "cached_reading", lambda alias=None: HELD_42_SECONDS)
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
        assert b"durable_jobs_db_horizon_age_seconds 42.0" in body
        assert b'durable_jobs_db_dead_tuples{table="durable_jobs_job"} 500.0' in body
        assert b'durable_jobs_db_dead_tuple_ratio{table="durable_jobs_job"} 0.5' in body
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


def handler_threads() -> int:
    """Threads serving a connection (socketserver names them after the method they run)."""
    return sum("process_request_thread" in t.name for t in threading.enumerate())


def wait_until(condition: Callable[[], bool], what: str) -> None:
    give_up = time.monotonic() + PATIENCE_SECONDS
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def closed_by_the_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (EOF or reset), without blocking."""
    try:
        return sock.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_idle_connections_take_a_bounded_number_of_threads_then_time_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """200 idle connections once took a worker from 7 to 207 threads, for good."""
    assert metrics._collector is not None
    monkeypatch.setattr(metrics._collector, "rows", lambda: [])
    monkeypatch.setattr(doctor, "cached_reading", lambda alias=None: HELD_42_SECONDS)
    server = MetricsServer("127.0.0.1", 0, lambda: True, max_threads=4, idle_timeout=0.5)
    server.start()
    idle: list[socket.socket] = []
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert handler_threads() == 0
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(60)]
        most = 0
        open_ = set(idle)
        give_up = time.monotonic() + PATIENCE_SECONDS
        # Those beyond the limit are closed at once, the others when they time out.
        while open_:
            most = max(most, handler_threads())
            assert time.monotonic() < give_up, f"{len(open_)} idle connections still open"
            readable, _, _ = select.select(list(open_), [], [], 0.05)
            open_ -= {sock for sock in readable if closed_by_the_server(sock)}
        assert 1 <= most <= 4
        wait_until(lambda: handler_threads() == 0, "the handler threads to end")
        assert fetch(f"{base}/healthz") == (200, b"ok\n")
        assert fetch(f"{base}/metrics")[0] == 200
    finally:
        for sock in idle:
            sock.close()
        server.stop()


def test_a_connection_that_trickles_is_closed_at_its_deadline() -> None:
    server = MetricsServer("127.0.0.1", 0, lambda: True, idle_timeout=1.0, max_seconds=1.5)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            closed = False
            give_up = time.monotonic() + PATIENCE_SECONDS
            # A byte of the request line every 0.2 s: never idle for a second.
            for byte in iter(lambda: b"G", None):
                assert time.monotonic() < give_up, "the trickling connection is still open"
                try:
                    sock.sendall(byte)
                except OSError:
                    closed = True
                if closed or closed_by_the_server(sock):
                    break
                time.sleep(0.2)
        wait_until(lambda: handler_threads() == 0, "the handler thread to end")
        assert fetch(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
    finally:
        server.stop()


def test_runjobworker_binds_the_metrics_server_to_this_host_by_default() -> None:
    command = Command()
    options = vars(command.create_parser("manage.py", "runjobworker").parse_args(
        ["--metrics-port", "1"]
    ))  # fmt: skip
    assert options["metrics_host"] == "127.0.0.1"
    options["metrics_port"] = 0  # any free port (the parser refuses 0)
    worker = types.SimpleNamespace(healthy=lambda: True, health_notes=lambda: [])
    server = command._metrics_server(options, worker)  # type: ignore[arg-type]
    assert server is not None
    try:
        assert server._server.server_address[0] == "127.0.0.1"
    finally:
        server.stop()
