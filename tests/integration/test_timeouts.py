"""Time limits against the real PostgreSQL: enqueue, API, the worker's watchdog, fencing, leases."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now
from django.test import override_settings

from django_durable_jobs import IdempotencyConflict, InvalidJob, db, enqueue, enqueue_many
from django_durable_jobs.db.records import ClaimedJob
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker import WorkerConfig
from django_durable_jobs.worker.attempts import AttemptTable
from django_durable_jobs.worker.executor import RetryPolicy, timed_out
from django_durable_jobs.worker.loop import EXIT_OK, EXIT_RECYCLE
from django_durable_jobs.worker.maintenance import Maintenance
from django_durable_jobs.worker.outcomes import complete
from tests.factories import (
    FAST_BACKOFF,
    WAIT_SECONDS,
    RunningWorker,
    claim_directly,
    finish,
    join_handler_threads,
    worker_config,
)
from tests.factories import wait_until as wait_for
from tests.testapp.jobs import gate
from tests.testapp.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True)]

TIMEOUT_PATH = "django_durable_jobs.exceptions.JobTimeout"


def config(**overrides: object) -> WorkerConfig:
    values: dict[str, object] = {
        "burst": False,
        "concurrency": 2,
        "listen": False,
        "schedules": False,
    }
    return worker_config(**{**values, **overrides})


class Running(RunningWorker):
    """A non-burst worker on a (daemon) thread of this process."""

    def __init__(self, **overrides: object) -> None:
        super().__init__(config(**overrides), daemon=True)


def finished(job_id: uuid.UUID) -> Callable[[], bool]:
    return lambda: Job.objects.get(pk=job_id).status in (JobStatus.COMPLETED, JobStatus.DEAD)


# --- enqueue ---------------------------------------------------------------------


def test_enqueue_stores_the_per_job_timeout() -> None:
    job = enqueue("tests.spin", timeout=2.5).job
    assert job.timeout == 2.5
    assert Job.objects.get(pk=job.pk).timeout == 2.5
    # The handler's timeout is not copied into the row: it applies when the job runs.
    assert Job.objects.get(pk=enqueue("tests.spin").job.pk).timeout is None


def test_enqueue_many_stores_timeouts_keyed_or_not() -> None:
    unkeyed = enqueue_many([{"type": "tests.record", "timeout": 3}, {"type": "tests.record"}])
    keyed = enqueue_many(
        [
            {"type": "tests.record", "idempotency_key": "tk-1", "timeout": timedelta(seconds=4)},
            {"type": "tests.record", "idempotency_key": "tk-2"},
        ]
    )
    stored = [Job.objects.get(pk=r.job.pk).timeout for r in unkeyed + keyed]
    assert stored == [3.0, None, 4.0, None]
    assert [r.job.timeout for r in unkeyed + keyed] == stored


def test_a_replay_must_ask_for_the_same_timeout() -> None:
    first = enqueue("tests.record", idempotency_key="tk-replay", timeout=5)
    again = enqueue("tests.record", idempotency_key="tk-replay", timeout=5.0)
    assert (again.job.pk, again.created) == (first.job.pk, False)
    for other in (6, None):
        with pytest.raises(IdempotencyConflict) as info:
            enqueue("tests.record", idempotency_key="tk-replay", timeout=other)
        assert info.value.differences == ["timeout"]
    assert Job.objects.filter(idempotency_key="tk-replay").count() == 1


def test_an_invalid_timeout_writes_nothing() -> None:
    with pytest.raises(InvalidJob, match="timeout"):
        enqueue("tests.record", timeout=0)
    with pytest.raises(InvalidJob, match=r"jobs\[1\]\.timeout"):
        enqueue_many([{"type": "tests.record"}, {"type": "tests.record", "timeout": "1"}])
    assert not Job.objects.exists()


# --- the worker --------------------------------------------------------------------


@pytest.mark.usefixtures("fast_backoff")
def test_a_cooperative_handler_times_out_is_retried_with_backoff_then_dead() -> None:
    job = enqueue("tests.cooperative", timeout=0.3, max_attempts=3).job
    running = Running()
    try:
        wait_for(finished(job.pk), 30, "the job to go dead")
    finally:
        assert running.stop() == EXIT_OK
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD and job.attempts == 3
    assert [e["exception"] for e in job.errors] == [TIMEOUT_PATH] * 3
    assert [e["attempt"] for e in job.errors] == [1, 2, 3]
    assert "time limit of 0.3 s" in job.last_error
    assert Execution.objects.filter(job_id=job.pk).count() == 3
    assert job.result is None


def test_one_log_line_per_attempt_when_the_watchdog_takes_the_job_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The handler raises JobTimeout only after the watchdog took the job:
    # the watchdog's "Job retry"/"Job dead" line is the attempt's only one.
    job = enqueue("tests.stops_when_cancelled", timeout=0.3, max_attempts=2).job
    caplog.set_level("INFO", logger="django_durable_jobs.worker")
    running = Running()
    try:
        wait_for(finished(job.pk), 30, "the job to go dead")
    finally:
        assert running.stop() == EXIT_OK
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD and job.attempts == 2
    assert [e["exception"] for e in job.errors] == [TIMEOUT_PATH] * 2
    lines = [r.getMessage() for r in caplog.records if str(job.pk) in r.getMessage()]
    outcomes = [m for m in lines if m.startswith(("Job retry", "Job dead"))]
    assert len(outcomes) == 2, lines
    assert sum("stopped after the worker gave up" in m for m in lines) == 2, lines


def test_a_spinner_back_within_the_grace_keeps_its_slot_then_serves_the_next_job() -> None:
    # tests.spin (timeout=1) ignores ctx.cancelled and spins in pure Python for
    # 4 s: the watchdog fails it at 1 s and leaves the thread alone; the thread
    # returns 3 s later, well within the 10 s grace, and takes the next job.
    spinner = enqueue("tests.spin", {"spin": 4}, max_attempts=1, priority=1).job
    after = enqueue("tests.record").job
    with override_settings(DURABLE_JOBS={**FAST_BACKOFF, "TIMEOUT_GRACE_SECONDS": 10.0}):
        running = Running(concurrency=1)
    try:
        wait_for(finished(spinner.pk), 30, "the spinner to go dead")
        wait_for(finished(after.pk), 30, "the next job on the same slot")
        wait_for(
            lambda: not running.worker.attempts, WAIT_SECONDS, "the spinner's thread to return"
        )
        assert running.worker.completer.flush(10)  # any (wrong) late outcome is written
        assert running.worker.slots == 1
        assert running.worker.watchdog.stuck() == []
    finally:
        assert running.stop() == EXIT_OK  # no recycle: the thread came back in time
    spinner.refresh_from_db()
    # Failed at its deadline, not when its thread returned; the thread's late
    # "completed" (the spin count) never reached the job.
    assert spinner.status == JobStatus.DEAD and spinner.result is None
    (entry,) = spinner.errors
    assert entry["exception"] == TIMEOUT_PATH
    assert "in spin" in entry["traceback"]  # where the handler was at the deadline
    spun_from = Execution.objects.get(job_id=spinner.pk).at
    # Not before its deadline (1 s from the attempt's start): an order, with room for the
    # two clocks (the row's time is Python's, taken after the start; the outcome's, the
    # database's): 0.9955 s was seen in CI.
    assert (spinner.completed_at - spun_from).total_seconds() > 0.5
    # The slot stayed busy until the spinner's thread returned.
    assert Job.objects.get(pk=after.pk).status == JobStatus.COMPLETED
    after_from = Execution.objects.get(job_id=after.pk).at
    assert (after_from - spun_from).total_seconds() >= 4.0
    assert running.worker.watchdog.timed_out == 1


@pytest.mark.usefixtures("fast_backoff")
def test_the_late_outcome_of_a_timed_out_attempt_is_dropped() -> None:
    # Each attempt sleeps 1.2 s under a 0.3 s limit: attempt 1 fails at 0.3 s and
    # is retried on the other slot while its thread still sleeps; when that
    # thread returns "completed", the job is already on attempt 2 (or dead).
    job = enqueue("tests.sleep_in_c", {"sleep": 1.2}, timeout=0.3, max_attempts=2).job
    running = Running(concurrency=2)
    try:
        wait_for(finished(job.pk), 30, "the job to go dead")
        wait_for(
            lambda: not running.worker.attempts, WAIT_SECONDS, "the sleeping threads to return"
        )
        assert running.worker.completer.flush(10)  # any (wrong) late outcome is written
    finally:
        assert running.stop() == EXIT_OK
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD
    assert job.result is None and job.completed_at is not None
    assert [e["exception"] for e in job.errors] == [TIMEOUT_PATH] * 2
    assert Execution.objects.filter(job_id=job.pk).count() == 2


@pytest.mark.usefixtures("fast_backoff")
def test_a_thread_stuck_in_c_recycles_the_worker_after_its_other_jobs() -> None:
    # Blocked in C (a lock's wait) until the test opens its gate.
    name = f"stuck-{uuid.uuid4().hex}"
    stuck = enqueue("tests.gated", {"gate": name}, timeout=0.3, max_attempts=2, priority=5).job
    other = enqueue("tests.record", {"sleep": 2}, priority=4).job
    with override_settings(DURABLE_JOBS={**FAST_BACKOFF, "TIMEOUT_GRACE_SECONDS": 0.5}):
        running = Running(concurrency=2)
    try:
        running.thread.join(30)
        # It did not wait for the stuck thread (still blocked: its gate is closed)...
        assert not running.thread.is_alive(), "the worker did not recycle"
        assert running.exit_code == EXIT_RECYCLE
        # ...and it waited for the other job.
        other_job = Job.objects.get(pk=other.pk)
        assert other_job.status == JobStatus.COMPLETED
        stuck_job = Job.objects.get(pk=stuck.pk)
        # Failed once at its deadline and retried; the recycling worker claimed nothing more.
        assert stuck_job.status == JobStatus.PENDING
        assert stuck_job.attempts == 1 and stuck_job.lease_token is None
        assert [e["exception"] for e in stuck_job.errors] == [TIMEOUT_PATH]
        assert "in gated" in stuck_job.errors[0]["traceback"]
        assert Execution.objects.filter(job_id=other.pk).count() == 1
    finally:
        gate(name).set()
        if running.thread.is_alive():
            running.stop()
        join_handler_threads(10)
    # The stuck thread's late "completed" never reached the job.
    assert Job.objects.get(pk=stuck.pk).status == JobStatus.PENDING


def test_a_handler_returning_right_at_its_deadline_gets_exactly_one_outcome() -> None:
    # 60 handlers that sleep about as long as their limit race the watchdog on
    # 8 threads: each job ends either completed (no error) or dead with one
    # JobTimeout (no result), never a mix, and each ran once.
    jobs = [
        r.job
        for r in enqueue_many(
            [
                {
                    "type": "tests.sleep_in_c",
                    "payload": {"sleep": 0.1 + (i % 5) * 0.005},
                    "timeout": 0.11,
                    "max_attempts": 1,
                }
                for i in range(60)
            ]
        )
    ]
    running = Running(concurrency=8)
    try:
        wait_for(
            lambda: (
                not Job.objects.exclude(status__in=[JobStatus.COMPLETED, JobStatus.DEAD])
                .filter(pk__in=[j.pk for j in jobs])
                .exists()
            ),
            60,
            "every job to finish",
        )
        wait_for(lambda: not running.worker.attempts, WAIT_SECONDS, "the handler threads to return")
        assert running.worker.completer.flush(10)  # any (wrong) late outcome is written
    finally:
        assert running.stop() == EXIT_OK
    outcomes = {"completed": 0, "dead": 0}
    for job in Job.objects.filter(pk__in=[j.pk for j in jobs]):
        outcomes[job.status] += 1
        if job.status == JobStatus.COMPLETED:
            assert job.errors == [] and job.result == {"slept": True}, job.errors
        else:
            assert [e["exception"] for e in job.errors] == [TIMEOUT_PATH]
            assert job.result is None
        assert job.attempts == 1 and job.lease_token is None
    assert sum(outcomes.values()) == 60
    assert Execution.objects.count() == 60
    assert running.worker.watchdog.timed_out == outcomes["dead"]


# --- fencing and leases --------------------------------------------------------------


def claim_one(worker_id: str = "w-fence", lease: float = 30.0) -> ClaimedJob:
    return claim_directly(worker_id, lease)


def test_a_late_outcome_is_fenced_out_by_the_lease_token() -> None:
    job = enqueue("tests.record", max_attempts=3).job
    first = claim_one()
    policy = RetryPolicy(base=0.0001, cap=0.0001, jitter=0.0)
    assert finish(timed_out(first, "w-fence", policy, 0.5, 0.5)) == {job.pk}
    wait_for(lambda: Job.objects.filter(pk=job.pk, available_at__lte=Now()).exists(), WAIT_SECONDS,
             "the retry to fall due (the database's clock)")  # fmt: skip
    second = claim_one()  # the retry, claimed again (a new lease token)
    # The first attempt's handler returns at last, "completed": it matches no row.
    late = complete(first, '{"late":1}')
    assert finish(late) == set()
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.RUNNING and row.attempts == 2
    assert row.lease_token == second.lease_token and row.result is None
    assert [e["exception"] for e in row.errors] == [TIMEOUT_PATH]


def lease_expiry(job_id: uuid.UUID) -> Any:
    return Job.objects.values_list("lease_expires_at", flat=True).get(pk=job_id)


def test_heartbeats_stop_extending_a_lease_past_the_deadline() -> None:
    within = enqueue("tests.record", priority=2).job
    past = enqueue("tests.record", priority=1).job
    a, b = claim_one(lease=1.0), claim_one(lease=1.0)
    assert (a.id, b.id) == (within.pk, past.pk)
    clock = [1_000.0]
    attempts = AttemptTable(clock=lambda: clock[0])
    for job, timeout in ((a, 60.0), (b, 1.0)):
        attempts.claimed(job, None)
        attempts.begin(job.lease_token, timeout)
    clock[0] += 1.5  # b is past its deadline, a is not
    lost: list[set[uuid.UUID]] = []
    maintenance = Maintenance(
        db.database_alias(),
        "w-fence",
        30.0,
        attempts.leases_to_extend,
        lost.append,
        RetryPolicy(1.0, 1.0, 0.0),
        20,
        clock=lambda: clock[0],
    )
    before = {a.id: lease_expiry(a.id), b.id: lease_expiry(b.id)}
    maintenance.heartbeat()
    assert lease_expiry(a.id) > before[a.id] + timedelta(seconds=20)
    assert lease_expiry(b.id) == before[b.id]
    assert lost == []  # not extended on purpose: not reported as lost
    # So the reaper and the time limit agree: once it expires, it is reaped.
    wait_for(
        lambda: Job.objects.filter(pk=past.pk, lease_expires_at__lt=Now()).exists(),
        WAIT_SECONDS,
        "the lease to expire (the database's clock)",
    )
    assert maintenance.reap() == 1
    reaped = Job.objects.get(pk=past.pk)
    assert reaped.status == JobStatus.PENDING and reaped.lease_token is None
    assert Job.objects.get(pk=within.pk).status == JobStatus.RUNNING
