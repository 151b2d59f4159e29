-- The barrier recipes' SQL surface, from one session and a dblink connection
-- 'other': gates closed and opened at COMMIT only (ROLLBACK and savepoints
-- change nothing), zk_gate_wait, arrivals recorded at COMMIT only, idempotent,
-- zk_await, zk_arrivals, zk_arrivals_reset, a double barrier of two sessions
-- (enter, timeouts, leave), and every bad input with its SQLSTATE.
-- Every name here starts with 'regress_b'.
SELECT dblink_connect('other', 'dbname=' || current_database());
\set VERBOSITY default

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

-- a double barrier of two sessions
SELECT zk_barrier_enter('regress_bbar', 2, '200ms');  -- alone: false, withdrawn
SELECT zk_barrier_enter('regress_bbar', 2, '0');      -- looks once
SELECT dblink_send_query('other', $$SELECT zk_barrier_enter('regress_bbar', 2, '30s')$$);
SELECT zk_barrier_enter('regress_bbar', 2, '30s');
SELECT * FROM dblink_get_result('other') AS t(entered boolean);
SELECT * FROM dblink_get_result('other') AS t(entered boolean);
SELECT zk_barrier_enter('regress_bbar', 2);          -- already a member
SELECT zk_barrier_leave('regress_bbar', '200ms');    -- the other is still in: false
SELECT zk_barrier_leave('regress_bbar');             -- no longer a member
SELECT * FROM dblink('other', $$SELECT zk_barrier_leave('regress_bbar', '5s')$$) AS t(left_ boolean);
SELECT zk_barrier_enter('regress_bbar', 1);          -- a new round, alone
SELECT zk_barrier_leave('regress_bbar', '5s');

-- bad input: clear errors, nothing created
-- (each error's SQLSTATE is echoed after it)
SELECT zk_barrier_enter(NULL, 2);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_enter('', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_enter(repeat('x', 256), 2);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_enter('regress_bbad', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_enter('regress_bbad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_enter('regress_bbad', 2, '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_barrier_leave(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_close(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_open('');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_gate_wait('regress_bbad', '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrive('regress_bbad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrive('regress_bbad', '');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrive(repeat('é', 128), 'p');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_await('regress_bbad', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrivals(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_arrivals_reset('');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT zk_arrive('regress_bbad', 'p');
PREPARE TRANSACTION 'regress_b';
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM zk_arrivals('regress_bbad');
SELECT zk_gate_wait('regress_bbad', '0');
SELECT dblink_disconnect('other');
