"""Property-based tests of ``enqueue()`` and ``enqueue_many()`` (hypothesis).

Whatever the arguments, a call either stores the job(s) or raises
``InvalidJob`` (a ``ValueError``) naming the argument, with nothing stored;
valid arguments read back from the database as given, and a repeated call
with the same key is a replay. The number of examples comes from the
hypothesis profile (tests/conftest.py: ``ci`` by default,
``HYPOTHESIS_PROFILE=long`` for the long run).

Each example runs in a savepoint that is rolled back, so examples do not
see each other's jobs (and keys drawn twice do not conflict).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from django.db import transaction
from hypothesis import given, note
from hypothesis import strategies as st

from django_durable_jobs import IdempotencyConflict, InvalidJob, enqueue, enqueue_many
from django_durable_jobs.conf import jobs_settings
from django_durable_jobs.enqueueing import ENQUEUE_ARGUMENTS
from django_durable_jobs.models import Job, JobDependency, JobStatus

from .strategies import any_arguments, anything, valid_arguments

pytestmark = pytest.mark.django_db


class _Rollback(Exception):
    pass


@contextmanager
def rolled_back() -> Iterator[None]:
    """Run the block in a savepoint and undo whatever it stored."""
    try:
        with transaction.atomic():
            yield
            raise _Rollback
    except _Rollback:
        pass


def stored() -> tuple[int, int]:
    return Job.objects.count(), JobDependency.objects.count()


def assert_clear(exc: InvalidJob, fields: set[str]) -> None:
    """An ``InvalidJob`` that names one of ``fields`` and says what is wrong."""
    assert isinstance(exc, ValueError)
    assert exc.field.split(".")[-1] in fields or exc.field in fields, exc.field
    assert exc.message.strip(), exc
    assert str(exc).startswith(f"{exc.field}: "), exc


def json_numbers(value: Any) -> Any:
    """``value`` with every number as a ``Decimal``: JSON, and jsonb, know one number type.

    jsonb stores ``1e+30`` as the integer it equals; Python reads that back
    as an ``int``, equal as a number to the decimal value written.
    """
    return json.loads(json.dumps(value), parse_float=Decimal, parse_int=Decimal)


def assert_stored_as_given(job: Job, arguments: dict[str, Any]) -> None:
    job.refresh_from_db()
    assert job.type == arguments["type"]
    assert json_numbers(job.payload) == json_numbers(arguments.get("payload") or {})
    assert job.queue == arguments.get("queue", jobs_settings.DEFAULT_QUEUE)
    assert job.priority == arguments.get("priority", jobs_settings.DEFAULT_PRIORITY)
    assert job.max_attempts == arguments.get("max_attempts", jobs_settings.DEFAULT_MAX_ATTEMPTS)
    assert job.idempotency_key == arguments.get("idempotency_key")
    assert job.concurrency_key == arguments.get("concurrency_key")
    assert job.on_parent_failure == arguments.get("on_parent_failure", "cancel")
    timeout = arguments.get("timeout")
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    assert job.timeout == (None if timeout is None else float(timeout))
    if "run_at" in arguments:
        # In UTC: Python never finds a time in a DST gap equal to one of another zone.
        assert job.available_at == arguments["run_at"].astimezone(timezone.utc)
    else:
        delay = arguments.get("delay", 0)
        if not isinstance(delay, timedelta):
            delay = timedelta(microseconds=round(delay * 1_000_000))
        assert job.available_at - job.created_at == delay
    assert job.status == JobStatus.PENDING
    assert job.attempts == 0


@given(arguments=any_arguments())
def test_enqueue_stores_the_job_or_raises_invalid_job_storing_nothing(
    arguments: dict[str, Any],
) -> None:
    with rolled_back():
        before = stored()
        try:
            result = enqueue(**arguments)
        except InvalidJob as exc:
            note(f"InvalidJob: {exc}")
            assert_clear(exc, ENQUEUE_ARGUMENTS)
            assert stored() == before
        else:
            assert result.created
            assert stored()[0] == before[0] + 1


@given(arguments=valid_arguments())
def test_valid_arguments_are_stored_as_given_and_replay(arguments: dict[str, Any]) -> None:
    with rolled_back():
        result = enqueue(**arguments)
        assert result.created
        assert_stored_as_given(result.job, arguments)
        if "idempotency_key" in arguments:
            again = enqueue(**arguments)
            assert not again.created
            assert again.job.pk == result.job.pk
            assert stored()[0] == 1


@given(arguments=valid_arguments(), parents=st.integers(1, 3), unknown=st.booleans())
def test_depends_on_names_jobs_that_exist_or_nothing_is_stored(
    arguments: dict[str, Any], parents: int, unknown: bool
) -> None:
    with rolled_back():
        ids = [enqueue("fuzz.parent").job.pk for _ in range(parents)]
        if unknown:
            ids.append(uuid.uuid4())
        before = stored()
        try:
            result = enqueue(**arguments, depends_on=ids)
        except InvalidJob as exc:
            assert unknown, exc
            assert exc.code == InvalidJob.UNKNOWN_PARENT
            assert_clear(exc, {"depends_on"})
            assert stored() == before
        else:
            assert not unknown
            job = result.job
            job.refresh_from_db()
            assert job.status == JobStatus.WAITING
            assert set(job.parent_ids()) == set(ids)
            assert stored() == (before[0] + 1, before[1] + parents)


def repeated_keys(items: list[Any]) -> bool:
    keys = [item.get("idempotency_key") for item in items if isinstance(item, dict)]
    keys = [key for key in keys if key is not None]
    return len(set(keys)) < len(keys)


@given(items=st.lists(any_arguments() | anything, max_size=4))
def test_enqueue_many_stores_every_job_or_none(items: list[Any]) -> None:
    with rolled_back():
        before = stored()
        try:
            results = enqueue_many(items)
        except InvalidJob as exc:
            note(f"InvalidJob: {exc}")
            assert exc.field.startswith("jobs"), exc.field
            assert exc.message.strip()
            assert stored() == before
        except IdempotencyConflict:
            # Two items of the call share a key with other parameters.
            assert repeated_keys(items)
            assert stored() == before
        else:
            assert len(results) == len(items)
            assert stored()[0] == before[0] + sum(r.created for r in results)


@given(items=st.lists(valid_arguments(), max_size=5))
def test_enqueue_many_stores_valid_items_as_given_in_order(items: list[dict[str, Any]]) -> None:
    with rolled_back():
        try:
            results = enqueue_many(items)
        except IdempotencyConflict:
            assert repeated_keys(items)
            return
        assert len(results) == len(items)
        for item, result in zip(items, results, strict=True):
            if result.created:
                assert_stored_as_given(result.job, item)
            else:
                assert item.get("idempotency_key") is not None


@given(jobs=anything)
def test_enqueue_many_takes_a_list_of_dicts(jobs: Any) -> None:
    with rolled_back():
        before = stored()
        try:
            enqueue_many(jobs)
        except InvalidJob as exc:
            assert exc.field.startswith("jobs"), exc.field
            assert stored() == before
