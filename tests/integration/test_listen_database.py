"""``LISTEN_DATABASE`` and the worker's notification probe, in this process.

The ``listen`` alias of the test settings mirrors the default database;
its connections carry the application_name ``durable_jobs_listen``, so
pg_stat_activity shows which connection LISTENs. Through a real PgBouncer:
``tests/e2e/test_pgbouncer.py``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from django.core import checks
from django.test import override_settings

from django_durable_jobs import db, enqueue
from django_durable_jobs.checks import check_listen_database, check_settings
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.waiting.listener import ThreadWaiter, listener_for
from django_durable_jobs.worker import Worker
from tests.factories import WAIT_SECONDS, RunningWorker, wait_until, worker_config

from .helpers import new_connection

pytestmark = pytest.mark.django_db(transaction=True)

LISTEN_APP = "durable_jobs_listen"


def ids(messages: list[checks.CheckMessage]) -> list[str]:
    return [m.id for m in messages if m.id is not None]


# -- the check ---------------------------------------------------------------


def test_e009_when_listen_database_is_not_in_databases() -> None:
    with override_settings(DURABLE_JOBS={"LISTEN_DATABASE": "drect"}):
        messages = check_listen_database()
    assert ids(messages) == ["durable_jobs.E009"]
    assert "'drect'" in messages[0].msg and "not in DATABASES" in messages[0].msg
    assert "direct connection" in (messages[0].hint or "")
    assert messages[0].level == checks.ERROR


def test_e009_when_listen_database_is_not_postgresql() -> None:
    with override_settings(DURABLE_JOBS={"LISTEN_DATABASE": "sqlite"}):
        messages = check_listen_database()
    assert ids(messages) == ["durable_jobs.E009"]
    assert "'sqlite'" in messages[0].msg and "LISTEN needs PostgreSQL" in messages[0].msg


@pytest.mark.parametrize("value", [None, "listen", "default"])
def test_a_postgresql_alias_or_none_passes(value: str | None) -> None:
    with override_settings(DURABLE_JOBS={"LISTEN_DATABASE": value}):
        assert check_listen_database() == []
        assert check_settings() == []


@pytest.mark.parametrize("value", ["", " listen", 3, ["listen"]])
def test_a_value_that_is_not_an_alias_is_e003(value: object) -> None:
    with override_settings(DURABLE_JOBS={"LISTEN_DATABASE": value}):
        assert ids(check_settings()) == ["durable_jobs.E003"]
        assert check_listen_database() == []  # E003 says it already


def test_e009_is_reported_by_manage_py_check() -> None:
    with override_settings(DURABLE_JOBS={"LISTEN_DATABASE": "nowhere"}):
        assert "durable_jobs.E009" in ids(checks.run_checks(databases=[]))


# -- which connection LISTENs ------------------------------------------------------


def listening_apps() -> list[str]:
    """The application_name of each session on the test database whose last statement was LISTEN."""
    with new_connection() as conn:
        rows = conn.execute(
            "SELECT application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND query ILIKE 'LISTEN%%' "
            "AND pid <> pg_backend_pid()"
        ).fetchall()
    return [row[0] for row in rows]


def test_the_worker_listens_on_listen_database_and_its_probe_arrives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "django_durable_jobs.worker")
    with override_settings(DURABLE_JOBS={"LISTEN_DATABASE": "listen"}):
        # A long poll: a job that starts at once was woken by its NOTIFY.
        running = RunningWorker(worker_config(burst=False, poll_interval=30.0))
        worker = running.worker
        try:
            assert worker.config.listen_alias == "listen"
            assert worker.listener is not None and worker.listener.listen_alias == "listen"
            wait_until(lambda: worker.notifications_arriving is True, WAIT_SECONDS, "the probe")
            assert listening_apps() == [LISTEN_APP]
            job = enqueue("tests.record").job
            wait_until(
                lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED,
                WAIT_SECONDS,
                "the job, woken by its notification",
            )
            # Lines about the database's vacuum health may come; none about notifications.
            assert [n for n in worker.health_notes() if n.startswith("notifications")] == []
        finally:
            running.stop()
    started = [r.getMessage() for r in caplog.records if "Worker starting" in r.getMessage()]
    assert started and "listen_database=listen" in started[0]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_reconnected_listener_probes_again() -> None:
    with override_settings(DURABLE_JOBS={"LISTEN_DATABASE": "listen"}):
        running = RunningWorker(worker_config(burst=False, poll_interval=30.0))
        worker = running.worker
        try:
            assert worker.listener is not None and worker.listener.probe is not None
            probe = worker.listener.probe
            wait_until(
                lambda: worker.notifications_arriving is True, WAIT_SECONDS, "the first probe"
            )
            assert probe._sent == 1
            with new_connection() as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = %s",
                    [LISTEN_APP],
                )
            wait_until(lambda: probe._sent == 2, WAIT_SECONDS, "a probe after the reconnect")
            assert worker.notifications_arriving is True
        finally:
            running.stop()


def test_without_listen_database_the_worker_listens_on_its_own_database() -> None:
    running = RunningWorker(worker_config(burst=False, poll_interval=30.0))
    try:
        assert running.worker.config.listen_alias == db.database_alias()
        wait_until(lambda: running.worker.notifications_arriving is True, WAIT_SECONDS, "the probe")
        assert LISTEN_APP not in listening_apps()
    finally:
        running.stop()


def test_wait_listens_on_listen_database() -> None:
    waiter = ThreadWaiter()
    job_id = uuid.uuid4()
    with override_settings(DURABLE_JOBS={"LISTEN_DATABASE": "listen"}):
        listener = listener_for(db.database_alias())
        listener.add(job_id, waiter)
        try:
            assert listener.connected.wait(10)
            assert listening_apps() == [LISTEN_APP]
        finally:
            listener.remove(job_id, waiter)


# -- a LISTEN connection that hears nothing -----------------------------------


def deaf_worker(**overrides: Any) -> Worker:
    """A worker whose LISTEN connection is to another database of the same server.

    NOTIFY never crosses databases, so its listener hears none of what the
    worker's main connection sends: what a transaction pooler does to it,
    without one.
    """
    worker = Worker(worker_config(burst=False, **overrides))
    assert worker.listener is not None
    params = dict(worker.listener._params)
    params["dbname"] = "postgres"
    worker.listener._params = params
    return worker


def test_a_listener_that_hears_nothing_is_detected_once_and_the_worker_polls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from django_durable_jobs import metrics

    caplog.set_level(logging.INFO, "django_durable_jobs.worker")
    worker = deaf_worker(poll_interval=0.5)
    assert worker.listener is not None and worker.listener.probe is not None
    worker.listener.probe.timeout = 0.5
    worker.listener.probe.interval = 1.0
    running = RunningWorker(worker)
    try:
        wait_until(
            lambda: worker.notifications_arriving is False, WAIT_SECONDS, "the probe to be missed"
        )
        assert worker.health_notes()[0] == (
            "notifications: not arriving (polling every 0.5s; see DURABLE_JOBS['LISTEN_DATABASE'])"
        )
        assert worker.healthy()  # it works, by polling: /healthz stays 200
        sample = metrics.NOTIFICATIONS_OK.labels(db.database_alias())._value.get()
        assert sample == 0
        job = enqueue("tests.record").job
        wait_until(
            lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED,
            WAIT_SECONDS,
            "the job, found by the poll",
        )
        # More probes went out and were missed (interval 1 s): still one warning.
        probe = worker.listener.probe
        wait_until(lambda: probe._sent >= 3, WAIT_SECONDS, "more probes")
    finally:
        running.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "LISTEN" in warnings[0] and "LISTEN_DATABASE" in warnings[0]
    # Stopped: the worker's gauge is gone.
    assert (db.database_alias(),) not in metrics.NOTIFICATIONS_OK._metrics
