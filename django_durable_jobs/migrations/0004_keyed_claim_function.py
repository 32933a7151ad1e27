"""The keyed claim in one statement: ``durable_jobs_claim_keyed()``, a PL/pgSQL function.

A claim of jobs with a concurrency key must count a key's running jobs in a
snapshot taken *after* it locked the key: in one plain statement, another
worker's claim of the key could commit between this statement's snapshot and
its lock, and both would see the key's last free slot. Until this migration
that took two statements in a transaction (three round trips with the
commit, and two snapshots). A VOLATILE function takes a new snapshot for
each statement it runs (READ COMMITTED), so its two statements keep that
order inside one call, and a worker's keyed claim is one round trip, its
own transaction (benchmarks in docs/benchmarks.md, "Keyed jobs in one round
trip").

``plan_cache_mode = force_custom_plan``: PL/pgSQL caches its statements'
plans like prepared statements, and the generic plan of the first one
(arrays and a LIMIT as parameters) sorts a sequential scan of the backlog
(db/__init__.py, ``PREPARED``). Planned each call, as the two statements
were before.

The function's body is frozen here, as a migration's SQL must be; a change to
it is a new migration that replaces it (``CREATE OR REPLACE FUNCTION``).
``db/flow_control.sql``'s ``claim_keyed`` calls it.
"""

from __future__ import annotations

from django.db import migrations

