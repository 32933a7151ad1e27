"""Waiting for a job to finish: ``wait()`` and its async twin ``await_job()``.

Both return the job once it is ``completed``, ``dead`` or ``cancelled``,
read fresh from the database, or raise ``TimeoutError``. They are woken by
the NOTIFY that the job's outcome sends at its commit (``listener.py``: one
LISTEN connection per process, whatever the number of waiters), and look
at the job every ``WAIT_POLL_INTERVAL_SECONDS`` anyway, in case a
notification is lost.

Each look is one primary-key lookup: of the whole row at first and after
a wake-up (the job is then likely finished, and returned from that one
read), of the status only for a poll. A waiter is registered before its
first look, so a job that finishes between that look and the wait still
wakes it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from typing import TypeAlias

from django.db.models import QuerySet

from .. import db
from ..conf import jobs_settings
from ..durations import SecondsError, seconds
from ..enqueueing import EnqueueResult
from ..models import FINISHED_STATUSES, Job
from .listener import LoopWaiter, ThreadWaiter, listener_for

__all__ = ["JobOrId", "await_job", "wait"]

#: What ``wait()`` accepts to name a job.
JobOrId: TypeAlias = Job | EnqueueResult | uuid.UUID | str


def wait(
    job_or_id: JobOrId,
    *,
    timeout: float | timedelta | None = None,
    using: str | None = None,
) -> Job:
    """Block until the job is finished (completed, dead or cancelled); return it.

    ``timeout`` in seconds (or a ``timedelta``); ``None`` waits as long as
    it takes, ``0`` looks once. Raises ``TimeoutError`` when the job is not
    finished in time, ``Job.DoesNotExist`` for an unknown id (or a job
    deleted meanwhile), ``TypeError``/``ValueError`` for a bad argument.

    Call it outside ``transaction.atomic()``: a job enqueued in the same
    transaction is not visible to the worker before the commit, so it
    cannot finish.
    """
    job_id, limit = _arguments(job_or_id, timeout)
    alias = db.database_alias(using)
    deadline = _deadline(limit)
    waiter = ThreadWaiter()
    listener = listener_for(alias)
    listener.add(job_id, waiter)
    try:
        woken = True  # the first look: the job may be finished already
        while True:
            # Cleared before the look: a wake-up during it is not lost.
            waiter.clear()
            job, status = _look(alias, job_id, whole=woken)
            nap = _after_look(job_id, status, deadline, limit)
            if nap is None:
                job = job or _finished(alias, job_id).first()
                if job is not None:
                    return job
                continue  # requeued between the two reads: wait on
            woken = waiter.sleep(nap)
    finally:
        listener.remove(job_id, waiter)


async def await_job(
    job_or_id: JobOrId,
    *,
    timeout: float | timedelta | None = None,
    using: str | None = None,
) -> Job:
    """``wait()`` for asyncio: ``job = await await_job(job_id, timeout=10)``.

    The same arguments, result and errors. No thread per waiter: the
    process's one listener thread wakes the coroutine on its event loop;
    the looks go through Django's async ORM.
    """
    job_id, limit = _arguments(job_or_id, timeout)
    alias = db.database_alias(using)
    deadline = _deadline(limit)
    waiter = LoopWaiter(asyncio.get_running_loop())
    listener = listener_for(alias)
    listener.add(job_id, waiter)
    try:
        woken = True
        while True:
            waiter.clear()
            job, status = await _alook(alias, job_id, whole=woken)
            nap = _after_look(job_id, status, deadline, limit)
            if nap is None:
                job = job or await _finished(alias, job_id).afirst()
                if job is not None:
                    return job
                continue
            woken = await waiter.sleep(nap)
    finally:
        listener.remove(job_id, waiter)


def job_id_of(job_or_id: JobOrId) -> uuid.UUID:
    """The id of a ``Job``, an ``EnqueueResult``, a UUID or its text.

    ``TypeError`` for anything else, ``ValueError`` for text that is no UUID.
    """
    if isinstance(job_or_id, EnqueueResult):
        job_or_id = job_or_id.job
    if isinstance(job_or_id, Job):
        if job_or_id.pk is None:
            raise ValueError("This Job has no id: it was never saved.")
        return uuid.UUID(str(job_or_id.pk))
    if isinstance(job_or_id, uuid.UUID):
        return job_or_id
    if isinstance(job_or_id, str):
        try:
            return uuid.UUID(job_or_id)
        except ValueError:
            raise ValueError(f"{job_or_id!r} is not a job id (a UUID).") from None
    raise TypeError(
        "Expected a Job, an EnqueueResult, a UUID or a UUID string, "
        f"got {type(job_or_id).__name__}."
    )


def _arguments(
    job_or_id: JobOrId, timeout: float | timedelta | None
) -> tuple[uuid.UUID, float | None]:
    job_id = job_id_of(job_or_id)
    if timeout is None:
        return job_id, None
    try:
        return job_id, seconds(timeout, maximum=None)
    except SecondsError as exc:
        wrong_type = exc.reason == SecondsError.TYPE
        got = type(timeout).__name__ if wrong_type else repr(timeout)
        raise (TypeError if wrong_type else ValueError)(
            f"timeout must be None or a number of seconds >= 0 (or a timedelta), got {got}."
        ) from None


def _look(alias: str, job_id: uuid.UUID, *, whole: bool) -> tuple[Job | None, str | None]:
    """``(job, status)``: the whole row, or (a poll) its status only; status None: no such job.

    Whole after a wake-up (and at the first look), when the job is likely
    finished: one query, not two, from the NOTIFY to the return. A poll,
    which rarely finds it finished, reads one column, whatever the payload.
    """
    if whole:
        job = _job(alias, job_id).first()
        return job, None if job is None else job.status
    return None, _status(alias, job_id).first()


async def _alook(alias: str, job_id: uuid.UUID, *, whole: bool) -> tuple[Job | None, str | None]:
    if whole:
        job = await _job(alias, job_id).afirst()
        return job, None if job is None else job.status
    return None, await _status(alias, job_id).afirst()


def _job(alias: str, job_id: uuid.UUID) -> QuerySet[Job]:
    return Job.objects.using(alias).filter(pk=job_id)


def _status(alias: str, job_id: uuid.UUID) -> QuerySet[Job, str]:
    return _job(alias, job_id).values_list("status", flat=True)


def _finished(alias: str, job_id: uuid.UUID) -> QuerySet[Job]:
    return _job(alias, job_id).filter(status__in=FINISHED_STATUSES)


def _after_look(
    job_id: uuid.UUID, status: str | None, deadline: float | None, limit: float | None
) -> float | None:
    """What a look at ``status`` says: ``None``, read the finished job; else seconds to sleep.

    Raises ``Job.DoesNotExist`` for no job, ``TimeoutError`` past the deadline.
    """
    if status is None:
        raise Job.DoesNotExist(f"No job with id {job_id}.")
    if status in FINISHED_STATUSES:
        return None
    poll = float(jobs_settings.WAIT_POLL_INTERVAL_SECONDS)
    if deadline is None:
        return poll
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"Job {job_id} did not finish within {limit:g} s (it is {status}).")
    return min(poll, left)


def _deadline(limit: float | None) -> float | None:
    return None if limit is None else time.monotonic() + limit
