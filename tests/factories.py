"""Test factories and waits shared by the unit, integration and end-to-end tests.

One place for what the tests kept writing again: a worker config with test
defaults, a worker on a thread, a claimed job, direct claims and outcomes on
the gateway, and a wait that polls for a positive event.

Waits poll with a generous deadline: passing is fast, only a failure is
slow. A test never asserts on its own clock; a negative assert ("it did not
run") comes after a positive event that must follow what must not happen.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.contrib.auth.models import Permission, User
from django.db import connections
from django.test import Client
from django.utils import timezone
from django.utils.connection import ConnectionProxy

from django_durable_jobs import db, enqueue
from django_durable_jobs.backoff import RetryPolicy
from django_durable_jobs.db.records import ClaimedJob, Outcome, Transition
from django_durable_jobs.models import Job, JobStep, StepKind, StepStatus
from django_durable_jobs.worker import Worker, WorkerConfig
from django_durable_jobs.worker.maintenance import Maintenance

#: Generous: a shared CI machine can pause a test for seconds.
WAIT_SECONDS = 30.0
#: Retries due almost at once (the ``fast_backoff`` fixture of tests/integration/conftest.py).
FAST_BACKOFF = {"BACKOFF_BASE_SECONDS": 0.01, "BACKOFF_MAX_SECONDS": 0.05}
#: Queue names every door (enqueue, @job, the CLI, REST) takes, and ones each refuses.
GOOD_QUEUES = ["default", "emails", "reports.v2", "a-b_c", "_private", "0", "q" * 100]
# Without "," and ":": on the command line those separate queues and slots.
BAD_QUEUES = ["bad queue", "q" * 101, ".hidden", "-dash", "é", "a/b", "a;b", "a\x00b"]
HANDLER_THREAD_PREFIX = "durable-jobs-handler-"


class _QueueConnection(ConnectionProxy):
    """Django's ``connection``, of the queue's database: ``db.database_alias()`` at each use.

    The job tables' connection: "default", or the ``queue`` alias when the
    suite runs with the queue on its own database (tests/queue_database.py).
    A test that reads or writes the job tables in SQL, or counts their
    queries, uses this rather than ``django.db.connection``.
    """

    def __init__(self) -> None:
        self.__dict__["_connections"] = connections

    @property
    def _alias(self) -> str:  # type: ignore[override]
        return db.database_alias()


queue_connection: Any = _QueueConnection()


def wait_until(
    condition: Callable[[], object],
    timeout: float = WAIT_SECONDS,
    what: str | Callable[[], str] = "the condition",
    interval: float = 0.02,
) -> None:
    """Poll ``condition`` until it is true; ``AssertionError`` after ``timeout`` seconds.

    ``what`` names the awaited event in the error; a callable is asked at the failure.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s waiting for {said}")
        time.sleep(interval)


# --- workers -------------------------------------------------------------------------


def worker_config(**overrides: Any) -> WorkerConfig:
    """A ``WorkerConfig`` for tests: burst, fast polls, no signal handlers, a fresh id."""
    values: dict[str, Any] = {
        "burst": True,
        "concurrency": 4,
        "poll_interval": 0.05,
        "lease_seconds": 5.0,
        "grace_period": 5.0,
        "install_signal_handlers": False,
        "worker_id": f"test-{uuid.uuid4().hex[:6]}",
    }
    values.update(overrides)
    return WorkerConfig(**values)


def burst(**overrides: Any) -> Worker:
    """Run a burst worker in this thread until nothing runnable is left."""
    worker = Worker(worker_config(**overrides))
    assert worker.run() == 0
    return worker


class RunningWorker:
    """A worker serving on a thread of this process until ``stop()``."""

    def __init__(self, worker: Worker | WorkerConfig, daemon: bool = False) -> None:
        self.worker = worker if isinstance(worker, Worker) else Worker(worker)
        self.exit_code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=daemon)
        self.thread.start()

    def _run(self) -> None:
        self.exit_code = self.worker.run()

    def stop(self, timeout: float = WAIT_SECONDS) -> int | None:
        """Ask for a graceful stop and wait for it (outcomes are written by then)."""
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        return self.exit_code


def run_worker_until(
    condition: Callable[[], object],
    timeout: float = WAIT_SECONDS,
    what: str = "the condition",
    **overrides: Any,
) -> Worker:
    """Run a (non-burst) worker until ``condition`` holds, then stop it gracefully."""
    running = RunningWorker(worker_config(**{"burst": False, **overrides}))
    try:
        wait_until(condition, timeout, what)
    finally:
        running.stop()
    return running.worker


