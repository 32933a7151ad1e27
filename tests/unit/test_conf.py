from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_durable_jobs.conf import SETTINGS, jobs_settings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "settings.md"


def test_defaults_apply_when_unset() -> None:
    with override_settings(DURABLE_JOBS={}):
        assert jobs_settings.LEASE_SECONDS == 30.0
        assert jobs_settings.DEFAULT_MAX_ATTEMPTS == 5
        assert jobs_settings.BACKOFF_MAX_SECONDS == 3600.0


def test_settings_are_read_lazily_so_override_settings_works() -> None:
    with override_settings(DURABLE_JOBS={"LEASE_SECONDS": 12}):
        assert jobs_settings.LEASE_SECONDS == 12
    assert jobs_settings.LEASE_SECONDS == 30.0


def test_an_ill_typed_value_is_an_error_not_a_silent_default() -> None:
    with (
        override_settings(DURABLE_JOBS={"LEASE_SECONDS": "30"}),
        pytest.raises(ImproperlyConfigured, match="LEASE_SECONDS"),
    ):
        _ = jobs_settings.LEASE_SECONDS


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="LEASE"):
        _ = jobs_settings.LEASE


def test_a_non_dict_setting_is_an_error() -> None:
    with (
        override_settings(DURABLE_JOBS=["LEASE_SECONDS"]),
        pytest.raises(ImproperlyConfigured, match="must be a dict"),
    ):
        _ = jobs_settings.LEASE_SECONDS


def test_every_setting_is_documented_with_its_default() -> None:
    text = DOCS.read_text()
    for name, spec in SETTINGS.items():
        assert f"`{name}`" in text, f"{name} is missing from {DOCS.name}"
        assert f"`{spec.default!r}`" in text, f"{name}'s default is not in {DOCS.name}"
