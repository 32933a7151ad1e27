-- Claim and outcomes: claim runnable jobs, record their outcomes fenced by the lease token, release dependents, NOTIFY finished jobs. Run by db/claims.py.
-- Each query starts with a `-- name --` header and a one-line description;
-- parameters are named: %(name)s. A name starting with _ is a fragment,
-- included by a line <<_name>> (queries.py), from any of the gateway's files.

-- _claimed --
-- The claim queries' end (a fragment, see queries.py): after a CTE `candidates` of the ids to claim, mark them running (unless their queue is paused now), count the attempt, take a lease with a fresh token, and return the jobs in claim order. statement_timestamp(), not now(): a limited queue's claim runs in a transaction whose first statement took a lock, and its jobs start when this statement runs, after it counted the running ones (the same instant as now() for a claim on its own).
claimed AS (
    -- The active partition itself (db/partitions.py): a claim never moves a
    -- row, and the other partitions stay out of the plan.
    UPDATE durable_jobs_job_active AS job
    SET status = 'running',
        attempts = job.attempts + 1,
        started_at = statement_timestamp(),
        updated_at = statement_timestamp(),
        lease_holder = %(worker_id)s,
        lease_expires_at = statement_timestamp()
            + make_interval(secs => %(lease_seconds)s::float8),
        lease_token = gen_random_uuid()
    -- Each candidate found by primary key: = ANY(ARRAY(...)) is an index
    -- condition, whatever the planner guesses of the candidates. A join
    -- with them was hashed against a scan of the whole backlog (the
    -- planner knows the claim's LIMIT, and a hash of N rows looked cheaper
    -- than 256 probes): 3 of a claim's 5 ms on a backlog of 20,000.
    WHERE job.id = ANY(ARRAY(SELECT id FROM candidates))
        -- A pause committed after this worker last read the paused queues
        -- (its claims leave those out already): its jobs stay pending. Read
        -- once per statement, from a table of a few rows; a filter on the
        -- rows the index condition found.
        AND job.queue <> ALL (ARRAY(
            SELECT name FROM durable_jobs_queue
            WHERE paused_at IS NOT NULL AND (paused_until IS NULL OR paused_until > now())
        ))
    RETURNING job.id, job.type, job.queue, job.payload, job.attempts, job.max_attempts,
        job.lease_token, job.available_at, job.started_at, job.idempotency_key, job.timeout,
        job.priority, job.created_at, job.dependent_count, job.parent_count, job.trace_context
)
-- An UPDATE returns its rows in join order, not the claim's: sorted again,
-- so the worker starts a batch claimed ahead in claim order.
SELECT id, type, queue, payload, attempts, max_attempts, lease_token, available_at,
    started_at, idempotency_key, timeout, dependent_count, parent_count, trace_context,
    created_at
FROM claimed
ORDER BY priority DESC, available_at, created_at;

-- claim_job_ids --
-- Claim the given pending jobs, whatever their available_at: django_durable_jobs.testing's run_jobs(), whose clock passes over retry delays and sleeps, and which runs the jobs it picked, not the queue's first ones. Otherwise the same as claim_jobs.
WITH candidates AS MATERIALIZED (
    SELECT id
    FROM durable_jobs_job_active
    WHERE id = ANY(%(ids)s::uuid[]) AND status = 'pending'
    ORDER BY priority DESC, available_at, created_at
    FOR UPDATE SKIP LOCKED
),
<<_claimed>>

