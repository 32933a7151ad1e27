"""Fixtures of the integration tier (the real PostgreSQL, workers in this process)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings

from django_durable_jobs import db
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


def fill_big_table() -> None:
    """Write ``ROWS`` into the job table and ANALYZE it (in the caller's transaction)."""
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
                       CASE WHEN %s = 'running' THEN now() + interval '1 hour' END
                FROM generate_series(1, %s) AS i
                """,  # noqa: S608 (offset is the test's own constant)
                [status.split("_")[0], status.split("_")[0], count],
            )
        cursor.execute("ANALYZE durable_jobs_job")
        cursor.execute("SELECT count(*) FROM durable_jobs_job")
        assert cursor.fetchone()[0] >= 50_000


@pytest.fixture
def big_table() -> None:
    """A job table of 50,500 rows of every status, ANALYZEd: for the query plans' tests.

    Filled in the test's own transaction, rolled back after it. A module whose
    every test reads it may fill it once instead (``big_table_for_the_module``).
    """
    fill_big_table()


@pytest.fixture(scope="module")
def big_table_for_the_module(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """``big_table`` filled once for a module, in a transaction around its tests.

    Filling it costs PostgreSQL about 2 s (the rows through every index, then
    ANALYZE): for each of 17 tests of the claim's plans, that was a tenth of
    CI's database CPU. Here the rows are written in a transaction opened
    before the module's first test that asks for them; each test's own
    transaction (pytest-django's, a ``TestCase``'s) is then a savepoint in
    it, rolled back after the test, and the rows and their statistics are
    rolled back after the module's last test. Only for a module where every
    test asks for ``big_table`` (and none is transactional): a test after
    the first would otherwise see rows it did not ask for.
    """
    alias = db.database_alias()
    outer = transaction.atomic(using=alias)
    with django_db_blocker.unblock():
        outer.__enter__()
        try:
            fill_big_table()
        except BaseException:
            outer.__exit__(*sys.exc_info())
            raise
    yield
    with django_db_blocker.unblock():
        transaction.set_rollback(True, using=alias)
        outer.__exit__(None, None, None)
