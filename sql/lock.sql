-- Exclusive transaction locks, seen from two sessions: this one and a
-- dblink connection named 'other'.
SELECT dblink_connect('other', 'dbname=' || current_database());

-- uncontended: a positive token; taking it again stacks and gives the same token
BEGIN;
SELECT zk_lock('job') AS t1 \gset
SELECT :t1 > 0 AS positive_token;
SELECT zk_lock('job') = :t1 AS same_token_when_reentrant;
SELECT zk_try_lock('job') AS reentrant_try;
-- the other session cannot have it
SELECT * FROM dblink('other', $$SELECT zk_try_lock('job')$$) AS t(got boolean);
COMMIT;

-- released at commit: now the other session gets it, with a larger token
SELECT * FROM dblink('other', $$BEGIN; SELECT zk_lock('job')$$) AS t(tok bigint) \gset o_
SELECT :o_tok > :t1 AS later_grant_has_larger_token;
SELECT zk_try_lock('job') AS try_while_other_holds;
SELECT dblink_exec('other', 'COMMIT');

-- released at rollback
BEGIN;
SELECT zk_try_lock('job') AS got;
ROLLBACK;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('job')$$) AS t(got_after_rollback boolean);

-- a wait with a timeout ends with 55P03 while the other session holds the lock
SELECT dblink_exec('other', 'BEGIN');
SELECT * FROM dblink('other', $$SELECT zk_try_lock('job')$$) AS t(other_got boolean);
SELECT zk_lock('job', '200 ms');
\echo :LAST_ERROR_SQLSTATE
SET lock_timeout = '200ms';
SELECT zk_lock('job');
\echo :LAST_ERROR_SQLSTATE
RESET lock_timeout;
-- an interval of zero does not wait
SELECT zk_lock('job', '0');
\echo :LAST_ERROR_SQLSTATE
-- statement_timeout cancels the wait: 57014
SET statement_timeout = '300ms';
SELECT zk_lock('job');
\echo :LAST_ERROR_SQLSTATE
RESET statement_timeout;
SELECT dblink_exec('other', 'COMMIT');
-- and nothing of ours was left behind: the lock is free again
SELECT zk_try_lock('job') AS free_again;

-- each name is its own lock
BEGIN;
SELECT zk_lock('a') > 0 AS a, zk_lock('b') > 0 AS b;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('a'), zk_try_lock('c')$$) AS t(a boolean, c boolean);
COMMIT;

-- in a function: still held until the end of the transaction
CREATE FUNCTION take(n text) RETURNS bigint LANGUAGE sql AS $$ SELECT zk_lock(n) $$;
BEGIN;
SELECT take('f') > 0 AS taken_in_function;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('f')$$) AS t(other_got boolean);
COMMIT;
DROP FUNCTION take(text);

SELECT dblink_disconnect('other');
