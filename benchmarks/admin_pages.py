"""How fast the admin's pages answer on a job table of 10,000,000 rows (issue 15).

Run on demand, never in the test suite (it writes several GB and takes minutes):

    .venv/bin/python benchmarks/admin_pages.py [--database-url URL] [--rows 10000000]
        [--repeat 5] [--refill]

The database is a dedicated one, ``durable_jobs_admin_bench`` by default, created
when missing and migrated. Check the free disk first (``df -h``): 10 M rows take
about 8 GB with their indexes.

Fill (skipped when the table already holds ``--rows`` jobs, unless
``--refill``): ``INSERT ... SELECT generate_series`` in chunks of 500,000,
jobs created over the last 30 days in time order with time-ordered ids, in
four queues (default 60 %, emails 25 %, reports 10 %, webhooks 5 %) and
statuses: completed 97.5 %, pending 1.5 % (three priorities, a tenth of
them delayed into the next hour), dead 0.5 % (with an error and its
history), waiting 0.3 %, cancelled 0.2 %; plus 200 running jobs, a queue
``tiny`` of 12 pending jobs, 20 workers (4 stale), the per-minute counts of
the last two hours for every queue, and the queue ``reports`` paused (the
Queues page then counts what the pause holds back). The finished jobs land
in a history range a day (``benchmarks/history.py``), the rest in the active
partition. Then ``VACUUM ANALYZE``, as autovacuum would have done on a table
that old.

Timing: Django's test ``Client``, logged in as a superuser, in this process
(no HTTP server: the figure is Django's and PostgreSQL's time). Each page
is fetched once (the first figure, caches cold for that page) and then
``--repeat`` times (the median and the slowest). Pages: the Queues page,
the Workers page, the job list (plain; filtered by status=dead; by queue;
by queue and status, the target of a Queues page count), the Dead jobs
list, a dead job's page, and the confirmation page of a pause.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import history
from worker import ensure_database, loadavg, setup_django, sql  # benchmarks/ is on sys.path

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/durable_jobs_admin_bench"
CHUNK = 500_000
TYPE = "bench.admin"

#: The job columns of a row of the fill, for row number g of --rows.
FILL = """
INSERT INTO durable_jobs_job (
    id, type, queue, payload, status, priority, attempts, max_attempts,
    available_at, created_at, updated_at, started_at, completed_at,
    last_error, errors, result, waiting_on, parent_count
)
SELECT
    -- Time-ordered, as ids.py makes them: milliseconds first.
    (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0')
        || substr(md5(g::text), 1, 20))::uuid,
    %(type)s,
    CASE WHEN q < 12 THEN 'default' WHEN q < 17 THEN 'emails'
         WHEN q < 19 THEN 'reports' ELSE 'webhooks' END,
    jsonb_build_object('user_id', g, 'template', 'welcome'),
    s, CASE WHEN s = 'pending' THEN (g %% 3) - 1 ELSE 0 END,
    CASE WHEN s = 'dead' THEN 5 WHEN s IN ('pending', 'waiting') THEN 0 ELSE 1 END, 5,
    CASE WHEN s = 'pending' AND g %% 10 = 0 THEN now() + interval '1 hour' * random()
         WHEN s = 'pending' THEN now() - interval '1 hour' * random()
         ELSE t END,
    t, t + interval '2 ms',
    CASE WHEN s IN ('completed', 'dead', 'cancelled') THEN t + interval '1 ms' END,
    CASE WHEN s IN ('completed', 'dead', 'cancelled') THEN t + interval '2 ms' END,
    CASE WHEN s = 'dead' THEN 'builtins.ConnectionError: SMTP server unavailable' || E'\\n\\n'
        || 'Traceback (most recent call last):' || repeat(E'\\n  File "app/mail.py", line 12', 8)
        ELSE '' END,
    CASE WHEN s = 'dead' THEN jsonb_build_array(jsonb_build_object(
        'attempt', 5, 'at', t, 'error', 'builtins.ConnectionError: SMTP server unavailable',
        'exception', 'builtins.ConnectionError', 'traceback', 'Traceback ...',
        'worker', 'host:1:abc')) ELSE '[]'::jsonb END,
    CASE WHEN s = 'completed' THEN '{"sent": true}'::jsonb END,
    CASE WHEN s = 'waiting' THEN 1 ELSE 0 END,
    CASE WHEN s = 'waiting' THEN 1 ELSE 0 END
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
    LATERAL (SELECT
        now() - interval '30 days' * (1 - g::float8 / %(rows)s) AS t,
        -- By the thousand rows, so that every queue gets every status in
        -- proportion (the status goes by the row within its thousand).
        (g / 1000) %% 20 AS q,
        CASE WHEN g %% 1000 < 15 THEN 'pending' WHEN g %% 1000 < 20 THEN 'dead'
             WHEN g %% 1000 < 23 THEN 'waiting' WHEN g %% 1000 < 25 THEN 'cancelled'
             ELSE 'completed' END AS s
    ) AS row
