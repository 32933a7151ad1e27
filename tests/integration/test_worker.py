"""The worker, in this process, against the real PostgreSQL.

Real commits are needed (the worker's threads use their own connections),
hence ``transaction=True`` throughout.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError
from django.test import override_settings

from django_durable_jobs import db as gateway
from django_durable_jobs import enqueue, enqueue_many
from django_durable_jobs.backoff import RetryPolicy
from django_durable_jobs.db.records import ClaimedJob, Outcome, Transition
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.worker import Worker, WorkerConfig
from django_durable_jobs.worker.attempts import State
from django_durable_jobs.worker.maintenance import REAPER_LOCK_KEY, Maintenance
from django_durable_jobs.worker.outcomes import release
from django_durable_jobs.worker.pool import CLAIM_AHEAD_LIMIT
from tests.factories import (
    RunningWorker,
    abandoned,
    burst,
    claim_directly,
    claimed_job,
    expire,
    finish,
    queue_connection,
    reaper,
    wait_until,
    worker_config,
)
from tests.testapp.jobs import gate
from tests.testapp.models import Execution

from .helpers import drain_until_settled, new_connection

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fast_backoff"),
]


def config(**overrides: object) -> WorkerConfig:
    return worker_config(**overrides)


def drain(**overrides: object) -> Worker:
    """Run a burst worker until nothing runnable is left (retries included)."""
    return burst(**overrides)


def test_jobs_complete_with_their_results() -> None:
    results = enqueue_many([{"type": "example.echo", "payload": {"n": i}} for i in range(20)])
    worker = drain()
    assert worker.claimed == 20
    for result in results:
        job = Job.objects.get(pk=result.job.pk)
        assert job.status == JobStatus.COMPLETED
        assert job.result == {"n": result.job.payload["n"]}
        assert job.attempts == 1
        assert job.completed_at is not None and job.started_at is not None
        assert job.lease_token is None and job.lease_holder is None
        assert job.lease_expires_at is None


def test_a_flaky_job_completes_on_the_attempt_it_should() -> None:
    job = enqueue("tests.fail_until", {"succeed_on": 3}).job
    drain_until_settled()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result) == (JobStatus.COMPLETED, 3, 3)
    assert [e["attempt"] for e in job.errors] == [1, 2]
    assert job.errors[0]["exception"] == "builtins.ValueError"
    assert "attempt 1 fails" in job.errors[0]["error"]
    assert "Traceback" in job.errors[0]["traceback"]
    runs = Execution.objects.filter(job_id=job.pk).order_by("attempt")
    assert list(runs.values_list("attempt", flat=True)) == [1, 2, 3]


def test_a_failing_job_is_dead_after_max_attempts_with_its_history() -> None:
    job = enqueue("tests.fail_until", {"succeed_on": 99}, max_attempts=3).job
    drain_until_settled()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.DEAD, 3)
    assert [e["attempt"] for e in job.errors] == [1, 2, 3]
    assert job.last_error.startswith("builtins.ValueError: attempt 3 fails")
    assert "Traceback" in job.last_error
    assert job.completed_at is not None
    assert Execution.objects.filter(job_id=job.pk).count() == 3


def test_retries_wait_with_growing_jittered_backoff() -> None:
    with override_settings(
        DURABLE_JOBS={"BACKOFF_BASE_SECONDS": 10.0, "BACKOFF_MAX_SECONDS": 1000.0}
    ):
        jobs = [enqueue("tests.fail_until", {"succeed_on": 99}).job for _ in range(20)]
        drain()
    delays = []
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.PENDING
        # Not claimed again: it waits for its backoff.
        assert job.attempts == 1
        delays.append((job.available_at - job.updated_at).total_seconds())
    assert all(9.0 <= d <= 11.0 for d in delays), delays
    assert len({round(d, 3) for d in delays}) > 10  # jitter spreads them


def test_the_error_history_is_bounded() -> None:
    with override_settings(
        DURABLE_JOBS={
            "BACKOFF_BASE_SECONDS": 0.001,
            "BACKOFF_MAX_SECONDS": 0.001,
            "ERROR_HISTORY_LIMIT": 3,
        }
    ):
        job = enqueue("tests.fail_until", {"succeed_on": 99}, max_attempts=6).job
        drain_until_settled()
    job.refresh_from_db()
    assert job.status == JobStatus.DEAD
    assert [e["attempt"] for e in job.errors] == [4, 5, 6]


def test_discard_sends_the_job_to_dead_at_once() -> None:
    job = enqueue("tests.discard").job
    drain()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.DEAD, 1)
    assert "not worth retrying" in job.last_error
    assert job.errors[0]["exception"] == "django_durable_jobs.exceptions.Discard"


def test_retry_reschedules_the_job_when_asked() -> None:
    job = enqueue("tests.retry_later", {"after": 300}).job
    drain()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.PENDING, 1)
    assert timedelta(seconds=299) < job.available_at - job.updated_at < timedelta(seconds=301)


@override_settings(DURABLE_JOBS={"UNKNOWN_TYPE_DEAD_AFTER_SECONDS": 0})
def test_an_unregistered_type_goes_dead_with_a_clear_error_when_it_may_not_wait() -> None:
    # With the wait at 0, the old rule: dead at the first claim. (Given back
    # otherwise: tests/integration/test_unknown_types.py.)
    job = enqueue("nobody.handles.this").job
    drain()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.DEAD, 1)
    assert "No handler is registered for job type 'nobody.handles.this'" in job.last_error
    assert job.errors[0]["exception"] == "django_durable_jobs.UnknownJobType"


def test_an_unserialisable_result_completes_without_a_result() -> None:
    job = enqueue("tests.unserialisable").job
    drain()
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.COMPLETED, None)


def test_system_exit_in_a_handler_gives_the_job_back_and_stops_the_worker() -> None:
    job = enqueue("tests.exit").job
    worker = Worker(config(burst=False))
    assert worker.run() == 0  # stopped by the handler, not by a timeout
    job.refresh_from_db()
    assert (job.status, job.attempts, job.last_error) == (JobStatus.PENDING, 0, "")
    assert job.lease_token is None


def test_priority_order_then_oldest_first() -> None:
    low = enqueue("tests.record", priority=-5).job
    first = enqueue("tests.record", priority=10).job
    second = enqueue("tests.record", priority=10).job
    normal = enqueue("tests.record").job
    drain(concurrency=1)
    order = list(Execution.objects.order_by("at", "id").values_list("job_id", flat=True))
    names = {first.pk: "first", second.pk: "second", normal.pk: "normal", low.pk: "low"}
    assert [names.get(i, i) for i in order] == ["first", "second", "normal", "low"], list(
        Execution.objects.order_by("at", "id").values_list("job_id", "at", "worker")
    )


def test_delayed_jobs_do_not_run_early() -> None:
    later = enqueue("tests.record", delay=timedelta(minutes=10)).job
    soon = enqueue("tests.record", delay=0.3).job
    # A poll interval far longer than the wait: only the worker's own
    # "next job due at" wake-up can start the job within the wait.
    running = RunningWorker(config(burst=False, poll_interval=120.0))
    try:
        wait_until(lambda: Execution.objects.filter(job_id=soon.pk).exists(), 60, "the due job")
    finally:
        running.stop()
    soon.refresh_from_db()
    # The database's clock: claimed once due (the claim's now() >= available_at),
    # not at the next poll.
    assert soon.status == JobStatus.COMPLETED
    assert soon.available_at <= soon.started_at < soon.available_at + timedelta(seconds=60)
    assert Job.objects.get(pk=later.pk).status == JobStatus.PENDING
    assert not Execution.objects.filter(job_id=later.pk).exists()


def test_workers_serve_only_their_queues() -> None:
    emails = enqueue("tests.record", queue="emails").job
    reports = enqueue("tests.record", queue="reports").job
    drain(queues=frozenset({"emails"}))
    assert Job.objects.get(pk=emails.pk).status == JobStatus.COMPLETED
    assert Job.objects.get(pk=reports.pk).status == JobStatus.PENDING
    drain(queues=frozenset({"reports", "other"}))
    assert Job.objects.get(pk=reports.pk).status == JobStatus.COMPLETED


def test_jobs_that_take_long_are_claimed_only_into_free_slots() -> None:
    # 0.1 s each: above CLAIM_AHEAD_MAX_SECONDS, so no job waits claimed for a thread.
    enqueue_many([{"type": "tests.record", "payload": {"sleep": 0.1}}] * 30)
    sizes: list[int] = []
    original = gateway.claim

    def spy(using: str, **params: Any) -> list[ClaimedJob]:
        jobs = original(using, **params)
        assert params["limit"] <= 3
        sizes.append(len(jobs))
        return jobs

    with mock.patch.object(gateway, "claim", spy):
        drain(concurrency=3)
    assert sum(sizes) == 30
    assert max(sizes) <= 3


def test_short_jobs_are_claimed_ahead_within_the_buffer_s_bound() -> None:
    enqueue_many([{"type": "tests.record"}] * 600)
    limits: list[int] = []
    original = gateway.claim

    def spy(using: str, **params: Any) -> list[ClaimedJob]:
        limits.append(params["limit"])
        return original(using, **params)

    with mock.patch.object(gateway, "claim", spy):
        drain(concurrency=2)
    assert Job.objects.filter(status=JobStatus.COMPLETED, attempts=1).count() == 600
    assert limits[0] == 2  # nothing known about the jobs yet: the free slots only
    assert max(limits) > 2  # then ahead of the slots
    assert max(limits) <= 2 + CLAIM_AHEAD_LIMIT


def test_jobs_claimed_ahead_are_given_back_uncounted_at_a_stop_and_never_run() -> None:
    name = f"ahead-{uuid.uuid4().hex}"
    # Thirty short jobs: enough for the running mean of durations to fall
    # under the bound even if the first ones are slow (a busy machine).
    short = enqueue_many([{"type": "tests.record", "priority": 10}] * 30)
    blocker = enqueue("tests.gated", {"gate": name}, priority=5).job
    behind = [r.job.pk for r in enqueue_many([{"type": "tests.record"}] * 10)]
    # Jobs "short" up to 5 s on average: on a loaded machine tests.record (a
    # row written) can average more than the 50 ms that makes a job short,
    # and then nothing is claimed ahead (CI saw it time out).
    patched = mock.patch("django_durable_jobs.worker.pool.CLAIM_AHEAD_MAX_SECONDS", 5.0)
    patched.start()
    running = RunningWorker(config(burst=False, grace_period=0.2, concurrency=1))
    try:
        wait_until(lambda: Execution.objects.filter(job_id=blocker.pk).exists(), what="blocker")
        # The short jobs taught the worker to claim ahead: the ten wait in its buffer.
        wait_until(
            lambda: Job.objects.filter(pk__in=behind, status=JobStatus.RUNNING).count() == 10,
            what="the jobs behind the blocker to be claimed ahead",
        )
    finally:
        running.stop()
        gate(name).set()
        patched.stop()
    assert Job.objects.filter(pk__in=[r.job.pk for r in short], status="completed").count() == 30
    assert not Execution.objects.filter(job_id__in=behind).exists()
    for job in Job.objects.filter(pk__in=[*behind, blocker.pk]):
        assert (job.status, job.attempts, job.lease_token) == (JobStatus.PENDING, 0, None)


# --- fencing, leases, reaper ------------------------------------------------


def test_a_worker_that_lost_its_lease_cannot_overwrite_the_new_claim() -> None:
    job = enqueue("tests.record").job
    claimed = claim_directly("worker-a")
    job_id, old_token = claimed.id, claimed.lease_token
    expire(job_id)
    assert reaper().reap() == 1
    assert Job.objects.get(pk=job_id).status == JobStatus.PENDING
    Job.objects.filter(pk=job_id).update(available_at=Job.objects.get(pk=job_id).created_at)
    new_token = claim_directly("worker-b").lease_token
    assert new_token != old_token

    # Worker A comes back from its pause and reports: nothing changes.
    assert finish(Outcome(job_id, old_token, Transition.COMPLETE, result_json='"from a"')) == set()
    failed = Outcome(job_id, old_token, Transition.DEAD, last_error="from a")
    assert finish(failed) == set()
    assert finish(release(job_id, old_token)) == set()
    current = Job.objects.get(pk=job.pk)
    assert (current.status, current.lease_holder, current.attempts) == (
        JobStatus.RUNNING, "worker-b", 2,
    )  # fmt: skip

    # Worker B, which holds the claim, can.
    assert finish(Outcome(job_id, new_token, Transition.COMPLETE, result_json='"from b"')) == {
        job_id
    }
    current.refresh_from_db()
    assert (current.status, current.result) == (JobStatus.COMPLETED, "from b")
    # And a completed job cannot be written again with the same token.
    assert finish(Outcome(job_id, new_token, Transition.DEAD)) == set()


def test_the_reaper_retries_or_kills_abandoned_jobs() -> None:
    retried, killed = abandoned("ghost", 3, 1)
    assert reaper().reap() == 2
    retried.refresh_from_db()
    killed.refresh_from_db()
    assert (retried.status, retried.attempts) == (JobStatus.PENDING, 1)
    assert retried.available_at > retried.updated_at  # with backoff
    assert "Abandoned: the lease of worker ghost expired" in retried.last_error
    assert retried.errors[-1]["worker"] == "ghost"
    assert retried.lease_token is None
    assert (killed.status, killed.attempts) == (JobStatus.DEAD, 1)
    assert killed.completed_at is not None


def test_the_reaper_leaves_live_leases_alone() -> None:
    enqueue("tests.record")
    claim_directly("alive")
    assert reaper().reap() == 0
    assert Job.objects.get().status == JobStatus.RUNNING


def test_one_reaper_at_a_time() -> None:
    job = enqueue("tests.record").job
    claim_directly("ghost")
    expire(job.pk)
    other = new_connection(autocommit=False)
    try:
        other.execute("SELECT pg_advisory_xact_lock(%s)", [REAPER_LOCK_KEY])
        assert reaper().reap() == 0  # another reaper holds the lock
    finally:
        other.rollback()
        other.close()
    assert reaper().reap() == 1


def test_heartbeats_extend_held_leases_and_report_lost_ones() -> None:
    kept = enqueue("tests.record").job
    stolen = enqueue("tests.record").job
    kept_claim, stolen_claim = claim_directly("w", 1.0), claim_directly("w", 1.0)
    kept_id, kept_token = kept_claim.id, kept_claim.lease_token
    stolen_id, stolen_token = stolen_claim.id, stolen_claim.lease_token
    if kept_id != kept.pk:
        kept_id, kept_token, stolen_id, stolen_token = stolen_id, stolen_token, kept_id, kept_token
    Job.objects.filter(pk=stolen_id).update(lease_token=uuid.uuid4())  # reaped and re-claimed
    lost: list[set[uuid.UUID]] = []
    held = {kept_id: kept_token, stolen_id: stolen_token}
    maintenance = Maintenance(
        gateway.database_alias(), "w", 120.0, lambda: held, lost.append, RetryPolicy(1, 1, 0), 20
    )
    before = Job.objects.get(pk=kept_id).lease_expires_at
    maintenance.heartbeat()
    assert Job.objects.get(pk=kept_id).lease_expires_at > before + timedelta(seconds=100)
    assert lost == [{stolen_id}]
    assert stolen.pk == stolen_id


def test_a_worker_s_reaper_extends_its_own_expired_leases_instead_of_reaping_them() -> None:
    # The database was out of reach for longer than the lease: this worker's
    # heartbeats failed and its leases expired, but it is alive and holds the
    # attempts (their outcomes wait in its completer). Its own reaper, due
    # before its next heartbeat, must not return them to pending to run again.
    mine = enqueue("tests.record").job
    enqueue("tests.record")  # a dead worker's
    mine_claim, orphan_claim = claim_directly("me"), claim_directly("ghost")
    if mine_claim.id != mine.pk:
        mine_claim, orphan_claim = orphan_claim, mine_claim
    expire(mine_claim.id)
    expire(orphan_claim.id)
    held = {mine_claim.id: mine_claim.lease_token}
    maintenance = Maintenance(
        gateway.database_alias(),
        "me",
        30.0,
        lambda: held,
        lambda lost: None,
        RetryPolicy(0.01, 0.05, 0.1),
        20,
    )
    assert maintenance.reap() == 1  # the dead worker's job only
    kept = Job.objects.get(pk=mine_claim.id)
    assert (kept.status, kept.lease_token) == (JobStatus.RUNNING, mine_claim.lease_token)
    assert kept.lease_expires_at > kept.started_at + timedelta(seconds=20)
    assert Job.objects.get(pk=orphan_claim.id).status == JobStatus.PENDING
    # Another worker's reaper still takes an expired lease of this one.
    expire(mine_claim.id)
    assert reaper().reap() == 1
    assert Job.objects.get(pk=mine_claim.id).status == JobStatus.PENDING


# --- shutdown -----------------------------------------------------------------


def test_stop_lets_in_flight_jobs_finish_within_the_grace_period() -> None:
    job = enqueue("tests.record", {"sleep": 0.5}).job
    running = RunningWorker(config(burst=False, grace_period=60.0))
    wait_until(lambda: Execution.objects.filter(job_id=job.pk).exists(), what="the job to start")
    running.stop()  # returns once the job has finished and been recorded
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED


def test_jobs_still_running_at_the_deadline_are_released_uncounted() -> None:
    name = f"release-{uuid.uuid4().hex}"
    job = enqueue("tests.gated", {"gate": name}).job
    waiting = enqueue("tests.record", priority=-1).job
    running = RunningWorker(config(burst=False, grace_period=0.2, concurrency=1))
    try:
        wait_until(lambda: Execution.objects.filter(job_id=job.pk).exists(), what="the job")
        # The job runs until its gate opens: the worker stops without waiting for it.
        running.stop()
        job.refresh_from_db()
        assert (job.status, job.attempts) == (JobStatus.PENDING, 0)
        assert job.lease_token is None and job.lease_holder is None
        assert Job.objects.get(pk=waiting.pk).status == JobStatus.PENDING  # never claimed
        assert not Job.objects.filter(status=JobStatus.RUNNING).exists()
    finally:
        gate(name).set()


def test_a_notification_wakes_an_idle_worker_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = Worker(config(burst=False, poll_interval=120.0))
    idle = threading.Event()
    sleep = worker._sleep

    def spy(timeout: float | None) -> None:
        if timeout is None or timeout > 60:
            idle.set()  # waiting for its next poll, far off
        sleep(timeout)

    monkeypatch.setattr(worker, "_sleep", spy)
    running = RunningWorker(worker)
    try:
        wait_until(lambda: worker.listener is not None and worker.listener.connected.is_set())
        wait_until(idle.is_set, what="the worker to go idle")
        job = enqueue("tests.record").job
        wait_until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED, 60)
    finally:
        running.stop()
    job.refresh_from_db()
    # Long before the next poll (120 s), by the database's clock.
    assert job.started_at - job.created_at < timedelta(seconds=60)


SESSION_SETTINGS = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")


def session_settings() -> list[str]:
    with queue_connection.cursor() as cursor:
        values = []
        for name in SESSION_SETTINGS:
            cursor.execute(f"SHOW {name}")
            values.append(cursor.fetchone()[0])
        return values


def test_a_burst_worker_reaps_a_dead_worker_s_jobs_before_it_exits() -> None:
    """Its first reap is at once, and the burst claims again after it: a lease of 60 s
    (a reap interval of 30 s) would otherwise let it exit long before its first reap."""
    last, again = abandoned("w-dead", 1, 3)
    # A retry due in a minute: the burst does not wait for it.
    with override_settings(DURABLE_JOBS={"BACKOFF_BASE_SECONDS": 60.0}):
        worker = burst(lease_seconds=60.0)
    last.refresh_from_db()
    again.refresh_from_db()
    assert (last.status, last.attempts) == (JobStatus.DEAD, 1)
    assert "Abandoned: the lease of worker w-dead expired" in last.last_error
    assert (again.status, again.attempts, again.lease_holder) == (JobStatus.PENDING, 1, None)
    assert worker.maintenance.reaped == 2


def test_a_burst_worker_leaves_the_calling_thread_s_connection_usable() -> None:
    # A burst worker run in the caller's thread shares that thread's Django
    # connection (it may close it: Django reconnects). It must hand it back
    # clean: autocommit, no transaction left open or broken, no session
    # setting of its own, and working.
    before = session_settings()
    job = enqueue("tests.record").job
    drain()
    assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED  # the worker did run
    assert queue_connection.get_autocommit()
    assert not queue_connection.in_atomic_block and not queue_connection.needs_rollback
    with queue_connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    assert session_settings() == before


def test_an_impossible_retry_delay_falls_back_to_the_backoff() -> None:
    job = enqueue("tests.retry_forever", max_attempts=2).job
    drain_until_settled()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.DEAD, 2)


def test_the_signal_handler_cannot_deadlock_on_the_workers_lock() -> None:
    import os
    import signal

    worker = Worker(config(install_signal_handlers=True))
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        worker._install_signal_handlers()
        with worker._lock, worker.completer._cond:
            # The signal arrives while the main thread holds both locks.
            os.kill(os.getpid(), signal.SIGTERM)
            # The handler runs on this thread, between two bytecodes of the wait.
            wait_until(lambda: worker._stopping, what="the signal handler")
        assert worker._stopping
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_call_command_options_are_validated_like_the_command_line() -> None:
    from django.core.management import CommandError, call_command

    for options in ({"concurrency": 0}, {"grace_period": -5}, {"queues": "a:0"},
                    {"worker_id": ""}, {"poll_interval": "nan"}):  # fmt: skip
        with pytest.raises(CommandError):
            call_command("runjobworker", **options)
    enqueue("tests.record", queue="emails")
    call_command("runjobworker", burst=True, queues="emails,default", concurrency="2")
    assert Job.objects.get().status == JobStatus.COMPLETED


@pytest.fixture
def broken_admin_check() -> Iterator[None]:
    """An admin check that fails: what a worker must not run."""
    from django.core import checks

    def broken_admin(**kwargs: object) -> list[checks.CheckMessage]:
        return [checks.Error("an admin misconfigured on purpose", id="tests.E001")]

    checks.register(broken_admin, checks.Tags.admin)
    yield
    checks.registry.registry.registered_checks.discard(broken_admin)


@pytest.mark.usefixtures("broken_admin_check")
def test_the_worker_runs_the_system_checks_but_not_the_url_or_admin_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It never serves a URL or an admin page: their checks would cost start-up and memory."""
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError
    from django.db import connections

    # Django 6.1's model checks ask every alias whether it supports JSONField;
    # tests/settings.py's SQLite alias (for durable_jobs.E001) has no test
    # database, so answer for it.
    monkeypatch.setitem(vars(connections["sqlite"].features), "supports_json_field", True)

    enqueue("tests.record")
    with pytest.raises(SystemCheckError, match=r"tests\.E001"):
        call_command("check", tags=["admin"])
    with override_settings(ROOT_URLCONF="tests.testapp.broken_urls"):
        with pytest.raises(ImportError, match="broken on purpose"):
            call_command("check")  # Django's URL check imports the URLconf
        call_command("runjobworker", burst=True, skip_checks=False)
    assert Job.objects.get().status == JobStatus.COMPLETED
    # The other checks still run: an unknown setting stops the worker.
    with (
        override_settings(DURABLE_JOBS={"NO_SUCH_SETTING": 1}),
        pytest.raises(SystemCheckError, match=r"durable_jobs\.E002"),
    ):
        call_command("runjobworker", burst=True, skip_checks=False)


