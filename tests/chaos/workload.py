"""The jobs the scenarios run, and waiting for them to drain.

The flow: ``tests.record`` jobs (one ``Execution`` row per run, then a short
sleep), with attempts enough (``MAX_ATTEMPTS``) that no fault a scenario
makes can use them all up: a job that ends ``dead`` is lost.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable

from django_durable_jobs import enqueue_many

from .fleet import Fleet
from .tally import by_status, unfinished

MAX_ATTEMPTS = 25
BATCH = 5_000


def rng() -> tuple[random.Random, int]:
    """A random generator and its seed (``CHAOS_SEED`` to repeat the faults' choices)."""
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 30))
    return random.Random(seed), seed


def enqueue_flow(
    alias: str,
    n: int,
    *,
    sleep: tuple[float, float] = (0.0, 0.01),
    random_: random.Random | None = None,
    **spec: object,
) -> list[uuid.UUID]:
    """Enqueue ``n`` flow jobs, each sleeping a random time in ``sleep``; their ids."""
    choose = random_ or random.Random(0)
    ids: list[uuid.UUID] = []
    for start in range(0, n, BATCH):
        rows = [
            {
                "type": "tests.record",
                "payload": {"i": i, "sleep": round(choose.uniform(*sleep), 4)},
                "max_attempts": MAX_ATTEMPTS,
                **spec,
            }
            for i in range(start, min(n, start + BATCH))
        ]
        ids += [result.job.pk for result in enqueue_many(rows, using=alias)]
    return ids


def drain(
    fleet: Fleet,
    timeout: float,
    *,
    during: Callable[[], None] | None = None,
    interval: float = 0.2,
) -> None:
    """Wait until no job is unfinished, calling ``during()`` between looks (faults, restarts).

    On a timeout, the AssertionError says what was left and shows the workers' logs.
    """
    deadline = time.monotonic() + timeout
    while unfinished(fleet.alias):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"jobs left after {timeout} s: {by_status(fleet.alias)}\n{fleet.tails()}"
            )
        if during is not None:
            during()
        time.sleep(interval)


def stop_cleanly(fleet: Fleet) -> None:
    """SIGTERM every live worker; each must exit 0.

    Only once each is up (its signal handlers installed): a replacement
    still importing Django would die of the SIGTERM instead.
    """
    fleet.wait_up(*fleet.alive())
    codes = fleet.stop_all()
    bad = {worker: code for worker, code in codes.items() if code != 0}
    assert not bad, f"workers did not stop cleanly: {bad}\n{fleet.tails()}"
