"""docs/reference/runjobworker.md lists every option the command accepts."""

from __future__ import annotations

from pathlib import Path

from django.core.management import load_command_class

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "runjobworker.md"
# Options every Django command has; the page points to Django's docs for them.
DJANGO_COMMON = {
    "--help",
    "--version",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
}


def test_every_runjobworker_option_is_documented() -> None:
    command = load_command_class("django_durable_jobs", "runjobworker")
    parser = command.create_parser("manage.py", "runjobworker")
    options = {
        string
        for action in parser._actions
        for string in action.option_strings
        if string.startswith("--") and string not in DJANGO_COMMON
    }
    assert {"--queues", "--concurrency", "--grace-period"} <= options
    text = PAGE.read_text()
    missing = sorted(option for option in options if f"`{option}" not in text)
    assert not missing, f"Add these runjobworker options to {PAGE.name}: {missing}"
