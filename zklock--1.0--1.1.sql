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
