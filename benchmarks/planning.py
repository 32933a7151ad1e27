"""What planning costs the worker's hot statements, and what preparing them saves (issue 26).

Run on demand, never in the test suite, with the project's virtual environment:

    .venv/bin/python benchmarks/planning.py [-n 20000] [--keys 100] [--runs 30]
        [--database-url URL]

Fills the benchmark database with ``-n`` runnable ``example.noop`` jobs and
``-n`` ``example.serial`` ones (concurrency_limit 1) over ``--keys`` keys,
then, for each statement of a worker's round (the claim, the keyed claim's
function, the heartbeat, the outcomes' write), in transactions rolled
back so every run sees the same backlog:

- *unprepared*: ``EXPLAIN (ANALYZE, SUMMARY)`` with the parameters bound,
  as the gateway runs it today (a custom plan each time): planning and
  execution time;
- *generic*: the statement ``PREPARE``d, ``plan_cache_mode =
  force_generic_plan``: planning (nothing, once cached) and execution time
  of the one plan a prepared statement settles on after five runs, and
  whether that plan is the custom one's shape;
- *auto*: prepared, six runs, then which plan PostgreSQL's default
  (``plan_cache_mode = auto``) chose;
- the client's time per statement, median of ``--runs``: ``execute()``
  unprepared against ``execute(prepare=True)``, on the same connection.

PostgreSQL here has no pg_stat_statements (not preloaded), hence EXPLAIN.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import worker as bench  # noqa: E402  (benchmarks/worker.py: its set-up)

#: Jobs a claim takes, so the heartbeat and the outcomes' write hold as many (--batch).
BATCH = 8

PARAM = re.compile(r"%\((\w+)\)s")


def positional(query: str) -> tuple[str, list[str]]:
    """``query`` with ``%(name)s`` as ``$n`` (first appearance order), and the names in order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return PARAM.sub(number, query), names


def fill(n: int, keys: int) -> None:
    from django_durable_jobs import enqueue_many

    bench.reset()
    for offset in range(0, n, 5_000):
        batch = range(offset, min(n, offset + 5_000))
        enqueue_many([{"type": bench.TYPE, "payload": {"i": i}} for i in batch])
        enqueue_many(
            [
                {"type": bench.KEYED_TYPE, "payload": {"i": i}, "concurrency_key": f"k{i % keys}"}
                for i in batch
            ]
        )
    bench.sql("VACUUM ANALYZE durable_jobs_job")


def raw(conn: Any, command: str) -> None:
    """A transaction command psycopg does not see: psycopg deallocates every statement it
    prepared on a ROLLBACK (even to a savepoint), which would re-prepare each run."""
    conn.pgconn.exec_(command.encode())


@contextmanager
def rolled_back(conn: Any) -> Iterator[None]:
    raw(conn, "BEGIN")
    try:
        yield
    finally:
        raw(conn, "ROLLBACK")


def explain(conn: Any, query: str, params: Mapping[str, Any]) -> tuple[float, float, str]:
    """Planning ms, execution ms and the plan of ``query`` run unprepared (a custom plan)."""
    ((plan,),) = conn.execute(
        "EXPLAIN (ANALYZE, SUMMARY, COSTS OFF, FORMAT JSON) " + query, params
    ).fetchall()
    return plan[0]["Planning Time"], plan[0]["Execution Time"], shape(plan[0]["Plan"])


def shape(node: Mapping[str, Any]) -> str:
    """The plan's node types and indexes, nested: what makes two plans the same plan."""
    label = node["Node Type"] + (f"[{node['Index Name']}]" if "Index Name" in node else "")
    children = ",".join(shape(child) for child in node.get("Plans", ()))
    return f"{label}({children})" if children else label


def explain_prepared(
    conn: Any, name: str, names: list[str], params: Mapping[str, Any]
) -> tuple[float, float, str, bool]:
    """Planning ms, execution ms, the plan, and whether it is generic, of EXECUTE ``name``."""
    from psycopg import ClientCursor

    values = [params[n] for n in names]
    args = ", ".join(["%s"] * len(values))
    execute = (
        ClientCursor(conn).mogrify(f"EXECUTE {name}({args})", values)
        if values
        else (f"EXECUTE {name}")
    )
    ((plan,),) = conn.execute(
        "EXPLAIN (ANALYZE, SUMMARY, COSTS OFF, VERBOSE, FORMAT JSON) " + execute
    ).fetchall()
    generic = "$1" in json.dumps(plan[0]["Plan"])
    return plan[0]["Planning Time"], plan[0]["Execution Time"], shape(plan[0]["Plan"]), generic


