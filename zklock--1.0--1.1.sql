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

-- Issue 38.  zk_message gains attempts: how often zklock handed the item out,
-- this time included (doc/queues.md, "Delivery count").
ALTER TYPE zk_message ADD ATTRIBUTE attempts int;
-- ... and, for a dead letter, where a dead-letter policy moved it from
-- (doc/queues.md, "Dead letters")
ALTER TYPE zk_message ADD ATTRIBUTE origin text;
ALTER TYPE zk_message ADD ATTRIBUTE origin_msg_id bigint;
ALTER TYPE zk_message ADD ATTRIBUTE origin_attempts int;

-- Issue 35.  '$database' no longer follows a database's rename: it stands for
-- the name recorded in zk_database_namespace (here: the name the database has
-- when it is updated, which 1.0 used all along).
-- What zklock.namespace's default, '$database', stands for in this database
-- (doc/security.md, "Namespaces"): the database's name when CREATE EXTENSION
-- ran, not its current one, which a role with CREATEDB or the database's
-- owner can change (ALTER DATABASE ... RENAME).  Only superusers write it:
-- the superuser who creates the extension owns the table, PUBLIC has no
-- privilege on it.  One row, for the database it was recorded in; a copy of
-- this database (CREATE DATABASE ... TEMPLATE) finds no row of its own and
-- refuses '$database' (55000) until a superuser records one.  Not dumped:
-- pg_dump's CREATE EXTENSION records the name of the database restored into.
CREATE TABLE zk_database_namespace (
    datoid    oid PRIMARY KEY,
    namespace text NOT NULL
);
REVOKE ALL ON TABLE zk_database_namespace FROM PUBLIC;

-- the registry of namespace claims in ZooKeeper (doc/security.md,
-- "Namespaces"): this database joins the claim of a namespace (a superuser
-- shares it on purpose), or with takeover becomes the only database of this
-- cluster in it; superuser only, called by zk_set_database_namespace
CREATE FUNCTION zk_namespace_claim(namespace text, takeover boolean)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_namespace_claim' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION zk_namespace_claim(text, boolean) FROM PUBLIC;

