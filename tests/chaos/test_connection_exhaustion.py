"""Scenario 5: the server's connection slots all held by something else; the workers wait.

The cluster runs with ``max_connections = 40`` for this scenario (three of
them reserved for superusers: the test's own connections). Two workers
drain the flow; at a fifth of it:

1. both are frozen (SIGSTOP) for a moment, so that what follows is not a race;
2. a "hog" (another client, the workers' role) opens connections until the
   server refuses one;
3. every backend of the workers is terminated, and the hog takes the slots
   they free: the server now has none left for the workers' role;
4. the workers are thawed (SIGCONT) into a full server, and a third worker
   starts into it.

For 8 s (30 s in the long mode) nothing can progress: no job finishes, and
the REST API (``runserver``) answers an enqueue with a JSON 503
(``database_unavailable``, ``Retry-After``). Then the hog lets go; every
worker, the new one too, must have stayed up and reconnect by itself, every
job completes, and the client's retry of its enqueue is a 201. Reruns only of the jobs
running at the freeze (their outcomes or heartbeats waited for a slot).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter

import psycopg
import pytest
from django.db import connections
from rest_framework.authtoken.models import Token

from django_durable_jobs.models import Job, JobStatus
from tests.factories import make_user

from .cluster import APP_ROLE
from .fleet import Fleet, wait_until
from .scenario import Database, Mode
from .tally import check, count, finished
from .web import Server
from .workload import drain, enqueue_flow, rng, stop_cleanly

pytestmark = [pytest.mark.chaos]

ARGS = ("--concurrency", "4", "--lease-seconds", "10", "--poll-interval", "0.5")
MAX_CONNECTIONS = 40
# S608: APP_ROLE is the suite's own constant.
WORKERS_BACKENDS = f"""
SELECT pid FROM pg_stat_activity
WHERE usename = '{APP_ROLE}' AND datname = current_database() AND NOT (pid = ANY(%s))
"""  # noqa: S608
FULL = ("too many clients", "reserved for")


class Hog:
    """Something else holding the server's connections: as many as it can get."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.held: list[psycopg.Connection] = []

    def take_all(self) -> None:
        """Open connections until the server refuses one."""
        while True:
            try:
                self.held.append(self.database.cluster.connect(self.database.name, user=APP_ROLE))
            except psycopg.OperationalError as exc:
                if not any(text in str(exc) for text in FULL):
                    raise  # refused for another reason than a full server
                return

    def pids(self) -> list[int]:
        return [conn.info.backend_pid for conn in self.held]

    def release(self) -> None:
        for conn in self.held:
            conn.close()
        self.held.clear()


def test_workers_wait_for_a_full_server_and_recover(
    database: Database, fleet: Fleet, server: Server, mode: Mode
) -> None:
    cluster = database.cluster
    cluster.reconfigure(max_connections=MAX_CONNECTIONS)
    hog = Hog(database)
    try:
        run(database, fleet, server, mode, hog)
    finally:
        hog.release()
        connections[database.alias].close()
        cluster.reconfigure(max_connections=None)


def settle(hog: Hog, quiet: float = 1.0) -> None:
    """Take every free slot until ``quiet`` seconds pass with nothing more to take."""
    settle_at = time.monotonic() + quiet
    while time.monotonic() < settle_at:
        before = len(hog.held)
        hog.take_all()
        if len(hog.held) > before:
            settle_at = time.monotonic() + quiet
        time.sleep(0.1)


def run(database: Database, fleet: Fleet, server: Server, mode: Mode, hog: Hog) -> None:
    random, seed = rng()
    cluster = database.cluster
    user = make_user("chaos-client", superuser=True, using=database.alias)
    token = Token.objects.using(database.alias).create(user=user).key

    def post(key: str) -> tuple[int, dict[str, object]]:
        body = {"type": "tests.record", "payload": {}, "idempotency_key": key}
        return server.request("POST", "/api/jobs", body, token)

    total = mode.pick(short=800, long=5_000)
    hold = mode.pick(short=8, long=30)
    jobs = enqueue_flow(database.alias, total, sleep=(0.02, 0.05), random_=random)
    started = time.monotonic()
    workers = [fleet.start(*ARGS) for _ in range(2)]
    fleet.wait_up(*workers)
    wait_until(lambda: finished(database.alias) >= total / 5, 120, "a fifth of the jobs")

    for worker in workers:
        worker.proc.send_signal(signal.SIGSTOP)
    with cluster.admin(database.name) as admin:
        frozen = Counter(
            Job.objects.using(database.alias)
            .filter(status=JobStatus.RUNNING)
            .values_list("pk", flat=True)
        )
        hog.take_all()
        theirs = [pid for (pid,) in admin.execute(WORKERS_BACKENDS, [hog.pids()]).fetchall()]
        admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [theirs])
        wait_until(
            lambda: not admin.execute(WORKERS_BACKENDS, [hog.pids()]).fetchall(),
            30,
            "the workers' backends to exit",
        )
        # A terminated backend leaves pg_stat_activity a moment before it frees its
        # slot: take again until a second passes with nothing more to take (CI once saw
        # the web server get a slot freed after the last take, and answer 201).
        settle(hog)
    held = len(hog.held)
    for worker in workers:
        worker.proc.send_signal(signal.SIGCONT)
    late = fleet.start(*ARGS)
    done_at_full = finished(database.alias)
    # Again just before the request: on a loaded machine a terminated backend's slot
    # was seen freed after the first settling (CI, twice: the request got it, 201).
    settle(hog)
    # The web tier cannot get a connection either: a JSON 503 to retry, not an HTML 500.
    status, body = post("during")
    assert (status, body.get("error")) == (503, "database_unavailable"), (status, body)
    time.sleep(hold)  # the scenario: the server stays full this long
    assert finished(database.alias) == done_at_full, "jobs finished on a full server?"
    down = [worker.id for worker in fleet.workers if not worker.alive]
    assert not down, f"workers exited on a full server: {down}\n{fleet.tails()}"
    hog.release()
    status, body = post("during")  # the client's retry, with the same key
    assert status == 201, (status, body)
    jobs.append(uuid.UUID(str(body["id"])))

    drain(fleet, mode.pick(short=180, long=600))
    fleet.wait_up(late)  # it did get in, and served
    stop_cleanly(fleet)
    output = fleet.output()
    tally = count(
        database.alias, "connection-exhaustion", mode.name, started,
        jobs=jobs, in_flight=frozen, hog=held, max_connections=MAX_CONNECTIONS,
        held_for=f"{hold}s", seed=seed,
    )  # fmt: skip
    assert any(text in output for text in FULL), output
    check(tally, fleet.tails)
