"""django-tasks-db's side of the side-by-side benchmark: its enqueue runs.

Runs only with ``benchmarks/peers/.venv-django-tasks-db/bin/python`` from
this directory (django-tasks-db with Django 5.2 and django-tasks from PyPI,
psycopg with its binary libpq), started by ``run.py``; the worker is
``manage.py db_worker`` beside it. Each command prints one JSON object::

    python side.py enqueue -n 20000   # {"single": jobs/s, "bulk": jobs/s}
    python side.py fill -n 20000      # {"jobs": 20000}
    python side.py paced --rate 200 --count 2000
        # {"since": ISO time, "count": .., "enqueue_p50": ms, "enqueue_p99": ms}

django-tasks has no bulk enqueue: "bulk" is ``enqueue()`` N times in one
``transaction.atomic()``, what an application would write. ``fill`` (the
jobs of a throughput run) writes the same rows that ``enqueue()`` writes,
with ``bulk_create`` in batches of 5,000, as ours and the other peers fill
in batches: ``enqueue()`` one by one would make the fill the longest part
of each run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
django.setup()

from django.db import transaction  # noqa: E402  after django.setup()
from django.utils import timezone  # noqa: E402
from django_tasks_db.models import DBTaskResult, get_date_max  # noqa: E402
from noop import noop  # noqa: E402

BATCH = 5_000


def clear() -> None:
    DBTaskResult.objects.all().delete()


def single(n: int) -> float:
    """``enqueue()`` n times in autocommit: one transaction per job."""
    start = time.perf_counter()
    for i in range(n):
        noop.enqueue(i=i)
    return n / (time.perf_counter() - start)


def bulk(n: int) -> float:
    """``enqueue()`` n times in one transaction (django-tasks has no bulk call)."""
    start = time.perf_counter()
    with transaction.atomic():
        for i in range(n):
            noop.enqueue(i=i)
    return n / (time.perf_counter() - start)


def enqueue_command(n: int) -> dict[str, float]:
    # Warm up as benchmarks/enqueue.py does: the connection, the plans, the pages.
    clear()
    single(1_000)
    bulk(5_000)
    clear()
    one = single(n)
    clear()
    many = bulk(n)
    clear()
    return {"single": one, "bulk": many}


def row(i: int) -> DBTaskResult:
    """The row ``DatabaseBackend.enqueue(noop, (), {"i": i})`` inserts, unsaved."""
    return DBTaskResult(
        id=uuid.uuid4(),
        args_kwargs={"args": [], "kwargs": {"i": i}},
        priority=noop.priority,
        task_path=noop.module_path,
        queue_name=noop.queue_name,
        run_after=get_date_max(),
        backend_name=noop.backend,
    )


def fill_command(n: int) -> dict[str, float]:
    for offset in range(0, n, BATCH):
        DBTaskResult.objects.bulk_create([row(i) for i in range(offset, min(n, offset + BATCH))])
    return {"jobs": n}


def paced_command(rate: float, count: int) -> dict[str, object]:
    """``enqueue()`` ``count`` single jobs at ``rate`` per second, paced by the clock."""
    since = timezone.now()
    durations: list[float] = []
    start = time.perf_counter()
    for i in range(count):
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        t = time.perf_counter()
        noop.enqueue(i=i)
        durations.append(time.perf_counter() - t)
    durations.sort()
    return {
        "since": since.isoformat(),
        "count": count,
        "enqueue_p50": durations[len(durations) // 2] * 1000,
        "enqueue_p99": durations[int(len(durations) * 0.99)] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    enqueue = commands.add_parser("enqueue", help="enqueue rates, one per transaction and bulk")
    enqueue.add_argument("-n", type=int, default=20_000)
    fill = commands.add_parser("fill", help="enqueue n jobs for a throughput run")
    fill.add_argument("-n", type=int, default=20_000)
    paced = commands.add_parser("paced", help="enqueue single jobs at a fixed rate")
    paced.add_argument("--rate", type=float, default=200.0)
    paced.add_argument("--count", type=int, default=2_000)
    args = parser.parse_args()
    if args.command == "enqueue":
        result: dict[str, object] = dict(enqueue_command(args.n))
    elif args.command == "fill":
        result = dict(fill_command(args.n))
    else:
        result = paced_command(args.rate, args.count)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