-- claim_jobs --
-- Claim up to %(limit)s runnable jobs from any queue but the %(excluded)s ones: mark them running, count the attempt, and take a lease with a fresh token.
WITH candidates AS MATERIALIZED (
    -- MATERIALIZED fences the planner: the LIMIT applies before the UPDATE,
    -- so no more than %(limit)s rows are ever claimed (Oban's note).
    SELECT id
    FROM durable_jobs_job_active
    WHERE status = 'pending' AND available_at <= now()
        -- Queues not claimed here: paused ones, and limited ones (claimed
        -- by claim_limited); usually none.
        AND queue NOT IN (SELECT unnest(%(excluded)s::text[]))
        -- Jobs whose type limits each concurrency key: claimed by claim_keyed.
        AND NOT (concurrency_key IS NOT NULL AND type IN (SELECT unnest(%(keyed_types)s::text[])))
        -- Both as sub-selects (hashed, run once), not `<> ALL (%(...)s)`:
        -- this statement is prepared (db.PREPARED), and for an array that
        -- is a parameter PostgreSQL's generic plan guesses `<> ALL` keeps
        -- almost no row (with one queue in the table: none), so it sorted
        -- a sequential scan of the whole backlog. A sub-select it guesses
        -- keeps half, and the generic plan reads the claim index, as the
        -- custom plans do (benchmarks/planning.py).
    ORDER BY priority DESC, available_at, created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
<<_claimed>>

-- claim_jobs_in_queues --
-- Claim up to %(limit)s runnable jobs from the given queues; otherwise the same as claim_jobs.
WITH candidates AS MATERIALIZED (
    SELECT id
    FROM durable_jobs_job_active
    WHERE status = 'pending' AND available_at <= now() AND queue = ANY(%(queues)s::text[])
        AND NOT (queue = ANY(%(excluded)s::text[]))
        -- Jobs whose type limits each concurrency key: claimed by claim_keyed.
        AND NOT (concurrency_key IS NOT NULL AND type = ANY(%(keyed_types)s::text[]))
    ORDER BY priority DESC, available_at, created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
<<_claimed>>

-- claim_jobs_per_queue --
-- Claim up to limits[i] runnable jobs from queues[i], for each i, in one statement (%(total)s is the sum of the limits): a worker with slots per queue asks each queue for its own free slots, so a busy queue cannot take another's. Otherwise the same as claim_jobs.
WITH candidates AS MATERIALIZED (
    -- One index scan per queue (the LATERAL runs once for each (queue, limit)
    -- pair, each reading the claim-by-queue index in claim order); the
    -- fence keeps each LIMIT ahead of the UPDATE, as in claim_jobs.
    SELECT picked.id
    FROM unnest(%(queues)s::text[], %(limits)s::int[]) AS slot(queue, free)
    CROSS JOIN LATERAL (
        SELECT id
        FROM durable_jobs_job_active
        WHERE status = 'pending' AND available_at <= now() AND queue = slot.queue
            AND NOT (concurrency_key IS NOT NULL AND type = ANY(%(keyed_types)s::text[]))
        ORDER BY priority DESC, available_at, created_at
        LIMIT slot.free
        FOR UPDATE SKIP LOCKED
    ) AS picked
    -- Never more than the sum of the limits anyway; a constant LIMIT tells
    -- the planner how few rows come out, so the UPDATE finds them by primary
    -- key instead of hashing a scan of the whole table.
    LIMIT %(total)s
),
<<_claimed>>

-- _finished_notified --
-- A fragment (see queries.py) that goes on with a WITH holding a CTE `finished(id)`: the jobs this statement finished (completed, dead or cancelled). NOTIFY them on %(finished_channel)s, delivered at commit, for wait() and await_job(): '<prefix><id>,<id>,...', %(finished_chunk)s ids a notification, so that a payload stays under PostgreSQL's 8,000 bytes. One notification for a statement (and a few for a big batch), not one a job: each costs a queue entry at commit. No finished job, no pg_notify: a NOTIFYing commit holds PostgreSQL's cluster-wide notify lock until it is flushed. `finished_notified` is one row, its count of notifications; the statement must join it for PostgreSQL to evaluate it.
finished_notified AS (
    SELECT count(*) AS notifications
    FROM (
        SELECT pg_notify(%(finished_channel)s, %(finished_prefix)s || string_agg(id::text, ','))
        FROM (
            SELECT id, (row_number() OVER () - 1) / %(finished_chunk)s AS chunk FROM finished
        ) AS numbered
        GROUP BY chunk
    ) AS sent
)

-- record_outcomes --
-- Record the outcomes of a batch of attempts in one statement: each row's transition (complete, retry, dead, release, cancel) says what it writes (a release with a delay_us is available again that much later). Each outcome is fenced by its claim's lease token: an outcome from a worker whose lease was reaped (and maybe claimed again) matches no row and changes nothing. A retry or release of a job whose cancel was requested (cancel_requested_at) ends it cancelled instead: the worker had not heard of the request yet, and a cancelled job must not run again. With %(without_dependents)s, only jobs without dependents are written: a job that gained a child since its worker claimed it is left to a write in a transaction that releases its children (db.record_outcomes), since this statement's snapshot may not see the child. The jobs it finishes are NOTIFYed at commit (_finished_notified). Returns the ids written, their new status and dependent_count.
WITH outcome AS (
    -- Row: [id, lease_token, transition, result, delay_us, run_at,
    --       last_error, error_entry]
    SELECT
        (o->>0)::uuid AS id,
        (o->>1)::uuid AS token,
        o->>2 AS transition,
        NULLIF(o->3, 'null'::jsonb) AS result,
        (o->>4)::bigint AS delay_us,
        (o->>5)::timestamptz AS run_at,
        o->>6 AS last_error,
        NULLIF(o->7, 'null'::jsonb) AS error_entry
    FROM jsonb_array_elements(%(outcomes)s::jsonb) AS o
),
locked AS MATERIALIZED (
    -- In id order, the order in which an enqueue locks its parents and
    -- release_dependents its children, whatever plan the UPDATE below
    -- gets: a batch that ends two parents of a child being enqueued then
    -- waits for that enqueue instead of deadlocking with it. FOR UPDATE,
    -- the lock of the UPDATE's move of a finished job to its history
    -- partition (a delete from the active one), taken at once. On the
    -- active partition itself, by primary key only (= ANY(ARRAY(...)) is
    -- probed, never joined): with a condition on status, the planner may
    -- read the running jobs through an index whose dead entries (every
    -- claim and outcome leaves one) it steps over each time. The UPDATE
    -- checks the status and the token again, per outcome.
    SELECT job.id
    FROM durable_jobs_job_active AS job
    WHERE job.id = ANY(ARRAY(SELECT id FROM outcome))
        AND job.lease_token = ANY(ARRAY(SELECT token FROM outcome))
    ORDER BY job.id
    FOR UPDATE OF job
),
recorded AS (
UPDATE durable_jobs_job AS job
SET status = CASE
        WHEN outcome.transition = 'complete' THEN 'completed'
        WHEN outcome.transition = 'dead' THEN 'dead'
        WHEN outcome.transition = 'cancel' THEN 'cancelled'
        -- A retry or release that raced a cancel request (see above).
        WHEN job.cancel_requested_at IS NOT NULL THEN 'cancelled'
        ELSE 'pending'  -- retry, release
    END,
    result = CASE WHEN outcome.transition = 'complete' THEN outcome.result ELSE job.result END,
    completed_at = CASE
        WHEN outcome.transition IN ('complete', 'dead', 'cancel') OR job.cancel_requested_at IS NOT NULL
        THEN now()
    END,
    available_at = CASE
        WHEN outcome.transition = 'retry' AND job.cancel_requested_at IS NULL
        THEN COALESCE(outcome.run_at, now() + COALESCE(outcome.delay_us, 0) * interval '1 microsecond')
        -- A release with a delay: a job of a type its worker has no handler
        -- for, given back for a worker that has one (worker/unknown_types.py),
        -- not claimed again by this one at once.
        WHEN outcome.transition = 'release' AND outcome.delay_us > 0 AND job.cancel_requested_at IS NULL
        THEN now() + outcome.delay_us * interval '1 microsecond'
        -- A release at shutdown keeps available_at: the job never ran (a tick stays on its tick).
        ELSE job.available_at
    END,
    -- A release (shutdown) gives the attempt back: it never really ran.
    attempts = CASE
        WHEN outcome.transition = 'release' AND job.cancel_requested_at IS NULL THEN job.attempts - 1
        ELSE job.attempts
    END,
    last_error = COALESCE(outcome.last_error, job.last_error),
    errors = CASE
        WHEN outcome.error_entry IS NULL THEN job.errors
        -- Append, keeping only the newest %(history_limit)s entries.
        ELSE (
            SELECT jsonb_agg(entry ORDER BY position)
            FROM jsonb_array_elements(job.errors || jsonb_build_array(outcome.error_entry))
                WITH ORDINALITY AS history(entry, position)
            WHERE position > jsonb_array_length(job.errors) + 1 - %(history_limit)s
        )
    END,
    lease_holder = NULL,
    lease_expires_at = NULL,
    lease_token = NULL,
    updated_at = now()
FROM outcome
WHERE job.id = outcome.id AND job.lease_token = outcome.token AND job.status = 'running'
    AND (job.dependent_count = 0 OR NOT %(without_dependents)s::boolean)
    -- A constant condition: `locked` runs (and locks) once, before the
    -- UPDATE reads a row, and does not change the UPDATE's plan.
    AND (SELECT count(*) FROM locked) >= 0
RETURNING job.id, job.status, job.dependent_count
),
finished AS (
    -- A retry or release leaves the job pending: not finished. None at all
    -- with NOTIFY_FINISHED off: no NOTIFY, no notify lock at commit.
    SELECT id FROM recorded
    WHERE %(notify_finished)s::boolean AND status IN ('completed', 'dead', 'cancelled')
),
<<_finished_notified>>
-- One row of finished_notified (an aggregate), so every written id comes out.
SELECT recorded.id, recorded.status, recorded.dependent_count
FROM recorded CROSS JOIN finished_notified;

-- release_dependents --
-- Release the children of jobs that an earlier statement of this transaction ended and locked: %(ids)s, with their new %(statuses)s (completed, dead or cancelled). Marks their edges resolved and, for each child still waiting: a completed parent (or a dead or cancelled one, when the child's on_parent_failure is 'run' or the edge is an 'awaits' one, ctx.run_job's) takes one off its waiting_on, and at 0 the child becomes pending, available now (or at its own available_at, if later), and its queue is notified (delivered at commit); a dead or cancelled parent cancels a child whose on_parent_failure is 'cancel', with a reason naming the parent. Its snapshot is taken after the parents were locked, so it sees every child enqueued under them (an enqueue that comes later waits for the lock, then sees the parent finished). The children it cancels are NOTIFYed as finished at commit (_finished_notified), as record_outcomes does for the jobs it ends. Returns the children cancelled here, each with whether it has dependents of its own (those are the next level, for the next statement); one NULL row when there is none.
WITH ended AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(statuses)s::text[]) AS f(id, status)
),
edges AS (
    UPDATE durable_jobs_dependency AS edge
    SET resolved = true
    FROM ended
    WHERE edge.parent_id = ended.id AND NOT edge.resolved
    RETURNING edge.child_id, edge.parent_id, ended.status AS parent_status, edge.kind
),
effects AS (
    -- An 'awaits' edge (ctx.run_job: its child is the job that suspended to
    -- wait for this one) never cancels: its end, whatever it is, wakes the
    -- waiting job, whose handler reads it (ChildJobFailed).
    SELECT child_id,
        count(*) AS resolved,
        count(*) FILTER (WHERE parent_status <> 'completed' AND kind <> 'awaits') AS failed,
        min(parent_id::text || ' ended ' || parent_status)
            FILTER (WHERE parent_status <> 'completed' AND kind <> 'awaits') AS reason
    FROM edges
    GROUP BY child_id
),
locked_children AS MATERIALIZED (
    -- In id order: statements releasing the same children (a callback
    -- whose parents complete on several workers) lock them in the same
    -- order, so they wait for each other instead of deadlocking. The
    -- UPDATE below then applies its change to the newest version of each
    -- row, so two parents of one child, recorded at once by two workers,
    -- take one off waiting_on each: no count is lost.
    SELECT job.id
    FROM durable_jobs_job AS job
    WHERE job.id IN (SELECT child_id FROM effects) AND job.status = 'waiting'
    ORDER BY job.id
    FOR NO KEY UPDATE
),
children AS (
    UPDATE durable_jobs_job AS child
    SET status = CASE
            WHEN effects.failed > 0 AND child.on_parent_failure = 'cancel' THEN 'cancelled'
            WHEN child.waiting_on <= effects.resolved THEN 'pending'
            ELSE 'waiting'
        END,
        waiting_on = GREATEST(child.waiting_on - effects.resolved, 0),
        available_at = CASE
            WHEN NOT (effects.failed > 0 AND child.on_parent_failure = 'cancel')
                AND child.waiting_on <= effects.resolved
            THEN GREATEST(child.available_at, now())
            ELSE child.available_at
        END,
        completed_at = CASE
            WHEN effects.failed > 0 AND child.on_parent_failure = 'cancel' THEN now()
            ELSE child.completed_at
        END,
        -- A job woken from ctx.run_job's wait waits for nothing now (NULL
        -- stays NULL for the depends_on children, which never set it).
        waiting_for = CASE
            WHEN NOT (effects.failed > 0 AND child.on_parent_failure = 'cancel')
                AND child.waiting_on <= effects.resolved
            THEN NULL
            ELSE child.waiting_for
        END,
        last_error = CASE
            WHEN effects.failed > 0 AND child.on_parent_failure = 'cancel'
            THEN 'Cancelled: parent job ' || effects.reason || '.'
            ELSE child.last_error
        END,
        updated_at = now()
    FROM effects
    WHERE child.id = effects.child_id AND child.status = 'waiting'
        AND child.id IN (SELECT id FROM locked_children)
    -- pg_notify per released child: PostgreSQL delivers one notification
    -- per distinct payload of a transaction, so one per queue.
    RETURNING child.id, child.status, child.dependent_count,
        CASE WHEN child.status = 'pending' THEN pg_notify(%(channel)s, child.queue) END
),
finished AS (
    -- The children cancelled here are finished too: their waiters hear of it.
    SELECT id FROM children WHERE %(notify_finished)s::boolean AND status = 'cancelled'
),
<<_finished_notified>>
-- finished_notified on the preserved side: PostgreSQL evaluates it even when
-- no child is returned (an inner join with an empty side may skip it); then
-- the one row's id is NULL.
SELECT children.id, children.dependent_count > 0
FROM finished_notified
LEFT JOIN children ON children.status = 'cancelled';

