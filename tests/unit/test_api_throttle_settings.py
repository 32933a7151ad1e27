"""``API_FAILED_AUTH_RATE`` and ``API_THROTTLE_CLASSES`` are checked like every setting."""

from __future__ import annotations

from typing import Any

import pytest

from django_durable_jobs.conf import SETTINGS


@pytest.mark.parametrize("value", [None, "10/m", "1/s", "1000/h", " 20 / m "])
def test_failed_auth_rate_accepts_none_and_n_per_unit(value: Any) -> None:
    assert SETTINGS["API_FAILED_AUTH_RATE"].is_valid(value)


@pytest.mark.parametrize("value", ["10/minute", "0/m", "10/d", "m", 10, "", True])
def test_failed_auth_rate_refuses_anything_else(value: Any) -> None:
    assert not SETTINGS["API_FAILED_AUTH_RATE"].is_valid(value)


@pytest.mark.parametrize("value", [None, (), [], ["rest_framework.throttling.ScopedRateThrottle"]])
def test_throttle_classes_accept_none_and_lists_of_dotted_paths(value: Any) -> None:
    assert SETTINGS["API_THROTTLE_CLASSES"].is_valid(value)


@pytest.mark.parametrize("value", ["rest_framework.throttling.ScopedRateThrottle", ["x"], [1]])
def test_throttle_classes_refuse_anything_else(value: Any) -> None:
    assert not SETTINGS["API_THROTTLE_CLASSES"].is_valid(value)
