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

-- zk_status gains acl_problems, acl_problem (nodes found open to other
-- ZooKeeper clients: doc/security.md, "Nodes found already there") and
-- consumes_blocked (consumes ZooKeeper refuses: doc/errors.md).  Its row
-- type changes, so it is dropped and created again, and given back the
-- grants it had (PUBLIC none, pg_monitor and whoever zk_grant gave the
-- monitor group).
DO $$
DECLARE
    grantees text[];
    g text;
BEGIN
    SELECT coalesce(array_agg(DISTINCT a.grantee::regrole::text), '{}')
      INTO grantees
      FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
     WHERE p.oid = '@extschema@.zk_status()'::regprocedure
       AND a.privilege_type = 'EXECUTE'
       AND a.grantee <> 0
       AND a.grantee <> p.proowner;
    DROP FUNCTION @extschema@.zk_status();
    CREATE FUNCTION @extschema@.zk_status(
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
        OUT auth text,
        OUT acl_problems integer,
        OUT acl_problem text,
        OUT consumes_blocked integer)
    RETURNS record
    AS 'MODULE_PATHNAME', 'zk_status'
    LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
    REVOKE ALL ON FUNCTION @extschema@.zk_status() FROM PUBLIC;
    FOREACH g IN ARRAY grantees
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.zk_status() TO %s', g);
    END LOOP;
END
$$;