-- rewait_dependents --
-- A requeue of jobs %(ids)s (dead or cancelled, locked by an earlier statement of this transaction): their dependents still waiting, which had counted their end as done (on_parent_failure 'run'), wait for them again (waiting_on goes back up, the edge is unresolved), so they proceed when the requeued job completes. Children locked in id order, as release_dependents does. Returns the children that wait again.
WITH counted AS (
    SELECT edge.child_id, count(*) AS n
    FROM durable_jobs_dependency AS edge
    WHERE edge.parent_id = ANY(%(ids)s::uuid[]) AND edge.resolved
    GROUP BY edge.child_id
),
locked AS MATERIALIZED (
    SELECT job.id
    FROM durable_jobs_job AS job
    WHERE job.id IN (SELECT child_id FROM counted) AND job.status = 'waiting'
    ORDER BY job.id
    FOR NO KEY UPDATE
),
children AS (
    UPDATE durable_jobs_job AS child
    SET waiting_on = child.waiting_on + counted.n, updated_at = now()
    FROM counted
    WHERE child.id = counted.child_id AND child.status = 'waiting'
        AND child.id IN (SELECT id FROM locked)
    RETURNING child.id
)
UPDATE durable_jobs_dependency AS edge
SET resolved = false
WHERE edge.parent_id = ANY(%(ids)s::uuid[]) AND edge.resolved
    AND edge.child_id IN (SELECT id FROM children)
RETURNING edge.child_id;

-- held_with_dependents --
-- For outcomes record_outcomes refused: those of %(ids)s still running under the same lease (%(tokens)s) that have dependents; their jobs gained a child since the claim, the others lost their lease. Primary-key lookups; nothing is written.
SELECT job.id
FROM durable_jobs_job_active AS job
JOIN unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS held(id, token)
    ON job.id = held.id AND job.lease_token = held.token
WHERE job.status = 'running' AND job.dependent_count > 0;

-- next_available_at --
-- When the next pending job in these queues (NULL: all) but the %(excluded)s ones becomes runnable, so an idle worker can sleep until then instead of a full poll interval.
SELECT min(available_at)
FROM durable_jobs_job_active
WHERE status = 'pending' AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
    AND NOT (queue = ANY(%(excluded)s::text[]));

-- notify_finished --
-- Tell wait() and await_job() that these jobs finished outside record_outcomes (a pending job cancelled), as record_outcomes does: delivered at commit, %(finished_chunk)s ids a notification.
WITH finished AS (
    SELECT unnest(%(ids)s::uuid[]) AS id
),
<<_finished_notified>>
SELECT notifications FROM finished_notified;