-- record this database's '$database' namespace (NULL: its current name);
-- superuser only; sessions that start afterwards use it.  A name given, or
-- takeover, is written into the registry of claims at once (this database
-- joins the namespace, or takes it over); the default (NULL) is claimed by
-- the first call that uses it.
CREATE FUNCTION zk_set_database_namespace(namespace text DEFAULT NULL,
                                          takeover boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ns text := coalesce(zk_set_database_namespace.namespace, current_database());
    others text;
BEGIN
    IF NOT coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) THEN
        RAISE EXCEPTION 'permission denied to set the zklock namespace of database %',
            quote_ident(current_database())
            USING ERRCODE = '42501',
                  HINT = 'Run it as a superuser.';
    END IF;
    IF ns = '' OR ns = '$database' OR octet_length(convert_to(ns, 'UTF8')) > 127 THEN
        RAISE EXCEPTION 'zklock namespace % cannot be recorded for a database', quote_literal(ns)
            USING ERRCODE = '22023',
                  HINT = 'Give a name of 1 to 127 bytes (in UTF-8) other than ''$database''; '
                         'for the root namespace set zklock.namespace = ''''.';
    END IF;
    IF zk_set_database_namespace.namespace IS NOT NULL
       OR coalesce(zk_set_database_namespace.takeover, false) THEN
        PERFORM @extschema@.zk_namespace_claim(ns, coalesce(zk_set_database_namespace.takeover, false));
    END IF;
    DELETE FROM @extschema@.zk_database_namespace;
    INSERT INTO @extschema@.zk_database_namespace (datoid, namespace)
        SELECT d.oid, ns FROM pg_database d WHERE d.datname = current_database();
    -- who else in this cluster is in that namespace (a configured one, or
    -- a database of that name)
    SELECT string_agg(w, ', ' ORDER BY w) INTO others FROM (
        SELECT CASE WHEN s.setrole = 0 THEN 'database ' || quote_ident(d.datname)
                    WHEN s.setdatabase = 0 THEN 'role ' || quote_ident(r.rolname)
                    ELSE 'role ' || quote_ident(r.rolname) || ' in database ' || quote_ident(d.datname)
               END AS w
          FROM pg_db_role_setting s
          LEFT JOIN pg_database d ON d.oid = s.setdatabase
          LEFT JOIN pg_roles r ON r.oid = s.setrole
         WHERE ('zklock.namespace=' || ns) = ANY (s.setconfig)
           AND NOT (s.setrole = 0 AND d.datname = current_database())
        UNION
        SELECT 'database ' || quote_ident(d.datname) FROM pg_database d
         WHERE d.datname = ns AND d.datname <> current_database()) x;
    IF others IS NOT NULL THEN
        RAISE WARNING 'zklock namespace % of database % is also that of: %',
            quote_literal(ns), quote_ident(current_database()), others
            USING DETAIL = 'Sessions in one namespace meet on every name: they share locks, queues and barriers.',
                  HINT = 'If they should not, record another: SELECT @extschema@.zk_set_database_namespace(''name'').';
    END IF;
    RETURN ns;
END
$$;

REVOKE ALL ON FUNCTION zk_set_database_namespace(text, boolean) FROM PUBLIC;

-- the name this database has now: 1.0 used its current name all along
SELECT @extschema@.zk_set_database_namespace(NULL::pg_catalog.text);

-- Superusers' calls: zk_privilege_groups and zk_revoke run with a fixed
-- search_path (zk_privilege_groups names every object with its schema), and
-- zk_grant refuses while roles that are not superusers may create objects in
-- the extension's schema (1.0 lived in public, which PostgreSQL 15 gives to
-- the database's owner: such a database warns below).
-- zk_role_usage() and the view zk_quotas (issue 35): use against quota per
-- role, in the monitor group (zk_privilege_groups() lists them; pg_monitor
-- gets them, as a fresh install's zk_grant('monitor', 'pg_monitor') does)
-- per role: the entries its sessions hold or await against zklock.max_locks_per_role,
-- and what it wrote into ZooKeeper against zklock.max_write_rate (src/core/quota.c)
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

-- what all of zklock.root keeps in ZooKeeper (every tenant of every cluster
-- on that root) against zklock.max_kept_bytes and zklock.max_kept_nodes, as
-- last read, and whether they are enforced (src/core/kept.c)
CREATE FUNCTION zk_kept_totals(
    OUT state text,
    OUT kept_nodes bigint,
    OUT kept_bytes bigint,
    OUT max_kept_nodes bigint,
    OUT max_kept_bytes bigint,
    OUT read_at timestamptz,
    OUT writes_refused bigint,
    OUT detail text)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_kept_totals' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- what each namespace keeps in ZooKeeper (queue items and arrivals) against
-- zklock.max_namespace_items, as this cluster's worker last counted it
-- (src/queue/queue_nskept.c): one row per namespace that published lately
CREATE FUNCTION zk_namespace_totals(
    OUT namespace text,
    OUT state text,
    OUT kept_items bigint,
    OUT reserved_items bigint,
    OUT max_items bigint,
    OUT counted_at timestamptz,
    OUT commits_refused bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_namespace_totals' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_namespace_totals() FROM PUBLIC;

REVOKE ALL ON FUNCTION zk_kept_totals() FROM PUBLIC;

REVOKE ALL ON FUNCTION zk_role_usage() FROM PUBLIC;

-- end one's own lease now, deleting its holder node (issue 35): in the
-- group lease, so whoever may take leases (EXECUTE on zk_try_lease) gets it
-- (below, with the other functions new in 1.1)
CREATE FUNCTION zk_lease_release(name text, holder text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lease_release' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_lease_release(text, text) FROM PUBLIC;

-- Issue 41: elections a session campaigns in (kazoo's Election layout under
-- <root>/elections/<namespace>:<name>, a lock of the session: doc/elections.md,
-- "Campaigns"); the group campaign, and zk_campaign_candidates in the group
-- election
CREATE FUNCTION zk_campaign(name text, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_campaign' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_session_campaign(name text, timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_campaign' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_campaign(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_campaign' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_try_session_campaign(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_campaign' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_resign(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_resign' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_campaign_token(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_campaign_token' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_campaign_candidates(name text,
    OUT node text, OUT mode text, OUT state text, OUT "position" int, OUT token bigint,
    OUT cluster text, OUT host text, OUT port int, OUT database text, OUT pid int,
    OUT usename text, OUT application_name text, OUT since text, OUT data text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_campaign_candidates' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

REVOKE ALL ON FUNCTION zk_campaign(text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_session_campaign(text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_campaign(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_session_campaign(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_resign(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_campaign_token(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_campaign_candidates(text) FROM PUBLIC;

-- Returns once the leader of a campaign's election is not the one whose
-- token the caller knows (NULL: nobody): the leader's token, NULL when
-- nobody leads; the known token again when the timeout passed first
CREATE FUNCTION zk_leader_wait(name text, known_token bigint DEFAULT NULL,
    timeout interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_leader_wait' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_leader_wait(text, bigint, interval) FROM PUBLIC;

-- Issue 38: this cluster's hand-outs, consumes and releases per queue of
-- the session's namespace since the worker started (shared memory, no
-- request to ZooKeeper; doc/queues.md, "zk_queue_stats")
CREATE FUNCTION zk_queue_stats(
    OUT queue text,
    OUT handed_out bigint,
    OUT consumed bigint,
    OUT released bigint,
    OUT dead_lettered bigint,
    OUT since timestamptz,
    OUT last_at timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_queue_stats' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_queue_stats() FROM PUBLIC;

-- Issue 38: a queue's dead-letter policy, and moving items between queues
-- (doc/queues.md, "Dead letters"); group admin, granted below to the roles
-- that may purge a queue
CREATE FUNCTION zk_queue_set_policy(queue text, max_attempts int, dead_letter text)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_queue_set_policy' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_queue_move(from_queue text, to_queue text, max_items int DEFAULT 1000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_queue_move' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Issue 38: delayed items: published at COMMIT as any item, handed out only
-- once due (doc/queues.md, "Delayed items"): after delay, or from not_before
CREATE FUNCTION zk_enqueue(queue text, payload bytea, delay interval, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_later' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payload text, delay interval, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_later' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payloads bytea[], delay interval, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_later' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payloads text[], delay interval, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_later' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payload bytea, not_before timestamptz, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_later' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payload text, not_before timestamptz, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_later' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payloads bytea[], not_before timestamptz, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_later' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payloads text[], not_before timestamptz, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_later' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_enqueue(text, bytea, interval, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_enqueue(text, bytea, timestamptz, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_enqueue(text, text, interval, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_enqueue(text, text, timestamptz, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_enqueue(text, bytea[], interval, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_enqueue(text, bytea[], timestamptz, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_enqueue(text, text[], interval, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_enqueue(text, text[], timestamptz, int) FROM PUBLIC;

-- message groups (doc/queues.md, "Message groups"): within a group, items
-- go out in publication order, one at a time
CREATE FUNCTION zk_enqueue_grouped(queue text, group_key text, payload bytea, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_grouped' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue_grouped(queue text, group_key text, payload text, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_grouped' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue_grouped(queue text, group_key text, payloads bytea[], priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_grouped' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue_grouped(queue text, group_key text, payloads text[], priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_grouped' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_enqueue_grouped(text, text, bytea, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_enqueue_grouped(text, text, text, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_enqueue_grouped(text, text, bytea[], int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_enqueue_grouped(text, text, text[], int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_queue_set_policy(text, int, text) FROM PUBLIC;

-- Issue 38: a backoff for an item dequeued (doc/queues.md, "Retry later");
-- group consume, granted below to the roles that may dequeue
CREATE FUNCTION zk_retry_later(msg_id bigint, delay interval)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_retry_later_sql' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_retry_later(bigint, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_queue_move(text, text, int) FROM PUBLIC;

-- Issue 39: an operator takes a lock back from whoever holds it, on any cluster
-- (doc/locks.md, "Revoking a lock"): one row per holder, with what became
-- of it; in the group admin
CREATE FUNCTION zk_lock_revoke(
    name text,
    timeout interval DEFAULT '10s',
    OUT node text,
    OUT mode text,
    OUT token bigint,
    OUT cluster text,
    OUT host text,
    OUT port integer,
    OUT database text,
    OUT pid integer,
    OUT usename text,
    OUT application_name text,
    OUT since text,
    OUT outcome text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lock_revoke' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock_revoke(
    key bigint,
    timeout interval DEFAULT '10s',
    OUT node text, OUT mode text, OUT token bigint, OUT cluster text,
    OUT host text, OUT port integer, OUT database text, OUT pid integer,
    OUT usename text, OUT application_name text, OUT since text,
    OUT outcome text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'zk_lock_revoke_key' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_lock_revoke(text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_lock_revoke(bigint, interval) FROM PUBLIC;

-- Issue 38: zk_enqueue of an array, many items in one call (the elements
-- in array order, as one zk_enqueue per element would add them, all of them
-- or, an element refused, none).  In the group produce: PUBLIC may not
-- execute them, and a role that may execute a zk_enqueue of 1.0 gets the
-- array form of the same payload type.
CREATE FUNCTION zk_enqueue(queue text, payloads bytea[], priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_bytea_array' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payloads text[], priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_text_array' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_enqueue(text, bytea[], integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION zk_enqueue(text, text[], integer) FROM PUBLIC;

-- Issue 39: a maximum hold (doc/locks.md, "A maximum hold").  The waiting
-- lock functions gain max_hold; a function's arguments cannot change in
-- place, so each 1.0 form is created beside its successor, whose grants it
-- hands on (the DO block below), and dropped after it.  The C functions read
-- max_hold only when they have it, so 1.0's catalog works with this library.
CREATE FUNCTION zk_lock(name text, timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock(key bigint, timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock_shared(name text, timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_shared' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock_shared(key bigint, timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_lock_shared_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock(name text, timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock(key bigint, timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock_shared(name text, timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock_shared' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock_shared(key bigint, timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_session_lock_shared_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_lock(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_lock(bigint, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_lock_shared(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_lock_shared(bigint, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_session_lock(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_session_lock(bigint, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_session_lock_shared(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_session_lock_shared(bigint, interval, interval) FROM PUBLIC;

-- Issue 39: several locks at once, all or none (doc/locks.md, "Several
-- locks at once"); group lock, granted below to the roles that may execute
-- the one-name function of the same family
CREATE FUNCTION zk_lock(names text[], timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_lock_all' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock(keys bigint[], timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_lock_all_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock_shared(names text[], timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_lock_shared_all' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_lock_shared(keys bigint[], timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_lock_shared_all_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock(names text[], timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_session_lock_all' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock(keys bigint[], timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_session_lock_all_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock_shared(names text[], timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_session_lock_shared_all' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_lock_shared(keys bigint[], timeout interval DEFAULT NULL,
    max_hold interval DEFAULT NULL) RETURNS bigint[]
AS 'MODULE_PATHNAME', 'zk_session_lock_shared_all_key' LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock(names text[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_all' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock(keys bigint[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_all_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock_shared(names text[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_shared_all' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock_shared(keys bigint[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_shared_all_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_session_lock(names text[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_all' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_session_lock(keys bigint[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_all_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_session_lock_shared(names text[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_shared_all' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_session_lock_shared(keys bigint[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_lock_shared_all_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_unlock(names text[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_all_of' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_unlock(keys bigint[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_all_of_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_unlock_shared(names text[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_shared_all_of' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_unlock_shared(keys bigint[]) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_unlock_shared_all_of_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_lock(text[], interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_lock(bigint[], interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_lock_shared(text[], interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_lock_shared(bigint[], interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_session_lock(text[], interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_session_lock(bigint[], interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_session_lock_shared(text[], interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_session_lock_shared(bigint[], interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_lock(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_lock(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_lock_shared(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_lock_shared(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_session_lock(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_session_lock(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_session_lock_shared(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_session_lock_shared(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_unlock(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_unlock(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_unlock_shared(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_unlock_shared(bigint[]) FROM PUBLIC;

-- Each function new in 1.1 goes to the roles that may execute the 1.0
-- function of its group it stands beside (PUBLIC has none of them, and the
-- owner has all): zk_lease_release to who may take leases, zk_queue_stats
-- to who may read zk_queues (pg_monitor: below), each array form of
-- zk_enqueue to who may enqueue that payload type.
DO $$
DECLARE
    r record;
BEGIN
    -- (regrole's text is the role's name quoted as an identifier already)
    FOR r IN SELECT DISTINCT a.grantee::regrole::text AS grantee, t.fn
               FROM (VALUES
                       ('@extschema@.zk_try_lease(text,interval,text)', '@extschema@.zk_lease_release(text,text)'),
                       ('@extschema@.zk_is_leader(text)', '@extschema@.zk_campaign_candidates(text)'),
                       ('@extschema@.zk_is_leader(text)', '@extschema@.zk_leader_wait(text,bigint,interval)'),
                       ('@extschema@.zk_queues_internal()', '@extschema@.zk_queue_stats()'),
                       ('@extschema@.zk_queue_purge(text)', '@extschema@.zk_queue_set_policy(text,integer,text)'),
                       ('@extschema@.zk_queue_purge(text)', '@extschema@.zk_queue_move(text,text,integer)'),
                       ('@extschema@.zk_queue_purge(text)', '@extschema@.zk_lock_revoke(text,interval)'),
                       ('@extschema@.zk_queue_purge(text)', '@extschema@.zk_lock_revoke(bigint,interval)'),
                       ('@extschema@.zk_dequeue(text,interval,integer)', '@extschema@.zk_retry_later(bigint,interval)'),
                       ('@extschema@.zk_enqueue(text,bytea,integer)', '@extschema@.zk_enqueue(text,bytea[],integer)'),
                       ('@extschema@.zk_enqueue(text,text,integer)', '@extschema@.zk_enqueue(text,text[],integer)'),
                       ('@extschema@.zk_enqueue(text,bytea,integer)', '@extschema@.zk_enqueue(text,bytea,interval,integer)'),
                       ('@extschema@.zk_enqueue(text,bytea,integer)', '@extschema@.zk_enqueue(text,bytea,timestamp with time zone,integer)'),
                       ('@extschema@.zk_enqueue(text,bytea,integer)', '@extschema@.zk_enqueue(text,bytea[],interval,integer)'),
                       ('@extschema@.zk_enqueue(text,bytea,integer)', '@extschema@.zk_enqueue(text,bytea[],timestamp with time zone,integer)'),
                       ('@extschema@.zk_enqueue(text,text,integer)', '@extschema@.zk_enqueue(text,text,interval,integer)'),
                       ('@extschema@.zk_enqueue(text,text,integer)', '@extschema@.zk_enqueue(text,text,timestamp with time zone,integer)'),
                       ('@extschema@.zk_enqueue(text,text,integer)', '@extschema@.zk_enqueue(text,text[],interval,integer)'),
                       ('@extschema@.zk_enqueue(text,text,integer)', '@extschema@.zk_enqueue(text,text[],timestamp with time zone,integer)'),
                       ('@extschema@.zk_enqueue(text,bytea,integer)', '@extschema@.zk_enqueue_grouped(text,text,bytea,integer)'),
                       ('@extschema@.zk_enqueue(text,bytea,integer)', '@extschema@.zk_enqueue_grouped(text,text,bytea[],integer)'),
                       ('@extschema@.zk_enqueue(text,text,integer)', '@extschema@.zk_enqueue_grouped(text,text,text,integer)'),
                       ('@extschema@.zk_lock(text,interval)', '@extschema@.zk_lock(text[],interval,interval)'),
                       ('@extschema@.zk_lock(text,interval)', '@extschema@.zk_lock(text,interval,interval)'),
                       ('@extschema@.zk_lock(bigint,interval)', '@extschema@.zk_lock(bigint[],interval,interval)'),
                       ('@extschema@.zk_lock(bigint,interval)', '@extschema@.zk_lock(bigint,interval,interval)'),
                       ('@extschema@.zk_lock_shared(text,interval)', '@extschema@.zk_lock_shared(text[],interval,interval)'),
                       ('@extschema@.zk_lock_shared(text,interval)', '@extschema@.zk_lock_shared(text,interval,interval)'),
                       ('@extschema@.zk_lock_shared(bigint,interval)', '@extschema@.zk_lock_shared(bigint[],interval,interval)'),
                       ('@extschema@.zk_lock_shared(bigint,interval)', '@extschema@.zk_lock_shared(bigint,interval,interval)'),
                       ('@extschema@.zk_session_lock(text,interval)', '@extschema@.zk_session_lock(text[],interval,interval)'),
                       ('@extschema@.zk_session_lock(text,interval)', '@extschema@.zk_session_lock(text,interval,interval)'),
                       ('@extschema@.zk_session_lock(bigint,interval)', '@extschema@.zk_session_lock(bigint[],interval,interval)'),
                       ('@extschema@.zk_session_lock(bigint,interval)', '@extschema@.zk_session_lock(bigint,interval,interval)'),
                       ('@extschema@.zk_session_lock_shared(text,interval)', '@extschema@.zk_session_lock_shared(text[],interval,interval)'),
                       ('@extschema@.zk_session_lock_shared(text,interval)', '@extschema@.zk_session_lock_shared(text,interval,interval)'),
                       ('@extschema@.zk_session_lock_shared(bigint,interval)', '@extschema@.zk_session_lock_shared(bigint[],interval,interval)'),
                       ('@extschema@.zk_session_lock_shared(bigint,interval)', '@extschema@.zk_session_lock_shared(bigint,interval,interval)'),
                       ('@extschema@.zk_try_lock(text)', '@extschema@.zk_try_lock(text[])'),
                       ('@extschema@.zk_try_lock(bigint)', '@extschema@.zk_try_lock(bigint[])'),
                       ('@extschema@.zk_try_lock_shared(text)', '@extschema@.zk_try_lock_shared(text[])'),
                       ('@extschema@.zk_try_lock_shared(bigint)', '@extschema@.zk_try_lock_shared(bigint[])'),
                       ('@extschema@.zk_try_session_lock(text)', '@extschema@.zk_try_session_lock(text[])'),
                       ('@extschema@.zk_try_session_lock(bigint)', '@extschema@.zk_try_session_lock(bigint[])'),
                       ('@extschema@.zk_try_session_lock_shared(text)', '@extschema@.zk_try_session_lock_shared(text[])'),
                       ('@extschema@.zk_try_session_lock_shared(bigint)', '@extschema@.zk_try_session_lock_shared(bigint[])'),
                       ('@extschema@.zk_unlock(text)', '@extschema@.zk_unlock(text[])'),
                       ('@extschema@.zk_unlock(bigint)', '@extschema@.zk_unlock(bigint[])'),
                       ('@extschema@.zk_unlock_shared(text)', '@extschema@.zk_unlock_shared(text[])'),
                       ('@extschema@.zk_unlock_shared(bigint)', '@extschema@.zk_unlock_shared(bigint[])'),
                       ('@extschema@.zk_enqueue(text,text,integer)', '@extschema@.zk_enqueue_grouped(text,text,text[],integer)'))
                    AS t(had, fn),
                    pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
              WHERE p.oid = t.had::pg_catalog.regprocedure
                AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0
                AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', r.fn, r.grantee);
    END LOOP;
END
$$;

-- the 1.0 forms the max_hold ones replace (their grants were handed on above)
DROP FUNCTION zk_lock(text, interval);
DROP FUNCTION zk_lock(bigint, interval);
DROP FUNCTION zk_lock_shared(text, interval);
DROP FUNCTION zk_lock_shared(bigint, interval);
DROP FUNCTION zk_session_lock(text, interval);
DROP FUNCTION zk_session_lock(bigint, interval);
DROP FUNCTION zk_session_lock_shared(text, interval);
DROP FUNCTION zk_session_lock_shared(bigint, interval);

-- Counters (kazoo's Counter; issue 41): a bigint in one node, changed with a
-- versioned write.  Like nextval, a change is not undone by ROLLBACK.
CREATE FUNCTION zk_counter_add(name text, delta bigint DEFAULT 1)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_counter_add' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_counter_get(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_counter_get' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_counter_set(name text, value bigint, expected bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_counter_set' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_counter_drop(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_counter_drop' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_counter_add(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_counter_get(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_counter_set(text, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_counter_drop(text) FROM PUBLIC;

-- Issue 41: the semaphore functions gain permits (several leases at once,
-- all or none).  As for max_hold above: each 1.0 form is created beside
-- its successor, whose grants it hands on, and dropped after it; the C
-- functions read permits only when they have it.
CREATE FUNCTION zk_semaphore(name text, max_leases int, timeout interval DEFAULT NULL,
    permits int DEFAULT 1)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_semaphore' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_semaphore(name text, max_leases int, permits int DEFAULT 1)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_semaphore' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_session_semaphore(name text, max_leases int, timeout interval DEFAULT NULL,
    permits int DEFAULT 1)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_session_semaphore' LANGUAGE C VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_session_semaphore(name text, max_leases int, permits int DEFAULT 1)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_session_semaphore' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION zk_semaphore(text, int, interval, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_semaphore(text, int, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_session_semaphore(text, int, interval, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION zk_try_session_semaphore(text, int, int) FROM PUBLIC;
-- and its number of leases can change while leases are held: granted
-- (below) to who could take leases
CREATE FUNCTION zk_semaphore_set_max(name text, max_leases int, timeout interval DEFAULT NULL)
RETURNS int
AS 'MODULE_PATHNAME', 'zk_semaphore_set_max' LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION zk_semaphore_set_max(text, int, interval) FROM PUBLIC;

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT t.fn, a.grantee::pg_catalog.regrole AS grantee
               FROM (VALUES
                       ('@extschema@.zk_semaphore(text,integer,interval)', '@extschema@.zk_semaphore(text,integer,interval,integer)'),
                       ('@extschema@.zk_try_semaphore(text,integer)', '@extschema@.zk_try_semaphore(text,integer,integer)'),
                       ('@extschema@.zk_session_semaphore(text,integer,interval)', '@extschema@.zk_session_semaphore(text,integer,interval,integer)'),
                       ('@extschema@.zk_try_session_semaphore(text,integer)', '@extschema@.zk_try_session_semaphore(text,integer,integer)'),
                       ('@extschema@.zk_semaphore(text,integer,interval)', '@extschema@.zk_semaphore_set_max(text,integer,interval)'))
                    AS t(had, fn),
                    pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
              WHERE p.oid = t.had::pg_catalog.regprocedure
                AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0
                AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', r.fn, r.grantee);
    END LOOP;
END
$$;

DROP FUNCTION zk_semaphore(text, int, interval);
DROP FUNCTION zk_try_semaphore(text, int);
DROP FUNCTION zk_session_semaphore(text, int, interval);
DROP FUNCTION zk_try_session_semaphore(text, int);

-- the groups: each object of the extension a role needs for one use, named
-- with its schema (a fixed search_path: whatever the caller's)
CREATE OR REPLACE FUNCTION zk_privilege_groups(
    OUT group_name text, OUT object_type text, OUT object text)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT g, 'function', f::regprocedure::text FROM (VALUES
        ('lock', '@extschema@.zk_lock(text,interval,interval)'),
        ('lock', '@extschema@.zk_lock(bigint,interval,interval)'),
        ('lock', '@extschema@.zk_lock_shared(text,interval,interval)'),
        ('lock', '@extschema@.zk_lock_shared(bigint,interval,interval)'),
        ('lock', '@extschema@.zk_try_lock(text)'),
        ('lock', '@extschema@.zk_try_lock(bigint)'),
        ('lock', '@extschema@.zk_try_lock_shared(text)'),
        ('lock', '@extschema@.zk_try_lock_shared(bigint)'),
        ('lock', '@extschema@.zk_session_lock(text,interval,interval)'),
        ('lock', '@extschema@.zk_session_lock(bigint,interval,interval)'),
        ('lock', '@extschema@.zk_session_lock_shared(text,interval,interval)'),
        ('lock', '@extschema@.zk_session_lock_shared(bigint,interval,interval)'),
        ('lock', '@extschema@.zk_try_session_lock(text)'),
        ('lock', '@extschema@.zk_try_session_lock(bigint)'),
        ('lock', '@extschema@.zk_try_session_lock_shared(text)'),
        ('lock', '@extschema@.zk_try_session_lock_shared(bigint)'),
        ('lock', '@extschema@.zk_unlock(text)'),
        ('lock', '@extschema@.zk_unlock(bigint)'),
        ('lock', '@extschema@.zk_unlock_shared(text)'),
        ('lock', '@extschema@.zk_unlock_shared(bigint)'),
        ('lock', '@extschema@.zk_unlock_all()'),
        ('lock', '@extschema@.zk_lock(text[],interval,interval)'),
        ('lock', '@extschema@.zk_lock(bigint[],interval,interval)'),
        ('lock', '@extschema@.zk_lock_shared(text[],interval,interval)'),
        ('lock', '@extschema@.zk_lock_shared(bigint[],interval,interval)'),
        ('lock', '@extschema@.zk_session_lock(text[],interval,interval)'),
        ('lock', '@extschema@.zk_session_lock(bigint[],interval,interval)'),
        ('lock', '@extschema@.zk_session_lock_shared(text[],interval,interval)'),
        ('lock', '@extschema@.zk_session_lock_shared(bigint[],interval,interval)'),
        ('lock', '@extschema@.zk_try_lock(text[])'),
        ('lock', '@extschema@.zk_try_lock(bigint[])'),
        ('lock', '@extschema@.zk_try_lock_shared(text[])'),
        ('lock', '@extschema@.zk_try_lock_shared(bigint[])'),
        ('lock', '@extschema@.zk_try_session_lock(text[])'),
        ('lock', '@extschema@.zk_try_session_lock(bigint[])'),
        ('lock', '@extschema@.zk_try_session_lock_shared(text[])'),
        ('lock', '@extschema@.zk_try_session_lock_shared(bigint[])'),
        ('lock', '@extschema@.zk_unlock(text[])'),
        ('lock', '@extschema@.zk_unlock(bigint[])'),
        ('lock', '@extschema@.zk_unlock_shared(text[])'),
        ('lock', '@extschema@.zk_unlock_shared(bigint[])'),
        ('lock', '@extschema@.zk_lock_token(text)'),
        ('lock', '@extschema@.zk_lock_token(bigint)'),
        ('produce', '@extschema@.zk_enqueue(text,bytea,integer)'),
        ('produce', '@extschema@.zk_enqueue(text,text,integer)'),
        ('produce', '@extschema@.zk_enqueue(text,bytea[],integer)'),
        ('produce', '@extschema@.zk_enqueue(text,text[],integer)'),
        ('produce', '@extschema@.zk_enqueue(text,bytea,interval,integer)'),
        ('produce', '@extschema@.zk_enqueue(text,bytea,timestamp with time zone,integer)'),
        ('produce', '@extschema@.zk_enqueue(text,text,interval,integer)'),
        ('produce', '@extschema@.zk_enqueue(text,text,timestamp with time zone,integer)'),
        ('produce', '@extschema@.zk_enqueue(text,bytea[],interval,integer)'),
        ('produce', '@extschema@.zk_enqueue(text,bytea[],timestamp with time zone,integer)'),
        ('produce', '@extschema@.zk_enqueue(text,text[],interval,integer)'),
        ('produce', '@extschema@.zk_enqueue(text,text[],timestamp with time zone,integer)'),
        ('produce', '@extschema@.zk_enqueue_grouped(text,text,bytea,integer)'),
        ('produce', '@extschema@.zk_enqueue_grouped(text,text,text,integer)'),
        ('produce', '@extschema@.zk_enqueue_grouped(text,text,bytea[],integer)'),
        ('produce', '@extschema@.zk_enqueue_grouped(text,text,text[],integer)'),
        ('consume', '@extschema@.zk_dequeue(text,interval,integer)'),
        ('consume', '@extschema@.zk_try_dequeue(text,integer)'),
        ('consume', '@extschema@.zk_retry_later(bigint,interval)'),
        ('consume', '@extschema@.zk_queue_peek(text,integer)'),
        ('consume', '@extschema@.zk_queue_length(text)'),
        ('wait', '@extschema@.zk_barrier_enter(text,integer,interval)'),
        ('wait', '@extschema@.zk_barrier_leave(text,interval)'),
        ('wait', '@extschema@.zk_gate_wait(text,interval)'),
        ('wait', '@extschema@.zk_await(text,integer,interval)'),
        ('wait', '@extschema@.zk_arrivals(text)'),
        ('arrive', '@extschema@.zk_arrive(text,text)'),
        ('semaphore', '@extschema@.zk_semaphore(text,integer,interval,integer)'),
        ('semaphore', '@extschema@.zk_try_semaphore(text,integer,integer)'),
        ('semaphore', '@extschema@.zk_session_semaphore(text,integer,interval,integer)'),
        ('semaphore', '@extschema@.zk_try_session_semaphore(text,integer,integer)'),
        ('semaphore', '@extschema@.zk_semaphore_release(text)'),
        ('semaphore', '@extschema@.zk_semaphore_set_max(text,integer,interval)'),
        ('lease', '@extschema@.zk_try_lease(text,interval,text)'),
        ('lease', '@extschema@.zk_lease_holder(text)'),
        ('lease', '@extschema@.zk_lease_release(text,text)'),
        ('counter', '@extschema@.zk_counter_add(text,bigint)'),
        ('counter', '@extschema@.zk_counter_get(text)'),
        ('counter', '@extschema@.zk_counter_set(text,bigint,bigint)'),
        ('election', '@extschema@.zk_is_leader(text)'),
        ('election', '@extschema@.zk_leader(text)'),
        ('election', '@extschema@.zk_election_candidates(text)'),
        ('election', '@extschema@.zk_campaign_candidates(text)'),
        ('election', '@extschema@.zk_leader_wait(text,bigint,interval)'),
        ('campaign', '@extschema@.zk_campaign(text,interval)'),
        ('campaign', '@extschema@.zk_session_campaign(text,interval)'),
        ('campaign', '@extschema@.zk_try_campaign(text)'),
        ('campaign', '@extschema@.zk_try_session_campaign(text)'),
        ('campaign', '@extschema@.zk_resign(text)'),
        ('campaign', '@extschema@.zk_campaign_token(text)'),
        ('admin', '@extschema@.zk_queue_purge(text)'),
        ('admin', '@extschema@.zk_queue_drop(text)'),
        ('admin', '@extschema@.zk_counter_drop(text)'),
        ('admin', '@extschema@.zk_queue_set_policy(text,integer,text)'),
        ('admin', '@extschema@.zk_queue_move(text,text,integer)'),
        ('admin', '@extschema@.zk_arrivals_reset(text)'),
        ('admin', '@extschema@.zk_gate_close(text)'),
        ('admin', '@extschema@.zk_gate_open(text)'),
        ('admin', '@extschema@.zk_queue_release_cluster(text)'),
        ('admin', '@extschema@.zk_lock_revoke(text,interval)'),
        ('admin', '@extschema@.zk_lock_revoke(bigint,interval)'),
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
        ('monitor', '@extschema@.zk_role_usage()'),
        ('monitor', '@extschema@.zk_kept_totals()'),
        ('monitor', '@extschema@.zk_namespace_totals()'),
        ('monitor', '@extschema@.zk_queue_stats()')) AS t(g, f)
    UNION ALL
    SELECT 'monitor', 'view', v::regclass::text FROM (VALUES
        ('@extschema@.zk_locks'), ('@extschema@.zk_entries'), ('@extschema@.zk_queues'),
        ('@extschema@.zk_queue_metrics'), ('@extschema@.zk_leases'),
        ('@extschema@.zk_elections'), ('@extschema@.zk_semaphores'),
        ('@extschema@.zk_quotas')) AS t(v)
$$;

GRANT EXECUTE ON FUNCTION zk_role_usage() TO pg_monitor;
GRANT EXECUTE ON FUNCTION zk_kept_totals() TO pg_monitor;
GRANT EXECUTE ON FUNCTION zk_namespace_totals() TO pg_monitor;
GRANT EXECUTE ON FUNCTION zk_queue_stats() TO pg_monitor;
GRANT SELECT ON TABLE zk_quotas TO pg_monitor;


-- grant (revoke) a whole group to (from) a role; superuser only.  Refused
-- while a role that is not a superuser may create objects in the
-- extension's schema: it could plant a function there (an overload that
-- matches the call better) that a superuser's call, even a qualified one,
-- runs instead, with the superuser's rights.  Warns about the schemas the
-- session's search_path starts with (and public) that such roles may
-- create objects in: an unqualified call there could run theirs
-- (doc/security.md, "Superusers' calls").
CREATE OR REPLACE FUNCTION zk_grant(group_name text, grantee regrole, do_revoke boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    n int := 0;
    who text;
BEGIN
    IF NOT coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) THEN
        RAISE EXCEPTION 'permission denied to % zklock privilege groups',
            CASE WHEN do_revoke THEN 'revoke' ELSE 'grant' END
            USING ERRCODE = '42501',
                  HINT = 'Run it as a superuser.';
    END IF;
    -- who may create objects in a schema: PUBLIC, or the roles that are not
    -- superusers (pg_database_owner stands for the database's owner, who is
    -- checked as itself)
    SELECT CASE WHEN has_schema_privilege('public', '@extschema@'::regnamespace, 'CREATE') THEN 'PUBLIC'
                ELSE (SELECT string_agg(quote_ident(w.rolname), ', ' ORDER BY w.rolname)
                        FROM (SELECT a.rolname FROM pg_roles a
                               WHERE NOT a.rolsuper AND a.rolname <> 'pg_database_owner'
                                 AND has_schema_privilege(a.oid, '@extschema@'::regnamespace, 'CREATE')
                               ORDER BY a.rolname LIMIT 5) w) END
      INTO who;
    IF who IS NOT NULL THEN
        RAISE EXCEPTION 'zklock''s schema % is writable by roles that are not superusers: %',
            '@extschema@', who
            USING ERRCODE = '42501',
                  DETAIL = 'Any of them can create a function there that a superuser''s call of '
                           'zk_grant, zk_revoke or any other zklock function runs instead, with the superuser''s rights.',
                  HINT = 'Install zklock into a schema only superusers can create objects in '
                         '(CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk), or make a superuser the owner of '
                         'schema @extschema@ and REVOKE CREATE on it; until then grant with GRANT EXECUTE ON FUNCTION.';
    END IF;
    SELECT string_agg(format('%I (%s)', s.nspname, s.who), ', ' ORDER BY s.nspname) INTO who
      FROM (SELECT n.nspname,
                   CASE WHEN has_schema_privilege('public', n.oid, 'CREATE') THEN 'PUBLIC'
                        ELSE (SELECT string_agg(quote_ident(w.rolname), ' ' ORDER BY w.rolname)
                                FROM (SELECT a.rolname FROM pg_roles a
                                       WHERE NOT a.rolsuper AND a.rolname <> 'pg_database_owner'
                                         AND has_schema_privilege(a.oid, n.oid, 'CREATE')
                                       ORDER BY a.rolname LIMIT 5) w) END AS who
              FROM pg_namespace n
             WHERE n.oid <> '@extschema@'::regnamespace
               AND (n.nspname = 'public'
                    OR n.nspname IN (SELECT CASE WHEN p IN ('$user', '"$user"') THEN session_user::text
                                                 ELSE btrim(p, '"') END
                                       FROM pg_settings,
                                            regexp_split_to_table(reset_val, '[[:space:]]*,[[:space:]]*') AS p
                                      WHERE name = 'search_path'))) s
     WHERE s.who IS NOT NULL;
    IF who IS NOT NULL THEN
        RAISE WARNING 'schemas on the search_path are writable by roles that are not superusers: %', who
            USING DETAIL = 'A superuser''s unqualified call (zk_grant(...) instead of @extschema@.zk_grant(...)) '
                           'can run a function one of them created there, with the superuser''s rights.',
                  HINT = 'Call zklock''s functions schema-qualified, after SET search_path = pg_catalog, pg_temp.';
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

CREATE OR REPLACE FUNCTION zk_revoke(group_name text, grantee regrole)
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT @extschema@.zk_grant(group_name, grantee, do_revoke => true) $$;

DO $$
BEGIN
    IF pg_catalog.has_schema_privilege('public'::pg_catalog.name,
            '@extschema@'::pg_catalog.regnamespace::pg_catalog.oid, 'CREATE'::pg_catalog.text)
       OR EXISTS (SELECT FROM pg_catalog.pg_roles a
                   WHERE NOT a.rolsuper
                     AND NOT pg_catalog.nameeq(a.rolname, 'pg_database_owner'::pg_catalog.name)
                     AND pg_catalog.has_schema_privilege(a.oid,
                             '@extschema@'::pg_catalog.regnamespace::pg_catalog.oid, 'CREATE'::pg_catalog.text)) THEN
        RAISE WARNING 'zklock''s schema % is writable by roles that are not superusers', '@extschema@'
            USING DETAIL = 'zk_grant and zk_revoke refuse to run here: any of them could create a function '
                           'that a superuser''s call runs instead, with the superuser''s rights.',
                  HINT = 'Move zklock into a schema only superusers can create objects in: DROP EXTENSION zklock; '
                         'CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk (the grants go with it).';
    END IF;
END
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

-- Issue 38: zk_queues gains delayed, dead_letter, max_attempts,
-- oldest_ready_age and oldest_claim_age (doc/queues.md, "zk_queues"), and
-- the view zk_queue_metrics joins it with zk_queue_stats.  The row type of
-- zk_queues_internal changes, so it and its view are dropped and created
-- again, and given back the grants they had (PUBLIC none, pg_monitor and
-- whoever zk_grant gave the monitor group); zk_queue_metrics goes to who
-- could read zk_queues.
DO $$
DECLARE
    fgrantees text[];
    vgrantees text[];
    g text;
BEGIN
    SELECT coalesce(array_agg(DISTINCT a.grantee::regrole::text), '{}')
      INTO fgrantees
      FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
     WHERE p.oid = '@extschema@.zk_queues_internal()'::regprocedure
       AND a.privilege_type = 'EXECUTE'
       AND a.grantee <> 0
       AND a.grantee <> p.proowner;
    SELECT coalesce(array_agg(DISTINCT a.grantee::regrole::text), '{}')
      INTO vgrantees
      FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
     WHERE c.oid = '@extschema@.zk_queues'::regclass
       AND a.privilege_type = 'SELECT'
       AND a.grantee <> 0
       AND a.grantee <> c.relowner;
    DROP VIEW @extschema@.zk_queues;
    DROP FUNCTION @extschema@.zk_queues_internal();
    CREATE FUNCTION @extschema@.zk_queues_internal(
        OUT queue text,
        OUT items bigint,
        OUT claimed bigint,
        OUT local_claims int,
        OUT local_waiting int,
        OUT delayed bigint,
        OUT dead_letter text,
        OUT max_attempts int,
        OUT oldest_ready_age interval,
        OUT oldest_claim_age interval)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'zk_queues_internal' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
    REVOKE ALL ON FUNCTION @extschema@.zk_queues_internal() FROM PUBLIC;
    CREATE VIEW @extschema@.zk_queues AS SELECT * FROM @extschema@.zk_queues_internal();
    CREATE VIEW @extschema@.zk_queue_metrics AS
        WITH q AS (SELECT * FROM @extschema@.zk_queues_internal())
        SELECT q.queue,
               q.items AS ready,
               q.delayed,
               q.claimed,
               q.dead_letter,
               q.max_attempts,
               CASE WHEN q.dead_letter IS NOT NULL
                    THEN coalesce(d.items + d.claimed, 0) END AS dead_letters,
               q.oldest_ready_age,
               q.oldest_claim_age,
               coalesce(s.handed_out, 0) AS handed_out,
               coalesce(s.consumed, 0) AS consumed,
               coalesce(s.released, 0) AS released,
               coalesce(s.dead_lettered, 0) AS dead_lettered,
               s.since
          FROM q
          LEFT JOIN q AS d ON d.queue = q.dead_letter
          LEFT JOIN @extschema@.zk_queue_stats() AS s ON s.queue = q.queue;
    FOREACH g IN ARRAY fgrantees
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.zk_queues_internal() TO %s', g);
    END LOOP;
    FOREACH g IN ARRAY vgrantees
    LOOP
        EXECUTE pg_catalog.format('GRANT SELECT ON @extschema@.zk_queues TO %s', g);
        EXECUTE pg_catalog.format('GRANT SELECT ON @extschema@.zk_queue_metrics TO %s', g);
    END LOOP;
END
$$;