def test_a_lease_that_missed_its_extension_only_because_the_job_finished_is_not_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The heartbeat can look between the completer's commit and its callback.

    A held job whose handler has returned is the completer's: no "Lease lost"
    warning for it, and it stays held until the completer's callback. A job
    whose handler still runs has lost its lease: abandoned, one warning.
    """
    worker = Worker(config())
    finished, running = claimed_job(), claimed_job()
    finished_id, running_id = finished.id, running.id
    for job in (finished, running):
        worker.attempts.claimed(job, None)
        worker.attempts.begin(job.lease_token, None)
    worker.attempts.returned(finished.lease_token)  # its outcome is with the completer
    caplog.set_level("WARNING", logger="django_durable_jobs.worker")
    worker._leases_lost({finished_id, running_id})
    assert worker.attempts.leases_to_extend() == {finished_id: finished.lease_token}
    assert worker.attempts.get(running.lease_token).state is State.LEASE_LOST
    assert worker.attempts.get(running.lease_token).cancel.is_set()
    assert [r.getMessage() for r in caplog.records] == [
        f"Lease lost for job {running_id}: it was reaped; this worker's outcome will not be "
        "recorded"
    ]


def test_a_worker_claims_nothing_while_its_outcomes_cannot_be_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the connection-exhaustion chaos scenario: a worker whose claim
    queue_connection survived kept claiming (up to the backlog cap, 1,000 jobs) while its
    completer could not write a single outcome, so a kill then ran them all again."""
    real = gateway.record_outcomes
    down = threading.Event()
    down.set()
    refused = threading.Event()

    def record_outcomes(*args: Any, **kwargs: Any) -> set[uuid.UUID]:
        if down.is_set():
            refused.set()
            raise OperationalError("server closed the connection unexpectedly (test)")
        return real(*args, **kwargs)

    monkeypatch.setattr(gateway, "record_outcomes", record_outcomes)
    monkeypatch.setattr("django_durable_jobs.worker.completer.RETRY_CAP_SECONDS", 0.2)
    enqueue("tests.record")
    running = RunningWorker(worker_config(burst=False))
    try:
        wait_until(refused.is_set, what="a refused outcome write")
        # The refusal is raised after `refused` is set: wait for the completer to
        # know it fails (a slow machine's worker claimed in between).
        wait_until(lambda: running.worker.completer.failing, what="the completer failing")
        enqueue_many([{"type": "tests.record"}] * 20)
        time.sleep(1.0)  # twenty polls
        assert Job.objects.filter(status=JobStatus.PENDING).count() == 20
        down.clear()
        wait_until(
            lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == 21,
            what="every job completed once the outcomes could be written",
        )
    finally:
        running.stop()


