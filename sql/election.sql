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

-- Campaigns (issue 41): a session stands in an election of its namespace
\df zk_(campaign|session_campaign|try_campaign|try_session_campaign|resign|campaign_token|campaign_candidates|leader_wait)
SET zklock.namespace = 'regress_ns';
SELECT zk_path('campaign', 'regress_c'), zk_path('election', 'regress_c');
-- try, then resign, in one session
SELECT zk_try_session_campaign('regress_c');
SELECT zk_campaign_token('regress_c') > 0 AS leads;
SELECT state, "position", token = zk_campaign_token('regress_c') AS my_token,
       database, pid = pg_backend_pid() AS me
  FROM zk_campaign_candidates('regress_c');
-- a second campaign of the same session stacks on the first
SELECT zk_session_campaign('regress_c') = zk_campaign_token('regress_c') AS same_token;
-- the cluster's election of that name is not the campaign's
SELECT count(*) FROM zk_election_candidates('regress_c');
-- zklock.namespace cannot change under a campaign
SET zklock.namespace = 'regress_other';
\echo :LAST_ERROR_SQLSTATE
SELECT zk_resign('regress_c');
SELECT zk_campaign_token('regress_c') IS NULL AS no_longer;
SELECT count(*) FROM zk_campaign_candidates('regress_c');
SELECT zk_resign('regress_c');
-- transaction scope: ends with the transaction
BEGIN;
SELECT zk_campaign('regress_c') > 0 AS leads;
SELECT zk_try_campaign('regress_c');
COMMIT;
SELECT zk_campaign_token('regress_c') IS NULL AS over;
BEGIN;
SELECT zk_try_campaign('regress_c');
ROLLBACK;
SELECT zk_campaign_token('regress_c') IS NULL AS over;
SELECT zk_resign('regress_c');
-- a transaction-scope campaign resigned within it no longer decides its COMMIT
BEGIN;
SELECT zk_campaign('regress_c', '5s') > 0 AS leads;
SELECT zk_resign('regress_c');
SELECT zk_campaign_token('regress_c') IS NULL AS resigned;
COMMIT;
-- a savepoint rolled back withdraws what it campaigned for
BEGIN;
SAVEPOINT s;
SELECT zk_try_campaign('regress_c');
ROLLBACK TO SAVEPOINT s;
SELECT zk_campaign_token('regress_c') IS NULL AS withdrawn;
COMMIT;
-- zk_leader_wait: nobody leads, so a NULL known token times out with NULL
SELECT zk_leader_wait('regress_c', NULL, '100ms') IS NULL AS nobody;
-- a leader other than the known one is returned at once
SELECT zk_try_session_campaign('regress_c');
SELECT zk_leader_wait('regress_c') = zk_campaign_token('regress_c') AS current;
SELECT zk_leader_wait('regress_c', 1) = zk_campaign_token('regress_c') AS current;
-- the known leader still leads: its token again once the timeout passed
SELECT zk_leader_wait('regress_c', zk_campaign_token('regress_c'), '100ms')
       = zk_campaign_token('regress_c') AS unchanged;
SELECT zk_resign('regress_c');
-- the known leader gone, nobody leads: NULL at once
SELECT zk_leader_wait('regress_c', 12345, '10s') IS NULL AS nobody;
SELECT zk_leader_wait(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_leader_wait('regress_c', NULL, '-1s');
\echo :LAST_ERROR_SQLSTATE
-- a campaign and a lock of one name are two things
SELECT zk_try_session_campaign('regress_c'), zk_try_session_lock('regress_c');
SELECT zk_unlock('regress_c'), zk_campaign_token('regress_c') > 0 AS still_leads;
-- zk_unlock_all lets go of locks, not of campaigns
SELECT zk_try_session_lock('regress_c');
SELECT zk_unlock_all();
SELECT zk_lock_token('regress_c') IS NULL AS unlocked, zk_campaign_token('regress_c') > 0 AS still_leads;
SELECT zk_resign('regress_c');
-- bad input
SELECT zk_campaign(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_try_campaign('');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_session_campaign(repeat('x', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT zk_campaign('regress_c', '-1s');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_resign(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT zk_campaign_token(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_campaign_candidates(NULL);
\echo :LAST_ERROR_SQLSTATE
-- nothing is executable by PUBLIC; the group campaign grants it
CREATE ROLE regress_campaigner;
SET ROLE regress_campaigner;
SELECT zk_try_campaign('regress_c');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_resign('regress_c');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_campaign_token('regress_c');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM zk_campaign_candidates('regress_c');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_leader_wait('regress_c', NULL, '1s');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT zk_grant('campaign', 'regress_campaigner');
SET ROLE regress_campaigner;
SELECT zk_try_session_campaign('regress_c');
SELECT zk_campaign_token('regress_c') > 0 AS leads;
SELECT zk_resign('regress_c');
-- reading the candidates and waiting for a leader are the group election's
SELECT * FROM zk_campaign_candidates('regress_c');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_leader_wait('regress_c', NULL, '1s');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- in the root namespace a campaign would stand in a cluster's election:
-- superusers only
SET zklock.namespace = '';
SELECT zk_path('campaign', 'regress_c') = zk_path('election', 'regress_c') AS same_path;
SET ROLE regress_campaigner;
SELECT zk_try_campaign('regress_c');
\echo :LAST_ERROR_SQLSTATE
SELECT zk_session_campaign('regress_c', '1s');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT zk_try_session_campaign('regress_root_c');
SELECT zk_resign('regress_root_c');
SELECT zk_revoke('campaign', 'regress_campaigner');
DROP ROLE regress_campaigner;
