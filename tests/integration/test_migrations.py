from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from django_durable_jobs.constants import (
    CLAIM_INDEX,
    CLAIM_QUEUE_INDEX,
    IDEMPOTENCY_CONSTRAINT,
    LEASE_INDEX,
    QUEUE_HELD_INDEX,
    QUEUE_STATUS_STATISTICS,
    STATUS_INDEX,
)

pytestmark = pytest.mark.django_db


def test_no_missing_migrations() -> None:
    out = StringIO()
    call_command("makemigrations", "durable_jobs", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_indexes_exist_with_their_definitions() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'durable_jobs_job'"
        )
        indexes = dict(cursor.fetchall())
    assert "priority DESC, available_at, created_at" in indexes[CLAIM_INDEX]
    assert "WHERE ((status)::text = 'pending'::text)" in indexes[CLAIM_INDEX]
    assert "WHERE ((status)::text = 'running'::text)" in indexes[LEASE_INDEX]
    assert "status, created_at DESC" in indexes[STATUS_INDEX]
    assert "queue, priority DESC, available_at, created_at" in indexes[CLAIM_QUEUE_INDEX]
    assert indexes[IDEMPOTENCY_CONSTRAINT].startswith("CREATE UNIQUE INDEX")
    assert "idempotency_key IS NOT NULL" in indexes[IDEMPOTENCY_CONSTRAINT]
    assert "(queue, status, created_at DESC)" in indexes[QUEUE_HELD_INDEX]
    assert (
        "ARRAY['waiting'::character varying, 'dead'::character varying]"
        in (indexes[QUEUE_HELD_INDEX])
    )


def test_the_queue_status_statistics_exist() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT stxkind FROM pg_statistic_ext WHERE stxname = %s", [QUEUE_STATUS_STATISTICS]
        )
        assert cursor.fetchall() == [(["m"],)]


def test_the_database_rejects_invalid_rows() -> None:
    from django.db import IntegrityError, transaction

    from django_durable_jobs.models import Job

    for bad in ({"status": "lost"}, {"max_attempts": 0}, {"idempotency_key": ""}, {"type": ""}):
        with pytest.raises(IntegrityError), transaction.atomic():
            Job.objects.create(**{"type": "t", **bad})
