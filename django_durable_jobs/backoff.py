"""Retry delays: exponential from a base, doubling per attempt, with jitter, capped.

Pure functions, so the schedule is easy to reason about and to test;
``RetryPolicy`` binds them to the settings, for every failed attempt.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from dataclasses import dataclass

from .conf import jobs_settings


def exponential_delay(attempt: int, *, base: float, cap: float) -> float:
    """``base * 2**(attempt - 1)``, at most ``cap``: attempt 1 waits ``base``.

    >>> [exponential_delay(a, base=1.0, cap=60.0) for a in (1, 2, 3, 7, 8)]
    [1.0, 2.0, 4.0, 60.0, 60.0]
    """
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    # Compare exponents first: 2**attempt overflows a float past ~1024.
    if attempt - 1 >= 1024 or base * 2.0 ** (attempt - 1) >= cap:
        return cap
    return base * 2.0 ** (attempt - 1)


def jittered(
    delay: float, *, jitter: float, cap: float, random: Callable[[], float] = _random.random
) -> float:
    """``delay`` spread by up to ``±jitter`` of itself, kept within ``[0, cap]``.

    Jitter stops a burst of jobs that failed together (an outage) from
    retrying together and failing together again.

    >>> jittered(10.0, jitter=0.1, cap=60.0, random=lambda: 1.0)
    11.0
    >>> jittered(10.0, jitter=0.1, cap=60.0, random=lambda: 0.0)
    9.0
    """
    spread = delay * jitter * (2.0 * random() - 1.0)
    return min(cap, max(0.0, delay + spread))


def retry_delay(
    attempt: int,
    *,
    base: float,
    cap: float,
    jitter: float,
    random: Callable[[], float] = _random.random,
) -> float:
    """Seconds to wait before the attempt after failed attempt ``attempt``."""
    return jittered(
        exponential_delay(attempt, base=base, cap=cap), jitter=jitter, cap=cap, random=random
    )


@dataclass(frozen=True)
class RetryPolicy:
    """The backoff every failed attempt gets (handler errors, time limits, the reaper)."""

    base: float
    cap: float
    jitter: float

    @classmethod
    def from_settings(cls) -> RetryPolicy:
        return cls(
            base=float(jobs_settings.BACKOFF_BASE_SECONDS),
            cap=float(jobs_settings.BACKOFF_MAX_SECONDS),
            jitter=float(jobs_settings.BACKOFF_JITTER),
        )

    def delay(self, attempt: int, random: Callable[[], float] = _random.random) -> float:
        """Seconds before the attempt after failed attempt ``attempt``."""
        return retry_delay(attempt, base=self.base, cap=self.cap, jitter=self.jitter, random=random)
