-- zk_status(): one row, the counters moved with what the tests did.
SELECT state, session_timeout > '0' AS has_timeout, max_locks,
       requests > 0 AS requests, grants > 0 AS grants,
       timeouts >= 2 AS timeouts, abandoned >= 3 AS abandoned,
       lost, sessions >= 1 AS sessions
  FROM zk_status();
-- every release reaches the worker: nothing in use once it has caught up
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    EXIT WHEN (SELECT entries_used FROM zk_status()) = 0;
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT entries_used FROM zk_status();
