-- Leader election: this instance stands in no election (zklock.elections
-- is empty), so it leads none; nobody stands in these; bad input.
\set VERBOSITY default
\df zk_(is_leader|leader|election_candidates)
SHOW zklock.elections;
SELECT * FROM zk_elections;
SELECT zk_is_leader('regress_e');
SELECT count(*) FROM zk_leader('regress_e');
SELECT count(*) FROM zk_election_candidates('regress_e');
SELECT zk_is_leader(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_is_leader('');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_is_leader(repeat('x', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_leader('');
\echo :LAST_ERROR_SQLSTATE
-- the setting is read at reload (SIGHUP): it cannot be SET in a session
SET zklock.elections = 'cron';
\echo :LAST_ERROR_SQLSTATE
