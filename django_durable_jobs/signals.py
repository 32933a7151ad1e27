"""Django signals a project connects to: a job started, finished, ended dead.

Sent by the worker that ran the attempt, **after** what they announce is
committed: ``job_finished`` and ``job_dead`` once the outcome's write has
committed (a receiver that reads the job sees the outcome), ``job_started``
once the claim has, as the handler is about to run. Nothing is sent for an
attempt whose outcome was refused (its lease was lost: another worker runs
the job) or for a suspension (a sleep, a wait: the job did not finish).

Receivers run on the worker's own threads: ``job_started`` on the slot
thread, before the handler; the others on the thread that writes outcomes
(or the maintenance thread, for a job its reaper ended: a worker that died
left it running), so a slow receiver delays the outcomes after it. Keep them short (count,
log, enqueue a job for slow work). A receiver that raises is logged and
the others still run; the job's state is not affected. With no receiver
connected the worker builds no arguments at all.

Each signal's ``sender`` is the job's handler function (the one ``@job``
declares), as a model signal's is the model class, so a receiver can listen
to one type: ``job_finished.connect(on_invoice, sender=send_invoice)``
(Django matches senders by identity, so a type's name would not do). It is
``None`` for a type no ``@job`` declares here (a Django task: filter on
``type``). Every signal also
passes ``type``, the job type's name.
The Django Tasks backend keeps sending Django's own ``task_started`` and
``task_finished`` as well.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterable

from django.dispatch import Signal

from .db.records import Outcome, Transition
from .handlers import registry

logger = logging.getLogger(__name__)

__all__ = ["job_dead", "job_finished", "job_started"]

#: An attempt's handler is about to run. Arguments: ``job_id``, ``type``,
#: ``queue``, ``attempt`` (from 1), ``worker_id``.
job_started = Signal()
#: An attempt's outcome was committed. Arguments: ``job_id``, ``type``, ``queue``,
#: ``outcome``: ``"completed"``, ``"retry"`` (it runs again later),
#: ``"dead"`` or ``"cancelled"``.
job_finished = Signal()
#: The job ended dead (no attempt left, ``Discard``, no handler, abandoned by a
#: worker that died). Sent after ``job_finished``. Arguments: ``job_id``,
#: ``type``, ``queue``, ``last_error``.
job_dead = Signal()

_OUTCOMES = {
    Transition.COMPLETE: "completed",
    Transition.RETRY: "retry",
    Transition.DEAD: "dead",
    Transition.CANCEL: "cancelled",
}


def listening() -> bool:
    """Whether any receiver is connected to the signals sent after an outcome, for any
    sender (``has_listeners()`` counts only those connected without one)."""
    return bool(job_finished.receivers or job_dead.receivers)


def send_started(job_id: uuid.UUID, type: str, queue: str, attempt: int, worker_id: str) -> None:
    if job_started.receivers:
        _send(job_started, "job_started", job_id, type, queue, attempt=attempt, worker_id=worker_id)


def send_written(outcomes: Iterable[Outcome], written: Collection[uuid.UUID]) -> None:
    """``job_finished`` (and ``job_dead``) for each of ``outcomes`` that was written."""
    if not listening():
        return
    for o in outcomes:
        name = _OUTCOMES.get(o.transition)
        if name is None or o.job_id not in written:
            continue  # a release (given back, not finished), or refused
        _send(job_finished, "job_finished", o.job_id, o.type, o.queue, outcome=name)
        if o.transition is Transition.DEAD:
            _send(job_dead, "job_dead", o.job_id, o.type, o.queue, last_error=o.last_error or "")


def _send(
    signal: Signal, name: str, job_id: uuid.UUID, job_type: str, queue: str, **extra: object
) -> None:
    """Send ``signal`` for one job, its sender the handler; log what its receivers raised."""
    handler = registry.get(job_type)
    sender = None if handler is None else handler.func
    responses = signal.send_robust(
        sender=sender, job_id=job_id, type=job_type, queue=queue, **extra
    )
    for receiver, response in responses:
        if isinstance(response, BaseException):
            logger.error(
                "Receiver %r of %s raised %s: %s", receiver, name, type(response).__name__,
                response, exc_info=response,
            )  # fmt: skip
