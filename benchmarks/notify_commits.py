"""What NOTIFY costs commits: many clients enqueueing at once, notifications on and off.

Run on demand, never in the test suite (machines here are shared and noisy):

    .venv/bin/python benchmarks/notify_commits.py [--database-url URL] [--clients 64]
        [--seconds 15] [--rounds 3] [--listeners 1] [--worker]

A transaction that NOTIFYs takes a lock at commit that every other notifying
transaction of the server waits for (PostgreSQL's ``PreCommit_Notify``: one
notifier at a time appends to the queue), so notifications can serialise the
commits of many concurrent writers. This measures it on the enqueue statement
itself: pgbench runs ``--clients`` connections, each repeating the package's
one-job ``insert_job`` statement (one job per transaction, as ``enqueue()``
in autocommit does), in variants alternating over ``--rounds`` so drift on a
shared machine hits each alike:

- ``in``: every enqueue NOTIFYs its queue (``pg_notify`` in the INSERT's
  RETURNING), as before migration 0006;
- ``asleep``: today's statement, which NOTIFYs only while a worker of the
  queue sleeps (``durable_jobs_notify_sleepers()``), with a sleeping
  worker's row in ``durable_jobs_listener``: it notifies, and looks first;
- ``awake``: today's statement with an awake worker's row (a busy worker,
  ``worker/wakefulness.py``): it looks, and sends nothing;
- ``off``: the INSERT alone, no notification and no look.

With ``--worker``, a real ``runjobworker --concurrency 8`` (bench settings)
runs the jobs meanwhile, on the workers' own channel, and decides itself
whether it sleeps: the variants are then ``in``, ``today`` (today's statement,
the worker's own rows) and ``off``.

``--listeners`` connections LISTEN on the channel meanwhile, as workers do
(PostgreSQL keeps notifications for them, which is part of the cost).

The database is a throwaway one (``durable_jobs_notify_bench`` by default),
created, migrated and dropped. Prints jobs per second per variant (pgbench's
tps, median of the rounds) and each one's cost against ``off``; results go in
docs/benchmarks.md.
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


VARIANTS = ("in", "asleep", "awake", "off")
WORKER_VARIANTS = ("in", "today", "off")
# Before migration 0006, insert_job's RETURNING ended with the job's NOTIFY.
OLD_RETURNING = "RETURNING id, available_at, created_at, pg_notify(%(channel)s, queue)"
TODAY_CALL = "durable_jobs_notify_sleepers(%(channel)s, queue)"
WORKER_CHANNEL = "durable_jobs"
WORKER_TYPE = "example.noop"


def script(variant: str, *, channel: str = CHANNEL, job_type: str = "bench.noop") -> str:
    """The package's enqueue statement as a pgbench script, parameters made literal."""
    from django_durable_jobs.db.queries import QUERIES

    values = {
        "id": "gen_random_uuid()",
        "type": f"'{job_type}'",
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
        "channel": f"'{channel}'",
    }
    insert = QUERIES["insert_job"].rstrip().rstrip(";")
    if TODAY_CALL not in insert:
        sys.exit("insert_job no longer calls durable_jobs_notify_sleepers(): update this script")
    if variant == "in":
        insert = re.sub(r"RETURNING .*$", OLD_RETURNING, insert, flags=re.S)
    elif variant == "off":
        insert = insert.replace(TODAY_CALL, "NULL")
    # pgbench reads one statement per line unless it ends with a backslash.
    return " ".join(re.sub(r"%\((\w+)\)s", lambda m: values[m.group(1)], insert).split()) + ";\n"


def prepare_run(url: str, variant: str) -> None:
    """Each run starts alike: an empty job table, after a checkpoint; for ``asleep``
    and ``awake``, one worker's row saying so, otherwise none."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE durable_jobs_job_active")
        conn.execute("CHECKPOINT")
        conn.execute("DELETE FROM durable_jobs_listener")
        if variant in ("asleep", "awake"):
            conn.execute(
                "INSERT INTO durable_jobs_listener (worker_id, queues, sleeping) "
                "VALUES ('bench', NULL, %s)",
                [variant == "asleep"],
            )


def start_worker(url: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "bench_settings",
        "DJANGO_DEBUG": "0",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT / "benchmarks"), str(ROOT / "example_project"), str(ROOT)]
        ),
    }
    return subprocess.Popen(
        [sys.executable, str(ROOT / "example_project" / "manage.py"), "runjobworker",
         "--concurrency", "8"],
        env=env,
    )  # fmt: skip


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


def listen(url: str, channel: str, stop: threading.Event) -> None:
    """A worker's LISTEN: notifications are kept for it and read as they come."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"LISTEN {channel}")
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
    parser.add_argument(
        "--worker", action="store_true", help="a real worker runs the jobs meanwhile"
    )
    args = parser.parse_args()

    import psycopg

    server = args.database_url.rsplit("/", 1)[0]
    url = f"{server}/{args.database}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{args.database}"')
    os.environ["DATABASE_URL"] = url
    sys.path.insert(0, str(ROOT / "benchmarks"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")
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
        + (", a worker running the jobs" if args.worker else "")
    )

    variants = WORKER_VARIANTS if args.worker else VARIANTS
    stop = threading.Event()
    listeners = [
        threading.Thread(
            target=listen,
            args=(url, WORKER_CHANNEL if args.worker else CHANNEL, stop),
            daemon=True,
        )
        for _ in range(args.listeners)
    ]
    for thread in listeners:
        thread.start()
    worker = start_worker(url) if args.worker else None
    results: dict[str, list[float]] = {variant: [] for variant in variants}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for variant in variants:
            paths[variant] = Path(tmp, f"notify_{variant}.sql")
            paths[variant].write_text(
                script(variant, channel=WORKER_CHANNEL, job_type=WORKER_TYPE)
                if args.worker
                else script(variant)
            )
        try:
            for round_ in range(args.rounds):
                # Rotate the order, so no variant always runs first.
                shift = round_ % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    if worker is None:
                        prepare_run(url, variant)
                    tps = run_pgbench(url, paths[variant], args.clients, args.seconds)
                    results[variant].append(tps)
                    print(f"round {round_ + 1}: notify {variant:6} {tps:,.0f} jobs/s", flush=True)
        finally:
            stop.set()
            if worker is not None:
                worker.terminate()
                worker.wait(60)
            for thread in listeners:
                thread.join(timeout=5)
            with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
    medians = {variant: statistics.median(results[variant]) for variant in variants}
    off = medians["off"]
    for variant in variants:
        runs = ", ".join(f"{tps:,.0f}" for tps in results[variant])
        print(
            f"notify {variant:6}: median {medians[variant]:,.0f} jobs/s (runs {runs}); "
            f"notifications cost {100 * (1 - medians[variant] / off):.1f} % against off"
        )


if __name__ == "__main__":
    main()
