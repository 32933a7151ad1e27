"""Enqueue NOTIFYs a queue only while one of its workers sleeps.

A transaction that NOTIFYs takes a cluster-wide lock at commit and holds it
through the commit's WAL flush: with many concurrent enqueuers, their
commits queue on it one at a time (docs/benchmarks.md, "NOTIFY at scale").
A worker that claims again within milliseconds anyway needs no
notification, so each worker says here whether it sleeps
(``durable_jobs_listener``), and an enqueue notifies a queue only when some
worker of that queue sleeps (``durable_jobs_notify_sleepers()``).

``durable_jobs_listener``: one row per worker that LISTENs, with its queues
(NULL: every queue) and whether it relies on a notification now
(``sleeping``) or claims on its own within a few milliseconds (a busy
worker, ``worker/wakefulness.py``). UNLOGGED: it holds nothing worth
WAL, and a crash empties it, which costs no notification a worker needs
(a worker writes its row again when its LISTEN connection reconnects;
until then, with no sleeper, nothing waits for one). A worker killed
without a goodbye leaves its row: a sleeping one costs the enqueues a
useless NOTIFY until it is forgotten with the worker's row; an awake one
changes nothing, since only sleepers are looked for.

``durable_jobs_notify_sleepers(channel, queue)``: called by the enqueue
statements after their INSERT, once per queue. A VOLATILE function takes a
new snapshot for its statement (READ COMMITTED), after the INSERT gave the
enqueuing transaction its id: either it sees a worker that marked itself
sleeping, and NOTIFYs, or that worker's mark committed later, while this
transaction was already running, and the worker waits for it to end before
its last claim (``worker/wakefulness.py``). Under REPEATABLE READ or SERIALIZABLE
the snapshot is the transaction's own, older than that: the function always
NOTIFYs there, as every enqueue did before.

The function's body is frozen here, as a migration's SQL must be; a change to
it is a new migration that replaces it.
"""

from __future__ import annotations

from django.db import migrations

CREATE = r"""
CREATE UNLOGGED TABLE durable_jobs_listener (
    worker_id varchar(200) PRIMARY KEY,
    queues text[],
    sleeping boolean NOT NULL DEFAULT true,
    changed_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);

CREATE FUNCTION durable_jobs_notify_sleepers(p_channel text, p_queue text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $function$
BEGIN
    IF current_setting('transaction_isolation') = 'read committed'
        AND NOT EXISTS (
            SELECT 1 FROM durable_jobs_listener AS l
            WHERE l.sleeping AND (l.queues IS NULL OR p_queue = ANY (l.queues))
        )
    THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(p_channel, p_queue);
    RETURN true;
END
$function$;
"""

DROP = r"""
DROP FUNCTION durable_jobs_notify_sleepers(text, text);
DROP TABLE durable_jobs_listener;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0005_narrow_active_partition"),
    ]

    operations = [migrations.RunSQL(CREATE, DROP, elidable=False)]