WHERE NOT %(in_flight_only)s OR s NOT IN ('completed', 'cancelled')
"""


def fill(rows: int, refill: bool) -> None:
    ((have,),) = sql("SELECT count(*) FROM durable_jobs_job WHERE type = %s", [TYPE])
    if have == rows and not refill:
        print(f"the table holds {have:,} jobs already: no fill", flush=True)
        return
    sql("TRUNCATE durable_jobs_job CASCADE")
    # The finished jobs of the 30 days in a history range a day, as the
    # workers' maintenance keeps them (HISTORY_PARTITION = "1d").
    history.daily_ranges(31)
    started = time.monotonic()
    for first in range(1, rows + 1, CHUNK):
        last = min(rows, first + CHUNK - 1)
        sql(FILL, {"type": TYPE, "first": first, "last": last, "rows": rows,
                   "in_flight_only": False})  # fmt: skip
        print(f"  {last:,} jobs in the table ({time.monotonic() - started:.0f} s)", flush=True)
    running_and_tiny()
    print(f"filled in {time.monotonic() - started:.0f} s; VACUUM ANALYZE", flush=True)
    sql("VACUUM ANALYZE durable_jobs_job")


def running_and_tiny() -> None:
    """A few running jobs and a tiny queue, besides."""
    sql(
        """
        INSERT INTO durable_jobs_job (id, type, queue, payload, status, priority, attempts,
            max_attempts, available_at, created_at, updated_at, started_at, lease_holder,
            lease_expires_at, lease_token, last_error, errors)
        SELECT gen_random_uuid(), %s, CASE WHEN g %% 4 = 0 THEN 'emails' ELSE 'default' END,
               '{}', 'running', 0, 1, 5, now(), now(), now(), now(), 'host:1:abc',
               now() + interval '1 hour', gen_random_uuid(), '', '[]'
        FROM generate_series(1, 200) AS g
        """,
        [TYPE],
    )
    sql(
        """
        INSERT INTO durable_jobs_job (id, type, queue, payload, status, priority, attempts,
            max_attempts, available_at, created_at, updated_at, last_error, errors)
        SELECT gen_random_uuid(), %s, 'tiny', '{}', 'pending', 0, 0, 5,
               now() - interval '3 minutes', now(), now(), '', '[]'
        FROM generate_series(1, 12)
        """,
        [TYPE],
    )


def in_flight_beside_history(rows: int) -> None:
    """Over finished jobs already in the table (``worker.py --finished-rows``' 100M):
    the jobs in flight and dead of ``rows`` rows of the fill's shape, without its
    finished ones (2.5 % of them: pending, dead and waiting), and the rest."""
    sql("DELETE FROM durable_jobs_job_active WHERE type = %s", [TYPE])
    for first in range(1, rows + 1, CHUNK):
        last = min(rows, first + CHUNK - 1)
        sql(FILL, {"type": TYPE, "first": first, "last": last, "rows": rows,
                   "in_flight_only": True})  # fmt: skip
    running_and_tiny()
    sql("VACUUM ANALYZE durable_jobs_job_active")
    sql("ANALYZE durable_jobs_job")


def fill_the_rest() -> None:
    """Workers, per-minute counts, a paused queue: the small tables, rewritten each run."""
    from datetime import timedelta

    from django.utils import timezone

    from django_durable_jobs.models import QueueMinuteStats, QueueState, WorkerProcess
    from django_durable_jobs.pausing import pause_queue

    now = timezone.now()
    WorkerProcess.objects.all().delete()
    WorkerProcess.objects.bulk_create(
        WorkerProcess(
            id=f"host-{i}:{1000 + i}:bench", host=f"host-{i}", pid=1000 + i,
            queues=[] if i % 2 else ["emails"], concurrency=8, lease_seconds=30.0,
            started_at=now - timedelta(hours=2), slots_in_use=i % 9, version="0.1.0.dev0",
            last_heartbeat=now - timedelta(seconds=600 if i < 4 else 3),
        )
        for i in range(20)
    )  # fmt: skip
    QueueMinuteStats.objects.all().delete()
    minute = now.replace(second=0, microsecond=0)
    QueueMinuteStats.objects.bulk_create(
        QueueMinuteStats(
            queue=queue, minute=minute - timedelta(minutes=m),
            completed=(m * 37) % 500 + 100, failed=(m * 13) % 7, dead=int(m % 30 == 0),
        )
        for queue in ("default", "emails", "reports", "webhooks", "tiny")
        for m in range(120)
    )  # fmt: skip
    QueueState.objects.all().delete()
    pause_queue("reports")


def pages() -> dict[str, str]:
    from django_durable_jobs.models import Job

    dead = Job.objects.filter(status="dead").order_by("-created_at").values_list("pk", flat=True)
    dead_id = dead[:1].get()
    return {
        "Queues page": "/admin/durable_jobs/queuestate/",
        "Workers page": "/admin/durable_jobs/workerprocess/",
        "Job list": "/admin/durable_jobs/job/",
        "Job list, status=dead": "/admin/durable_jobs/job/?status__exact=dead",
        "Job list, queue=emails": "/admin/durable_jobs/job/?queue=emails",
        "Job list, queue=emails, status=dead": (
            "/admin/durable_jobs/job/?queue=emails&status__exact=dead"
        ),
        "Job list, queue=tiny, status=pending": (
            "/admin/durable_jobs/job/?queue=tiny&status__exact=pending"
        ),
        "Dead jobs list": "/admin/durable_jobs/deadjob/",
        "A dead job's page": f"/admin/durable_jobs/job/{dead_id}/change/",
        "Pause confirmation (emails)": "/admin/durable_jobs/queuestate/emails/pause/",
    }


class Statements:
    """Counts the statements a request runs, and keeps its slowest (connection.execute_wrapper)."""

    def __init__(self) -> None:
        self.count = 0
        self.slowest = (0.0, "")

    def __call__(self, execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            took = time.perf_counter() - started
            self.count += 1
            if took > self.slowest[0]:
                self.slowest = (took, " ".join(sql.split())[:120])


def measure(repeat: int) -> list[tuple[str, float, float, float, Statements]]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    user, _ = User.objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    # Django's own first-request costs (URL resolver, templates) go here, not to a page.
    assert client.get("/admin/").status_code == 200
    results = []
    for name, url in pages().items():
        statements = Statements()
        started = time.perf_counter()
        with connection.execute_wrapper(statements):
            response = client.get(url)
        first = time.perf_counter() - started
        assert response.status_code == 200, (name, response.status_code)
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            response = client.get(url)
            times.append(time.perf_counter() - started)
            assert response.status_code == 200
        median, slowest = statistics.median(times), max(times)
        results.append((name, first, median, slowest, statements))
        print(
            f"  {name}: first {first * 1000:.0f} ms, median {median * 1000:.0f} ms, slowest "
            f"{slowest * 1000:.0f} ms; {statements.count} statements, the slowest "
            f"{statements.slowest[0] * 1000:.1f} ms: {statements.slowest[1]}",
            flush=True,
        )
    return results


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ((version,),) = sql("SHOW server_version")
    ((buffers,),) = sql("SHOW shared_buffers")
    return (
        f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
        f"PostgreSQL {version} (shared_buffers {buffers}), load average {loadavg()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL, help="default: %(default)s")
    parser.add_argument(
        "--rows", type=lambda v: int(v.replace("_", "")), default=10_000_000,
        help="jobs in the table (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--repeat", type=int, default=5, help="timed fetches per page after the first"
    )
    parser.add_argument(
        "--refill", action="store_true", help="fill again even if the table is full"
    )
    parser.add_argument(
        "--in-flight-beside-history", type=lambda v: int(v.replace("_", "")), default=0,
        metavar="ROWS",
        help="no fill: add the jobs in flight and dead of ROWS rows of the fill's shape to the"
        " finished jobs already in the database (worker.py --finished-rows)",
    )  # fmt: skip
    args = parser.parse_args()
    ensure_database(args.database_url)
    setup_django(args.database_url)
    if args.in_flight_beside_history:
        in_flight_beside_history(args.in_flight_beside_history)
    else:
        fill(args.rows, args.refill)
    fill_the_rest()
    ((size,),) = sql(
        "SELECT pg_size_pretty(sum(pg_total_relation_size(inhrelid)))"
        " FROM pg_inherits WHERE inhparent = 'durable_jobs_job'::regclass"
    )
    ((count,),) = sql("SELECT count(*) FROM durable_jobs_job")
    print(f"{count:,} jobs, {size} with indexes; {machine()}", flush=True)
    results = measure(args.repeat)
    print()
    print("| Page | First | Median | Slowest | Statements | Slowest statement (first fetch) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, first, median, slowest, statements in results:
        print(
            f"| {name} | {first * 1000:.0f} ms | {median * 1000:.0f} ms "
            f"| {slowest * 1000:.0f} ms | {statements.count} "
            f"| {statements.slowest[0] * 1000:.1f} ms |"
        )


if __name__ == "__main__":
    main()
