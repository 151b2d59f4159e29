/*-------------------------------------------------------------------------
 *
 * election_sql.c
 *	  The election recipe's SQL functions: zk_is_leader and the zk_elections
 *	  view.  They only read the worker's candidacies (lock entries of family
 *	  ZKF_ELECTIONS, election.c) in shared memory.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "lock/lock.h"
#include "election.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(zk_is_leader);
PG_FUNCTION_INFO_V1(zk_elections_internal);

/*
 * zk_is_leader(name text) RETURNS boolean
 */
Datum
zk_is_leader(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "election name", &len);
	bool		leads = false;
	int			i;

	zk_require_shmem();
	zk_backend_lock(LW_SHARED);
	if (zk_ctl->conn_state == ZKC_CONNECTED && zk_ctl->session_timeout > 0 &&
		GetCurrentTimestamp() <=
		TimestampTzPlusMilliseconds(zk_ctl->last_contact, zk_ctl->session_timeout * 2 / 3))
	{
		for (i = 0; i < zk_ctl->max_entries && !leads; i++)
		{
			ZkEntry    *e = zk_entry(i);

			leads = (e->state == ZKE_HELD && e->kind == ZKK_LOCK &&
					 e->family == ZKF_ELECTIONS && e->outcome == ZKO_GRANTED &&
					 !e->released && pg_atomic_read_u32(&e->release_req) == 0 &&
					 e->pid == zk_ctl->worker_pid && e->session == zk_ctl->session_id &&
					 strcmp(e->name, name) == 0);
		}
	}
	LWLockRelease(zk_ctl->lock);
	PG_RETURN_BOOL(leads);
}

/*
 * zk_elections_internal() -> this cluster's candidacies, for the
 * zk_elections view: (name, is_leader, token, standing_since, leading_since)
 */
/* SQL: zk_leader() */
Datum
zk_elections_internal(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	typedef struct Row
	{
		char		name[ZKLOCK_NAME_MAX + 1];
		bool		leading;
		int64		token;
		TimestampTz requested_at;
		TimestampTz granted_at;
	} Row;
	Row		   *rows;
	int			n = 0;
	int			i;
	bool		fresh;

	InitMaterializedSRF(fcinfo, 0);
	zk_require_shmem();
	rows = palloc(sizeof(Row) * ELECTION_MAX);
	zk_backend_lock(LW_SHARED);
	fresh = zk_ctl->conn_state == ZKC_CONNECTED && zk_ctl->session_timeout > 0 &&
		GetCurrentTimestamp() <=
		TimestampTzPlusMilliseconds(zk_ctl->last_contact, zk_ctl->session_timeout * 2 / 3);
	for (i = 0; i < zk_ctl->max_entries && n < ELECTION_MAX; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->state == ZKE_FREE || e->kind != ZKK_LOCK || e->family != ZKF_ELECTIONS ||
			e->released || pg_atomic_read_u32(&e->release_req) != 0 ||
			e->pid != zk_ctl->worker_pid)
			continue;
		strlcpy(rows[n].name, e->name, sizeof(rows[n].name));
		rows[n].leading = fresh && e->state == ZKE_HELD && e->outcome == ZKO_GRANTED &&
			e->session == zk_ctl->session_id;
		rows[n].token = rows[n].leading ? e->token : 0;
		rows[n].requested_at = e->requested_at;
		rows[n].granted_at = rows[n].leading ? e->granted_at : 0;
		n++;
	}
	LWLockRelease(zk_ctl->lock);
	for (i = 0; i < n; i++)
	{
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};
		char	   *nm = zk_utf8_to_server_noerror(rows[i].name, strlen(rows[i].name));

		if (nm == NULL)
			nulls[0] = true;
		else
			values[0] = CStringGetTextDatum(nm);
		values[1] = BoolGetDatum(rows[i].leading);
		values[2] = Int64GetDatum(rows[i].token);
		nulls[2] = !rows[i].leading;
		values[3] = TimestampTzGetDatum(rows[i].requested_at);
		values[4] = TimestampTzGetDatum(rows[i].granted_at);
		nulls[4] = !rows[i].leading || rows[i].granted_at == 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
