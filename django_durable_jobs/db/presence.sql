-- Presence and stats: the workers table, the workers' marks of whether they sleep (durable_jobs_listener), the notification probe, queue depth, per-minute counts. Run by db/presence.py.
-- Each query starts with a `-- name --` header and a one-line description;
-- parameters are named: %(name)s. A name starting with _ is a fragment,
-- included by a line <<_name>> (queries.py), from any of the gateway's files.

-- notify_probe --
-- A worker's probe of its LISTEN connection (worker/probe.py), sent on its main connection: NOTIFY %(payload)s on the worker's own %(channel)s, which no other listener hears. Delivered at once in autocommit.
SELECT pg_notify(%(channel)s, %(payload)s);

-- backend_pid --
-- The pid of the server process this statement ran in: equal to the pid a connection was given at connect (BackendKeyData) when it reaches PostgreSQL itself; a pooler hands out a key of its own (db._prepares).
SELECT pg_backend_pid();

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
-- A graceful shutdown: this worker's row goes, and its row in the listeners table.
WITH listener AS (
    DELETE FROM durable_jobs_listener WHERE worker_id = %(id)s
)
DELETE FROM durable_jobs_worker WHERE id = %(id)s RETURNING id;

-- mark_listener --
-- Say whether this worker sleeps (waits for a NOTIFY to claim: enqueues of its queues then notify) or is awake (claims within milliseconds on its own: they need not), for the enqueues' durable_jobs_notify_sleepers() (migration 0006). Also forgets the rows of workers gone without a goodbye (no live heartbeat, not changed for %(forget_after_seconds)s). Committed before the caller's next statement (autocommit): a worker going to sleep takes transactions_in_progress after it (worker/wakefulness.py).
WITH gone AS (
    DELETE FROM durable_jobs_listener AS l
    WHERE l.changed_at < now() - make_interval(secs => %(forget_after_seconds)s::float8)
        AND l.worker_id <> %(id)s
        AND NOT EXISTS (
            SELECT 1 FROM durable_jobs_worker AS w
            WHERE w.id = l.worker_id
                AND w.last_heartbeat > now() - make_interval(secs => w.lease_seconds)
        )
)
INSERT INTO durable_jobs_listener (worker_id, queues, sleeping, changed_at)
VALUES (%(id)s, %(queues)s::text[], %(sleeping)s, now())
ON CONFLICT (worker_id) DO UPDATE SET
    queues = EXCLUDED.queues, sleeping = EXCLUDED.sleeping, changed_at = now()
RETURNING worker_id;

-- transactions_in_progress --
-- The transactions running now that have an id (they wrote something): a worker that just marked itself sleeping waits for these to end before its last claim, since an enqueue among them may have looked before the mark and sent no NOTIFY. As text, which psycopg reads without a type of its own for xid8.
SELECT array_agg(x::text) FROM pg_snapshot_xip(pg_current_snapshot()) AS x;

-- still_in_progress --
-- Which of these transaction ids (as text) are still running.
SELECT array_agg(x::text)
FROM unnest(%(xids)s::text[]::xid8[]) AS x
WHERE pg_xact_status(x) = 'in progress';

-- queue_depth --
-- For the queue-depth metrics: jobs per queue and status (pending, running, waiting, dead), and the age in seconds of the oldest runnable pending job per queue.
SELECT queue, status, count(*),
       EXTRACT(EPOCH FROM now() - min(available_at)
               FILTER (WHERE status = 'pending' AND available_at <= now()))
FROM durable_jobs_job_active
WHERE status IN ('pending', 'running', 'waiting', 'dead')
GROUP BY queue, status;

-- suspended_jobs --
-- For durable_jobs_suspended{queue,reason}: the suspended jobs (pending or waiting, with a waiting_for) per queue and reason: sleep ({"until"}), event ({"event"}), child ({"job"}). Reads the pending and waiting rows through the status index, as queue_depth does; jobs that use no steps have a NULL waiting_for, cheap to skip.
SELECT queue,
       CASE WHEN waiting_for ? 'until' THEN 'sleep'
            WHEN waiting_for ? 'event' THEN 'event'
            WHEN waiting_for ? 'job' THEN 'child'
       END AS reason,
       count(*)
FROM durable_jobs_job_active
WHERE status IN ('pending', 'waiting') AND waiting_for IS NOT NULL
    -- A pending job already due (its sleep or its event deadline is over) is
    -- runnable: its waiting_for stays until its next run's first step call.
    AND NOT (status = 'pending' AND available_at <= now())
GROUP BY 1, 2;

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