def test_a_row_the_database_refuses_after_an_outage_does_not_leave_claims_paused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The claim pause lasts while outcomes cannot be written for connection trouble;
    a refusal of the database itself (it answered) ends it, or a worker whose last
    outcome was refused would claim nothing ever again."""
    from django.db import DataError

    from django_durable_jobs.worker import completer as completer_module

    answers: list[Exception] = [
        OperationalError("connection lost (test)"),
        DataError("(test)"),
    ]

    def record_outcomes(*args: Any, **kwargs: Any) -> set[uuid.UUID]:
        raise answers.pop(0)

    monkeypatch.setattr(gateway, "record_outcomes", record_outcomes)
    monkeypatch.setattr(completer_module, "RETRY_BASE_SECONDS", 0.01)
    writer = completer_module.Completer(gateway.database_alias(), 10, lambda batch, written: None)
    outcome = Outcome(uuid.uuid4(), uuid.uuid4(), Transition.COMPLETE)
    assert writer._write([outcome]) == set()
    assert answers == [] and not writer.failing


def test_jobs_a_failed_claim_leased_unseen_are_given_back_uncounted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A claim can commit while its answer dies with the connection (an independent
    chaos harness saw it under backend kills and a restart): the worker never held
    those jobs, which waited out the lease and showed two attempts. Now the worker
    gives them back before its next claim, and each runs once, as its first attempt."""
    from django_durable_jobs.worker.claiming import ClaimPlanner

    real = ClaimPlanner.claim
    lost: list[int] = []

    def claim(self: ClaimPlanner, asks: Any) -> list[ClaimedJob]:
        jobs = real(self, asks)
        if jobs and not lost:  # committed, and the answer never arrives
            lost.append(len(jobs))
            raise OperationalError("server closed the connection unexpectedly (test)")
        return jobs

    monkeypatch.setattr(ClaimPlanner, "claim", claim)
    enqueue_many([{"type": "tests.record"}] * 3)
    # A lease far longer than the wait below: only the give-back can end these jobs.
    running = RunningWorker(worker_config(burst=False, lease_seconds=600))
    try:
        wait_until(
            lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == 3,
            what="the three jobs completed without waiting out their lease",
        )
    finally:
        running.stop()
    assert lost == [3]
    assert sorted(Job.objects.values_list("attempts", flat=True)) == [1, 1, 1]
    assert Execution.objects.count() == 3
