-- Maintenance: leases, the reaper, cancel polls, pruning. Run by db/maintenance.py.
-- Each query starts with a `-- name --` header and a one-line description;
-- parameters are named: %(name)s. A name starting with _ is a fragment,
-- included by a line <<_name>> (queries.py), from any of the gateway's files.

-- extend_leases --
-- Heartbeat: push back the lease expiry of the jobs this worker still holds (matched by lease token), locking them in id order as record_outcomes does: the completer may be writing the outcomes of some of the same jobs at that moment, and two statements locking the same rows in different orders deadlock. Returns the ids extended; a held job missing from them was reaped.
WITH locked AS (
    SELECT job.id
    FROM durable_jobs_job_active AS job
    JOIN unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS held(id, token)
        ON job.id = held.id AND job.lease_token = held.token
    WHERE job.status = 'running'
    ORDER BY job.id
    FOR NO KEY UPDATE OF job
)
-- The active partition itself (db/partitions.py): an extension never moves
-- a row, and the other partitions stay out of the plan.
UPDATE durable_jobs_job_active AS job
SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s::float8)
FROM locked
WHERE job.id = locked.id
RETURNING job.id;

-- reap_jobs --
-- Find and lock (up to %(limit)s) running jobs whose lease expired: their worker died or hung. The reaper decides each one's retry, dead or (a cancel was requested) cancel in Python (the same rules as a failed attempt) and writes them with record_outcomes in the same transaction, fenced by the lease token read here. A transaction-level advisory lock lets one reaper work at a time; the others find nothing.
WITH reaper AS (
    SELECT pg_try_advisory_xact_lock(%(lock_key)s) AS acquired
)
SELECT id, type, queue, attempts, max_attempts, lease_token, lease_holder, lease_expires_at,
    cancel_requested_at IS NOT NULL, dependent_count
FROM durable_jobs_job_active
WHERE status = 'running' AND lease_expires_at < now()
    AND (SELECT acquired FROM reaper)
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- cancel_requests --
-- The fallback for a lost cancel notification, polled by each worker's maintenance thread while it holds jobs: which of these (held, by lease token) running jobs have a cancel requested. Primary-key lookups; nothing is written.
SELECT job.id
FROM durable_jobs_job_active AS job
JOIN unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS held(id, token)
    ON job.id = held.id AND job.lease_token = held.token
WHERE job.cancel_requested_at IS NOT NULL AND job.status = 'running';

-- prune_jobs --
-- Delete up to %(limit)s finished jobs (of the given statuses) whose completed_at is older than %(older_than_seconds)s, oldest first, row by row: the dead jobs (in the active partition), and what is left of completed and cancelled jobs after the whole partitions older than that were dropped (pruning.py). With a %(lock_key)s, a transaction-level advisory lock lets one pruner work at a time and the others skip; NULL (the CLI) prunes without it. Returns whether the lock was acquired and how many rows were deleted.
WITH pruner AS (
    -- pg_try_advisory_xact_lock(NULL) is NULL, so a NULL key always "acquires".
    SELECT (%(lock_key)s::bigint IS NULL OR pg_try_advisory_xact_lock(%(lock_key)s::bigint)) IS NOT FALSE AS acquired
),
doomed AS (
    -- Served by durable_jobs_finished_idx (completed_at, partial on the
    -- finished statuses). SKIP LOCKED: a row being requeued is left alone,
    -- and the DELETE never waits on (or blocks) anyone else's row lock.
    SELECT id
    FROM durable_jobs_job
<<_prune_order>>
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
<<_prune_doomed>>

-- _prune_order --
-- A fragment (see queries.py): the prune's candidates of a table, after its FROM: finished jobs of %(statuses)s older than %(older_than_seconds)s, when the CTE `pruner` acquired the lock, oldest first (then its LIMIT and FOR UPDATE SKIP LOCKED).
    WHERE status = ANY(%(statuses)s::text[])
        AND completed_at < now() - make_interval(secs => %(older_than_seconds)s::float8)
        AND (SELECT acquired FROM pruner)
    ORDER BY completed_at

-- _prune_doomed --
-- A fragment (see queries.py) that goes on with a WITH holding the CTEs `pruner(acquired)` and `doomed(id)`: delete the doomed jobs with their idempotency keys, dependency edges, step records and event waits, and return whether the lock was acquired and how many jobs were deleted.
unkeyed AS (
    -- Their idempotency keys: held while the job exists.
    DELETE FROM durable_jobs_idempotency AS k
    USING doomed
    WHERE k.job_id = doomed.id
),
unlinked AS (
    -- Their dependency edges, either end (no foreign key can point at the
    -- partitioned job table: nothing else would delete them).
    DELETE FROM durable_jobs_dependency AS edge
    USING doomed
    WHERE edge.child_id = doomed.id OR edge.parent_id = doomed.id
),
unstepped AS (
    -- Their step records and event waits (ctx.step, ctx.wait_for_event),
    -- for the same reason. Served by the
    -- steps' (job_id, name) unique index and the waiters' primary key.
    DELETE FROM durable_jobs_step AS step
    USING doomed
    WHERE step.job_id = doomed.id
),
unwaited AS (
    DELETE FROM durable_jobs_event_waiter AS waiter
    USING doomed
    WHERE waiter.job_id = doomed.id
),
deleted AS (
    DELETE FROM durable_jobs_job AS job
    USING doomed
    WHERE job.id = doomed.id
    RETURNING job.id
)
SELECT (SELECT acquired FROM pruner), (SELECT count(*) FROM deleted);

-- prune_other --
-- prune_jobs for the two partitions that retention cannot drop on time (db/partitions.py): the past partition (the job table as it was before partitioning, its rows of every age, dropped whole only once its whole range has expired) and the default partition (jobs that finished when no range partition covered their time). Up to %(limit)s rows in all, the past partition's oldest first.
WITH pruner AS (
    SELECT (%(lock_key)s::bigint IS NULL OR pg_try_advisory_xact_lock(%(lock_key)s::bigint)) IS NOT FALSE AS acquired
),
doomed_past AS (
    -- Served by the past partition's durable_jobs_finished_idx_past.
    SELECT id
    FROM durable_jobs_job_past
<<_prune_order>>
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
doomed_other AS (
    SELECT id
    FROM durable_jobs_job_other
<<_prune_order>>
    LIMIT %(limit)s - (SELECT count(*) FROM doomed_past)
    FOR UPDATE SKIP LOCKED
),
doomed AS (
    SELECT id FROM doomed_past UNION ALL SELECT id FROM doomed_other
),
<<_prune_doomed>>

-- prune_queue_stats --
-- Delete the per-minute counts older than %(older_than_seconds)s (the workers' maintenance, about once a minute): the table keeps a couple of hours, a few hundred rows a queue. Returns how many rows were deleted.
WITH deleted AS (
    DELETE FROM durable_jobs_queue_stats
    WHERE minute < now() - make_interval(secs => %(older_than_seconds)s::float8)
    RETURNING 1
)
SELECT count(*) FROM deleted;
