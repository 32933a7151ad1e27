"""The rule and declaration modules import in any order, and without the models.

They form layers, each importing only those below it: ``constants``,
``exceptions``, ``durations``, ``names``, ``handlers``, ``conf``,
``validation``, ``schedules`` (``ticks`` then ``declarations``), then
``registry`` (``@job``). A circle among them would show here as an
``ImportError`` (a partly initialised module) for whichever module a fresh
interpreter happens to import first; importing the models would break
``from django_durable_jobs import job`` in another app's ``models.py``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

LAYERS = [
    "constants",
    "exceptions",
    "durations",
    "names",
    "handlers",
    "conf",
    "validation",
    "schedules.ticks",
    "schedules.declarations",
    "schedules",
    "registry",
]

CHECK = """
import sys
import django_durable_jobs.{module}
import django_durable_jobs
assert callable(django_durable_jobs.job)
assert "django_durable_jobs.models" not in sys.modules, "imported the models"
"""


@pytest.mark.parametrize("module", LAYERS)
def test_a_rule_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECK.format(module=module)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
