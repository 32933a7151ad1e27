-- Flow control: the claims of limited queues (throttle rows, rate windows) and of concurrency keys, pauses, and what they hold back. Run by db/flow_control.py.
-- Each query starts with a `-- name --` header and a one-line description;
-- parameters are named: %(name)s. A name starting with _ is a fragment,
-- included by a line <<_name>> (queries.py), from any of the gateway's files.

-- _busy_keys --
-- A fragment (see queries.py) that opens a WITH: `limits`, the (type, concurrency_limit) pairs given as %(types)s and %(limits)s; `busy`, the (type, key) pairs whose jobs running on a live lease fill their limit.
WITH limits AS (
    SELECT * FROM unnest(%(types)s::text[], %(limits)s::int[]) AS l(type, lim)
),
busy AS (
    SELECT r.type, r.concurrency_key
    FROM durable_jobs_job_active AS r JOIN limits AS l ON l.type = r.type
    WHERE r.status = 'running' AND r.concurrency_key IS NOT NULL AND r.lease_expires_at > now()
    GROUP BY r.type, r.concurrency_key, l.lim
    HAVING count(*) >= l.lim
)

-- claim_keyed --
-- A claim of jobs with a concurrency key (their type has a concurrency_limit): up to %(limit)s of them, within each key's limit, the oldest job of a key first; a busy key never blocks another (its jobs are skipped, not waited for). One call of the PL/pgSQL function of migration 0004, which locks the keys of the first runnable jobs (reading at most %(scan)s) with transaction-level advisory locks, then counts each key's running jobs and claims in a snapshot taken after the locks, so two claims never both see a key's last free slot. Returns the same columns as claim_jobs.
SELECT * FROM durable_jobs_claim_keyed(
    %(types)s::text[], %(limits)s::int[], %(queues)s::text[], %(excluded)s::text[],
    %(limit)s::int, %(scan)s::int, %(lock_space)s::int, %(worker_id)s::text,
    %(lease_seconds)s::float8
);

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
    (SELECT count(*) FROM durable_jobs_job_active
     WHERE status = 'running' AND queue = %(queue)s AND lease_expires_at > now()) AS running,
    (SELECT COALESCE(sum(n), 0) FROM recent) AS recent_starts,
    (SELECT EXTRACT(EPOCH FROM min(s) + make_interval(secs => %(window_seconds)s::float8) - now())
     FROM recent) AS until_room,
    EXISTS (SELECT 1 FROM durable_jobs_job_active
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

-- paused_queues --
-- The queues paused now (paused_at set, and no end or an end still ahead, by the database's clock), each with the seconds left until its pause lifts by itself (NULL: until resumed). The worker reads it at start, on a pause or resume notification, and at each poll interval.
SELECT name, EXTRACT(EPOCH FROM paused_until - now())
FROM durable_jobs_queue
WHERE paused_at IS NOT NULL AND (paused_until IS NULL OR paused_until > now());
