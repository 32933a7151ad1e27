"""``flow.room()``: how many jobs of a queue may start now, and which limit says no more.

The claim (``db.claim_limited``) and the held-back counts (``held_back.py``)
both call it; here it is checked on its own, without a database.
"""

from __future__ import annotations

import pytest

from django_durable_jobs.flow import (
    QUEUE_LIMIT_REASONS,
    FlowCounts,
    QueueLimits,
    RateLimit,
    Room,
    room,
)

CONCURRENCY_4 = QueueLimits(concurrency=4)
RATE_5 = QueueLimits(rate_limit=RateLimit(5, 1.0))
BOTH = QueueLimits(rate_limit=RateLimit(5, 1.0), concurrency=4)


def test_an_unlimited_queue_starts_what_is_wanted() -> None:
    assert room(QueueLimits(), FlowCounts(running=1_000, recent_starts=1_000), 7) == Room(7, None)


@pytest.mark.parametrize(
    ("running", "want", "expected"),
    [
        (0, 3, Room(3, None)),  # room for all
        (0, 4, Room(4, None)),  # exactly the room: nothing held back
        (1, 4, Room(3, "concurrency")),
        (4, 2, Room(0, "concurrency")),
        (6, 1, Room(0, "concurrency")),  # over the limit (it was lowered): never negative
    ],
)
def test_concurrency_leaves_its_free_slots(running: int, want: int, expected: Room) -> None:
    assert room(CONCURRENCY_4, FlowCounts(running=running), want) == expected


@pytest.mark.parametrize(
    ("recent", "want", "expected"),
    [
        (0, 5, Room(5, None)),
        (3, 5, Room(2, "rate_limit")),
        (5, 1, Room(0, "rate_limit")),
        (9, 1, Room(0, "rate_limit")),
    ],
)
def test_a_rate_limit_leaves_what_its_window_has_left(
    recent: int, want: int, expected: Room
) -> None:
    assert room(RATE_5, FlowCounts(recent_starts=recent), want) == expected


def test_running_jobs_do_not_count_against_a_rate_nor_starts_against_concurrency() -> None:
    assert room(RATE_5, FlowCounts(running=100), 5) == Room(5, None)
    assert room(CONCURRENCY_4, FlowCounts(recent_starts=100), 4) == Room(4, None)


def test_the_tighter_limit_wins() -> None:
    assert room(BOTH, FlowCounts(running=1, recent_starts=4), 10) == Room(1, "rate_limit")
    assert room(BOTH, FlowCounts(running=3, recent_starts=0), 10) == Room(1, "concurrency")


def test_a_queue_with_both_limits_full_is_held_by_its_concurrency() -> None:
    # As the held-back counts say it: the claim's order.
    assert room(BOTH, FlowCounts(running=4, recent_starts=5), 1) == Room(0, "concurrency")


def test_want_one_asks_whether_the_queue_is_full() -> None:
    assert room(BOTH, FlowCounts(running=3, recent_starts=4), 1).held_by is None
    assert room(BOTH, FlowCounts(running=3, recent_starts=5), 1).held_by == "rate_limit"


def test_wanting_nothing_holds_nothing_back() -> None:
    assert room(BOTH, FlowCounts(running=4, recent_starts=5), 0) == Room(0, None)


def test_room_applies_the_queue_limits_in_the_order_the_held_back_counts_use() -> None:
    # Each limit alone, full: room() names it; both full: the first of the order.
    full = FlowCounts(running=4, recent_starts=5)
    assert room(CONCURRENCY_4, full, 1).held_by == QUEUE_LIMIT_REASONS[0]
    assert room(RATE_5, full, 1).held_by == QUEUE_LIMIT_REASONS[1]
    assert room(BOTH, full, 1).held_by == QUEUE_LIMIT_REASONS[0]
