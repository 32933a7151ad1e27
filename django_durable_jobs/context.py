"""What a handler receives: the job it runs and the attempt it is in."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class JobContext:
    """The job a handler runs, passed as its only argument.

    ``attempt`` counts from 1. The payload is the job's JSON object.
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

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts
