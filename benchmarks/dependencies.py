"""``enqueue(..., depends_on=...)`` and ``chain()`` as the table of finished jobs grows.

Issue 26 asks that both be as fast with 10,000,000 finished jobs in the
table as with none: a parent is found by its id (the primary key of each
partition), never by reading the table. Two databases side by side, with
the same partitions (the daily history ranges of ``worker.py``'s fill):
``--database-url`` holds each size of ``--finished-rows`` in turn (filled
once by ``worker.py``'s SQL), ``--empty-database-url`` none. In autocommit,
no worker running, the calls alternate between the two databases in
blocks of ``--block``, so that both meet the same machine (a commit's
WAL flush dominates a call's time, and the disk's state drifts over
minutes, notably while the kernel writes back a fill of gigabytes):

- ``depends_on`` a finished parent (a filler job picked at random: it is
  in a history range, as a parent finished days ago would be; in the
  empty database, a job enqueued and completed by SQL just before);
- ``depends_on`` a pending parent (enqueued just before, not timed);
- ``chain()`` of three jobs.

Each call's time is the client's (``perf_counter`` around the call); the
table shows the median, p90 and mean in milliseconds, and the filled
database's median over the empty one's.

    .venv/bin/python benchmarks/dependencies.py --finished-rows 1000000,10000000
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import worker as bench

TYPE = bench.TYPE
FILLED, EMPTY = "default", "empty"
KINDS = ("finished parent", "pending parent", "chain of 3")


def empty_like_filled() -> None:
    """The empty database with the filled one's daily ranges, and no job."""
    import history

    bench.sql("TRUNCATE durable_jobs_job CASCADE", using=EMPTY)
    history.daily_ranges(bench.FILLER_DAYS, using=EMPTY)


def finished_parents(alias: str) -> list[str]:
    """Up to 5,000 finished parents spread over the database's history."""
    rows = bench.sql(
        "SELECT id FROM durable_jobs_job TABLESAMPLE SYSTEM (1) WHERE type = %s LIMIT 5000",
        [bench.FILLER_TYPE],
        using=alias,
    )
    if rows:
        return [row[0] for row in rows]
    # The empty database: jobs of its own, completed by SQL (they move to today's range).
    from django_durable_jobs import enqueue_many

    ids = [
        r.job.pk
        for r in enqueue_many([{"type": bench.FILLER_TYPE, "payload": {}}] * 100, using=alias)
    ]
    bench.sql(
        "UPDATE durable_jobs_job SET status = 'completed', started_at = now(),"
        " completed_at = now(), attempts = 1 WHERE id = ANY(%s)",
        [ids],
        using=alias,
    )
    return [str(i) for i in ids]


def timed(call: Callable[..., object], *args: Any, **kwargs: Any) -> float:
    start = time.perf_counter()
    call(*args, **kwargs)
    return (time.perf_counter() - start) * 1000


def block(alias: str, parents: list[str], calls: int, into: dict[str, list[float]]) -> None:
    from django_durable_jobs import chain, enqueue

    spec = {"type": TYPE, "payload": {"i": 0}}
    for i in range(calls):
        parent = random.choice(parents)
        into["finished parent"].append(
            timed(enqueue, TYPE, {"i": i}, depends_on=[parent], using=alias)
        )
        pending = enqueue(TYPE, {"i": i}, using=alias).job.pk
        into["pending parent"].append(
            timed(enqueue, TYPE, {"i": i}, depends_on=[pending], using=alias)
        )
        into["chain of 3"].append(timed(chain, spec, spec, spec, using=alias))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=bench.DEFAULT_URL)
    parser.add_argument(
        "--empty-database-url", default=bench.DEFAULT_URL + "_empty",
        help="the database kept without finished jobs (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--finished-rows", default=[1_000_000, 10_000_000],
        type=lambda v: [int(x.replace("_", "")) for x in v.split(",") if x],
        help="sizes of the finished history (default: 1000000,10000000)",
    )  # fmt: skip
    parser.add_argument("--calls", type=int, default=500, help="calls of each kind per database")
    parser.add_argument("--block", type=int, default=50, help="calls before switching database")
    args = parser.parse_args()

    for url in (args.database_url, args.empty_database_url):
        bench.ensure_database(url)
    bench.setup_django(args.database_url, others={EMPTY: args.empty_database_url})
    print(f"{args.calls} calls of each kind per database in blocks of {args.block}, autocommit,"
          f" no worker ({bench.loadavg()})")  # fmt: skip
    print(f"{'finished jobs':>14}  {'call':<18}{'p50 ms':>8}{'p90 ms':>8}{'mean ms':>9}"
          f"{'empty p50':>11}{'ratio':>7}")  # fmt: skip
    try:
        for rows in args.finished_rows:
            started = time.monotonic()
            bench.fill_finished(rows)
            print(f"  (filled in {time.monotonic() - started:.0f} s)", flush=True)
            empty_like_filled()
            bench.sql("CHECKPOINT")  # one for the whole cluster
            parents = {alias: finished_parents(alias) for alias in (FILLED, EMPTY)}
            for alias in (FILLED, EMPTY):
                # Statistics of both as they are now (autovacuum is off on the
                # benchmark machine): a table never analyzed is planned blind.
                bench.sql("ANALYZE", using=alias)
            times: dict[str, dict[str, list[float]]] = {
                alias: {kind: [] for kind in KINDS} for alias in (FILLED, EMPTY)
            }
            for alias in (FILLED, EMPTY):  # warm-up: connections, plans
                block(alias, parents[alias], 20, {kind: [] for kind in KINDS})
            for round_ in range(max(1, args.calls // args.block)):
                # A B, then B A: neither database always follows the other.
                for alias in (FILLED, EMPTY) if round_ % 2 == 0 else (EMPTY, FILLED):
                    block(alias, parents[alias], args.block, times[alias])
            for kind in KINDS:
                filled, empty = times[FILLED][kind], times[EMPTY][kind]
                print(
                    f"{rows:>14,}  {kind:<18}{statistics.median(filled):>8.2f}"
                    f"{statistics.quantiles(filled, n=10)[-1]:>8.2f}{statistics.mean(filled):>9.2f}"
                    f"{statistics.median(empty):>11.2f}"
                    f"{statistics.median(filled) / statistics.median(empty):>7.2f}",
                    flush=True,
                )
            bench.reset(keep_finished=True)
    finally:
        bench.sql("TRUNCATE durable_jobs_job CASCADE", using=EMPTY)
    print(f"({bench.loadavg()})")


if __name__ == "__main__":
    main()
