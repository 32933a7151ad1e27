"""The package's own job types: the admin's bulk requeue and bulk cancel.

Found like any app's handlers (``AppConfig.ready()`` imports each app's
``jobs`` module), so every worker of a project with the app installed can
run them. The work is ``bulk.run_job``'s; see ``bulk.py`` for the design.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from . import bulk
from .context import JobContext
from .registry import job

#: A bulk run over millions of rows takes minutes; a project's default time
#: limit (``TIMEOUT_SECONDS``) is meant for ordinary jobs, not for these.
#: Past it, the retry resumes where the attempt stopped.
BULK_TIMEOUT = timedelta(hours=24)


@job(bulk.BULK_REQUEUE, timeout=BULK_TIMEOUT)
def bulk_requeue(ctx: JobContext) -> dict[str, Any]:
    """Requeue every job matching ``payload["filter"]`` (dead or cancelled), in batches."""
    return bulk.run_job(ctx, "requeue")


@job(bulk.BULK_CANCEL, timeout=BULK_TIMEOUT)
def bulk_cancel(ctx: JobContext) -> dict[str, Any]:
    """Cancel every job matching ``payload["filter"]`` (pending or waiting), in batches."""
    return bulk.run_job(ctx, "cancel")
