"""What a handler receives: the job it runs and the attempt it is in."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from .exceptions import JobCancelled, JobTimeout


class CancelFlag:
    """Set once by the worker when it gives up on an attempt.

    A plain attribute rather than a ``threading.Event``: set once, by
    another thread, and read by the handler as often as it likes
    (``ctx.cancelled``); a lock on every read would buy nothing.
    ``requested`` says that the reason is a cancel of the job (rather than
    its time limit, a lost lease or a shutdown): ``ctx.check()`` then
    raises ``JobCancelled``.

    A cancel request sets the flag at once but does not give the attempt
    up: the handler has a grace to stop by itself. ``on_give_up`` is how an
    ``async def`` handler's task is cancelled when the worker does give up
    (``worker/event_loop.py``); a sync handler's thread is never interrupted.
    """

    __slots__ = ("_given_up", "_on_give_up", "_requested", "_set")

    def __init__(self) -> None:
        self._set = False
        self._requested = False
        self._given_up = False
        self._on_give_up: Callable[[], None] | None = None

    def set(self) -> None:
        """The worker gives up on the attempt (or it is over): ``ctx.cancelled`` for good."""
        self._set = True
        self._given_up = True
        callback = self._on_give_up
        if callback is not None:
            self._on_give_up = None
            callback()

    def request_cancel(self) -> None:
        """Someone cancelled the job: the reason first, so a reader of the flag sees it."""
        self._requested = True
        self._set = True

    def on_give_up(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` once when the worker gives up (at once if it has); None: forget it.

        Set and called from different threads without a lock: ``set`` writes
        the state before it reads the callback and this method the other way
        round, so one of them always sees the other and the callback is never
        missed; it may (rarely) run twice, so it must not mind.
        """
        self._on_give_up = callback
        if callback is not None and self._given_up:
            self._on_give_up = None
            callback()

    def is_set(self) -> bool:
        return self._set

    @property
    def requested(self) -> bool:
        return self._requested


@dataclass(frozen=True)
class JobContext:
    """The job a handler runs, passed as its only argument.

    ``attempt`` counts from 1. The payload is the job's JSON object.

    Time limit: ``timeout`` is this attempt's limit in seconds and
    ``deadline`` the wall-clock moment (an aware UTC ``datetime``) it ends,
    both ``None`` without a limit. ``deadline`` is for display and for
    passing on (say, as an HTTP client's timeout); the worker itself
    measures the limit on the monotonic clock, so changing the system
    clock moves neither ``cancelled`` nor the watchdog. A long handler
    should test ``ctx.cancelled`` or call ``ctx.check()`` between steps
    (an ``async def`` handler's task is also cancelled when the worker
    gives up on the attempt).
    """

    id: uuid.UUID
    type: str
    queue: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    worker_id: str = ""
    idempotency_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    deadline: datetime | None = None
    # Set by the worker: the deadline on time.monotonic()'s clock, and the
    # flag it sets when it gives up on the attempt (deadline passed, lease
    # lost, shutdown). Private: handlers read `cancelled`.
    _deadline_monotonic: float | None = field(default=None, repr=False, compare=False)
    _cancel: CancelFlag | None = field(default=None, repr=False, compare=False)
    # How many parents the job was enqueued with (depends_on), from the
    # claim: 0 and parent_results needs no query.
    _parent_count: int = field(default=0, repr=False, compare=False)

    @cached_property
    def parent_results(self) -> dict[uuid.UUID, Any]:
        """``{parent id: its result}`` for the jobs this one was enqueued to wait for.

        Read once, on first use (one query; none for a job without parents).
        A parent that ended dead or cancelled (its child ran anyway, with
        ``on_parent_failure="run"``) maps to ``None``, as does one whose
        handler returned nothing; a parent pruned since is missing.
        """
        if not self._parent_count:
            return {}
        from .dependencies import parent_results  # needs the models

        return parent_results(self.id)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @property
    def remaining(self) -> float | None:
        """Seconds left before the deadline (0 once past it); ``None`` without a limit."""
        if self._deadline_monotonic is None:
            return None
        return max(0.0, self._deadline_monotonic - time.monotonic())

    @property
    def cancelled(self) -> bool:
        """True once the job was cancelled, or the attempt is past its deadline or
        the worker gave up on it.

        A cancel of the running job (``POST /api/jobs/{id}/cancel``, ``jobs
        cancel``, the admin) turns it True within about a second on whichever
        worker runs the job; the attempt then ends ``cancelled`` whatever the
        handler returns. The worker gives up on an attempt when its lease was
        lost (the job was reaped and may run elsewhere) or at the end of a
        shutdown's grace period. Cheap (no query): test it as often as
        convenient. Whatever the handler does after this turns True is not
        recorded.
        """
        cancel = self._cancel
        if cancel is not None and cancel.is_set():
            return True
        deadline = self._deadline_monotonic
        return deadline is not None and time.monotonic() >= deadline

    def check(self) -> None:
        """Raise if the attempt is cancelled (see ``cancelled``).

        ``JobCancelled`` when the job itself was cancelled, else
        ``JobTimeout`` (past the deadline, or the worker gave up on it).
        """
        cancel = self._cancel
        if cancel is not None and cancel.requested:
            raise JobCancelled()
        if self.cancelled:
            raise JobTimeout(self.timeout)
