-- The queue's SQL, kept in one place: the gateway (db/__init__.py) is its only caller.
-- Each query starts with a `-- name --` header and a one-line description.
-- Parameters are named: %(name)s.

-- insert_job --
-- Insert one job, unless its idempotency key is taken, and NOTIFY its queue (delivered at commit). One plain INSERT: the single-job path is bound by round trips and commits, so it avoids insert_jobs' CTEs.
INSERT INTO durable_jobs_job (
    id, type, queue, payload, idempotency_key, status, priority, attempts,
    max_attempts, available_at, created_at, updated_at, last_error, errors, timeout,
    concurrency_key, trace_context
)
VALUES (
    %(id)s, %(type)s, %(queue)s, %(payload)s::jsonb, %(key)s, 'pending', %(priority)s, 0,
    %(max_attempts)s,
    -- The database's clock, the one the claim compares with.
    COALESCE(%(run_at)s::timestamptz, now() + COALESCE(%(delay_us)s::bigint, 0) * interval '1 microsecond'),
    now(), now(), '', '[]'::jsonb, %(timeout)s::float8, %(concurrency_key)s,
    %(trace_context)s::jsonb
)
-- Waits for a concurrent insert of the same key to commit or roll back,
-- so racing callers end with exactly one row.
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id, available_at, created_at, pg_notify(%(channel)s, queue);

-- _job_columns --
-- A fragment (see queries.py): the columns of one row of insert_jobs' JSON document, `row`: [id, type, queue, payload, idempotency_key, priority, max_attempts, delay_us, run_at, timeout, concurrency_key].
        (row->>0)::uuid AS id,
        row->>1 AS type,
        row->>2 AS queue,
        row->3 AS payload,
        row->>4 AS idempotency_key,
        (row->>5)::smallint AS priority,
        (row->>6)::integer AS max_attempts,
        (row->>7)::bigint AS delay_us,
        (row->>8)::timestamptz AS run_at,
        (row->>9)::float8 AS timeout,
        row->>10 AS concurrency_key

