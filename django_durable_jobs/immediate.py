"""The immediate mode, for tests: ``DURABLE_JOBS["RUN_IMMEDIATELY"] = True``.

Every job that ``enqueue``, ``enqueue_many``, ``chain`` or ``group`` creates
(and so a ``POST /api/jobs``, a ``ctx.run_job`` child) runs in the process
that enqueued it, on its connection, through ``testing.run_enqueued``:
``run_jobs()``'s path (the handler, retries with their delays passed over,
sleeps passed over, children released, steps recorded, the result stored).

When: once the caller's transaction commits (``transaction.on_commit``), so
a job never runs on data that a rollback then removes. Outside any
transaction, at once. A test's own transaction (``TestCase``, pytest-django's
``db``) never commits, so it does not count: there the job runs at once,
unless the code under test enqueued inside a ``transaction.atomic()`` of its
own, whose ``on_commit`` callbacks run only when the test captures them
(``captureOnCommitCallbacks(execute=True)``), as for any other ``on_commit``
code. Jobs that a run's handlers enqueue join that run instead of starting
another one inside it.

Not for production: a web request would run its jobs itself, and a worker
its handlers' jobs (and its schedules') on its own thread. The check
``durable_jobs.W012`` says so when it is on outside a test run with
``DEBUG`` off.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from django.db import connections, transaction

from . import testing
from .conf import jobs_settings
from .transactions import in_own_transaction

if TYPE_CHECKING:
    from .enqueueing import EnqueueResult


def jobs_enqueued(results: Sequence[EnqueueResult], alias: str) -> None:
    """The enqueue listener (``hooks``): in the immediate mode, run the new jobs.

    A replay (``created=False``) runs nothing: its job was enqueued before.
    """
    if not results or not jobs_settings.RUN_IMMEDIATELY:
        return
    job_ids = [result.job.pk for result in results if result.created]
    if not job_ids:
        return
    joining = testing.enqueued_during_run(alias)
    if joining is not None:
        joining.update(job_ids)  # the run in progress takes them
    elif in_own_transaction(connections[alias]):
        transaction.on_commit(partial(testing.run_enqueued, job_ids, using=alias), using=alias)
    else:
        testing.run_enqueued(job_ids, using=alias)
