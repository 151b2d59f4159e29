-- Leases (kazoo's NonBlockingLease): taken, renewed by the same holder,
-- refused to another until the end, taken by another after it; the holder
-- as ZooKeeper has it; every bad input with its SQLSTATE, creating nothing.
-- Every name here starts with 'regress_l'.
\set VERBOSITY default
\df zk_(try_lease|lease_holder)
-- this server's default holder takes it, and renews it
SELECT zk_try_lease('regress_lease', '50 seconds');
SELECT zk_try_lease('regress_lease', '50 seconds');
SELECT this_server, expired,
       ends_at BETWEEN now() + interval '45 seconds' AND clock_timestamp() + interval '51 seconds' AS ends_in_50s
  FROM zk_lease_holder('regress_lease');
-- another holder is refused while it lasts
SELECT zk_try_lease('regress_lease', '50 seconds', 'someone else');
SELECT this_server FROM zk_lease_holder('regress_lease');
-- a named holder, for five seconds; after it, another takes it
SELECT zk_try_lease('regress_lease_short', '5 seconds', 'holder one');
SELECT zk_try_lease('regress_lease_short', '1 second', 'holder two');
SELECT holder, this_server FROM zk_lease_holder('regress_lease_short');
SELECT pg_sleep(5.1);
SELECT expired FROM zk_lease_holder('regress_lease_short');
SELECT zk_try_lease('regress_lease_short', '1 minute', 'holder two');
SELECT holder, expired FROM zk_lease_holder('regress_lease_short');
-- a lease outlives the transaction that took it, even a rolled-back one
BEGIN;
SELECT zk_try_lease('regress_lease_tx', '1 minute', 'in a transaction');
ROLLBACK;
SELECT holder FROM zk_lease_holder('regress_lease_tx');
-- any text names a lease and a holder
SELECT zk_try_lease('regress_lease/ü..', '1 minute', 'Überweisung €');
SELECT holder FROM zk_lease_holder('regress_lease/ü..');
-- a lease nobody took: no row
SELECT count(*) FROM zk_lease_holder('regress_lease_nobody');
-- bad input: clear errors, nothing created
SELECT zk_try_lease(NULL, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lease('regress_lbad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lease('', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lease(repeat('x', 256), '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lease('regress_lbad', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lease('regress_lbad', '-1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lease('regress_lbad', '0.5 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lease('regress_lbad', '101 years');
\echo :LAST_ERROR_SQLSTATE
-- zklock.max_lease_duration (default 1 day) bounds the duration
SHOW zklock.max_lease_duration;
SELECT zk_try_lease('regress_lbad', '1 day 1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lease('regress_lbad', '1 minute', '');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_lease('regress_lbad', '1 minute', repeat('h', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_lease_holder(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_lease_holder('');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM zk_lease_holder('regress_lbad');
-- zk_status counts them
SELECT leases_taken >= 5 AS taken, leases_refused >= 2 AS refused FROM zk_status();
-- zk_leases: every lease in ZooKeeper; the bad inputs above created none
SELECT name, CASE WHEN this_server THEN 'this server' ELSE holder END AS holder,
       ends_at > now() - interval '1 minute' AS ends, expired IS NOT NULL AS known
  FROM zk_leases WHERE name LIKE 'regress\_l%' ORDER BY name;
