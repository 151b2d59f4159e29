-- The queue's SQL surface, from one session and a dblink connection 'other':
-- zk_enqueue (text and bytea, one item or an array) published at COMMIT, zk_queue_length,
-- zk_queue_peek, zk_try_dequeue, zk_dequeue (timeout, max_items), priorities,
-- ROLLBACK and savepoints on both sides, zk_queue_purge, zk_queue_drop, the zk_queues view,
-- zk_queue_release_cluster, PREPARE TRANSACTION, and every bad input with its
-- SQLSTATE.  msg_id and enqueued_at change from run to run: only comparisons
-- of them are printed.  Every queue name here starts with 'regress_q'.
SELECT dblink_connect('other', 'dbname=' || current_database());

-- claims are released and consumed after the claiming transaction ends, maybe
-- asynchronously: wait (bounded) until queue q has n unclaimed items, and
-- return how many it has then
CREATE FUNCTION wait_length(q text, n bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..100 LOOP
    EXIT WHEN zk_queue_length(q) = n;
    PERFORM pg_sleep(0.05);
  END LOOP;
  RETURN zk_queue_length(q);
END $$;
-- wait (bounded) until the zk_queues row of q shows c claims and w local
-- waiters, and return what it shows then
CREATE FUNCTION wait_queue_row(q text, c bigint, w int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  rc bigint;
  rw int;
BEGIN
  FOR i IN 1..100 LOOP
    SELECT claimed, local_waiting INTO rc, rw FROM zk_queues WHERE queue = q;
    EXIT WHEN rc = c AND rw = w;
    PERFORM pg_sleep(0.05);
  END LOOP;
  RETURN format('claimed %s, waiting %s', rc, rw);
END $$;

-- the surface: the functions (all volatile and parallel unsafe), the message
-- type and the view
SELECT oid::regprocedure AS function, prorettype::regtype AS returns, proretset AS setof,
       provolatile, proparallel
  FROM pg_proc WHERE proname ~ '^zk_(enqueue|dequeue|try_dequeue|queue_)'
 ORDER BY oid::regprocedure::text;
SELECT attname, atttypid::regtype FROM pg_attribute
 WHERE attrelid = 'zk_message'::regclass AND attnum > 0 ORDER BY attnum;
SELECT attname, atttypid::regtype FROM pg_attribute
 WHERE attrelid = 'zk_queues'::regclass AND attnum > 0 ORDER BY attnum;
SELECT attname, atttypid::regtype FROM pg_attribute
 WHERE attrelid = 'zk_queue_metrics'::regclass AND attnum > 0 ORDER BY attnum;

-- a queue nobody has used is empty
SELECT zk_queue_length('regress_q1') AS length,
       (SELECT count(*) FROM zk_queue_peek('regress_q1')) AS peeked,
       (SELECT count(*) FROM zk_try_dequeue('regress_q1')) AS dequeued;

--
-- Enqueue: published at COMMIT, all items of the transaction together
--
BEGIN;
SELECT zk_enqueue('regress_q1', 'first');
SELECT zk_enqueue('regress_q1', '\xff01'::bytea);
SELECT zk_enqueue('regress_q1', 'héllo'::text, 100);
SELECT zk_enqueue('regress_q1', '\x610062'::bytea, 100);
SELECT zk_queue_length('regress_q1') AS own_length_before_commit;
SELECT * FROM dblink('other', $$SELECT zk_queue_length('regress_q1')$$)
  AS t(other_length_before_commit bigint);
SELECT * FROM dblink('other', $$SELECT count(*) FROM zk_try_dequeue('regress_q1')$$)
  AS t(other_dequeued_before_commit bigint);
COMMIT;
SELECT zk_queue_length('regress_q1') AS length_after_commit;
SELECT * FROM dblink('other', $$SELECT zk_queue_length('regress_q1')$$)
  AS t(other_length_after_commit bigint);

-- zk_queue_peek: the unclaimed items in queue order, claiming nothing.  Text
-- is stored as UTF-8; body is the payload as text when it is valid UTF-8
-- (0xff is not, and a NUL byte cannot be text), else NULL
SELECT n, priority, payload, body IS NULL AS no_body, body::bytea = payload AS body_is_payload,
       msg_id > 0 AS has_id,
       enqueued_at BETWEEN clock_timestamp() - interval '5 min' AND clock_timestamp() AS enqueued_now
  FROM zk_queue_peek('regress_q1') WITH ORDINALITY AS p(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n);
SELECT body AS first_body FROM zk_queue_peek('regress_q1', 1);
SELECT body = 'héllo' AS utf8_body FROM zk_queue_peek('regress_q1') WHERE payload = '\x68c3a96c6c6f';
-- msg_id grows along the queue (it is 2^62 + the entry's czxid * 1024 + its sequence number)
SELECT bool_and(msg_id > prev) AS ids_increase, count(*) AS items
  FROM (SELECT msg_id, lag(msg_id) OVER (ORDER BY n) AS prev
          FROM zk_queue_peek('regress_q1') WITH ORDINALITY AS p(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n)) s;
SELECT (SELECT count(*) FROM zk_queue_peek('regress_q1', 2)) AS peek_2,
       (SELECT count(*) FROM zk_queue_peek('regress_q1', 0)) AS peek_0,
       (SELECT count(*) FROM zk_queue_peek('regress_q1', 100)) AS peek_100,
       zk_queue_length('regress_q1') AS length_after_peeks;

--
-- Dequeue: a claim takes the item out of the unclaimed ones until the
-- claiming transaction ends; ROLLBACK puts it back in its place
--
SELECT msg_id AS head FROM zk_queue_peek('regress_q1', 1) \gset
BEGIN;
SELECT msg_id = :head AS got_head, priority, payload, body FROM zk_try_dequeue('regress_q1');
SELECT zk_queue_length('regress_q1') AS unclaimed_while_claimed;
SELECT * FROM dblink('other', $$SELECT payload FROM zk_queue_peek('regress_q1', 1)$$)
  AS t(others_head bytea);
SELECT * FROM dblink('other', $$SELECT count(*) FROM zk_queue_peek('regress_q1')$$)
  AS t(others_peek bigint);
ROLLBACK;
SELECT wait_length('regress_q1', 4) AS unclaimed_after_rollback;
SELECT msg_id = :head AS head_again FROM zk_queue_peek('regress_q1', 1);

-- two transactions never get the same item: the other session claims the
-- head, this one gets the next
SELECT dblink_exec('other', 'BEGIN');
SELECT * FROM dblink('other', 'SELECT msg_id = ' || :head || ', body FROM zk_try_dequeue(''regress_q1'')')
  AS t(other_got_head boolean, body text);
BEGIN;
SELECT msg_id <> :head AS not_the_head, payload, body IS NULL AS no_body FROM zk_try_dequeue('regress_q1');
SELECT zk_queue_length('regress_q1') AS unclaimed_with_two_claims;
SELECT dblink_exec('other', 'COMMIT');
COMMIT;
-- both consumed: two items left, no claim
SELECT wait_queue_row('regress_q1', 0, 0) AS after_commits;
SELECT zk_queue_length('regress_q1') AS unclaimed;

-- zk_dequeue with max_items claims several, in order; rolled back, the same
-- items are dequeued again
SELECT array_agg(msg_id ORDER BY n) AS ids
  FROM zk_queue_peek('regress_q1') WITH ORDINALITY AS p(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n) \gset
BEGIN;
SELECT n, payload FROM zk_dequeue('regress_q1', '1s', 10)
  WITH ORDINALITY AS d(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n);
SELECT zk_queue_length('regress_q1') AS unclaimed;
ROLLBACK;
SELECT wait_length('regress_q1', 2) AS unclaimed_after_rollback;
BEGIN;
SELECT array_agg(msg_id ORDER BY n) = :'ids'::bigint[] AS same_items, count(*) AS items
  FROM zk_dequeue('regress_q1', NULL, 1000) WITH ORDINALITY AS d(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n);
COMMIT;
SELECT wait_queue_row('regress_q1', 0, 0) AS consumed;

-- the delivery count: every hand-out counts, however it ends; a peek shows
-- the hand-outs so far
SELECT zk_enqueue('regress_q1', 'poison');
SELECT wait_length('regress_q1', 1) AS published;
SELECT attempts AS never_handed_out FROM zk_queue_peek('regress_q1');
BEGIN;
SELECT attempts AS first_hand_out, body FROM zk_dequeue('regress_q1', '5s');
ROLLBACK;
SELECT wait_length('regress_q1', 1) AS back_after_rollback;
BEGIN;
SAVEPOINT s;
SELECT attempts AS second_hand_out FROM zk_dequeue('regress_q1', '5s');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT wait_length('regress_q1', 1) AS back_after_savepoint;
SELECT attempts AS peeked FROM zk_queue_peek('regress_q1');
BEGIN;
SELECT attempts AS third_hand_out, body FROM zk_dequeue('regress_q1', '5s');
COMMIT;
SELECT wait_queue_row('regress_q1', 0, 0) AS consumed;

-- this cluster's counts per queue: three items, one handed out and rolled
-- back, then two handed out and consumed (the one rolled back again among
-- them)
SELECT count(*) AS no_stats_yet FROM zk_queue_stats() WHERE queue = 'regress_qs';
SELECT zk_enqueue('regress_qs', ARRAY['s1', 's2', 's3']);
SELECT wait_length('regress_qs', 3) AS published;
BEGIN;
SELECT body FROM zk_dequeue('regress_qs', '5s');
ROLLBACK;
SELECT wait_length('regress_qs', 3) AS back;
BEGIN;
SELECT body FROM zk_dequeue('regress_qs', '5s', 2);
COMMIT;
SELECT wait_queue_row('regress_qs', 0, 0) AS consumed;
SELECT wait_length('regress_qs', 1) AS left_over;
SELECT queue, handed_out, consumed, released, since <= last_at AS since_first,
       last_at > now() - interval '5 min' AS counted_lately
  FROM zk_queue_stats() WHERE queue = 'regress_qs';
SELECT zk_queue_purge('regress_qs') AS purged;

-- an empty queue: zk_try_dequeue and a zero timeout return no row at once,
-- a timeout returns no row once it has passed
SELECT count(*) AS try_got FROM zk_try_dequeue('regress_q1', 5);
SELECT count(*) AS zero_timeout_got FROM zk_dequeue('regress_q1', '0');
SELECT clock_timestamp() AS t0 \gset
SELECT count(*) AS timeout_got FROM zk_dequeue('regress_q1', '100ms');
SELECT clock_timestamp() - :'t0'::timestamptz >= interval '90ms' AS waited_the_timeout,
       clock_timestamp() - :'t0'::timestamptz < interval '5s' AS returned_promptly;
-- statement_timeout ends a wait without limit
SET statement_timeout = '300ms';
SELECT * FROM zk_dequeue('regress_q1');
\echo :LAST_ERROR_SQLSTATE
RESET statement_timeout;
SELECT zk_queue_length('regress_q1') AS still_empty;

--
-- Priorities: lower first, FIFO within one priority, across transactions
--
BEGIN;
SELECT zk_enqueue('regress_q2', 'p500-a', 500);
SELECT zk_enqueue('regress_q2', 'p100-a');
SELECT zk_enqueue('regress_q2', 'p999', 999);
SELECT zk_enqueue('regress_q2', 'p100-b'::bytea, 100);
COMMIT;
BEGIN;
SELECT zk_enqueue('regress_q2', 'p0', 0);
SELECT zk_enqueue('regress_q2', 'p500-b', 500);
SELECT zk_enqueue('regress_q2', 'p1'::bytea, 1);
COMMIT;
SELECT priority, body FROM zk_queue_peek('regress_q2');
BEGIN;
SELECT priority, body FROM zk_try_dequeue('regress_q2', 3);
COMMIT;
BEGIN;
SELECT priority, body FROM zk_dequeue('regress_q2', NULL, 2);
COMMIT;
BEGIN;
SELECT priority, body FROM zk_dequeue('regress_q2', '1s', 1000);
COMMIT;
SELECT zk_queue_length('regress_q2') AS empty;

--
-- ROLLBACK publishes nothing; ROLLBACK TO SAVEPOINT drops only the items of
-- the subtransactions it rolls back
--
BEGIN;
SELECT zk_enqueue('regress_q3', 'rolled back');
ROLLBACK;
SELECT zk_queue_length('regress_q3') AS after_rollback;
BEGIN;
SELECT zk_enqueue('regress_q3', 'kept-1');
SAVEPOINT s1;
SELECT zk_enqueue('regress_q3', 'dropped-1');
SAVEPOINT s2;
SELECT zk_enqueue('regress_q3', 'dropped-2');
RELEASE SAVEPOINT s2;
ROLLBACK TO SAVEPOINT s1;
SELECT zk_enqueue('regress_q3', 'kept-2');
SAVEPOINT s3;
SELECT zk_enqueue('regress_q3', 'kept-3');
RELEASE SAVEPOINT s3;
SAVEPOINT s4;
SELECT zk_enqueue('regress_q3', 'dropped-3');
SELECT 1/0;
ROLLBACK TO SAVEPOINT s4;
COMMIT;
SELECT body FROM zk_queue_peek('regress_q3');

-- claims: ROLLBACK TO SAVEPOINT puts back the claims of that subtransaction
-- only; RELEASE SAVEPOINT keeps them for the COMMIT
BEGIN;
SELECT body FROM zk_try_dequeue('regress_q3');
SAVEPOINT d1;
SELECT body FROM zk_try_dequeue('regress_q3');
ROLLBACK TO SAVEPOINT d1;
SELECT wait_length('regress_q3', 2) AS unclaimed_after_rollback_to;
SELECT body FROM zk_queue_peek('regress_q3');
SAVEPOINT d2;
SELECT body FROM zk_dequeue('regress_q3', '1s');
RELEASE SAVEPOINT d2;
COMMIT;
SELECT wait_queue_row('regress_q3', 0, 0) AS after_commit;
SELECT body FROM zk_queue_peek('regress_q3');

--
-- zk_queue_purge deletes the unclaimed items at once, not transactionally,
-- and leaves the claimed ones alone
--
SELECT zk_queue_purge('regress_q4') AS purge_unused_queue;
BEGIN;
SELECT zk_enqueue('regress_q4', 'a');
SELECT zk_enqueue('regress_q4', 'b');
SELECT zk_enqueue('regress_q4', 'c');
COMMIT;
BEGIN;
SELECT body FROM zk_try_dequeue('regress_q4');
SELECT * FROM dblink('other', $$SELECT zk_queue_purge('regress_q4')$$) AS t(others_purge bigint);
SELECT zk_queue_length('regress_q4') AS unclaimed;
ROLLBACK;
SELECT wait_length('regress_q4', 1) AS back_after_rollback;
SELECT body FROM zk_queue_peek('regress_q4');
BEGIN;
SELECT zk_queue_purge('regress_q4') AS purged_in_transaction;
ROLLBACK;
SELECT zk_queue_length('regress_q4') AS purged_anyway, zk_queue_purge('regress_q4') AS purge_empty;

--
-- zk_queue_drop deletes an empty, unused queue's nodes at once: a queue with
-- an item is refused (55006) and keeps it; emptied, it goes (true), and then
-- there is nothing to drop (false)
--
SELECT zk_enqueue('regress_qd', 'x');
SELECT zk_queue_drop('regress_qd');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_length('regress_qd') AS kept;
SELECT count(*) AS dequeued FROM zk_try_dequeue('regress_qd');
SELECT zk_queue_drop('regress_qd') AS dropped;
SELECT zk_queue_drop('regress_qd') AS again;
SELECT count(*) AS listed FROM zk_queues WHERE queue = 'regress_qd';
SELECT zk_queue_drop(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_drop('');
\echo :LAST_ERROR_SQLSTATE

--
-- zk_queue_move moves unclaimed items into another queue at once, in queue
-- order, each exactly once; max_items bounds it; an empty or missing source
-- moves 0.  Bad arguments: NULL 22004; the same queue, max_items outside
-- 1..10000, an empty name 22023
--
SELECT zk_enqueue('regress_qm', ARRAY['m1', 'm2', 'm3']);
SELECT zk_queue_move('regress_qm', 'regress_qm.to', 2) AS moved;
SELECT zk_queue_move('regress_qm', 'regress_qm.to') AS moved_rest;
SELECT zk_queue_move('regress_qm', 'regress_qm.to') AS moved_none;
SELECT zk_queue_move('regress_qm.none', 'regress_qm.to') AS missing_source;
SELECT zk_queue_length('regress_qm') AS left_behind, body FROM zk_queue_peek('regress_qm.to');
SELECT count(*) AS dequeued FROM zk_try_dequeue('regress_qm.to', 3);
SELECT zk_queue_drop('regress_qm') AS dropped, zk_queue_drop('regress_qm.to') AS dropped_to;
SELECT zk_queue_move(NULL, 'regress_qm');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_move('regress_qm', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_move('regress_qm', 'regress_qm.to', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_move('regress_qm', 'regress_qm');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_move('regress_qm', 'regress_qm.to', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_move('regress_qm', 'regress_qm.to', 10001);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_move('', 'regress_qm.to');
\echo :LAST_ERROR_SQLSTATE

--
-- A large payload travels whole, both ways
--
BEGIN;
SELECT zk_enqueue('regress_q7', convert_to(repeat('0123456789', 40000), 'UTF8'));
SELECT zk_enqueue('regress_q7', repeat('ab', 100000), 7);
COMMIT;
BEGIN;
SELECT priority, length(payload) AS bytes, md5(payload) = md5(repeat('ab', 100000)) AS ab,
       md5(payload) = md5(repeat('0123456789', 40000)) AS digits, length(body) AS chars
  FROM zk_try_dequeue('regress_q7', 2);
COMMIT;

--
-- The zk_queues view: items, claims, this cluster's claims and waiters
--
BEGIN;
SELECT zk_enqueue('regress_q5', 'x');
SELECT zk_enqueue('regress_q5', 'y');
COMMIT;
BEGIN;
SELECT body FROM zk_try_dequeue('regress_q5');
SELECT items, claimed, local_claims, local_waiting FROM zk_queues WHERE queue = 'regress_q5';
-- one ready item and one claim: both ages known, no policy, nothing delayed
SELECT delayed, dead_letter, max_attempts,
       oldest_ready_age >= '0' AND oldest_ready_age < '1 minute' AS ready_age,
       oldest_claim_age >= '0' AND oldest_claim_age < '1 minute' AS claim_age
  FROM zk_queues WHERE queue = 'regress_q5';
SELECT ready, delayed, claimed, dead_letters, handed_out >= 1 AS handed_out
  FROM zk_queue_metrics WHERE queue = 'regress_q5';
COMMIT;
SELECT wait_queue_row('regress_q5', 0, 0) AS after_commit;
SELECT items, claimed, local_claims, local_waiting FROM zk_queues WHERE queue = 'regress_q5';
-- no claim left: no claim age
SELECT oldest_ready_age IS NOT NULL AS ready_age, oldest_claim_age IS NULL AS no_claim_age
  FROM zk_queues WHERE queue = 'regress_q5';
-- a consumer waiting in the other session shows in local_waiting, and the
-- next COMMIT of an enqueue serves it
SELECT dblink_send_query('other', $$SELECT body FROM zk_dequeue('regress_q6', '60s')$$) AS sent;
SELECT wait_queue_row('regress_q6', 0, 1) AS while_waiting;
BEGIN;
SELECT zk_enqueue('regress_q6', 'wake up');
COMMIT;
SELECT * FROM dblink_get_result('other') AS t(body text);
SELECT * FROM dblink_get_result('other') AS t(body text);
SELECT wait_queue_row('regress_q6', 0, 0) AS served;

--
-- Names: one queue each, whatever they look like
--
BEGIN;
SELECT zk_enqueue('regress_q9/../x', 'a');
SELECT zk_enqueue('regress_q9 ü', 'b');
SELECT zk_enqueue(repeat('q', 255), 'c');
COMMIT;
SELECT zk_queue_length('regress_q9/../x') AS dotdot, zk_queue_length('regress_q9 ü') AS unicode,
       zk_queue_length('x') AS x, zk_queue_length('regress_q9') AS prefix,
       zk_queue_length(repeat('q', 255)) AS longest;
SELECT zk_queue_purge('regress_q9/../x') + zk_queue_purge('regress_q9 ü')
       + zk_queue_purge(repeat('q', 255)) AS purged;

--
-- PREPARE TRANSACTION is refused after queue work; the transaction rolls
-- back: its items are not published, its claims are put back
--
BEGIN;
SELECT zk_enqueue('regress_q8', 'kept');
COMMIT;
BEGIN;
SELECT zk_enqueue('regress_q8', 'prepared?');
PREPARE TRANSACTION 'regress_queue_enqueue';
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_length('regress_q8') AS still_one;
BEGIN;
SELECT body FROM zk_try_dequeue('regress_q8');
PREPARE TRANSACTION 'regress_queue_dequeue';
\echo :LAST_ERROR_SQLSTATE
SELECT wait_length('regress_q8', 1) AS claim_put_back;
SELECT count(*) AS prepared FROM pg_prepared_xacts;

--
-- Batches: zk_enqueue of an array (text[] or bytea[]) adds its elements in
-- array order, as one zk_enqueue per element would, published at COMMIT with
-- the transaction's other items; an empty array adds nothing; ROLLBACK and
-- ROLLBACK TO SAVEPOINT drop them
--
BEGIN;
SELECT zk_enqueue('regress_qb', ARRAY['b1', 'b2', 'b3']);
SELECT zk_enqueue('regress_qb', ARRAY['\x00ff', '\x61']::bytea[], 7);
SELECT zk_enqueue('regress_qb', ARRAY[]::text[]);
SELECT zk_enqueue('regress_qb', '{}'::bytea[], priority => 1);
SELECT zk_enqueue('regress_qb', 'b4');
SELECT zk_enqueue('regress_qb', ARRAY['b5', 'héllo'], priority => 100);
SELECT zk_enqueue('regress_qb', '[3:4]={b6,b7}'::text[]);
SAVEPOINT s;
SELECT zk_enqueue('regress_qb', ARRAY['dropped-1', 'dropped-2']);
ROLLBACK TO SAVEPOINT s;
SELECT zk_queue_length('regress_qb') AS own_length_before_commit;
COMMIT;
SELECT priority, payload, body FROM zk_queue_peek('regress_qb');
BEGIN;
SELECT zk_enqueue('regress_qb', ARRAY['rolled', 'back']);
ROLLBACK;
SELECT zk_queue_length('regress_qb') AS after_rollback;
-- a text literal is one item (the scalar zk_enqueue): cast it to an array
SELECT zk_enqueue('regress_qb', '{one,item}');
SELECT zk_enqueue('regress_qb', '{two,items}'::text[]);
SELECT body FROM zk_queue_peek('regress_qb', 20) OFFSET 10;
SELECT zk_queue_purge('regress_qb') AS purged;
-- 1024 items, the most one transaction may put into one queue, in one
-- call: they come out in array order
SELECT zk_enqueue('regress_qb', array_agg('i' || n ORDER BY n)) FROM generate_series(1, 1024) n;
SELECT count(*) AS items, bool_and(body = 'i' || n) AS in_array_order
  FROM zk_queue_peek('regress_qb', 2000) WITH ORDINALITY AS p(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n);
BEGIN;
SELECT count(*) AS items, bool_and(body = 'i' || n) AS dequeued_in_order
  FROM zk_dequeue('regress_qb', '1s', 1000) WITH ORDINALITY AS d(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n);
COMMIT;
BEGIN;
SELECT count(*) AS items, bool_and(body = 'i' || (1000 + n)) AS the_rest_in_order
  FROM zk_try_dequeue('regress_qb', 1000) WITH ORDINALITY AS d(msg_id, priority, enqueued_at, payload, body, attempts, origin, origin_msg_id, origin_attempts, n);
COMMIT;
SELECT wait_queue_row('regress_qb', 0, 0) AS consumed;
SELECT zk_queue_length('regress_qb') AS empty;

-- Bad batches: a clear error, and none of the call's elements is kept; the
-- transaction's items from before the call (here, in a savepoint's parent)
-- are published
SELECT zk_enqueue('regress_qb', NULL::text[]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_qb', NULL::bytea[]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue(NULL, ARRAY['x']);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_qb', ARRAY['x'], NULL::int);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_qb', ARRAY['a', NULL, 'c']);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_qb', ARRAY[NULL]::bytea[]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_qb', ARRAY[['a', 'b'], ['c', 'd']]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_qb', ARRAY[['\x01'::bytea]]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_qb', ARRAY['x'], 1000);
\echo :LAST_ERROR_SQLSTATE
-- an empty array still has its queue name and priority checked
SELECT zk_enqueue('', ARRAY[]::text[]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_qb', ARRAY[]::bytea[], -1);
\echo :LAST_ERROR_SQLSTATE
-- an element over ZooKeeper's packet limit, elements too large together
SELECT zk_enqueue('regress_qb', ARRAY['ok', repeat('x', 1100000)]);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_qb', ARRAY[repeat('a', 400000), repeat('b', 400000), repeat('c', 400000)]);
\echo :LAST_ERROR_SQLSTATE
-- more than 1024 items for one queue in the transaction
SELECT zk_enqueue('regress_qb', array_agg('i' || n)) FROM generate_series(1, 1025) n;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT zk_enqueue('regress_qb', array_agg('before-' || n ORDER BY n)) FROM generate_series(1, 1000) n;
SAVEPOINT s;
SELECT zk_enqueue('regress_qb', array_agg('over-' || n)) FROM generate_series(1, 25) n;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO SAVEPOINT s;
SAVEPOINT s2;
SELECT zk_enqueue('regress_qb', ARRAY['bad-1', NULL]);
ROLLBACK TO SAVEPOINT s2;
-- what the failed calls would have added is not counted: 24 more fit
SELECT zk_enqueue('regress_qb', array_agg('after-' || n ORDER BY n)) FROM generate_series(1, 24) n;
COMMIT;
SELECT count(*) AS items, count(*) FILTER (WHERE body LIKE 'before-%') AS before,
       count(*) FILTER (WHERE body LIKE 'after-%') AS after,
       count(*) FILTER (WHERE body LIKE 'over-%' OR body LIKE 'bad-%') AS from_failed_calls
  FROM zk_queue_peek('regress_qb', 2000);
SELECT zk_queue_purge('regress_qb') AS purged;

--
-- Bad input: a clear error and nothing published
--
\set VERBOSITY default
-- NULL queue, payload or argument: 22004
SELECT zk_enqueue(NULL, 'x'::text);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue(NULL, 'x'::bytea);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_q8', NULL::text);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_q8', NULL::bytea);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_q8', 'x', NULL::int);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_dequeue(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_dequeue('regress_q8', '1s', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_try_dequeue(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_try_dequeue('regress_q8', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_length(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_queue_peek(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_queue_peek('regress_q8', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_purge(NULL);
\echo :LAST_ERROR_SQLSTATE
-- empty or over-long names: 22023
SELECT zk_enqueue('', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue(repeat('x', 256), 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue(repeat('é', 128), 'x'::bytea);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_dequeue('');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_try_dequeue(repeat('x', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_length('');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_queue_peek(repeat('x', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_queue_purge('');
\echo :LAST_ERROR_SQLSTATE
-- priority outside 0..999: 22003
SELECT zk_enqueue('regress_q8', 'x', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_q8', 'x'::bytea, 1000);
\echo :LAST_ERROR_SQLSTATE
-- max_items outside 1..1000, a negative peek count or timeout: 22023
SELECT * FROM zk_dequeue('regress_q8', '1s', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_dequeue('regress_q8', NULL, 1001);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_try_dequeue('regress_q8', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_try_dequeue('regress_q8', 1001);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_queue_peek('regress_q8', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_dequeue('regress_q8', '-1 second');
\echo :LAST_ERROR_SQLSTATE
-- a payload, or a transaction's total, over ZooKeeper's packet limit: 54000
SELECT zk_enqueue('regress_q8', repeat('x', 1100000));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue('regress_q8', convert_to(repeat('x', 1100000), 'UTF8'));
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT zk_enqueue('regress_q8', repeat('a', 400000));
SELECT zk_enqueue('regress_q8', repeat('b', 400000));
SELECT zk_enqueue('regress_q8', repeat('c', 400000));
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- none of these published anything: still the one item
SELECT zk_queue_length('regress_q8') AS still_one;
-- a transaction with an error publishes none of its items; a savepoint
-- rolled back after an error loses only its own
BEGIN;
SELECT zk_enqueue('regress_q8', 'lost with the transaction');
SELECT zk_enqueue('regress_q8', 'x', 1000);
COMMIT;
SELECT zk_queue_length('regress_q8') AS still_one;
BEGIN;
SELECT zk_enqueue('regress_q8', 'kept-2');
SAVEPOINT s;
SELECT zk_enqueue('regress_q8', 'lost with the savepoint');
SELECT zk_enqueue('regress_q8', repeat('x', 1100000));
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT body FROM zk_queue_peek('regress_q8');

--
-- Message groups: within a group, one item at a time, in the order enqueued;
-- other groups (and ungrouped items) go on meanwhile
--
SELECT zk_enqueue_grouped('regress_qg', 'a', ARRAY['a1', 'a2', 'a3']);
SELECT zk_enqueue_grouped('regress_qg', 'b', 'b1');
SELECT zk_enqueue_grouped('regress_qg', 'b', 'b2'::bytea);
BEGIN;
SELECT zk_enqueue('regress_qg', 'plain');
SELECT zk_enqueue_grouped('regress_qg', 'b', 'b3', 500);
COMMIT;
-- grouped items enter the queue while some server serves dequeues from it;
-- the heads held: nothing more of their groups comes
BEGIN;
CREATE TEMP TABLE regress_got (n serial, body text);
INSERT INTO regress_got (body) SELECT body FROM zk_dequeue('regress_qg', '5s', 10);
INSERT INTO regress_got (body) SELECT body FROM zk_dequeue('regress_qg', '5s', 10);
INSERT INTO regress_got (body) SELECT body FROM zk_dequeue('regress_qg', '5s', 10);
SELECT string_agg(body, ' ' ORDER BY body) AS held FROM regress_got;
SELECT count(*) AS nothing_else FROM zk_dequeue('regress_qg', '1s', 10);
ROLLBACK;
-- one at a time, consumed: each group in order
CREATE TEMP TABLE regress_got (n serial, body text, attempts int);
DO $$
BEGIN
    FOR i IN 1 .. 7 LOOP
        INSERT INTO regress_got (body, attempts)
            SELECT body, attempts FROM zk_dequeue('regress_qg', '5s');
        COMMIT;
    END LOOP;
END
$$;
SELECT string_agg(body, ' ' ORDER BY n) FILTER (WHERE body LIKE 'a%') AS group_a,
       string_agg(body, ' ' ORDER BY n) FILTER (WHERE body LIKE 'b%') AS group_b,
       string_agg(body, ' ' ORDER BY n) FILTER (WHERE body = 'plain') AS plain,
       count(*) AS consumed
  FROM regress_got;
SELECT zk_queue_length('regress_qg') AS left_over;
-- a group key of 1 to 64 bytes: 22023, nothing enqueued
SELECT zk_enqueue_grouped('regress_qg', '', 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue_grouped('regress_qg', repeat('k', 65), 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue_grouped('regress_qg', NULL, 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_enqueue_grouped('regress_qg', 'k', NULL::text);
\echo :LAST_ERROR_SQLSTATE
SELECT pg_sleep(0.5), zk_queue_length('regress_qg') AS still_empty;

--
-- zk_queue_release_cluster: superuser only; nothing to release for a
-- cluster that never claimed; this cluster's own identifier is refused
--
SELECT zk_queue_release_cluster('1234567890123456789') AS released;
SELECT zk_queue_release_cluster(system_identifier::text) FROM pg_control_system();
\echo :LAST_ERROR_SQLSTATE
-- one run of this cluster (dead, unknown here: nothing to release); a bad run
SELECT zk_queue_release_cluster(system_identifier::text || '-0123456789abcdef') AS released
  FROM pg_control_system();
SELECT zk_queue_release_cluster('1234567890123456789-0123456789abcdeg');
\echo :LAST_ERROR_SQLSTATE
CREATE ROLE regress_queue_user;
SET ROLE regress_queue_user;
SELECT zk_queue_release_cluster('1234567890123456789');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_queue_user;

--
-- Every queue of this file in zk_queues, then emptied
--
SELECT queue, items, claimed, local_claims, local_waiting
  FROM zk_queues WHERE queue ~ '^regress_q[0-9]$' ORDER BY queue;
SELECT sum(zk_queue_purge(queue)) AS purged
  FROM zk_queues WHERE queue ~ '^regress_q[0-9]$';
SELECT count(*) AS queues, sum(items) AS items, sum(claimed) AS claimed,
       sum(local_claims) AS local_claims, sum(local_waiting) AS local_waiting
  FROM zk_queues WHERE queue ~ '^regress_q[0-9]$';

DROP FUNCTION wait_length(text, bigint);
DROP FUNCTION wait_queue_row(text, bigint, int);
SELECT dblink_disconnect('other');
