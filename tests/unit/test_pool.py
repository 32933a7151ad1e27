"""Slot groups: when an elastic group grows and shrinks (no database, a fake clock)."""

from __future__ import annotations

import threading

import pytest

from django_durable_jobs.worker.pool import (
    CLAIM_AHEAD_LIMIT,
    CLAIM_AHEAD_MAX_SECONDS,
    SlotGroup,
    Slots,
    check_queue_slots,
)
from tests.factories import wait_until


def idle_target(group: SlotGroup) -> None:
    """A handler thread that runs nothing: it only waits for its stop marker."""
    while group.jobs.get() is not None:
        pass


@pytest.fixture
def groups() -> list[SlotGroup]:
    made: list[SlotGroup] = []
    yield made
    for group in made:
        threads = group.threads()
        group.stop_all()
        for thread in threads:
            thread.join(5)


def make(groups: list[SlotGroup], minimum: int, maximum: int, quiet: float = 30.0) -> SlotGroup:
    group = SlotGroup("all", None, Slots(minimum, maximum), quiet, idle_target)
    group.start(now=0.0)
    groups.append(group)
    return group


def live(group: SlotGroup, expected: int) -> None:
    wait_until(
        lambda: len(group.threads()) == expected,
        what=lambda: f"{expected} live threads, not {len(group.threads())}",
        interval=0.01,
    )


def test_a_fixed_group_never_grows(groups: list[SlotGroup]) -> None:
    group = make(groups, 3, 3)
    assert (group.size, group.free()) == (3, 3)
    assert not group.claimed(3, 3, now=1.0)
    assert (group.size, group.free()) == (3, 0)
    assert group.shrink_if_quiet(now=1000.0) == 0
    assert group.next_shrink_at() is None


def test_an_elastic_group_grows_one_slot_per_full_claim_up_to_its_maximum(
    groups: list[SlotGroup],
) -> None:
    group = make(groups, 2, 4)
    assert group.claimed(2, 2, now=1.0)  # full, every slot busy: one more slot
    assert (group.size, group.free()) == (3, 1)
    assert group.claimed(1, 1, now=1.1)
    assert (group.size, group.free()) == (4, 1)
    assert not group.claimed(1, 1, now=1.2)  # at its maximum
    assert (group.size, group.free()) == (4, 0)
    live(group, 4)


def test_a_claim_that_came_back_short_does_not_grow(groups: list[SlotGroup]) -> None:
    group = make(groups, 2, 4)
    assert not group.claimed(2, 1, now=1.0)
    assert not group.more_waiting
    assert (group.size, group.free()) == (2, 1)


def test_slots_unused_for_the_quiet_period_are_stopped(groups: list[SlotGroup]) -> None:
    group = make(groups, 1, 5, quiet=10.0)
    for now in (1.0, 1.1, 1.2, 1.3):
        group.claimed(1, 1, now=now)
    assert (group.size, group.running) == (5, 4)
    for _ in range(4):
        group.finished()
    assert group.next_shrink_at() == pytest.approx(11.3)
    assert group.shrink_if_quiet(now=11.0) == 0  # not quiet long enough
    # Four were busy at once in this window: it keeps four for now.
    assert group.shrink_if_quiet(now=11.4) == 1
    assert group.size == 4
    live(group, 4)
    # A whole window with none busy: back to the minimum.
    assert group.shrink_if_quiet(now=21.5) == 3
    assert group.size == 1
    live(group, 1)
    assert group.next_shrink_at() is None


def test_never_shrinks_below_what_runs(groups: list[SlotGroup]) -> None:
    group = make(groups, 1, 3, quiet=1.0)
    group.claimed(1, 1, now=0.0)
    group.claimed(1, 1, now=0.0)
    assert (group.size, group.running) == (3, 2)
    assert group.shrink_if_quiet(now=5.0) == 1
    assert group.size == 2
    assert group.shrink_if_quiet(now=10.0) == 0  # both still run
    group.finished()
    group.finished()
    # Both were busy in the window that ends now (at its start): kept once more.
    assert group.shrink_if_quiet(now=20.0) == 0
    assert group.shrink_if_quiet(now=30.0) == 1
    assert group.size == 1


