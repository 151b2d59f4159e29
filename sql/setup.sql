-- Wait (bounded) until the worker has a ZooKeeper session, so that the
-- other tests do not race the worker's start.
DO $$
BEGIN
  FOR i IN 1..300 LOOP
    EXIT WHEN (SELECT state FROM zk_status()) = 'connected';
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT state, servers, session_id IS NOT NULL AS has_session,
       worker_pid IS NOT NULL AS has_worker
  FROM zk_status();
-- the worker is visible in pg_stat_activity
SELECT backend_type, datname IS NULL AS no_database
  FROM pg_stat_activity WHERE backend_type = 'zklock worker';
