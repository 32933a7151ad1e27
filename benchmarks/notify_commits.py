"""What NOTIFY costs commits: many clients enqueueing at once, notifications on and off.

Run on demand, never in the test suite (machines here are shared and noisy):

    .venv/bin/python benchmarks/notify_commits.py [--database-url URL] [--clients 64]
        [--seconds 15] [--rounds 3] [--listeners 1]

A transaction that NOTIFYs takes a lock at commit that every other notifying
transaction of the server waits for (PostgreSQL's ``PreCommit_Notify``: one
notifier at a time appends to the queue), so notifications can serialise the
commits of many concurrent writers. This measures it on the enqueue statement
itself: pgbench runs ``--clients`` connections, each repeating the package's
one-job ``insert_job`` statement (one job per transaction, as ``enqueue()``
in autocommit does), in three variants, alternating over ``--rounds`` so
drift on a shared machine hits each alike:

- ``in``: the NOTIFY inside the inserting transaction (``pg_notify`` of the
  job's queue in the INSERT's RETURNING, as enqueue does);
- ``after``: the INSERT without its NOTIFY, then the ``notify_queues``
  statement in a transaction of its own (a pgbench script of two lines is
  two transactions): the design measured for issue 26 and not kept
  (docs/benchmarks.md, "NOTIFY at scale");
- ``off``: the INSERT alone, no notification at all.

pgbench counts a script run as one "transaction": for ``after`` that is
one job and its NOTIFY, so the three rates are jobs enqueued per second. ``--listeners``
connections LISTEN on the channel meanwhile, as workers do (PostgreSQL keeps
notifications for them, which is part of the cost).

The database is a throwaway one (``durable_jobs_notify_bench`` by default),
created, migrated and dropped. Prints jobs per second per variant (pgbench's
tps, median of the rounds) and each one's cost against ``off``; results go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "example_project"), str(ROOT)]

PGBENCH_CANDIDATES = sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"), reverse=True)
CHANNEL = "durable_jobs_bench_notify"


def pgbench_path() -> str:
    found = shutil.which("pgbench") or next((str(p) for p in PGBENCH_CANDIDATES), None)
    if not found:
        sys.exit("pgbench not found (Debian: postgresql-client or the server package)")
    return found


VARIANTS = ("in", "after", "off")
# Before issue 26, insert_job's RETURNING ended with the job's NOTIFY.
OLD_RETURNING = "RETURNING id, available_at, created_at, pg_notify(%(channel)s, queue);"


def script(variant: str) -> str:
    """The package's enqueue statements as a pgbench script, parameters made literal."""
    from django_durable_jobs.db.queries import QUERIES

    values = {
        "id": "gen_random_uuid()",
        "type": "'bench.noop'",
        "queue": "'default'",
        "payload": "'{}'",
        "key": "NULL",
        "priority": "0",
        "max_attempts": "3",
        "run_at": "NULL",
        "delay_us": "NULL",
        "timeout": "NULL",
        "concurrency_key": "NULL",
        "trace_context": "NULL",
        "channel": f"'{CHANNEL}'",
    }
    insert = QUERIES["insert_job"].rstrip().rstrip(";")
    if "pg_notify" in insert:  # the INSERT alone; ``in`` puts its NOTIFY back
        insert = insert.replace("pg_notify(%(channel)s, queue)", "NULL")
    statements = [insert]
    if variant == "in":
        statements = [re.sub(r"RETURNING .*$", OLD_RETURNING.rstrip(";"), insert, flags=re.S)]
    elif variant == "after":
        values["queues"] = "ARRAY['default']"
        statements.append(QUERIES["notify_queues"].rstrip().rstrip(";"))
    # pgbench reads one statement per line unless it ends with a backslash.
    return "".join(
        " ".join(re.sub(r"%\((\w+)\)s", lambda m: values[m.group(1)], sql).split()) + ";\n"
        for sql in statements
    )


def run_pgbench(url: str, path: Path, clients: int, seconds: int) -> float:
    out = subprocess.run(
        [
            pgbench_path(), "-n", "-M", "simple", "-c", str(clients), "-j", "2",
            "-T", str(seconds), "-f", str(path), url,
        ],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    match = re.search(r"tps = ([\d.]+)", out.stdout)
    if not match:
        sys.exit(f"pgbench printed no tps:\n{out.stdout}\n{out.stderr}")
    return float(match.group(1))


def listen(url: str, stop: threading.Event) -> None:
    """A worker's LISTEN: notifications are kept for it and read as they come."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        while not stop.is_set():
            for _ in conn.notifies(timeout=0.2, stop_after=10_000):
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--database", default="durable_jobs_notify_bench")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--listeners", type=int, default=1)
    args = parser.parse_args()

    import psycopg

    server = args.database_url.rsplit("/", 1)[0]
    url = f"{server}/{args.database}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{args.database}"')
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    os.environ.setdefault("DJANGO_DEBUG", "0")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SHOW max_connections")
        version = conn.execute("SHOW server_version").fetchone()
    print(
        f"PostgreSQL {version[0] if version else '?'}, {os.cpu_count()} CPUs, {args.clients} "
        f"clients, {args.seconds} s a run, {args.listeners} listener(s)"
    )

    stop = threading.Event()
    listeners = [
        threading.Thread(target=listen, args=(url, stop), daemon=True)
        for _ in range(args.listeners)
    ]
    for thread in listeners:
        thread.start()
    results: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for variant in VARIANTS:
            paths[variant] = Path(tmp, f"notify_{variant}.sql")
            paths[variant].write_text(script(variant))
        try:
            for round_ in range(args.rounds):
                # Rotate the order, so no variant always runs first.
                order = VARIANTS[round_ % 3 :] + VARIANTS[: round_ % 3]
                for variant in order:
                    tps = run_pgbench(url, paths[variant], args.clients, args.seconds)
                    results[variant].append(tps)
                    print(f"round {round_ + 1}: notify {variant:5} {tps:,.0f} jobs/s", flush=True)
        finally:
            stop.set()
            for thread in listeners:
                thread.join(timeout=5)
            with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
    medians = {variant: statistics.median(results[variant]) for variant in VARIANTS}
    off = medians["off"]
    for variant in VARIANTS:
        runs = ", ".join(f"{tps:,.0f}" for tps in results[variant])
        print(
            f"notify {variant:5}: median {medians[variant]:,.0f} jobs/s (runs {runs}); "
            f"notifications cost {100 * (1 - medians[variant] / off):.1f} % against off"
        )


if __name__ == "__main__":
    main()
