"""Job ids: version 7 UUIDs, ordered by creation time."""

from __future__ import annotations

import time
import uuid

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