def statements(conn: Any) -> list[tuple[str, str, Callable[[], Mapping[str, Any]]]]:
    """(query name, its parameters) for one worker round, each made in the current transaction."""
    from django_durable_jobs.db import _outcomes_params
    from django_durable_jobs.db.flow_control import KEY_LOCK_SPACE, KEY_SCAN_PER_KEY
    from django_durable_jobs.db.queries import QUERIES
    from django_durable_jobs.db.records import Outcome, Transition

    claim = {
        "worker_id": "bench",
        "lease_seconds": 30.0,
        "limit": BATCH,
        "excluded": [],
        "keyed_types": [bench.KEYED_TYPE],
    }
    keyed = {
        "types": [bench.KEYED_TYPE],
        "limits": [1],
        "queues": None,
        "excluded": [],
        "limit": 8,
        "scan": 8 * KEY_SCAN_PER_KEY,
        "lock_space": KEY_LOCK_SPACE,
        "worker_id": "bench",
        "lease_seconds": 30.0,
    }

    def held() -> list[tuple[Any, ...]]:
        return conn.execute(QUERIES["claim_jobs"], claim).fetchall()

    def heartbeat() -> Mapping[str, Any]:
        rows = held()
        return {"ids": [r[0] for r in rows], "tokens": [r[6] for r in rows], "lease_seconds": 30.0}

    def outcomes() -> Mapping[str, Any]:
        rows = held()
        done = [
            Outcome(job_id=r[0], lease_token=r[6], transition=Transition.COMPLETE, result_json="1")
            for r in rows
        ]
        return _outcomes_params(done, 20)

    def literal(name: str, params: Mapping[str, Any], *names: str) -> str:
        query = QUERIES[name]
        for n in names:
            query = query.replace(f"%({n})s", str(int(params[n])))
        return query

    return [
        ("claim_jobs", QUERIES["claim_jobs"], lambda: claim),
        ("claim_jobs lit", literal("claim_jobs", claim, "limit"), lambda: claim),
        # A call of the keyed claim's function (migration 0004): its two
        # statements are planned inside it, for each call's values, and
        # counted in its execution time.
        ("claim_keyed", QUERIES["claim_keyed"], lambda: keyed),
        ("extend_leases", QUERIES["extend_leases"], heartbeat),
        ("record_outcomes", QUERIES["record_outcomes"], outcomes),
    ]


def measure(conn: Any, runs: int) -> None:

    print(
        f"{'statement':<16} {'custom plan ms':>14} {'exec ms':>8} {'generic plan ms':>15} "
        f"{'exec ms':>8} {'same plan':>9} {'auto after 6':>12} {'client ms':>9} "
        f"{'prepared':>9} {'saved':>6}"
    )
    for index, (name, query, make) in enumerate(statements(conn)):
        sql, names = positional(query)
        custom = []
        with rolled_back(conn):
            params = make()
            for _ in range(runs):
                raw(conn, "SAVEPOINT s")
                custom.append(explain(conn, query, params))
                raw(conn, "ROLLBACK TO SAVEPOINT s")
        prepared = f"bench_{index}"
        conn.execute(f"PREPARE {prepared} AS {sql}")
        generic = []
        with rolled_back(conn):
            params = make()
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            for _ in range(runs):
                raw(conn, "SAVEPOINT s")
                generic.append(explain_prepared(conn, prepared, names, params))
                raw(conn, "ROLLBACK TO SAVEPOINT s")
        conn.execute(f"DEALLOCATE {prepared}")
        conn.execute(f"PREPARE {prepared} AS {sql}")
        with rolled_back(conn):
            params = make()
            for _ in range(6):
                raw(conn, "SAVEPOINT s")
                explain_prepared(conn, prepared, names, params)
                raw(conn, "ROLLBACK TO SAVEPOINT s")
            auto = explain_prepared(conn, prepared, names, params)
        conn.execute(f"DEALLOCATE {prepared}")
        # The client's view: params made once (in a transaction of their own,
        # rolled back), then the statement run alone.
        with rolled_back(conn):
            params = dict(make())
            plain = client_ms_inner(conn, query, params, False, runs)
            fast = client_ms_inner(conn, query, params, True, runs)
        same = custom[-1][2] == generic[-1][2]
        print(
            f"{name:<16} {statistics.median(c[0] for c in custom):>14.3f} "
            f"{statistics.median(c[1] for c in custom):>8.3f} "
            f"{statistics.median(g[0] for g in generic):>15.3f} "
            f"{statistics.median(g[1] for g in generic):>8.3f} {'yes' if same else 'NO':>9} "
            f"{'generic' if auto[3] else 'custom':>12} {plain:>9.3f} {fast:>9.3f} "
            f"{plain - fast:>6.3f}"
        )
        if not same:
            print(f"    custom:  {custom[-1][2]}\n    generic: {generic[-1][2]}")


def client_ms_inner(
    conn: Any, query: str, params: Mapping[str, Any], prepare: bool, runs: int
) -> float:
    """Median client ms of one execute-and-fetch, in the open transaction (savepoints)."""
    times = []
    cursor = conn.cursor()
    for _ in range(runs + 1):
        raw(conn, "SAVEPOINT s")
        started = time.perf_counter()
        cursor.execute(query, params, binary=True, prepare=prepare or None)
        cursor.fetchall()
        times.append((time.perf_counter() - started) * 1000)
        raw(conn, "ROLLBACK TO SAVEPOINT s")
    return statistics.median(times[1:])  # the first prepares


def main() -> None:
    global BATCH
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000, help="runnable jobs of each kind")
    parser.add_argument("--keys", type=int, default=100, help="concurrency keys of the keyed jobs")
    parser.add_argument("--runs", type=int, default=30, help="runs of each measurement")
    parser.add_argument(
        "--batch", type=int, default=8, help="jobs claimed, beaten and completed at once"
    )
    parser.add_argument("--database-url", default=bench.DEFAULT_URL)
    args = parser.parse_args()
    BATCH = args.batch
    bench.ensure_database(args.database_url)
    bench.setup_django(args.database_url)
    fill(args.n, args.keys)
    import psycopg

    from django_durable_jobs.db import connection_params

    with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
        # Only what execute(prepare=True) asks for (psycopg prepares nothing
        # with a threshold of None, prepare=True or not).
        conn.prepare_threshold = 2**31
        measure(conn, args.runs)


if __name__ == "__main__":
    main()
