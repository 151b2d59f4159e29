-- The barrier recipes' SQL surface, from one session and a dblink connection
-- 'other': the nine functions, gates closed and opened at COMMIT only
-- (ROLLBACK and savepoints change nothing), zk_gate_wait, arrivals recorded
-- at COMMIT only, idempotent, zk_await, zk_arrivals, zk_arrivals_reset, names
-- and participants of any text up to 255 bytes, waits ended by
-- statement_timeout (lock_timeout does not end them), a double barrier of
-- two sessions (enter, timeouts, leave), PREPARE TRANSACTION, and every bad
-- input with its SQLSTATE, creating nothing.
-- Every name here starts with 'regress_b'.
SELECT dblink_connect('other', 'dbname=' || current_database());
\set VERBOSITY default

-- the surface: the functions (all volatile, parallel unsafe, not strict:
-- a NULL argument is an error, not a NULL result)
\df zk_(barrier|gate|arriv|await)*
SELECT oid::regprocedure AS function, provolatile, proparallel, proisstrict
  FROM pg_proc WHERE proname ~ '^zk_(barrier_|gate_|arriv|await)'
 ORDER BY oid::regprocedure::text;

-- gates: nothing before COMMIT, nothing after ROLLBACK
SELECT zk_gate_wait('regress_bgate', '0');
BEGIN;
SELECT zk_gate_close('regress_bgate');
SELECT zk_gate_wait('regress_bgate', '0');          -- not closed yet
ROLLBACK;
SELECT zk_gate_wait('regress_bgate', '0');
BEGIN;
SELECT zk_gate_close('regress_bgate');
SAVEPOINT s;
SELECT zk_gate_open('regress_bgate');
ROLLBACK TO SAVEPOINT s;                             -- the open is undone
COMMIT;
SELECT zk_gate_wait('regress_bgate', '200ms');       -- closed: false after the timeout
SELECT * FROM dblink('other', $$SELECT zk_gate_wait('regress_bgate', '0')$$) AS t(open boolean);
SELECT zk_gate_close('regress_bgate');               -- closing a closed gate: no change
-- a waiter in the other session wakes when the open commits, not before
SELECT dblink_send_query('other', $$SELECT zk_gate_wait('regress_bgate', '30s')$$);
BEGIN;
SELECT zk_gate_open('regress_bgate');
SELECT pg_sleep(0.3);
SELECT dblink_is_busy('other');                      -- still waiting
COMMIT;
SELECT * FROM dblink_get_result('other') AS t(open boolean);
SELECT * FROM dblink_get_result('other') AS t(open boolean);
SELECT zk_gate_open('regress_bgate');                -- opening an open gate: no change
SELECT zk_gate_wait('regress_bgate');
-- a closed gate with timeout '0': false at once
BEGIN;
SELECT zk_gate_close('regress_bgate');
COMMIT;
SELECT zk_gate_wait('regress_bgate', '0');
-- statement_timeout ends a wait without limit; lock_timeout does not
-- (a NULL timeout is no limit here)
SET lock_timeout = '100ms';
SET statement_timeout = '500ms';
SELECT zk_gate_wait('regress_bgate');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_wait('regress_bgate', NULL);
\echo :LAST_ERROR_SQLSTATE
RESET lock_timeout;
RESET statement_timeout;
SELECT zk_gate_open('regress_bgate');
SELECT zk_gate_wait('regress_bgate', '0');
-- names: any text of 1 to 255 bytes, each its own gate
BEGIN;
SELECT zk_gate_close('regress_bgate/..');
SELECT zk_gate_close('regress_bgate ü');
SELECT zk_gate_close('regress_b' || repeat('g', 246));
COMMIT;
SELECT zk_gate_wait('regress_bgate/..', '0') AS slash_dotdot, zk_gate_wait('regress_bgate ü', '0') AS unicode,
       zk_gate_wait('regress_b' || repeat('g', 246), '0') AS longest, zk_gate_wait('regress_bgate', '0') AS prefix,
       zk_gate_wait('..', '0') AS dotdot;
