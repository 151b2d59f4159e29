-- Semaphores (kazoo's Semaphore): leases up to max_leases, transaction and
-- session scope, re-entrancy, the lease count fixed once, zk_semaphore_holders,
-- and every bad input with its SQLSTATE, creating nothing.
-- Every name here starts with 'regress_s'.
SELECT dblink_connect('other', 'dbname=' || current_database());
SELECT dblink_connect('third', 'dbname=' || current_database());
\set VERBOSITY default
\df zk_*semaphore*
-- two leases: this session and the other take one each; a third is refused
BEGIN;
SELECT zk_try_semaphore('regress_sem', 2);
SELECT * FROM dblink('other', $$SELECT zk_try_session_semaphore('regress_sem', 2)$$) AS t(ok boolean);
SELECT count(*) AS holders, bool_and(state = 'held') AS held, min(mode) AS mode
  FROM zk_semaphore_holders('regress_sem');
SELECT zk_try_semaphore('regress_sem', 2);          -- ours again: stacks on our lease
SELECT count(*) AS holders FROM zk_semaphore_holders('regress_sem');
-- zk_semaphores: this cluster's leases, ours (transaction) and the other's (session)
SELECT pid = pg_backend_pid() AS ours, name, max_leases, scope, state, token > 0 AS token,
       node LIKE '/zklock/semaphores/regress\_sem/%' AS node, granted_at >= requested_at AS granted
  FROM zk_semaphores WHERE name = 'regress_sem' ORDER BY ours;
SELECT zk_session_semaphore('regress_sem', 2);      -- a session hold stacked: scope is session
SELECT scope FROM zk_semaphores WHERE pid = pg_backend_pid();
SELECT zk_semaphore_release('regress_sem');
SELECT scope FROM zk_semaphores WHERE pid = pg_backend_pid();
SAVEPOINT s;
SELECT * FROM dblink('other', $$SELECT zk_try_semaphore('regress_sem', 2)$$) AS t(ok boolean);  -- re-entrant there too
ROLLBACK TO SAVEPOINT s;
COMMIT;
-- our transaction lease went with COMMIT: one holder left (the other's session lease)
SELECT count(*) AS holders FROM zk_semaphore_holders('regress_sem');
-- both leases held (the other's and now ours): a third session is refused
SELECT zk_session_semaphore('regress_sem', 2);
SELECT * FROM dblink('third', $$SELECT zk_try_semaphore('regress_sem', 2)$$) AS t(ok boolean);
SELECT * FROM dblink('third', $$SELECT zk_semaphore('regress_sem', 2, '300ms')$$) AS t(v text);
SELECT count(*) AS holders FROM zk_semaphore_holders('regress_sem');
-- release: session holds one at a time; false and a WARNING when none
SELECT zk_semaphore_release('regress_sem');
SELECT zk_semaphore_release('regress_sem');
SELECT * FROM dblink('other', $$SELECT zk_semaphore_release('regress_sem')$$) AS t(ok boolean);
SELECT count(*) AS holders FROM zk_semaphore_holders('regress_sem');
-- a wait for a lease: ends when one is let go
SELECT * FROM dblink('other', $$SELECT zk_try_session_semaphore('regress_sem1', 1)$$) AS t(ok boolean);
BEGIN;
SELECT zk_semaphore('regress_sem1', 1, '200ms');
ROLLBACK;
\echo :LAST_ERROR_SQLSTATE
-- a waiter shows in zk_semaphores as waiting, without token or node
SELECT dblink_send_query('third', $$SELECT zk_semaphore('regress_sem1', 1, '1s')$$);
SELECT pg_sleep(0.3);
SELECT name, max_leases, state, token, node, granted_at FROM zk_semaphores
 WHERE name = 'regress_sem1' AND state = 'waiting';
SELECT * FROM dblink_get_result('third') AS t(v text);
SELECT dblink_send_query('other', $$SELECT pg_sleep(0.5), zk_semaphore_release('regress_sem1')$$);
BEGIN;
SELECT zk_semaphore('regress_sem1', 1, '30s');
SELECT count(*) AS holders FROM zk_semaphore_holders('regress_sem1');
COMMIT;
SELECT * FROM dblink_get_result('other') AS t(s text, ok boolean);
-- the number of leases is fixed while the pool exists (a lease is held):
-- another is refused, changing nothing
SELECT dblink_connect('holder', 'dbname=' || current_database());
SELECT * FROM dblink('holder', $$SELECT zk_try_session_semaphore('regress_sem', 2)$$) AS t(ok boolean);
SELECT zk_try_semaphore('regress_sem', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dblink('holder', $$SELECT zk_semaphore_release('regress_sem')$$) AS t(ok boolean);
SELECT dblink_disconnect('holder');
-- bad input
SELECT zk_semaphore(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_semaphore('regress_sbad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_semaphore('', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_semaphore(repeat('x', 256), 1);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_semaphore('regress_sbad', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_semaphore('regress_sbad', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_semaphore('regress_sbad', 1, '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM zk_semaphore_holders('regress_sbad');
-- permits: several leases at once, all or none
SELECT dblink_connect('perm', 'dbname=' || current_database());
SELECT zk_session_semaphore('regress_sperm', 5, '5s', permits => 3);
SELECT count(*) AS leases, count(DISTINCT node) AS nodes FROM zk_semaphore_holders('regress_sperm');
-- 2 free: the other cannot take 3 (takes nothing), can take 2
SELECT * FROM dblink('perm', $$SELECT zk_try_session_semaphore('regress_sperm', 5, 3)$$) AS t(ok boolean);
SELECT count(*) AS leases FROM zk_semaphore_holders('regress_sperm');
SELECT * FROM dblink('perm', $$SELECT zk_semaphore('regress_sperm', 5, '300ms', 3)$$) AS t(v text);
SELECT count(*) AS leases FROM zk_semaphore_holders('regress_sperm');
SELECT * FROM dblink('perm', $$SELECT zk_try_session_semaphore('regress_sperm', 5, 2)$$) AS t(ok boolean);
SELECT count(*) AS leases FROM zk_semaphore_holders('regress_sperm');
-- ours again: the same permits stack a hold; another number is refused
SELECT zk_try_session_semaphore('regress_sperm', 5, 3);
SELECT zk_try_session_semaphore('regress_sperm', 5, 2);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS leases FROM zk_semaphore_holders('regress_sperm');
-- two holds of ours, then the other's: the leases go with the last of each
SELECT zk_semaphore_release('regress_sperm');
SELECT count(*) AS leases FROM zk_semaphore_holders('regress_sperm');
SELECT zk_semaphore_release('regress_sperm');
SELECT count(*) AS leases FROM zk_semaphore_holders('regress_sperm');
SELECT * FROM dblink('perm', $$SELECT zk_semaphore_release('regress_sperm')$$) AS t(ok boolean);
SELECT count(*) AS leases FROM zk_semaphore_holders('regress_sperm');
SELECT dblink_disconnect('perm');
-- bad permits: below 1, above max_leases, above 64, NULL; nothing taken
SELECT zk_semaphore('regress_sperm', 5, NULL, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_semaphore('regress_sperm', 5, 6);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_session_semaphore('regress_sperm', 100, 65);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_session_semaphore('regress_sperm', 5, NULL, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS leases FROM zk_semaphore_holders('regress_sperm');
-- PREPARE with a transaction lease: 0A000
BEGIN;
SELECT zk_semaphore('regress_sem', 2);
PREPARE TRANSACTION 'regress_s';
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS prepared FROM pg_prepared_xacts;
-- nothing of ours is left, and zk_status counted leases and refusals
SELECT count(*) AS left FROM zk_semaphores WHERE name LIKE 'regress\_s%';
SELECT semaphore_leases >= 6 AS leases, semaphore_refusals >= 3 AS refusals FROM zk_status();
SELECT dblink_disconnect('other');
SELECT dblink_disconnect('third');
