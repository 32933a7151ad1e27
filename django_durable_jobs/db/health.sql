-- The database's vacuum health: who holds back the vacuum horizon, dead tuples and the last vacuum of the job tables, the autovacuum settings. Run by db/health.py.
-- Each query starts with a `-- name --` header and a one-line description;
-- parameters are named: %(name)s. A name starting with _ is a fragment,
-- included by a line <<_name>> (queries.py), from any of the gateway's files.
--
-- Cheap enough for every metrics scrape: they read PostgreSQL's in-memory
-- views (one row per backend, per replication slot, per prepared
-- transaction) and the statistics of the job tables, never the job table
-- itself. Readable by any role: pg_stat_activity hides the columns of other
-- roles' sessions (backend_xmin and backend_xid included) unless the role
-- has pg_read_all_stats; those sessions are counted as hidden, not named.
-- pg_replication_slots, pg_prepared_xacts and the tables' statistics are
-- readable by every role.

-- horizon_holders --
-- What holds back the vacuum horizon of this database's tables, oldest first: sessions with a snapshot (backend_xmin) or a transaction id (backend_xid), replication slots with an xmin or a catalog_xmin (a catalog_xmin holds back the system catalogs only), prepared transactions of this database. xid_age: the horizon's age in transaction ids; age_seconds: how long it has been held (a session: since its transaction began, an upper bound for a READ COMMITTED one, whose snapshot is its current statement's; a slot: unknown, NULL). clock_timestamp(), not now(): a reading in a long transaction still measures from the present.
-- Left out: this backend; autovacuum workers and parallel workers (vacuum
-- ignores the first, the second share their leader's snapshot); sessions
-- of other databases, which do not hold back this database's tables
-- (PostgreSQL >= 14), except walsenders, whose hot_standby_feedback
-- holds back every database.
SELECT 'session' AS kind,
       a.pid::text AS holder,
       a.pid,
       a.application_name,
       a.usename::text AS usename,
       a.client_addr::text AS client_addr,
       a.state,
       a.backend_type,
       a.xact_start,
       a.query_start,
       greatest(age(a.backend_xid), age(a.backend_xmin)) AS xid_age,
       EXTRACT(EPOCH FROM clock_timestamp() - a.xact_start)::float8 AS age_seconds,
       false AS catalog_only
FROM pg_stat_activity AS a
WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
    AND a.pid <> pg_backend_pid()
    AND (a.datname = current_database() OR a.backend_type = 'walsender')
    AND a.backend_type NOT IN ('autovacuum worker', 'parallel worker')
UNION ALL
SELECT 'slot', s.slot_name::text, s.active_pid, NULL, NULL, NULL,
       CASE WHEN s.active THEN 'active' ELSE 'inactive' END,
       s.slot_type, NULL, NULL,
       coalesce(age(s.xmin), age(s.catalog_xmin)), NULL,
       s.xmin IS NULL
FROM pg_replication_slots AS s
WHERE s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL
UNION ALL
SELECT 'prepared', p.gid, NULL, NULL, p.owner::text, NULL, 'prepared', NULL,
       p.prepared, NULL,
       age(p.transaction),
       EXTRACT(EPOCH FROM clock_timestamp() - p.prepared)::float8,
       false
FROM pg_prepared_xacts AS p
WHERE p.database = current_database()
ORDER BY xid_age DESC NULLS LAST;

-- hidden_sessions --
-- Sessions of this database whose details pg_stat_activity hides from this role (other roles' sessions, without pg_read_all_stats): they may hold back the horizon unseen. Counted, with their pids, which stay visible.
SELECT count(*), coalesce(array_agg(pid ORDER BY pid), '{}')
FROM pg_stat_activity
WHERE datname = current_database()
    AND pid <> pg_backend_pid()
    AND query = '<insufficient privilege>';

-- table_health --
-- Dead and live tuples, the last (auto)vacuum and autoanalyze, and whether autovacuum may vacuum it, for each of %(tables)s (the package's tables, by name). A partitioned table sums its leaf partitions; its last vacuum is its least recently vacuumed leaf's. A table missing from the database is left out.
-- The pg_stat_get_*() functions behind pg_stat_user_tables, called for these
-- tables only: the view computes its columns for every table of the
-- database (with their indexes) before any join could filter them.
WITH tables AS (
    SELECT name, to_regclass(name) AS relid
    FROM unnest(%(tables)s::text[]) AS name
), leaves AS (
    -- pg_partition_tree() has no row for a table that is not partitioned:
    -- the LEFT JOIN keeps the table itself then.
    SELECT tables.name, coalesce(tree.relid, tables.relid)::oid AS relid
    FROM tables
    LEFT JOIN LATERAL pg_partition_tree(tables.relid) AS tree ON tree.isleaf
    WHERE tables.relid IS NOT NULL
), stats AS (
    SELECT leaves.name,
           pg_stat_get_live_tuples(leaves.relid) AS live,
           pg_stat_get_dead_tuples(leaves.relid) AS dead,
           greatest(pg_stat_get_last_vacuum_time(leaves.relid),
                    pg_stat_get_last_autovacuum_time(leaves.relid)) AS last_vacuum,
           greatest(pg_stat_get_last_analyze_time(leaves.relid),
                    pg_stat_get_last_autoanalyze_time(leaves.relid)) AS last_analyze,
           c.reloptions
    FROM leaves
    JOIN pg_class AS c ON c.oid = leaves.relid
)
SELECT name,
       sum(live)::bigint AS live,
       sum(dead)::bigint AS dead,
       min(last_vacuum) AS last_vacuum,
       EXTRACT(EPOCH FROM clock_timestamp() - min(last_vacuum))::float8 AS vacuum_age_seconds,
       max(last_analyze) AS last_analyze,
       count(*) FILTER (
           WHERE 'autovacuum_enabled=false' = ANY (reloptions)
              OR 'autovacuum_enabled=off' = ANY (reloptions)
       ) = 0 AS autovacuum_enabled,
       (array_agg(array_to_string(reloptions, ', ')) FILTER (WHERE reloptions IS NOT NULL))[1]
           AS reloptions
FROM stats
GROUP BY name
ORDER BY name;

-- vacuum_settings --
-- The server settings the doctor's advice depends on: autovacuum and track_counts on or off, autovacuum's trigger (threshold + scale factor of the live tuples), its naptime, the server's version number, and whether this role may read every session (pg_read_all_stats).
SELECT current_setting('autovacuum') AS autovacuum,
       current_setting('track_counts') AS track_counts,
       current_setting('autovacuum_vacuum_threshold') AS vacuum_threshold,
       current_setting('autovacuum_vacuum_scale_factor') AS vacuum_scale_factor,
       current_setting('autovacuum_naptime') AS naptime,
       current_setting('server_version_num')::int AS server_version,
       pg_has_role('pg_read_all_stats', 'USAGE') AS reads_all_stats;
