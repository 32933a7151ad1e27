"""``django_durable_jobs.tasks.backend`` on every supported Django (no database).

On Django 5.2 importing it says Django >= 6.0 is needed; on Django 6 it
is a real Tasks backend. Pure helpers of the mapping are
tested here too.
"""

from __future__ import annotations

import importlib
from typing import Any

import django
import pytest
from django.core.exceptions import ImproperlyConfigured

from django_durable_jobs import InvalidJob
from django_durable_jobs.tasks import current_task_options, task_options
from django_durable_jobs.tasks.bridge import task_handler

TASK_PAYLOAD = {"args": [1, 2], "kwargs": {}, "backend": "default"}
needs_django_6 = pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6")
needs_django_5 = pytest.mark.skipif(django.VERSION >= (6, 0), reason="Django < 6 behaviour")


@needs_django_5
def test_on_django_5_the_backend_says_it_needs_django_6() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"needs Django >= 6\.0"):
        importlib.import_module("django_durable_jobs.tasks.backend")
    # The worker's hook answers "no task" instead of importing django.tasks.
    assert task_handler("example.tasks.add", TASK_PAYLOAD) is None


@needs_django_5
def test_on_django_5_the_example_tasks_module_explains_itself() -> None:
    with pytest.raises(ImportError, match=r"needs Django >= 6\.0"):
        importlib.import_module("example.tasks")


@needs_django_6
def test_on_django_6_it_is_a_tasks_backend() -> None:
    from django.tasks.backends.base import BaseTaskBackend

    from django_durable_jobs.tasks.backend import DurableJobsBackend as backend_class

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


@needs_django_6
@pytest.mark.parametrize("value", [1, 1.5, "x", None, True, [1, [2]], {"a": {"b": [None, False]}}])
def test_json_values_round_trip(value: Any) -> None:
    from django_durable_jobs.tasks.results import check_round_trip

    check_round_trip("value", value)


@needs_django_6
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


@needs_django_6
def test_task_payload_shape() -> None:
    from django_durable_jobs.tasks.results import is_task_payload

    assert is_task_payload(TASK_PAYLOAD)
    assert not is_task_payload({**TASK_PAYLOAD, "extra": 1})
    assert not is_task_payload({"args": {}, "kwargs": {}, "backend": "default"})
    assert not is_task_payload([1, 2])
