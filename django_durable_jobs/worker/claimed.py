"""A job as the claim returns it: what the worker needs to run it, no more."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, NamedTuple


class ClaimedJob(NamedTuple):
    # The order of claim_jobs' RETURNING clause.
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
