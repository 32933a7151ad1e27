-- Durable steps: a job's step records, its checkpoints (fenced by the lease token), its suspensions (sleep, event wait, child wait). Run by db/steps.py.
-- Each query starts with a `-- name --` header and a one-line description;
-- parameters are named: %(name)s. A name starting with _ is a fragment,
-- included by a line <<_name>> (queries.py), from any of the gateway's files.

-- load_steps --
-- A job's step records, read once per attempt at its first step call (none for a job that never calls one), each with whether its wake_at has passed by the database's clock (the clock the claim compares available_at with). Served by the (job_id, name) unique index. A job running again after a suspension waits for nothing now: its waiting_for is cleared here (a write only then, fenced by the lease), so that what a suspended job waits for is never shown for one that resumed.
WITH resumed AS (
    UPDATE durable_jobs_job
    SET waiting_for = NULL
    WHERE id = %(job_id)s AND lease_token = %(token)s AND status = 'running'
        AND waiting_for IS NOT NULL
)
SELECT name, status, result, wake_at, event_key, child_id,
    COALESCE(wake_at <= now(), false)
FROM durable_jobs_step
WHERE job_id = %(job_id)s;

-- _fenced_job --
-- A fragment (see queries.py) that starts a WITH: `job`, the job's row if this worker still holds its lease (id, lease token, running), locked FOR SHARE: the reaper's and a takeover's UPDATE wait for this transaction (and a write after theirs finds the token gone: read committed re-reads the row it waited for). Zero rows: the lease was lost, and nothing that reads `job` writes anything. `stale`: less than three quarters of the lease is left, so the checkpoint extends it (a fresh lease is left alone: no row version per step).
WITH job AS (
    SELECT id, cancel_requested_at IS NOT NULL AS cancel,
        lease_expires_at < now() + make_interval(secs => 0.75 * %(lease_seconds)s::float8) AS stale
    FROM durable_jobs_job
    WHERE id = %(job_id)s AND lease_token = %(token)s AND status = 'running'
    FOR SHARE
),
extended AS (
    UPDATE durable_jobs_job AS extended_job
    SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s::float8)
    FROM job
    WHERE extended_job.id = job.id AND job.stale AND extended_job.lease_token = %(token)s
    RETURNING extended_job.id
)

