"""The claim planner's bookkeeping, without a database: which groups ask, and what a
limited queue's claim teaches it (the gateway's claims are stood in for)."""

from __future__ import annotations

from collections.abc import Iterator
from unittest import mock

import pytest
from django.test import override_settings

from django_durable_jobs import db, hooks
from django_durable_jobs.db.records import ClaimedJob
from django_durable_jobs.worker.claiming import ClaimPlanner
from django_durable_jobs.worker.config import WorkerConfig
from django_durable_jobs.worker.paused import PausedQueues
from django_durable_jobs.worker.pool import SlotGroup, Slots

LIMITED = {"narrow": {"concurrency": 2}}


def group(size: int = 4, running: int = 0) -> SlotGroup:
    made = SlotGroup("all", None, Slots(size, size), 30.0, lambda _group: None)
    made.size, made.running, made.more_waiting = size, running, False
    return made


def planner(slots: SlotGroup) -> ClaimPlanner:
    """A planner over ``slots``; no type limits its concurrency keys here."""
    config = WorkerConfig(alias="default", listen=False, schedules=False)
    paused = mock.Mock(spec=PausedQueues)
    paused.current.return_value = frozenset()
    with mock.patch.object(hooks, "concurrency_limits", return_value={}):
        return ClaimPlanner(config, [slots], paused, retry_soon=lambda _due: None)


@pytest.fixture
def no_claims() -> Iterator[None]:
    """The plain and keyed claims find nothing (no database here)."""
    with (
        mock.patch.object(db, "claim", return_value=[]),
        mock.patch.object(db, "claim_keyed", return_value=[]),
        mock.patch.object(db, "keys_held_back", return_value=[]),
    ):
        yield


def test_a_group_with_room_asks_for_it_at_a_poll_or_while_more_wait() -> None:
    slots = group(size=4, running=1)
    plan = planner(slots)
    assert plan.asks(due=True, notified=False) == [(slots, 3)]
    assert plan.asks(due=False, notified=False) == []
    slots.more_waiting = True  # its last claim was full: ask again at once
    assert plan.asks(due=False, notified=False) == [(slots, 3)]


def test_a_full_group_asks_for_nothing() -> None:
    slots = group(size=2, running=2)
    assert planner(slots).asks(due=True, notified=True) == []


@override_settings(DURABLE_JOBS={"QUEUES": LIMITED})
def test_a_limited_queue_held_back_is_looked_at_again_when_one_of_its_jobs_ends(
    no_claims: None,
) -> None:
    slots = group()
    plan = planner(slots)
    # Its rate window has room again in a minute: long enough for this test.
    held = db.LimitedClaim([], "rate_limit", 60.0)
    with mock.patch.object(db, "claim_limited", return_value=held) as claim_limited:
        assert plan.claim(plan.asks(due=True, notified=False)) == []
        assert claim_limited.call_args.kwargs["want"] == 4
        # Held back: not claimed again before the window has room...
        plan.claim(plan.asks(due=True, notified=False))
        assert claim_limited.call_count == 1
    # ...and runnable jobs are still there (a burst goes on).
    assert plan.may_find_more(ran_before=False)
    assert plan.slot_freed("narrow")  # a job of it ended here: look again now
    assert not plan.slot_freed("default")


@override_settings(DURABLE_JOBS={"QUEUES": LIMITED})
def test_a_limited_queue_found_empty_waits_for_a_poll(no_claims: None) -> None:
    slots = group()
    plan = planner(slots)
    empty = db.LimitedClaim([], None, None)
    with mock.patch.object(db, "claim_limited", return_value=empty) as claim_limited:
        plan.claim(plan.asks(due=True, notified=False))
        slots.more_waiting = True
        plan.claim(plan.asks(due=False, notified=False))  # not a poll: left alone
        assert claim_limited.call_count == 1
        plan.claim(plan.asks(due=True, notified=False))  # a poll: looked at again
        assert claim_limited.call_count == 2
    assert not plan.may_find_more(ran_before=False)


@override_settings(DURABLE_JOBS={"QUEUES": {}})
def test_the_plain_claim_asks_for_the_room_left(no_claims: None) -> None:
    slots = group(size=3)
    plan = planner(slots)
    plan.claim(plan.asks(due=True, notified=False))
    assert db.claim.call_args.kwargs["limit"] == 3  # type: ignore[attr-defined]


def test_a_job_is_handed_to_the_group_of_its_queue() -> None:
    slots = group()
    job = mock.Mock(spec=ClaimedJob, queue="default")
    assert planner(slots).group_of(job) is slots
