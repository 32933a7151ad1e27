"""pgqueuer's side of the side-by-side benchmark: its worker factory and its enqueue runs.

Runs only with ``benchmarks/peers/.venv-pgqueuer/bin/python`` (pgqueuer with
asyncpg from PyPI; no Django there), started by ``run.py``. The database is
the one in ``PGDSN``; ``pgqueuer_peer.py`` installs pgqueuer's schema there
with ``pgq install`` and reads the results with its own SQL.

The worker is ``pgqueuer.run(factory, ...)``, which its docstring calls what
``pgq run`` does without the CLI, with this module's factory::

    PGDSN=... .venv-pgqueuer/bin/python pgqueuer_side.py worker [--batch-size 100] [--drain]

(``pgq run`` itself fails at start-up in pgqueuer 1.6.0 with typer 0.29, the
newest typer its ``typer>=0.15.1`` allows: its ``--log-level`` parser hands
a str where an enum is expected, with or without the option.)

The other commands print one JSON object on stdout::

    python pgqueuer_side.py enqueue -n 20000   # {"single": jobs/s, "bulk": jobs/s}
    python pgqueuer_side.py fill -n 20000      # {"jobs": 20000}
    python pgqueuer_side.py paced --rate 200 --count 2000
        # {"first_id": .., "last_id": .., "count": .., "enqueue_p50": ms, "enqueue_p99": ms}
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import asyncpg
import pgqueuer
from pgqueuer import QueueManager
from pgqueuer.db import AsyncpgDriver
from pgqueuer.domain.types import QueueExecutionMode
from pgqueuer.models import Job
from pgqueuer.queries import Queries

ENTRYPOINT = "noop"
BATCH = 5_000  # fill in batches, as ours does (benchmarks/worker.py fill)
T = TypeVar("T")


def dsn() -> str:
    return os.environ["PGDSN"]


def payload(i: int) -> bytes:
    """The same document ours enqueues, {"i": i}, as pgqueuer's bytes payload."""
    return json.dumps({"i": i}).encode()


@contextlib.asynccontextmanager
async def queue_manager() -> AsyncIterator[QueueManager]:
    """The worker: one asyncpg connection, one no-op entrypoint (what ``pgq run`` calls).

    A plain QueueManager rather than a PgQueuer: the benchmark has no
    schedules, so the scheduler that PgQueuer also runs would only add work.
    """
    connection = await asyncpg.connect(dsn())
    try:
        manager = QueueManager(Queries(AsyncpgDriver(connection)))

        @manager.entrypoint(ENTRYPOINT)
        async def noop(job: Job) -> None:
            return None

        yield manager
    finally:
        await connection.close()


@contextlib.asynccontextmanager
async def queries() -> AsyncIterator[Queries]:
    connection = await asyncpg.connect(dsn())
    try:
        yield Queries(AsyncpgDriver(connection))
    finally:
        await connection.close()


async def clear(q: Queries) -> None:
    await q.clear_queue()
    await q.clear_queue_log()
    await q.clear_statistics_log()


async def single(q: Queries, n: int) -> float:
    """``Queries.enqueue`` n times with scalars: asyncpg autocommits, one transaction per job."""
    start = time.perf_counter()
    for i in range(n):
        await q.enqueue(ENTRYPOINT, payload(i))
    return n / (time.perf_counter() - start)


async def bulk(q: Queries, n: int, batch: int) -> float:
    """``Queries.enqueue`` with lists, ``batch`` jobs per call (one statement each)."""
    payloads = [payload(i) for i in range(n)]
    start = time.perf_counter()
    for offset in range(0, n, batch):
        chunk = payloads[offset : offset + batch]
        await q.enqueue([ENTRYPOINT] * len(chunk), chunk, [0] * len(chunk))
    return n / (time.perf_counter() - start)


async def enqueue_command(n: int, batch: int) -> dict[str, float]:
    async with queries() as q:
        # Warm up as benchmarks/enqueue.py does: the connection, the plans, the pages.
        await clear(q)
        await single(q, 1_000)
        await bulk(q, 5_000, batch)
        await clear(q)
        one = await single(q, n)
        await clear(q)
        many = await bulk(q, n, batch)
        await clear(q)
    return {"single": one, "bulk": many}


async def fill_command(n: int) -> dict[str, float]:
    async with queries() as q:
        await bulk(q, n, BATCH)
    return {"jobs": n}


async def paced_command(rate: float, count: int) -> dict[str, float]:
    """Enqueue ``count`` single jobs at ``rate`` per second, paced by the clock."""
    async with queries() as q:
        ids: list[int] = []
        durations: list[float] = []
        start = time.perf_counter()
        for i in range(count):
            wait = start + i / rate - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            t = time.perf_counter()
            ids.extend(await q.enqueue(ENTRYPOINT, payload(i)))
            durations.append(time.perf_counter() - t)
    durations.sort()
    return {
        "first_id": min(ids),
        "last_id": max(ids),
        "count": len(ids),
        "enqueue_p50": durations[len(durations) // 2] * 1000,
        "enqueue_p99": durations[int(len(durations) * 0.99)] * 1000,
    }


def worker_command(batch_size: int | None, drain: bool) -> None:
    """``pgq run pgqueuer_side:queue_manager [--batch-size B] [--mode drain]``, logging WARNING."""
    logging.basicConfig(level=logging.WARNING)
    options: dict[str, Any] = {"mode": QueueExecutionMode.drain} if drain else {}
    if batch_size is not None:
        options["batch_size"] = batch_size
    run(pgqueuer.run(queue_manager, **options))


def run(coro: Coroutine[object, object, T]) -> T:
    """On uvloop where installed (it comes with pgqueuer), as ``pgq run`` runs its workers."""
    try:
        import uvloop  # optional dependency: pgqueuer's CLI uses it the same way
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="a worker process, as `pgq run` starts one")
    worker.add_argument("--batch-size", type=int, default=None, help="default: pgqueuer's (10)")
    worker.add_argument("--drain", action="store_true", help="exit once the queue is empty")
    enqueue = commands.add_parser("enqueue", help="enqueue rates, one per transaction and bulk")
    enqueue.add_argument("-n", type=int, default=20_000)
    enqueue.add_argument("--batch", type=int, default=20_000, help="jobs per bulk call")
    fill = commands.add_parser("fill", help="enqueue n jobs for a throughput run")
    fill.add_argument("-n", type=int, default=20_000)
    paced = commands.add_parser("paced", help="enqueue single jobs at a fixed rate")
    paced.add_argument("--rate", type=float, default=200.0)
    paced.add_argument("--count", type=int, default=2_000)
    args = parser.parse_args()
    if args.command == "worker":
        worker_command(args.batch_size, args.drain)
        return
    if args.command == "enqueue":
        result = run(enqueue_command(args.n, args.batch))
    elif args.command == "fill":
        result = run(fill_command(args.n))
    else:
        result = run(paced_command(args.rate, args.count))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
