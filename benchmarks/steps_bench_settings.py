"""Settings of ``benchmarks/steps.py``: ``bench_settings`` and the ``steps_bench`` handlers."""

from __future__ import annotations

from bench_settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "steps_bench"]  # noqa: F405
