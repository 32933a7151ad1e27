"""Bulk enqueue: today's one INSERT from a JSON document against COPY (issue 26).

Run on demand, never in the test suite, with the project's virtual environment:

    .venv/bin/python benchmarks/enqueue_copy.py [--sizes 1000,10000] [--runs 7]
        [--database-url URL]

For each batch size, unkeyed and with an idempotency key on every job, the
median time of ``--runs`` of:

- *json*: ``db.insert_jobs`` as ``enqueue_many`` calls it (the rows as one
  JSON document, ``INSERT ... SELECT FROM jsonb_array_elements``, ``ON
  CONFLICT DO NOTHING`` when a key is given);
- *copy*: a temporary table (``ON COMMIT DROP``), the rows ``COPY``'d into
  it in binary, then the same ``INSERT ... SELECT`` (and ``ON CONFLICT``)
  from it: COPY cannot compute ``available_at`` from the database's clock
  nor skip a taken key, so it cannot write the job table itself.

Each run is a transaction rolled back (the table stays as it was), the two
ways alternating. Only the gateway's part is timed: the specs are made
before, as ``enqueue_many`` makes them for both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import worker as bench  # noqa: E402  (benchmarks/worker.py: its set-up)

COPY_TABLE = """
CREATE TEMP TABLE durable_jobs_copy (
    id uuid, type text, queue text, payload jsonb, idempotency_key text, priority smallint,
    max_attempts integer, delay_us bigint, run_at timestamptz, timeout float8,
    concurrency_key text
) ON COMMIT DROP
"""

COPY_INSERT = """
WITH inserted AS (
    INSERT INTO durable_jobs_job (
        id, type, queue, payload, idempotency_key, status, priority, attempts,
        max_attempts, available_at, created_at, updated_at, last_error, errors, timeout,
        concurrency_key, trace_context
    )
    SELECT id, type, queue, payload, idempotency_key, 'pending', priority, 0, max_attempts,
        COALESCE(run_at, now() + COALESCE(delay_us, 0) * interval '1 microsecond'),
        now(), now(), '', '[]'::jsonb, timeout, concurrency_key, NULL
    FROM durable_jobs_copy
    ORDER BY idempotency_key
    {conflict}
    RETURNING id, queue
),
notified AS (
    SELECT count(pg_notify('durable_jobs', queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted) AS queues
)
SELECT array_agg(inserted.id), now() FROM inserted CROSS JOIN notified
"""

CONFLICT = "ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"


def specs(n: int, keyed: bool) -> list[Any]:
    from django_durable_jobs.enqueueing import spec_from_item
    from django_durable_jobs.validation import Defaults

    defaults = Defaults.from_settings()
    run = uuid.uuid4().hex[:8]
    return [
        spec_from_item(
            i,
            {
                "type": bench.TYPE,
                "payload": {"i": i, "name": f"job {i}"},
                **({"idempotency_key": f"{run}-{i}"} if keyed else {}),
            },
            defaults,
        )
        for i in range(n)
    ]


def by_json(batch: list[Any], ids: list[uuid.UUID]) -> int:
    from django_durable_jobs import db

    return len(db.insert_jobs(batch, ids, using="default"))


def by_copy(batch: list[Any], ids: list[uuid.UUID]) -> int:
    from django.db import connection
    from psycopg.types.json import Jsonb  # noqa: F401  (the payloads go as text)

    connection.ensure_connection()
    raw = connection.connection
    keyed = any(spec.idempotency_key is not None for spec in batch)
    with raw.cursor() as cursor:
        cursor.execute(COPY_TABLE)
        with cursor.copy("COPY durable_jobs_copy FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(
                ["uuid", "text", "text", "jsonb", "text", "int2", "int4", "int8",
                 "timestamptz", "float8", "text"]
            )  # fmt: skip
            for spec, job_id in zip(batch, ids, strict=True):
                copy.write_row(
                    (job_id, spec.type, spec.queue, spec.payload_json, spec.idempotency_key,
                     spec.priority, spec.max_attempts, spec.delay_us, spec.run_at,
                     spec.timeout, spec.concurrency_key)
                )  # fmt: skip
        cursor.execute(COPY_INSERT.format(conflict=CONFLICT if keyed else ""))
        ((inserted, _now),) = cursor.fetchall()
    return len(inserted or ())


def timed(way: Any, batch: list[Any]) -> float:
    from django.db import transaction

    ids = [uuid.uuid4() for _ in batch]
    started = time.perf_counter()
    with transaction.atomic():
        assert way(batch, ids) == len(batch)
        elapsed = time.perf_counter() - started
        transaction.set_rollback(True)
    return elapsed * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="batch sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=7, help="runs of each way")
    parser.add_argument("--database-url", default=bench.DEFAULT_URL)
    args = parser.parse_args()
    bench.ensure_database(args.database_url)
    bench.setup_django(args.database_url)
    bench.reset()
    print(f"{'rows':>6} {'keys':>5} {'json ms':>8} {'copy ms':>8} {'copy/json':>9}")
    for size in (int(s) for s in args.sizes.split(",")):
        for keyed in (False, True):
            batch = specs(size, keyed)
            times: dict[str, list[float]] = {"json": [], "copy": []}
            timed(by_json, batch), timed(by_copy, batch)  # warm up
            for run in range(args.runs):
                order = [("json", by_json), ("copy", by_copy)]
                for name, way in order if run % 2 else order[::-1]:
                    times[name].append(timed(way, batch))
            json_ms, copy_ms = (statistics.median(times[k]) for k in ("json", "copy"))
            print(
                f"{size:>6} {'yes' if keyed else 'no':>5} {json_ms:>8.1f} {copy_ms:>8.1f} "
                f"{copy_ms / json_ms:>9.2f}"
            )


if __name__ == "__main__":
    main()
