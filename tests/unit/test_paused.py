"""The worker's copy of the paused queues: when it reads the table again (no database)."""

from __future__ import annotations

from collections.abc import Iterator
from unittest import mock

import pytest
from django.db import DatabaseError

from django_durable_jobs.worker import paused as paused_module
from django_durable_jobs.worker.paused import LIFT_MARGIN_SECONDS, PausedQueues


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def table() -> Iterator[mock.MagicMock]:
    with mock.patch.object(paused_module.db, "paused_queues") as read:
        read.return_value = {}
        yield read


def test_reads_at_first_use_then_once_per_interval(table: mock.MagicMock) -> None:
    clock = Clock()
    paused = PausedQueues("default", None, 2.0, clock=clock)
    table.return_value = {"emails": None}
    assert paused.current() == {"emails"}
    clock.now += 1.9
    table.return_value = {}
    assert paused.current() == {"emails"}  # not read again yet
    assert table.call_count == 1
    clock.now += 0.2
    assert paused.current() == frozenset()
    assert table.call_count == 2


def test_an_invalidation_reads_again_before_the_next_claim(table: mock.MagicMock) -> None:
    paused = PausedQueues("default", None, 60.0, clock=Clock())
    assert paused.current() == frozenset()
    table.return_value = {"emails": None}
    paused.invalidate()
    assert paused.current() == {"emails"}


def test_a_pause_with_an_end_is_read_again_when_it_ends(table: mock.MagicMock) -> None:
    clock = Clock()
    paused = PausedQueues("default", None, 60.0, clock=clock)
    table.return_value = {"emails": 1.5, "reports": None}
    assert paused.current() == {"emails", "reports"}
    assert paused.lifts_at == pytest.approx(101.5 + LIFT_MARGIN_SECONDS)
    assert paused.next_change_in(clock.now) == pytest.approx(1.5 + LIFT_MARGIN_SECONDS)
    table.return_value = {"reports": None}
    clock.now = 101.4
    assert paused.current() == {"emails", "reports"}
    clock.now = 101.6
    assert paused.current() == {"reports"}
    assert paused.lifts_at is None and paused.next_change_in(clock.now) is None


def test_a_worker_of_some_queues_ignores_the_others(table: mock.MagicMock) -> None:
    paused = PausedQueues("default", frozenset({"emails"}), 60.0, clock=Clock())
    table.return_value = {"emails": None, "reports": 5.0}
    assert paused.current() == {"emails"}
    assert paused.lifts_at is None  # reports' end is not this worker's business
    assert paused.concerns("emails") and not paused.concerns("reports")


def test_a_failed_read_stays_stale_and_keeps_the_last_copy(table: mock.MagicMock) -> None:
    paused = PausedQueues("default", None, 60.0, clock=Clock())
    table.return_value = {"emails": None}
    assert paused.current() == {"emails"}
    paused.invalidate()
    table.side_effect = DatabaseError("gone")
    with pytest.raises(DatabaseError):
        paused.current()
    assert paused.names == {"emails"}
    table.side_effect = None
    table.return_value = {}
    assert paused.current() == frozenset()
