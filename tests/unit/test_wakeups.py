"""The times a worker claims again for jobs it suspended or retried (worker/wakeups.py)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

from django_durable_jobs.worker.wakeups import MARGIN_SECONDS, WakeTimes


def test_every_time_is_kept_not_only_the_soonest() -> None:
    wakes = WakeTimes()
    for due in (3.0, 1.0, 2.0):
        wakes.add(due)
    assert wakes.soonest() == 1.0
    # The first one fires: the second sleeper's time is still there.
    assert wakes.fire(1.5) is True
    assert wakes.soonest() == 2.0
    assert wakes.fire(1.9) is False
    assert wakes.fire(3.0) is True
    assert wakes.soonest() is None
    assert wakes.fire(100.0) is False


def test_one_fire_forgets_every_time_it_reached() -> None:
    wakes = WakeTimes()
    for due in (1.0, 1.0, 2.0, 5.0):
        wakes.add(due)
    assert wakes.fire(2.0) is True
    assert len(wakes) == 1
    assert wakes.soonest() == 5.0


def test_beyond_the_limit_the_latest_times_are_dropped() -> None:
    wakes = WakeTimes(limit=3)
    for due in (5.0, 4.0, 3.0, 2.0, 1.0):
        wakes.add(due)
    assert len(wakes) == 3
    fired = []
    for now in (1.0, 2.0, 3.0, 4.0, 5.0):
        fired.append(wakes.fire(now))
    assert fired == [True, True, True, False, False]


def test_wall_clock_times_and_delays_become_monotonic_times_a_little_after() -> None:
    wakes = WakeTimes()
    before = time.monotonic()
    wakes.add_at(datetime.now(timezone.utc) + timedelta(seconds=10))
    wakes.add_in(-5)  # a retry already due: now, not in the past
    after = time.monotonic()
    first = wakes.soonest()
    assert first is not None and before + MARGIN_SECONDS <= first <= after + MARGIN_SECONDS
    assert wakes.fire(after + MARGIN_SECONDS)
    second = wakes.soonest()
    assert second is not None and before + 9.9 <= second <= after + 10.1


def test_threads_adding_at_once_lose_no_time() -> None:
    wakes = WakeTimes()

    def add(offset: int) -> None:
        for i in range(1_000):
            wakes.add(float(offset * 1_000 + i))

    threads = [threading.Thread(target=add, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wakes) == 4_000
    assert wakes.soonest() == 0.0