-- record_step --
-- A checkpoint, in one statement: fenced by the lease (_fenced_job), write the step's record (insert, or update one that is not completed: a completed record never changes), extend the lease when it is getting old. Returns one row (the lease is held) with whether a cancel was requested and whether the record was written; no row: the lease was lost and nothing was written.
<<_fenced_job>>,
recorded AS (
    INSERT INTO durable_jobs_step AS step (
        job_id, name, kind, status, attempt, position, started_at, finished_at,
        result, result_bytes, error, wake_at, event_key, child_id
    )
    SELECT job.id, %(name)s::text, %(kind)s::text, %(status)s::text, %(attempt)s::int,
        -- The order records were first written in (the job's page lists by it).
        COALESCE((SELECT max(position) FROM durable_jobs_step WHERE job_id = %(job_id)s), 0) + 1,
        COALESCE(%(started_at)s::timestamptz, now()),
        CASE WHEN %(status)s::text = 'suspended' THEN NULL ELSE now() END,
        %(result)s::jsonb, %(result_bytes)s::int, %(error)s::text,
        %(wake_at)s::timestamptz, %(event_key)s::text, %(child_id)s::uuid
    FROM job
    ON CONFLICT (job_id, name) DO UPDATE
    SET status = EXCLUDED.status,
        kind = EXCLUDED.kind,
        attempt = EXCLUDED.attempt,
        finished_at = EXCLUDED.finished_at,
        result = EXCLUDED.result,
        result_bytes = EXCLUDED.result_bytes,
        error = EXCLUDED.error,
        -- A wait's deadline is fixed by its first run: kept unless given.
        wake_at = COALESCE(EXCLUDED.wake_at, step.wake_at),
        event_key = COALESCE(EXCLUDED.event_key, step.event_key),
        child_id = COALESCE(EXCLUDED.child_id, step.child_id)
    WHERE step.status <> 'completed'
    RETURNING 1
),
unwaited AS (
    -- An event wait that ends (found, or timed out) is no longer woken by an
    -- emit of its key; nothing for any other step.
    DELETE FROM durable_jobs_event_waiter AS waiter
    USING job
    WHERE %(clear_waiter)s::boolean AND waiter.job_id = job.id
    RETURNING 1
)
SELECT job.cancel, (SELECT count(*) FROM recorded) > 0
FROM job;

-- lock_job --
-- Lock the job's row if this worker still holds its lease (run_job's suspension locks it before counting what it waits on, in a statement of its own, so that count's snapshot comes after the lock). Returns whether a cancel was requested; no row: the lease was lost.
SELECT cancel_requested_at IS NOT NULL
FROM durable_jobs_job
WHERE id = %(job_id)s AND lease_token = %(token)s AND status = 'running'
FOR NO KEY UPDATE;

-- suspend_job --
-- Suspend a running job (ctx.sleep, ctx.wait_for_event, ctx.run_job), fenced by the lease: it becomes %(status)s (pending, available at %(available_at)s; or waiting), with why in waiting_for, and gives its lease back; the attempt is given back too (attempts - 1: a suspension is never a failed attempt). With %(awaits)s, waiting_on is the number of its unresolved edges, counted in this statement (after lock_job locked the row), and a job with none left is pending at once. A job whose cancel was requested is not suspended (the worker ends it cancelled, as any attempt of a cancelled job). Its queue is NOTIFYed (at commit) when it is runnable at once. Returns one row (the lease is held) with whether a cancel was requested and whether the job was suspended; no row: the lease was lost.
WITH job AS (
    SELECT id, cancel_requested_at IS NOT NULL AS cancel
    FROM durable_jobs_job
    WHERE id = %(job_id)s AND lease_token = %(token)s AND status = 'running'
    FOR NO KEY UPDATE
),
edges AS (
    SELECT count(*) AS unresolved
    FROM durable_jobs_dependency
    WHERE %(awaits)s::boolean AND child_id = %(job_id)s AND NOT resolved
),
suspended AS (
    UPDATE durable_jobs_job AS suspended_job
    SET status = CASE
            WHEN %(awaits)s::boolean AND edges.unresolved = 0 THEN 'pending'
            ELSE %(status)s::text
        END,
        available_at = COALESCE(%(available_at)s::timestamptz, now()),
        waiting_for = %(waiting_for)s::jsonb,
        waiting_on = CASE
            WHEN %(awaits)s::boolean THEN edges.unresolved
            ELSE suspended_job.waiting_on
        END,
        attempts = GREATEST(suspended_job.attempts - 1, 0),
        lease_holder = NULL,
        lease_expires_at = NULL,
        lease_token = NULL,
        updated_at = now()
    FROM job, edges
    WHERE suspended_job.id = job.id AND NOT job.cancel
    RETURNING suspended_job.id,
        CASE WHEN suspended_job.status = 'pending' AND suspended_job.available_at <= now()
            THEN pg_notify(%(channel)s, suspended_job.queue) END
)
SELECT job.cancel, (SELECT count(*) FROM suspended) > 0
FROM job;

-- read_event --
-- The event %(key)s, if it was emitted: one row with its payload; none otherwise.
SELECT payload FROM durable_jobs_event WHERE key = %(key)s;

-- add_event_waiter --
-- The job waits for the event %(key)s: what an emit of the key wakes (one row a job: a new wait replaces the last). Returns the job's id.
INSERT INTO durable_jobs_event_waiter AS waiter (job_id, key, since)
VALUES (%(job_id)s, %(key)s::text, now())
ON CONFLICT (job_id) DO UPDATE SET key = EXCLUDED.key, since = EXCLUDED.since
RETURNING waiter.job_id;

-- await_child --
-- ctx.run_job: make the job %(job_id)s wait for its child %(child_id)s, unless the child has finished. Locks the child's row first (as the child's own outcome does before it releases its dependents: the same order, so the two cannot deadlock), then adds the 'awaits' edge (child_id: the waiting job, parent_id: the child; an edge left resolved by an earlier wait for the same child waits again) and counts it in the child's dependent_count, so the child's outcome releases it. Returns whether the child was still unfinished (then the edge exists).
WITH child AS (
    SELECT id
    FROM durable_jobs_job
    WHERE id = %(child_id)s AND status NOT IN ('completed', 'dead', 'cancelled')
    FOR NO KEY UPDATE
),
edge AS (
    INSERT INTO durable_jobs_dependency AS dependency (child_id, parent_id, resolved, kind)
    SELECT %(job_id)s, child.id, false, 'awaits' FROM child
    ON CONFLICT (child_id, parent_id) DO UPDATE SET resolved = false
    RETURNING (xmax = 0) AS inserted
),
counted AS (
    UPDATE durable_jobs_job AS child_job
    SET dependent_count = child_job.dependent_count + 1
    FROM child
    WHERE child_job.id = child.id AND EXISTS (SELECT 1 FROM edge WHERE edge.inserted)
    RETURNING child_job.id
)
SELECT (SELECT count(*) FROM child) > 0, (SELECT count(*) FROM counted);

-- child_state --
-- The status, result and last error of a job's child (ctx.run_job); no row: it was pruned.
SELECT status, result, last_error FROM durable_jobs_job WHERE id = %(child_id)s;
