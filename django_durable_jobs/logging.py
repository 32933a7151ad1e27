"""``JSONFormatter``: one JSON object per log line, for log shippers.

The worker logs every job line with ``extra`` fields (``job_id``,
``job_type``, ``queue``, ``attempt``, ``worker_id``, ``duration``, and
``error`` on a failure); this formatter puts them next to the message as
top-level keys, so Loki, Elasticsearch or CloudWatch can filter on them
without parsing text. Use it from Django's ``LOGGING``::

    "formatters": {"json": {"()": "django_durable_jobs.logging.JSONFormatter"}}
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any

# Attributes every LogRecord has: anything else came from ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class JSONFormatter(logging.Formatter):
    """Format a record as ``{"time", "level", "logger", "message", ...extra}``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: a UUID or datetime passed in ``extra`` must not break logging.
        return json.dumps(entry, default=str, ensure_ascii=False)
