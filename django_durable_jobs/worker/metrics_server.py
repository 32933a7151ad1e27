"""``runjobworker --metrics-port``: ``/metrics`` and ``/healthz`` on a thread of their own.

A worker is not a web process, so it serves its own metrics (each worker
process its own port; Prometheus scrapes each). ``/healthz`` answers 200
while the worker's loop runs and its database connection works, 503
otherwise, for a Kubernetes liveness probe or a systemd watchdog script.
Lines after the first qualify the answer without changing it:
``notifications: not arriving ...`` when the worker's LISTEN connection
hears nothing (``probe.py``): the worker works, by polling, so it stays 200.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .. import metrics

StartResponse = Callable[..., Any]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
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


class MetricsServer:
    """The HTTP server, started on a daemon thread; ``stop()`` closes the port."""

    def __init__(
        self,
        host: str,
        port: int,
        healthy: Callable[[], bool],
        notes: Callable[[], list[str]] | None = None,
    ) -> None:
        # Django's autoreloader runs the command twice (parent and child); the
        # second bind would fail. Same guard as django-prometheus' port export.
        if os.environ.get("RUN_MAIN") == "true":
            raise RuntimeError(
                "--metrics-port cannot be used under Django's autoreloader (RUN_MAIN is set)"
            )
        self._server = make_server(
            host, port, make_app(healthy, notes), server_class=_Server, handler_class=_QuietHandler
        )
        self.port = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="durable-jobs-metrics", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
