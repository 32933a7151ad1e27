"""Durable steps (issue 24) with real ``runjobworker`` processes and real signals.

Handlers: ``tests/testapp/jobs.py`` (``tests.three_steps``, ``tests.step_sleeper``,
``tests.step_waiter``, ``tests.step_parent``); each step's function writes a
``StepRun`` row, so the rows count the real runs of every step of every job
(a step replayed from its record writes none). Assertions are on states,
counts and order, never on durations: waits are for the event needed, with
generous timeouts.

Sizes: the issue's (200 killed three-step jobs, 2,000 sleepers, 500 parents) with
``E2E=long ./dev test tests/e2e/test_durable_steps.py``; CI's default run uses a
quarter of them (the same code paths, the same assertions), as the chaos suite's
short mode does: at full size these tests took eight of CI's ten minutes.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter

import pytest
from django.db import connection, connections, transaction
from django.db.models import Count, Q

from django_durable_jobs import db, emit_event, enqueue, enqueue_many, operations
from django_durable_jobs.models import Job, JobStatus, StepStatus
from django_durable_jobs.worker.pool import CLAIM_AHEAD_LIMIT
from tests.testapp.models import StepRun

from .helpers import Workers, size, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

#: A worker of one slot: the job it runs is the only one it has started.
ONE_SLOT = ("--concurrency", "1", "--lease-seconds", "2", "--poll-interval", "0.2")


def _runs(step: str) -> Counter[uuid.UUID]:
    return Counter(StepRun.objects.filter(step=step).values_list("job_id", flat=True))


def _done(ids: list[uuid.UUID]) -> int:
    return Job.objects.filter(pk__in=ids, status=JobStatus.COMPLETED).count()


def _suspended() -> Q:
    return Q(status__in=[JobStatus.PENDING, JobStatus.WAITING], waiting_for__isnull=False)


def test_sigkills_after_step_two_rerun_only_step_three(workers: Workers) -> None:
    """200 jobs (CI: 50) over 3 workers, SIGKILLed while a job sits between ``two`` and ``three``.

    One slot a worker: the job in its pause (``two``'s record committed,
    ``three`` not run) is the only one its worker has started, so a kill then
    lands after step 2 and before step 3, never inside step 1 or 2 (jobs
    claimed ahead have not started; the pause is long beside the time from
    the look to the kill). Killed workers are replaced.
    """
    total = size(50, 200)
    ids = [
        r.job.pk
        for r in enqueue_many(
            [{"type": "tests.three_steps", "payload": {"i": i, "pause": 0.8}} for i in range(total)]
        )
    ]
    procs = {}
    for _ in range(3):
        proc = workers.start(*ONE_SLOT)
        procs[proc.pid] = proc
    kills = 0
    killed_in_pause: set[uuid.UUID] = set()
    deadline = time.monotonic() + 900
    while _done(ids) < total:
        assert time.monotonic() < deadline, (Counter(Job.objects.values_list("status", flat=True)),
                                             workers.output()[-5000:])  # fmt: skip
        # Jobs in the pause: running, step two's record committed (its row
        # alone is not enough: it commits before the record), step three not run.
        # (StepRun's ids read first: with the queue on its own database, a
        # subquery would read that database's empty copy of the table.)
        ran_three = list(StepRun.objects.filter(step="three").values_list("job_id", flat=True))
        paused = (
            Job.objects.filter(pk__in=ids, status=JobStatus.RUNNING)
            .filter(steps__name="two", steps__status=StepStatus.COMPLETED)
            .exclude(pk__in=ran_three)
            .values_list("pk", "lease_holder")
        )
        victims = {}
        for pk, holder in paused:
            pid = int(holder.split(":")[-2]) if holder else 0
            if pid in procs and procs[pid].poll() is None:
                victims[pid] = pk
        if victims and kills < size(10, 60):
            pid, pk = next(iter(victims.items()))
            procs[pid].send_signal(signal.SIGKILL)
            assert procs.pop(pid).wait(30) == -signal.SIGKILL
            kills += 1
            killed_in_pause.add(pk)
            proc = workers.start(*ONE_SLOT)
            procs[proc.pid] = proc
        else:
            time.sleep(0.05)
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        assert proc.wait(60) == 0, workers.output()[-5000:]

    print(f"kills={kills} killed_in_pause={len(killed_in_pause)}")  # noqa: T201  (shown with -s)
    assert kills >= size(5, 20), kills
    one, two, three = _runs("one"), _runs("two"), _runs("three")
    assert set(one) == set(two) == set(three) == set(ids)
    assert set(one.values()) == {1}, [pk for pk, n in one.items() if n != 1]
    assert set(two.values()) == {1}, [pk for pk, n in two.items() if n != 1]
    assert min(three.values()) >= 1
    # Each job killed in its pause ran its step 3 once, after the kill (its
    # first attempt never got there), on a later attempt that replayed 1 and 2.
    for job in Job.objects.filter(pk__in=killed_in_pause):
        assert job.status == JobStatus.COMPLETED
        assert three[job.pk] == 1
        assert job.result["one"] == job.result["two"] == 1
        assert job.result["three"] >= 2
        assert job.errors and job.errors[0]["exception"] == "django_durable_jobs.LeaseExpired"


def test_2000_sleepers_on_two_slots_hold_neither_slots_nor_connections(workers: Workers) -> None:
    total = size(500, 2_000)
    # The worker's sessions on each database it uses: the queue's, and
    # "default" too with the queue on its own (not this process's).
    databases, own_pids = [], []
    for alias in sorted({"default", db.database_alias()}):
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT current_database(), pg_backend_pid()")
            database, own_pid = cursor.fetchone()
            databases.append(database)
            own_pids.append(own_pid)

    def backends() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = ANY(%s) AND NOT pid = ANY(%s)",
                [databases, own_pids],
            )
            return int(cursor.fetchone()[0])

    proc = workers.start("--concurrency", "2", "--poll-interval", "0.5")
    warm = enqueue("tests.record").job
    wait_for(lambda: Job.objects.get(pk=warm.pk).status == JobStatus.COMPLETED, 60, "warm-up")
    usual = backends()
    ids = [
        r.job.pk
        for r in enqueue_many(
            [{"type": "tests.step_sleeper", "payload": {"seconds": 2}} for _ in range(total)]
        )
    ]
    most_suspended = most_running = most_backends = samples = 0
    deadline = time.monotonic() + 900
    while (done := _done(ids)) < total:
        assert time.monotonic() < deadline, (done, workers.output()[-5000:])
        counts = Job.objects.filter(pk__in=ids).aggregate(
            running=Count("pk", filter=Q(status=JobStatus.RUNNING)),
            suspended=Count("pk", filter=_suspended()),
        )
        most_running = max(most_running, counts["running"])
        most_suspended = max(most_suspended, counts["suspended"])
        most_backends = max(most_backends, backends())
        samples += 1
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, workers.output()[-5000:]

    # What ran at once: the handlers the worker process was running as each
    # step ran (jobs in the table's 'running' include the few it claimed ahead).
    most_active = max(StepRun.objects.values_list("active", flat=True))
    shown = (
        f"samples={samples} most_suspended={most_suspended} most_active={most_active} "
        f"most_claimed={most_running} backends usual={usual} most={most_backends}"
    )
    print(shown)  # noqa: T201  (shown with -s)
    assert most_suspended >= total // 10, most_suspended
    assert most_active <= 2, most_active
    # Claimed, started or not: the slots and the claim-ahead buffer (its bound, since a
    # sleeper's run is short: 24 were seen), never the sleepers themselves.
    assert most_running <= 2 + CLAIM_AHEAD_LIMIT, most_running
    # No connection per sleeper: the worker's usual few, whatever sleeps (each of
    # the two slots' threads may open one more, on each database it writes to).
    assert most_backends <= usual + 2 * len(databases), (usual, most_backends)
    rows = Job.objects.filter(pk__in=ids)
    assert (
        rows.filter(status=JobStatus.COMPLETED, attempts=1, waiting_for__isnull=True).count()
        == total
    )
    assert set(_runs("before").values()) == {1} and len(_runs("before")) == total
    assert set(_runs("after").values()) == {1} and len(_runs("after")) == total


def test_events_wake_waiters_across_processes(workers: Workers) -> None:
    early = f"early:{uuid.uuid4().hex}"
    late = f"late:{uuid.uuid4().hex}"
    never = f"never:{uuid.uuid4().hex}"
    rolled_back = f"rolled-back:{uuid.uuid4().hex}"
    emit_event(early, {"n": 1})  # before anyone waits: kept and found
    first = enqueue("tests.step_waiter", {"key": early}).job
    second = enqueue("tests.step_waiter", {"key": late}).job
    third = enqueue("tests.step_waiter", {"key": never, "timeout": 1}).job
    fourth = enqueue("tests.step_waiter", {"key": rolled_back}).job
    proc = workers.start("--concurrency", "2", "--poll-interval", "0.2")

    def state(job: Job) -> tuple[str, object]:
        row = Job.objects.values_list("status", "waiting_for").get(pk=job.pk)
        return row[0], row[1]

    wait_for(lambda: state(first)[0] == JobStatus.COMPLETED, 60, "the early event's waiter")
    wait_for(lambda: state(second) == (JobStatus.WAITING, {"event": late}), 60, "a waiter")
    wait_for(lambda: state(fourth) == (JobStatus.WAITING, {"event": rolled_back}), 60, "a waiter")

    # Emitted in a transaction that rolls back: nothing wakes.
    with pytest.raises(RuntimeError), transaction.atomic(using=db.database_alias()):
        emit_event(rolled_back, {"n": 4})
        raise RuntimeError("roll back")
    # Emitted now, from this process: the waiter in the worker process wakes.
    assert emit_event(late, {"n": 2}).created
    assert not emit_event(late, {"n": 2}).created  # the same payload again: the stored event
    wait_for(lambda: state(second)[0] == JobStatus.COMPLETED, 60, "the late event's waiter")
    wait_for(lambda: state(third)[0] == JobStatus.COMPLETED, 60, "the timed-out waiter")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, workers.output()[-5000:]
    for job in (first, second, third, fourth):
        job.refresh_from_db()
    assert first.result == {"event": {"n": 1}}
    assert second.result == {"event": {"n": 2}}
    assert third.result == {"timed_out": True}
    assert (fourth.status, fourth.waiting_for) == (JobStatus.WAITING, {"event": rolled_back})
    # Each step before the wait ran once; a suspension is not an attempt.
    assert _runs("before") == {first.pk: 1, second.pk: 1, third.pk: 1, fourth.pk: 1}
    assert [j.attempts for j in (first, second, third)] == [1, 1, 1]
    assert _runs("after") == {first.pk: 1, second.pk: 1}


def test_jobs_emit_command_wakes_a_waiter(workers: Workers, manage) -> None:  # type: ignore[no-untyped-def]
    key = f"cli:{uuid.uuid4().hex}"
    job = enqueue("tests.step_waiter", {"key": key}).job
    proc = workers.start("--poll-interval", "0.2")
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.WAITING, 60, "the waiter")
    emitted = manage("jobs", "emit", key, "--payload", '{"via": "cli"}')
    assert emitted.returncode == 0, emitted.stdout + emitted.stderr
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED, 60, "the wake-up")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    job.refresh_from_db()
    assert job.result == {"event": {"via": "cli"}}


def test_500_parents_on_two_slots_finish_and_a_dead_child_fails_its_parent(
    workers: Workers,
) -> None:
    total = size(125, 500)
    parents = [
        r.job.pk
        for r in enqueue_many(
            [
                {
                    "type": "tests.step_parent",
                    "payload": {"child": "tests.record", "payload": {"i": i}},
                }
                for i in range(total)
            ]
        )
    ]
    doomed = enqueue("tests.step_parent", {"child": "tests.discard"}).job
    proc = workers.start("--concurrency", "2", "--poll-interval", "0.2")
    deadline = time.monotonic() + 900
    while _done(parents) < total or Job.objects.get(pk=doomed.pk).status != JobStatus.COMPLETED:
        assert time.monotonic() < deadline, (
            Counter(Job.objects.values_list("status", flat=True)),
            workers.output()[-5000:],
        )
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, workers.output()[-5000:]
    rows = Job.objects.filter(pk__in=parents)
    assert all(r == {"child_result": {"attempt": 1}} for r in rows.values_list("result", flat=True))
    assert rows.filter(attempts=1).count() == total
    children = Job.objects.filter(type="tests.record")
    assert children.count() == total
    assert children.filter(status=JobStatus.COMPLETED).count() == total
    doomed.refresh_from_db()
    assert "child_failed" in doomed.result, doomed.result
    assert Job.objects.get(type="tests.discard").status == JobStatus.DEAD


def test_cancel_while_sleeping_and_while_waiting_is_at_once_and_final(workers: Workers) -> None:
    sleeper = enqueue("tests.step_sleeper", {"seconds": 2}).job
    control = enqueue("tests.step_sleeper", {"seconds": 2}).job
    waiter = enqueue("tests.step_waiter", {"key": f"cancel:{uuid.uuid4().hex}"}).job
    timed = enqueue("tests.step_waiter", {"key": f"cancel:{uuid.uuid4().hex}", "timeout": 2}).job
    proc = workers.start("--concurrency", "4", "--poll-interval", "0.2")
    wait_for(
        lambda: Job.objects.filter(_suspended(), pk__in=[sleeper.pk, control.pk, waiter.pk,
                                                         timed.pk]).count() == 4,
        60,
        "all four suspended",
    )  # fmt: skip
    for job in (sleeper, waiter, timed):
        operations.cancel(job.pk)
        # At once: no worker had to see it.
        assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
    # The uncancelled twin wakes and completes: by then the sleeper and the
    # timed waiter were due too, and did not run again.
    wait_for(lambda: Job.objects.get(pk=control.pk).status == JobStatus.COMPLETED, 60, "control")
    emit_event(waiter.payload["key"], {"late": True})
    done = enqueue("tests.record").job  # after the emit: runs once the emit had its chance
    wait_for(lambda: Job.objects.get(pk=done.pk).status == JobStatus.COMPLETED, 60, "sentinel")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, workers.output()[-5000:]
    for job in (sleeper, waiter, timed):
        assert Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED
    assert _runs("before") == {sleeper.pk: 1, control.pk: 1, waiter.pk: 1, timed.pk: 1}
    assert _runs("after") == {control.pk: 1}


def test_sigterm_while_jobs_sleep_leaves_them_to_the_next_worker(workers: Workers) -> None:
    ids = [
        r.job.pk
        for r in enqueue_many(
            [{"type": "tests.step_sleeper", "payload": {"seconds": 3}} for _ in range(20)]
        )
    ]
    first = workers.start("--concurrency", "4", "--poll-interval", "0.2")
    wait_for(lambda: len(_runs("before")) == 20, 60, "every job to reach its sleep")
    wait_for(
        lambda: Job.objects.filter(_suspended(), pk__in=ids).count() == 20, 60, "all suspended"
    )
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 0, workers.output()[-5000:]
    rows = Job.objects.filter(pk__in=ids)
    # Untouched by the stop: still sleeping, no lease, no attempt used.
    assert rows.filter(_suspended(), status=JobStatus.PENDING, lease_token__isnull=True,
                       attempts=0).count() == 20  # fmt: skip
    assert not _runs("after")
    second = workers.start("--concurrency", "4", "--poll-interval", "0.2")
    wait_for(lambda: _done(ids) == 20, 120, "the new worker to finish them")
    second.send_signal(signal.SIGTERM)
    assert second.wait(60) == 0, workers.output()[-5000:]
    assert rows.filter(attempts=1, waiting_for__isnull=True).count() == 20
    assert set(_runs("before").values()) == {1} and set(_runs("after").values()) == {1}
    assert len(_runs("after")) == 20


def test_the_example_projects_step_handlers_end_to_end(workers: Workers, manage) -> None:  # type: ignore[no-untyped-def]
    """example.checkout (one Receipt, a SIGKILL after ``record``); nap, wait_for_signup, parent_of.

    The other three are enqueued after the kill, so that it finds only checkout in flight.
    """
    from example.models import Receipt

    signup = uuid.uuid4().hex
    checkout = enqueue("example.checkout", {"order": "o-1", "pause": 1.5}).job
    victim = workers.start("--concurrency", "4", "--lease-seconds", "2", "--poll-interval", "0.2")
    # Killed while checkout sleeps after its atomic record step (its Receipt committed).
    wait_for(
        lambda: checkout.steps.filter(name="record", status=StepStatus.COMPLETED).exists(),
        60,
        "checkout's record step",
    )
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(30) == -signal.SIGKILL
    nap = enqueue("example.nap", {"seconds": 1}).job
    waiter = enqueue("example.wait_for_signup", {"id": signup}).job
    parent = enqueue("example.parent_of", {"child": "example.echo", "payload": {"x": 1}}).job
    rescuer = workers.start("--concurrency", "4", "--lease-seconds", "2", "--poll-interval", "0.2")
    wait_for(lambda: Job.objects.get(pk=waiter.pk).status == JobStatus.WAITING, 60, "the waiter")
    emitted = manage("jobs", "emit", f"signup:{signup}", "--payload", '{"email": "a@b.c"}')
    assert emitted.returncode == 0, emitted.stdout + emitted.stderr
    ids = [checkout.pk, nap.pk, waiter.pk, parent.pk]
    wait_for(lambda: _done(ids) == 4, 120, "the four example jobs")
    rescuer.send_signal(signal.SIGTERM)
    assert rescuer.wait(60) == 0, workers.output()[-5000:]
    for job in (checkout, nap, waiter, parent):
        job.refresh_from_db()
    assert Receipt.objects.filter(order="o-1").count() == 1
    assert checkout.result == {"order": "o-1", "receipt": Receipt.objects.get(order="o-1").pk}
    assert checkout.attempts == 2  # the kill cost one attempt; the record replayed
    assert nap.result == {"woke": True} and nap.attempts == 1
    assert waiter.result == {"event": {"email": "a@b.c"}} and waiter.attempts == 1
    assert parent.result == {"child_result": {"x": 1}} and parent.attempts == 1
