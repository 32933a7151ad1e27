"""Jobs/s, PostgreSQL CPU and WAL per job of each storage layout, for issues 26 and 27.

Run on demand, never in the test suite (the server must run on this machine:
the CPU is read from /proc):

    .venv/bin/python benchmarks/storage/lifecycle.py [--database-url URL]
        [--layouts A,C,B,BP] [--clients 2,4] [--seconds 20] [--repeats 3]

Each client is a process with one connection that loops over the job's
lifecycle with the package's statements (layouts.py): enqueue 10 jobs (one
statement), claim 10 (FOR UPDATE SKIP LOCKED), record their outcomes (one
statement for 10, or for 100 in layout C). A backlog of 2,000 pending jobs
keeps every claim full. A vacuumer connection VACUUMs the hot table every
10 s, as autovacuum would (autovacuum is off on this server). The layouts
alternate within each repeat; medians and spreads come out at the end.

Measured per run: jobs completed per second; PostgreSQL CPU per job, the
user + system time of this run's backends (the clients' and the vacuumer's,
from /proc/<pid>/stat; other sessions on the server are not counted); WAL
bytes per job (pg_current_wal_lsn delta: cluster-wide, so a run during which
other databases wrote is flagged and left out of the WAL median).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time
from typing import Any

from layouts import (
    DEFAULT_URL,
    LAYOUTS,
    Layout,
    backend_cpu,
    drop_database,
    ensure_template,
    make_layout_db,
    relation_sizes,
)

from django_durable_jobs.ids import new_job_id

BATCH = 10
BACKLOG = 2_000
VACUUM_EVERY = 10.0
PAYLOAD = {"user_id": 123456, "template": "welcome", "locale": "en"}
FINISHED = {
    "notify_finished": True,
    "finished_channel": "durable_jobs_finished",
    "finished_prefix": "finished:",
    "finished_chunk": 200,
    "history_limit": 10,
    "without_dependents": True,
}
CLAIM = {"worker_id": "bench", "lease_seconds": 30.0, "excluded": [], "keyed_types": []}


def enqueue(cur: Any, layout: Layout, n: int) -> None:
    rows = [
        [str(new_job_id()), "example.noop", "default", PAYLOAD, None, 0, 5, None, None, None, None]
        for _ in range(n)
    ]
    cur.execute(
        layout.insert_sql,
        {"jobs": json.dumps(rows), "trace_context": None, "channel": "durable_jobs"},
    )


def complete(cur: Any, layout: Layout, held: list[tuple[Any, Any]]) -> int:
    doc = ",".join(f'["{i}","{t}","complete",null,null,null,null,null]' for i, t in held)
    cur.execute(layout.complete_sql, {"outcomes": f"[{doc}]", **FINISHED})
    return len(cur.fetchall())


def client(url: str, name: str, pids: Any, start: Any, stop: Any, measured: Any) -> None:
    import psycopg

    layout = LAYOUTS[name]
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.cursor()
        pids.put(conn.info.backend_pid)
        start.wait()
        done = 0
        held: list[tuple[Any, Any]] = []
        while not stop.is_set():
            enqueue(cur, layout, BATCH)
            cur.execute(layout.claim_sql, {**CLAIM, "limit": BATCH})
            held += [(row[0], row[6]) for row in cur.fetchall()]
            if len(held) >= layout.complete_batch:
                done += complete(cur, layout, held)
                held = []
        pids.put(("done", done))
        measured.wait()


def vacuumer(url: str, table: str, pids: Any, start: Any, stop: Any, measured: Any) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        pids.put(conn.info.backend_pid)
        start.wait()
        while not stop.wait(VACUUM_EVERY):
            conn.execute(f"VACUUM {table}")
        pids.put(("done", 0))
        measured.wait()


def other_writes(conn: Any, mine: str) -> int:
    (n,) = conn.execute(
        "SELECT COALESCE(sum(tup_inserted + tup_updated + tup_deleted), 0) "
        "FROM pg_stat_database WHERE datname IS NOT NULL AND datname <> %s",
        [mine],
    ).fetchone()
    return int(n)


def reset(conn: Any, layout: Layout) -> None:
    conn.execute(
        "TRUNCATE durable_jobs_job, durable_jobs_dependency, durable_jobs_step, "
        "durable_jobs_event_waiter"
    )
    if layout.history:
        conn.execute(f"TRUNCATE {layout.hot}, {layout.history}")
    cur = conn.cursor()
    for _ in range(BACKLOG // 1000):
        enqueue(cur, layout, 1000)
    conn.execute("VACUUM ANALYZE")
    conn.execute("CHECKPOINT")


def one_run(url: str, layout: Layout, clients: int, seconds: float) -> dict[str, float]:
    import psycopg

    ctx = mp.get_context("fork")
    with psycopg.connect(url, autocommit=True) as conn:
        reset(conn, layout)
        mine = conn.info.dbname
        pids, start, stop, measured = (
            ctx.Queue(),
            ctx.Barrier(clients + 2),
            ctx.Event(),
            ctx.Event(),
        )
        procs = [
            ctx.Process(target=client, args=(url, layout.name, pids, start, stop, measured))
            for _ in range(clients)
        ]
        procs.append(
            ctx.Process(target=vacuumer, args=(url, layout.hot, pids, start, stop, measured))
        )
        for p in procs:
            p.start()
        backends = [pids.get() for _ in procs]
        writes_before = other_writes(conn, mine)
        start.wait()
        t0 = time.monotonic()
        cpu0 = sum(backend_cpu(pid) for pid in backends)
        (lsn0,) = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        time.sleep(seconds)
        stop.set()
        done = sum(pids.get()[1] for _ in procs)
        elapsed = time.monotonic() - t0
        cpu = sum(backend_cpu(pid) for pid in backends) - cpu0
        (wal,) = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [lsn0]).fetchone()
        measured.set()
        for p in procs:
            p.join()
        time.sleep(1.1)  # the statistics' flush, for other_writes
        others = other_writes(conn, mine) - writes_before
        size = relation_sizes(conn, layout.tables)
    return {
        "jobs_s": done / elapsed,
        "cpu_us": 1e6 * cpu / done,
        "wal_b": float(wal) / done,
        "others": others,
        "jobs": done,
        "mb": (size["heap"] + size["index"]) / 2**20,
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL, help="default: %(default)s")
    parser.add_argument("--layouts", default="A,C,B,BP")
    parser.add_argument("--clients", default="2,4")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the layouts' databases")
    args = parser.parse_args()
    ensure_template(args.database_url)
    names = args.layouts.split(",")
    urls = {name: make_layout_db(args.database_url, LAYOUTS[name]) for name in names}
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        for repeat in range(args.repeats):
            for clients in [int(c) for c in args.clients.split(",")]:
                # Alternate the order between repeats, so no layout always runs first.
                order = names if repeat % 2 == 0 else names[::-1]
                for name in order:
                    r = one_run(urls[name], LAYOUTS[name], clients, args.seconds)
                    results.setdefault((name, clients), []).append(r)
                    print(
                        f"repeat {repeat + 1} clients {clients} {name:>2}: "
                        f"{r['jobs_s']:7.0f} jobs/s {r['cpu_us']:6.1f} us/job "
                        f"{r['wal_b']:6.0f} WAL B/job ({r['jobs']:.0f} jobs, tables "
                        f"{r['mb']:.0f} MB, other databases wrote {r['others']:.0f} rows)",
                        flush=True,
                    )
    finally:
        if not args.keep:
            for url in urls.values():
                drop_database(url)
    print("\nmedian (min-max) of the repeats")
    print(f"{'layout':<8}{'clients':>8}{'jobs/s':>26}{'PG CPU us/job':>26}{'WAL B/job':>26}")
    for (name, clients), runs in results.items():
        clean = [r["wal_b"] for r in runs if r["others"] == 0] or [r["wal_b"] for r in runs]
        print(
            f"{name:<8}{clients:>8}{spread([r['jobs_s'] for r in runs]):>26}"
            f"{spread([r['cpu_us'] for r in runs]):>26}{spread(clean):>26}"
        )


if __name__ == "__main__":
    main()
