"""Per-key concurrency for Django tasks: ``task_options(concurrency_key=...)`` and
``OPTIONS["concurrency_limits"]``, run by the real worker in this process.

On Django 6 and on Django 5.2 with the ``django-tasks`` backport. Overlaps are read from the rows'
``started_at``/``completed_at``, as in ``test_concurrency_keys``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from django_durable_jobs import IdempotencyConflict, InvalidJob, db, hooks
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.tasks import task_options
from django_durable_jobs.tasks.bridge import task_concurrency_limits
from django_durable_jobs.tasks.compat import TASKS_MODULE, check_tasks, task_backends
from tests.factories import most_running_at_once
from tests.testapp import tasks

from .helpers import drain_with

pytestmark = [pytest.mark.django_db(transaction=True)]

DURABLE = "django_durable_jobs.tasks.backend.DurableJobsBackend"
NAP = "tests.testapp.tasks.nap"


def durable(**options: Any) -> dict[str, Any]:
    """A ``TASKS`` entry of our backend with these ``OPTIONS`` (any queue allowed)."""
    return {"BACKEND": DURABLE, "QUEUES": [], "OPTIONS": options}


def limited(limits: Any) -> Any:
    """``override_settings`` giving the default backend ``concurrency_limits``."""
    return override_settings(TASKS={"default": durable(concurrency_limits=limits)})


# -- the key: task_options(concurrency_key=...) ------------------------------


def test_the_concurrency_key_of_task_options_is_stored_on_the_job() -> None:
    with task_options(concurrency_key="customer:42"):
        keyed = tasks.add.enqueue(1, 2)
        with task_options(max_attempts=2):  # an inner block keeps the outer key
            inner = tasks.add.enqueue(1, 3)
        with task_options(concurrency_key="customer:7"):  # and replaces it when it sets one
            replaced = tasks.add.enqueue(1, 4)
        from_async = async_to_sync(tasks.async_multiply.aenqueue)(2, 2)
    plain = tasks.add.enqueue(1, 5)
    keys = dict(Job.objects.values_list("pk", "concurrency_key"))
    assert [keys[uuid.UUID(r.id)] for r in (keyed, inner, replaced, from_async, plain)] == [
        "customer:42",
        "customer:42",
        "customer:7",
        "customer:42",
        None,
    ]


@pytest.mark.parametrize("key", ["", "   ", "x" * 256, 42, "a\x00b"])
def test_a_bad_concurrency_key_fails_at_the_with_line(key: object) -> None:
    entered = False
    with (
        pytest.raises(InvalidJob, match="concurrency_key") as caught,
        task_options(concurrency_key=key),  # type: ignore[arg-type]
    ):
        entered = True
        tasks.add.enqueue(1, 2)
    assert not entered  # the with line itself raised
    assert caught.value.field == "concurrency_key"
    assert not Job.objects.exists()


def test_an_idempotent_replay_must_repeat_the_concurrency_key() -> None:
    with task_options(idempotency_key="sync-42", concurrency_key="customer:42"):
        first = tasks.add.enqueue(1, 2)
        assert tasks.add.enqueue(1, 2).id == first.id
    with (
        pytest.raises(IdempotencyConflict),
        task_options(idempotency_key="sync-42", concurrency_key="customer:43"),
    ):
        tasks.add.enqueue(1, 2)
    assert Job.objects.count() == 1


# -- the limit: OPTIONS["concurrency_limits"], enforced by the worker ---------


def test_one_key_never_runs_two_tasks_at_once_while_another_key_runs_beside_it() -> None:
    with limited({NAP: 1}):
        for i in range(8):
            with task_options(concurrency_key=f"customer:{i % 2}"):
                tasks.nap.enqueue(0.1)
        jobs = drain_with(1, 8)
    assert all(job.status == JobStatus.COMPLETED and job.attempts == 1 for job in jobs)
    for key in ("customer:0", "customer:1"):
        assert most_running_at_once([j for j in jobs if j.concurrency_key == key]) == 1
    # The two keys did run at the same time, not one after the other.
    assert most_running_at_once(jobs) == 2


def test_a_key_on_a_task_without_a_limit_runs_unlimited() -> None:
    # A limit for another task only: nap's key limits nothing.
    with limited({"tests.testapp.tasks.add": 1}):
        for _ in range(3):
            with task_options(concurrency_key="same"):
                tasks.nap.enqueue(0.3)
        jobs = drain_with(1, 3)
    assert most_running_at_once(jobs) == 3


def test_the_worker_reads_the_limits_with_the_job_ones() -> None:
    with limited({NAP: 2, "tests.serial": 5}):
        merged = hooks.concurrency_limits()
    assert merged[NAP] == 2
    # tests.serial is a @job(concurrency_limit=1): its handler runs those
    # jobs, so its own limit holds.
    assert merged["tests.serial"] == 1
    assert merged["tests.pair"] == 2
    assert NAP not in hooks.concurrency_limits()  # the settings' backend declares none


def test_the_keyed_claim_takes_one_task_per_key_at_a_limit_of_one() -> None:
    with limited({NAP: 1}):
        for key in ("a", "a", "a", "b"):
            with task_options(concurrency_key=key):
                tasks.nap.enqueue(0)
        key_limits = hooks.concurrency_limits()
    assert (
        db.claim(db.database_alias(), worker_id="w", lease_seconds=30, limit=10, keyed_types=[NAP])
        == []
    )
    claimed = db.claim_keyed(
        db.database_alias(), worker_id="w", lease_seconds=30, limit=10, key_limits=key_limits
    )
    assert sorted(Job.objects.get(pk=job.id).concurrency_key for job in claimed) == ["a", "b"]


def test_two_backends_limiting_one_task_give_the_worker_the_smaller_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backends = {
        "default": durable(concurrency_limits={NAP: 3}),
        "second": durable(concurrency_limits={NAP: 1, "tests.testapp.tasks.add": 0}),
        "immediate": {"BACKEND": f"{TASKS_MODULE}.backends.immediate.ImmediateBackend"},
    }
    with (
        override_settings(TASKS=backends),
        caplog.at_level(logging.ERROR, "django_durable_jobs.worker"),
    ):
        assert task_concurrency_limits() == {NAP: 1}
    assert [r.getMessage() for r in caplog.records] == [
        "TASKS['second']['OPTIONS']['concurrency_limits']['tests.testapp.tasks.add']: must be "
        "an integer from 1 to 10000, got 0. The entry is ignored."
    ]


# -- the check: durable_jobs.E107 ---------------------------------------------


def check_messages(limits: Any) -> list[tuple[str, str]]:
    with limited(limits):
        return [(m.id, m.msg) for m in task_backends["default"].check()]


def test_the_check_accepts_limits_for_tasks() -> None:
    assert check_messages({NAP: 1, "tests.testapp.tasks.add": 10_000}) == []
    assert check_messages({}) == []


FIELD = "TASKS['default']['OPTIONS']['concurrency_limits']"


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ([NAP], f"{FIELD}: must be a dict mapping task paths to limits, got list."),
        ({NAP: 0}, f"{FIELD}['{NAP}']: must be an integer from 1 to 10000, got 0."),
        ({NAP: 10_001}, f"{FIELD}['{NAP}']: must be an integer from 1 to 10000, got 10001."),
        ({NAP: "1"}, f"{FIELD}['{NAP}']: must be an integer from 1 to 10000, got '1'."),
        ({NAP: True}, f"{FIELD}['{NAP}']: must be an integer from 1 to 10000, got True."),
        ({42: 1}, f"{FIELD}[42]: is not a task path: must be a string, not int."),
        ({" x.y": 1}, f"{FIELD}[' x.y']: is not a task path: ' x.y' must not start or end"),
        (
            {"tests.testapp.tasks.undecorated": 1},
            f"{FIELD}['tests.testapp.tasks.undecorated']: names a function, not a Django task.",
        ),
        ({"tests.testapp.tasks.nope": 1}, f"{FIELD}['tests.testapp.tasks.nope']: does not import"),
        ({"no_such_module.task": 1}, f"{FIELD}['no_such_module.task']: does not import"),
    ],
)
def test_the_check_reports_a_bad_entry_naming_it(limits: Any, message: str) -> None:
    ((check_id, text),) = check_messages(limits)
    assert check_id == "durable_jobs.E107"
    assert text.startswith(message), text


def test_the_check_reports_each_bad_entry_and_keeps_the_good_ones_quiet() -> None:
    found = check_messages({NAP: 1, "tests.testapp.tasks.add": 0, "tests.testapp.tasks.x": 2})
    assert [check_id for check_id, _ in found] == ["durable_jobs.E107"] * 2
    assert "['tests.testapp.tasks.add']" in found[0][1]
    assert "['tests.testapp.tasks.x']" in found[1][1]


def test_the_check_reports_two_backends_disagreeing_once_on_the_later_one() -> None:
    backends = {
        "default": durable(concurrency_limits={NAP: 2}),
        "second": durable(concurrency_limits={NAP: 1}),
        "third": durable(concurrency_limits={NAP: 2}),
    }
    with override_settings(TASKS=backends):
        found = [(m.id, m.msg) for m in check_tasks()]
    assert found == [
        (
            "durable_jobs.E107",
            f"TASKS['second']['OPTIONS']['concurrency_limits']['{NAP}']: is 1 here but 2 in "
            "TASKS['default']: a task's jobs share one limit whichever backend enqueued them.",
        ),
        (
            "durable_jobs.E107",
            f"TASKS['third']['OPTIONS']['concurrency_limits']['{NAP}']: is 2 here but 1 in "
            "TASKS['second']: a task's jobs share one limit whichever backend enqueued them.",
        ),
    ]


def test_concurrency_limits_is_a_known_option() -> None:
    with override_settings(TASKS={"default": durable(concurrency_limit={NAP: 1})}):
        (message,) = task_backends["default"].check()
    assert message.id == "durable_jobs.E103"
    assert "concurrency_limits" in (message.hint or "")
