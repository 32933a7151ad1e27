"""Per-key concurrency (``@job(concurrency_limit=N)`` + ``concurrency_key``), cluster-wide.

Overlaps are read from the rows' ``started_at``/``completed_at``: a job
counts as running from its claim to its outcome's commit, as the limit does.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db.models import Q
from django.utils import timezone

from django_durable_jobs import InvalidJob, db, enqueue, enqueue_many
from django_durable_jobs.db.flow_control import KEY_LOCK_SPACE
from django_durable_jobs.db.queries import QUERIES
from django_durable_jobs.db.records import ClaimedJob, Outcome, Transition
from django_durable_jobs.models import Job, JobStatus
from tests.factories import (
    RunningWorker,
    finish,
    most_running_at_once,
    queue_connection,
    wait_until,
    worker_config,
)

from .helpers import drain_with, run_in_threads

pytestmark = pytest.mark.django_db(transaction=True)

SERIAL = {"tests.serial": 1}


def test_one_key_never_runs_two_jobs_at_once_over_three_workers_and_keys_run_side_by_side() -> None:
    rows = [
        {"type": "tests.serial", "payload": {"sleep": 0.1}, "concurrency_key": f"customer:{i % 2}"}
        for i in range(16)
    ]
    enqueue_many(rows)
    jobs = drain_with(3, 16)
    assert all(job.status == JobStatus.COMPLETED and job.attempts == 1 for job in jobs)
    for key in ("customer:0", "customer:1"):
        assert most_running_at_once([j for j in jobs if j.concurrency_key == key]) == 1
    # The two keys did run at the same time (not one key after the other).
    assert most_running_at_once(jobs) == 2


def test_a_limit_of_two_allows_two_per_key() -> None:
    enqueue_many([{"type": "tests.pair", "payload": {"sleep": 0.15}, "concurrency_key": "k"}] * 8)
    jobs = drain_with(2, 8)
    assert most_running_at_once(jobs) == 2


def test_a_busy_key_does_not_block_other_keys_and_its_oldest_job_runs_first() -> None:
    # Ten jobs of key "a" first in claim order, then one of key "b". One
    # transaction each: jobs of one enqueue_many() share their created_at, and
    # the claim's order among equal (priority, available_at, created_at) is not
    # defined (strict FIFO is not promised), so "the oldest" needs distinct times.
    for i in range(10):
        enqueue("tests.serial", {"sleep": 0.3, "i": i}, concurrency_key="a")
    other = enqueue("tests.serial", {"sleep": 0}, concurrency_key="b").job
    running = RunningWorker(worker_config(burst=False, concurrency=4))
    try:
        wait_until(
            lambda: Job.objects.get(pk=other.pk).status == JobStatus.COMPLETED,
            what="key b's job to run",
        )
        wait_until(
            lambda: Job.objects.filter(concurrency_key="a").exclude(started_at=None).count() >= 2,
            what="key a's second job to start",
        )
    finally:
        running.stop()
    first = Job.objects.filter(concurrency_key="a").exclude(started_at=None).order_by("started_at")
    assert first[0].payload["i"] == 0  # the oldest job of the key first
    other.refresh_from_db()
    assert other.started_at is not None
    # While key a was busy with its first job: before its second one could start.
    assert other.started_at < first[1].started_at


def test_racing_claims_on_one_free_key_start_one_job_each_round() -> None:
    # One key's jobs in 8 queues, each racer claiming from its own (workers
    # serving different queues): each sees another first job of the key, so
    # only the key's lock can keep two of them from both starting one.
    enqueue_many(
        [
            {"type": "tests.serial", "queue": f"q{i}", "concurrency_key": "same"}
            for _ in range(5)
            for i in range(8)
        ]
    )

    def claim(i: int) -> list[ClaimedJob]:
        return db.claim_keyed(
            db.database_alias(),
            worker_id=f"racer-{i}",
            lease_seconds=30,
            limit=5,
            key_limits=SERIAL,
            queues=[f"q{i}"],
        )

    for _ in range(5):
        # 8 claims released together on a free key: one job, by one of them.
        claimed = [job for got in run_in_threads(8, claim) for job in got]
        assert len(claimed) == 1, claimed
        assert Job.objects.filter(status=JobStatus.RUNNING).count() == 1
        # Ended: the key is free again for the next round.
        (job,) = claimed
        assert finish(Outcome(job.id, job.lease_token, Transition.COMPLETE)) == {job.id}
    assert Job.objects.filter(status=JobStatus.COMPLETED).count() == 5


def test_a_key_s_jobs_start_after_its_last_one_ended_as_the_rows_record_it() -> None:
    # Four claimers on one key, each completing at once what it got: a job's
    # recorded start must not come before its predecessor's recorded end.
    # The claim counts a key's running jobs in a snapshot taken inside the
    # call, after its locks; a start stamped at the call's beginning (the
    # statement's timestamp) came before an end committed meanwhile (seen
    # in the chaos suite's long mode as two jobs of one key "at once").
    enqueue_many([{"type": "tests.serial", "concurrency_key": "one"}] * 400)

    def claim_and_finish(i: int) -> int:
        done = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = db.claim_keyed(
                db.database_alias(),
                worker_id=f"claimer-{i}",
                lease_seconds=30,
                limit=1,
                key_limits=SERIAL,
            )
            for job in got:
                finish(Outcome(job.id, job.lease_token, Transition.COMPLETE))
                done += 1
            if not got and not Job.objects.exclude(status=JobStatus.COMPLETED).exists():
                break
        return done

    assert sum(run_in_threads(4, claim_and_finish, timeout=120)) == 400
    jobs = list(Job.objects.all())
    assert all(job.status == JobStatus.COMPLETED for job in jobs)
    assert most_running_at_once(jobs) == 1


def test_the_keyed_claim_returns_the_plain_claim_s_columns() -> None:
    # The keyed claim's function (migration 0004) repeats the plain claim's
    # UPDATE and its columns, frozen in the migration: a column added to one
    # must be added to the other (a new migration replacing the function).
    common = {"limit": 0, "worker_id": "w", "lease_seconds": 30.0, "excluded": []}
    with queue_connection.cursor() as cursor:
        cursor.execute(QUERIES["claim_jobs"], {**common, "keyed_types": []})
        plain = [column.name for column in cursor.description]
        cursor.execute(
            QUERIES["claim_keyed"],
            {**common, "types": ["tests.serial"], "limits": [1], "queues": None,
             "scan": 0, "lock_space": KEY_LOCK_SPACE},
        )  # fmt: skip
        keyed = [column.name for column in cursor.description]
    assert keyed == plain
    assert len(plain) == len(ClaimedJob._fields)


def test_jobs_with_a_key_of_a_type_without_a_limit_run_unlimited() -> None:
    enqueue_many([{"type": "tests.record", "concurrency_key": "k"}] * 5)
    claimed = db.claim(
        db.database_alias(), worker_id="w", lease_seconds=30, limit=10, keyed_types=list(SERIAL)
    )
    assert len(claimed) == 5


def test_the_plain_claim_leaves_keyed_jobs_of_limited_types_alone() -> None:
    keyed = enqueue("tests.serial", concurrency_key="k").job
    plain = enqueue("tests.serial").job  # no key: not limited
    claimed = db.claim(
        db.database_alias(), worker_id="w", lease_seconds=30, limit=10, keyed_types=list(SERIAL)
    )
    assert [job.id for job in claimed] == [plain.pk]
    assert Job.objects.get(pk=keyed.pk).status == JobStatus.PENDING


def test_a_dead_worker_s_job_holds_its_key_only_until_its_lease_expires() -> None:
    enqueue("tests.serial", concurrency_key="k", priority=5)
    (held,) = db.claim_keyed(
        db.database_alias(), worker_id="dead", lease_seconds=1.0, limit=1, key_limits=SERIAL
    )
    waiting = enqueue("tests.serial", concurrency_key="k").job
    assert (
        db.claim_keyed(
            db.database_alias(), worker_id="w", lease_seconds=30, limit=1, key_limits=SERIAL
        )
        == []
    )
    wait_until(
        lambda: db.claim_keyed(
            db.database_alias(), worker_id="w", lease_seconds=30, limit=1, key_limits=SERIAL
        ),
        what="the key to free once the dead worker's lease expired",
    )
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.RUNNING
    assert held.id != waiting.pk


@pytest.mark.parametrize("key", ["", "x" * 256, 42])
def test_a_bad_concurrency_key_is_refused(key: object) -> None:
    with pytest.raises(InvalidJob, match="concurrency_key"):
        enqueue("tests.serial", concurrency_key=key)  # type: ignore[arg-type]
    assert not Job.objects.exists()


def test_enqueue_many_rows_take_a_concurrency_key_and_replays_compare_it() -> None:
    (result,) = enqueue_many(
        [{"type": "tests.serial", "concurrency_key": "k", "idempotency_key": "i1"}]
    )
    assert result.job.concurrency_key == "k"
    assert Job.objects.get().concurrency_key == "k"
    from django_durable_jobs import IdempotencyConflict

    with pytest.raises(IdempotencyConflict, match="concurrency_key"):
        enqueue("tests.serial", idempotency_key="i1", concurrency_key="other")


def test_jobs_without_a_key_still_start_promptly_while_keyed_jobs_keep_the_worker_busy() -> None:
    # 400 keyed jobs of 2 keys: the worker is busy with them for a while, and its
    # claims of jobs without a key come back empty (it then asks less often).
    enqueue_many(
        [
            {"type": "tests.serial", "payload": {"sleep": 0.01}, "concurrency_key": f"k{i % 2}"}
            for i in range(400)
        ]
    )
    running = RunningWorker(worker_config(burst=False, concurrency=4))
    try:
        wait_until(lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() >= 20)
        # Announced by a notification, and one that becomes runnable without one.
        notified = enqueue("tests.record").job
        due = enqueue("tests.record", run_at=timezone.now() + timedelta(seconds=0.3)).job
        wait_until(
            lambda: all(
                Job.objects.get(pk=j.pk).status == JobStatus.COMPLETED for j in (notified, due)
            ),
            what="the jobs without a key",
        )
    finally:
        running.stop()
    notified.refresh_from_db()
    due.refresh_from_db()
    assert notified.started_at is not None and due.started_at is not None
    assert due.started_at >= due.available_at
    # They did not wait for the keyed backlog to drain: some keyed job started
    # after both of them (or never did). Order, by the database's clock; how
    # soon they start is not a test's business on a shared machine.
    latest = max(notified.started_at, due.started_at)
    later_keyed = Job.objects.filter(type="tests.serial").filter(
        Q(started_at=None) | Q(started_at__gt=latest)
    )
    assert later_keyed.exists()
