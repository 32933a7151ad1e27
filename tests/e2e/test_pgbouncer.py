"""The worker path through a real PgBouncer in transaction mode (``pgbouncer.py``).

Worker processes (and, where it matters, the enqueueing process) connect
through PgBouncer. What works there: enqueue, claim, heartbeats, outcomes,
retries, dependencies, the handlers' ORM. What does not: LISTEN, which
PgBouncer accepts and then never delivers to; the worker says so (one
WARNING, ``/healthz``, a gauge) and polls. With ``LISTEN_DATABASE`` on a
direct connection (``DIRECT_DATABASE_URL`` in the example project) jobs
start at once again. Skipped, naming the Debian package, where PgBouncer
is missing; required in CI (``DURABLE_JOBS_REQUIRE_PGBOUNCER=1``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from django.db import connections

from django_durable_jobs import db, enqueue
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker.outcomes import release
from tests import queue_database
from tests.factories import claim_directly
from tests.ports import free_port
from tests.testapp.models import Execution

from .helpers import MANAGE, ROOT, Workers, get, sample, test_database_url, wait_for
from .pgbouncer import PgBouncer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.pgbouncer,
    pytest.mark.django_db(transaction=True),
]

NOT_ARRIVING = "Notifications are not arriving"
GAUGE = "durable_jobs_worker_notifications_ok"


@dataclass
class Bounced:
    """Workers (and enqueueing processes) whose DATABASE_URL goes through PgBouncer.

    With the queue on its own database, its QUEUE_DATABASE_URL too; ``dbname``
    is the queue's database.
    """

    pgbouncer: PgBouncer
    workers: Workers
    dbname: str
    #: Every database the processes reach through PgBouncer (the queue's, and "default").
    dbnames: frozenset[str]

    def transactions(self) -> int:
        """Transactions PgBouncer has passed to the processes' databases so far."""
        return sum(self.pgbouncer.transactions(name) for name in self.dbnames)

    def enqueue(self, code: str, *, timeout: float = 120) -> str:
        """Run ``code`` in ``manage.py shell`` through PgBouncer; its output."""
        proc = subprocess.run(
            [sys.executable, str(MANAGE), "shell", "-c", code],
            cwd=ROOT,
            env=self.workers.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def listen_directly(self) -> None:
        """Give the processes ``DIRECT_DATABASE_URL``: the example project's LISTEN_DATABASE.

        A direct connection to the queue's database, where the NOTIFYs are sent.
        """
        self.workers.env["DIRECT_DATABASE_URL"] = test_database_url(db.database_alias())


@pytest.fixture
def bounced(pgbouncer: PgBouncer, workers: Workers) -> Iterator[Bounced]:
    names = {alias: connections[alias].settings_dict["NAME"] for alias in connections}
    dbname = names[db.database_alias()]
    workers.env.update(
        DATABASE_URL=pgbouncer.url(names["default"]),
        DJANGO_SETTINGS_MODULE="tests.e2e.settings_pooler",
        E2E_LOG_LEVEL="INFO",
    )
    if queue_database.enabled():
        workers.env["QUEUE_DATABASE_URL"] = pgbouncer.url(dbname)
    workers.env.pop("DIRECT_DATABASE_URL", None)
    try:
        yield Bounced(pgbouncer, workers, dbname, frozenset({names["default"], dbname}))
    finally:
        # Its server connections would outlive the test (and show in the next
        # tests' pg_stat_activity).
        for name in {names["default"], dbname}:
            pgbouncer.drop_connections(name)


def stop(proc: subprocess.Popen[bytes], workers: Workers) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, workers.output()


def test_enqueue_and_the_whole_worker_path_run_through_pgbouncer(bounced: Bounced) -> None:
    before = bounced.transactions()
    queue_before = bounced.pgbouncer.transactions(bounced.dbname)
    # Through PgBouncer: single enqueues (Django's cursor), a bulk one (the
    # gateway's binding cursor), a chain (parents in the same statement), a
    # retry, a dead job.
    bounced.enqueue(
        "from django_durable_jobs import chain, enqueue, enqueue_many, group\n"
        "for i in range(20): enqueue('tests.record', {'i': i})\n"
        "enqueue_many([{'type': 'tests.record', 'payload': {'n': n}} for n in range(300)])\n"
        "group([{'type': 'tests.fail_until', 'payload': {'succeed_on': 1}},\n"
        "       {'type': 'tests.fail_until', 'payload': {'succeed_on': 2}}],\n"
        "      then={'type': 'example.sum_parents'})\n"
        "chain({'type': 'example.echo'}, {'type': 'example.echo'})\n"
        "enqueue('tests.discard')\n"
    )
    assert Job.objects.count() == 326
    proc = bounced.workers.start("--concurrency", "4", "--poll-interval", "0.2")
    wait_for(
        lambda: not Job.objects.exclude(status__in=[JobStatus.COMPLETED, JobStatus.DEAD]).exists(),
        120,
        "every job to finish",
    )
    stop(proc, bounced.workers)
    records = Job.objects.filter(type="tests.record")
    assert records.filter(status=JobStatus.COMPLETED).count() == 320
    # Each ran once (the handler's ORM writes go through PgBouncer too).
    # (The ids read first: Execution is on "default", the jobs maybe on the queue's database.)
    ids = list(records.values_list("id", flat=True))
    assert Execution.objects.filter(job_id__in=ids).count() == 320
    # A retry, then the group's callback with both results (1 and 2).
    assert sorted(
        Job.objects.filter(type="tests.fail_until").values_list("attempts", flat=True)
    ) == [1, 2]
    assert Job.objects.get(type="example.sum_parents").result == 3
    assert Job.objects.filter(type="example.echo", status=JobStatus.COMPLETED).count() == 2
    assert Job.objects.get(type="tests.discard").status == JobStatus.DEAD
    log = bounced.workers.output()
    for bad in ("Traceback", "prepared statement", "does not exist", "failed"):
        assert bad not in log, log
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "Job discarded" in errors[0], errors
    # It all went through PgBouncer: hundreds of transactions (on this database, or
    # on the two with the queue on its own: the handlers' rows are on "default").
    assert bounced.transactions() - before > 326
    # The queue's own: more than the enqueueing process's 24 (the worker's claims and outcomes).
    assert bounced.pgbouncer.transactions(bounced.dbname) - queue_before > 24


def test_through_pgbouncer_nothing_is_prepared_unless_the_setting_says_so(
    bounced: Bounced,
) -> None:
    # PREPARE_STATEMENTS None (the default) tells a pooler by its cancel key:
    # the backend pid PgBouncer gives a client is not its server's. A named
    # prepared statement would be missing, or another client's, on the next
    # transaction's server connection (PgBouncer 1.18).
    out = bounced.enqueue(
        "from django.db import connections\n"
        "from django.test import override_settings\n"
        "from django_durable_jobs import db\n"
        "connection = connections[db.database_alias()]\n"
        "connection.ensure_connection()\n"
        "print('default', db._prepares(connection))\n"
        "with override_settings(DURABLE_JOBS={'PREPARE_STATEMENTS': True}):\n"
        "    print('declared', db._prepares(connection))\n"
    )
    assert "default False" in out and "declared True" in out, out


def test_without_listen_database_the_worker_warns_once_says_so_and_polls(
    bounced: Bounced,
) -> None:
    port = free_port()
    proc = bounced.workers.start(
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--poll-interval", "1",
    )  # fmt: skip
    # The probe at start, missed after 5 s.
    wait_for(lambda: NOT_ARRIVING in bounced.workers.output(), 60, "the warning")
    assert sample(port, GAUGE, listen_database=db.database_alias()) == 0
    status, body = get(port, "/healthz")
    assert status == 200  # the worker works, by polling
    assert body.startswith("ok\n") and "notifications: not arriving" in body, body
    # Jobs still run: found by the poll.
    job = enqueue("tests.record").job
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED, 30, "the job to run")
    stop(proc, bounced.workers)
    log = bounced.workers.output()
    assert log.count(NOT_ARRIVING) == 1, log
    (line,) = [line for line in log.splitlines() if NOT_ARRIVING in line]
    assert " WARNING " in line and "LISTEN" in line and "LISTEN_DATABASE" in line