-- insert_jobs --
-- Insert a batch of jobs, given as one JSON array of rows, in one statement; skip rows whose idempotency key is taken; NOTIFY each queue that received a job (delivered at commit). Returns the ids inserted and the database's now().
WITH input AS (
    -- One JSON document rather than nine arrays: encoding it is one C call
    -- in Python, and PostgreSQL parses it faster than it binds the arrays.
    SELECT
<<_job_columns>>
    FROM jsonb_array_elements(%(jobs)s::jsonb) AS row
),
inserted AS (
    INSERT INTO durable_jobs_job (
        id, type, queue, payload, idempotency_key, status, priority, attempts,
        max_attempts, available_at, created_at, updated_at, last_error, errors, timeout,
        concurrency_key, trace_context
    )
    SELECT
        id, type, queue, payload, idempotency_key, 'pending', priority, 0, max_attempts,
        -- The database's clock, the one the claim compares with.
        COALESCE(run_at, now() + COALESCE(delay_us, 0) * interval '1 microsecond'),
        now(), now(), '', '[]'::jsonb, timeout, concurrency_key,
        -- One trace context for the whole batch (one call, one current span):
        -- a parameter of the statement, not a column of every row.
        %(trace_context)s::jsonb
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
        (row->>8)::timestamptz AS run_at,
        (row->>9)::float8 AS timeout,
        row->>10 AS concurrency_key
    FROM jsonb_array_elements(%(jobs)s::jsonb) AS row
),
inserted AS (
    INSERT INTO durable_jobs_job (
        id, type, queue, payload, idempotency_key, status, priority, attempts,
        max_attempts, available_at, created_at, updated_at, last_error, errors, timeout,
        concurrency_key, trace_context
    )
    SELECT
        id, type, queue, payload, NULL, 'pending', priority, 0, max_attempts,
        COALESCE(run_at, now() + COALESCE(delay_us, 0) * interval '1 microsecond'),
        now(), now(), '', '[]'::jsonb, timeout, concurrency_key, %(trace_context)s::jsonb
    FROM input
    RETURNING queue
),
notified AS (
    SELECT count(pg_notify(%(channel)s, queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted) AS queues
)
SELECT count(*), now()
FROM inserted CROSS JOIN notified;

-- insert_jobs_with_parents --
-- insert_jobs for a batch in which some job has parents (depends_on), one or many rows: lock the parents (in id order, so concurrent enqueues sharing parents wait for each other instead of deadlocking) and read their newest status; insert nothing if one does not exist (a parent may also be a row of the batch itself: chain() and group() insert a whole shape in one statement; such a parent is new, so unfinished, and starts with its children in the batch as its dependent_count); otherwise insert each job waiting for its unfinished parents (pending when none is left; cancelled, the reason naming the parent, when one ended dead or cancelled and its on_parent_failure is 'cancel'), its edges (resolved for parents already finished), and add the children to each parent's dependent_count, which makes the worker write the parent's outcome in a transaction that releases its children (record_outcomes; an outcome written after this insert locked the parent waits for this transaction). Skips rows whose idempotency key is taken, with no edge; NOTIFYs each queue that received a pending job (delivered at commit). Returns the rows inserted (ids, statuses, waiting_on, last_error), the database's now(), and the parents that do not exist.
WITH input AS (
    -- Row: insert_jobs' eleven columns, then on_parent_failure and the
    -- parents' ids (a JSON array, without duplicates).
    SELECT
<<_job_columns>>,
        row->>11 AS on_parent_failure,
        row->12 AS parents
    FROM jsonb_array_elements(%(jobs)s::jsonb) AS row
),
edge AS (
    SELECT input.id AS child_id, p.id::uuid AS parent_id
    FROM input CROSS JOIN LATERAL jsonb_array_elements_text(input.parents) AS p(id)
),
parent AS MATERIALIZED (
    -- FOR NO KEY UPDATE returns the newest version of each row, after
    -- waiting for a transaction that is writing it: the status read here
    -- is the one that holds until this transaction ends.
    -- = ANY(ARRAY(...)), not IN (SELECT ...): the planner guesses 100
    -- elements per JSON array (10,000 edges for a chain of 100 rows), and
    -- an array of ids is always probed by the primary key, never joined.
    SELECT job.id, job.status
    FROM durable_jobs_job AS job
    WHERE job.id = ANY(ARRAY(SELECT parent_id FROM edge))
    ORDER BY job.id
    FOR NO KEY UPDATE
),
missing AS (
    SELECT DISTINCT parent_id FROM edge
    WHERE parent_id NOT IN (SELECT id FROM parent) AND parent_id NOT IN (SELECT id FROM input)
),
children AS (
    -- Parents that are rows of this batch: their children here.
    SELECT parent_id AS id, count(*) AS n
    FROM edge
    WHERE parent_id IN (SELECT id FROM input)
    GROUP BY parent_id
),
decided AS (
    SELECT edge.child_id AS id,
        count(*) AS parent_count,
        count(*) FILTER (
            WHERE parent.status IS NULL OR parent.status NOT IN ('completed', 'dead', 'cancelled')
        ) AS waiting_on,
        min(parent.id::text || ' ended ' || parent.status)
            FILTER (WHERE parent.status IN ('dead', 'cancelled')) AS failed
    FROM edge LEFT JOIN parent ON parent.id = edge.parent_id
    GROUP BY edge.child_id
),
planned AS (
    SELECT input.*, COALESCE(decided.parent_count, 0) AS parent_count,
        COALESCE(decided.waiting_on, 0) AS waiting_on,
        CASE
            WHEN decided.failed IS NOT NULL AND input.on_parent_failure = 'cancel'
            THEN 'Cancelled: parent job ' || decided.failed || '.'
        END AS cancelled,
        COALESCE(children.n, 0) AS dependent_count
    FROM input
    LEFT JOIN decided ON decided.id = input.id
    LEFT JOIN children ON children.id = input.id
),
inserted AS (
    INSERT INTO durable_jobs_job (
        id, type, queue, payload, idempotency_key, status, priority, attempts,
        max_attempts, available_at, created_at, updated_at, completed_at, last_error, errors,
        timeout, concurrency_key, on_parent_failure, parent_count, waiting_on, dependent_count,
        trace_context
    )
    SELECT
        id, type, queue, payload, idempotency_key,
        CASE
            WHEN cancelled IS NOT NULL THEN 'cancelled'
            WHEN waiting_on > 0 THEN 'waiting'
            ELSE 'pending'
        END,
        priority, 0, max_attempts,
        COALESCE(run_at, now() + COALESCE(delay_us, 0) * interval '1 microsecond'),
        now(), now(), CASE WHEN cancelled IS NOT NULL THEN now() END,
        COALESCE(cancelled, ''), '[]'::jsonb, timeout, concurrency_key,
        on_parent_failure, parent_count, waiting_on, dependent_count, %(trace_context)s::jsonb
    FROM planned
    WHERE NOT EXISTS (SELECT 1 FROM missing)
    ORDER BY idempotency_key
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue, status, waiting_on, last_error
),
edges AS (
    INSERT INTO durable_jobs_dependency (child_id, parent_id, resolved)
    SELECT edge.child_id, edge.parent_id,
        COALESCE(parent.status IN ('completed', 'dead', 'cancelled'), false)
    FROM edge
    JOIN inserted ON inserted.id = edge.child_id
    LEFT JOIN parent ON parent.id = edge.parent_id
    RETURNING parent_id
),
counted AS (
    -- Rows of the batch are not seen here (this statement's snapshot):
    -- they start with their count.
    UPDATE durable_jobs_job AS job
    SET dependent_count = job.dependent_count + added.n
    FROM (SELECT parent_id, count(*) AS n FROM edges GROUP BY parent_id) AS added
    WHERE job.id = added.parent_id
    RETURNING job.id
),
notified AS (
    SELECT count(pg_notify(%(channel)s, queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted WHERE status = 'pending') AS queues
)
SELECT
    (SELECT array_agg(id ORDER BY id) FROM inserted),
    (SELECT array_agg(status ORDER BY id) FROM inserted),
    (SELECT array_agg(waiting_on ORDER BY id) FROM inserted),
    (SELECT array_agg(last_error ORDER BY id) FROM inserted),
    now(),
    (SELECT array_agg(parent_id) FROM missing),
    (SELECT count(*) FROM counted),
    (SELECT n FROM notified);

-- _claimed --
-- The claim queries' end (a fragment, see queries.py): after a CTE `candidates` of the ids to claim, mark them running (unless their queue is paused now), count the attempt, take a lease with a fresh token, and return the jobs in claim order. statement_timestamp(), not now(): a limited queue's claim runs in a transaction whose first statement took a lock, and its jobs start when this statement runs, after it counted the running ones (the same instant as now() for a claim on its own).
claimed AS (
    UPDATE durable_jobs_job AS job
    SET status = 'running',
        attempts = job.attempts + 1,
        started_at = statement_timestamp(),
        updated_at = statement_timestamp(),
        lease_holder = %(worker_id)s,
        lease_expires_at = statement_timestamp()
            + make_interval(secs => %(lease_seconds)s::float8),
        lease_token = gen_random_uuid()
    FROM candidates
    WHERE job.id = candidates.id
        -- A pause committed after this worker last read the paused queues
        -- (its claims leave those out already): its jobs stay pending. Read
        -- once per statement, from a table of a few rows. On candidates'
        -- column, not job's: the planner, which cannot know the array, then
        -- guesses few candidates and finds each by primary key (on job's, it
        -- guessed one job row and scanned the whole table for it).
        AND candidates.queue <> ALL (ARRAY(
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
    started_at, idempotency_key, timeout, dependent_count, parent_count, trace_context
FROM claimed
ORDER BY priority DESC, available_at, created_at;

-- claim_jobs --
-- Claim up to %(limit)s runnable jobs from any queue but the %(excluded)s ones: mark them running, count the attempt, and take a lease with a fresh token.
WITH candidates AS MATERIALIZED (
    -- MATERIALIZED fences the planner: the LIMIT applies before the UPDATE,
    -- so no more than %(limit)s rows are ever claimed (Oban's note).
    SELECT id, queue
    FROM durable_jobs_job
    WHERE status = 'pending' AND available_at <= now()
        -- Queues not claimed here: paused ones, and limited ones (claimed
        -- by claim_limited); usually none.
        AND NOT (queue = ANY(%(excluded)s::text[]))
        -- Jobs whose type limits each concurrency key: claimed by claim_keyed.
        AND NOT (concurrency_key IS NOT NULL AND type = ANY(%(keyed_types)s::text[]))
    ORDER BY priority DESC, available_at, created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
<<_claimed>>

-- claim_jobs_in_queues --
-- Claim up to %(limit)s runnable jobs from the given queues; otherwise the same as claim_jobs.
WITH candidates AS MATERIALIZED (
    SELECT id, queue
    FROM durable_jobs_job
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
    SELECT picked.id, picked.queue
    FROM unnest(%(queues)s::text[], %(limits)s::int[]) AS slot(queue, free)
    CROSS JOIN LATERAL (
        SELECT id, queue
        FROM durable_jobs_job
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
-- Record the outcomes of a batch of attempts in one statement: each row's transition (complete, retry, dead, release, cancel) says what it writes. Each outcome is fenced by its claim's lease token: an outcome from a worker whose lease was reaped (and maybe claimed again) matches no row and changes nothing. A retry or release of a job whose cancel was requested (cancel_requested_at) ends it cancelled instead: the worker had not heard of the request yet, and a cancelled job must not run again. With %(without_dependents)s, only jobs without dependents are written: a job that gained a child since its worker claimed it is left to a write in a transaction that releases its children (db.record_outcomes), since this statement's snapshot may not see the child. The jobs it finishes are NOTIFYed at commit (_finished_notified). Returns the ids written, their new status and dependent_count.
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
        -- A release keeps available_at: the job never ran (a tick stays on its tick).
        WHEN outcome.transition = 'retry' AND job.cancel_requested_at IS NULL
        THEN COALESCE(outcome.run_at, now() + COALESCE(outcome.delay_us, 0) * interval '1 microsecond')
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
-- Release the children of jobs that an earlier statement of this transaction ended and locked: %(ids)s, with their new %(statuses)s (completed, dead or cancelled). Marks their edges resolved and, for each child still waiting: a completed parent (or a dead or cancelled one, when the child's on_parent_failure is 'run') takes one off its waiting_on, and at 0 the child becomes pending, available now (or at its own available_at, if later), and its queue is notified (delivered at commit); a dead or cancelled parent cancels a child whose on_parent_failure is 'cancel', with a reason naming the parent. Its snapshot is taken after the parents were locked, so it sees every child enqueued under them (an enqueue that comes later waits for the lock, then sees the parent finished). The children it cancels are NOTIFYed as finished at commit (_finished_notified), as record_outcomes does for the jobs it ends. Returns the children cancelled here, each with whether it has dependents of its own (those are the next level, for the next statement); one NULL row when there is none.
WITH ended AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(statuses)s::text[]) AS f(id, status)
),
edges AS (
    UPDATE durable_jobs_dependency AS edge
    SET resolved = true
    FROM ended
    WHERE edge.parent_id = ended.id AND NOT edge.resolved
    RETURNING edge.child_id, edge.parent_id, ended.status AS parent_status
),
effects AS (
    SELECT child_id,
        count(*) AS resolved,
        count(*) FILTER (WHERE parent_status <> 'completed') AS failed,
        min(parent_id::text || ' ended ' || parent_status)
            FILTER (WHERE parent_status <> 'completed') AS reason
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
    WHERE job.id IN (SELECT child_id FROM effects)
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
FROM durable_jobs_job AS job
JOIN unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS held(id, token)
    ON job.id = held.id AND job.lease_token = held.token
WHERE job.status = 'running' AND job.dependent_count > 0;

-- extend_leases --
-- Heartbeat: push back the lease expiry of the jobs this worker still holds (matched by lease token), locking them in id order as record_outcomes does: the completer may be writing the outcomes of some of the same jobs at that moment, and two statements locking the same rows in different orders deadlock. Returns the ids extended; a held job missing from them was reaped.
WITH locked AS (
    SELECT job.id
    FROM durable_jobs_job AS job
    JOIN unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS held(id, token)
        ON job.id = held.id AND job.lease_token = held.token
    WHERE job.status = 'running'
    ORDER BY job.id
    FOR NO KEY UPDATE OF job
)
UPDATE durable_jobs_job AS job
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
FROM durable_jobs_job
WHERE status = 'running' AND lease_expires_at < now()
    AND (SELECT acquired FROM reaper)
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- _busy_keys --
-- A fragment (see queries.py) that opens a WITH: `limits`, the (type, concurrency_limit) pairs given as %(types)s and %(limits)s; `busy`, the (type, key) pairs whose jobs running on a live lease fill their limit.
WITH limits AS (
    SELECT * FROM unnest(%(types)s::text[], %(limits)s::int[]) AS l(type, lim)
),
busy AS (
    SELECT r.type, r.concurrency_key
    FROM durable_jobs_job AS r JOIN limits AS l ON l.type = r.type
    WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL AND r.lease_expires_at > now()
    GROUP BY r.type, r.concurrency_key, l.lim
    HAVING count(*) >= l.lim
)

-- lock_keys --
-- A claim of jobs with a concurrency key (their type has a concurrency_limit), first statement of its transaction: the first %(limit)s keys with a runnable job among the first %(scan)s such jobs, in claim order, leaving out keys at their limit in this statement's snapshot; each locked with a transaction-level advisory lock unless another claim holds it (then skipped: no waiting). Returns, for each key locked, its first jobs read (as many as its limit), in claim order, each with its rank within its key. claim_keyed then counts and claims in a snapshot taken after the locks, so two claims never both see a key's last free slot.
<<_busy_keys>>,
heads AS MATERIALIZED (
    -- Runnable keyed jobs in claim order, keys at their limit left out; a
    -- bounded number of rows (a few per key wanted), so the cost of a claim
    -- does not grow with the backlog. `place`: the order, read once here.
    SELECT j.id, j.type, j.concurrency_key,
        row_number() OVER (
            ORDER BY j.priority DESC, j.available_at, j.created_at
            -- ROWS: a job's place needs no look at the jobs that tie with it
            -- (a batch enqueued at once ties), so the LIMIT stops the scan.
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS place
    FROM durable_jobs_job AS j
    WHERE j.status = 'pending' AND j.available_at <= now()
        AND j.concurrency_key IS NOT NULL AND j.type = ANY(%(types)s::text[])
        AND (%(queues)s::text[] IS NULL OR j.queue = ANY(%(queues)s::text[]))
        AND NOT (j.queue = ANY(%(excluded)s::text[]))
        -- NOT IN, not NOT EXISTS: a hashed subplan, one probe per row read.
        -- The planner guesses `busy` holds one row, and an anti-join on that
        -- guess compared every row read with every busy key (at 1,000 keys,
        -- 50 ms a claim). Neither column is NULL here, so NOT IN means NOT EXISTS.
        AND (j.type, j.concurrency_key) NOT IN (SELECT b.type, b.concurrency_key FROM busy AS b)
    ORDER BY j.priority DESC, j.available_at, j.created_at
    LIMIT %(scan)s
),
picked AS MATERIALIZED (
    -- Their keys, each at its first job's place in claim order.
    SELECT type, concurrency_key, min(place) AS first
    FROM heads
    GROUP BY type, concurrency_key
    ORDER BY first
    LIMIT %(limit)s
),
locked AS MATERIALIZED (
    SELECT type, concurrency_key
    FROM picked
    WHERE pg_try_advisory_xact_lock(%(lock_space)s::int, hashtext(type || ' ' || concurrency_key))
),
ranked AS (
    SELECT heads.id, heads.type, heads.concurrency_key, heads.place,
        row_number() OVER (PARTITION BY heads.type, heads.concurrency_key ORDER BY heads.place) AS rank
    FROM heads JOIN locked USING (type, concurrency_key)
)
SELECT ranked.id, ranked.type, ranked.concurrency_key, ranked.rank
FROM ranked JOIN limits ON limits.type = ranked.type
WHERE ranked.rank <= limits.lim
ORDER BY ranked.place;

-- claim_keyed --
-- A claim of jobs with a concurrency key, second statement: of the jobs lock_keys returned (%(ids)s, each with its key and its rank within its key), those the key's limit leaves room for beside its jobs running on a live lease (the oldest of a key first), still pending; of all those, the first %(limit)s in claim order. Otherwise the same as claim_jobs.
WITH room AS (
    SELECT k.type, k.key, k.lim - (
        SELECT count(*) FROM durable_jobs_job AS r
        WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL
            AND r.type = k.type AND r.concurrency_key = k.key AND r.lease_expires_at > now()
    ) AS free
    FROM unnest(%(key_types)s::text[], %(keys)s::text[], %(key_limits)s::int[]) AS k(type, key, lim)
),
wanted AS (
    SELECT w.id
    FROM unnest(%(ids)s::uuid[], %(id_types)s::text[], %(id_keys)s::text[], %(ranks)s::int[])
        AS w(id, type, key, rank)
    JOIN room ON room.type = w.type AND room.key = w.key
    WHERE w.rank <= room.free
),
candidates AS MATERIALIZED (
    SELECT job.id, job.queue
    FROM durable_jobs_job AS job
    WHERE job.id IN (SELECT id FROM wanted)
        AND job.status = 'pending' AND job.available_at <= now()
    ORDER BY job.priority DESC, job.available_at, job.created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
<<_claimed>>

-- keys_held_back --
-- Queues with a runnable job whose concurrency key is at its limit (for durable_jobs_throttled_total's "key" reason), among %(types)s.
<<_busy_keys>>
SELECT DISTINCT j.queue
FROM busy AS b
JOIN durable_jobs_job AS j ON j.type = b.type AND j.concurrency_key = b.concurrency_key
WHERE j.status = 'pending' AND j.available_at <= now()
    AND (%(queues)s::text[] IS NULL OR j.queue = ANY(%(queues)s::text[]));

-- jobs_held_by_keys --
-- What per-key limits hold back now (jobs stats, GET /api/queues, the admin's Queues page): per queue, the runnable jobs whose (type, concurrency key) already runs its type's limit on a live lease, among %(types)s with %(limits)s. Both halves read partial indexes of unfinished jobs only (the running jobs, then each busy key's pending jobs through durable_jobs_key_pending_idx), never the finished history.
<<_busy_keys>>
SELECT j.queue, count(*)
FROM busy AS b
JOIN durable_jobs_job AS j ON j.type = b.type AND j.concurrency_key = b.concurrency_key
WHERE j.status = 'pending' AND j.concurrency_key IS NOT NULL AND j.available_at <= now()
GROUP BY j.queue;

-- lock_throttle --
-- A limited queue's claim (DURABLE_JOBS["QUEUES"]), first statement of its transaction: create the queue's throttle row if missing, and lock it, skipping it if another worker's claim holds it (that worker claims this queue now; the next round finds it free). Limited claims of one queue thus run one at a time over every worker. Returns the queue when locked; nothing the first time (the row created by this statement is not visible to it).
WITH created AS (
    INSERT INTO durable_jobs_throttle (queue, starts, counts, updated_at)
    VALUES (%(queue)s, '{}', '{}', now())
    ON CONFLICT (queue) DO NOTHING
)
SELECT queue
FROM durable_jobs_throttle
WHERE queue = %(queue)s
FOR UPDATE SKIP LOCKED;

-- throttle_state --
-- A limited queue's claim, second statement: a snapshot taken after the lock, so it sees every claim of the queue committed before. The queue's jobs running on a live lease (a dead worker's job stops counting when its lease expires), its starts within the last %(window_seconds)s, seconds until the oldest claim of those leaves the window, and whether a job of the queue is runnable now.
WITH recent AS (
    SELECT s, n
    FROM durable_jobs_throttle AS t, unnest(t.starts, t.counts) AS w(s, n)
    WHERE t.queue = %(queue)s AND s > now() - make_interval(secs => %(window_seconds)s::float8)
)
-- Columns are read by name: running and recent_starts are flow.FlowCounts' fields (the counts flow.room() decides on).
SELECT
    (SELECT count(*) FROM durable_jobs_job
     WHERE status = 'running' AND queue = %(queue)s AND lease_expires_at > now()) AS running,
    (SELECT COALESCE(sum(n), 0) FROM recent) AS recent_starts,
    (SELECT EXTRACT(EPOCH FROM min(s) + make_interval(secs => %(window_seconds)s::float8) - now())
     FROM recent) AS until_room,
    EXISTS (SELECT 1 FROM durable_jobs_job
            WHERE status = 'pending' AND available_at <= now() AND queue = %(queue)s) AS runnable;

-- rate_window_starts --
-- What a rate limit holds back now (jobs stats, GET /api/queues): for each rate-limited queue of %(queues)s, with its window of %(window_seconds)s, the starts its window holds (as throttle_state counts them for the claim; 0 for a queue never claimed). One primary-key lookup per queue; nothing is locked or written, so it never waits on a claim.
SELECT q.queue, (
    SELECT COALESCE(sum(w.n), 0)
    FROM durable_jobs_throttle AS t, unnest(t.starts, t.counts) AS w(s, n)
    WHERE t.queue = q.queue AND w.s > now() - make_interval(secs => q.seconds)
)
FROM unnest(%(queues)s::text[], %(window_seconds)s::float8[]) AS q(queue, seconds);

-- record_starts --
-- A rate-limited queue's claim, last statement: add this claim to the queue's window (its jobs' started_at, one instant for the whole claim, and how many) and forget the claims that left it. One entry per claim, and a claim less than %(merge_seconds)s after the window's last entry joins that entry, which takes the later instant: the row keeps a bounded number of entries (the window over merge_seconds) whatever the rate, and a merged start leaves the window late, never early, so the limit still holds.
UPDATE durable_jobs_throttle AS t
SET (starts, counts) = (
        SELECT COALESCE(array_agg(s ORDER BY s), '{}'), COALESCE(array_agg(n ORDER BY s), '{}')
        FROM (
            SELECT w.s, w.n
            FROM unnest(t.starts, t.counts) WITH ORDINALITY AS w(s, n, i)
            WHERE w.s > now() - make_interval(secs => %(window_seconds)s::float8)
                AND NOT (w.i = cardinality(t.starts)
                         AND w.s > %(started_at)s::timestamptz - make_interval(secs => %(merge_seconds)s::float8))
            UNION ALL
            SELECT %(started_at)s::timestamptz, %(count)s::int + COALESCE((
                SELECT t.counts[cardinality(t.counts)]
                WHERE t.starts[cardinality(t.starts)] > now() - make_interval(secs => %(window_seconds)s::float8)
                    AND t.starts[cardinality(t.starts)]
                        > %(started_at)s::timestamptz - make_interval(secs => %(merge_seconds)s::float8)
            ), 0)
        ) AS kept
    ),
    updated_at = now()
WHERE queue = %(queue)s
RETURNING queue;

-- request_cancel --
-- Ask the workers to stop these running jobs: set cancel_requested_at (kept if already set) on those still running, and NOTIFY '<prefix><job id>' on the queue's channel (delivered at commit) so that the worker holding each one tells its handler at once. Returns the ids asked.
UPDATE durable_jobs_job
SET cancel_requested_at = COALESCE(cancel_requested_at, now()), updated_at = now()
WHERE id = ANY(%(ids)s::uuid[]) AND status = 'running'
RETURNING id, pg_notify(%(channel)s, %(prefix)s || id::text);

-- cancel_requests --
-- The fallback for a lost cancel notification, polled by each worker's maintenance thread while it holds jobs: which of these (held, by lease token) running jobs have a cancel requested. Primary-key lookups; nothing is written.
SELECT job.id
FROM durable_jobs_job AS job
JOIN unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS held(id, token)
    ON job.id = held.id AND job.lease_token = held.token
WHERE job.cancel_requested_at IS NOT NULL AND job.status = 'running';

-- next_available_at --
-- When the next pending job in these queues (NULL: all) but the %(excluded)s ones becomes runnable, so an idle worker can sleep until then instead of a full poll interval.
SELECT min(available_at)
FROM durable_jobs_job
WHERE status = 'pending' AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
    AND NOT (queue = ANY(%(excluded)s::text[]));

-- paused_queues --
-- The queues paused now (paused_at set, and no end or an end still ahead, by the database's clock), each with the seconds left until its pause lifts by itself (NULL: until resumed). The worker reads it at start, on a pause or resume notification, and at each poll interval.
SELECT name, EXTRACT(EPOCH FROM paused_until - now())
FROM durable_jobs_queue
WHERE paused_at IS NOT NULL AND (paused_until IS NULL OR paused_until > now());

-- notify_finished --
-- Tell wait() and await_job() that these jobs finished outside record_outcomes (a pending job cancelled), as record_outcomes does: delivered at commit, %(finished_chunk)s ids a notification.
WITH finished AS (
    SELECT unnest(%(ids)s::uuid[]) AS id
),
<<_finished_notified>>
SELECT notifications FROM finished_notified;

-- notify_queues --
-- Wake the workers of these queues, as enqueue does (requeue, run now).
SELECT count(pg_notify(%(channel)s, queue)) FROM unnest(%(queues)s::text[]) AS queue;

-- notify_probe --
-- A worker's probe of its LISTEN connection (worker/probe.py), sent on its main connection: NOTIFY %(payload)s on the worker's own %(channel)s, which no other listener hears. Delivered at once in autocommit.
SELECT pg_notify(%(channel)s, %(payload)s);

-- prune_jobs --
-- Delete up to %(limit)s finished jobs (of the given statuses) whose completed_at is older than %(older_than_seconds)s, oldest first. With a %(lock_key)s, a transaction-level advisory lock lets one pruner work at a time and the others skip; NULL (the CLI) prunes without it. Returns whether the lock was acquired and how many rows were deleted.
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
    WHERE status = ANY(%(statuses)s::text[])
        AND completed_at < now() - make_interval(secs => %(older_than_seconds)s::float8)
        AND (SELECT acquired FROM pruner)
    ORDER BY completed_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
unlinked AS (
    -- Their dependency edges, either end (the job table's foreign keys
    -- would refuse the DELETE at commit otherwise).
    DELETE FROM durable_jobs_dependency AS edge
    USING doomed
    WHERE edge.child_id = doomed.id OR edge.parent_id = doomed.id
),
deleted AS (
    DELETE FROM durable_jobs_job AS job
    USING doomed
    WHERE job.id = doomed.id
    RETURNING job.id
)
SELECT (SELECT acquired FROM pruner), (SELECT count(*) FROM deleted);

-- upsert_worker --
-- Heartbeat: upsert this worker's row in the workers table (who is alive, its slots in use and version, for health and the admin), and forget workers whose heartbeat stopped more than %(forget_after_seconds)s ago (killed without a graceful stop), in one statement.
WITH forgotten AS (
    DELETE FROM durable_jobs_worker
    WHERE last_heartbeat < now() - make_interval(secs => %(forget_after_seconds)s::float8)
        AND id <> %(id)s
)
INSERT INTO durable_jobs_worker
    (id, host, pid, queues, concurrency, lease_seconds, started_at, last_heartbeat,
     slots_in_use, version)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s::jsonb, %(concurrency)s, %(lease)s, now(), now(),
        %(slots_in_use)s, %(version)s)
ON CONFLICT (id) DO UPDATE SET
    host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
    concurrency = EXCLUDED.concurrency, lease_seconds = EXCLUDED.lease_seconds,
    slots_in_use = EXCLUDED.slots_in_use, version = EXCLUDED.version,
    started_at = CASE WHEN durable_jobs_worker.pid = EXCLUDED.pid
                      THEN durable_jobs_worker.started_at ELSE now() END,
    last_heartbeat = now()
RETURNING id;

-- delete_worker --
-- A graceful shutdown: this worker's row goes.
DELETE FROM durable_jobs_worker WHERE id = %(id)s RETURNING id;

-- queue_depth --
-- For the queue-depth metrics: jobs per queue and status (pending, running, waiting, dead), and the age in seconds of the oldest runnable pending job per queue.
SELECT queue, status, count(*),
       EXTRACT(EPOCH FROM now() - min(available_at)
               FILTER (WHERE status = 'pending' AND available_at <= now()))
FROM durable_jobs_job
WHERE status IN ('pending', 'running', 'waiting', 'dead')
GROUP BY queue, status;

-- add_queue_stats --
-- A worker's heartbeat: add the outcomes it recorded since the last one to the per-minute counts of their queues (%(queues)s, %(minutes)s and the counts, one element per queue and minute), in one statement for all of them. Sorted by (queue, minute), so two workers adding to the same rows lock them in the same order and wait for each other instead of deadlocking. Returns how many rows were inserted or updated.
WITH added AS (
    INSERT INTO durable_jobs_queue_stats AS stats (queue, minute, completed, failed, dead)
    SELECT queue, minute, completed, failed, dead
    FROM unnest(%(queues)s::text[], %(minutes)s::timestamptz[], %(completed)s::int[],
                %(failed)s::int[], %(dead)s::int[])
        AS counted (queue, minute, completed, failed, dead)
    ORDER BY queue, minute
    ON CONFLICT (queue, minute) DO UPDATE SET
        completed = stats.completed + EXCLUDED.completed,
        failed = stats.failed + EXCLUDED.failed,
        dead = stats.dead + EXCLUDED.dead
    RETURNING 1
)
SELECT count(*) FROM added;

-- prune_queue_stats --
-- Delete the per-minute counts older than %(older_than_seconds)s (the workers' maintenance, about once a minute): the table keeps a couple of hours, a few hundred rows a queue. Returns how many rows were deleted.
WITH deleted AS (
    DELETE FROM durable_jobs_queue_stats
    WHERE minute < now() - make_interval(secs => %(older_than_seconds)s::float8)
    RETURNING 1
)
SELECT count(*) FROM deleted;

-- active_queues --
-- The queues holding pending, running, waiting or dead jobs, and those with outcomes counted since %(since)s (the admin's Queues page lists them). Each index of unfinished jobs is read by a loose index scan, one probe per queue (min(queue) above the last one found, which PostgreSQL answers from the index's order): durable_jobs_claim_queue_idx for pending, durable_jobs_queue_held_idx for waiting and dead; running jobs are few (at most the workers' slots). Never the finished history.
WITH RECURSIVE pending (queue) AS (
    SELECT min(queue) FROM durable_jobs_job WHERE status = 'pending'
    UNION ALL
    SELECT (SELECT min(job.queue) FROM durable_jobs_job AS job
            WHERE job.status = 'pending' AND job.queue > pending.queue)
    FROM pending WHERE pending.queue IS NOT NULL
),
held (queue) AS (
    SELECT min(queue) FROM durable_jobs_job WHERE status IN ('waiting', 'dead')
    UNION ALL
    SELECT (SELECT min(job.queue) FROM durable_jobs_job AS job
            WHERE job.status IN ('waiting', 'dead') AND job.queue > held.queue)
    FROM held WHERE held.queue IS NOT NULL
)
SELECT queue FROM pending WHERE queue IS NOT NULL
UNION
SELECT queue FROM held WHERE queue IS NOT NULL
UNION
SELECT queue FROM durable_jobs_job WHERE status = 'running'
UNION
SELECT queue FROM durable_jobs_queue_stats WHERE minute >= %(since)s;

-- queue_overview --
-- The admin's Queues page, for each of %(queues)s: its pending, waiting and dead jobs, each counted up to %(cap)s (a LIMITed read of a partial index: durable_jobs_claim_queue_idx, durable_jobs_queue_held_idx; a count that reaches the cap is shown as the planner's estimate), its running jobs (all: at most the workers' slots), and the age in seconds of its oldest runnable pending job (now() - the smallest available_at, if it has passed). That age takes one probe of durable_jobs_claim_queue_idx per priority the queue's pending jobs have (a loose index scan down the priorities, then the first entry of each, which has its smallest available_at), at most %(max_priorities)s of them: past that, the age is that of the oldest job among the highest priorities.
WITH RECURSIVE names (queue) AS (
    SELECT unnest(%(queues)s::text[])
),
priorities (queue, priority, depth) AS (
    SELECT names.queue,
           (SELECT job.priority FROM durable_jobs_job AS job
            WHERE job.status = 'pending' AND job.queue = names.queue
            ORDER BY job.priority DESC LIMIT 1),
           1
    FROM names
    UNION ALL
    SELECT p.queue,
           (SELECT job.priority FROM durable_jobs_job AS job
            WHERE job.status = 'pending' AND job.queue = p.queue AND job.priority < p.priority
            ORDER BY job.priority DESC LIMIT 1),
           p.depth + 1
    FROM priorities AS p
    WHERE p.priority IS NOT NULL AND p.depth < %(max_priorities)s
),
heads (queue, available_at) AS MATERIALIZED (
    SELECT p.queue,
           (SELECT job.available_at FROM durable_jobs_job AS job
            WHERE job.status = 'pending' AND job.queue = p.queue AND job.priority = p.priority
            ORDER BY job.priority DESC, job.available_at LIMIT 1)
    FROM priorities AS p
    WHERE p.priority IS NOT NULL
),
-- MATERIALIZED: read once for every queue, not once per queue.
running (queue, jobs) AS MATERIALIZED (
    SELECT queue, count(*) FROM durable_jobs_job WHERE status = 'running' GROUP BY queue
)
SELECT names.queue,
       (SELECT count(*) FROM (
            SELECT 1 FROM durable_jobs_job AS job
            WHERE job.status = 'pending' AND job.queue = names.queue LIMIT %(cap)s) AS capped),
       (SELECT count(*) FROM (
            SELECT 1 FROM durable_jobs_job AS job
            WHERE job.status = 'waiting' AND job.queue = names.queue LIMIT %(cap)s) AS capped),
       (SELECT count(*) FROM (
            SELECT 1 FROM durable_jobs_job AS job
            WHERE job.status = 'dead' AND job.queue = names.queue LIMIT %(cap)s) AS capped),
       coalesce((SELECT running.jobs FROM running WHERE running.queue = names.queue), 0),
       (SELECT EXTRACT(EPOCH FROM now() - min(heads.available_at)) FROM heads
        WHERE heads.queue = names.queue AND heads.available_at <= now())
FROM names;
