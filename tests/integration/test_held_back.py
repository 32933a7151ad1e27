"""What flow control holds back now (``held_back.py``), by reason, on PostgreSQL.

Running jobs and rate windows come from the claims themselves
(``db.claim_limited``, ``db.claim_keyed``), so the counts are checked
against what a worker's claim would really see.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from django_durable_jobs import db, enqueue, enqueue_many
from django_durable_jobs.held_back import held_back
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.pausing import pause_queue
from tests.factories import expire

from .helpers import LIMITED, claim_from, claim_key, held, jobs

pytestmark = pytest.mark.django_db


def test_nothing_is_held_without_pauses_or_limits() -> None:
    jobs("default", 3)
    enqueue("tests.record", concurrency_key="customer:1")
    assert held_back(db.database_alias()) == {}


def test_a_paused_queue_holds_all_its_runnable_jobs() -> None:
    jobs("default", 3)
    jobs("default", 2, delay=3600)  # not runnable yet: not held by the pause
    jobs("other", 1)
    pause_queue("default")
    assert held_back(db.database_alias()) == {"default": held("paused", 3)}


def test_a_queue_at_its_concurrency_holds_its_runnable_jobs() -> None:
    with override_settings(DURABLE_JOBS=LIMITED):
        jobs("narrow", 5)
        assert claim_from("narrow", 1) == 1
        # Below its limit: a worker may start one more now, nothing is held.
        assert held_back(db.database_alias()) == {}
        assert claim_from("narrow", 5) == 1
        assert held_back(db.database_alias()) == {"narrow": held("concurrency", 3)}


def test_a_dead_worker_s_job_stops_filling_the_concurrency_when_its_lease_expires() -> None:
    with override_settings(DURABLE_JOBS=LIMITED):
        jobs("narrow", 3)
        assert claim_from("narrow", 2) == 2
        assert held_back(db.database_alias()) == {"narrow": held("concurrency", 1)}
        expire(Job.objects.filter(status=JobStatus.RUNNING).first().pk)  # type: ignore[union-attr]
        assert held_back(db.database_alias()) == {}


def test_a_full_rate_window_holds_its_runnable_jobs_after_the_starts_finished() -> None:
    with override_settings(DURABLE_JOBS=LIMITED):
        jobs("throttled", 5)
        assert claim_from("throttled", 1) == 1
        assert held_back(db.database_alias()) == {}  # one more start fits in the window
        assert claim_from("throttled", 5) == 1
        # The window counts starts, not running jobs: finished, they still fill it.
        Job.objects.filter(status=JobStatus.RUNNING).update(status=JobStatus.COMPLETED)
        assert held_back(db.database_alias()) == {"throttled": held("rate_limit", 3)}


def test_a_queue_with_both_limits_full_is_held_by_its_concurrency_as_in_the_claim() -> None:
    with override_settings(DURABLE_JOBS=LIMITED):
        jobs("both", 3)
        assert claim_from("both", 3) == 1
        assert held_back(db.database_alias()) == {"both": held("concurrency", 2)}
        Job.objects.filter(status=JobStatus.RUNNING).update(status=JobStatus.COMPLETED)
        assert held_back(db.database_alias()) == {"both": held("rate_limit", 2)}


def test_a_pause_counts_before_a_full_limit() -> None:
    with override_settings(DURABLE_JOBS=LIMITED):
        jobs("narrow", 4)
        assert claim_from("narrow", 2) == 2
        pause_queue("narrow")
        assert held_back(db.database_alias()) == {"narrow": held("paused", 2)}


def test_a_busy_key_holds_its_other_runnable_jobs_and_no_other_key_s() -> None:
    enqueue_many(
        [{"type": "tests.serial", "concurrency_key": "a", "priority": 1}] * 3
        + [{"type": "tests.serial", "concurrency_key": "b", "queue": "other"}]
    )
    enqueue("tests.serial", concurrency_key="a", delay=timedelta(hours=1))  # not runnable
    claim_key()
    running = Job.objects.get(status=JobStatus.RUNNING)
    assert running.concurrency_key == "a"
    assert held_back(db.database_alias()) == {"default": held("key", 2)}


def test_a_key_below_its_type_s_limit_holds_nothing() -> None:
    enqueue_many([{"type": "tests.pair", "concurrency_key": "a"}] * 3)
    claim_key()
    assert held_back(db.database_alias()) == {}


def test_a_key_of_a_type_without_a_limit_counts_nothing() -> None:
    enqueue_many([{"type": "tests.record", "concurrency_key": "a"}] * 3)
    (claimed,) = db.claim(db.database_alias(), worker_id="w", lease_seconds=30, limit=1)
    assert Job.objects.get(pk=claimed.id).concurrency_key == "a"
    assert held_back(db.database_alias()) == {}


def test_a_full_queue_counts_its_busy_keys_jobs_under_its_limit_once() -> None:
    with override_settings(DURABLE_JOBS=LIMITED):
        enqueue_many([{"type": "tests.serial", "concurrency_key": "a", "queue": "narrow"}] * 4)
        assert claim_from("narrow", 4) == 1  # one per key
        # The queue has room for one more, its key does not.
        assert held_back(db.database_alias()) == {"narrow": held("key", 3)}
        jobs("narrow", 2)
        assert claim_from("narrow", 2) == 1  # the queue's second slot
        assert held_back(db.database_alias()) == {"narrow": held("concurrency", 4)}


def test_limits_with_room_hold_nothing() -> None:
    with override_settings(DURABLE_JOBS=LIMITED):
        jobs("roomy", 3)
        assert claim_from("roomy", 1) == 1
        assert held_back(db.database_alias()) == {}