def test_stop_all_stops_every_thread(groups: list[SlotGroup]) -> None:
    group = make(groups, 3, 3)
    threads = group.threads()
    group.stop_all()
    for thread in threads:
        thread.join(5)
    assert not any(t.is_alive() for t in threads)
    assert group.size == 0


def test_thread_names_say_which_group() -> None:
    started = threading.Event()

    def target(group: SlotGroup) -> None:
        started.set()
        idle_target(group)

    group = SlotGroup("emails", frozenset({"emails"}), Slots(1, 1), 30.0, target)
    group.start(now=0.0)
    assert started.wait(5)
    (thread,) = group.threads()
    assert thread.name == "durable-jobs-handler-emails-1"
    group.stop_all()
    thread.join(5)


@pytest.mark.parametrize(
    ("slots", "message"),
    [
        ({"emails": 0}, "queue 'emails'"),
        ({"emails": (3, 2)}, "got 3-2"),
        ({"emails": "4"}, "queue 'emails'"),
        ({"a b": 1}, "not a valid queue name"),
        ({}, "at least one queue"),
        ({"a": 999, "b": 2}, "add up to 1001"),
    ],
)
def test_bad_queue_slots(slots: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_queue_slots(slots)  # type: ignore[arg-type]


def test_slots() -> None:
    assert str(Slots(4, 4)) == "4" and str(Slots(2, 16)) == "2-16"
    assert check_queue_slots({"emails": 4, "hooks": (1, 8)}) == {
        "emails": Slots(4, 4),
        "hooks": Slots(1, 8),
    }


def test_a_group_claims_only_into_free_slots_until_it_knows_its_jobs_are_short(
    groups: list[SlotGroup],
) -> None:
    group = make(groups, 4, 4)
    assert (group.ahead, group.room()) == (0, 4)
    group.claimed(4, 4, now=1.0)
    assert not group.wants_claim()
    group.finished()
    assert group.wants_claim()  # a free slot, no buffer: claim one


def test_short_jobs_make_a_group_claim_ahead_about_fifty_ms_of_work_within_a_limit(
    groups: list[SlotGroup],
) -> None:
    group = make(groups, 4, 4)
    group.attempt_took(0.010)  # 4 slots x 50 ms / 10 ms: 20 ahead
    assert (group.ahead, group.room()) == (20, 24)
    group.attempt_took(0.010)
    for _ in range(50):
        group.attempt_took(0.000_01)  # no-op jobs: capped
    assert group.ahead == CLAIM_AHEAD_LIMIT
    group.claimed(group.room(), group.room(), now=1.0)
    assert group.free() == 0 and group.room() == 0
    # Claims come in batches: not until half of the buffer is used.
    for _ in range(CLAIM_AHEAD_LIMIT // 2):
        group.finished()
    assert not group.wants_claim()
    group.finished()
    assert group.wants_claim()
    assert group.room() == CLAIM_AHEAD_LIMIT // 2 + 1


def test_long_jobs_turn_claiming_ahead_off(groups: list[SlotGroup]) -> None:
    group = make(groups, 4, 4)
    group.attempt_took(0.001)
    assert group.ahead > 0
    group.attempt_took(CLAIM_AHEAD_MAX_SECONDS * 10)  # the running mean passes the bound
    assert group.mean_duration is not None and group.mean_duration > CLAIM_AHEAD_MAX_SECONDS
    assert (group.ahead, group.room()) == (0, 4)


def test_claimed_ahead_jobs_never_make_a_quiet_group_stop_more_slots_than_it_has(
    groups: list[SlotGroup],
) -> None:
    group = make(groups, 1, 3, quiet=10.0)
    group.claimed(1, 1, now=1.0)
    group.claimed(1, 1, now=1.0)
    assert group.size == 3
    group.attempt_took(0.001)
    group.claimed(group.room(), group.room(), now=1.0)  # more running than slots
    assert group.running > group.size
    assert group.shrink_if_quiet(now=100.0) == 0
    assert group.size == 3
