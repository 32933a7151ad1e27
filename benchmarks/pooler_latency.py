"""Enqueue-to-start latency through PgBouncer in transaction mode, with and without LISTEN_DATABASE.

Run on demand, never in the test suite:

    .venv/bin/python benchmarks/pooler_latency.py [--database-url URL] [--rate 50]
        [--seconds 10] [--poll-interval 2] [--repeat 1] [--quiet-timeout 20]

Starts a PgBouncer (the Debian package ``pgbouncer``; ``tests/e2e/pgbouncer.py``
starts it: transaction mode, 127.0.0.1, a free port) in front of the server
of ``--database-url`` (a dedicated database, ``durable_jobs_bench`` by
default, created when missing; its job table is truncated before each run).
The benchmark process enqueues through PgBouncer, as a web process behind
it would: single ``enqueue()`` calls (autocommit) at ``--rate`` per second
for ``--seconds``, paced by the clock, after a second of warm-up. One
``runjobworker`` (default settings but ``--poll-interval``) serves them, in
three setups:

- ``direct``: the worker connects to PostgreSQL directly (the baseline);
- ``pgbouncer``: the worker's DATABASE_URL goes through PgBouncer, nothing
  else: LISTEN hears nothing, jobs wait for the poll;
- ``pgbouncer + LISTEN_DATABASE``: the same, with the example project's
  ``DIRECT_DATABASE_URL`` set to the direct URL, so LISTEN_DATABASE is a
  direct connection.

Latency is ``started_at - created_at`` per job, both database timestamps.
Each setup also says whether the worker logged the warning that
notifications are not arriving.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]

import worker as bench  # noqa: E402  (benchmarks/worker.py)

from tests.e2e.pgbouncer import PACKAGE, PgBouncer, find_binary  # noqa: E402

NOT_ARRIVING = "Notifications are not arriving"


def through(bouncer: PgBouncer, url: str) -> str:
    """``url`` with PgBouncer's host and port."""
    parts = urlsplit(url)
    user = parts.username or "postgres"
    return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{bouncer.port}"))


def run(
    setup: str, env: dict[str, str], rate: float, seconds: float, poll: float, quiet: float
) -> dict[str, float | bool]:
    bench.reset()
    with tempfile.TemporaryFile() as log:
        command = [*bench.worker_command(None, burst=False), "--poll-interval", f"{poll:g}"]
        proc = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            # Up when a first job ran; then a second of warm-up.
            bench.paced_enqueue(rate, 1, "start")
            bench.wait_all_done()
            bench.paced_enqueue(rate, int(rate), "warmup")
            bench.wait_all_done()
            time.sleep(0.5)
            bench.wait_until_quiet(timeout=quiet)
            bench.paced_enqueue(rate, int(rate * seconds), "measure")
            bench.wait_all_done()
            ((p50, p90, p99, mx, mean, count),) = bench.sql(
                "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d),"
                " percentile_cont(0.9) WITHIN GROUP (ORDER BY d),"
                " percentile_cont(0.99) WITHIN GROUP (ORDER BY d),"
                " max(d), avg(d), count(*)"
                " FROM (SELECT extract(epoch FROM started_at - created_at) * 1000 AS d"
                "       FROM durable_jobs_job WHERE payload->>'phase' = 'measure') AS latencies"
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
        log.seek(0)
        output = log.read().decode(errors="replace")
    if code:
        raise RuntimeError(f"{setup}: the worker exited {code}:\n{output}")
    return {
        "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(mx),
        "mean": float(mean), "count": float(count),
        "warned": NOT_ARRIVING in output,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=bench.DEFAULT_URL, help="default: %(default)s")
    parser.add_argument("--rate", type=float, default=50.0, help="jobs per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each run enqueues")
    parser.add_argument("--poll-interval", type=float, default=2.0, help="the worker's")
    parser.add_argument("--repeat", type=int, default=1, help="runs per setup")
    parser.add_argument(
        "--quiet-timeout", type=float, default=20.0,
        help="seconds to wait for a quiet machine before each run (default: %(default)s)",
    )  # fmt: skip
    args = parser.parse_args()
    # A SIGTERM runs the finally below: PgBouncer and its directory go.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

    binary = find_binary()
    if binary is None:
        sys.exit(f"pgbouncer not found: install the Debian package '{PACKAGE}'")
    direct = args.database_url
    bench.ensure_database(direct)
    parts = urlsplit(direct)
    bouncer = PgBouncer(
        binary,
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        user=parts.username or "postgres",
        password=parts.password or "",
    )
    bouncer.start()
    try:
        pooled = through(bouncer, direct)
        bench.setup_django(pooled)  # the benchmark enqueues through PgBouncer
        ((version,),) = bench.sql("SELECT version()")
        print(version)
        print(f"{bouncer.version()}, transaction mode")
        print(f"{os.cpu_count()} CPUs, {bench.loadavg()}, python {sys.version.split()[0]}")
        setups = {
            "direct": bench.worker_env(direct),
            "pgbouncer": bench.worker_env(pooled),
            "pgbouncer + LISTEN_DATABASE": bench.worker_env(pooled),
        }
        for env in setups.values():
            env.pop("DIRECT_DATABASE_URL", None)
        setups["pgbouncer + LISTEN_DATABASE"]["DIRECT_DATABASE_URL"] = direct
        print(
            f"\n== enqueue() through PgBouncer at {args.rate:g}/s for {args.seconds:g}s, one "
            f"worker, --poll-interval {args.poll_interval:g}; started_at - created_at in ms"
        )
        keys = ["p50", "p90", "p99", "max", "mean"]
        print(f"{'setup':<30}" + "".join(f"{k:>10}" for k in keys) + f"{'jobs':>7}  warning")
        for name, env in setups.items():
            runs = [
                run(name, env, args.rate, args.seconds, args.poll_interval, args.quiet_timeout)
                for _ in range(args.repeat)
            ]
            shown = {k: statistics.median(float(r[k]) for r in runs) for k in [*keys, "count"]}
            warned = any(r["warned"] for r in runs)
            print(
                f"{name:<30}"
                + "".join(f"{shown[k]:>10.1f}" for k in keys)
                + f"{shown['count']:>7.0f}  {'yes' if warned else 'no'}",
                flush=True,
            )
        print(f"({'median of ' + str(args.repeat) + ' runs; ' if args.repeat > 1 else ''}"
              f"{bench.loadavg()})")  # fmt: skip
    finally:
        bench.reset()
        from django.db import connections

        connections.close_all()
        bouncer.stop()


if __name__ == "__main__":
    main()
