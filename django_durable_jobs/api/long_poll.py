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
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from rest_framework.exceptions import ValidationError

from ..conf import jobs_settings
from ..durations import is_seconds
from ..models import Job
from ..waiting import wait
from .errors import TooManyWaiting

#: The longest ``?wait=`` (DESIGN.md): a bound on what one request holds.
MAX_WAIT_SECONDS = 30.0
WAIT_RULE = f"must be a number of seconds > 0 and at most {MAX_WAIT_SECONDS:g}."


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
    """How many requests of this process are waiting, bounded by ``API_MAX_WAITING_REQUESTS``.

    A counter, not a ``Semaphore``: the limit is read at each request, so
    a changed setting (``override_settings``) takes effect at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = 0

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the slots while the block runs; ``TooManyWaiting`` when none is free."""
        limit = int(jobs_settings.API_MAX_WAITING_REQUESTS)
        with self._lock:
            if self._held >= limit:
                raise TooManyWaiting(limit)
            self._held += 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1

    @property
    def held(self) -> int:
        with self._lock:
            return self._held


waiting_requests = WaitingRequests()


def wait_for(job_id: uuid.UUID, seconds: float) -> Job:
    """The job once finished, or as it is after ``seconds``; holds a slot meanwhile."""
    with waiting_requests.slot():
        try:
            return wait(job_id, timeout=seconds)
        except TimeoutError:
            return Job.objects.get(pk=job_id)
