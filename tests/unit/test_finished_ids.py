"""The finished notification's payload: what the SQL sends, what the listener reads."""

from __future__ import annotations

import uuid

import pytest

from django_durable_jobs.constants import FINISHED_NOTIFY_IDS, FINISHED_NOTIFY_PREFIX
from django_durable_jobs.waiting.listener import finished_ids

#: PostgreSQL refuses a NOTIFY payload of this many bytes or more.
POSTGRES_PAYLOAD_LIMIT = 8000


def payload(ids: list[uuid.UUID]) -> str:
    """As the _finished_notified fragment builds it."""
    return FINISHED_NOTIFY_PREFIX + ",".join(str(i) for i in ids)


def test_a_full_chunk_of_ids_stays_under_postgres_payload_limit() -> None:
    full = payload([uuid.uuid4() for _ in range(FINISHED_NOTIFY_IDS)])
    assert len(full.encode()) < POSTGRES_PAYLOAD_LIMIT


def test_the_listener_reads_back_every_id() -> None:
    ids = [uuid.uuid4() for _ in range(3)]
    assert finished_ids(payload(ids)) == ids


def test_a_payload_of_another_shape_or_a_bad_id_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = uuid.uuid4()
    assert finished_ids("default") == []
    assert finished_ids(f"{FINISHED_NOTIFY_PREFIX}nope,{good}") == [good]
    assert "another shape" in caplog.text and "'nope'" in caplog.text
