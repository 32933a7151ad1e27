"""``hooks.concurrency_limits``: what the worker enforces per concurrency key (no database)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from django_durable_jobs import hooks


@pytest.fixture(autouse=True)
def own_providers() -> Iterator[None]:
    """Each test registers its own providers, and leaves the app's as they were."""
    saved = list(hooks._limits_providers)
    hooks._limits_providers.clear()
    yield
    hooks._limits_providers[:] = saved


def test_providers_add_types_and_job_handlers_keep_their_own_limit() -> None:
    def provider() -> Mapping[str, int]:
        return {"elsewhere.task": 3, "tests.serial": 9}

    hooks.add_concurrency_limits(provider)
    hooks.add_concurrency_limits(provider)  # idempotent
    assert hooks._limits_providers == [provider]
    limits = hooks.concurrency_limits()
    assert limits["elsewhere.task"] == 3
    assert limits["tests.serial"] == 1  # @job("tests.serial", concurrency_limit=1)


def test_a_failing_provider_is_logged_and_left_out(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> Mapping[str, int]:
        raise RuntimeError("provider bug")

    hooks.add_concurrency_limits(broken)
    hooks.add_concurrency_limits(lambda: {"elsewhere.task": 2})
    limits = hooks.concurrency_limits()
    assert limits["elsewhere.task"] == 2 and limits["tests.serial"] == 1
    (record,) = [r for r in caplog.records if r.name == "django_durable_jobs"]
    assert "Concurrency limits provider" in record.getMessage()
    assert record.exc_info is not None and "provider bug" in str(record.exc_info[1])
