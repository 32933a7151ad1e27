"""The suite's cheaper reset between transactional tests (tests/reset.py) keeps what it must."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.models.signals import post_migrate
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job
from tests import reset
from tests.factories import make_job


def test_post_migrate_has_only_the_receivers_the_reset_may_skip() -> None:
    # Another app's receiver (one that writes a table the reset empties) would make
    # every flush send the signal again: this test then says which one came.
    receivers = set(reset._receivers())
    assert receivers <= reset.POST_MIGRATE_WRITES_ONLY_KEPT
    assert {
        "django.contrib.contenttypes.management.create_contenttypes",
        "django.contrib.auth.management.create_permissions",
    } <= receivers


@pytest.mark.django_db(transaction=True)
def test_a_flush_empties_the_tables_keeps_the_static_rows_and_sends_no_post_migrate() -> None:
    make_job()
    types, permissions = ContentType.objects.count(), Permission.objects.count()
    assert types and permissions
    # As TransactionTestCase flushes after each test (flush alone resets the sequences).
    with CaptureQueriesContext(connection) as flushed:
        call_command("flush", verbosity=0, interactive=False, reset_sequences=False)
    assert not Job.objects.exists()
    assert ContentType.objects.count() == types
    assert Permission.objects.count() == permissions
    # post_migrate's receivers read these tables (about 40 SELECTs): not sent.
    statements = [query["sql"] for query in flushed.captured_queries]
    assert statements, "the flush ran no statement"
    assert not [sql for sql in statements if "django_content_type" in sql], statements


@pytest.mark.django_db(transaction=True)
def test_a_flush_sends_post_migrate_when_another_receiver_is_connected() -> None:
    sent: list[object] = []

    def record(**kwargs: object) -> None:
        sent.append(kwargs["app_config"])

    post_migrate.connect(record, dispatch_uid="test_reset.record")
    try:
        call_command("flush", verbosity=0, interactive=False, reset_sequences=False)
    finally:
        post_migrate.disconnect(dispatch_uid="test_reset.record")
    assert sent
