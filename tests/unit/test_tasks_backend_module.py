"""``django_durable_jobs.tasks.backend`` on every supported Django (no database).

With a Tasks API (Django 6's ``django.tasks``, or the ``django-tasks``
backport on Django 5.2) it is a real Tasks backend; without one, importing
it says what to install. Pure helpers of the mapping are tested here too.
"""

from __future__ import annotations

import importlib
import sys
from importlib.util import find_spec
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_durable_jobs import InvalidJob
from django_durable_jobs.tasks import TASKS_AVAILABLE, compat, current_task_options, task_options
from django_durable_jobs.tasks.bridge import task_handler

TASK_PAYLOAD = {"args": [1, 2], "kwargs": {}, "backend": "default"}
needs_a_tasks_api = pytest.mark.skipif(
    not TASKS_AVAILABLE, reason="needs django.tasks (Django 6) or the django-tasks backport"
)


def test_without_a_tasks_api_the_backend_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As on Django 5.2 without the backport; the modules are imported afresh
    # and the ones this process had are put back afterwards.
    monkeypatch.setattr(compat, "TASKS_MODULE", None)
    monkeypatch.setattr(compat, "TASKS_AVAILABLE", False)
    for name in ("django_durable_jobs.tasks.backend", "django_durable_jobs.tasks.results"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImproperlyConfigured) as raised:
        importlib.import_module("django_durable_jobs.tasks.backend")
    assert str(raised.value).startswith(
        "django_durable_jobs.tasks.backend.DurableJobsBackend needs a Django Tasks API: "
        "Django >= 6.0 (django.tasks), or on Django "
    )
    assert "pip install 'django-durable-jobs[tasks]'" in str(raised.value)
    # The worker's hook answers "no task" instead of reading the API.
    assert task_handler("example.tasks.add", TASK_PAYLOAD) is None


def test_without_a_tasks_api_the_example_tasks_module_explains_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules: `import` raises ImportError, as for a module not installed.
    for name in ("django.tasks", "django_tasks"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "example.tasks", raising=False)
    with pytest.raises(ImportError, match=r"needs Django >= 6\.0 .* django-tasks backport"):
        importlib.import_module("example.tasks")


@needs_a_tasks_api
def test_the_example_tasks_module_uses_the_api_in_use() -> None:
    tasks = importlib.import_module("example.tasks")
    assert isinstance(tasks.add, compat.Task)
    assert tasks.add.module_path == "example.tasks.add"


@needs_a_tasks_api
def test_it_is_a_tasks_backend() -> None:
    from django_durable_jobs.tasks.backend import DurableJobsBackend as backend_class
    from django_durable_jobs.tasks.compat import BaseTaskBackend

    assert issubclass(backend_class, BaseTaskBackend)
    flags = ("supports_defer", "supports_priority", "supports_get_result", "supports_async_task")
    assert all(getattr(backend_class, flag) for flag in flags)


def test_task_options_nest_and_reset() -> None:
    assert current_task_options().idempotency_key is None
    with task_options(idempotency_key="k1", max_attempts=2):
        with task_options(max_attempts=9):
            inner = current_task_options()
            assert (inner.idempotency_key, inner.max_attempts) == ("k1", 9)
        assert current_task_options().max_attempts == 2
    assert current_task_options().idempotency_key is None
    assert current_task_options().max_attempts is None


@pytest.mark.parametrize(
    "kwargs", [{"max_attempts": 0}, {"max_attempts": "3"}, {"idempotency_key": " "}]
)
def test_task_options_reject_bad_values(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidJob), task_options(**kwargs):
        pass


@needs_a_tasks_api
@pytest.mark.parametrize("value", [1, 1.5, "x", None, True, [1, [2]], {"a": {"b": [None, False]}}])
def test_json_values_round_trip(value: Any) -> None:
    from django_durable_jobs.tasks.results import check_round_trip

    check_round_trip("value", value)


@needs_a_tasks_api
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ((1, 2), "would come back as [1, 2]"),
        ([(1, 2)], "would come back"),
        ({1: "a"}, "would come back as {'1': 'a'}"),
        ({"a": {1, 2}}, "not JSON-serialisable"),
        (float("inf"), "not JSON-serialisable"),
        (b"bytes", "not JSON-serialisable"),
    ],
)
def test_values_that_change_in_json_are_rejected(value: Any, reason: str) -> None:
    from django_durable_jobs.tasks.results import NotRoundTrippable, check_round_trip

    with pytest.raises(NotRoundTrippable, match=reason.replace("[", r"\[").replace("(", r"\(")):
        check_round_trip("value", value)


@needs_a_tasks_api
def test_task_payload_shape() -> None:
    from django_durable_jobs.tasks.results import is_task_payload

    assert is_task_payload(TASK_PAYLOAD)
    assert not is_task_payload({**TASK_PAYLOAD, "extra": 1})
    assert not is_task_payload({"args": {}, "kwargs": {}, "backend": "default"})
    assert not is_task_payload([1, 2])


@pytest.mark.skipif(
    compat.TASKS_MODULE != compat.DJANGO_TASKS or find_spec("django_tasks") is None,
    reason="Django 6 with the django-tasks backport installed beside it",
)
def test_on_django_6_the_backports_task_decorator_makes_a_django_task() -> None:
    # Both read TASKS; the backport's @task builds the backend's task_class,
    # Django's Task: code not yet moved off `from django_tasks import task` runs.
    import django_tasks
    from django_tasks.base import Task as BackportTask

    def undecorated(a: int) -> int:
        return a

    undecorated.__qualname__ = "undecorated"  # module level, as @task requires
    declared = django_tasks.task(undecorated)
    assert isinstance(declared, compat.Task)
    # A backport Task made by hand is refused where it is made: the worker
    # would never find it as a Task.
    with pytest.raises(compat.InvalidTask, match=r"declared with django_tasks's @task, but"):
        BackportTask(func=undecorated)
