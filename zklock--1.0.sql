/* zklock--1.0.sql */

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
    msg_id      bigint,         -- czxid of the item's node: unique, increasing
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
REVOKE ALL ON FUNCTION zk_queue_release_cluster(text) FROM PUBLIC;

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

CREATE FUNCTION zk_leader(name text,
    OUT cluster text, OUT host text, OUT port int, OUT since text, OUT token bigint,
    OUT this_server boolean, OUT data text)
RETURNS SETOF record
LANGUAGE sql VOLATILE PARALLEL UNSAFE ROWS 1
AS $$
    SELECT c.cluster, c.host, c.port, c.since, c.token,
           coalesce(c.cluster = (SELECT system_identifier::text FROM pg_control_system())
                    AND c.port = current_setting('port')::int
                    AND c.application_name = 'zklock worker', false),
           c.data
      FROM zk_election_candidates(name) AS c
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
