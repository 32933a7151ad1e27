"""One shape for the package's background threads: name, start, stop(timeout), alive.

Each of the worker's threads (the completer, the watchdog, the maintenance,
the listener, the scheduler, the metrics server) and ``wait()``'s listener
is a ``Service``: it names its thread, starts it, and on ``stop()`` asks it
to end and waits for it up to a timeout. The worker starts its services in
one order and, at shutdown, stops them in the reverse order
(``ServiceSet``), with its own steps (the grace period, the releases)
between them.
"""

from __future__ import annotations

import threading


class Service:
    """A daemon thread running ``_run()`` until ``_request_stop()`` asks it to end.

    A subclass gives ``_run`` and ``_request_stop`` (set an event, notify a
    condition) and, when stopping takes more than that, extends ``stop``.
    """

    #: How long ``stop()`` waits for the thread by default (seconds).
    stop_timeout = 5.0

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the thread to end and wait up to ``timeout`` (None: ``stop_timeout``).

        True when it ended (or never started).
        """
        self._request_stop()
        return self._join(self.stop_timeout if timeout is None else timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _join(self, timeout: float) -> bool:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        return not self.alive

    def _run(self) -> None:
        raise NotImplementedError

    def _request_stop(self) -> None:
        raise NotImplementedError


class ServiceSet:
    """Services started in order, stopped in the reverse order."""

    def __init__(self) -> None:
        self._started: list[Service] = []

    def start(self, *services: Service | None) -> None:
        """Start ``services`` in this order (None: a service this worker does not run)."""
        for service in services:
            if service is not None:
                service.start()
                self._started.append(service)

    def stop_through(self, service: Service | None, timeout: float | None = None) -> bool:
        """Stop, newest first, the services started after ``service``, then ``service``.

        ``timeout`` is ``service``'s own (the others take their default).
        True when ``service`` ended cleanly; a ``service`` not started (or
        None) stops nothing.
        """
        if service is None or service not in self._started:
            return True
        while True:
            last = self._started.pop()
            if last is service:
                return last.stop(timeout)
            last.stop()

    @property
    def names(self) -> list[str]:
        """The running services' names, oldest first (for logs and tests)."""
        return [service.name for service in self._started]