CREATE = r"""
CREATE FUNCTION durable_jobs_claim_keyed(
    p_types text[], p_limits int[], p_queues text[], p_excluded text[],
    p_limit int, p_scan int, p_lock_space int, p_worker_id text, p_lease_seconds float8
)
RETURNS TABLE (
    id uuid, type varchar, queue varchar, payload jsonb, attempts int, max_attempts int,
    lease_token uuid, available_at timestamptz, started_at timestamptz,
    idempotency_key varchar, timeout float8, dependent_count int, parent_count int,
    trace_context jsonb, created_at timestamptz
)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_custom_plan
AS $function$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
    v_id_types text[];
    v_id_keys text[];
    v_ranks int[];
BEGIN
    -- First statement: lock the keys of the first runnable jobs whose key has
    -- room in this snapshot (skipping a key another claim holds: no waiting),
    -- and keep, for each key locked, its first jobs (as many as its limit),
    -- each with its rank within its key.
    WITH limits AS (
        SELECT * FROM unnest(p_types, p_limits) AS l(type, lim)
    ),
    busy AS (
        SELECT r.type, r.concurrency_key
        FROM durable_jobs_job_active AS r JOIN limits AS l ON l.type = r.type
        WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
            AND r.lease_expires_at > now()
        GROUP BY r.type, r.concurrency_key, l.lim
        HAVING count(*) >= l.lim
    ),
    heads AS MATERIALIZED (
        -- A bounded number of rows (a few per key wanted), in claim order;
        -- ROWS: a job's place needs no look at the jobs tied with it, so
        -- the LIMIT stops the scan.
        SELECT j.id, j.type, j.concurrency_key,
            row_number() OVER (
                ORDER BY j.priority DESC, j.available_at, j.created_at
                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
            ) AS place
        FROM durable_jobs_job_active AS j
        WHERE j.status = 'pending' AND j.available_at <= now()
            AND j.concurrency_key IS NOT NULL AND j.type = ANY(p_types)
            AND (p_queues IS NULL OR j.queue = ANY(p_queues))
            AND NOT (j.queue = ANY(p_excluded))
            -- NOT IN: a hashed subplan, one probe per row read (an anti-join
            -- on the planner's guess of one busy row compared every row
            -- with every busy key). Neither column is NULL here.
            AND (j.type, j.concurrency_key) NOT IN (
                SELECT b.type, b.concurrency_key FROM busy AS b
            )
        ORDER BY j.priority DESC, j.available_at, j.created_at
        LIMIT p_scan
    ),
    picked AS MATERIALIZED (
        SELECT h.type, h.concurrency_key, min(h.place) AS first
        FROM heads AS h
        GROUP BY h.type, h.concurrency_key
        ORDER BY first
        LIMIT p_limit
    ),
    locked AS MATERIALIZED (
        SELECT p.type, p.concurrency_key
        FROM picked AS p
        WHERE pg_try_advisory_xact_lock(p_lock_space, hashtext(p.type || ' ' || p.concurrency_key))
    ),
    ranked AS (
        SELECT h.id, h.type, h.concurrency_key, h.place,
            row_number() OVER (
                PARTITION BY h.type, h.concurrency_key ORDER BY h.place
            ) AS rank
        FROM heads AS h JOIN locked AS k
            ON k.type = h.type AND k.concurrency_key = h.concurrency_key
    )
    SELECT array_agg(r.id ORDER BY r.place), array_agg(r.type ORDER BY r.place),
        array_agg(r.concurrency_key ORDER BY r.place), array_agg(r.rank ORDER BY r.place)
    INTO v_ids, v_id_types, v_id_keys, v_ranks
    FROM ranked AS r JOIN limits AS l ON l.type = r.type
    WHERE r.rank <= l.lim;

    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    -- Second statement, in a snapshot taken after the locks: each locked
    -- key's room beside its jobs running on a live lease (so two claims never
    -- both see a key's last free slot), the oldest jobs of a key first, still
    -- pending; of those, the first p_limit in claim order, claimed as
    -- claim_jobs claims (db/claims.sql, _claimed).
    RETURN QUERY
    WITH wanted_keys AS (
        SELECT DISTINCT w.type, w.key
        FROM unnest(v_id_types, v_id_keys) AS w(type, key)
    ),
    room AS (
        SELECT k.type, k.key, l.lim - (
            SELECT count(*) FROM durable_jobs_job_active AS r
            WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
                AND r.type = k.type AND r.concurrency_key = k.key
                AND r.lease_expires_at > now()
        ) AS free
        FROM wanted_keys AS k
        JOIN unnest(p_types, p_limits) AS l(type, lim) ON l.type = k.type
    ),
    wanted AS (
        SELECT w.id
        FROM unnest(v_ids, v_id_types, v_id_keys, v_ranks) AS w(id, type, key, rank)
        JOIN room ON room.type = w.type AND room.key = w.key
        WHERE w.rank <= room.free
    ),
    -- When these jobs start: read while this statement runs, after its
    -- snapshot, so no later than any end it counted (statement_timestamp()
    -- would be the call's start, before the locks and this snapshot: a job
    -- of the key that ended meanwhile would seem to overlap its successor).
    started AS MATERIALIZED (
        SELECT clock_timestamp() AS at
    ),
    candidates AS MATERIALIZED (
        SELECT job.id, job.queue
        FROM durable_jobs_job_active AS job
        WHERE job.id IN (SELECT wanted.id FROM wanted)
            AND job.status = 'pending' AND job.available_at <= now()
        ORDER BY job.priority DESC, job.available_at, job.created_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ),
    claimed AS (
        UPDATE durable_jobs_job_active AS job
        SET status = 'running',
            attempts = job.attempts + 1,
            started_at = started.at,
            updated_at = started.at,
            lease_holder = p_worker_id,
            lease_expires_at = started.at + make_interval(secs => p_lease_seconds),
            lease_token = gen_random_uuid()
        FROM candidates, started
        WHERE job.id = candidates.id
            -- A pause committed after the worker last read the paused queues.
            AND candidates.queue <> ALL (ARRAY(
                SELECT q.name FROM durable_jobs_queue AS q
                WHERE q.paused_at IS NOT NULL
                    AND (q.paused_until IS NULL OR q.paused_until > now())
            ))
        RETURNING job.id, job.type, job.queue, job.payload, job.attempts, job.max_attempts,
            job.lease_token, job.available_at, job.started_at, job.idempotency_key,
            job.timeout, job.priority, job.created_at, job.dependent_count,
            job.parent_count, job.trace_context
    )
    SELECT c.id, c.type, c.queue, c.payload, c.attempts, c.max_attempts, c.lease_token,
        c.available_at, c.started_at, c.idempotency_key, c.timeout, c.dependent_count,
        c.parent_count, c.trace_context, c.created_at
    FROM claimed AS c
    ORDER BY c.priority DESC, c.available_at, c.created_at;
END
$function$
"""

DROP = (
    "DROP FUNCTION durable_jobs_claim_keyed("
    "text[], int[], text[], text[], int, int, int, text, float8)"
)


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0003_partitioned_jobs"),
    ]

    operations = [
        migrations.RunSQL(CREATE, reverse_sql=DROP, elidable=False),
    ]
