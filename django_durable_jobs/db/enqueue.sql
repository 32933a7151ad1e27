-- Enqueue: insert jobs (one, a batch, a batch with parents) and the notifications of an enqueue, a pause, a cancel. Run by db/enqueue.py.
-- Each query starts with a `-- name --` header and a one-line description;
-- parameters are named: %(name)s. A name starting with _ is a fragment,
-- included by a line <<_name>> (queries.py), from any of the gateway's files.

-- _job_insert_columns --
-- A fragment (see queries.py): the columns every insert of a job sets, in the order of its VALUES or SELECT list; insert_jobs_with_parents sets more after them. Written once: a new column of the job table that an insert sets goes here (and in each insert's values).
    id, type, queue, payload, idempotency_key, status, priority, attempts,
    max_attempts, available_at, created_at, updated_at, last_error, errors, timeout,
    concurrency_key, trace_context

-- insert_job --
-- Insert one job without an idempotency key and NOTIFY its queue if a worker of it sleeps (durable_jobs_notify_sleepers(), migration 0006; delivered at commit). A new job is pending: it goes straight into the active partition (db/partitions.py), without the partitioned table's routing (so do insert_job_keyed, insert_jobs and insert_jobs_unkeyed). One plain INSERT: the single-job path is bound by round trips and commits, so it avoids insert_jobs' CTEs.
INSERT INTO durable_jobs_job_active (
<<_job_insert_columns>>
)
VALUES (
<<_single_job_values>>
)
RETURNING id, available_at, created_at, durable_jobs_notify_sleepers(%(channel)s, queue);

-- _single_job_values --
-- A fragment (see queries.py): insert_job's and insert_job_keyed's values, in _job_insert_columns' order.
    %(id)s, %(type)s, %(queue)s, %(payload)s::jsonb, %(key)s, 'pending', %(priority)s, 0,
    %(max_attempts)s,
    -- The database's clock, the one the claim compares with.
    COALESCE(%(run_at)s::timestamptz, now() + COALESCE(%(delay_us)s::bigint, 0) * interval '1 microsecond'),
    now(), now(), '', '[]'::jsonb, %(timeout)s::float8, %(concurrency_key)s,
    %(trace_context)s::jsonb

-- insert_job_keyed --
-- Insert one job, unless its idempotency key is taken, and NOTIFY its queue if a worker of it sleeps (durable_jobs_notify_sleepers(), migration 0006; delivered at commit). The key's row in durable_jobs_idempotency decides: ON CONFLICT there waits for a concurrent insert of the same key to commit or roll back, so racing callers end with exactly one job.
WITH key AS (
    INSERT INTO durable_jobs_idempotency (key, job_id)
    VALUES (%(key)s, %(id)s)
    ON CONFLICT DO NOTHING
    RETURNING job_id
)
INSERT INTO durable_jobs_job_active (
<<_job_insert_columns>>
)
SELECT
<<_single_job_values>>
FROM key
RETURNING id, available_at, created_at, durable_jobs_notify_sleepers(%(channel)s, queue);

-- _keys_taken --
-- A fragment (see queries.py) that goes on with a WITH holding a CTE `input(id, idempotency_key, ...)`: take the idempotency keys of the rows that have one, in durable_jobs_idempotency; `keys(job_id)` are the rows whose key this statement took (a key taken before, or twice in the batch, is skipped). Key order: concurrent batches sharing keys take them in the same order, so they wait for each other instead of deadlocking; ON CONFLICT waits for a concurrent insert of the same key to commit or roll back, so racing callers end with exactly one job.
keys AS (
    INSERT INTO durable_jobs_idempotency (key, job_id)
    SELECT idempotency_key, id FROM input
    WHERE idempotency_key IS NOT NULL
    ORDER BY idempotency_key
    ON CONFLICT DO NOTHING
    RETURNING job_id
)

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
-- Insert a batch of jobs, given as one JSON array of rows, in one statement; skip rows whose idempotency key is taken; NOTIFY each queue that received a job and has a sleeping worker (delivered at commit). Returns the ids inserted and the database's now().
WITH input AS (
    -- One JSON document rather than nine arrays: encoding it is one C call
    -- in Python, and PostgreSQL parses it faster than it binds the arrays.
    SELECT
<<_job_columns>>
    FROM jsonb_array_elements(%(jobs)s::jsonb) AS row
),
<<_keys_taken>>,
inserted AS (
    INSERT INTO durable_jobs_job_active (
<<_job_insert_columns>>
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
    WHERE input.idempotency_key IS NULL OR input.id IN (SELECT job_id FROM keys)
    RETURNING id, queue
),
notified AS (
    SELECT count(*) FILTER (WHERE durable_jobs_notify_sleepers(%(channel)s, queue)) AS n
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
    INSERT INTO durable_jobs_job_active (
<<_job_insert_columns>>
    )
    SELECT
        id, type, queue, payload, NULL, 'pending', priority, 0, max_attempts,
        COALESCE(run_at, now() + COALESCE(delay_us, 0) * interval '1 microsecond'),
        now(), now(), '', '[]'::jsonb, timeout, concurrency_key, %(trace_context)s::jsonb
    FROM input
    RETURNING queue
),
notified AS (
    SELECT count(*) FILTER (WHERE durable_jobs_notify_sleepers(%(channel)s, queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted) AS queues
)
SELECT count(*), now()
FROM inserted CROSS JOIN notified;

-- _jobs_with_parents --
-- A fragment (see queries.py) that opens a WITH: `input`, the rows of %(jobs)s (insert_jobs' eleven columns, then on_parent_failure and the parents' ids, a JSON array without duplicates), and `edge(child_id, parent_id)`, one per parent named.
WITH input AS (
    SELECT
<<_job_columns>>,
        row->>11 AS on_parent_failure,
        row->12 AS parents
    FROM jsonb_array_elements(%(jobs)s::jsonb) AS row
),
edge AS (
    SELECT input.id AS child_id, p.id::uuid AS parent_id
    FROM input CROSS JOIN LATERAL jsonb_array_elements_text(input.parents) AS p(id)
)

-- insert_jobs_with_parents --
-- insert_jobs for a batch in which some job has parents (depends_on), one or many rows: lock the parents (in id order, so concurrent enqueues sharing parents wait for each other instead of deadlocking) and read their newest status; insert nothing if one does not exist (a parent may also be a row of the batch itself: chain() and group() insert a whole shape in one statement; such a parent is new, so unfinished, and starts with its children in the batch as its dependent_count); otherwise insert each job waiting for its unfinished parents (pending when none is left; cancelled, the reason naming the parent, when one ended dead or cancelled and its on_parent_failure is 'cancel'), its edges (resolved for parents already finished), and add the children to each parent's dependent_count, which makes the worker write the parent's outcome in a transaction that releases its children (record_outcomes; an outcome written after this insert locked the parent waits for this transaction). Skips rows whose idempotency key is taken, with no edge; NOTIFYs each queue that received a pending job and has a sleeping worker (delivered at commit). Returns the rows inserted (ids, statuses, waiting_on, last_error), the database's now(), and the parents that do not exist.
<<_jobs_with_parents>>,
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
keys AS (
    -- _keys_taken's, but none when a parent is missing (nothing is inserted).
    INSERT INTO durable_jobs_idempotency (key, job_id)
    SELECT idempotency_key, id FROM input
    WHERE idempotency_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM missing)
    ORDER BY idempotency_key
    ON CONFLICT DO NOTHING
    RETURNING job_id
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
<<_job_insert_columns>>,
        completed_at, on_parent_failure, parent_count, waiting_on, dependent_count
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
        now(), now(), COALESCE(cancelled, ''), '[]'::jsonb, timeout, concurrency_key,
        %(trace_context)s::jsonb,
        -- Then the columns of jobs with parents.
        CASE WHEN cancelled IS NOT NULL THEN now() END,
        on_parent_failure, parent_count, waiting_on, dependent_count
    FROM planned
    WHERE NOT EXISTS (SELECT 1 FROM missing)
        AND (planned.idempotency_key IS NULL OR planned.id IN (SELECT job_id FROM keys))
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
    -- they start with their count. = ANY(ARRAY(...)) as in `parent`: the
    -- planner guesses 2,500 edges, and on that guess it joined them with a
    -- sequential scan of every partition (tests/integration/test_dependency_plans.py).
    UPDATE durable_jobs_job AS job
    SET dependent_count = job.dependent_count + added.n
    FROM (SELECT parent_id, count(*) AS n FROM edges GROUP BY parent_id) AS added
    WHERE job.id = added.parent_id AND job.id = ANY(ARRAY(SELECT parent_id FROM edges))
    RETURNING job.id
),
notified AS (
    SELECT count(*) FILTER (WHERE durable_jobs_notify_sleepers(%(channel)s, queue)) AS n
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

-- insert_job_shape --
-- insert_jobs_with_parents for a shape of new jobs (chain() and group() without idempotency keys or parents of their own: dependencies._linkable): every parent is a row of the batch, so no parent is read, none can have finished or be missing, and nothing outside the batch is updated. Each job goes into the active partition pending (no parent) or waiting (for all its parents), with its edges unresolved and its children in the batch as its dependent_count. The statement reads no partition of the job table: neither its plan nor its cost depends on the table's size, and its generic plan is its custom plan (it is prepared: db.PREPARED). NOTIFYs each queue that received a pending job and has a sleeping worker (delivered at commit). Returns what insert_jobs_with_parents returns.
<<_jobs_with_parents>>,
planned AS (
    SELECT input.*,
        (SELECT count(*) FROM edge WHERE edge.child_id = input.id) AS parent_count,
        (SELECT count(*) FROM edge WHERE edge.parent_id = input.id) AS dependent_count
    FROM input
),
inserted AS (
    INSERT INTO durable_jobs_job_active (
<<_job_insert_columns>>,
        on_parent_failure, parent_count, waiting_on, dependent_count
    )
    SELECT
        id, type, queue, payload, NULL,
        CASE WHEN parent_count > 0 THEN 'waiting' ELSE 'pending' END,
        priority, 0, max_attempts,
        COALESCE(run_at, now() + COALESCE(delay_us, 0) * interval '1 microsecond'),
        now(), now(), '', '[]'::jsonb, timeout, concurrency_key,
        %(trace_context)s::jsonb,
        on_parent_failure, parent_count, parent_count, dependent_count
    FROM planned
    RETURNING id, queue, status, waiting_on, last_error
),
edges AS (
    INSERT INTO durable_jobs_dependency (child_id, parent_id, resolved)
    SELECT child_id, parent_id, false FROM edge
),
notified AS (
    SELECT count(*) FILTER (WHERE durable_jobs_notify_sleepers(%(channel)s, queue)) AS n
    FROM (SELECT DISTINCT queue FROM inserted WHERE status = 'pending') AS queues
)
SELECT
    (SELECT array_agg(id ORDER BY id) FROM inserted),
    (SELECT array_agg(status ORDER BY id) FROM inserted),
    (SELECT array_agg(waiting_on ORDER BY id) FROM inserted),
    (SELECT array_agg(last_error ORDER BY id) FROM inserted),
    now(),
    NULL::uuid[],
    0::bigint,
    (SELECT n FROM notified);

-- request_cancel --
-- Ask the workers to stop these running jobs: set cancel_requested_at (kept if already set) on those still running, and NOTIFY '<prefix><job id>' on the queue's channel (delivered at commit) so that the worker holding each one tells its handler at once. Returns the ids asked.
UPDATE durable_jobs_job
SET cancel_requested_at = COALESCE(cancel_requested_at, now()), updated_at = now()
WHERE id = ANY(%(ids)s::uuid[]) AND status = 'running'
RETURNING id, pg_notify(%(channel)s, %(prefix)s || id::text);

-- notify_queues --
-- Wake the workers of these queues, as enqueue does (requeue, run now).
SELECT count(pg_notify(%(channel)s, queue)) FROM unnest(%(queues)s::text[]) AS queue;
