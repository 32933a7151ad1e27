"""procrastinate's side of the side-by-side benchmark: its enqueue runs.

Runs only with ``benchmarks/peers/.venv-procrastinate/bin/python``
(procrastinate and psycopg with its binary libpq from PyPI; no Django there),
started by ``run.py``, on the app of ``procrastinate_app.py`` (whose
docstring shows the worker's command). The database is the one in
``PGDSN``; ``run.py`` applies procrastinate's schema there with
``procrastinate schema --apply`` and reads the results with its own SQL.

The other commands print one JSON object on stdout::

    python procrastinate_side.py enqueue -n 20000   # {"single": jobs/s, "bulk": jobs/s}
    python procrastinate_side.py fill -n 20000      # {"jobs": 20000}
    python procrastinate_side.py paced --rate 200 --count 2000
        # {"first_id": .., "last_id": .., "count": .., "enqueue_p50": ms, "enqueue_p99": ms}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from procrastinate_app import app, noop

BATCH = 5_000  # fill in batches, as ours does (benchmarks/worker.py fill)


async def single(n: int) -> float:
    """``defer_async`` n times: one statement, in autocommit, per job."""
    start = time.perf_counter()
    for i in range(n):
        await noop.defer_async(i=i)
    return n / (time.perf_counter() - start)


async def bulk(n: int, batch: int) -> float:
    """``batch_defer_async`` with ``batch`` jobs per call (one statement each)."""
    start = time.perf_counter()
    for offset in range(0, n, batch):
        await noop.batch_defer_async(*({"i": i} for i in range(offset, min(n, offset + batch))))
    return n / (time.perf_counter() - start)


async def clear() -> None:
    await app.connector.execute_query_async(
        "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers"
    )


async def enqueue_command(n: int, batch: int) -> dict[str, float]:
    async with app.open_async():
        # Warm up as benchmarks/enqueue.py does: the connections, the plans, the pages.
        await clear()
        await single(1_000)
        await bulk(5_000, batch)
        await clear()
        one = await single(n)
        await clear()
        many = await bulk(n, batch)
        await clear()
    return {"single": one, "bulk": many}


async def fill_command(n: int) -> dict[str, float]:
    async with app.open_async():
        await bulk(n, BATCH)
    return {"jobs": n}


async def paced_command(rate: float, count: int) -> dict[str, float]:
    """Defer ``count`` single jobs at ``rate`` per second, paced by the clock."""
    async with app.open_async():
        ids: list[int] = []
        durations: list[float] = []
        start = time.perf_counter()
        for i in range(count):
            wait = start + i / rate - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            t = time.perf_counter()
            ids.append(await noop.defer_async(i=i))
            durations.append(time.perf_counter() - t)
    durations.sort()
    return {
        "first_id": min(ids),
        "last_id": max(ids),
        "count": len(ids),
        "enqueue_p50": durations[len(durations) // 2] * 1000,
        "enqueue_p99": durations[int(len(durations) * 0.99)] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    enqueue = commands.add_parser("enqueue", help="enqueue rates, one per transaction and bulk")
    enqueue.add_argument("-n", type=int, default=20_000)
    enqueue.add_argument("--batch", type=int, default=20_000, help="jobs per bulk call")
    fill = commands.add_parser("fill", help="enqueue n jobs for a throughput run")
    fill.add_argument("-n", type=int, default=20_000)
    paced = commands.add_parser("paced", help="enqueue single jobs at a fixed rate")
    paced.add_argument("--rate", type=float, default=200.0)
    paced.add_argument("--count", type=int, default=2_000)
    args = parser.parse_args()
    if args.command == "enqueue":
        result = asyncio.run(enqueue_command(args.n, args.batch))
    elif args.command == "fill":
        result = asyncio.run(fill_command(args.n))
    else:
        result = asyncio.run(paced_command(args.rate, args.count))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