def handler_threads() -> set[threading.Thread]:
    """The handler threads alive in this process (every worker's)."""
    return {t for t in threading.enumerate() if t.name.startswith(HANDLER_THREAD_PREFIX)}


def join_handler_threads(
    timeout: float = WAIT_SECONDS, besides: Collection[threading.Thread] = ()
) -> None:
    """Wait for handler threads (but ``besides``) to return: whatever they do last is done.

    A handler thread that outlived its worker (a released or timed-out
    attempt) hands its late outcome over before it exits, so once it has
    exited nothing more can come of it.
    """
    for thread in handler_threads() - set(besides):
        thread.join(timeout)
        assert not thread.is_alive(), f"{thread.name} did not return"


# --- jobs ----------------------------------------------------------------------------


def claimed_job(
    timeout: float | None = None,
    type: str = "unit.t",
    attempt: int = 1,
    max_attempts: int = 3,
    payload: dict[str, Any] | None = None,
    queue: str = "default",
) -> ClaimedJob:
    """A ``ClaimedJob`` as the claim query returns it, without a database."""
    now = datetime.now(dt_timezone.utc)
    return ClaimedJob(
        uuid.uuid4(), type, queue, payload or {}, attempt, max_attempts, uuid.uuid4(),
        now, now, None, timeout,
    )  # fmt: skip


def add_step(job: Job, name: str, position: int = 0, **fields: Any) -> JobStep:
    """A step record as the runtime writes it: a completed step of attempt 1 started
    now, unless ``fields`` say otherwise. For the doors' tests (admin, REST, CLI,
    retry from step), which read records rather than make them."""
    values: dict[str, Any] = {
        "kind": StepKind.STEP,
        "status": StepStatus.COMPLETED,
        "attempt": 1,
        "started_at": timezone.now(),
        **fields,
    }
    return JobStep.objects.create(job=job, name=name, position=position, **values)


def add_steps(job: Job, *names: str, **fields: Any) -> list[JobStep]:
    """``add_step`` for each of ``names``, at positions 0, 1...; ``fields`` on every row."""
    return [add_step(job, name, position, **fields) for position, name in enumerate(names)]


def make_job(
    type: str = "tests.record",
    payload: dict[str, Any] | None = None,
    *,
    queue: str = "default",
    **fields: Any,
) -> Job:
    """Enqueue a job, then set ``fields`` on its row directly (a status, a timestamp...)."""
    job = enqueue(type, payload or {}, queue=queue).job
    if fields:
        Job.objects.filter(pk=job.pk).update(**fields)
        job.refresh_from_db()
    return job


# --- users: who may do what (authorization.py) -----------------------------------------

#: Every test user's password.
PASSWORD = "pw"

#: What an operator holds: reading and enqueueing jobs, each operator action's
#: permission (authorization.JOB_PERMISSIONS) and reading the audit trail.
OPERATOR_PERMISSIONS = (
    "view_job",
    "add_job",
    "requeue_job",
    "cancel_job",
    "run_job_now",
    "pause_queue",
    "emit_event",
    "view_auditentry",
)


def make_user(
    name: str | None = None,
    *codenames: str,
    staff: bool = True,
    superuser: bool = False,
    using: str = "default",
) -> User:
    """A user holding exactly ``codenames`` (durable_jobs' permissions), password ``PASSWORD``.

    ``staff`` only lets the user into the admin site: it grants nothing else.
    A name is made up when none is given.
    """
    name = name or f"user-{uuid.uuid4().hex[:8]}"
    manager = User.objects.db_manager(using)
    if superuser:
        user = manager.create_superuser(name, f"{name}@example.com", PASSWORD)
    else:
        user = manager.create_user(name, password=PASSWORD, is_staff=staff)
    if codenames:
        permissions = Permission.objects.using(using).filter(
            content_type__app_label="durable_jobs", codename__in=codenames
        )
        found = {permission.codename for permission in permissions}
        assert found == set(codenames), f"no such permissions: {set(codenames) - found}"
        user.user_permissions.add(*permissions)
    return user


def user_with(*codenames: str, **options: Any) -> User:
    """``make_user`` with a made-up name: a staff user holding exactly ``codenames``."""
    return make_user(None, *codenames, **options)


def make_operator(name: str | None = None, **options: Any) -> User:
    """A staff user holding every permission of ``OPERATOR_PERMISSIONS``."""
    return make_user(name, *OPERATOR_PERMISSIONS, **options)


