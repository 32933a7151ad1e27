"""``runjobworker --burst`` called inside a ``TestCase`` refuses, and the class goes on.

Before, it ran on the test's uncommitted connection, logged false "reaped"
warnings and closed the queue_connection: the next test of the class failed with
"the connection is closed". The two tests run in this order (unittest sorts
them by name), the second on the queue_connection the first left.
"""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import TestCase

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.testing import run_jobs
from tests.factories import queue_connection


class BurstInsideATestCase(TestCase):
    def test_1_burst_refuses_pointing_to_run_jobs(self) -> None:
        job = enqueue("example.echo", {"n": 1}).job
        with pytest.raises(CommandError) as raised:
            call_command("runjobworker", "--burst")
        message = str(raised.value)
        assert "inside a transaction" in message
        assert "django_durable_jobs.testing.run_jobs()" in message
        # Nothing ran, and the test's connection is as it was.
        assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING
        assert queue_connection.connection is not None and queue_connection.in_atomic_block

    def test_2_the_next_test_has_a_working_connection(self) -> None:
        job = enqueue("example.echo", {"n": 2}).job
        (ran,) = run_jobs()
        assert (ran.id, ran.status, ran.result) == (job.pk, JobStatus.COMPLETED, {"n": 2})


@pytest.mark.django_db(transaction=True)
def test_a_worker_in_an_atomic_block_of_ones_own_refuses_too() -> None:
    with transaction.atomic(), pytest.raises(CommandError, match="inside a transaction"):
        call_command("runjobworker", "--burst")
    call_command("runjobworker", "--burst")  # outside it: runs (nothing to do)
