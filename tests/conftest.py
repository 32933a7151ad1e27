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
