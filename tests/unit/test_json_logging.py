from __future__ import annotations

import json
import logging
import uuid

from django_durable_jobs.logging import JSONFormatter


def record(msg: str, *args: object, exc_info: object = None, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord(
        "django_durable_jobs.worker", logging.INFO, "f.py", 1, msg, args, exc_info
    )  # type: ignore[arg-type]
    rec.__dict__.update(extra)
    return rec


def test_one_json_object_per_line_with_the_extra_fields() -> None:
    job_id = uuid.uuid4()
    line = JSONFormatter().format(
        record(
            "Job completed id=%s\nsecond line",
            job_id,
            job_id=job_id,
            job_type="emails.send",
            queue="emails",
            attempt=2,
            worker_id="w1",
            duration=0.25,
        )
    )
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == f"Job completed id={job_id}\nsecond line"
    assert (entry["level"], entry["logger"]) == ("INFO", "django_durable_jobs.worker")
    assert entry["job_id"] == str(job_id)
    assert (entry["job_type"], entry["queue"], entry["attempt"]) == ("emails.send", "emails", 2)
    assert (entry["worker_id"], entry["duration"]) == ("w1", 0.25)
    assert "args" not in entry and "msg" not in entry


def test_exceptions_are_included() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        entry = json.loads(JSONFormatter().format(record("failed", exc_info=sys.exc_info())))
    assert "ValueError: boom" in entry["exception"]
