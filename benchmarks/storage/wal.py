"""WAL bytes per job of each layout, counting only this database's records (pg_waldump).

Run on demand, as root or the postgres user on the server's machine (it reads
pg_wal), never in the test suite:

    .venv/bin/python benchmarks/storage/wal.py [--database-url URL] [--layouts A,C,B,BP]
        [--jobs 5000] [--repeats 3]

pg_current_wal_lsn() deltas count every database's WAL, and on a shared
server other sessions write during a run. This runs one client of
lifecycle.py for ``--jobs`` jobs (enqueue 10, claim 10, complete), right
after a CHECKPOINT (so each run pays the same full-page images), then reads
that stretch of WAL with pg_waldump and adds up the records that touch this
database's relations, with the commit records of their transactions.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from typing import Any

import lifecycle
from layouts import DEFAULT_URL, LAYOUTS, Layout, drop_database, ensure_template, make_layout_db

WALDUMP = "/usr/lib/postgresql/15/bin/pg_waldump"
RECORD = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*(\d+),")


def database_wal(wal_dir: str, start: str, end: str, dboid: int) -> tuple[int, int]:
    """(bytes of this database's records, bytes of all records) between two LSNs."""
    out = subprocess.run(
        [WALDUMP, "-p", wal_dir, "-s", start, "-e", end],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    mine = f"/{dboid}/"
    xids: set[str] = set()
    records = []
    for line in out.splitlines():
        m = RECORD.search(line)
        if not m:
            continue
        size, xid = int(m.group(1)), m.group(2)
        ours = f"rel 1663{mine}" in line
        if ours and xid != "0":
            xids.add(xid)
        records.append((size, xid, ours))
    total = sum(size for size, _, _ in records)
    return sum(size for size, xid, ours in records if ours or xid in xids), total


def one_run(url: str, layout: Layout, jobs: int) -> tuple[float, float]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        lifecycle.reset(conn, layout)  # ends with a CHECKPOINT
        (wal_dir,) = conn.execute("SELECT current_setting('data_directory')").fetchone()
        (dboid,) = conn.execute(
            "SELECT oid FROM pg_database WHERE datname = current_database()"
        ).fetchone()
        cur = conn.cursor()
        (start,) = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        done = 0
        held: list[tuple[Any, Any]] = []
        while done < jobs:
            lifecycle.enqueue(cur, layout, lifecycle.BATCH)
            cur.execute(layout.claim_sql, {**lifecycle.CLAIM, "limit": lifecycle.BATCH})
            held += [(row[0], row[6]) for row in cur.fetchall()]
            if len(held) >= layout.complete_batch:
                done += lifecycle.complete(cur, layout, held)
                held = []
        conn.execute(f"VACUUM {layout.hot}")  # what the vacuumer would write
        (end,) = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
    ours, total = database_wal(f"{wal_dir}/pg_wal", str(start), str(end), int(dboid))
    return ours / done, total / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL, help="default: %(default)s")
    parser.add_argument("--layouts", default="A,C,B,BP")
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ensure_template(args.database_url)
    names = args.layouts.split(",")
    urls = {name: make_layout_db(args.database_url, LAYOUTS[name], "_wal") for name in names}
    results: dict[str, list[float]] = {name: [] for name in names}
    try:
        for repeat in range(args.repeats):
            for name in names if repeat % 2 == 0 else names[::-1]:
                ours, total = one_run(urls[name], LAYOUTS[name], args.jobs)
                if not total:
                    # A checkpoint recycled the segments before pg_waldump read them.
                    print(f"repeat {repeat + 1} {name:>2}: pg_waldump read nothing, left out")
                    continue
                results[name].append(ours)
                print(
                    f"repeat {repeat + 1} {name:>2}: {ours:,.0f} WAL B/job of this database "
                    f"({total:,.0f} B/job in the whole cluster meanwhile)",
                    flush=True,
                )
    finally:
        for url in urls.values():
            drop_database(url)
    for name, values in results.items():
        if values:
            print(f"{name:<3} WAL B/job {lifecycle.spread(values)}")


if __name__ == "__main__":
    main()
