-- Counters (kazoo's Counter): add, read, compare-and-set, drop; overflow,
-- bad input and privileges, each with its SQLSTATE and nothing written.
-- Every name here starts with 'regress_c'.
\set VERBOSITY default
\df zk_counter_*
-- start clean (a previous run's counters)
SELECT zk_counter_drop(n) IS NOT NULL AS dropped
  FROM unnest(ARRAY['regress_counter', 'regress_cset', 'regress_cbig', 'regress_c/ü..']) n;
-- a counter that was never written reads 0; an add creates it
SELECT zk_counter_get('regress_counter');
SELECT zk_counter_add('regress_counter');
SELECT zk_counter_add('regress_counter', 41);
SELECT zk_counter_add('regress_counter', -2);
SELECT zk_counter_add('regress_counter', 0);
SELECT zk_counter_get('regress_counter');
-- its node, for kazoo's Counter
SELECT zk_path('counter', 'regress_counter');
-- an add outlives the transaction that made it, even a rolled-back one
BEGIN;
SELECT zk_counter_add('regress_counter', 100);
ROLLBACK;
SELECT zk_counter_get('regress_counter');
-- compare-and-set: written only when the value is the one expected
SELECT zk_counter_set('regress_cset', 10, 1);
SELECT zk_counter_get('regress_cset');
SELECT zk_counter_set('regress_cset', 10, 0);
SELECT zk_counter_get('regress_cset');
SELECT zk_counter_set('regress_cset', 20, 10);
SELECT zk_counter_set('regress_cset', 30, 10);
SELECT zk_counter_get('regress_cset');
-- bigint's ends: reached, then refused with 22003 and nothing written
SELECT zk_counter_set('regress_cbig', 9223372036854775806, 0);
SELECT zk_counter_add('regress_cbig');
SELECT zk_counter_add('regress_cbig');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_counter_get('regress_cbig');
SELECT zk_counter_set('regress_cbig', -9223372036854775807, 9223372036854775807);
SELECT zk_counter_add('regress_cbig', -1);
SELECT zk_counter_add('regress_cbig', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_counter_add('regress_cbig', 9223372036854775807);
SELECT zk_counter_get('regress_cbig');
-- any text names a counter
SELECT zk_counter_add('regress_c/ü..', 7);
SELECT zk_counter_get('regress_c/ü..');
-- bad input: clear errors, nothing created
SELECT zk_counter_add(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_counter_add('regress_cbad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_counter_add('');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_counter_add(repeat('x', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_counter_get(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_counter_set('regress_cbad', NULL, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_counter_set('regress_cbad', 1, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_counter_drop(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_counter_get('regress_cbad');
SELECT zk_counter_drop('regress_cbad');
-- drop: the node goes; the counter starts again from 0
SELECT zk_counter_drop('regress_counter');
SELECT zk_counter_drop('regress_counter');
SELECT zk_counter_get('regress_counter');
SELECT zk_counter_add('regress_counter', 5);
-- privileges: PUBLIC may call none of them; the counter group may call
-- all but the drop, which is the admin group's
CREATE ROLE regress_counter_user;
SET ROLE regress_counter_user;
SELECT zk_counter_get('regress_counter');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT zk_grant('counter', 'regress_counter_user');
SET ROLE regress_counter_user;
SELECT zk_counter_add('regress_counter', 2);
SELECT zk_counter_set('regress_counter', 0, 7);
SELECT zk_counter_get('regress_counter');
SELECT zk_counter_drop('regress_counter');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT zk_revoke('counter', 'regress_counter_user');
DROP ROLE regress_counter_user;
-- clean up
SELECT zk_counter_drop(n)
  FROM unnest(ARRAY['regress_counter', 'regress_cset', 'regress_cbig', 'regress_c/ü..']) n;
