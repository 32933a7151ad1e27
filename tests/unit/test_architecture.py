"""The layout rules of docs/explanation/design.md, read from the package's source.

- no import cycle among the package's modules (imports that run, not the
  ones under ``TYPE_CHECKING``);
- no SQL outside the gateway (``db/``) and the migrations.

(That the core never imports the Django Tasks integration is
``test_tasks_package.py``'s.)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import django_durable_jobs

PACKAGE = Path(django_durable_jobs.__file__).parent
NAME = "django_durable_jobs"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "migrations" in parts:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Package modules ``module`` imports when it runs (any depth, but not TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                visit(node.orelse)
                continue
            for child in ast.walk(node):
                if isinstance(child, ast.Import):
                    targets.update(alias.name for alias in child.names)
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        anchor = package.split(".")
                        anchor = anchor[: len(anchor) - (child.level - 1)]
                        base = ".".join([*anchor, base] if base else anchor)
                    targets.add(base)
                    targets.update(f"{base}.{alias.name}" for alias in child.names)

    visit(tree.body)
    return {t for t in targets if t in known and t != module}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {module: runtime_imports(module, path, known) for module, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                strongconnect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            strongconnect(node)
    return found


def _package_parents(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Importing ``a.b`` runs ``a/__init__``: a package's own init is no edge of a cycle."""
    return {
        module: {t for t in targets if not module.startswith(t + ".")}
        for module, targets in graph.items()
    }


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(_package_parents(import_graph())) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Upper-case keywords: the package writes SQL that way, and prose does not.
SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b", re.S)


def string_literals(path: Path) -> Iterator[tuple[int, str]]:
    """Every string constant but docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.lineno, node.value


def test_no_sql_outside_the_gateway() -> None:
    offenders = []
    for module, path in modules().items():
        if module == f"{NAME}.db" or module.startswith(f"{NAME}.db."):
            continue
        source = path.read_text(encoding="utf-8")
        if ".cursor(" in source:
            offenders.append(f"{module}: opens a cursor")
        offenders += [
            f"{module}:{line}: {text[:60]!r}"
            for line, text in string_literals(path)
            if SQL.search(text)
        ]
    assert offenders == []


def test_the_sql_finder_finds_sql() -> None:
    assert SQL.search("SELECT count(*) FROM durable_jobs_worker")
    assert SQL.search("UPDATE durable_jobs_job SET status = 'x'")
    assert not SQL.search("Select a queue from the list")
