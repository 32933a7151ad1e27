"""Enqueue throughput on the local PostgreSQL: one job per transaction, and in bulk.

Run on demand, never in the test suite (machines here are shared and noisy):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python benchmarks/enqueue.py [-n 20000] [--batch 5000] [--repeat 3]

It migrates the database, inserts jobs of type ``benchmark.noop`` and
deletes them afterwards. Results go in docs/benchmarks.md.

``--under-span`` runs every enqueue under a current OpenTelemetry span
(with the SDK's tracer provider, no exporter): each call then makes its
``send`` span and stores its trace context, the cost of tracing. Without
it, and without a current span, enqueue does no tracing work at all.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "example_project"), str(ROOT)]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
# Production-like: with DEBUG on, Django keeps every query in memory.
os.environ.setdefault("DJANGO_DEBUG", "0")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from django_durable_jobs import enqueue, enqueue_many  # noqa: E402
from django_durable_jobs.models import Job  # noqa: E402

TYPE = "benchmark.noop"


def single(n: int) -> float:
    """``enqueue`` n times in autocommit mode: one transaction per job."""
    start = time.perf_counter()
    for i in range(n):
        enqueue(TYPE, {"i": i})
    return n / (time.perf_counter() - start)


def single_keyed(n: int) -> float:
    """The same with an idempotency key on each job."""
    stamp = time.time_ns()
    start = time.perf_counter()
    for i in range(n):
        enqueue(TYPE, {"i": i}, idempotency_key=f"bench-{stamp}-{i}")
    return n / (time.perf_counter() - start)


def bulk(n: int, batch: int, keyed: bool) -> float:
    """``enqueue_many`` in batches of ``batch``, each its own transaction."""
    stamp = time.time_ns()
    jobs: list[dict[str, object]] = [{"type": TYPE, "payload": {"i": i}} for i in range(n)]
    if keyed:
        for i, item in enumerate(jobs):
            item["idempotency_key"] = f"bulk-{stamp}-{i}"
    start = time.perf_counter()
    for offset in range(0, n, batch):
        enqueue_many(jobs[offset : offset + batch])
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000, help="jobs per run (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=5_000, help="enqueue_many batch size")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement")
    parser.add_argument(
        "--under-span",
        action="store_true",
        help="enqueue under a current OpenTelemetry span (needs opentelemetry-sdk)",
    )
    args = parser.parse_args()
    spans = under_span() if args.under_span else contextlib.nullcontext()

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        print(cursor.fetchone()[0])
    print(f"N={args.n} batch={args.batch} repeat={args.repeat} (median, best)")
    with spans:
        measure(args)


def measure(args: argparse.Namespace) -> None:
    # Warm up: the connection, the plan caches, the table's pages.
    single(1_000)
    bulk(5_000, args.batch, keyed=True)
    Job.objects.filter(type=TYPE).delete()
    try:
        for name, run in (
            ("enqueue, one job per transaction", lambda: single(args.n)),
            ("enqueue with idempotency key", lambda: single_keyed(args.n)),
            (f"enqueue_many, batches of {args.batch}", lambda: bulk(args.n, args.batch, False)),
            ("enqueue_many, same, with keys", lambda: bulk(args.n, args.batch, True)),
        ):
            rates = []
            for _ in range(args.repeat):
                rates.append(run())
                Job.objects.filter(type=TYPE).delete()
            print(f"{name:<40} {statistics.median(rates):>10,.0f} jobs/s  (best {max(rates):,.0f})")
    finally:
        Job.objects.filter(type=TYPE).delete()


def under_span() -> contextlib.AbstractContextManager[object]:
    """A current span from the SDK's tracer provider, whose spans go nowhere."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    print("under a current span (OpenTelemetry SDK, no exporter)")
    return trace.get_tracer("benchmark").start_as_current_span("benchmark")


if __name__ == "__main__":
    main()
