/* zklock--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION zklock" to load this file. \quit

-- Exclusive lock held until the end of the current transaction.
-- Not STRICT: a NULL timeout means "use lock_timeout, else wait forever";
-- a NULL name returns NULL as a strict function would.
CREATE FUNCTION zk_lock(name text, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_lock(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

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
    OUT zk_errors bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_status'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

