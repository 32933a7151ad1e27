"""The rows the gateway hands out and takes in: typed, and nothing more.

``ClaimedJob`` is what the claim returns, ``Outcome`` what ends an attempt
(``record_outcomes`` writes them), ``ExpiredLease`` what the reaper finds.
The verbs of the transitions are the ``Transition`` values; the same words
name the code that builds each outcome (``worker/outcomes.py``), the log
lines and, mapped once in ``metrics.py``, the metric labels.
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime
from typing import Any, NamedTuple


class Transition(str, enum.Enum):
    """How an attempt ends, as ``record_outcomes`` writes it."""

    #: The handler returned: ``completed``, with its result.
    COMPLETE = "complete"
    #: A failed attempt with attempts left: ``pending`` again, after a delay.
    RETRY = "retry"
    #: A failed attempt with none left, or ``Discard``: ``dead``.
    DEAD = "dead"
    #: Given back unfinished (shutdown): ``pending`` now, the attempt not counted;
    #: with a ``delay_us``, available again that much later (a type without a handler).
    RELEASE = "release"
    #: The job was cancelled while it ran: ``cancelled``, never retried.
    CANCEL = "cancel"


class ClaimedJob(NamedTuple):
    # The order of the claim queries' RETURNING clause.
    id: uuid.UUID
    type: str
    queue: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    lease_token: uuid.UUID
    available_at: datetime
    started_at: datetime
    idempotency_key: str | None
    timeout: float | None  # per-job override; None: the handler's or the setting
    #: Children enqueued with this job as a parent, as of the claim: its
    #: outcome carries it (``Outcome.dependent_count``).
    dependent_count: int = 0
    #: Parents it was enqueued with: 0 means ``ctx.parent_results`` needs no query.
    parent_count: int = 0
    #: The W3C trace context stored at enqueue (``tracing``); None: none.
    trace_context: dict[str, str] | None = None
    #: When the job was enqueued: how long a job of a type no worker knows
    #: may wait for one (``worker/unknown_types.py``). None: not known.
    created_at: datetime | None = None


class Outcome(NamedTuple):
    job_id: uuid.UUID
    lease_token: uuid.UUID
    transition: Transition
    result_json: str = "null"
    delay_us: int | None = None
    run_at: datetime | None = None
    last_error: str | None = None
    error_entry_json: str = "null"
    #: Not written: once written, tell ``hooks.jobs_finished`` (the job ended
    #: without its handler saying so: dead at its time limit, or reaped dead).
    announce: bool = False
    #: The job's ``dependent_count`` as of its claim: more than 0 and
    #: ``db.record_outcomes`` writes it in a transaction that releases the
    #: children. 0 is always safe: a job that has dependents after all is
    #: refused by the one-statement write, then written that way.
    dependent_count: int = 0
    #: Not written: the job's queue, for the per-minute counts the worker
    #: keeps (``worker/throughput.py``); empty for an outcome built without it.
    queue: str = ""
    #: Not written: the job's type, for the signals sent once it is (``signals.py``).
    type: str = ""


class ExpiredLease(NamedTuple):
    """A running job whose lease ran out, locked by the reaper's transaction."""

    # The order of reap_jobs' RETURNING clause.
    id: uuid.UUID
    type: str
    queue: str
    attempt: int
    max_attempts: int
    lease_token: uuid.UUID
    lease_holder: str
    lease_expires_at: datetime
    #: A cancel was requested while it ran: the reaper ends it ``cancelled``.
    cancel_requested: bool = False
    #: Read under the reaper's row lock, so current until its transaction ends.
    dependent_count: int = 0


class QueueCounts(NamedTuple):
    """One queue's row of ``queue_overview`` (the admin's Queues page)."""

    queue: str
    #: Counted up to the overview's cap: a count equal to the cap means "at least".
    pending: int
    waiting: int
    dead: int
    #: Counted in full (at most the workers' slots).
    running: int
    #: Seconds the oldest runnable pending job has waited; None: none is runnable.
    oldest_pending_seconds: float | None


class QueueMinuteCounts(NamedTuple):
    """Outcomes of one queue in one minute, as a worker adds them (``add_queue_stats``)."""

    queue: str
    minute: datetime
    completed: int
    failed: int
    dead: int
