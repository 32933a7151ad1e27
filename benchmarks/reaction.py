"""How soon a running worker reacts to a cancel, a pause and a resume, on the local PostgreSQL.

Run on demand, never in the test suite (machines here are shared and noisy):

    .venv/bin/python benchmarks/reaction.py [--database-url URL] [-n 30]
        [--skip-cancel] [--skip-pause]

The tests assert only that these events happen, and in which order (the
slow path each one rules out, a poll or a deadline, is an hour away there);
the latencies the docs promise are measured here, with the machine's load
average, and written down in docs/benchmarks.md.

One real ``runjobworker`` process at default settings (``--poll-interval``
2 s, the maintenance thread's cancel poll 1 s), not in burst mode, serves:

- *cancel*: ``-n`` times, one ``example.cancellable`` job (it calls
  ``ctx.check()`` every 50 ms); once it runs, ``operations.cancel()``; the
  figure is ``completed_at - cancel_requested_at``, both the database's
  ``now()`` (the request's commit, and the statement that records the
  cancelled outcome): the NOTIFY to the worker, the handler's next check,
  the outcome's write. The docs say "within about a second".
- *pause, then resume*: ``-n`` times, the queue ``reaction`` is paused
  (``pause_queue``) and a job enqueued on it at once; 0.5 s later the job
  must still be pending (counted: a job that ran would be a pause the
  worker had not heard of yet); then ``resume_queue``, and the figure is
  the job's ``started_at`` minus the resume's return (one clock, this
  machine's): the resume's NOTIFY, the claim.

The database is a dedicated one, ``durable_jobs_bench`` by default, created
when missing and migrated; its job table is truncated first.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from worker import (  # benchmarks/ is not a package: its directory is on sys.path
    DEFAULT_URL,
    ensure_database,
    loadavg,
    reset,
    setup_django,
    wait_for_listener,
    worker_command,
    worker_env,
)

CANCELLABLE = "example.cancellable"
QUEUE = "reaction"
#: How long a job stays on a paused queue before the check that it was held.
HELD_FOR_SECONDS = 0.5


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def summary(label: str, values: list[float]) -> None:
    print(f"\n== {label}, {len(values)} rounds ({loadavg()})")
    print(
        f"p50 {percentile(values, 0.5):.1f} ms  p90 {percentile(values, 0.9):.1f} ms  "
        f"max {max(values):.1f} ms  mean {statistics.mean(values):.1f} ms"
    )


def until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def cancel(n: int) -> None:
    from django_durable_jobs import enqueue, operations
    from django_durable_jobs.models import Job, JobStatus

    def status(pk: object) -> str:
        return Job.objects.values_list("status", flat=True).get(pk=pk)

    delays = []
    for _ in range(n):
        job = enqueue(CANCELLABLE, {"seconds": 60}).job
        until(lambda job=job: status(job.pk) == JobStatus.RUNNING, 30, "the job to run")
        time.sleep(0.1)  # its handler is in its loop, checking every 50 ms
        operations.cancel(job.pk)
        until(lambda job=job: status(job.pk) == JobStatus.CANCELLED, 30, "the cancel")
        job.refresh_from_db()
        assert job.completed_at is not None
        assert job.cancel_requested_at is not None
        delays.append((job.completed_at - job.cancel_requested_at).total_seconds() * 1000)
    summary("cancel: request (commit) to the cancelled outcome (NOTIFY path)", delays)


def pause(n: int) -> None:
    from django_durable_jobs import enqueue
    from django_durable_jobs.models import Job, JobStatus
    from django_durable_jobs.pausing import pause_queue, resume_queue

    delays = []
    ran_while_paused = 0
    for _ in range(n):
        pause_queue(QUEUE)
        job = enqueue("example.noop", queue=QUEUE).job
        time.sleep(HELD_FOR_SECONDS)
        job.refresh_from_db()
        if job.status != JobStatus.PENDING:
            ran_while_paused += 1
        resume_queue(QUEUE)
        resumed = datetime.now(timezone.utc)
        until(
            lambda job=job: Job.objects.filter(pk=job.pk, started_at__isnull=False).exists(),
            30,
            "the job after the resume",
        )
        job.refresh_from_db()
        assert job.started_at is not None
        delays.append((job.started_at - resumed).total_seconds() * 1000)
    summary("resume: resume_queue() returned to the held job's start", delays)
    print(f"jobs enqueued right after a pause that ran while paused: {ran_while_paused} of {n}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("-n", type=int, default=30, help="rounds of each (default: %(default)r)")
    parser.add_argument("--skip-cancel", action="store_true")
    parser.add_argument("--skip-pause", action="store_true")
    args = parser.parse_args()

    ensure_database(args.database_url)
    setup_django(args.database_url)
    reset()
    from django_durable_jobs.pausing import resume_queue

    resume_queue(QUEUE)  # a pause left by an interrupted run
    proc = subprocess.Popen(
        worker_command(4, burst=False), env=worker_env(args.database_url), stdin=subprocess.DEVNULL
    )
    try:
        wait_for_listener()
        if not args.skip_cancel:
            cancel(args.n)
        if not args.skip_pause:
            pause(args.n)
    finally:
        proc.terminate()
        proc.wait(60)
        resume_queue(QUEUE)


if __name__ == "__main__":
    main()
