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

-- several locks at once (doc/locks.md, "Several locks at once"): the tokens
-- in the array's order, a repeated name taken once
BEGIN;
SELECT zk_lock(ARRAY['m2', 'm1', 'm2']) AS toks \gset
SELECT cardinality(:'toks'::bigint[]) AS three_tokens,
       (:'toks'::bigint[])[1] = (:'toks'::bigint[])[3] AS repeat_same_token,
       (:'toks'::bigint[])[1] = zk_lock_token('m2') AS first_is_m2,
       (:'toks'::bigint[])[2] = zk_lock_token('m1') AS second_is_m1;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('m1'), zk_try_lock('m2')$$) AS t(m1 boolean, m2 boolean);
COMMIT;
SELECT zk_lock_token('m1') IS NULL AND zk_lock_token('m2') IS NULL AS released_at_commit;
-- a one-name literal is still one name, not an array
BEGIN;
SELECT zk_lock('{x,y}') > 0 AS one_name, zk_lock_token('{x,y}') IS NOT NULL AS held_by_that_name;
COMMIT;
-- all or none: one member taken by the other session
SELECT dblink_exec('other', 'BEGIN');
SELECT * FROM dblink('other', $$SELECT zk_try_lock('m3')$$) AS t(other_got boolean);
BEGIN;
SELECT zk_try_lock(ARRAY['m1', 'm3']) AS try_all;
SELECT zk_lock_token('m1') IS NULL AS m1_let_go;
SELECT * FROM dblink('other', $$SELECT zk_try_lock('m1')$$) AS t(other_got_m1 boolean);
COMMIT;
-- a wait that runs out lets go of what it took (session scope: nothing stays)
SELECT zk_session_lock(ARRAY['m1', 'm3'], '200 ms');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_lock_token('m1') IS NULL AS m1_let_go_after_timeout;
SELECT zk_try_session_lock(ARRAY['m1', 'm3']) AS try_session_all;
SELECT zk_lock_token('m1') IS NULL AS m1_not_held;
SELECT dblink_exec('other', 'COMMIT');
-- keys (an int[] is taken as bigint[]); zk_unlock of an array lets go of each
SELECT cardinality(zk_session_lock(ARRAY[7, 5])) AS two_keys;
SELECT zk_try_session_lock(ARRAY[5]) AS stacked;
SELECT zk_unlock(ARRAY[5, 7]) AS unlocked, zk_lock_token(5) IS NOT NULL AS five_stacked_left;
SELECT zk_unlock(ARRAY[5]) AS unlocked_last, zk_lock_token(5) IS NULL AS five_gone;
SELECT zk_unlock(ARRAY[5, 7]) AS none_left;
-- shared members
BEGIN;
SELECT cardinality(zk_lock_shared(ARRAY['s1', 's2'])) AS two_shared;
SELECT * FROM dblink('other', $$SELECT zk_try_lock_shared('s1'), zk_try_lock('s2')$$) AS t(shared_too boolean, exclusive boolean);
COMMIT;
SELECT zk_session_lock_shared(ARRAY['s1']) IS NOT NULL AS session_shared,
       zk_try_session_lock_shared(ARRAY['s2']) AS try_session_shared;
SELECT zk_unlock_shared(ARRAY['s2', 's1']) AS unlocked_shared;
-- bad input changes nothing
SELECT zk_lock(ARRAY['a', NULL]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_lock(ARRAY[['a'], ['b']]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_session_lock(ARRAY['a', '']);
\echo :LAST_ERROR_SQLSTATE
SET zklock.max_locks_per_backend = 2;
SELECT zk_session_lock(ARRAY['a', 'b', 'c', 'a']);
\echo :LAST_ERROR_SQLSTATE
RESET zklock.max_locks_per_backend;
SELECT zk_lock_token('a') IS NULL AS nothing_held;
SELECT zk_lock('{}'::text[]) AS empty, zk_lock(NULL::text[]) IS NULL AS null_array,
       zk_try_lock('{}'::bigint[]) AS try_empty;
-- an array whose lower bound is not 1: the tokens keep its subscripts, and
-- a NULL element is named by its subscript
BEGIN;
SELECT array_lower(t, 1) AS lower, array_upper(t, 1) AS upper,
       t[0] = zk_lock_token('lb0') AS zero_is_lb0, t[1] = zk_lock_token('lb1') AS one_is_lb1
  FROM zk_lock('[0:1]={lb0,lb1}'::text[]) AS z(t);
SELECT array_lower(t, 1) AS lower, t[-3] = zk_lock_token(8) AS minus_three_is_8
  FROM zk_lock('[-4:-3]={7,8}'::bigint[]) AS z(t);
COMMIT;
SELECT zk_lock('[0:2]={a,b,NULL}'::text[]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lock('[-1:0]={NULL,5}'::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_unlock('[3:4]={NULL,a}'::text[]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_lock_token('a') IS NULL AND zk_lock_token(5) IS NULL AS still_nothing_held;

SELECT dblink_disconnect('other');
