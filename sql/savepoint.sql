-- Locks taken in a subtransaction go with it when it is rolled back, as
-- PostgreSQL's own transaction-level advisory locks do.
SELECT dblink_connect('other', 'dbname=' || current_database());

BEGIN;
SELECT zk_lock('outer') > 0 AS outer_taken;
SAVEPOINT s1;
SELECT zk_lock('inner') > 0 AS inner_taken;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('inner')$$) AS t(other_got_inner boolean);
ROLLBACK TO SAVEPOINT s1;
-- inner is free again, outer is still ours
SELECT * FROM dblink('other', $$SELECT zk_try_lock('inner'), zk_try_lock('outer')$$) AS t(inner_free boolean, outer_free boolean);
COMMIT;

-- RELEASE SAVEPOINT keeps the lock until the end of the transaction
BEGIN;
SAVEPOINT s1;
SELECT zk_lock('kept') > 0 AS kept_taken;
RELEASE SAVEPOINT s1;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('kept')$$) AS t(other_got boolean);
COMMIT;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('kept')$$) AS t(free_after_commit boolean);

-- taken before the savepoint and again inside it: rolling back the inner
-- acquisition keeps the outer one
BEGIN;
SELECT zk_lock('twice') AS t1 \gset
SAVEPOINT s1;
SELECT zk_lock('twice') = :t1 AS same_token;
ROLLBACK TO SAVEPOINT s1;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('twice')$$) AS t(other_got boolean);
COMMIT;

-- an error inside a savepoint releases what it took
BEGIN;
SAVEPOINT s1;
SELECT zk_lock('err') > 0 AS taken;
SELECT 1/0;
ROLLBACK TO SAVEPOINT s1;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('err')$$) AS t(free_after_error boolean);
COMMIT;

-- PREPARE TRANSACTION is refused while holding a lock
BEGIN;
SELECT zk_lock('prep') > 0 AS taken;
PREPARE TRANSACTION 'zk';
SELECT * FROM dblink('other', $$SELECT zk_try_lock('prep')$$) AS t(free_after_refused_prepare boolean);

SELECT dblink_disconnect('other');
