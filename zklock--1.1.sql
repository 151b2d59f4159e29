/* zklock--1.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION zklock" to load this file. \quit

-- The lock functions mirror PostgreSQL's advisory lock families.  Each takes
-- a text name, or a bigint key that stands for the name written in decimal
-- (zk_lock(42) is zk_lock('42')).
--
-- The acquiring functions are not STRICT: a NULL timeout means "use
-- lock_timeout, else wait forever"; a NULL name or key returns NULL, as a
-- strict function would.

-- transaction scope: held until COMMIT or ROLLBACK
CREATE FUNCTION zk_lock(name text, timeout interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock(key bigint, timeout interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock_shared(name text, timeout interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_shared' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock_shared(key bigint, timeout interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_shared_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock(name text) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock(key bigint) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock_shared(name text) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_shared' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock_shared(key bigint) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_shared_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- session scope: held until unlocked or the session ends
CREATE FUNCTION zk_session_lock(name text, timeout interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock(key bigint, timeout interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock_shared(name text, timeout interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock_shared' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock_shared(key bigint, timeout interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock_shared_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_session_lock(name text) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_session_lock(key bigint) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_session_lock_shared(name text) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_shared' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_session_lock_shared(key bigint) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_shared_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_unlock(name text) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_unlock(key bigint) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_unlock_shared(name text) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_shared' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_unlock_shared(key bigint) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_shared_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_unlock_all() RETURNS void
AS 'MODULE_PATHNAME', 'zk_unlock_all' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- fencing token of a lock this backend holds (NULL when it holds none)
CREATE FUNCTION zk_lock_token(name text) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_token' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock_token(key bigint) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_token_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- every contender of a lock, read from ZooKeeper (so: from every server)
CREATE FUNCTION zk_lock_holders(
    name text,
    OUT node text,
    OUT mode text,
    OUT state text,
    OUT "position" integer,
    OUT token bigint,
    OUT cluster text,
    OUT host text,
    OUT port integer,
    OUT database text,
    OUT pid integer,
    OUT usename text,
    OUT application_name text,
    OUT since text,
    OUT data text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lock_holders' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock_holders(
    key bigint,
    OUT node text, OUT mode text, OUT state text, OUT "position" integer,
    OUT token bigint, OUT cluster text, OUT host text, OUT port integer,
    OUT database text, OUT pid integer, OUT usename text,
    OUT application_name text, OUT since text, OUT data text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lock_holders_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- the entries of this PostgreSQL cluster, modelled on pg_locks
CREATE FUNCTION zk_locks_internal(
    OUT pid integer,
    OUT database text,
    OUT name text,
    OUT mode text,
    OUT scope text,
    OUT state text,
    OUT token bigint,
    OUT node text,
    OUT requested_at timestamptz,
    OUT granted_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_locks_internal' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

CREATE VIEW zk_locks AS SELECT * FROM zk_locks_internal();

-- every entry of the worker's table, whatever its kind (what entries_used counts)
CREATE FUNCTION zk_entries_internal(
    OUT entry integer,
    OUT pid integer,
    OUT database text,
    OUT kind text,
    OUT name text,
    OUT state text,
    OUT outcome text,
    OUT released boolean,
    OUT queued boolean,
    OUT retrying boolean,
    OUT in_doubt boolean,
    OUT outstanding integer,
    OUT requested_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_entries_internal' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

CREATE VIEW zk_entries AS SELECT * FROM zk_entries_internal();

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

CREATE FUNCTION zk_status(
    OUT state text,
    OUT servers text,
    OUT session_id text,
    OUT session_timeout interval,
    OUT worker_pid integer,
    OUT entries_used integer,
    OUT max_locks integer,
    OUT requests bigint,
    OUT grants bigint,
    OUT releases bigint,
    OUT timeouts bigint,
    OUT abandoned bigint,
    OUT lost bigint,
    OUT watch_events bigint,
    OUT reconnects bigint,
    OUT sessions bigint,
    OUT zk_errors bigint,
    OUT deadlocks bigint,
    OUT leases_taken bigint,
    OUT leases_refused bigint,
    OUT leaderships bigint,
    OUT semaphore_leases bigint,
    OUT semaphore_refusals bigint,
    OUT noauth_refusals bigint,
    OUT queues_tracked integer,
    OUT publications_blocked integer,
    OUT auth text)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_status'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- The ZooKeeper path of a name of this session's namespace (zklock.namespace),
-- for kazoo or Curator clients that take part: kind is lock, queue, barrier,
-- gate, arrivals, semaphore, lease or election (elections are per cluster).
CREATE FUNCTION zk_path(kind text, name text) RETURNS text
AS 'MODULE_PATHNAME', 'zk_path' LANGUAGE C STRICT STABLE PARALLEL SAFE;

-- ---------------------------------------------------------------------------
-- The queue (kazoo LockingQueue layout under <zklock.root>/queues/<name>)

CREATE TYPE zk_message AS (
    msg_id      bigint,         -- the item's id (from its node's czxid and name): unique, increasing
    priority    int,
    enqueued_at timestamptz,
    payload     bytea,
    body        text            -- the payload as text when it is valid UTF-8
);

CREATE FUNCTION zk_enqueue(queue text, payload bytea, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_bytea' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payload text, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_text' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_dequeue(queue text, timeout interval DEFAULT NULL, max_items int DEFAULT 1)
RETURNS SETOF zk_message
AS 'MODULE_PATHNAME', 'zk_dequeue_sql' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

CREATE FUNCTION zk_try_dequeue(queue text, max_items int DEFAULT 1)
RETURNS SETOF zk_message
AS 'MODULE_PATHNAME', 'zk_try_dequeue_sql' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

CREATE FUNCTION zk_queue_length(queue text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_queue_length' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_queue_peek(queue text, n int DEFAULT 10)
RETURNS SETOF zk_message
AS 'MODULE_PATHNAME', 'zk_queue_peek' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

CREATE FUNCTION zk_queue_purge(queue text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_queue_purge' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- an empty, unused queue's nodes deleted at once (all or none); false when
-- there was no such queue
CREATE FUNCTION zk_queue_drop(queue text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_queue_drop' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_queues_internal(
    OUT queue text,
    OUT items bigint,
    OUT claimed bigint,
    OUT local_claims int,
    OUT local_waiting int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_queues_internal' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

CREATE VIEW zk_queues AS SELECT * FROM zk_queues_internal();

CREATE FUNCTION zk_queue_release_cluster(cluster text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_queue_release_cluster' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Barriers (src/barrier_*.c): double barriers, gates, durable arrivals

CREATE FUNCTION zk_barrier_enter(name text, parties int, timeout interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_barrier_enter' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_barrier_leave(name text, timeout interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_barrier_leave' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_gate_close(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_gate_close' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_gate_open(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_gate_open' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_gate_wait(name text, timeout interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_gate_wait' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_arrive(name text, participant text)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_arrive' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_await(name text, parties int, timeout interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_await' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_arrivals(name text,
    OUT participant text,
    OUT arrived_at timestamptz,
    OUT cluster text,
    OUT host text,
    OUT port int,
    OUT database text,
    OUT pid int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_arrivals' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

CREATE FUNCTION zk_arrivals_reset(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_arrivals_reset' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Leases (kazoo's NonBlockingLease): once per period across servers
CREATE FUNCTION zk_try_lease(name text, duration interval, holder text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lease' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_lease_holder(name text,
    OUT holder text, OUT ends_at timestamptz, OUT this_server boolean, OUT expired boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lease_holder' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

-- every lease in ZooKeeper, and whether this server holds it
CREATE FUNCTION zk_leases_internal(
    OUT name text, OUT holder text, OUT ends_at timestamptz,
    OUT this_server boolean, OUT expired boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_leases_internal' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE ROWS 10;

CREATE VIEW zk_leases AS SELECT * FROM zk_leases_internal();

-- Leader election held by the worker (zklock.elections; kazoo's Election)
CREATE FUNCTION zk_is_leader(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_is_leader' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_election_candidates(name text,
    OUT node text, OUT mode text, OUT state text, OUT "position" int, OUT token bigint,
    OUT cluster text, OUT host text, OUT port int, OUT database text, OUT pid int,
    OUT usename text, OUT application_name text, OUT since text, OUT data text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_election_candidates' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

-- The extension may live in any schema (CREATE EXTENSION zklock SCHEMA zk): a
-- function that calls another names it by @extschema@, and runs with a fixed
-- search_path, so neither the caller's search_path nor its objects matter.
CREATE FUNCTION zk_leader(name text,
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

CREATE FUNCTION zk_elections_internal(
    OUT name text, OUT is_leader boolean, OUT token bigint,
    OUT standing_since timestamptz, OUT leading_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_elections_internal' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 4;

-- this cluster's candidacies (zklock.elections)
CREATE VIEW zk_elections AS SELECT * FROM zk_elections_internal();

-- Semaphores (kazoo's Semaphore): at most max_leases holders at once
CREATE FUNCTION zk_semaphore(name text, max_leases int, timeout interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_semaphore' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_semaphore(name text, max_leases int)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_semaphore' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_session_semaphore(name text, max_leases int, timeout interval DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_session_semaphore' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_session_semaphore(name text, max_leases int)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_semaphore' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_semaphore_release(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_semaphore_release' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_semaphore_holders(name text,
    OUT node text, OUT mode text, OUT state text, OUT "position" int, OUT token bigint,
    OUT cluster text, OUT host text, OUT port int, OUT database text, OUT pid int,
    OUT usename text, OUT application_name text, OUT since text, OUT data text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_semaphore_holders' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

-- the semaphore leases of this PostgreSQL cluster, and its backends waiting for one
CREATE FUNCTION zk_semaphores_internal(
    OUT pid integer,
    OUT database text,
    OUT name text,
    OUT max_leases integer,
    OUT scope text,
    OUT state text,
    OUT token bigint,
    OUT node text,
    OUT requested_at timestamptz,
    OUT granted_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_semaphores_internal' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

CREATE VIEW zk_semaphores AS SELECT * FROM zk_semaphores_internal();

-- ---------------------------------------------------------------------------
-- Privileges (doc/security.md, "Privileges")
--
-- Every name is shared by every database of every cluster on the ZooKeeper,
-- so a function callable by PUBLIC would let any role of any database peek,
-- take, forge or purge another tenant's queue, block its locks, open its
-- gates, forge its arrivals, and read who holds what.  Nothing is executable
-- by PUBLIC but zk_privilege_groups() and zk_path(); a superuser grants a role what it
-- needs by groups (zk_grant) or with GRANT.  The groups do not overlap.

-- the groups: each object of the extension a role needs for one use
CREATE FUNCTION zk_privilege_groups(
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

-- grant (revoke) a whole group to (from) a role; superuser only
CREATE FUNCTION zk_grant(group_name text, grantee regrole, do_revoke boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    n int := 0;
BEGIN
    IF NOT coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) THEN
        RAISE EXCEPTION 'permission denied to % zklock privilege groups',
            CASE WHEN do_revoke THEN 'revoke' ELSE 'grant' END
            USING ERRCODE = '42501',
                  HINT = 'Run it as a superuser.';
    END IF;
    IF grantee IS NULL OR do_revoke IS NULL THEN
        RAISE EXCEPTION 'zklock grantee must not be null'
            USING ERRCODE = '22004',
                  HINT = 'Give an existing role, for example ''app_worker''.';
    END IF;
    FOR r IN SELECT g.object_type, g.object
               FROM @extschema@.zk_privilege_groups() g
              WHERE g.group_name = zk_grant.group_name
    LOOP
        EXECUTE format('%s %s ON %s %s %s %s',
                       CASE WHEN do_revoke THEN 'REVOKE' ELSE 'GRANT' END,
                       CASE WHEN r.object_type = 'view' THEN 'SELECT' ELSE 'EXECUTE' END,
                       CASE WHEN r.object_type = 'view' THEN 'TABLE' ELSE 'FUNCTION' END,
                       r.object,
                       CASE WHEN do_revoke THEN 'FROM' ELSE 'TO' END,
                       grantee);
        n := n + 1;
    END LOOP;
    IF n = 0 THEN
        RAISE EXCEPTION 'unknown zklock privilege group "%"', group_name
            USING ERRCODE = '22023',
                  HINT = 'The groups are: ' ||
                    (SELECT string_agg(DISTINCT g.group_name, ', ')
                       FROM @extschema@.zk_privilege_groups() g) || '.';
    END IF;
END
$$;

CREATE FUNCTION zk_revoke(group_name text, grantee regrole)
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE
AS $$ SELECT @extschema@.zk_grant(group_name, grantee, do_revoke => true) $$;

-- PUBLIC executes nothing of this extension but zk_privilege_groups() and
-- zk_path(): they are harmless to every tenant (a constant list of this
-- extension's own objects, read from the catalog like \df; the path of a
-- name from zklock.root and zklock.namespace, which anyone can SHOW; no
-- ZooKeeper, no shared memory)
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT d.objid::regprocedure
               FROM pg_catalog.pg_depend d
               JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
              WHERE e.extname = 'zklock'
                AND d.classid = 'pg_catalog.pg_proc'::regclass
                AND d.deptype = 'e'
                AND d.objid <> '@extschema@.zk_privilege_groups()'::regprocedure
                AND d.objid <> '@extschema@.zk_path(text,text)'::regprocedure
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;

-- the monitor group: pg_monitor (the views and the functions behind them)
SELECT @extschema@.zk_grant('monitor', 'pg_monitor');