BEGIN;
SELECT zk_gate_open('regress_bgate/..');
SELECT zk_gate_open('regress_bgate ü');
SELECT zk_gate_open('regress_b' || repeat('g', 246));
COMMIT;
SELECT zk_gate_wait('regress_bgate/..', '0') AS slash_dotdot, zk_gate_wait('regress_bgate ü', '0') AS unicode,
       zk_gate_wait('regress_b' || repeat('g', 246), '0') AS longest;

-- arrivals
SELECT zk_arrivals_reset('regress_barr');
BEGIN;
SELECT zk_arrive('regress_barr', 'extract-a');
ROLLBACK;
SELECT zk_await('regress_barr', 1, '0');             -- rolled back: not arrived
BEGIN;
SELECT zk_arrive('regress_barr', 'extract-a');
SAVEPOINT s;
SELECT zk_arrive('regress_barr', 'extract-b');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT zk_arrive('regress_barr', 'extract-a');       -- twice is once
SELECT zk_arrive('regress_barr', 'Überweisung €');   -- any text names a participant
SELECT participant, cluster = (SELECT system_identifier::text FROM pg_control_system()) AS this_cluster,
       database = current_database() AS this_db, pid IS NOT NULL AS pid,
       arrived_at <= now() + interval '1 minute' AS arrived_at
  FROM zk_arrivals('regress_barr') ORDER BY participant;
SELECT zk_await('regress_barr', 2, '5s'), zk_await('regress_barr', 3, '200ms');
SELECT dblink_send_query('other', $$SELECT zk_await('regress_barr', 3, '30s')$$);
SELECT zk_arrive('regress_barr', 'extract-c');
SELECT * FROM dblink_get_result('other') AS t(arrived boolean);
SELECT * FROM dblink_get_result('other') AS t(arrived boolean);
SELECT zk_arrivals_reset('regress_barr');
SELECT count(*) FROM zk_arrivals('regress_barr');
SELECT zk_await('regress_barr', 1, '0');
-- zk_arrivals: where the arrival came from
SELECT zk_arrive('regress_barr', 'extract-d');
SELECT participant, port = current_setting('port')::int AS this_port, host <> '' AS has_host,
       pid = pg_backend_pid() AS this_backend
  FROM zk_arrivals('regress_barr');
-- a reset is at once, not undone by ROLLBACK; a second one removes nothing
BEGIN;
SELECT zk_arrivals_reset('regress_barr');
ROLLBACK;
SELECT count(*) FROM zk_arrivals('regress_barr');
SELECT zk_arrivals_reset('regress_barr');
-- names nobody used: no arrivals, nothing to reset
SELECT count(*) FROM zk_arrivals('regress_bnobody');
SELECT zk_arrivals_reset('regress_bnobody');
-- participants: any text of 1 to 255 bytes, read back as written
BEGIN;
SELECT zk_arrive('regress_barr2', '..');
SELECT zk_arrive('regress_barr2', 'a/b');
SELECT zk_arrive('regress_barr2', repeat('p', 255));
SELECT zk_arrive('regress_barr2', repeat('é', 127));
SELECT zk_arrive('regress_barr2', 'A');
SELECT zk_arrive('regress_barr2', 'a');
COMMIT;
SELECT octet_length(participant) AS bytes,
       CASE WHEN octet_length(participant) < 10 THEN participant END AS short,
       participant IN ('..', 'a/b', repeat('p', 255), repeat('é', 127), 'A', 'a') AS as_written
  FROM zk_arrivals('regress_barr2') ORDER BY octet_length(participant), participant COLLATE "C";
SELECT zk_await('regress_barr2', 6, '0'), zk_await('regress_barr2', 7, '0');
SELECT zk_arrivals_reset('regress_barr2');
-- statement_timeout ends zk_await without limit; lock_timeout does not
SET lock_timeout = '100ms';
SET statement_timeout = '500ms';
SELECT zk_await('regress_barr2', 1);
\echo :LAST_ERROR_SQLSTATE
RESET lock_timeout;
RESET statement_timeout;