-- active_queues --
-- The queues holding pending, running, waiting or dead jobs, and those with outcomes counted since %(since)s (the admin's Queues page lists them). Each index of unfinished jobs is read by a loose index scan, one probe per queue (min(queue) above the last one found, which PostgreSQL answers from the index's order): durable_jobs_claim_queue_idx for pending, durable_jobs_queue_held_idx for waiting and dead; running jobs are few (at most the workers' slots). Never the finished history.
WITH RECURSIVE pending (queue) AS (
    SELECT min(queue) FROM durable_jobs_job_active WHERE status = 'pending'
    UNION ALL
    SELECT (SELECT min(job.queue) FROM durable_jobs_job_active AS job
            WHERE job.status = 'pending' AND job.queue > pending.queue)
    FROM pending WHERE pending.queue IS NOT NULL
),
held (queue) AS (
    SELECT min(queue) FROM durable_jobs_job_active WHERE status IN ('waiting', 'dead')
    UNION ALL
    SELECT (SELECT min(job.queue) FROM durable_jobs_job_active AS job
            WHERE job.status IN ('waiting', 'dead') AND job.queue > held.queue)
    FROM held WHERE held.queue IS NOT NULL
)
SELECT queue FROM pending WHERE queue IS NOT NULL
UNION
SELECT queue FROM held WHERE queue IS NOT NULL
UNION
SELECT queue FROM durable_jobs_job_active WHERE status = 'running'
UNION
SELECT queue FROM durable_jobs_queue_stats WHERE minute >= %(since)s;

-- queue_overview --
-- The admin's Queues page, for each of %(queues)s: its pending, waiting and dead jobs, each counted up to %(cap)s (a LIMITed read of a partial index: durable_jobs_claim_queue_idx, durable_jobs_queue_held_idx; a count that reaches the cap is shown as the planner's estimate), its running jobs (all: at most the workers' slots), and the age in seconds of its oldest runnable pending job (now() - the smallest available_at, if it has passed). That age takes one probe of durable_jobs_claim_queue_idx per priority the queue's pending jobs have (a loose index scan down the priorities, then the first entry of each, which has its smallest available_at), at most %(max_priorities)s of them: past that, the age is that of the oldest job among the highest priorities.
WITH RECURSIVE names (queue) AS (
    SELECT unnest(%(queues)s::text[])
),
priorities (queue, priority, depth) AS (
    SELECT names.queue,
           (SELECT job.priority FROM durable_jobs_job_active AS job
            WHERE job.status = 'pending' AND job.queue = names.queue
            ORDER BY job.priority DESC LIMIT 1),
           1
    FROM names
    UNION ALL
    SELECT p.queue,
           (SELECT job.priority FROM durable_jobs_job_active AS job
            WHERE job.status = 'pending' AND job.queue = p.queue AND job.priority < p.priority
            ORDER BY job.priority DESC LIMIT 1),
           p.depth + 1
    FROM priorities AS p
    WHERE p.priority IS NOT NULL AND p.depth < %(max_priorities)s
),
heads (queue, available_at) AS MATERIALIZED (
    SELECT p.queue,
           (SELECT job.available_at FROM durable_jobs_job_active AS job
            WHERE job.status = 'pending' AND job.queue = p.queue AND job.priority = p.priority
            ORDER BY job.priority DESC, job.available_at LIMIT 1)
    FROM priorities AS p
    WHERE p.priority IS NOT NULL
),
-- MATERIALIZED: read once for every queue, not once per queue.
running (queue, jobs) AS MATERIALIZED (
    SELECT queue, count(*) FROM durable_jobs_job_active WHERE status = 'running' GROUP BY queue
)
SELECT names.queue,
       (SELECT count(*) FROM (
            SELECT 1 FROM durable_jobs_job_active AS job
            WHERE job.status = 'pending' AND job.queue = names.queue LIMIT %(cap)s) AS capped),
       (SELECT count(*) FROM (
            SELECT 1 FROM durable_jobs_job_active AS job
            WHERE job.status = 'waiting' AND job.queue = names.queue LIMIT %(cap)s) AS capped),
       (SELECT count(*) FROM (
            SELECT 1 FROM durable_jobs_job_active AS job
            WHERE job.status = 'dead' AND job.queue = names.queue LIMIT %(cap)s) AS capped),
       coalesce((SELECT running.jobs FROM running WHERE running.queue = names.queue), 0),
       (SELECT EXTRACT(EPOCH FROM now() - min(heads.available_at)) FROM heads
        WHERE heads.queue = names.queue AND heads.available_at <= now())
FROM names;
