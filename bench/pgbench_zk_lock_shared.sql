-- bench/pgbench_zk_lock_shared.sql: every pgbench client locks the same name
-- (contended; only run with BENCH_SHARED=1).
BEGIN;
SELECT zk_lock('bench-shared');
COMMIT;
