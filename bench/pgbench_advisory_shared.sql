-- bench/pgbench_advisory_shared.sql: every pgbench client takes the same
-- advisory lock (contended; only run with BENCH_SHARED=1).
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('bench-shared'));
COMMIT;
