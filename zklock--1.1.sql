/* zklock--1.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION zklock" to load this file. \quit

-- Only superusers may create objects in the schema zklock goes into
-- (doc/security.md, "Superusers' calls"): anyone else could plant there a
-- function that matches a superuser's call (zk_grant('consume', 'carol'))
-- better than zklock's own, even a schema-qualified one, and have it run with
-- the superuser's rights -- also calls made by this script.  So this check
-- comes first, and names every object it uses with its schema and type.
-- (PostgreSQL 15 makes the database's owner the owner of public.)
DO $$
DECLARE
    who text;
BEGIN
    IF pg_catalog.has_schema_privilege('public'::pg_catalog.name,
            '@extschema@'::pg_catalog.regnamespace::pg_catalog.oid, 'CREATE'::pg_catalog.text) THEN
        who := 'PUBLIC';
    ELSE
        SELECT pg_catalog.quote_ident(a.rolname::pg_catalog.text) INTO who
          FROM pg_catalog.pg_roles a
         WHERE NOT a.rolsuper
           AND NOT pg_catalog.nameeq(a.rolname, 'pg_database_owner'::pg_catalog.name)
           AND pg_catalog.has_schema_privilege(a.oid,
                   '@extschema@'::pg_catalog.regnamespace::pg_catalog.oid, 'CREATE'::pg_catalog.text)
         LIMIT 1;
    END IF;
    IF who IS NOT NULL THEN
        RAISE EXCEPTION 'zklock cannot be installed into schema %: % may create objects in it and is not a superuser',
            '@extschema@', who
            USING ERRCODE = '42501',
                  DETAIL = 'A function created there could run instead of zklock''s own in a superuser''s call '
                           '(zk_grant), with the superuser''s rights.',
                  HINT = 'Install it into a schema only superusers can create objects in: '
                         'CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk;';
    END IF;
END
$$;

-- The lock functions mirror PostgreSQL's advisory lock families.  Each takes
-- a text name, or a bigint key that stands for the name written in decimal
-- (zk_lock(42) is zk_lock('42')).
--
-- The acquiring functions are not STRICT: a NULL timeout means "use
-- lock_timeout, else wait forever"; a NULL name or key returns NULL, as a
-- strict function would.

-- transaction scope: held until COMMIT or ROLLBACK
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
CREATE FUNCTION zk_try_lock(name text) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock(key bigint) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock_shared(name text) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_shared' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;
CREATE FUNCTION zk_try_lock_shared(key bigint) RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_try_lock_shared_key' LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- session scope: held until unlocked or the session ends
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

-- several locks at once, all or none (doc/locks.md, "Several locks at
-- once"): each distinct name once, in one order every backend uses (the
-- bytes of the UTF-8 names), so two multi-locks never wait for each other in
-- a circle; the tokens come back in the array's order
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

-- an operator takes a lock back from whoever holds it, on any cluster
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
    OUT auth text,
    OUT acl_problems integer,
    OUT acl_problem text,
    OUT consumes_blocked integer)
RETURNS record
AS 'MODULE_PATHNAME', 'zk_status'
LANGUAGE C STRICT VOLATILE PARALLEL UNSAFE;

-- The ZooKeeper path of a name of this session's namespace (zklock.namespace),
-- for kazoo or Curator clients that take part: kind is lock, queue, barrier,
-- gate, arrivals, semaphore, lease or election (elections are per cluster).
CREATE FUNCTION zk_path(kind text, name text) RETURNS text
AS 'MODULE_PATHNAME', 'zk_path' LANGUAGE C STRICT STABLE PARALLEL SAFE;

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

-- the name this database has now, recorded by the superuser creating the extension
SELECT @extschema@.zk_set_database_namespace(NULL::pg_catalog.text);

-- ---------------------------------------------------------------------------
-- The queue (kazoo LockingQueue layout under <zklock.root>/queues/<name>)

CREATE TYPE zk_message AS (
    msg_id      bigint,         -- the item's id (from its node's czxid and name): unique, increasing
    priority    int,
    enqueued_at timestamptz,
    payload     bytea,
    body        text,           -- the payload as text when it is valid UTF-8
    attempts    int,            -- how often zklock handed the item out, this time included
    origin      text,           -- a dead letter: the queue it was moved from, else NULL
    origin_msg_id bigint,       -- ... its msg_id there
    origin_attempts int         -- ... and the hand-outs it had there
);

CREATE FUNCTION zk_enqueue(queue text, payload bytea, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_bytea' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payload text, priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_text' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- many items in one call (issue 38): the elements in array order, as one
-- zk_enqueue per element would add them, all of them or (an element refused)
-- none; an empty array adds nothing
CREATE FUNCTION zk_enqueue(queue text, payloads bytea[], priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_bytea_array' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION zk_enqueue(queue text, payloads text[], priority int DEFAULT 100)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_enqueue_text_array' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- delayed items (issue 38): published at COMMIT as any item, handed out only
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

CREATE FUNCTION zk_dequeue(queue text, timeout interval DEFAULT NULL, max_items int DEFAULT 1)
RETURNS SETOF zk_message
AS 'MODULE_PATHNAME', 'zk_dequeue_sql' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

CREATE FUNCTION zk_try_dequeue(queue text, max_items int DEFAULT 1)
RETURNS SETOF zk_message
AS 'MODULE_PATHNAME', 'zk_try_dequeue_sql' LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

-- the item msg_id this transaction dequeued goes back when it ends, commit
-- or rollback, and is handed out again only after delay (doc/queues.md,
-- "Retry later")
CREATE FUNCTION zk_retry_later(msg_id bigint, delay interval)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_retry_later_sql' LANGUAGE C VOLATILE PARALLEL UNSAFE;

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

-- a queue's dead-letter policy, kept in its node so that every cluster
-- agrees (doc/queues.md, "Dead letters"): an item handed out max_attempts
-- times without a consume moves to the queue dead_letter at its next
-- hand-out; both NULL: no policy
CREATE FUNCTION zk_queue_set_policy(queue text, max_attempts int, dead_letter text)
RETURNS void
AS 'MODULE_PATHNAME', 'zk_queue_set_policy' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- up to max_items unclaimed items of one queue moved to another, in queue
-- order, each exactly once (doc/queues.md, "zk_queue_move")
CREATE FUNCTION zk_queue_move(from_queue text, to_queue text, max_items int DEFAULT 1000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'zk_queue_move' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- every queue of the session's namespace: counts from the child counts,
-- its dead-letter policy, the ages of its oldest ready item and oldest claim
-- (doc/queues.md, "zk_queues")
CREATE FUNCTION zk_queues_internal(
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

CREATE VIEW zk_queues AS SELECT * FROM zk_queues_internal();

-- this cluster's hand-outs, consumes and releases per queue of the session's
-- namespace since the worker started (shared memory, no request to
-- ZooKeeper; doc/queues.md, "zk_queue_stats")
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

-- zk_queues with this cluster's counts of zk_queue_stats, one row per queue
-- of the session's namespace (doc/queues.md, "zk_queue_metrics")
CREATE VIEW zk_queue_metrics AS
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

-- end one's own lease now, deleting its holder node (issue 35)
CREATE FUNCTION zk_lease_release(name text, holder text DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'zk_lease_release' LANGUAGE C VOLATILE PARALLEL UNSAFE;

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

-- Semaphores (kazoo's Semaphore): at most max_leases leases at once; a
-- call takes permits of them, all or none
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

CREATE FUNCTION zk_semaphore_set_max(name text, max_leases int, timeout interval DEFAULT NULL)
RETURNS int
AS 'MODULE_PATHNAME', 'zk_semaphore_set_max' LANGUAGE C VOLATILE PARALLEL UNSAFE;

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

-- ---------------------------------------------------------------------------
-- Privileges (doc/security.md, "Privileges")
--
-- Every name is shared by every database of every cluster on the ZooKeeper,
-- so a function callable by PUBLIC would let any role of any database peek,
-- take, forge or purge another tenant's queue, block its locks, open its
-- gates, forge its arrivals, and read who holds what.  Nothing is executable
-- by PUBLIC but zk_privilege_groups() and zk_path(); a superuser grants a role what it
-- needs by groups (zk_grant) or with GRANT.  The groups do not overlap.

-- the groups: each object of the extension a role needs for one use, named
-- with its schema (a fixed search_path: whatever the caller's)
CREATE FUNCTION zk_privilege_groups(
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

-- grant (revoke) a whole group to (from) a role; superuser only.  Refused
-- while a role that is not a superuser may create objects in the
-- extension's schema: it could plant a function there (an overload that
-- matches the call better) that a superuser's call, even a qualified one,
-- runs instead, with the superuser's rights.  Warns about the schemas the
-- session's search_path starts with (and public) that such roles may
-- create objects in: an unqualified call there could run theirs
-- (doc/security.md, "Superusers' calls").
CREATE FUNCTION zk_grant(group_name text, grantee regrole, do_revoke boolean DEFAULT false)
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

CREATE FUNCTION zk_revoke(group_name text, grantee regrole)
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT @extschema@.zk_grant(group_name, grantee, do_revoke => true) $$;

-- PUBLIC executes nothing of this extension but zk_privilege_groups() and
-- zk_path(): they are harmless to every tenant (a constant list of this
-- extension's own objects, read from the catalog like \df; the path of a
-- name from zklock.root and zklock.namespace, which anyone can SHOW, and the
-- session's own namespace; no
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
SELECT @extschema@.zk_grant('monitor'::pg_catalog.text, 'pg_monitor'::pg_catalog.regrole, false);