-- a double barrier of two sessions
SELECT zk_barrier_enter('regress_bbar', 2, '200ms');  -- alone: false, withdrawn
SELECT zk_barrier_enter('regress_bbar', 2, '0');      -- looks once
SELECT dblink_send_query('other', $$SELECT zk_barrier_enter('regress_bbar', 2, '30s')$$);
SELECT zk_barrier_enter('regress_bbar', 2, '30s');
SELECT * FROM dblink_get_result('other') AS t(entered boolean);
SELECT * FROM dblink_get_result('other') AS t(entered boolean);
SELECT zk_barrier_enter('regress_bbar', 2);          -- already a member
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_leave('regress_bbar', '200ms');    -- the other is still in: false
SELECT zk_barrier_leave('regress_bbar');             -- no longer a member
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM dblink('other', $$SELECT zk_barrier_leave('regress_bbar', '5s')$$) AS t(left_ boolean);
SELECT zk_barrier_enter('regress_bbar', 1);          -- a new round, alone
SELECT zk_barrier_leave('regress_bbar', '5s');

-- bad input: clear errors, nothing created
-- (each error's SQLSTATE is echoed after it)
-- NULL arguments: 22004
SELECT zk_barrier_enter(NULL, 2);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_enter('regress_bbad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_leave(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_close(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_open(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_wait(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrive(NULL, 'p');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrive('regress_bbad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_await(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_await('regress_bbad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrivals(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrivals_reset(NULL);
\echo :LAST_ERROR_SQLSTATE
-- empty names and participants: 22023
SELECT zk_barrier_enter('', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_leave('');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_close('');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_open('');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_wait('', '1s');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrive('', 'p');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrive('regress_bbad', '');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_await('', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_arrivals('');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrivals_reset('');
\echo :LAST_ERROR_SQLSTATE
-- names and participants over 255 bytes in UTF-8: 22023
SELECT zk_barrier_enter(repeat('x', 256), 2);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_leave(repeat('x', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_close(repeat('é', 128));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_open(repeat('x', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_wait(repeat('x', 256), '0');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrive(repeat('é', 128), 'p');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrive('regress_bbad', repeat('p', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrive('regress_bbad', repeat('é', 128));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_await(repeat('x', 256), 1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_arrivals(repeat('x', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrivals_reset(repeat('x', 256));
\echo :LAST_ERROR_SQLSTATE
-- parties below 1: 22023
SELECT zk_barrier_enter('regress_bbad', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_enter('regress_bbad', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_await('regress_bbad', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_await('regress_bbad', -2147483648);
\echo :LAST_ERROR_SQLSTATE
-- negative or out-of-range timeouts: 22023
SELECT zk_barrier_enter('regress_bbad', 2, '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_leave('regress_bbad', '-1 ms');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_wait('regress_bbad', '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_await('regress_bbad', 1, '-1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_await('regress_bbad', 1, '200 years');
\echo :LAST_ERROR_SQLSTATE
-- PREPARE TRANSACTION after a gate change or an arrival: 0A000, and the
-- transaction is rolled back
BEGIN;
SELECT zk_arrive('regress_bbad', 'p');
PREPARE TRANSACTION 'regress_b';
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT zk_gate_close('regress_bbad');
PREPARE TRANSACTION 'regress_b';
\echo :LAST_ERROR_SQLSTATE
-- an error inside a savepoint rolled back leaves nothing for COMMIT
BEGIN;
SAVEPOINT s;
SELECT zk_arrive('regress_bbad', repeat('p', 256));
ROLLBACK TO SAVEPOINT s;
SAVEPOINT t;
SELECT zk_gate_close('regress_bbad');
SELECT 1/0;
ROLLBACK TO SAVEPOINT t;
COMMIT;
-- none of these created anything: no arrival, the gate open, no member
SELECT count(*) FROM zk_arrivals('regress_bbad');
SELECT zk_gate_wait('regress_bbad', '0');
SELECT zk_barrier_enter('regress_bbad', 2, '0');
SELECT count(*) AS prepared FROM pg_prepared_xacts;
SELECT dblink_disconnect('other');
