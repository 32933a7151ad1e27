"""What an attempt ended in, in the shape ``finish_jobs`` writes."""

from __future__ import annotations

import uuid
from datetime import datetime
from json.encoder import encode_basestring as _json_str
from typing import NamedTuple

from ..models import JobStatus


class Outcome(NamedTuple):
    job_id: uuid.UUID
    lease_token: uuid.UUID
    status: str  # completed, pending (retry or release) or dead
    result_json: str = "null"
    delay_us: int | None = None
    run_at: datetime | None = None
    last_error: str | None = None
    error_entry_json: str = "null"
    release: bool = False
    #: For logs and metrics only; not written.
    kind: str = "completed"
    #: Not written either: once written, send Django's ``task_finished`` for
    #: it (a task's last attempt failed at its time limit: its function,
    #: which announces its own outcomes, did not return).
    announce: bool = False

    def json_row(self) -> str:
        """One row of ``finish_jobs``' JSON document."""
        return (
            f'["{self.job_id}","{self.lease_token}","{self.status}",{self.result_json},'
            f"{'null' if self.delay_us is None else self.delay_us},"
            f"{'null' if self.run_at is None else _json_str(self.run_at.isoformat())},"
            f"{'null' if self.last_error is None else _json_str(self.last_error)},"
            f"{self.error_entry_json},{'true' if self.release else 'false'}]"
        )


def release(job_id: uuid.UUID, lease_token: uuid.UUID) -> Outcome:
    """Give the job back (shutdown): pending now, the attempt not counted."""
    return Outcome(
        job_id, lease_token, JobStatus.PENDING, delay_us=0, release=True, kind="released"
    )
