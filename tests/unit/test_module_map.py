"""The design page's module map names every module of the package, and only those.

``docs/explanation/design.md``, section "Module map": one table row per
module, its path relative to ``django_durable_jobs/`` in backticks in the
first cell (``worker/loop.py``), a package as its directory (``worker/``),
the package itself as ``__init__.py``. Migration files are the
``migrations/`` row. A module added, renamed or removed without its row
fails here, and the message says which rows to add or remove.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_durable_jobs"
PAGE = ROOT / "docs" / "explanation" / "design.md"
SECTION = "### Module map"


def package_modules(package: Path = PACKAGE) -> set[str]:
    """What the map must name: every module and package, paths relative to ``package``."""
    names = {"__init__.py"}
    for path in package.rglob("*.py"):
        relative = path.relative_to(package)
        if "__pycache__" in relative.parts or relative.parts[0] == "migrations":
            continue
        if path.name != "__init__.py":
            names.add(relative.as_posix())
        elif relative.parent != Path():
            names.add(f"{relative.parent.as_posix()}/")
    if (package / "migrations" / "__init__.py").exists():
        names.add("migrations/")
    return names


def mapped_rows(page: str) -> list[tuple[str, str]]:
    """(table heading, name) for each name in the first cell of the section's table rows."""
    start = page.index(f"\n{SECTION}\n")
    end = re.search(r"\n#{1,3} ", page[start + len(SECTION) + 2 :])
    section = page[start : start + len(SECTION) + 2 + end.start()] if end else page[start:]
    rows, heading = [], SECTION
    for line in section.splitlines():
        if line.startswith("#### "):
            heading = line
        cells = line.split("|")
        if not line.startswith("|") or len(cells) < 3 or set(cells[1].strip()) <= set("-"):
            continue
        rows.extend((heading, name) for name in re.findall(r"`([^`]+)`", cells[1]))
    return rows


def mapped_modules(page: str) -> list[str]:
    """The names the map gives, in order."""
    return [name for _, name in mapped_rows(page) if name != "Module"]


def _where(name: str, rows: list[tuple[str, str]]) -> str:
    """The table that holds the new module's siblings (same directory), if any."""
    parent = name.rstrip("/").rpartition("/")[0]
    for heading, other in rows:
        if parent and other.startswith(f"{parent}/"):
            return f"under {heading!r}"
    return "in the table it belongs to"


def test_the_helpers_read_what_they_should() -> None:
    table = ["| Module | Owns |", "|---|---|", "| `a.py` | x |", "| `b/` | `c.py` |"]
    page = "\n".join(["# D", "", SECTION, "", *table, "", "## Next", "| `d.py` | y |", ""])
    assert mapped_modules(page) == ["a.py", "b/"]
    modules = package_modules()
    assert {"__init__.py", "worker/", "worker/loop.py", "db/", "migrations/"} <= modules
    assert not {name for name in modules if name.startswith("migrations/0")}


def test_the_module_map_names_every_module_and_only_those() -> None:
    rows = mapped_rows(PAGE.read_text())
    mapped = mapped_modules(PAGE.read_text())
    twice = sorted({name for name in mapped if mapped.count(name) > 1})
    modules = package_modules()
    missing = sorted(modules - set(mapped))
    gone = sorted(set(mapped) - modules)
    problems = []
    if missing:
        add = "\n".join(
            f"{_where(name, rows)}: | `{name}` | <what it owns, in one line> |" for name in missing
        )
        problems.append(
            f"Add a row to the module map in {PAGE.relative_to(ROOT)} "
            f"(section {SECTION!r}) for each new module:\n{add}"
        )
    if gone:
        remove = "\n".join(f"| `{name}` | ... |" for name in gone)
        problems.append(
            f"Remove these rows from the module map in {PAGE.relative_to(ROOT)}: "
            f"no such module in django_durable_jobs/ (renamed or removed?):\n{remove}"
        )
    if twice:
        problems.append(f"Keep one row each for: {twice}")
    assert not problems, "\n\n".join(problems)
