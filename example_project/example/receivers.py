"""A receiver of ``job_finished``: each outcome a worker commits becomes a ``JobOutcome`` row.

Connected by ``ExampleConfig.ready()`` when ``EXAMPLE_RECORD_OUTCOMES`` is on
(``docs/guides/signals.md``). It runs on the worker's outcome thread, after
the outcome committed, so it stays one small insert.
"""

from __future__ import annotations

import uuid
from typing import Any

from .models import JobOutcome


def record_outcome(sender: Any, job_id: uuid.UUID, type: str, outcome: str, **kwargs: Any) -> None:
    JobOutcome.objects.create(job_id=job_id, type=type, outcome=outcome)
