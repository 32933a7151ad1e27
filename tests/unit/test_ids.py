"""Job ids: version 7 UUIDs, ordered by creation time."""

from __future__ import annotations

import time
import uuid

import pytest

from django_durable_jobs import ids
from django_durable_jobs.ids import new_job_id


def test_a_job_id_is_a_version_7_rfc_9562_uuid_carrying_the_time() -> None:
    before = time.time_ns() // 1_000_000
    job_id = new_job_id()
    after = time.time_ns() // 1_000_000
    assert isinstance(job_id, uuid.UUID)
    assert (job_id.version, job_id.variant) == (7, uuid.RFC_4122)
    assert before <= job_id.int >> 80 <= after


def test_ids_made_later_sort_later_and_never_repeat() -> None:
    first = [new_job_id() for _ in range(1_000)]
    time.sleep(0.002)
    second = [new_job_id() for _ in range(1_000)]
    assert max(first) < min(second)
    assert len(set(first + second)) == 2_000
    # The 74 bits after the time are random, not a counter.
    assert len({i.int & ((1 << 62) - 1) for i in first}) == 1_000


def test_ids_made_in_one_millisecond_still_increase(monkeypatch: pytest.MonkeyPatch) -> None:
    # chain() makes a parent's and its child's ids in the same millisecond:
    # the child's must sort after (enqueues lock parents in id order).
    monkeypatch.setattr(ids, "_last", (0, 0))
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_700_000_000_000_000_000)
    made = [new_job_id() for _ in range(10_000)]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all((i.version, i.variant) == (7, uuid.RFC_4122) for i in made)
    assert {i.int >> 80 for i in made} <= {1_700_000_000_000, 1_700_000_000_001}
    # A clock that goes back does not send the ids back either.
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_600_000_000_000_000_000)
    assert new_job_id() > made[-1]


def test_a_full_millisecond_moves_to_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_800_000_000_000_000_000)
    monkeypatch.setattr(ids, "_last", (1_800_000_000_000, ids._RANDOM_MAX - 1))
    job_id = new_job_id()
    assert job_id.int >> 80 == 1_800_000_000_001
    assert (job_id.version, job_id.variant) == (7, uuid.RFC_4122)
