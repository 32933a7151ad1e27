"""The reference pages name every check id, metric, `jobs` subcommand and public name.

A new check, metric or subcommand without its entry in docs/reference/
fails here, so the reference cannot silently fall behind the code.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.core.management import load_command_class

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_durable_jobs"
REFERENCE = ROOT / "docs" / "reference"


def _source() -> str:
    return "\n".join(path.read_text() for path in sorted(PACKAGE.rglob("*.py")))


def test_every_check_id_has_a_section_in_checks_md() -> None:
    ids = set(re.findall(r"""id=["'](durable_jobs\.[EW]\d{3})["']""", _source()))
    assert {"durable_jobs.E001", "durable_jobs.E005"} <= ids
    page = (REFERENCE / "checks.md").read_text()
    missing = sorted(i for i in ids if f"\n## {i}\n" not in page)
    assert not missing, f"Add a section to docs/reference/checks.md for: {missing}"


def test_every_metric_is_in_metrics_md() -> None:
    source = (PACKAGE / "metrics.py").read_text()
    names = set(re.findall(r'"(durable_jobs_[a-z_]+)"', source))
    assert {"durable_jobs_enqueued", "durable_jobs_queue_depth"} <= names
    page = (REFERENCE / "metrics.md").read_text()
    # Counters are declared without their _total suffix, which the
    # exposition (and the page) adds.
    missing = sorted(n for n in names if f"`{n}`" not in page and f"`{n}_total`" not in page)
    assert not missing, f"Add these metrics to docs/reference/metrics.md: {missing}"


def test_every_jobs_subcommand_has_a_section_in_cli_md() -> None:
    command = load_command_class("django_durable_jobs", "jobs")
    parser = command.create_parser("manage.py", "jobs")
    (subparsers,) = (a for a in parser._actions if a.dest == "subcommand")
    names = set(subparsers.choices)
    assert {"stats", "list", "show", "requeue", "cancel", "prune"} <= names
    page = (REFERENCE / "cli.md").read_text()
    missing = sorted(n for n in names if f"\n## `jobs {n}" not in page)
    assert not missing, f"Add a section to docs/reference/cli.md for: jobs {missing}"


def test_every_public_name_is_in_python_api_md() -> None:
    import django_durable_jobs

    names = set(django_durable_jobs.__all__) - {"__version__"}
    assert {"job", "enqueue", "enqueue_many", "Retry", "Discard"} <= names
    page = (REFERENCE / "python-api.md").read_text()
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert not missing, f"Document these in docs/reference/python-api.md: {missing}"
