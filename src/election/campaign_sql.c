/*-------------------------------------------------------------------------
 *
 * campaign_sql.c
 *	  Elections a SQL session campaigns in (issue 41): zk_campaign and
 *	  zk_session_campaign (wait to lead, return the fencing token),
 *	  zk_try_campaign and zk_try_session_campaign (lead now or withdraw),
 *	  zk_resign and zk_campaign_token.  Run in backends.
 *
 *	  A campaign is a lock of family ZKF_ELECTIONS (lock_backend.c,
 *	  zk_acquire_in): an exclusive contender <guid>__lock__<seq> under
 *	  <root>/elections/<qualified name>, kazoo's Election layout, so it is
 *	  held, stacked, let go at the end of its scope, lost with the session
 *	  and checked before COMMIT exactly as a lock is.  The name is qualified
 *	  with the session's namespace as a lock's name is: a tenant's
 *	  campaigns are <root>/elections/<namespace>:<name>, which no name of
 *	  zklock.elections can be (':' is always escaped there).  Only in the
 *	  root namespace is a campaign's path a cluster's election's, so there
 *	  only a superuser may campaign (campaign_allowed).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "lock/lock.h"
#include "election.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/*
 * May this session stand in election "name" of its namespace?  In the
 * root namespace the campaign's path is the one the clusters' elections
 * (zklock.elections, election.c) stand in, on every cluster that lists the
 * name: only a superuser may stand there.
 */
static void
campaign_allowed(const char *name, int len)
{
	if (zk_current_namespace()[0] != '\0' || superuser())
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to campaign in zookeeper election \"%s\" of the root namespace",
					zk_display_name(pnstrdup(name, len))),
			 errdetail("With zklock.namespace = '', a campaign stands in <zklock.root>/elections/<name>, where the clusters' elections of zklock.elections stand."),
			 errhint("Ask a superuser to give this database or role a namespace (ALTER DATABASE ... SET zklock.namespace), or campaign as a superuser.")));
}

/*
 * zk_campaign, zk_session_campaign: the token once this session leads;
 * zk_try_campaign, zk_try_session_campaign (try_only): whether it leads
 * now (else it withdrew)
 */
static Datum
campaign_common(FunctionCallInfo fcinfo, ZkScope scope, bool try_only)
{
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "election name", &len);
	int64		timeout_ms = try_only ? -1 : zk_arg_timeout_ms(fcinfo, 1);
	MemoryContext cxt = CurrentMemoryContext;
	volatile int64 token = 0;
	volatile bool leads = false;

	zk_require_shmem();
	campaign_allowed(name, len);
	PG_TRY();
	{
		bool		acquired;

		token = zk_acquire_in(ZKF_ELECTIONS, name, len, ZKM_EXCLUSIVE, scope,
							  try_only, timeout_ms, &acquired);
		leads = acquired;
	}
	PG_CATCH();
	{
		ErrorData  *ed;

		MemoryContextSwitchTo(cxt);
		ed = CopyErrorData();
		if (ed->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		/* the lock's words for a wait that timed out: an election's */
		FlushErrorState();
		ed->message = psprintf("timed out waiting to lead zookeeper election \"%s\"",
							   zk_display_name(pnstrdup(name, len)));
		ed->detail = psprintf("Waited " INT64_FORMAT " ms; another candidate leads.",
							  timeout_ms);
		ed->hint = pstrdup("Raise the timeout, or campaign again later; zk_campaign_candidates() shows who leads.");
		ReThrowError(ed);
	}
	PG_END_TRY();
	if (try_only)
		PG_RETURN_BOOL(leads);
	PG_RETURN_INT64(token);
}

/* SQL: the campaigns, by scope, waiting or not */
ZK_SQL_FUNC(zk_campaign, campaign_common(fcinfo, ZKS_TRANSACTION, false))
ZK_SQL_FUNC(zk_session_campaign, campaign_common(fcinfo, ZKS_SESSION, false))
ZK_SQL_FUNC(zk_try_campaign, campaign_common(fcinfo, ZKS_TRANSACTION, true))
ZK_SQL_FUNC(zk_try_session_campaign, campaign_common(fcinfo, ZKS_SESSION, true))

/*
 * zk_resign(name): let go of this session's campaign of the name, of
 * either scope; false when it had none
 */
static Datum
resign_common(FunctionCallInfo fcinfo)
{
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "election name", &len);

	zk_require_shmem();
	PG_RETURN_BOOL(zk_campaign_resign(name, len));
}

ZK_SQL_FUNC(zk_resign, resign_common(fcinfo))

/*
 * zk_campaign_token(name): the fencing token while this session leads the
 * election, NULL otherwise (not campaigning, lost, or the worker's session
 * not connected and fresh)
 */
static Datum
campaign_token_common(FunctionCallInfo fcinfo)
{
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "election name", &len);
	bool		leads;
	int64		token;

	zk_require_shmem();
	token = zk_campaign_leading(name, len, &leads);
	if (!leads)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

ZK_SQL_FUNC(zk_campaign_token, campaign_token_common(fcinfo))

/*
 * zk_leader_wait(name, known_token, timeout): once the campaign's election
 * is led by someone other than the leader whose token the caller knows
 * (NULL: nobody leads), the leader's token, NULL when nobody leads; the
 * known token again when the timeout passed first (NULL: no limit).
 *
 * Who leads is read as zk_campaign_candidates reads it; the wait between
 * two reads watches the leader's node only (leader_wait.c), so watchers
 * are woken by a change of leader, not by every candidate that comes or
 * goes.
 */
static Datum
leader_wait_common(FunctionCallInfo fcinfo)
{
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "election name", &len);
	bool		known_null = PG_ARGISNULL(1);
	int64		known = known_null ? 0 : PG_GETARG_INT64(1);
	int64		timeout_ms = zk_arg_wait_ms(fcinfo, 2);
	TimestampTz deadline = 0;

	zk_require_shmem();
	if (timeout_ms >= 0)
		deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	for (;;)
	{
		char		node[ZKLOCK_NODE_MAX + 1];
		int64		token = 0;
		bool		leads;
		int64		left = -1;

		CHECK_FOR_INTERRUPTS();
		leads = zk_campaign_leader(name, len, &token, node, sizeof(node));
		if (leads == known_null || (leads && token != known))
		{
			/* another leader than the one known, or none where one was */
			if (!leads)
				PG_RETURN_NULL();
			PG_RETURN_INT64(token);
		}
		if (deadline != 0)
		{
			long		secs;
			int			usecs;

			TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
			left = (int64) secs * 1000 + usecs / 1000;
			if (left <= 0)
				break;
		}
		if (leads && node[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("cannot wait for the leader of zookeeper election \"%s\"",
							zk_display_name(pnstrdup(name, len))),
					 errdetail("The leader's node name is longer than %d bytes; another client made it.",
							   ZKLOCK_NODE_MAX),
					 errhint("Have that client stand with a shorter node name, or poll zk_campaign_candidates().")));
		if (!zk_leader_wait_change(name, len, leads ? node : NULL, left))
			break;				/* the timeout passed */
	}
	/* the timeout passed: the leader is still the known one */
	if (known_null)
		PG_RETURN_NULL();
	PG_RETURN_INT64(known);
}

ZK_SQL_FUNC(zk_leader_wait, leader_wait_common(fcinfo))
