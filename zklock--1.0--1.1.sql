/* zklock--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION zklock UPDATE TO '1.1'" to load this file. \quit

-- What 1.1 changes in the catalog (CHANGELOG.md); test/t/014_extension_update.pl
-- checks that 1.0 updated by this script equals a fresh install of 1.1.
--
-- zk_leader names zk_election_candidates by the extension's schema and runs
-- with a fixed search_path: 1.1 may be installed into any schema
-- (CREATE EXTENSION zklock SCHEMA zk), and a caller whose search_path lacks
-- that schema still gets its answer.  CREATE OR REPLACE keeps the function's
-- owner, its grants (zk_grant's 'election' group) and its initial privileges.
CREATE OR REPLACE FUNCTION zk_leader(name text,
    OUT cluster text, OUT host text, OUT port int, OUT since text, OUT token bigint,
    OUT this_server boolean, OUT data text)
RETURNS SETOF record
LANGUAGE sql VOLATILE PARALLEL UNSAFE ROWS 1
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT c.cluster, c.host, c.port, c.since, c.token,
           coalesce(c.cluster = (SELECT system_identifier::text FROM pg_catalog.pg_control_system())
                    AND c.port = pg_catalog.current_setting('port')::int
                    AND c.application_name = 'zklock worker', false),
           c.data
      FROM @extschema@.zk_election_candidates(name) AS c
     WHERE c.state = 'held'
$$;

-- zk_role_usage() and the view zk_quotas (issue 35): use against quota per
-- role, in the monitor group (zk_privilege_groups() lists them; pg_monitor
-- gets them, as a fresh install's zk_grant('monitor', 'pg_monitor') does)
-- per role: the entries its sessions hold or await against zklock.max_locks_per_role,
-- and what it wrote into ZooKeeper against zklock.max_write_rate (src/quota.c)
CREATE FUNCTION zk_role_usage(
    OUT role text,
    OUT entries integer,
    OUT max_entries integer,
    OUT bytes_written bigint,
    OUT write_backlog bigint,
    OUT max_write_rate bigint,
    OUT max_write_burst bigint,
    OUT writes_refused bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_role_usage' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

CREATE VIEW zk_quotas AS SELECT * FROM zk_role_usage();

REVOKE ALL ON FUNCTION zk_role_usage() FROM PUBLIC;

-- the groups: each object of the extension a role needs for one use
CREATE OR REPLACE FUNCTION zk_privilege_groups(
    OUT group_name text, OUT object_type text, OUT object text)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT g, 'function', f::regprocedure::text FROM (VALUES
        ('lock', '@extschema@.zk_lock(text,interval)'),
        ('lock', '@extschema@.zk_lock(bigint,interval)'),
        ('lock', '@extschema@.zk_lock_shared(text,interval)'),
        ('lock', '@extschema@.zk_lock_shared(bigint,interval)'),
        ('lock', '@extschema@.zk_try_lock(text)'),
        ('lock', '@extschema@.zk_try_lock(bigint)'),
        ('lock', '@extschema@.zk_try_lock_shared(text)'),
        ('lock', '@extschema@.zk_try_lock_shared(bigint)'),
        ('lock', '@extschema@.zk_session_lock(text,interval)'),
        ('lock', '@extschema@.zk_session_lock(bigint,interval)'),
        ('lock', '@extschema@.zk_session_lock_shared(text,interval)'),
        ('lock', '@extschema@.zk_session_lock_shared(bigint,interval)'),
        ('lock', '@extschema@.zk_try_session_lock(text)'),
        ('lock', '@extschema@.zk_try_session_lock(bigint)'),
        ('lock', '@extschema@.zk_try_session_lock_shared(text)'),
        ('lock', '@extschema@.zk_try_session_lock_shared(bigint)'),
        ('lock', '@extschema@.zk_unlock(text)'),
        ('lock', '@extschema@.zk_unlock(bigint)'),
        ('lock', '@extschema@.zk_unlock_shared(text)'),
        ('lock', '@extschema@.zk_unlock_shared(bigint)'),
        ('lock', '@extschema@.zk_unlock_all()'),
        ('lock', '@extschema@.zk_lock_token(text)'),
        ('lock', '@extschema@.zk_lock_token(bigint)'),
        ('produce', '@extschema@.zk_enqueue(text,bytea,integer)'),
        ('produce', '@extschema@.zk_enqueue(text,text,integer)'),
        ('consume', '@extschema@.zk_dequeue(text,interval,integer)'),
        ('consume', '@extschema@.zk_try_dequeue(text,integer)'),
        ('consume', '@extschema@.zk_queue_peek(text,integer)'),
        ('consume', '@extschema@.zk_queue_length(text)'),
        ('wait', '@extschema@.zk_barrier_enter(text,integer,interval)'),
        ('wait', '@extschema@.zk_barrier_leave(text,interval)'),
        ('wait', '@extschema@.zk_gate_wait(text,interval)'),
        ('wait', '@extschema@.zk_await(text,integer,interval)'),
        ('wait', '@extschema@.zk_arrivals(text)'),
        ('arrive', '@extschema@.zk_arrive(text,text)'),
        ('semaphore', '@extschema@.zk_semaphore(text,integer,interval)'),
        ('semaphore', '@extschema@.zk_try_semaphore(text,integer)'),
        ('semaphore', '@extschema@.zk_session_semaphore(text,integer,interval)'),
        ('semaphore', '@extschema@.zk_try_session_semaphore(text,integer)'),
        ('semaphore', '@extschema@.zk_semaphore_release(text)'),
        ('lease', '@extschema@.zk_try_lease(text,interval,text)'),
        ('lease', '@extschema@.zk_lease_holder(text)'),
        ('election', '@extschema@.zk_is_leader(text)'),
        ('election', '@extschema@.zk_leader(text)'),
        ('election', '@extschema@.zk_election_candidates(text)'),
        ('admin', '@extschema@.zk_queue_purge(text)'),
        ('admin', '@extschema@.zk_queue_drop(text)'),
        ('admin', '@extschema@.zk_arrivals_reset(text)'),
        ('admin', '@extschema@.zk_gate_close(text)'),
        ('admin', '@extschema@.zk_gate_open(text)'),
        ('admin', '@extschema@.zk_queue_release_cluster(text)'),
        ('monitor', '@extschema@.zk_status()'),
        ('monitor', '@extschema@.zk_lock_holders(text)'),
        ('monitor', '@extschema@.zk_lock_holders(bigint)'),
        ('monitor', '@extschema@.zk_semaphore_holders(text)'),
        ('monitor', '@extschema@.zk_locks_internal()'),
        ('monitor', '@extschema@.zk_entries_internal()'),
        ('monitor', '@extschema@.zk_queues_internal()'),
        ('monitor', '@extschema@.zk_leases_internal()'),
        ('monitor', '@extschema@.zk_elections_internal()'),
        ('monitor', '@extschema@.zk_semaphores_internal()'),
        ('monitor', '@extschema@.zk_role_usage()')) AS t(g, f)
    UNION ALL
    SELECT 'monitor', 'view', v::regclass::text FROM (VALUES
        ('@extschema@.zk_locks'), ('@extschema@.zk_entries'), ('@extschema@.zk_queues'), ('@extschema@.zk_leases'),
        ('@extschema@.zk_elections'), ('@extschema@.zk_semaphores'),
        ('@extschema@.zk_quotas')) AS t(v)
$$;

GRANT EXECUTE ON FUNCTION zk_role_usage() TO pg_monitor;
GRANT SELECT ON TABLE zk_quotas TO pg_monitor;
