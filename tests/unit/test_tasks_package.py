"""The Django Tasks integration as a package apart (no database).

It lives in ``django_durable_jobs.tasks`` and meets the core only through
``django_durable_jobs.hooks``, registered in ``AppConfig.ready()``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

import django_durable_jobs
from django_durable_jobs import hooks
from django_durable_jobs.tasks import TASKS_AVAILABLE, bridge, compat

needs_a_tasks_api = pytest.mark.skipif(
    not TASKS_AVAILABLE, reason="needs django.tasks (Django 6) or the django-tasks backport"
)

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


@needs_a_tasks_api
def test_ready_plugs_the_bridge_into_the_hooks() -> None:
    assert bridge.task_handler in hooks._resolvers
    assert bridge.announce_finished in hooks._finished_listeners
    assert bridge.task_concurrency_limits in hooks._limits_providers


@pytest.fixture
def no_tasks_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as on Django 5.2 without the backport: compat found no Tasks API."""
    monkeypatch.setattr(compat, "TASKS_MODULE", None)
    monkeypatch.setattr(compat, "TASKS_AVAILABLE", False)
    monkeypatch.setattr("django_durable_jobs.apps.TASKS_AVAILABLE", False)


@pytest.mark.usefixtures("no_tasks_api")
def test_without_a_tasks_api_nothing_is_plugged_in(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("_resolvers", "_finished_listeners", "_limits_providers"):
        monkeypatch.setattr(hooks, name, [])
    apps.get_app_config("durable_jobs").ready()
    assert (hooks._resolvers, hooks._finished_listeners, hooks._limits_providers) == ([], [], [])
    payload = {"args": [], "kwargs": {}, "backend": "default"}
    assert bridge.task_handler("tests.testapp.tasks.add", payload) is None
    assert bridge.task_concurrency_limits() == {}


@pytest.mark.parametrize(
    ("version", "backport", "chosen"),
    [
        ((6, 1, 0, "final", 0), True, "django.tasks"),
        ((6, 0, 0, "final", 0), False, "django.tasks"),
        ((5, 2, 9, "final", 0), True, "django_tasks"),
        ((5, 2, 9, "final", 0), False, None),
    ],
)
def test_django_6_wins_then_the_backport_then_none(
    version: tuple[object, ...], backport: bool, chosen: str | None
) -> None:
    assert compat.choose(version, backport) == chosen


@needs_a_tasks_api
def test_every_name_comes_from_the_api_in_use() -> None:
    import importlib

    import django

    # The test envs install the backport on every Django: on 6.x it is there
    # and must lose to django.tasks.
    expected = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    assert expected == compat.TASKS_MODULE
    exceptions = importlib.import_module(f"{compat.TASKS_MODULE}.exceptions")
    backport = compat.TASKS_MODULE == compat.BACKPORT
    assert compat.InvalidTask is getattr(
        exceptions, "InvalidTaskError" if backport else "InvalidTask"
    )
    assert compat.task is importlib.import_module(compat.TASKS_MODULE).task
    for name, (submodule, django_name, backport_name) in compat._NAMES.items():
        module = importlib.import_module(".".join(filter(None, [compat.TASKS_MODULE, submodule])))
        assert getattr(compat, name) is getattr(module, backport_name if backport else django_name)


@needs_a_tasks_api
def test_reading_the_api_registers_its_checks() -> None:
    # As `import django.tasks` does on Django 6; the backport does it only
    # from its AppConfig, which a project may have left out.
    from django.core import checks

    assert compat.check_tasks in checks.registry.registry.get_checks()


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        compat.Nope  # noqa: B018


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
    assert defining == ["tasks/compat.py"]


@pytest.mark.usefixtures("no_tasks_api")
def test_without_a_tasks_api_waiting_for_a_result_says_what_to_install() -> None:
    from django_durable_jobs.tasks import wait_result

    with pytest.raises(ImproperlyConfigured, match=r"Django >= 6\.0.*django-durable-jobs\[tasks\]"):
        wait_result(object())  # type: ignore[arg-type]


@pytest.mark.usefixtures("no_tasks_api")
def test_without_a_tasks_api_its_names_say_what_to_install() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"compat\.TaskResult needs a Django Tasks API"):
        compat.__getattr__("TaskResult")
