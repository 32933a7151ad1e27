"""Fixtures of the integration tier (the real PostgreSQL, workers in this process)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from tests.factories import FAST_BACKOFF, queue_connection


@pytest.fixture
def fast_backoff() -> Iterator[None]:
    """Retries due almost at once, so a test drains a failing job's attempts quickly."""
    with override_settings(DURABLE_JOBS=FAST_BACKOFF):
        yield


#: The rows of ``big_table``: status: (count, available_at offset).
ROWS = {
    "completed": (38_000, "- interval '1 hour'"),
    "pending": (6_000, "- interval '1 minute'"),
    "pending_later": (3_000, "+ interval '1 hour'"),
    "dead": (2_000, "- interval '1 day'"),
    "running": (1_000, "- interval '1 minute'"),
    "cancelled": (500, "- interval '1 day'"),
}


@pytest.fixture
def big_table() -> None:
    """A job table of 50,500 rows of every status, ANALYZEd: for the query plans' tests."""
    with queue_connection.cursor() as cursor:
        for status, (count, offset) in ROWS.items():
            cursor.execute(
                f"""
                INSERT INTO durable_jobs_job (
                    id, type, queue, payload, status, priority, attempts, max_attempts,
                    available_at, created_at, updated_at, last_error, errors,
                    lease_expires_at
                )
                SELECT gen_random_uuid(), 'tests.plan',
                       (ARRAY['default', 'emails', 'reports'])[1 + i %% 3],
                       '{{}}', %s, (i %% 5) - 2, 0, 5,
                       now() {offset} + i * interval '1 ms', now(), now(), '', '[]',
                       CASE WHEN %s = 'running' THEN now() + interval '30 seconds' END
                FROM generate_series(1, %s) AS i
                """,  # noqa: S608 (offset is the test's own constant)
                [status.split("_")[0], status.split("_")[0], count],
            )
        cursor.execute("ANALYZE durable_jobs_job")
        cursor.execute("SELECT count(*) FROM durable_jobs_job")
        assert cursor.fetchone()[0] >= 50_000
