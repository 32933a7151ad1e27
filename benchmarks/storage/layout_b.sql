-- Layout B (issue 26): a narrow hot table for the jobs in flight beside a history of the
-- finished ones. Only what lifecycle.py and scale.py need; not the package's schema.
-- Read by benchmarks/storage/layouts.py: each `-- name --` section is one statement,
-- parsed by the package's own db/queries.py (so <<_finished_notified>> is the package's).

-- b_hot_table --
-- The jobs not finished yet (pending, running, waiting) and the dead ones awaiting an
-- operator: today's columns but the outcome's (result, completed_at), with the claim's,
-- the lease's and flow control's partial indexes and the idempotency key; none of the
-- listing indexes (the admin lists this table by primary key: ids are time-ordered).
CREATE TABLE durable_jobs_hot (LIKE durable_jobs_job INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE durable_jobs_hot DROP COLUMN result, DROP COLUMN completed_at;
ALTER TABLE durable_jobs_hot ADD PRIMARY KEY (id);
CREATE INDEX hot_claim_idx ON durable_jobs_hot (priority DESC, available_at, created_at)
    WHERE status = 'pending';
CREATE INDEX hot_claim_queue_idx ON durable_jobs_hot (queue, priority DESC, available_at, created_at)
    WHERE status = 'pending';
CREATE INDEX hot_claim_keyed_idx ON durable_jobs_hot (priority DESC, available_at, created_at)
    WHERE status = 'pending' AND concurrency_key IS NOT NULL;
CREATE INDEX hot_key_pending_idx ON durable_jobs_hot
    (type, concurrency_key, priority DESC, available_at, created_at)
    WHERE status = 'pending' AND concurrency_key IS NOT NULL;
CREATE INDEX hot_key_running_idx ON durable_jobs_hot (type, concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
CREATE INDEX hot_lease_idx ON durable_jobs_hot (lease_expires_at) WHERE status = 'running';
CREATE INDEX hot_held_idx ON durable_jobs_hot (queue, status, id DESC)
    WHERE status IN ('waiting', 'dead');
CREATE UNIQUE INDEX hot_idempotency_uniq ON durable_jobs_hot (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- b_history_plain --
-- The finished jobs (completed, cancelled), one plain table: every column, listed by id
-- (time-ordered), by status, type and queue, newest first; completed_at for pruning.
CREATE TABLE durable_jobs_history (LIKE durable_jobs_job INCLUDING DEFAULTS);
ALTER TABLE durable_jobs_history ADD PRIMARY KEY (id);
CREATE INDEX history_status_idx ON durable_jobs_history (status, id DESC);
CREATE INDEX history_type_idx ON durable_jobs_history (type, id DESC);
CREATE INDEX history_queue_idx ON durable_jobs_history (queue, id DESC);
CREATE INDEX history_finished_idx ON durable_jobs_history (completed_at);

-- b_history_partitioned --
-- The same history partitioned by completed_at (one partition a day here; see scale.py):
-- no completed_at index (retention drops partitions), and the primary key must hold the
-- partition key. Partitions are created by layouts.create_partitions().
CREATE TABLE durable_jobs_history (LIKE durable_jobs_job INCLUDING DEFAULTS)
    PARTITION BY RANGE (completed_at);
ALTER TABLE durable_jobs_history ALTER COLUMN completed_at SET NOT NULL;
ALTER TABLE durable_jobs_history ADD PRIMARY KEY (id, completed_at);
CREATE INDEX history_status_idx ON durable_jobs_history (status, id DESC);
CREATE INDEX history_type_idx ON durable_jobs_history (type, id DESC);
CREATE INDEX history_queue_idx ON durable_jobs_history (queue, id DESC);

-- b_view --
-- What the admin, the REST API and the CLI would read: every job, hot or finished.
CREATE VIEW durable_jobs_all AS
SELECT id, type, queue, status, priority, attempts, max_attempts, created_at, started_at,
    NULL::timestamptz AS completed_at, available_at, idempotency_key, payload,
    NULL::jsonb AS result, last_error
FROM durable_jobs_hot
UNION ALL
SELECT id, type, queue, status, priority, attempts, max_attempts, created_at, started_at,
    completed_at, available_at, idempotency_key, payload, result, last_error
FROM durable_jobs_history;

-- b_record_outcomes --
-- record_outcomes for layout B: a completion or a cancel moves the row (DELETE from the hot
-- table, INSERT into the history, one statement); a retry, a release or a dead end updates
-- the hot row as today (dead jobs stay hot: no retention drops them). Fenced by the lease
-- token, notified as today.
WITH outcome AS (
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
moved AS (
    DELETE FROM durable_jobs_hot AS job
    USING outcome
    WHERE job.id = outcome.id AND job.lease_token = outcome.token AND job.status = 'running'
        AND (job.dependent_count = 0 OR NOT %(without_dependents)s::boolean)
        AND (outcome.transition IN ('complete', 'cancel')
             OR (outcome.transition IN ('retry', 'release') AND job.cancel_requested_at IS NOT NULL))
    RETURNING job.*, outcome.transition, outcome.result AS outcome_result,
        outcome.last_error AS outcome_error, outcome.error_entry
),
archived AS (
    INSERT INTO durable_jobs_history (id, type, queue, payload, idempotency_key, status,
        priority, attempts, max_attempts, available_at, created_at, updated_at, started_at,
        completed_at, last_error, errors, result, timeout, concurrency_key,
        cancel_requested_at, dependent_count, on_parent_failure, parent_count, waiting_on,
        trace_context, waiting_for)
    SELECT id, type, queue, payload, idempotency_key,
        CASE WHEN transition = 'complete' THEN 'completed' ELSE 'cancelled' END,
        priority, attempts, max_attempts, available_at, created_at, now(), started_at, now(),
        COALESCE(outcome_error, last_error),
        CASE WHEN error_entry IS NULL THEN errors ELSE errors || jsonb_build_array(error_entry) END,
        CASE WHEN transition = 'complete' THEN outcome_result END,
        timeout, concurrency_key, cancel_requested_at, dependent_count, on_parent_failure,
        parent_count, waiting_on, trace_context, waiting_for
    FROM moved
    RETURNING id, status, dependent_count
),
recorded AS (
    UPDATE durable_jobs_hot AS job
    SET status = CASE WHEN outcome.transition = 'dead' THEN 'dead' ELSE 'pending' END,
        available_at = CASE
            WHEN outcome.transition = 'retry'
            THEN COALESCE(outcome.run_at, now() + COALESCE(outcome.delay_us, 0) * interval '1 microsecond')
            WHEN outcome.transition = 'release' AND outcome.delay_us > 0
            THEN now() + outcome.delay_us * interval '1 microsecond'
            ELSE job.available_at
        END,
        attempts = CASE WHEN outcome.transition = 'release' THEN job.attempts - 1 ELSE job.attempts END,
        last_error = COALESCE(outcome.last_error, job.last_error),
        errors = CASE
            WHEN outcome.error_entry IS NULL THEN job.errors
            ELSE job.errors || jsonb_build_array(outcome.error_entry)
        END,
        lease_holder = NULL, lease_expires_at = NULL, lease_token = NULL, updated_at = now()
    FROM outcome
    WHERE job.id = outcome.id AND job.lease_token = outcome.token AND job.status = 'running'
        AND (job.dependent_count = 0 OR NOT %(without_dependents)s::boolean)
        AND outcome.transition IN ('dead', 'retry', 'release') AND job.cancel_requested_at IS NULL
    RETURNING job.id, job.status, job.dependent_count
),
finished AS (
    SELECT id FROM archived WHERE %(notify_finished)s::boolean
    UNION ALL
    SELECT id FROM recorded WHERE %(notify_finished)s::boolean AND status = 'dead'
),
<<_finished_notified>>
SELECT archived.id, archived.status, archived.dependent_count
FROM archived CROSS JOIN finished_notified
UNION ALL
SELECT recorded.id, recorded.status, recorded.dependent_count
FROM recorded CROSS JOIN finished_notified;
