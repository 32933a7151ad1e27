"""Scenario 7: 64 HTTP clients and 64 Python threads enqueue with overlapping idempotency keys.

The web server is the example project's REST API in a ``runserver``
process of its own (threaded: one thread and one database connection per
request), on the scenario's database; two workers run the jobs meanwhile,
so replays meet jobs pending, running and completed. All 128 clients start
at once; each enqueues a random sample of the same keys (200; 1,000 in
the long mode), the HTTP clients with ``POST /api/jobs``, the threads with
``enqueue()``. Same key, same type and payload: one job per key.

Every answer is 201 (created) or 200 (a replay) naming the key's one job,
exactly one call per key created it (or none that heard of it, when a
connection reset and the client retried with the same key: the first call
may have created it), and each job ran once.
"""

from __future__ import annotations

import random as random_module
import threading
import time
from collections import Counter, defaultdict

import pytest
from django.db import connections
from rest_framework.authtoken.models import Token

from django_durable_jobs import enqueue
from django_durable_jobs.models import Job
from tests.factories import make_user

from .fleet import Fleet
from .scenario import Database, Mode
from .tally import check, count
from .web import Server
from .workload import drain, rng, stop_cleanly

pytestmark = [pytest.mark.chaos]

CLIENTS = 64
THREADS = 64
RETRIES = 8


def test_overlapping_keys_over_http_and_threads_make_one_job_per_key(
    database: Database, fleet: Fleet, server: Server, mode: Mode
) -> None:
    random, seed = rng()
    alias = database.alias
    keys = [f"order-{i}" for i in range(mode.pick(short=100, long=1_000))]
    per_client = mode.pick(short=6, long=60)
    user = make_user("chaos-client", superuser=True, using=alias)
    token = Token.objects.using(alias).create(user=user).key
    samples = [
        random_module.Random(random.random()).sample(keys, per_client)
        for _ in range(CLIENTS + THREADS)
    ]
    # key -> [(via, created, job id)], and whatever went wrong.
    answers: defaultdict[str, list[tuple[str, bool, str]]] = defaultdict(list)
    errors: list[str] = []
    uncertain: Counter[str] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(CLIENTS + THREADS)

    def spec(key: str) -> dict[str, object]:
        return {"type": "tests.record", "payload": {"order": key}, "idempotency_key": key}

    def http_client(sample: list[str]) -> None:
        start.wait()
        for key in sample:
            status, body = post(key)
            with lock:
                if status in (200, 201):
                    answers[key].append(("http", status == 201, str(body["id"])))
                else:
                    errors.append(f"POST {key}: {status} {body}")

    def post(key: str) -> tuple[int, dict[str, object]]:
        """POST, retried with the same key when the connection fails, as a client should.

        runserver's listen queue holds 10 connections: some of 64 at once are
        reset. Whether the server had taken the call is then unknown, so the
        key's one creation may be answered to no one (a retry hears 200).
        """
        for attempt in range(RETRIES):
            try:
                return server.request("POST", "/api/jobs", spec(key), token)
            except OSError as exc:
                with lock:
                    uncertain[key] += 1
                if attempt == RETRIES - 1:
                    return -1, {"error": repr(exc)}
                time.sleep(random_module.uniform(0.05, 0.3))
        raise AssertionError("unreachable")

    def python_thread(sample: list[str]) -> None:
        start.wait()
        try:
            for key in sample:
                try:
                    result = enqueue(
                        "tests.record", {"order": key}, idempotency_key=key, using=alias
                    )
                except Exception as exc:
                    with lock:
                        errors.append(f"enqueue {key}: {exc!r}")
                    continue
                with lock:
                    answers[key].append(("python", result.created, str(result.job.pk)))
        finally:
            connections.close_all()

    for _ in range(2):
        fleet.start("--concurrency", "4", "--lease-seconds", "10", "--poll-interval", "0.5")
    started = time.monotonic()
    threads = [
        threading.Thread(target=http_client, args=(sample,)) for sample in samples[:CLIENTS]
    ] + [threading.Thread(target=python_thread, args=(sample,)) for sample in samples[CLIENTS:]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    calls_took = time.monotonic() - started
    assert not errors, f"{len(errors)} calls failed: {errors[:10]}"

    jobs = dict(Job.objects.using(alias).filter(idempotency_key__in=keys).values_list(
        "idempotency_key", "pk"))  # fmt: skip
    asked = {key for sample in samples for key in sample}
    assert set(jobs) == asked
    wrong = {
        key: got
        for key, got in answers.items()
        if {job_id for _, _, job_id in got} != {str(jobs[key])}
        or sum(created for _, created, _ in got) not in ((0, 1) if uncertain[key] else (1,))
    }
    assert not wrong, f"keys answered with another job, or created other than once: {wrong}"
    drain(fleet, mode.pick(short=120, long=300))
    stop_cleanly(fleet)
    via = Counter((source, created) for got in answers.values() for source, created, _ in got)
    tally = count(
        alias, "idempotency-under-load", mode.name, started, jobs=list(jobs.values()),
        keys=len(jobs), http=via["http", True] + via["http", False],
        python=via["python", True] + via["python", False],
        created_http=via["http", True], created_python=via["python", True],
        resets=sum(uncertain.values()), calls_seconds=f"{calls_took:.1f}", seed=seed,
    )  # fmt: skip
    assert tally.duplicates == 0, tally.line()
    check(tally, fleet.tails)
