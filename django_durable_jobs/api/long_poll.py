"""``GET /api/jobs/{id}?wait=S``: answer once the job is finished, or after S seconds.

A waiting request holds its server thread (and its database connection)
for up to S seconds: under WSGI, and under ASGI too (DRF views are
synchronous), that is one thread of the process's pool. So a process
holds at most ``API_MAX_WAITING_REQUESTS`` of them at once; one more that
would have to wait is answered 503 with ``Retry-After`` at once (a job
already finished is answered 200 whatever the count: it waits for
nothing). 503, not 200 with the current state: a client that loops on
``?wait=`` would turn an immediate 200 into a tight loop of requests, the
more so the busier the server; 503 and ``Retry-After`` make it back off.

One client cannot take them all: a user (or, unauthenticated, a client
address) holds at most ``API_MAX_WAITING_REQUESTS_PER_USER`` of a
process's slots. And a client that goes away stops holding its slot:
where the server shows the request's socket (Django's ``runserver`` and
other ``wsgiref`` servers, gunicorn's sync and threaded workers), the wait
looks at it every ``DISCONNECT_CHECK_SECONDS`` and ends when the client
has closed it. Elsewhere (ASGI, uWSGI, TLS terminated by the server itself)
a disconnected client holds its slot until its ``?wait=`` ends, at most
``MAX_WAIT_SECONDS``.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

from ..conf import jobs_settings
from ..durations import is_seconds
from ..models import Job
from ..waiting import wait
from .errors import TooManyWaiting

#: The longest ``?wait=`` (DESIGN.md): a bound on what one request holds.
MAX_WAIT_SECONDS = 30.0
WAIT_RULE = f"must be a number of seconds > 0 and at most {MAX_WAIT_SECONDS:g}."
#: How often a waiting request looks whether its client is still there.
DISCONNECT_CHECK_SECONDS = 1.0

logger = logging.getLogger(__name__)


def wait_seconds(params: Mapping[str, str]) -> float | None:
    """``?wait=`` as seconds (``None``: absent); a 400 naming ``wait`` when it is bad."""
    text = params.get("wait")
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValidationError({"wait": [WAIT_RULE]}) from None
    if not is_seconds(value, allow_zero=False, maximum=MAX_WAIT_SECONDS):
        raise ValidationError({"wait": [WAIT_RULE]})
    return value


class WaitingRequests:
    """How many requests of this process are waiting, bounded by ``API_MAX_WAITING_REQUESTS``,
    and per user by ``API_MAX_WAITING_REQUESTS_PER_USER``.

    Counters, not a ``Semaphore``: the limits are read at each request, so
    a changed setting (``override_settings``) takes effect at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = 0
        self._by_owner: dict[str, int] = {}

    @contextmanager
    def slot(self, owner: str = "") -> Iterator[None]:
        """Hold one of the slots for ``owner`` while the block runs; ``TooManyWaiting``
        when the process has none free, or ``owner`` holds its share already."""
        limit = int(jobs_settings.API_MAX_WAITING_REQUESTS)
        per_owner = int(jobs_settings.API_MAX_WAITING_REQUESTS_PER_USER)
        with self._lock:
            if self._held >= limit:
                raise TooManyWaiting(limit)
            if self._by_owner.get(owner, 0) >= per_owner:
                raise TooManyWaiting(per_owner, per_user=True)
            self._held += 1
            self._by_owner[owner] = self._by_owner.get(owner, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1
                left = self._by_owner[owner] - 1
                if left:
                    self._by_owner[owner] = left
                else:
                    del self._by_owner[owner]

    @property
    def held(self) -> int:
        with self._lock:
            return self._held

    def held_by(self, owner: str) -> int:
        with self._lock:
            return self._by_owner.get(owner, 0)


waiting_requests = WaitingRequests()


def owner_of(request: Request) -> str:
    """Whose slots a request counts against: its user, else its client's address."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return f"address:{request.META.get('REMOTE_ADDR', '')}"


def wait_for(job_id: uuid.UUID, seconds: float, request: Request | None = None) -> Job:
    """The job once finished, or as it is after ``seconds``; holds a slot meanwhile.

    With the request's client socket in sight (``client_socket``), the wait
    is cut in ``DISCONNECT_CHECK_SECONDS`` pieces and ends early, answering
    the job as it is (to nobody), once the client has hung up.
    """
    owner = "" if request is None else owner_of(request)
    sock = None if request is None else client_socket(request.META)
    with waiting_requests.slot(owner):
        deadline = time.monotonic() + seconds
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            try:
                return wait(
                    job_id, timeout=left if sock is None else min(left, DISCONNECT_CHECK_SECONDS)
                )
            except TimeoutError:
                pass
            if time.monotonic() >= deadline:
                return Job.objects.get(pk=job_id)
            if sock is not None and hung_up(sock):
                logger.info("Long poll job_id=%s: the client hung up, its slot freed", job_id)
                return Job.objects.get(pk=job_id)


def client_socket(environ: Mapping[str, Any]) -> socket.socket | None:
    """The request's connection to its client, where the WSGI server shows it; else ``None``.

    gunicorn puts it in the environ; ``wsgiref`` servers (``runserver``) have
    it under ``wsgi.input``: Django's ``LimitedStream`` (its ``_read`` a bound
    method of the stream) over a buffered reader over the socket's ``SocketIO``.
    """
    candidate: Any = environ.get("gunicorn.socket")
    if not isinstance(candidate, socket.socket):
        candidate = environ.get("wsgi.input")
        for _ in range(5):
            if isinstance(candidate, socket.socket):
                break
            candidate = _inner(candidate)
        else:
            return None
    # A TLS socket (ssl.SSLSocket) cannot be peeked at without reading it.
    return None if hasattr(candidate, "getpeercert") else candidate


def _inner(stream: Any) -> Any:
    """What ``stream`` reads from, if it says: a wrapper's stream, a buffer's raw
    stream, a ``SocketIO``'s socket."""
    for name in ("stream", "raw", "_sock"):
        inner = getattr(stream, name, None)
        if inner is not None:
            return inner
    return getattr(getattr(stream, "_read", None), "__self__", None)


def hung_up(sock: socket.socket) -> bool:
    """Whether the client closed its end: readable, and a peek reads end of file.

    A peek, so any bytes the client sent (a pipelined request) stay for the server.
    """
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        # Reset, or closed under us: nobody is waiting for the answer.
        return True
