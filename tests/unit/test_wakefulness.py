"""When a worker tells the enqueues it sleeps or is awake (``worker/wakefulness.py``).

The database calls are replaced by a record of the marks and a list of the
transactions "in progress"; ``tests/integration/test_wakefulness.py`` runs the
same moves against PostgreSQL, with a real enqueue racing the move to sleep.
"""

from __future__ import annotations

import pytest

from django_durable_jobs.worker import wakefulness
from django_durable_jobs.worker.wakefulness import (
    AWAKE_POLL_SECONDS,
    IDLE_POLLS,
    WINDOW_SECONDS,
    Wakefulness,
)


class FakeDatabase:
    def __init__(self) -> None:
        self.marks: list[bool] = []  # sleeping, in order
        self.running: list[str] = []

    def mark_listener(self, alias: str, worker_id: str, queues: object, **kw: object) -> None:
        self.marks.append(bool(kw["sleeping"]))

    def transactions_in_progress(self, alias: str) -> list[str]:
        return list(self.running)

    def still_in_progress(self, alias: str, xids: list[str]) -> list[str]:
        return [x for x in xids if x in self.running]


@pytest.fixture
def fake_db(monkeypatch: pytest.MonkeyPatch) -> FakeDatabase:
    fake = FakeDatabase()
    for name in ("mark_listener", "transactions_in_progress", "still_in_progress"):
        monkeypatch.setattr(wakefulness.db, name, getattr(fake, name))
    return fake


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock, *, poll_interval: float = 2.0, enabled: bool = True) -> Wakefulness:
    return Wakefulness(
        "default",
        "w1",
        None,
        poll_interval=poll_interval,
        forget_after_seconds=60.0,
        enabled=enabled,
        clock=clock,
    )


def started(fake_db: FakeDatabase, clock: Clock) -> Wakefulness:
    """A worker past its first claim: marked sleeping, settled."""
    w = make(clock)
    w.before_claim()
    w.after_claim(0, False)
    assert fake_db.marks == [True] and not w.polling
    return w


def test_the_first_claim_marks_the_worker_sleeping_and_waits_for_running_writers(
    fake_db: FakeDatabase,
) -> None:
    clock = Clock()
    fake_db.running = ["701"]
    w = make(clock)
    w.before_claim()
    # An enqueue that looked before the mark may still commit: poll until it ends.
    assert fake_db.marks == [True] and w.polling and not w.awake
    w.after_claim(0, False)
    assert w.polling and w.poll_seconds() == AWAKE_POLL_SECONDS
    w.before_claim()
    w.after_claim(0, False)
    assert w.polling and w.poll_seconds() == 2 * AWAKE_POLL_SECONDS  # less and less often
    fake_db.running = []
    w.before_claim()  # it ended: this claim is the last one needed
    assert w.polling
    w.after_claim(0, False)
    assert not w.polling


def test_a_writer_longer_than_the_poll_interval_is_left_to_the_poll(
    fake_db: FakeDatabase,
) -> None:
    clock = Clock()
    fake_db.running = ["702"]
    w = make(clock, poll_interval=0.05)
    w.before_claim()
    w.after_claim(0, False)
    waits = []
    while w.polling:
        waits.append(w.poll_seconds())
        w.before_claim()
        w.after_claim(0, False)
        assert len(waits) < 10
    # 3, 6, 12, 24, 48 ms; 96 would pass the 50 ms poll: the poll covers the rest.
    assert waits == pytest.approx([0.003, 0.006, 0.012, 0.024, 0.048])
    assert fake_db.marks == [True]


def test_a_full_claim_wakes_the_worker_up(fake_db: FakeDatabase) -> None:
    clock = Clock()
    w = started(fake_db, clock)
    w.after_claim(8, True)
    assert w.awake and fake_db.marks == [True, False]
    assert w.polling and w.poll_seconds() == AWAKE_POLL_SECONDS


