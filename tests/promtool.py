"""Finding promtool (Debian's prometheus package), for the alert rule tests of every tier."""

from __future__ import annotations

import os
import shutil

import pytest

#: CI sets it where it installed promtool: a test that would skip fails instead.
REQUIRE_ENV = "DURABLE_JOBS_REQUIRE_PROMTOOL"


def promtool() -> str:
    """promtool's path; skips without it (fails with ``DURABLE_JOBS_REQUIRE_PROMTOOL=1``)."""
    path = shutil.which("promtool")
    if path is None:
        message = "promtool not found (Debian package prometheus: apt-get install prometheus)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{message}; {REQUIRE_ENV}=1", pytrace=False)
        pytest.skip(message)
    return path
