"""``API_ALLOW_UNREGISTERED_TYPES``: a REST client names any type, and no worker imports it.

The worker's Tasks bridge resolves a job whose payload looks like a Django
task's by the module path in its type. Before issue 22 that was an
``import_string``: with unregistered types allowed, a REST client could make
every worker import any module on its path (and run its top-level code).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from django_durable_jobs.models import Job, JobStatus
from tests.factories import burst
from tests.testapp.import_probe import IMPORTED_ENV

pytestmark = pytest.mark.django_db(transaction=True)

PROBE = "tests.testapp.import_probe"
TASK_PAYLOAD = {"args": [], "kwargs": {}, "backend": "default"}


@pytest.fixture
def probe_not_imported(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The probe module starts unimported, and is forgotten again after the test."""
    monkeypatch.delitem(sys.modules, PROBE, raising=False)
    monkeypatch.delenv(IMPORTED_ENV, raising=False)
    yield
    sys.modules.pop(PROBE, None)
    os.environ.pop(IMPORTED_ENV, None)


def post_job(body: dict[str, object]) -> dict[str, object]:
    User.objects.create_superuser("root", "root@example.com", "pw")
    auth = base64.b64encode(b"root:pw").decode()
    response = Client().post(
        "/api/jobs",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Basic {auth}",
    )
    assert response.status_code == 201, response.content
    return response.json()  # type: ignore[no-any-return]


@pytest.mark.usefixtures("probe_not_imported")
def test_a_rest_job_naming_a_module_makes_no_worker_import_it() -> None:
    with override_settings(DURABLE_JOBS={"API_ALLOW_UNREGISTERED_TYPES": True}):
        created = post_job(
            {"type": f"{PROBE}.run", "payload": TASK_PAYLOAD, "idempotency_key": "probe"}
        )
    # Dead at the first claim (not given back for another worker): what it records.
    with override_settings(DURABLE_JOBS={"UNKNOWN_TYPE_DEAD_AFTER_SECONDS": 0}):
        burst()
    job = Job.objects.get(pk=created["id"])
    assert PROBE not in sys.modules and IMPORTED_ENV not in os.environ
    assert job.status == JobStatus.DEAD
    assert job.last_error.startswith(
        f"No handler is registered for job type '{PROBE}.run' in worker "
    )
    assert "a worker imports no module just because a job's type names it" in job.last_error


# --- the resolver itself (a Tasks API: Django >= 6.0, or the backport) ----------


@pytest.fixture
def resolve_task() -> object:
    from django_durable_jobs.tasks.results import resolve_task

    return resolve_task


@pytest.mark.usefixtures("probe_not_imported")
def test_a_module_that_is_neither_imported_nor_a_tasks_module_is_not_imported(
    resolve_task: Any,
) -> None:
    assert resolve_task(f"{PROBE}.run") is None
    assert PROBE not in sys.modules and IMPORTED_ENV not in os.environ


def test_an_installed_apps_tasks_module_is_imported_for_its_tasks(
    resolve_task: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tests.testapp
    from django_durable_jobs.tasks.compat import Task
    from tests.testapp import tasks

    # Imported afresh; both names are given back their module afterwards, or
    # later tests would meet two copies of each task.
    monkeypatch.delitem(sys.modules, "tests.testapp.tasks")
    monkeypatch.setattr(tests.testapp, "tasks", tasks)
    found = resolve_task("tests.testapp.tasks.add")
    assert isinstance(found, Task) and found.module_path == "tests.testapp.tasks.add"
    assert resolve_task("tests.testapp.tasks.undecorated") is None  # a function, not a Task
    assert resolve_task("tests.testapp.tasks.nothing_by_that_name") is None
    assert resolve_task("tests.testapp.tasks.inside.a_package") is None  # tasks.py is no package


def test_a_task_in_a_module_already_imported_resolves_without_its_modules_getattr(
    resolve_task: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.testapp import tasks

    asked: list[str] = []
    elsewhere = types.ModuleType("elsewhere.background")
    elsewhere.add = tasks.add  # type: ignore[attr-defined]
    elsewhere.__getattr__ = asked.append  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "elsewhere.background", elsewhere)
    assert resolve_task("elsewhere.background.add") is tasks.add
    assert resolve_task("elsewhere.background.lazy") is None
    assert asked == []