def test_notifications_faster_than_the_threshold_wake_it_up(fake_db: FakeDatabase) -> None:
    clock = Clock()
    w = started(fake_db, clock)
    window = 1.2 * WINDOW_SECONDS
    # Slower: 200 a second, windows after windows.
    for _ in range(5):
        for _ in range(int(200 * window)):
            w.heard()
        clock.now += window
        w.after_claim(1, False)
        assert not w.awake
    for _ in range(int(wakefulness.AWAKE_AT_PER_SECOND * window) + 1):
        w.heard()
    clock.now += window
    w.after_claim(1, False)
    assert w.awake and fake_db.marks == [True, False]


def test_an_awake_worker_sleeps_again_after_empty_claims_in_a_row(
    fake_db: FakeDatabase,
) -> None:
    clock = Clock()
    w = started(fake_db, clock)
    w.after_claim(8, True)
    for _ in range(IDLE_POLLS - 1):
        w.after_claim(0, False)
    w.after_claim(3, False)  # a job came: count again
    for _ in range(IDLE_POLLS - 1):
        w.after_claim(0, False)
    assert w.awake and fake_db.marks == [True, False]
    fake_db.running = ["900"]
    w.after_claim(0, False)
    assert not w.awake and fake_db.marks == [True, False, True]
    # Settling: still polling until transaction 900 ends, then one claim more.
    w.before_claim()
    w.after_claim(0, False)
    assert w.polling
    fake_db.running = []
    w.before_claim()
    w.after_claim(0, False)
    assert not w.polling


def test_a_reconnected_listener_marks_the_worker_sleeping_again(fake_db: FakeDatabase) -> None:
    clock = Clock()
    w = started(fake_db, clock)
    w.after_claim(8, True)
    w.listening()  # a crash emptied the unlogged table, say
    w.before_claim()
    assert fake_db.marks == [True, False, True] and not w.awake


def test_a_worker_without_a_listener_marks_nothing(fake_db: FakeDatabase) -> None:
    clock = Clock()
    w = make(clock, enabled=False)
    w.listening()
    w.before_claim()
    w.after_claim(8, True)
    assert fake_db.marks == [] and not w.polling


def test_a_move_to_sleep_that_failed_halfway_is_made_again(
    fake_db: FakeDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Marked sleeping, but the snapshot of open transactions failed: the next claim
    marks and looks again, rather than sleeping without waiting for them."""
    from django.db import OperationalError

    clock = Clock()
    w = make(clock)

    def fails(alias: str) -> list[str]:
        raise OperationalError("connection lost")

    monkeypatch.setattr(wakefulness.db, "transactions_in_progress", fails)
    with pytest.raises(OperationalError):
        w.before_claim()
    monkeypatch.setattr(
        wakefulness.db, "transactions_in_progress", fake_db.transactions_in_progress
    )
    fake_db.running = ["42"]
    w.before_claim()
    assert fake_db.marks == [True, True] and w.polling


def test_an_awake_worker_whose_jobs_come_slowly_goes_back_to_sleep(
    fake_db: FakeDatabase,
) -> None:
    """At 200 jobs a second an awake worker's polls find a job often enough never to
    count 30 empty ones, yet a NOTIFY would start each job sooner than a 3 ms poll."""
    clock = Clock()
    w = started(fake_db, clock)
    w.after_claim(8, True)  # a backlog: awake
    assert w.awake
    window = 1.2 * WINDOW_SECONDS
    # 350 jobs a second, between the two thresholds: stays awake.
    for _ in range(5):
        clock.now += window
        w.after_claim(int(350 * window), False)
        assert w.awake
    # A full claim in the window keeps it awake whatever the count.
    clock.now += window
    w.after_claim(1, True)
    assert w.awake
    # 200 a second: back to sleep.
    clock.now += window
    w.after_claim(int(200 * window), False)
    assert not w.awake and fake_db.marks == [True, False, True]
