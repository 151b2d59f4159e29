-- Bad input gets 22023 and changes nothing; NULLs behave as in strict functions.
CREATE FUNCTION wait_idle() RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
  -- releases reach the worker asynchronously; wait (bounded) for them
  FOR i IN 1..100 LOOP
    EXIT WHEN (SELECT entries_used FROM zk_status()) = 0;
    PERFORM pg_sleep(0.05);
  END LOOP;
  RETURN (SELECT entries_used FROM zk_status());
END $$;
SELECT wait_idle() AS entries_before;
SELECT requests AS requests_before FROM zk_status() \gset
SELECT zk_lock('');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_lock(repeat('x', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_lock(repeat('é', 128));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_lock('job', '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_lock('job', '-1 month');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lock('');
\echo :LAST_ERROR_SQLSTATE
-- none of them reached ZooKeeper or took an entry
SELECT requests = :requests_before AS no_request, entries_used FROM zk_status();
SELECT zk_lock(NULL) IS NULL AS null_name;
SELECT zk_lock(NULL, '1s') IS NULL AS null_name_with_timeout;
SELECT zk_try_lock(NULL) IS NULL AS null_try;
-- a NULL timeout means "lock_timeout, else wait": granted here
BEGIN;
SELECT zk_lock('job', NULL) > 0 AS null_timeout;
COMMIT;
SELECT wait_idle() AS entries_after_commit;

-- names that look like paths stay one component under zklock.root
BEGIN;
SELECT zk_lock(repeat('x', 255)) > 0 AS longest_name;
SELECT zk_lock('..') > 0 AS dotdot, zk_lock('.') > 0 AS dot,
       zk_lock('/') > 0 AS slash, zk_lock('../../zookeeper') > 0 AS escape,
       zk_lock('zookeeper') > 0 AS reserved, zk_lock(E'tab\there\nnl') > 0 AS control,
       zk_lock('ünïcødé') > 0 AS unicode, zk_lock('a%2Fb') > 0 AS percent;
COMMIT;

-- every function is volatile and parallel unsafe, but zk_privilege_groups() (a
-- constant list)
SELECT provolatile, proparallel, count(*) AS functions
  FROM pg_proc WHERE proname LIKE 'zk\_%' GROUP BY 1, 2;
-- not strict: those with a timeout (NULL means lock_timeout), zk_unlock_all, and the
-- queue, barrier, gate, arrivals and counter functions (a NULL argument is an error there,
-- not a NULL result), zk_grant and zk_revoke (likewise), zk_privilege_groups (no
-- argument), zk_set_database_namespace (NULL: the database's name)
SELECT DISTINCT proname FROM pg_proc
 WHERE proname LIKE 'zk\_%' AND NOT proisstrict ORDER BY 1;

DROP FUNCTION wait_idle();
