"""Shared tools for tests that talk to the real PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import pytest
from django.contrib.messages import get_messages
from django.db import connections
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from django_durable_jobs import bulk, db, enqueue_many
from django_durable_jobs.flow import queue_limits
from django_durable_jobs.handlers import registry
from django_durable_jobs.held_back import held_back, nothing_held
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.pausing import pause_queue
from tests.factories import (
    WAIT_SECONDS,
    RunningWorker,
    burst,
    make_job,
    queue_connection,
    wait_until,
    worker_config,
)

T = TypeVar("T")


def new_connection(autocommit: bool = True) -> psycopg.Connection[Any]:
    """A psycopg connection of its own to the test database (outside Django)."""
    params = queue_connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    return psycopg.connect(**params, autocommit=autocommit)


@contextlib.contextmanager
def sleeping_worker(
    worker_id: str = "tests-sleeper", queues: list[str] | None = None
) -> Iterator[None]:
    """A worker's row in ``durable_jobs_listener`` saying it sleeps (``queues``: None, all).

    Enqueues NOTIFY a queue only while a worker of it sleeps
    (``worker/wakefulness.py``): a test that listens as a worker would says
    so with this. Every row is cleared first (a killed worker's, left by an
    earlier test) and after (the test's own).
    """
    with connections[db.database_alias()].cursor() as cursor:
        cursor.execute("DELETE FROM durable_jobs_listener")
    db.mark_listener(
        db.database_alias(), worker_id, queues, sleeping=True, forget_after_seconds=3600
    )
    try:
        yield
    finally:
        with connections[db.database_alias()].cursor() as cursor:
            cursor.execute("DELETE FROM durable_jobs_listener")


def run_in_threads(count: int, target: Callable[[int], T], timeout: float = 60) -> list[T]:
    """Run ``target(i)`` in ``count`` threads released together; return results in order.

    Each thread gets its own Django connection, closed when it ends.
    Exceptions are re-raised in the caller.
    """
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            results[index] = target(index)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(t.is_alive() for t in threads), "threads did not finish"
    if errors:
        raise errors[0]
    return results


def wait_for_lock_waiters(count: int = 1, timeout: float = WAIT_SECONDS) -> None:
    """Until ``count`` sessions on the test database wait on a lock (a row, a key, a transaction).

    The positive event a "the second caller blocks" test needs, instead of
    sleeping and hoping the other thread got there. Asked on a queue_connection
    of its own: inside a transaction PostgreSQL keeps showing the first look.
    """
    with new_connection() as conn:

        def waiting() -> bool:
            (row,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchall()
            return bool(row[0] >= count)

        wait_until(waiting, timeout, f"{count} session(s) to wait on a lock")


def seq_scanned(plan: str) -> set[str]:
    """The tables an ``explain()`` plan reads with a sequential scan; a partition of the
    job table (``db/partitions.py``) as the job table itself."""

    def walk(node: dict[str, Any]) -> Iterator[str]:
        if node.get("Node Type") == "Seq Scan":
            name = node["Relation Name"]
            yield "durable_jobs_job" if name.startswith("durable_jobs_job_") else name
        for child in node.get("Plans", []):
            yield from walk(child)

    return {table for root in json.loads(plan) for table in walk(root["Plan"])}


def relations(plan: str) -> set[str]:
    """Every table or partition an ``explain()`` plan reads."""

    def walk(node: dict[str, Any]) -> Iterator[str]:
        if "Relation Name" in node:
            yield node["Relation Name"]
        for child in node.get("Plans", []):
            yield from walk(child)

    return {table for root in json.loads(plan) for table in walk(root["Plan"])}


# --- the REST API ----------------------------------------------------------------------

ECHO_TYPE = "example.echo"  # registered by the example app
#: Each REST path with and without its trailing slash.
SLASHES = pytest.mark.parametrize("slash", ["", "/"], ids=["no-slash", "slash"])


def job_body(key: str = "k1", **fields: Any) -> dict[str, Any]:
    """A POST /api/jobs body (an ``example.echo`` job) with ``fields`` on top."""
    return {"type": ECHO_TYPE, "payload": {"n": 1}, "idempotency_key": key, **fields}


def make_echo_job(status: str = JobStatus.PENDING, **fields: Any) -> Job:
    """An ``example.echo`` job row in ``status``, for the API to list and act on."""
    return make_job(ECHO_TYPE, {"made": True}, status=status, **fields)


def assert_error(response: Any, status: int, error: str) -> dict[str, Any]:
    """The response is the API's JSON error ``error`` with ``status``; its body."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert body["error"] == error, body
    assert "detail" in body
    return body


# --- the admin -------------------------------------------------------------------------

JOBS = "/admin/durable_jobs/job/"
DEAD_JOBS = "/admin/durable_jobs/deadjob/"


def make_jobs(count: int, status: str, **fields: Any) -> list[uuid.UUID]:
    """``count`` jobs in ``status`` (``queue`` and ``type`` may be given), their ids."""
    queue = fields.pop("queue", "default")
    job_type = fields.pop("type", "tests.record")
    results = enqueue_many([{"type": job_type, "payload": {}, "queue": queue}] * count)
    ids = [result.job.pk for result in results]
    Job.objects.filter(pk__in=ids).update(status=status, **fields)
    return ids


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def bulk_jobs() -> list[Job]:
    return list(Job.objects.filter(type__in=bulk.BULK_TYPES).order_by("created_at"))


# --- metrics ---------------------------------------------------------------------------


def scrape() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """This process's /metrics: ``{(name, labels): value}``."""
    response = Client().get("/metrics")
    assert response.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


# --- flow control ----------------------------------------------------------------------

#: Queues of every kind of limit (``override_settings(DURABLE_JOBS=LIMITED)``).
LIMITED = {
    "QUEUES": {
        "narrow": {"concurrency": 2},
        "throttled": {"rate_limit": "2/m"},
        "both": {"concurrency": 1, "rate_limit": "1/m"},
        "roomy": {"concurrency": 100, "rate_limit": "100/s"},
    }
}


def held(reason: str, count: int) -> dict[str, int]:
    """A queue's held-back counts: ``count`` for ``reason``, nothing for the others."""
    return {**nothing_held(), reason: count}


def jobs(queue: str, count: int, **row: object) -> None:
    """Enqueue ``count`` ``tests.record`` jobs in ``queue``."""
    enqueue_many([{"type": "tests.record", "queue": queue, **row}] * count)


def claim_from(queue: str, want: int) -> int:
    """Claim ``want`` jobs of a limited queue as a worker does; how many it got."""
    for _ in range(2):  # the queue's first claim creates its throttle row and gets nothing
        claimed = db.claim_limited(
            db.database_alias(),
            worker_id="w",
            lease_seconds=30,
            queue=queue,
            limits=queue_limits()[queue],
            want=want,
            key_limits=registry.concurrency_limits(),
        )
        if not claimed.busy:
            return len(claimed.jobs)
    raise AssertionError(f"the throttle row of {queue} stays locked")


def claim_key(limit: int = 1) -> None:
    """Claim ``limit`` keyed jobs, within their keys' limits, as a worker does."""
    claimed = db.claim_keyed(
        db.database_alias(),
        worker_id="w",
        lease_seconds=30,
        limit=limit,
        key_limits=registry.concurrency_limits(),
    )
    assert len(claimed) == limit


#: What ``hold_jobs_back()`` leaves held back, per queue (the others: nothing).
HELD_BY_HOLD_JOBS_BACK = {
    "narrow": held("concurrency", 3),
    "parked": held("paused", 3),
    "default": held("key", 2),
}


def hold_jobs_back() -> None:
    """One queue of each kind, for the front ends' tests (run under ``LIMITED``).

    ``narrow`` at its concurrency, ``parked`` paused, ``default`` (no limits)
    with a busy key, ``other`` with plain runnable jobs; ``throttled`` is
    declared and holds no job.
    """
    jobs("narrow", 5)
    assert claim_from("narrow", 5) == 2
    jobs("parked", 3)
    pause_queue("parked")
    enqueue_many([{"type": "tests.serial", "concurrency_key": "a"}] * 3)
    claim_key()
    jobs("other", 2)
    assert held_back(db.database_alias()) == HELD_BY_HOLD_JOBS_BACK


# --- workers ---------------------------------------------------------------------------


def drain_until_settled(timeout: float = 30, **overrides: object) -> None:
    """Burst workers again until no job is pending or running (retries wait a little)."""

    def settled() -> bool:
        if not Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists():
            return True
        burst(**overrides)
        return False

    wait_until(
        settled, timeout, f"the jobs to settle: {list(Job.objects.values('type', 'status'))}"
    )


def drain_with(workers: int, count: int, **config: object) -> list[Job]:
    """Serve with ``workers`` running workers until ``count`` jobs completed; every job."""
    running = [
        RunningWorker(worker_config(burst=False, **{"concurrency": 4, **config}))
        for _ in range(workers)
    ]
    try:
        wait_until(
            lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() >= count,
            timeout=60,
            what=f"{count} jobs to complete",
        )
    finally:
        for worker in running:
            worker.stop()
    return list(Job.objects.all())


# --- query plans -----------------------------------------------------------------------


def explain(sql: str, params: dict[str, object]) -> str:
    """The plan as JSON text (EXPLAIN without ANALYZE: the UPDATE does not run)."""
    with queue_connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        return json.dumps(cursor.fetchone()[0])


def empty_job_table(cursor: Any) -> None:
    """Start a plan test from an empty job table, not one bloated by earlier tests.

    Each plan test inserts tens of thousands of rows and rolls them back: dead rows
    that stay in the table's pages until autovacuum comes. The planner costs a scan by
    the table's pages, so a plan then depended on which tests ran before in the same
    database (an index was passed over after others' rollbacks, seen in CI). TRUNCATE in
    the test's transaction gives it fresh, empty files; the rollback restores the old.
    """
    cursor.execute("TRUNCATE durable_jobs_job CASCADE")
