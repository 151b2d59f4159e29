-- bench/pgbench_advisory.sql: the same transaction with a local PostgreSQL
-- advisory lock on the hash of the same name, released at COMMIT.
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('bench-' || :client_id));
COMMIT;
