"""A soak: a steady load for a long time with retention running; does anything drift?

Run on demand, never in the test suite (issue 27's proof over time):

    pip install -e '.[benchmark]'      # matplotlib, for the plot
    .venv/bin/python benchmarks/soak.py [--minutes 30] [--rate 2000] [--workers 2]
        [--concurrency 8] [--retention 1m] [--partition 1m] [--vacuum-every 10]
        [--sample 10] [--png docs/images/soak.png] [--json soak.json] [--database-url URL]

What a queue that runs for months must not do is drift: tables that grow
although retention deletes as much as arrives, dead tuples that pile up,
claims that slow as the history churns, latency that creeps. So this runs
``--workers`` real ``runjobworker`` processes (the example project with
``benchmarks/bench_settings.py``, finished jobs kept ``--retention`` in ranges
of ``--partition`` (``HISTORY_PARTITION``): what the
workers' own pruning then has to delete) while one producer enqueues
``example.noop`` jobs at ``--rate`` a second (``enqueue_many`` every 100 ms,
paced by the clock), and every ``--sample`` seconds reads:

- the job tables' size (table, indexes and TOAST, every ``durable_jobs_*``
  table) and their dead tuples (``pg_stat_user_tables``);
- jobs completed in the interval (throughput) and the p50/p99 of
  ``started_at - created_at`` of those jobs (latency, both database clocks);
- the backlog (pending jobs that are due, counted up to a cap) and how far
  the producer fell behind its schedule.

The verdict compares the fifth minute onward (or the second half of a
shorter run): for each series, the mean of its last fifth against its first
fifth. The plot has a panel per series. A dedicated database,
``durable_jobs_soak`` by default, truncated at the start.

PostgreSQL here runs with autovacuum off (the CI machine's configuration):
the soak VACUUMs the active partition every ``--vacuum-every`` seconds
itself, as autovacuum would on a production server; the dead tuples then
show what pruning and the claims and outcomes leave between two of them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import worker as bench  # benchmarks/worker.py: the database, Django, the worker command

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/durable_jobs_soak"
#: Pending jobs counted exactly up to this many (a backlog past it reads as "more").
BACKLOG_CAP = 1_000_000
TICK = 0.1


class Producer(threading.Thread):
    """``rate`` jobs a second in batches every ``TICK``, paced by the clock, until stopped."""

    def __init__(self, rate: float) -> None:
        super().__init__(name="producer", daemon=True)
        self.rate = rate
        self.enqueued = 0
        self.behind = 0.0  # seconds behind schedule at the last batch
        self.stopped = threading.Event()

    def run(self) -> None:
        from django.db import connection

        from django_durable_jobs import enqueue_many

        start = time.monotonic()
        try:
            while not self.stopped.is_set():
                due = int((time.monotonic() - start) * self.rate) - self.enqueued
                # More than one tick's jobs due: the enqueue itself cannot keep the rate.
                self.behind = max(0.0, due / self.rate - TICK)
                if due > 0:
                    batch = min(due, int(self.rate * 5) or 1)
                    enqueue_many([{"type": bench.TYPE, "payload": {}} for _ in range(batch)])
                    self.enqueued += batch
                self.stopped.wait(TICK)
        finally:
            connection.close()


def sample(since: float, until: float) -> dict[str, float]:
    """What the database says of the interval [since, until) (epoch seconds)."""
    ((size, dead, live),) = bench.sql(
        "SELECT sum(pg_total_relation_size(relid)), sum(n_dead_tup), sum(n_live_tup)"
        " FROM pg_stat_user_tables WHERE relname LIKE 'durable\\_jobs\\_%%'"
    )
    ((done, p50, p99),) = bench.sql(
        "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY d),"
        " percentile_cont(0.99) WITHIN GROUP (ORDER BY d)"
        " FROM (SELECT extract(epoch FROM started_at - created_at) * 1000 AS d"
        "       FROM durable_jobs_job WHERE status = 'completed'"
        "       AND completed_at >= to_timestamp(%s) AND completed_at < to_timestamp(%s)) AS l",
        [since, until],
    )
    ((backlog,),) = bench.sql(
        "SELECT count(*) FROM (SELECT 1 FROM durable_jobs_job WHERE status = 'pending'"
        " AND available_at <= now() LIMIT %s) AS p",
        [BACKLOG_CAP],
    )
    return {
        "size_mb": float(size or 0) / 2**20,
        "dead_tuples": float(dead or 0),
        "live_tuples": float(live or 0),
        "throughput": float(done) / (until - since),
        "p50_ms": float(p50 or 0.0),
        "p99_ms": float(p99 or 0.0),
        "backlog": float(backlog),
    }


def drift(rows: list[dict[str, float]], key: str, settle_minutes: float) -> dict[str, float]:
    """The series' mean over its last fifth against its first fifth, after settling."""
    settled = [r[key] for r in rows if r["minute"] >= settle_minutes]
    if len(settled) < 5:
        return {"first": float("nan"), "last": float("nan"), "ratio": float("nan")}
    fifth = max(1, len(settled) // 5)
    first, last = statistics.fmean(settled[:fifth]), statistics.fmean(settled[-fifth:])
    return {"first": first, "last": last, "ratio": last / first if first else float("inf")}


SERIES = [
    ("size_mb", "job tables, MB"),
    ("dead_tuples", "dead tuples"),
    ("throughput", "completed jobs/s"),
    ("p99_ms", "p99 start latency, ms"),
    ("backlog", "due pending jobs"),
]


def plot(rows: list[dict[str, float]], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(SERIES), 1, figsize=(9, 2.2 * len(SERIES)), sharex=True)
    minutes = [r["minute"] for r in rows]
    for ax, (key, label) in zip(axes, SERIES, strict=True):
        ax.plot(minutes, [r[key] for r in rows], linewidth=1.2)
        if key == "throughput":
            ax.axhline(args.rate, color="grey", linestyle="--", linewidth=0.8, label="offered")
            ax.legend(loc="lower right", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.axvline(args.settle, color="grey", linestyle=":", linewidth=0.8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes")
    fig.suptitle(
        f"Soak: {args.rate:g} jobs/s for {args.minutes:g} min, {args.workers} x -c "
        f"{args.concurrency}, retention {args.retention}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


class Vacuumer(threading.Thread):
    """VACUUM the job table's active partition every ``every`` seconds, as autovacuum
    would on a production server (autovacuum is off on this machine's PostgreSQL).

    The active partition is where the claims and outcomes leave dead tuples;
    the range partitions are written once and dropped whole.
    """

    def __init__(self, url: str, every: float) -> None:
        super().__init__(daemon=True)
        self.url, self.every, self.stopped = url, every, threading.Event()

    def run(self) -> None:
        import psycopg

        if self.every <= 0:
            return
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stopped.wait(self.every):
                conn.execute("VACUUM durable_jobs_job_active")


def run(args: argparse.Namespace) -> list[dict[str, float]]:
    env = bench.worker_env(args.database_url)
    env["BENCH_RETENTION"] = json.dumps({"completed": args.retention, "cancelled": args.retention,
                                         "dead": args.retention})  # fmt: skip
    env["BENCH_HISTORY_PARTITION"] = args.partition
    bench.sql("TRUNCATE durable_jobs_job CASCADE")
    command = [*bench.worker_command(args.concurrency, burst=False)]
    workers = [subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
               for _ in range(args.workers)]  # fmt: skip
    rows: list[dict[str, float]] = []
    producer = Producer(args.rate)
    vacuumer = Vacuumer(args.database_url, args.vacuum_every)
    try:
        bench.wait_for_listener()
        producer.start()
        vacuumer.start()
        start = last = time.time()
        end = start + args.minutes * 60
        while (now := time.time()) < end:
            time.sleep(max(0.0, min(last + args.sample, end) - now))
            now = time.time()
            row = {"minute": (now - start) / 60, **sample(last, now),
                   "enqueued": float(producer.enqueued), "behind_s": producer.behind}  # fmt: skip
            rows.append(row)
            last = now
            print(
                f"{row['minute']:6.2f} min  {row['throughput']:7.0f} jobs/s  p50 "
                f"{row['p50_ms']:7.1f} p99 {row['p99_ms']:8.1f} ms  {row['size_mb']:8.1f} MB  "
                f"dead {row['dead_tuples']:>10,.0f}  backlog {row['backlog']:>9,.0f}  "
                f"producer behind {row['behind_s']:.1f}s",
                flush=True,
            )
            for proc in workers:
                if proc.poll() is not None:
                    raise RuntimeError(f"a worker exited ({proc.returncode}) during the soak")
    finally:
        producer.stopped.set()
        producer.join(30)
        vacuumer.stopped.set()
        vacuumer.join(60)
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            proc.wait(120)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=2000.0, help="jobs enqueued a second")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--retention", default="1m", help="how long finished jobs are kept")
    parser.add_argument(
        "--partition", default="1m", help="HISTORY_PARTITION: the range of one partition"
    )
    parser.add_argument(
        "--vacuum-every", type=float, default=10.0,
        help="seconds between VACUUMs of the active partition (0: none), as autovacuum would",
    )  # fmt: skip
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument(
        "--settle", type=float, default=None,
        help="minutes ignored by the verdict (default 5, or half a short run)",
    )  # fmt: skip
    parser.add_argument("--png", type=Path, default=None, help="write the plot here")
    parser.add_argument("--json", type=Path, default=None, help="write the samples here")
    args = parser.parse_args()
    # A SIGTERM (an impatient operator's kill) stops the workers too: SystemExit runs
    # run()'s finally, which the signal's default action would skip.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.settle is None:
        args.settle = 5.0 if args.minutes >= 10 else args.minutes / 2
    # The migration creates the first ranges: of the soak's HISTORY_PARTITION too.
    os.environ["BENCH_HISTORY_PARTITION"] = args.partition
    bench.ensure_database(args.database_url)
    bench.setup_django(args.database_url)
    print(f"== Soak: {args.rate:g} jobs/s for {args.minutes:g} min, {args.workers} worker(s) x "
          f"-c {args.concurrency}, retention {args.retention} ({bench.loadavg()})")  # fmt: skip
    rows = run(args)
    print(f"\n== Drift from minute {args.settle:g}: mean of the last fifth / the first fifth")
    verdict = {key: drift(rows, key, args.settle) for key, _ in SERIES}
    for key, label in SERIES:
        d = verdict[key]
        print(f"{label:>24}: {d['first']:12,.1f} -> {d['last']:12,.1f}  ({d['ratio']:.2f}x)")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "samples": rows, "drift": verdict}, indent=1))  # fmt: skip
    if args.png:
        plot(rows, args, args.png)


if __name__ == "__main__":
    main()