def test_with_listen_database_on_a_direct_connection_jobs_start_at_once(
    bounced: Bounced,
) -> None:
    bounced.listen_directly()
    port = free_port()
    # The next poll is an hour away: a job that starts at all was woken by its
    # notification. How soon: benchmarks/pooler_latency.py, never asserted here.
    proc = bounced.workers.start(
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--poll-interval", "3600",
    )  # fmt: skip
    wait_for(lambda: get(port, "/healthz")[0] == 200, 30, "/healthz to answer 200")
    wait_for(lambda: sample(port, GAUGE, listen_database="direct") == 1, 30, "the probe")
    status, body = get(port, "/healthz")
    # Lines about the database's vacuum health may follow; none about notifications.
    assert status == 200 and body.startswith("ok\n") and "notifications" not in body, body
    # Enqueued through PgBouncer too: its NOTIFY, sent there at commit,
    # reaches the direct LISTEN connection.
    bounced.enqueue(
        "import time\n"
        "from django_durable_jobs import enqueue\n"
        "enqueue('tests.record', {'warm': True})\n"
        "time.sleep(1)\n"
        "for i in range(7):\n"
        "    time.sleep(0.4)\n"
        "    enqueue('tests.record', {'i': i})\n"
    )
    wait_for(
        lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == 8,
        60,
        "the notifications to start the jobs",
    )
    stop(proc, bounced.workers)
    assert Job.objects.filter(payload__has_key="i", status=JobStatus.COMPLETED).count() == 7
    log = bounced.workers.output()
    assert "listen_database=direct" in log
    assert NOT_ARRIVING not in log, log


def test_the_last_write_of_a_forced_exit_leaves_no_setting_on_the_pooled_connection(
    pgbouncer: PgBouncer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``record_outcomes_directly`` bounds its statements with a statement_timeout.

    Through a transaction pooler a session setting would stay on the server
    connection for the next client; ``<name>_single`` has one server
    connection, so the next client is sure to get it.
    """
    alias = db.database_alias()
    dbname = connections[alias].settings_dict["NAME"]
    enqueue("tests.record")
    claimed = claim_directly()
    params = {
        **db.connection_params(alias),
        "host": "127.0.0.1",
        "port": pgbouncer.port,
        "dbname": f"{dbname}_single",
    }
    monkeypatch.setattr(db, "connection_params", lambda using: dict(params))
    db.record_outcomes_directly(
        alias,
        [release(claimed.id, claimed.lease_token)],
        history_limit=20,
        timeout_seconds=2.0,
    )
    assert Job.objects.get(pk=claimed.id).status == JobStatus.PENDING
    with psycopg.connect(pgbouncer.url(f"{dbname}_single"), autocommit=True) as conn:
        (row,) = conn.execute("SHOW statement_timeout").fetchall()
    assert row[0] == "0"
    pgbouncer.drop_connections(f"{dbname}_single")


def test_pgbouncer_is_the_version_the_issue_saw_or_later(pgbouncer: PgBouncer) -> None:
    major, minor, *_ = (int(part) for part in pgbouncer.version().split()[-1].split("."))
    assert (major, minor) >= (1, 18), pgbouncer.version()
    assert os.environ.get("DIRECT_DATABASE_URL") is None  # the test process itself goes direct