def client_for(user: User, *, csrf: bool = False) -> Client:
    """A test client logged in as ``user`` (``csrf``: the CSRF check enforced, as in a browser)."""
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def basic_auth(user: User | None) -> dict[str, str]:
    """The ``HTTP_AUTHORIZATION`` header (HTTP Basic) for ``user``; nothing for None."""
    if user is None:
        return {}
    token = base64.b64encode(f"{user.get_username()}:{PASSWORD}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}


class Api:
    """A REST client: JSON bodies and ``user``'s HTTP Basic credentials."""

    def __init__(self, user: User | None = None) -> None:
        self.client = Client()
        self.auth = basic_auth(user)

    def get(self, path: str, **extra: Any) -> Any:
        return self.client.get(path, **self.auth, **extra)

    def post(self, path: str, body: Any = None, **extra: Any) -> Any:
        # No body: {}, as every state-changing call takes a JSON body (415 without one;
        # Django's test client sends no Content-Type with an empty body).
        data = body if isinstance(body, bytes) else json.dumps({} if body is None else body)
        extra.setdefault("content_type", "application/json")
        return self.client.post(path, data=data, **self.auth, **extra)


# --- the gateway, directly -----------------------------------------------------------


def claim_directly(worker_id: str = "w-direct", lease_seconds: float = 30.0) -> ClaimedJob:
    """Claim the next runnable job for ``worker_id`` as a worker would (one must be there)."""
    (job,) = db.claim(
        db.database_alias(), worker_id=worker_id, lease_seconds=lease_seconds, limit=1
    )
    return job


def finish(outcome: Outcome) -> set[uuid.UUID]:
    """Write one outcome as the completer would; the ids of the rows it changed."""
    return db.record_outcomes(db.database_alias(), [outcome], history_limit=20)


def complete_next(result: Any = None) -> uuid.UUID:
    """Claim the next runnable job and complete it, as a worker would; its id."""
    claimed = claim_directly()
    assert finish(Outcome(claimed.id, claimed.lease_token, Transition.COMPLETE, json.dumps(result)))
    return claimed.id


def dead_outcome(claimed: ClaimedJob) -> Outcome:
    """The claimed job's attempt ending it ``dead``, with its ``dependent_count`` as claimed."""
    return Outcome(
        claimed.id,
        claimed.lease_token,
        Transition.DEAD,
        last_error="boom",
        dependent_count=claimed.dependent_count,
    )


def expire(job_id: uuid.UUID) -> None:
    """Put a claimed job's lease in the past, as the database sees it: the reaper's to take."""
    started = Job.objects.values_list("started_at", flat=True).get(pk=job_id)
    Job.objects.filter(pk=job_id).update(lease_expires_at=started - timedelta(seconds=1))


def abandoned(worker_id: str, *max_attempts: int) -> list[Job]:
    """New jobs (one per ``max_attempts``) claimed by ``worker_id`` and their leases
    expired: what a dead worker leaves for the reaper."""
    jobs = [enqueue("tests.record", max_attempts=n).job for n in max_attempts]
    for _ in jobs:
        claim_directly(worker_id)
    for job in jobs:
        expire(job.pk)
    return jobs


def reaper(worker_id: str = "reaper") -> Maintenance:
    """A maintenance object holding no job, to call ``reap()`` (or ``prune()``) on directly."""
    return Maintenance(
        db.database_alias(),
        worker_id,
        30.0,
        dict,
        lambda lost: None,
        RetryPolicy(0.01, 0.05, 0.1),
        20,
    )


# --- flow control: what the rows say ran at once ---------------------------------------


def most_running_at_once(jobs: Collection[Job]) -> int:
    """The most of ``jobs`` running at one instant, from their ``started_at``/``completed_at``.

    A job counts as running from its claim to its outcome's commit, which is
    what the queue and key limits count too; every job must have finished.
    """
    unfinished = [job.pk for job in jobs if job.started_at is None or job.completed_at is None]
    assert not unfinished, f"jobs without a start or an end: {unfinished}"
    return most_at_once([(job.started_at, job.completed_at) for job in jobs])


def most_at_once(intervals: Collection[tuple[Any, Any]]) -> int:
    """The most of the ``(start, end)`` intervals that overlap at one instant.

    An interval that ends at the instant another starts does not overlap it.
    """
    events = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
        key=lambda e: (e[0], e[1]),  # an end before a start at the same instant
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def most_starts_in_a_window(starts: Collection[datetime | None], window: timedelta) -> int:
    """The most ``starts`` within any ``window`` (half open: ``[start, start + window)``)."""
    assert None not in starts, "a job that never started"
    ordered = sorted(s for s in starts if s is not None)
    return max(
        sum(1 for other in ordered[i:] if other - start < window) for i, start in enumerate(ordered)
    )
