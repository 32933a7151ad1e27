-- Events (emit_event): the key's lock, the event's insert, the wake-up of its waiters. Run by db/events.py.
-- Each query starts with a `-- name --` header and a one-line description;
-- parameters are named: %(name)s.
--
-- The protocol with the wait side (a job suspending in ctx.wait_for_event):
-- both take the key's advisory lock (EVENT_LOCK_SPACE, hashtext(key)) as
-- their transaction's first step on the key, before they read or write its
-- event or its waiters. So a wait either sees the committed event (and does
-- not suspend), or commits its waiter row before the emit reads the waiters
-- (and is woken by it): never neither.

-- lock_event_key --
-- Take the event key's transaction-scoped advisory lock (released at commit or rollback).
SELECT pg_advisory_xact_lock(%(space)s, hashtext(%(key)s));

-- insert_event --
-- Insert the event unless the key has one; return (created, the stored payload equals this one as a JSON value, the stored payload as text, emitted at).
-- Run under the key's lock: a conflicting row was committed before the lock was granted,
-- so this statement's snapshot sees it.
WITH inserted AS (
    INSERT INTO durable_jobs_event (key, payload, created_at)
    VALUES (%(key)s, %(payload)s::jsonb, now())
    ON CONFLICT (key) DO NOTHING
    RETURNING key, payload, created_at
)
SELECT true, true, payload::text, created_at FROM inserted
UNION ALL
SELECT false, payload IS NOT DISTINCT FROM %(payload)s::jsonb, payload::text, created_at
FROM durable_jobs_event
WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM inserted);

-- wake_event_waiters --
-- A new event wakes its waiters in one statement: their waiter rows go, the jobs still suspended (pending or waiting, no lease) become pending and available now, with waiting_for cleared, and the workers of their queues are NOTIFYed (at commit) as an enqueue does; returns the woken jobs' ids.
WITH waiters AS (
    DELETE FROM durable_jobs_event_waiter WHERE key = %(key)s RETURNING job_id
), woken AS (
    UPDATE durable_jobs_job AS job
    SET status = 'pending', available_at = now(), updated_at = now(), waiting_for = NULL
    FROM waiters
    WHERE job.id = waiters.job_id
        AND job.status IN ('pending', 'waiting')
        AND job.lease_token IS NULL
    RETURNING job.id, job.queue
), notified AS (
    SELECT count(pg_notify(%(channel)s, queue)) AS n
    FROM (SELECT DISTINCT queue FROM woken) AS queues
)
SELECT coalesce(array_agg(woken.id), '{}'::uuid[]), (SELECT n FROM notified) FROM woken;
