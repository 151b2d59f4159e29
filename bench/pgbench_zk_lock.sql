-- bench/pgbench_zk_lock.sql: one zklock cycle per transaction.
-- Exclusive ZooKeeper lock on 'bench-<client_id>' (a name of its own per
-- pgbench client), released at COMMIT.
BEGIN;
SELECT zk_lock('bench-' || :client_id);
COMMIT;
