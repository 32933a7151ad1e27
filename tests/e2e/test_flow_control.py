"""Flow control with real ``runjobworker`` processes: key and queue limits hold over them all.

The integration tests run workers on threads of one process; here each
worker is a process of its own, as in production, and one is SIGKILLed.
Every check reads the rows' own ``started_at``/``completed_at`` (the
database's clock): a job counts as running from its claim to its outcome's
commit, which is what the limits count too. The queues' limits are in
``tests/e2e/settings_flow_control.py``.
"""

from __future__ import annotations

import signal
import subprocess
from datetime import datetime, timedelta

import pytest

from django_durable_jobs import enqueue, enqueue_many
from django_durable_jobs.models import Job, JobStatus, WorkerProcess
from tests.factories import most_running_at_once, most_starts_in_a_window
from tests.testapp.models import Execution

from .helpers import Workers, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LEASE_EXPIRED_PATH = "django_durable_jobs.LeaseExpired"
#: How long past an expired lease a live worker may take to claim the freed slot:
#: a poll or two (0.2 s) and a reap (every lease / 2), on a busy shared machine.
FREED_WITHIN = timedelta(seconds=10)


@pytest.fixture
def worker_env() -> dict[str, str]:
    return {"DJANGO_SETTINGS_MODULE": "tests.e2e.settings_flow_control"}


def start_serving(
    workers: Workers, *ids: str, args: tuple[str, ...] = ()
) -> list[subprocess.Popen[bytes]]:
    """Start one worker per id and wait until each has written its first heartbeat.

    Jobs enqueued after this find every worker up, so they all take part.
    """
    procs = [
        workers.start("--worker-id", worker_id, "--poll-interval", "0.2", *args)
        for worker_id in ids
    ]

    def up() -> bool:
        exited = [proc.args for proc in procs if proc.poll() is not None]
        assert not exited, f"a worker exited: {exited}\n{workers.output()}"
        return WorkerProcess.objects.filter(id__in=ids).count() == len(ids)

    wait_for(up, 60, f"workers {', '.join(ids)} to start")
    return procs


def finished_jobs(workers: Workers, procs: list[subprocess.Popen[bytes]], count: int) -> list[Job]:
    """Wait until ``count`` jobs completed, stop ``procs`` gracefully; every job."""
    wait_for(
        lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() >= count,
        60,
        f"{count} jobs to complete",
    )
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0, workers.output()
    jobs = list(Job.objects.all())
    assert len(jobs) == count
    assert all(job.status == JobStatus.COMPLETED and job.attempts == 1 for job in jobs)
    return jobs


def test_one_key_never_runs_two_at_once_over_three_processes_and_keys_run_side_by_side(
    workers: Workers,
) -> None:
    procs = start_serving(workers, "key-0", "key-1", "key-2", args=("--concurrency", "4"))
    # tests.serial has concurrency_limit=1.
    enqueue_many(
        [
            {
                "type": "tests.serial",
                "payload": {"sleep": 0.2},
                "concurrency_key": f"customer:{i % 2}",
            }
            for i in range(16)
        ]
    )
    jobs = finished_jobs(workers, procs, 16)
    for key in ("customer:0", "customer:1"):
        assert most_running_at_once([job for job in jobs if job.concurrency_key == key]) == 1
    # The two keys ran at the same time, not one after the other.
    assert most_running_at_once(jobs) == 2


def test_a_queue_s_concurrency_holds_over_three_processes(workers: Workers) -> None:
    procs = start_serving(workers, "narrow-0", "narrow-1", "narrow-2", args=("--concurrency", "4"))
    enqueue_many([{"type": "tests.record", "queue": "narrow", "payload": {"sleep": 0.2}}] * 12)
    jobs = finished_jobs(workers, procs, 12)
    # QUEUES["narrow"] = {"concurrency": 2}: never more, and the limit is used.
    assert most_running_at_once(jobs) == 2


def test_a_queue_s_rate_limit_holds_over_two_processes(workers: Workers) -> None:
    procs = start_serving(workers, "rate-0", "rate-1", args=("--concurrency", "4"))
    enqueue_many([{"type": "tests.record", "queue": "throttled"}] * 25)
    jobs = finished_jobs(workers, procs, 25)
    starts = [job.started_at for job in jobs]
    # QUEUES["throttled"] = {"rate_limit": "5/s"}, a sliding window.
    assert most_starts_in_a_window(starts, timedelta(seconds=1)) <= 5
    # 25 starts at 5 a second: the first 5 at once, the last 4 s later at least.
    started = [start for start in starts if start is not None]
    assert max(started) - min(started) >= timedelta(seconds=3.9)


def lease_expiry(job: Job) -> datetime:
    """When ``job``'s lease expires, as the database has it now."""
    expires = Job.objects.values_list("lease_expires_at", flat=True).get(pk=job.pk)
    assert expires is not None, "the job holds no lease"
    return expires


def test_a_killed_worker_holds_a_key_and_a_queue_slot_only_until_its_lease_expires(
    workers: Workers,
) -> None:
    # The victim takes the only slot of key "k" (tests.serial, concurrency_limit=1)
    # and the only slot of queue "single" ({"concurrency": 1}), each for 60 s; a
    # retry of either returns at once.
    long = {"sleep": 60, "retry_sleep": 0}
    keyed = enqueue("tests.serial", long, concurrency_key="k", max_attempts=3).job
    queued = enqueue("tests.serial", long, queue="single", max_attempts=3).job
    (victim,) = start_serving(
        workers,
        "victim",
        args=("--concurrency", "2", "--queues", "default,single", "--lease-seconds", "3"),
    )
    wait_for(
        lambda: Execution.objects.filter(worker="victim").count() == 2,
        60,
        "the victim to start both long jobs",
    )
    # The rescuer also serves "probe", which the victim does not: the probe's
    # run says it is up and claiming before the victim dies.
    (rescuer,) = start_serving(
        workers,
        "rescuer",
        args=("--concurrency", "4", "--queues", "default,single,probe", "--lease-seconds", "3"),
    )
    probe = enqueue("tests.record", queue="probe").job
    wait_for(
        lambda: Job.objects.get(pk=probe.pk).status == JobStatus.COMPLETED, 60, "the probe to run"
    )
    next_keyed = enqueue("tests.serial", concurrency_key="k").job
    next_queued = enqueue("tests.serial", queue="single").job

    victim.send_signal(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    # The last heartbeat's expiry, as the database wrote it: nothing extends it now.
    expired = {keyed.pk: lease_expiry(keyed), queued.pk: lease_expiry(queued)}

    wait_for(
        lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == 5,
        60,
        "the next jobs and the recovered orphans to complete",
    )
    for orphan, after in ((keyed, next_keyed), (queued, next_queued)):
        orphan.refresh_from_db()
        after.refresh_from_db()
        assert after.started_at is not None, workers.output()
        # Not before the killed worker's lease expired, and soon after.
        assert expired[orphan.pk] <= after.started_at <= expired[orphan.pk] + FREED_WITHIN
        # The orphan was reaped and retried (max_attempts=3), by the rescuer.
        assert orphan.attempts == 2
        assert orphan.errors[-1]["exception"] == LEASE_EXPIRED_PATH
        assert Execution.objects.get(job_id=orphan.pk, attempt=2).worker == "rescuer"
        # The retry (the row's started_at now) and the next job took turns.
        assert most_running_at_once([orphan, after]) == 1
    rescuer.send_signal(signal.SIGTERM)
    assert rescuer.wait(30) == 0, workers.output()
