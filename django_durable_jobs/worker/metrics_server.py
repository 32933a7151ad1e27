"""``runjobworker --metrics-port``: ``/metrics`` and ``/healthz`` on a thread of their own.

A worker is not a web process, so it serves its own metrics (each worker
process its own port; Prometheus scrapes each). ``/healthz`` answers 200
while the worker's loop runs and its database connection works, 503
otherwise, for a Kubernetes liveness probe or a systemd watchdog script.
Lines after the first qualify the answer without changing it:
``notifications: not arriving ...`` when the worker's LISTEN connection
hears nothing (``probe.py``): the worker works, by polling, so it stays 200.

It is a small server for a scraper and a probe, not for the internet, and
is built so that it cannot be turned against the worker it lives in: it
binds ``127.0.0.1`` unless ``--metrics-host`` says otherwise, a connection
that sends nothing is dropped after ``IDLE_TIMEOUT_SECONDS`` (one that
trickles is dropped after ``MAX_CONNECTION_SECONDS`` in all), and at most
``MAX_HANDLER_THREADS`` connections are served at once; one beyond them is
closed at once rather than given a thread (a review saw 200 idle
connections take a worker from 7 to 207 threads).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from .. import metrics
from ..services import Service

StartResponse = Callable[..., Any]

#: The address the server binds to unless told otherwise: this host only.
DEFAULT_HOST = "127.0.0.1"
#: A connection whose client sends nothing (or stops sending) for this long is closed.
IDLE_TIMEOUT_SECONDS = 5.0
#: A connection still open this long after it was accepted is closed, however it trickles.
MAX_CONNECTION_SECONDS = 30.0
#: Connections served at once (a scraper and a probe or two need far fewer).
MAX_HANDLER_THREADS = 8

logger = logging.getLogger("django_durable_jobs.worker")


class _Server(ThreadingMixIn, WSGIServer):
    """A thread per connection, but never more than ``max_threads`` of them.

    A connection beyond the limit is closed at once, without a thread and
    without an answer: its client tries again (Prometheus at its next
    scrape, a probe at its next probe) and gets in once the connections
    holding the threads have been answered or have timed out.

    ``idle_timeout`` bounds each read and write; ``max_seconds`` a
    connection's whole life: ``service_actions`` (which ``serve_forever``
    calls twice a second) shuts down the sockets past it, so that a client
    sending a byte every few seconds cannot keep a thread either.
    """

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[WSGIRequestHandler],
        *,
        max_threads: int,
        idle_timeout: float,
        max_seconds: float,
    ) -> None:
        self.idle_timeout = idle_timeout
        self._max_seconds = max_seconds
        self._slots = threading.BoundedSemaphore(max_threads)
        self._deadlines: dict[socket.socket, float] = {}
        self._deadlines_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        with self._deadlines_lock:
            self._deadlines[request] = time.monotonic() + self._max_seconds
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread started: nothing else gives the slot back
            self._forget(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request: Any) -> None:
        with self._deadlines_lock:
            self._deadlines.pop(request, None)
        self._slots.release()

    def service_actions(self) -> None:
        now = time.monotonic()
        with self._deadlines_lock:
            late = [sock for sock, deadline in self._deadlines.items() if deadline <= now]
        for sock in late:
            # Wakes the handler's read or write, which then fails and ends
            # (OSError: the handler closed it meanwhile).
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out or hung up is routine; anything else is logged.

        (socketserver's own prints a traceback on stderr for either.)
        """
        if isinstance(sys.exc_info()[1], OSError):
            logger.debug("Metrics server: connection from %s dropped", client_address[0])
        else:
            logger.exception("Metrics server: error answering %s", client_address[0])


class _QuietHandler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        # Any read or write that waits longer fails, and the connection is closed.
        self.connection.settimeout(getattr(self.server, "idle_timeout", IDLE_TIMEOUT_SECONDS))

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds would flood the worker's log."""


def make_app(
    healthy: Callable[[], bool],
    notes: Callable[[], list[str]] | None = None,
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    metrics_app = metrics.make_wsgi_app() if metrics.ENABLED else None

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            ok = healthy()
            start_response(
                "200 OK" if ok else "503 Service Unavailable",
                [("Content-Type", "text/plain; charset=utf-8")],
            )
            lines = ["ok" if ok else "unhealthy", *(notes() if notes is not None else ())]
            return ["".join(f"{line}\n" for line in lines).encode()]
        if path == "/metrics" and metrics_app is not None:
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]
        if path == "/metrics":
            start_response("501 Not Implemented", [("Content-Type", "text/plain; charset=utf-8")])
            return [
                b"prometheus-client is not installed: pip install django-durable-jobs[metrics]\n"
            ]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


class MetricsServer(Service):
    """The HTTP server, started on a daemon thread; ``stop()`` closes the port.

    ``max_threads``, ``idle_timeout`` and ``max_seconds`` are there for the
    tests; the worker uses the defaults.
    """

    def __init__(
        self,
        host: str,
        port: int,
        healthy: Callable[[], bool],
        notes: Callable[[], list[str]] | None = None,
        *,
        max_threads: int = MAX_HANDLER_THREADS,
        idle_timeout: float = IDLE_TIMEOUT_SECONDS,
        max_seconds: float = MAX_CONNECTION_SECONDS,
    ) -> None:
        # Django's autoreloader runs the command twice (parent and child); the
        # second bind would fail. Same guard as django-prometheus' port export.
        if os.environ.get("RUN_MAIN") == "true":
            raise RuntimeError(
                "--metrics-port cannot be used under Django's autoreloader (RUN_MAIN is set)"
            )
        self._server = _Server(
            (host, port),
            _QuietHandler,
            max_threads=max_threads,
            idle_timeout=idle_timeout,
            max_seconds=max_seconds,
        )
        self._server.set_app(make_app(healthy, notes))
        self.port = self._server.server_port
        super().__init__("durable-jobs-metrics")

    def _run(self) -> None:
        self._server.serve_forever()

    def _request_stop(self) -> None:
        if self.alive:  # shutdown() waits for serve_forever(): only once it runs
            self._server.shutdown()

    def stop(self, timeout: float | None = None) -> bool:
        stopped = super().stop(timeout)
        self._server.server_close()
        return stopped
