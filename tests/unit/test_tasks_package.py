"""The Django Tasks integration as a package apart (no database).

It lives in ``django_durable_jobs.tasks`` and meets the core only through
``django_durable_jobs.hooks``, registered in ``AppConfig.ready()``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import django
import pytest

import django_durable_jobs
from django_durable_jobs import hooks
from django_durable_jobs.tasks import TASKS_AVAILABLE, bridge

needs_django_6 = pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6")
needs_django_5 = pytest.mark.skipif(django.VERSION >= (6, 0), reason="Django < 6 behaviour")

PACKAGE = Path(django_durable_jobs.__file__).parent

#: The one file outside the package allowed to import it: ``apps.py``, which
#: registers it.
ALLOWED = {"apps.py"}


def test_the_package_re_exports_what_users_call() -> None:
    from django_durable_jobs import tasks
    from django_durable_jobs.tasks import options, waiting

    for name in ("TaskOptions", "current_task_options", "task_options"):
        assert getattr(tasks, name) is getattr(options, name)
    for name in ("await_result", "wait_result"):
        assert getattr(tasks, name) is getattr(waiting, name)


@needs_django_6
def test_ready_plugs_the_bridge_into_the_hooks() -> None:
    assert bridge.task_handler in hooks._resolvers
    assert bridge.announce_finished in hooks._finished_listeners
    assert bridge.task_concurrency_limits in hooks._limits_providers


@needs_django_5
def test_without_django_tasks_nothing_is_plugged_in() -> None:
    assert not TASKS_AVAILABLE
    assert bridge.task_handler not in hooks._resolvers
    assert bridge.announce_finished not in hooks._finished_listeners
    assert bridge.task_concurrency_limits not in hooks._limits_providers
    assert bridge.task_concurrency_limits() == {}


def _imported_modules(path: Path) -> set[str]:
    """The absolute names of the modules ``path`` imports (``from x import y``: x and x.y)."""
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    package = list(relative.parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _imports_the_integration(path: Path) -> bool:
    return any(
        module == "django_durable_jobs.tasks" or module.startswith("django_durable_jobs.tasks.")
        for module in _imported_modules(path)
    )


def test_the_core_never_imports_the_integration() -> None:
    core = [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "tasks"
        and path.relative_to(PACKAGE).as_posix() not in ALLOWED
    ]
    importing = {p.relative_to(PACKAGE).as_posix() for p in core if _imports_the_integration(p)}
    assert importing == set(), "the core imports django_durable_jobs.tasks"


def test_the_helper_sees_relative_imports() -> None:
    # The scan above is only as good as its import resolution.
    assert _imports_the_integration(PACKAGE / "apps.py")
    assert not _imports_the_integration(PACKAGE / "hooks.py")


def test_tasks_available_is_defined_once() -> None:
    defining = [
        path.relative_to(PACKAGE).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and target.id == "TASKS_AVAILABLE"
    ]
    assert defining == ["tasks/__init__.py"]


@needs_django_5
def test_waiting_for_a_task_result_says_it_needs_django_6() -> None:
    from django.core.exceptions import ImproperlyConfigured

    from django_durable_jobs.tasks import wait_result

    with pytest.raises(ImproperlyConfigured, match=r"Django >= 6\.0"):
        wait_result(object())  # type: ignore[arg-type]
