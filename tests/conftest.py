from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_durable_jobs.registry import registry


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Let a test register handlers without leaking them into other tests."""
    saved = dict(registry._handlers)
    try:
        yield
    finally:
        registry._handlers.clear()
        registry._handlers.update(saved)


@pytest.fixture(autouse=True)
def fresh_wait_listeners() -> Iterator[None]:
    """Close the test's ``wait()`` listeners (and their LISTEN connections) after it.

    The next test starts without one, so what it counts (connections,
    waiters) is its own, and no connection outlives the test database.
    """
    from django_durable_jobs.waiting.listener import close_listeners

    yield
    close_listeners()
