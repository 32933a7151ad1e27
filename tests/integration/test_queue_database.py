"""``DURABLE_JOBS["DATABASE"]``: the queue in a database of its own, the ``queue`` alias.

The test settings always define the ``queue`` alias (tests/queue_database.py);
these tests move the queue there with ``override_settings`` and look in both
databases. Run with ``DURABLE_JOBS_TEST_QUEUE_DATABASE=1``, the whole suite
has the queue there already, and the migrations test sees the test
databases that pytest-django migrated through ``QueueRouter``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.db import connections, router, transaction
from django.test import override_settings

from django_durable_jobs import db, enqueue
from django_durable_jobs.checks import check_database, check_queue_database
from django_durable_jobs.models import AuditEntry, Job, JobStatus
from django_durable_jobs.routers import QueueRouter
from tests import queue_database
from tests.factories import Api, burst, make_operator

QUEUE = queue_database.ALIAS
ROUTERS = [queue_database.ROUTER]
BOTH = ["default", QUEUE]


def ids(messages: list[checks.CheckMessage]) -> list[str]:
    return [m.id for m in messages if m.id]


@pytest.fixture
def on_queue() -> Iterator[None]:
    """The queue on the ``queue`` alias, through the setting and the shipped router."""
    with override_settings(DURABLE_JOBS={"DATABASE": QUEUE}, DATABASE_ROUTERS=ROUTERS):
        yield


def count(alias: str, **filters: Any) -> int:
    return Job.objects.using(alias).filter(**filters).count()


# -- the router and database_alias() ---------------------------------------


def test_the_router_has_no_opinion_without_the_setting() -> None:
    with override_settings(DURABLE_JOBS={"DATABASE": None}):
        queue_router = QueueRouter()
        assert queue_router.db_for_write(Job) is None
        assert queue_router.db_for_read(Job) is None
        assert queue_router.allow_migrate("default", "durable_jobs", "job") is None


def test_the_router_sends_the_app_and_its_migrations_to_the_setting_only() -> None:
    with override_settings(DURABLE_JOBS={"DATABASE": QUEUE}):
        queue_router = QueueRouter()
        assert queue_router.db_for_write(Job) == QUEUE
        assert queue_router.db_for_read(AuditEntry) == QUEUE
        assert queue_router.allow_migrate(QUEUE, "durable_jobs", "job") is True
        assert queue_router.allow_migrate("default", "durable_jobs", "job") is False
        # Other apps: the next router decides.
        assert queue_router.allow_migrate(QUEUE, "auth", "user") is None
        from django.contrib.auth.models import User

        assert queue_router.db_for_write(User) is None


def test_database_alias_honours_the_setting() -> None:
    with override_settings(DURABLE_JOBS={"DATABASE": None}, DATABASE_ROUTERS=[]):
        assert db.database_alias() == "default"
    with override_settings(DURABLE_JOBS={"DATABASE": QUEUE}):
        assert db.database_alias() == QUEUE
        assert db.database_alias("other") == "other"  # an explicit using= wins


# -- migrations -------------------------------------------------------------


@pytest.mark.django_db(databases=BOTH)
def test_migrate_creates_the_job_tables_on_the_queue_database_only(on_queue: None) -> None:
    """What ``migrate`` would run on each alias (sqlmigrate honours allow_migrate)."""
    from io import StringIO

    def sql(alias: str) -> str:
        out = StringIO()
        call_command("sqlmigrate", "durable_jobs", "0001", database=alias, stdout=out)
        return out.getvalue()

    assert 'CREATE TABLE "durable_jobs_job"' in sql(QUEUE)
    assert "CREATE TABLE" not in sql("default")


@pytest.mark.skipif(not queue_database.enabled(), reason=f"needs {queue_database.ENV}=1")
@pytest.mark.django_db(databases=BOTH)
def test_the_test_databases_were_migrated_through_the_router() -> None:
    def tables(alias: str) -> set[str]:
        with connections[alias].cursor() as cursor:
            names = connections[alias].introspection.table_names(cursor)
        return {name for name in names if name.startswith("durable_jobs_")}

    assert "durable_jobs_job" in tables(QUEUE)
    assert tables("default") == set()
    with connections[QUEUE].cursor() as cursor:  # and no other app's (OnlyTheQueueThere)
        others = set(connections[QUEUE].introspection.table_names(cursor)) - tables(QUEUE)
    assert others == {"django_migrations"}


# -- every door on the queue's database -------------------------------------


@pytest.mark.django_db(databases=BOTH)
def test_enqueue_inserts_on_the_queue_database(on_queue: None) -> None:
    job = enqueue("tests.record", {"n": 1}).job
    assert job._state.db == QUEUE
    assert count(QUEUE, pk=job.pk) == 1
    if "durable_jobs_job" in connections["default"].introspection.table_names():
        assert count("default") == 0


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_enqueue_is_not_in_a_transaction_on_default(on_queue: None) -> None:
    """What W014 says: a rollback on "default" leaves the job queued."""
    with pytest.raises(RuntimeError), transaction.atomic(using="default"):
        job = enqueue("tests.record", {"n": 1}).job
        raise RuntimeError("the application's transaction fails")
    assert count(QUEUE, pk=job.pk) == 1
    # A transaction on the queue's alias does cover it.
    with pytest.raises(RuntimeError), transaction.atomic(using=QUEUE):
        rolled_back = enqueue("tests.record", {"n": 2}).job
        raise RuntimeError("rolled back")
    assert count(QUEUE, pk=rolled_back.pk) == 0


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_the_worker_runs_jobs_on_the_queue_database(on_queue: None) -> None:
    job = enqueue("tests.record", {"n": 1}).job
    burst().run()
    assert Job.objects.using(QUEUE).get(pk=job.pk).status == JobStatus.COMPLETED


@pytest.mark.django_db(databases=BOTH)
def test_the_admin_lists_and_acts_on_the_queue_database(on_queue: None, admin_client: Any) -> None:
    job = enqueue("tests.record", {"n": 1}).job
    response = admin_client.get("/admin/durable_jobs/job/")
    assert response.status_code == 200
    assert [str(j.pk) for j in response.context["cl"].result_list] == [str(job.pk)]
    response = admin_client.post(
        "/admin/durable_jobs/job/",
        {"action": "cancel_jobs", "_selected_action": [str(job.pk)]},
        follow=True,
    )
    assert response.status_code == 200
    assert Job.objects.using(QUEUE).get(pk=job.pk).status == JobStatus.CANCELLED
    assert AuditEntry.objects.using(QUEUE).filter(job_id=job.pk).exists()


@pytest.mark.django_db(databases=BOTH)
def test_the_rest_api_lists_and_enqueues_on_the_queue_database(on_queue: None) -> None:
    api = Api(make_operator("queue-db"))
    job = enqueue("tests.record", {"n": 1}).job
    assert [row["id"] for row in api.get("/api/jobs").json()["results"]] == [str(job.pk)]
    created = api.post(
        "/api/jobs", {"type": "tests.record", "payload": {}, "idempotency_key": "k-1"}
    )
    assert created.status_code == 201, created.content
    assert count(QUEUE, pk=created.json()["id"]) == 1


@pytest.mark.django_db(databases=BOTH)
def test_the_cli_lists_the_queue_database(on_queue: None) -> None:
    from io import StringIO

    job = enqueue("tests.record", {"n": 1}).job
    out = StringIO()
    call_command("jobs", "list", stdout=out)
    assert str(job.pk) in out.getvalue()


# -- the checks ---------------------------------------------------------------


def test_no_message_with_the_queue_on_default() -> None:
    with override_settings(DURABLE_JOBS={"DATABASE": "default"}, DATABASE_ROUTERS=ROUTERS):
        assert check_queue_database() == []
    with override_settings(DURABLE_JOBS={"DATABASE": None}, DATABASE_ROUTERS=[]):
        assert check_queue_database() == []


def test_w014_when_the_queue_is_not_on_default(on_queue: None) -> None:
    messages = check_queue_database()
    assert ids(messages) == ["durable_jobs.W014"]
    assert messages[0].level == checks.WARNING
    assert "NOT in the application's transaction" in messages[0].msg
    assert "on_commit" in messages[0].hint


def test_w014_is_reported_by_manage_py_check_and_can_be_silenced(on_queue: None) -> None:
    from io import StringIO

    def check_output() -> str:
        out = StringIO()
        call_command("check", stdout=out, stderr=out)
        return out.getvalue()

    with override_settings(SILENCED_SYSTEM_CHECKS=[]):
        assert "durable_jobs.W014" in check_output()
    with override_settings(SILENCED_SYSTEM_CHECKS=["durable_jobs.W014"]):
        assert "durable_jobs.W014" not in check_output()


def test_e013_when_the_alias_is_not_in_databases() -> None:
    with override_settings(DURABLE_JOBS={"DATABASE": "nowhere"}, DATABASE_ROUTERS=ROUTERS):
        messages = check_queue_database()
    assert ids(messages) == ["durable_jobs.E013"]
    assert "'nowhere', which is not in DATABASES" in messages[0].msg


def test_e013_when_the_router_is_missing_names_the_line_to_add() -> None:
    with override_settings(DURABLE_JOBS={"DATABASE": QUEUE}, DATABASE_ROUTERS=[]):
        messages = check_queue_database()
    assert set(ids(messages)) == {"durable_jobs.E013"}
    assert any("writes to 'default'" in m.msg for m in messages)
    assert any("in 'default'" in m.msg and "too" in m.msg for m in messages)
    assert all("django_durable_jobs.routers.QueueRouter" in m.hint for m in messages)
    assert all(m.level == checks.ERROR for m in messages)


class ElsewhereFirst:
    """A project's router, listed before QueueRouter, that decides for every app."""

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "default"

    db_for_read = db_for_write


def test_e013_when_another_router_decides_first() -> None:
    routers = [f"{__name__}.ElsewhereFirst", *ROUTERS]
    with override_settings(DURABLE_JOBS={"DATABASE": QUEUE}, DATABASE_ROUTERS=routers):
        assert "durable_jobs.E013" in ids(check_queue_database())
    with override_settings(
        DURABLE_JOBS={"DATABASE": QUEUE}, DATABASE_ROUTERS=[*ROUTERS, f"{__name__}.ElsewhereFirst"]
    ):
        assert router.db_for_write(Job) == QUEUE
        assert "durable_jobs.E013" not in ids(check_queue_database())


def test_e001_when_the_queue_database_is_not_postgresql() -> None:
    with override_settings(DURABLE_JOBS={"DATABASE": "sqlite"}, DATABASE_ROUTERS=ROUTERS):
        assert "durable_jobs.E001" in ids(check_database())


def test_e003_for_an_alias_that_is_not_a_string() -> None:
    from django_durable_jobs.checks import check_settings

    with override_settings(DURABLE_JOBS={"DATABASE": 3}):
        assert ids(check_settings()) == ["durable_jobs.E003"]
        assert check_queue_database() == []
