"""``operations.requeue(job_id, from_step=...)``: the one implementation of "retry
from a step" behind the admin, REST and CLI doors. Step records are written
with the ORM, as the runtime would leave them."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_durable_jobs import db, operations
from django_durable_jobs.models import AuditEntry, EventWaiter, Job, JobStatus, JobStep
from tests.factories import add_step as add
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def names(job: Job) -> list[str]:
    return list(JobStep.objects.filter(job=job).values_list("name", flat=True))


def test_from_step_forgets_it_and_every_later_record() -> None:
    job = make_job(status=JobStatus.DEAD, attempts=4, last_error="boom")
    for position, name in enumerate(["charge", "record", "email", "email#2"]):
        add(job, name, position)
    returned = operations.requeue(job.pk, from_step="email")
    assert returned.status == JobStatus.PENDING and returned.attempts == 0
    assert returned.last_error == "boom"  # the history stays, as for any requeue
    assert names(job) == ["charge", "record"]
    assert not AuditEntry.objects.exists()  # no actor: nothing recorded


def test_from_the_first_step_forgets_them_all() -> None:
    job = make_job(status=JobStatus.CANCELLED)
    add(job, "a", 0)
    add(job, "b", 1)
    operations.requeue(job.pk, from_step="a")
    assert names(job) == []


def test_an_unknown_step_is_a_value_error_and_changes_nothing() -> None:
    job = make_job(status=JobStatus.DEAD)
    add(job, "a", 0)
    with pytest.raises(operations.UnknownStep) as raised:
        operations.requeue(job.pk, from_step="b")
    assert isinstance(raised.value, ValueError)
    assert raised.value.name == "b" and "'a'" in str(raised.value)
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD and names(job) == ["a"]


def test_a_job_without_steps_says_so() -> None:
    job = make_job(status=JobStatus.DEAD)
    with pytest.raises(operations.UnknownStep, match="no recorded steps"):
        operations.requeue(job.pk, from_step="a")


def test_state_is_checked_before_the_step() -> None:
    job = make_job(status=JobStatus.COMPLETED)
    with pytest.raises(operations.JobStateError):
        operations.requeue(job.pk, from_step="nope")
    with pytest.raises(Job.DoesNotExist):
        operations.requeue("01234567-89ab-7cde-8f01-23456789abcd", from_step="a")


def test_it_rolls_back_with_the_callers_transaction() -> None:
    job = make_job(status=JobStatus.DEAD)
    add(job, "a", 0)

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic(using=db.database_alias()):
        operations.requeue(job.pk, from_step="a")
        raise Boom
    assert Job.objects.get(pk=job.pk).status == JobStatus.DEAD and names(job) == ["a"]


def test_a_requeue_clears_what_a_cancelled_suspended_job_waited_for() -> None:
    job = make_job(status=JobStatus.CANCELLED, waiting_for={"event": "k"})
    EventWaiter.objects.create(job=job, key="k")
    add(job, "k", 0, kind="event")
    operations.requeue(job.pk)
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.PENDING and row.waiting_for is None
    assert not EventWaiter.objects.exists()
    assert names(job) == ["k"]  # a plain requeue keeps the records
