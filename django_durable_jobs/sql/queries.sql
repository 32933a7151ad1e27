-- The queue's hot-path SQL, kept in one place (see db.py, the only caller).
-- Each query starts with a `-- name --` header and a one-line description.
-- Parameters are named: %(name)s.

-- insert_job --
-- Insert one job, unless its idempotency key is taken, and NOTIFY its queue (delivered at commit). One plain INSERT: the single-job path is bound by round trips and commits, so it avoids insert_jobs' CTEs.
INSERT INTO durable_jobs_job (
    id, type, queue, payload, idempotency_key, status, priority, attempts,
    max_attempts, available_at, created_at, updated_at, last_error, errors
)
VALUES (
    %(id)s, %(type)s, %(queue)s, %(payload)s::jsonb, %(key)s, 'pending', %(priority)s, 0,
    %(max_attempts)s,
    -- The database's clock, the one the claim compares with.
    COALESCE(%(run_at)s::timestamptz, now() + COALESCE(%(delay_us)s::bigint, 0) * interval '1 microsecond'),
    now(), now(), '', '[]'::jsonb
)
-- Waits for a concurrent insert of the same key to commit or roll back,
-- so racing callers end with exactly one row.
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, available_at, created_at, pg_notify(%(channel)s, queue);

-- insert_jobs --
-- Insert a batch of jobs, given as one JSON array of rows, in one statement; skip rows whose idempotency key is taken; NOTIFY each queue that received a job (delivered at commit). Returns the ids inserted and the database's now().
WITH input AS (
    -- One JSON document rather than nine arrays: encoding it is one C call
    -- in Python, and PostgreSQL parses it faster than it binds the arrays.
    -- Row: [id, type, queue, payload, idempotency_key, priority,
    --       max_attempts, delay_us, run_at]
    SELECT
        (row->>0)::uuid AS id,
        row->>1 AS type,
        row->>2 AS queue,
        row->3 AS payload,
        row->>4 AS idempotency_key,
        (row->>5)::smallint AS priority,
        (row->>6)::integer AS max_attempts,
        (row->>7)::bigint AS delay_us,
        (row->>8)::timestamptz AS run_at
    FROM jsonb_array_elements(%(jobs)s::jsonb) AS row
),
inserted AS (
    INSERT INTO durable_jobs_job (
        id, type, queue, payload, idempotency_key, status, priority, attempts,
        max_attempts, available_at, created_at, updated_at, last_error, errors
    )
    SELECT
        id, type, queue, payload, idempotency_key, 'pending', priority, 0, max_attempts,
        -- The database's clock, the one the claim compares with.
        COALESCE(run_at, now() + COALESCE(delay_us, 0) * interval '1 microsecond'),
        now(), now(), '', '[]'::jsonb
    FROM input
    -- Key order: concurrent batches sharing keys take them in the same
    -- order, so they wait for each other instead of deadlocking.
    ORDER BY idempotency_key
    -- Waits for a concurrent insert of the same key to commit or roll back,
    -- so racing callers end with exactly one row.
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue
),
notified AS (
    SELECT count(pg_notify(%(channel)s, queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted) AS queues
)
-- Joining `notified` makes PostgreSQL evaluate it; one row even when
-- nothing was inserted (an aggregate over no rows).
SELECT array_agg(inserted.id), now()
FROM inserted CROSS JOIN notified;

-- insert_jobs_unkeyed --
-- insert_jobs for a batch in which no job has an idempotency key: without ON CONFLICT, PostgreSQL inserts about twice as fast, and every row is inserted, so only their count comes back.
WITH input AS (
    SELECT
        (row->>0)::uuid AS id,
        row->>1 AS type,
        row->>2 AS queue,
        row->3 AS payload,
        (row->>5)::smallint AS priority,
        (row->>6)::integer AS max_attempts,
        (row->>7)::bigint AS delay_us,
        (row->>8)::timestamptz AS run_at
    FROM jsonb_array_elements(%(jobs)s::jsonb) AS row
),
inserted AS (
    INSERT INTO durable_jobs_job (
        id, type, queue, payload, idempotency_key, status, priority, attempts,
        max_attempts, available_at, created_at, updated_at, last_error, errors
    )
    SELECT
        id, type, queue, payload, NULL, 'pending', priority, 0, max_attempts,
        COALESCE(run_at, now() + COALESCE(delay_us, 0) * interval '1 microsecond'),
        now(), now(), '', '[]'::jsonb
    FROM input
    RETURNING queue
),
notified AS (
    SELECT count(pg_notify(%(channel)s, queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted) AS queues
)
SELECT count(*), now()
FROM inserted CROSS JOIN notified;

-- claim_jobs --
-- Claim up to %(limit)s runnable jobs from any queue: mark them running, count the attempt, and take a lease with a fresh token.
WITH candidates AS MATERIALIZED (
    -- MATERIALIZED fences the planner: the LIMIT applies before the UPDATE,
    -- so no more than %(limit)s rows are ever claimed (Oban's note).
    SELECT id
    FROM durable_jobs_job
    WHERE status = 'pending' AND available_at <= now()
    ORDER BY priority DESC, available_at, created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE durable_jobs_job AS job
SET status = 'running',
    attempts = job.attempts + 1,
    started_at = now(),
    updated_at = now(),
    lease_holder = %(worker_id)s,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    lease_token = gen_random_uuid()
FROM candidates
WHERE job.id = candidates.id
RETURNING job.*;

-- claim_jobs_in_queues --
-- Claim up to %(limit)s runnable jobs from the given queues; otherwise the same as claim_jobs.
WITH candidates AS MATERIALIZED (
    SELECT id
    FROM durable_jobs_job
    WHERE status = 'pending' AND available_at <= now() AND queue = ANY(%(queues)s::text[])
    ORDER BY priority DESC, available_at, created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE durable_jobs_job AS job
SET status = 'running',
    attempts = job.attempts + 1,
    started_at = now(),
    updated_at = now(),
    lease_holder = %(worker_id)s,
    lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    lease_token = gen_random_uuid()
FROM candidates
WHERE job.id = candidates.id
RETURNING job.*;
