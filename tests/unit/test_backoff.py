from __future__ import annotations

import doctest
import itertools
import random

import pytest

from django_durable_jobs import backoff
from django_durable_jobs.backoff import exponential_delay, jittered, retry_delay


def test_doctests() -> None:
    assert doctest.testmod(backoff).failed == 0


def test_delays_double_from_the_base_up_to_the_cap() -> None:
    delays = [exponential_delay(a, base=1.0, cap=3600.0) for a in range(1, 15)]
    assert delays[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert delays[-1] == 3600.0
    assert all(b >= a for a, b in itertools.pairwise(delays))


def test_huge_attempt_numbers_do_not_overflow() -> None:
    assert exponential_delay(10_000, base=1.0, cap=60.0) == 60.0


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        exponential_delay(0, base=1.0, cap=60.0)


def test_jitter_stays_within_its_fraction_and_varies() -> None:
    rng = random.Random(42)
    values = [jittered(10.0, jitter=0.1, cap=60.0, random=rng.random) for _ in range(1000)]
    assert all(9.0 <= v <= 11.0 for v in values)
    assert len(set(values)) > 900
    assert 9.8 < sum(values) / len(values) < 10.2


def test_jitter_never_exceeds_the_cap_or_goes_negative() -> None:
    assert jittered(60.0, jitter=0.5, cap=60.0, random=lambda: 1.0) == 60.0
    assert jittered(1.0, jitter=1.0, cap=60.0, random=lambda: 0.0) == 0.0
    assert retry_delay(50, base=1.0, cap=3600.0, jitter=0.1) <= 3600.0


def test_zero_jitter_is_exact() -> None:
    assert retry_delay(3, base=0.5, cap=60.0, jitter=0.0) == 2.0
