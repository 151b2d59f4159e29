-- The advisory-lock families: shared and exclusive, transaction and session
-- scope, bigint keys, re-entrancy, tokens, and what zk_locks and
-- zk_lock_holders show.  A dblink connection 'other' is the second session.
SELECT dblink_connect('other', 'dbname=' || current_database());
SET application_name = 'families';

-- session scope survives COMMIT and ROLLBACK
SELECT zk_session_lock('s1') > 0 AS taken;
BEGIN; ROLLBACK;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('s1')$$) AS t(other_got boolean);
-- stacked: two holds, two unlocks
SELECT zk_session_lock('s1') = zk_lock_token('s1') AS same_token;
SELECT zk_unlock('s1') AS first_unlock;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('s1')$$) AS t(still_held boolean);
SELECT zk_unlock('s1') AS second_unlock;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('s1')$$) AS t(free_now boolean);
-- unlocking what is not held: false and a warning
SELECT zk_unlock('s1') AS not_held;
SELECT zk_unlock_shared('never') AS not_held_shared;
-- a transaction-level lock is not released by zk_unlock
BEGIN;
SELECT zk_lock('x1') > 0 AS taken;
SELECT zk_unlock('x1') AS unlock_xact_lock;
COMMIT;

-- session and transaction holds of one name stack on one node
SELECT zk_session_lock('mix') AS t1 \gset
BEGIN;
SELECT zk_lock('mix') = :t1 AS same_node_token;
SELECT count(*) AS nodes FROM zk_lock_holders('mix');
COMMIT;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('mix')$$) AS t(held_by_session_hold boolean);
SELECT zk_unlock('mix');
SELECT * FROM dblink('other', $$SELECT zk_try_lock('mix')$$) AS t(free_now boolean);

-- shared locks share; an exclusive waits for them
BEGIN;
SELECT zk_lock_shared('rw') > 0 AS reader;
SELECT * FROM dblink('other', $$SELECT zk_try_lock_shared('rw'), zk_try_lock('rw')$$)
  AS t(other_reader boolean, other_writer boolean);
SELECT zk_try_lock_shared('rw') AS reentrant_shared;
-- holding shared, asking exclusive: own node never blocks it
SELECT zk_try_lock('rw') AS upgrade_alone;
SELECT mode, state FROM zk_lock_holders('rw') ORDER BY position;
COMMIT;

-- session-level shared
SELECT zk_session_lock_shared('sh') > 0 AS taken;
SELECT * FROM dblink('other', $$SELECT zk_try_session_lock_shared('sh'), zk_unlock_shared('sh')$$)
  AS t(other_reader boolean, other_unlocked boolean);
SELECT zk_try_session_lock('sh') AS exclusive_alone;
SELECT zk_unlock('sh'), zk_unlock_shared('sh');

-- bigint keys are the decimal names
BEGIN;
SELECT zk_lock(42) = zk_lock('42') AS key_is_name;
SELECT * FROM dblink('other', $$SELECT zk_try_lock(42), zk_try_lock_shared(42::bigint)$$)
  AS t(other_key boolean, other_shared_key boolean);
SELECT zk_lock_token(42) = zk_lock_token('42') AS same_token;
COMMIT;
SELECT zk_try_session_lock(7) AS try_key, zk_try_session_lock_shared(8) AS try_shared_key;
SELECT zk_session_lock(7) > 0 AS stacked, zk_session_lock_shared(8) > 0 AS stacked_shared;
SELECT name, mode, scope, state FROM zk_locks WHERE pid = pg_backend_pid() ORDER BY name;
SELECT zk_unlock(7), zk_unlock(7), zk_unlock_shared(8::bigint), zk_unlock_shared(8);
SELECT zk_lock_token(8) IS NULL AS released_key;
SELECT zk_lock(NULL::bigint) IS NULL AS null_key, zk_try_lock(NULL::bigint) IS NULL AS null_try_key;

-- zk_locks: this backend's entries
BEGIN;
SELECT zk_lock('v1') AS tok \gset
SELECT database = current_database() AS db, name, mode, scope, state, token = :tok AS token,
       node LIKE '/zklock/locks/v1/%\_\_lock\_\_%' AS node, granted_at >= requested_at AS times
  FROM zk_locks WHERE pid = pg_backend_pid();
-- zk_lock_holders: read from ZooKeeper, with who holds it
SELECT mode, state, position, token = :tok AS token, port IS NOT NULL AS port,
       database = current_database() AS db, pid = pg_backend_pid() AS pid,
       usename = current_user AS usename, application_name, data LIKE '{%' AS data
  FROM zk_lock_holders('v1');
COMMIT;
SELECT count(*) AS rows_after_commit FROM zk_locks WHERE pid = pg_backend_pid();
SELECT count(*) AS nobody FROM zk_lock_holders('never-taken');

-- unlock_all drops the session-level holds only
SELECT zk_session_lock('u1') > 0, zk_session_lock_shared('u2') > 0;
BEGIN;
SELECT zk_lock('u3') > 0;
SELECT zk_unlock_all();
SELECT name FROM zk_locks WHERE pid = pg_backend_pid() ORDER BY name;
COMMIT;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('u1'), zk_try_lock('u2'), zk_try_lock('u3')$$)
  AS t(u1 boolean, u2 boolean, u3 boolean);

SELECT dblink_disconnect('other');

-- zk_path: every recipe answers for its own kinds (the registry's path
-- hooks); elections are the cluster's, outside any namespace; an unknown
-- kind lists the known ones
SELECT k, zk_path(k, 'job') FROM unnest(ARRAY['lock', 'queue', 'barrier', 'gate',
  'arrivals', 'semaphore', 'lease', 'election']) AS k;
SELECT zk_path('locks', 'job');
SELECT zk_path('gat', 'job');
