/*-------------------------------------------------------------------------
 *
 * lock_sql.c
 *	  SQL entry points of the lock recipe: the zk_lock families, tokens,
 *	  zk_lock_holders and zk_locks.  Run in backends: check arguments, then
 *	  hand over to lock_backend.c.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "lock.h"
#include "semaphore/semaphore.h"

#include <errno.h>

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"
#include "utils/timestamp.h"

/*
 * The max_hold argument argno, if the function has it (1.0's have not), in
 * milliseconds for the next acquisition (zk_lock_call_max_hold_ms): NULL
 * leaves zklock.max_hold's bound, which a longer one cannot pass
 * (zk_acquire).  Checked before anything is asked.
 */
static void
arg_max_hold(FunctionCallInfo fcinfo, int argno)
{
	Interval   *iv;
	int64		usecs;

	zk_lock_call_max_hold_ms = 0;
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return;
	iv = PG_GETARG_INTERVAL_P(argno);
	/* each part bounded first, so that their sum cannot overflow */
	if (iv->month < -1200 || iv->month > 1200 ||
		iv->day < -36600 || iv->day > 36600 ||
		iv->time < -36600 * USECS_PER_DAY || iv->time > 36600 * USECS_PER_DAY)
		usecs = -1;
	else
		usecs = iv->time + (int64) iv->day * USECS_PER_DAY +
			(int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (usecs < 1000 || usecs > (int64) 36525 * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock max_hold must be between 1 millisecond and 100 years"),
				 errdetail("max_hold was %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(iv)))),
				 errhint("Give how long the lock may be held at most, or NULL to keep zklock.max_hold's bound.")));
	zk_lock_call_max_hold_ms = usecs / 1000;
}

/*
 * zk_lock, zk_lock_shared, zk_session_lock, zk_session_lock_shared: the
 * token; and the zk_try_* family (try_only): whether it was taken
 */
static Datum
lock_common(FunctionCallInfo fcinfo, bool key, ZkMode mode, ZkScope scope,
			bool try_only)
{
	char	   *name;
	int			len;
	int64		token;
	int64		timeout_ms;
	bool		acquired;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();		/* as a strict function would */
	name = zk_arg_name(fcinfo, key, &len);
	timeout_ms = try_only ? -1 : zk_arg_timeout_ms(fcinfo, 1);
	arg_max_hold(fcinfo, 2);
	token = zk_acquire(name, len, mode, scope, try_only, timeout_ms, &acquired);
	if (try_only)
		PG_RETURN_BOOL(acquired);
	PG_RETURN_INT64(token);
}

/* zk_unlock(_shared)(_key): let go of one session-scope hold; false if none */
static Datum
unlock_common(FunctionCallInfo fcinfo, bool key, ZkMode mode)
{
	char	   *name;
	int			len;

	name = zk_arg_name(fcinfo, key, &len);
	PG_RETURN_BOOL(zk_release(name, len, mode));
}

/* SQL: zk_unlock and zk_unlock_shared, by name or _key */
ZK_SQL_FUNC(zk_unlock, unlock_common(fcinfo, false, ZKM_EXCLUSIVE))
ZK_SQL_FUNC(zk_unlock_key, unlock_common(fcinfo, true, ZKM_EXCLUSIVE))
ZK_SQL_FUNC(zk_unlock_shared, unlock_common(fcinfo, false, ZKM_SHARED))
ZK_SQL_FUNC(zk_unlock_shared_key, unlock_common(fcinfo, true, ZKM_SHARED))

/*
 * The names of a multi-lock's array argument (text[] or bigint[]) in UTF-8,
 * as zk_arg_name makes one: one dimension, no NULL element.  Returns how
 * many; *lbound is the array's lower bound (1 for an empty one), so that
 * messages and the tokens use the caller's subscripts ('[0:1]={a,b}').
 */
static int
array_names(FunctionCallInfo fcinfo, bool key, char ***names, int **lens,
			int *lbound)
{
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(0);
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("the zookeeper lock names must be a one-dimensional array"),
				 errdetail("The array has %d dimensions.", ARR_NDIM(arr)),
				 errhint("Pass the names as one flat array, e.g. ARRAY['a', 'b'].")));
	*lbound = ARR_NDIM(arr) == 1 ? ARR_LBOUND(arr)[0] : 1;
	if (key)
		deconstruct_array(arr, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
						  TYPALIGN_DOUBLE, &elems, &nulls, &n);
	else
		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT,
						  &elems, &nulls, &n);
	*names = palloc(Max(n, 1) * sizeof(char *));
	*lens = palloc(Max(n, 1) * sizeof(int));
	for (i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("a zookeeper lock %s in the array is null", key ? "key" : "name"),
					 errdetail("Element %d of the array is NULL.", *lbound + i),
					 errhint("Leave NULL elements out of the array; nothing was locked.")));
		if (key)
		{
			(*names)[i] = psprintf(INT64_FORMAT, DatumGetInt64(elems[i]));
			(*lens)[i] = strlen((*names)[i]);
		}
		else
		{
			text	   *t = DatumGetTextPP(elems[i]);
			int			rawlen = VARSIZE_ANY_EXHDR(t);

			/* refuse absurd lengths before converting anything */
			if (rawlen > ZKLOCK_NAME_MAX)
				zk_check_name("lock name", rawlen);
			(*names)[i] = zk_name_to_utf8(VARDATA_ANY(t), rawlen, &(*lens)[i]);
		}
	}
	return n;
}

/*
 * zk_lock(text[]) and its family: every name or none, the tokens in the
 * array's order (a bigint[]), or for the tries whether all were taken.
 */
static Datum
lock_all_common(FunctionCallInfo fcinfo, bool key, ZkMode mode, ZkScope scope,
				bool try_only)
{
	char	  **names;
	int		   *lens;
	int64	   *tokens;
	Datum	   *elems;
	int64		timeout_ms;
	int			n;
	int			lbound;
	int			i;
	bool		all;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();		/* as a strict function would */
	n = array_names(fcinfo, key, &names, &lens, &lbound);
	timeout_ms = try_only ? -1 : zk_arg_timeout_ms(fcinfo, 1);
	arg_max_hold(fcinfo, 2);
	tokens = palloc0(Max(n, 1) * sizeof(int64));
	all = zk_acquire_all(names, lens, n, mode, scope, try_only, timeout_ms, tokens);
	if (try_only)
		PG_RETURN_BOOL(all);
	elems = palloc(Max(n, 1) * sizeof(Datum));
	for (i = 0; i < n; i++)
		elems[i] = Int64GetDatum(tokens[i]);
	/* subscripted as the names are: tokens[k] is names[k]'s token */
	PG_RETURN_ARRAYTYPE_P(construct_md_array(elems, NULL, 1, &n, &lbound, INT8OID,
											 sizeof(int64), FLOAT8PASSBYVAL,
											 TYPALIGN_DOUBLE));
}

/* zk_unlock(text[]) and zk_unlock_shared(text[]) */
static Datum
unlock_all_common(FunctionCallInfo fcinfo, bool key, ZkMode mode)
{
	char	  **names;
	int		   *lens;
	int			lbound;
	int			n = array_names(fcinfo, key, &names, &lens, &lbound);

	PG_RETURN_BOOL(zk_release_all_of(names, lens, n, mode));
}

/*
 * SQL: each lock function in its four forms: by name, by key (_key), and
 * several at once by names (_all) or keys (_all_key)
 */
#define ZK_LOCK_FAMILY(fn, mode, scope, try_only) \
	ZK_SQL_FUNC(fn, lock_common(fcinfo, false, mode, scope, try_only)) \
	ZK_SQL_FUNC(fn##_key, lock_common(fcinfo, true, mode, scope, try_only)) \
	ZK_SQL_FUNC(fn##_all, lock_all_common(fcinfo, false, mode, scope, try_only)) \
	ZK_SQL_FUNC(fn##_all_key, lock_all_common(fcinfo, true, mode, scope, try_only))

ZK_LOCK_FAMILY(zk_lock, ZKM_EXCLUSIVE, ZKS_TRANSACTION, false)
ZK_LOCK_FAMILY(zk_lock_shared, ZKM_SHARED, ZKS_TRANSACTION, false)
ZK_LOCK_FAMILY(zk_session_lock, ZKM_EXCLUSIVE, ZKS_SESSION, false)
ZK_LOCK_FAMILY(zk_session_lock_shared, ZKM_SHARED, ZKS_SESSION, false)
ZK_LOCK_FAMILY(zk_try_lock, ZKM_EXCLUSIVE, ZKS_TRANSACTION, true)
ZK_LOCK_FAMILY(zk_try_lock_shared, ZKM_SHARED, ZKS_TRANSACTION, true)
ZK_LOCK_FAMILY(zk_try_session_lock, ZKM_EXCLUSIVE, ZKS_SESSION, true)
ZK_LOCK_FAMILY(zk_try_session_lock_shared, ZKM_SHARED, ZKS_SESSION, true)
/* SQL: zk_unlock(text[]) and zk_unlock_shared(text[]), by names or keys */
ZK_SQL_FUNC(zk_unlock_all_of, unlock_all_common(fcinfo, false, ZKM_EXCLUSIVE))
ZK_SQL_FUNC(zk_unlock_all_of_key, unlock_all_common(fcinfo, true, ZKM_EXCLUSIVE))
ZK_SQL_FUNC(zk_unlock_shared_all_of, unlock_all_common(fcinfo, false, ZKM_SHARED))
ZK_SQL_FUNC(zk_unlock_shared_all_of_key, unlock_all_common(fcinfo, true, ZKM_SHARED))

/* SQL: zk_unlock_all() */
ZK_SQL_PROC(zk_unlock_all, zk_release_all_session())

/* The token of the lock this backend holds on the name, or NULL */
static Datum
token_common(FunctionCallInfo fcinfo, bool key)
{
	char	   *name;
	int			len;
	bool		held;
	int64		token;

	name = zk_arg_name(fcinfo, key, &len);
	token = zk_held_token(name, len, &held);
	if (!held)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/* SQL: zk_lock_token(name), zk_lock_token_key(key): NULL unless held */
ZK_SQL_FUNC(zk_lock_token, token_common(fcinfo, false))
ZK_SQL_FUNC(zk_lock_token_key, token_common(fcinfo, true))

/* ---- zk_lock_holders ---- */

/* The fields of our own node data, {"cluster":..., "host":..., ...} */
typedef struct NodeData
{
	char	   *v[8];
	JsonTokenType t[8];
} NodeData;

static const char *const node_fields[8] =
{"cluster", "host", "port", "database", "pid", "user", "application", "since"};

/* A JSON scalar as an int4, or false when it is not one (never raises) */
static bool
json_int4(const char *v, JsonTokenType t, int32 *out)
{
	char	   *end;
	long		l;

	if (v == NULL || t != JSON_TOKEN_NUMBER)
		return false;
	errno = 0;
	l = strtol(v, &end, 10);
	if (errno != 0 || *end != '\0' || end == v || l < PG_INT32_MIN || l > PG_INT32_MAX)
		return false;
	*out = (int32) l;
	return true;
}

/*
 * Parse zklock's identity (UTF-8 JSON, node_fields at its top level, null
 * ones absent); false when the data is not ours (kazoo, garbage).  Never
 * raises, whatever another client wrote.
 */
static bool
parse_node_data(const char *data, int len, NodeData *nd)
{
	return zk_json_top_fields(data, len, node_fields, 8, true, nd->v, nd->t) &&
		nd->v[0] != NULL;
}

typedef struct HolderRow
{
	ZkHolderRec *rec;
	char	   *name;
	char	   *data;
	bool		held;			/* it holds (else it waits) */
} HolderRow;

/* qsort comparator of HolderRows: creation order */
static int
holder_cmp(const void *a, const void *b)
{
	const HolderRow *x = a;
	const HolderRow *y = b;

	/* creation order: czxid, right across a sequence wrap */
	return (x->rec->czxid > y->rec->czxid) - (x->rec->czxid < y->rec->czxid);
}

/*
 * zk_lock_holders, zk_election_candidates and zk_semaphore_holders: every
 * contender of the name, read by the worker into a DSM segment, in
 * creation order, with its state as the worker would decide it and the
 * identity zklock writes into its nodes (NULLs for another client's).
 */
/*
 * The contenders the worker read into seg (zk_query_holders), in creation
 * order, with whether each holds (the recipe, exactly as the worker applies
 * it: lock_names.c); the segment is detached.
 */
static HolderRow *
holders_rows(dsm_segment *seg, int family, int *nrows)
{
	ZkHoldersBuf *buf = dsm_segment_address(seg);
	HolderRow  *rows;
	ZkContender *contenders;
	char	   *p;
	int			n;
	int			i;

	n = buf->count;
	rows = palloc0(sizeof(HolderRow) * Max(n, 1));
	p = (char *) buf + MAXALIGN(sizeof(ZkHoldersBuf));
	for (i = 0; i < n; i++)
	{
		ZkHolderRec *rec = (ZkHolderRec *) p;

		rows[i].rec = palloc(sizeof(ZkHolderRec));
		memcpy(rows[i].rec, rec, sizeof(ZkHolderRec));
		rows[i].name = pnstrdup(p + sizeof(ZkHolderRec), rec->namelen);
		rows[i].data = pnstrdup(p + sizeof(ZkHolderRec) + rec->namelen, rec->datalen);
		p += MAXALIGN(sizeof(ZkHolderRec) + rec->namelen + rec->datalen);
	}
	dsm_detach(seg);
	qsort(rows, n, sizeof(HolderRow), holder_cmp);
	contenders = palloc0(sizeof(ZkContender) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		contenders[i].name = rows[i].name;
		contenders[i].key = i;
		contenders[i].shared = rows[i].rec->shared;
	}
	for (i = 0; i < n; i++)
		rows[i].held = (family == ZKF_SEMPOOL ||	/* every lease is held */
						zk_lock_blocker(contenders, n, i, NULL, true) == ZKLOCK_HELD);
	*nrows = n;
	return rows;
}

/*
 * Who a contender's node says holds it, into values[first ...] (cluster,
 * host, port, database, pid, user, application, since; NULL where absent);
 * false when the data is not zklock's
 */
static bool
holder_identity(HolderRow *row, Datum *values, bool *nulls, int first)
{
	NodeData	nd;
	int			j;

	if (!parse_node_data(row->data, row->rec->datalen, &nd))
		return false;
	for (j = 0; j < 8; j++)
	{
		if (nd.v[j] == NULL)
			continue;
		if (j == 2 || j == 4)
		{
			int32		iv;

			if (!json_int4(nd.v[j], nd.t[j], &iv))
				continue;	/* not a number: NULL */
			values[first + j] = Int32GetDatum(iv);
		}
		else
			values[first + j] = CStringGetTextDatum(zk_utf8_to_server_noerror(nd.v[j], strlen(nd.v[j])));
		nulls[first + j] = false;
	}
	return true;
}

/*
 * zk_lock_holders, zk_election_candidates and zk_semaphore_holders: every
 * contender of the name, read by the worker into a DSM segment, in
 * creation order, with its state as the worker would decide it and the
 * identity zklock writes into its nodes (NULLs for another client's).
 */
static Datum
holders_common(FunctionCallInfo fcinfo, bool key, int family, bool campaign)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name;
	int			len;
	HolderRow  *rows;
	int			n;
	int			i;

	if (family == ZKF_ELECTIONS)
		name = zk_arg_text_name(fcinfo, 0, "election name", &len);
	else if (family == ZKF_SEMPOOL)
	{
		name = zk_arg_text_name(fcinfo, 0, "semaphore name", &len);
		zk_check_semaphore_name(name, len);
	}
	else
		name = zk_arg_name(fcinfo, key, &len);
	InitMaterializedSRF(fcinfo, 0);

	/* a campaign's election is in the session's namespace, a cluster's not */
	rows = holders_rows(campaign ? zk_query_holders_in(name, len, family, true) :
						zk_query_holders(name, len, family), family, &n);

	for (i = 0; i < n; i++)
	{
		Datum		values[14];
		bool		nulls[14];
		bool		shared = rows[i].rec->shared;
		bool		held = rows[i].held;
		int			j;
		int			dlen = rows[i].rec->datalen;

		memset(nulls, true, sizeof(nulls));
		values[0] = CStringGetTextDatum(zk_display_name(rows[i].name));
		values[1] = CStringGetTextDatum(family == ZKF_SEMPOOL ? "lease" :
										shared ? "shared" : "exclusive");
		values[2] = CStringGetTextDatum(held ? "held" : "waiting");
		values[3] = Int32GetDatum(i);
		values[4] = Int64GetDatum(rows[i].rec->czxid);
		for (j = 0; j < 5; j++)
			nulls[j] = false;

		/* cluster, host, port, database, pid, user, application, since */
		(void) holder_identity(&rows[i], values, nulls, 5);
		if (dlen > 0)
		{
			if (memchr(rows[i].data, '\0', dlen) == NULL &&
				pg_verify_mbstr(PG_UTF8, rows[i].data, dlen, true))
				values[13] = CStringGetTextDatum(zk_utf8_to_server_noerror(rows[i].data, dlen));
			else
			{
				/* not text in this database's encoding: show it as hex */
				char	   *hex = palloc(dlen * 2 + 3);

				hex[0] = '\\';
				hex[1] = 'x';
				hex_encode(rows[i].data, dlen, hex + 2);
				hex[dlen * 2 + 2] = '\0';
				values[13] = CStringGetTextDatum(hex);
			}
			nulls[13] = false;
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* ---- zk_lock_revoke ---- */

/* more holders than one batch: a batch's wait at most, a pass */
#define REVOKE_SLICE_MS		1000

/* Is row a node of this very session (its cluster and process)? */
static bool
holder_is_me(HolderRow *row)
{
	NodeData	nd;
	char		me[32];
	int32		pid;

	if (!parse_node_data(row->data, row->rec->datalen, &nd))
		return false;
	snprintf(me, sizeof(me), UINT64_FORMAT, GetSystemIdentifier());
	return nd.v[0] != NULL && strcmp(nd.v[0], me) == 0 &&
		json_int4(nd.v[4], nd.t[4], &pid) && pid == MyProcPid;
}

/*
 * zk_lock_revoke(name | key, timeout): every holder of the lock, on any
 * cluster, taken back by its cluster's worker (lock_revoke.c); one row per
 * holder, with what became of it: revoked (its node is gone), still held
 * (not gone within the timeout: its cluster cannot reach ZooKeeper, or it
 * is committing), not touched (another client's node, or this session's
 * own).  Waiters are not touched.
 */
static Datum
revoke_common(FunctionCallInfo fcinfo, bool key)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name;
	int			len;
	int64		timeout_ms;
	HolderRow  *rows;
	char	  **targets;
	int		   *target_row;
	bool	   *gone;
	int		   *outcome;
	int			ntargets = 0;
	int			n;
	int			i;
	int			counts[3] = {0, 0, 0};
	TimestampTz deadline;
	static const char *const outcome_names[3] = {"revoked", "still held", "not touched"};

	if (PG_ARGISNULL(0))
	{
		InitMaterializedSRF(fcinfo, 0);
		return (Datum) 0;		/* no row, as a strict function would */
	}
	name = zk_arg_name(fcinfo, key, &len);
	timeout_ms = zk_arg_wait_ms(fcinfo, 1);
	InitMaterializedSRF(fcinfo, 0);

	rows = holders_rows(zk_query_holders(name, len, ZKF_LOCKS), ZKF_LOCKS, &n);
	targets = palloc0(sizeof(char *) * Max(n, 1));
	target_row = palloc0(sizeof(int) * Max(n, 1));
	gone = palloc0(sizeof(bool) * Max(n, 1));
	outcome = palloc0(sizeof(int) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		NodeData	nd;

		outcome[i] = 2;			/* not touched */
		if (!rows[i].held || holder_is_me(&rows[i]) ||
			!parse_node_data(rows[i].data, rows[i].rec->datalen, &nd))
			continue;
		target_row[ntargets] = i;
		targets[ntargets++] = rows[i].name;
	}

	/*
	 * ZK_REVOKE_BATCH at a time, all within the one timeout.  With more
	 * than one batch, each waits at most REVOKE_SLICE_MS a pass, and the
	 * passes go on over the holders not gone yet until the timeout: one
	 * holder that cannot be taken (its cluster away from ZooKeeper, or
	 * committing) must not keep the later batches from being asked at all.
	 */
	deadline = timeout_ms >= 0 ?
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms) : 0;
	for (;;)
	{
		int			left_n = 0;
		char	  **pass_targets = palloc(sizeof(char *) * Max(ntargets, 1));
		int		   *pass_index = palloc(sizeof(int) * Max(ntargets, 1));
		bool		sliced;

		for (i = 0; i < ntargets; i++)
		{
			if (gone[i])
				continue;
			pass_index[left_n] = i;
			pass_targets[left_n++] = targets[i];
		}
		if (left_n == 0)
			break;
		sliced = left_n > ZK_REVOKE_BATCH;
		for (i = 0; i < left_n; i += ZK_REVOKE_BATCH)
		{
			int			m = Min(ZK_REVOKE_BATCH, left_n - i);
			int64		left = -1;
			bool		pass_gone[ZK_REVOKE_BATCH];
			int			j;

			if (deadline != 0)
			{
				long		secs;
				int			usecs;

				TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
				left = (int64) secs * 1000 + usecs / 1000;
			}
			if (sliced && (left < 0 || left > REVOKE_SLICE_MS))
				left = REVOKE_SLICE_MS;
			memset(pass_gone, 0, sizeof(pass_gone));
			zk_revoke_holders(name, len, pass_targets + i, m, left, pass_gone);
			for (j = 0; j < m; j++)
				gone[pass_index[i + j]] = pass_gone[j];
		}
		pfree(pass_targets);
		pfree(pass_index);
		if (!sliced)
			break;				/* one batch waited the whole timeout */
		if (deadline != 0 && GetCurrentTimestamp() >= deadline)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	for (i = 0; i < ntargets; i++)
		outcome[target_row[i]] = gone[i] ? 0 : 1;

	for (i = 0; i < n; i++)
	{
		Datum		values[12];
		bool		nulls[12];

		if (!rows[i].held)
			continue;
		memset(nulls, true, sizeof(nulls));
		values[0] = CStringGetTextDatum(zk_display_name(rows[i].name));
		values[1] = CStringGetTextDatum(rows[i].rec->shared ? "shared" : "exclusive");
		values[2] = Int64GetDatum(rows[i].rec->czxid);
		nulls[0] = nulls[1] = nulls[2] = false;
		/* cluster, host, port, database, pid, user, application, since */
		(void) holder_identity(&rows[i], values, nulls, 3);
		values[11] = CStringGetTextDatum(outcome_names[outcome[i]]);
		nulls[11] = false;
		counts[outcome[i]]++;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	ereport(LOG,
			(errmsg("zklock: zk_lock_revoke of zookeeper lock \"%s\": %d revoked, %d still held, %d not touched",
					zk_display_name(pnstrdup(name, len)), counts[0], counts[1], counts[2])));
	return (Datum) 0;
}

/* SQL: zk_lock_revoke(name, timeout), zk_lock_revoke_key(key, timeout) */
ZK_SQL_FUNC(zk_lock_revoke, revoke_common(fcinfo, false))
ZK_SQL_FUNC(zk_lock_revoke_key, revoke_common(fcinfo, true))

/*
 * Who leads the campaign's election "name" (in the session's namespace, as
 * zk_campaign_candidates reads it): false when nobody does; else its
 * token (its node's czxid) and its node's name into node (nodelen bytes;
 * "" when the name does not fit)
 */
bool
zk_campaign_leader(const char *name, int len, int64 *token, char *node, size_t nodelen)
{
	HolderRow  *rows;
	int			n;
	int			i;

	rows = holders_rows(zk_query_holders_in(name, len, ZKF_ELECTIONS, true),
						ZKF_ELECTIONS, &n);
	for (i = 0; i < n; i++)
	{
		if (!rows[i].held)
			continue;
		*token = rows[i].rec->czxid;
		if (strlen(rows[i].name) < nodelen)
			strlcpy(node, rows[i].name, nodelen);
		else
			node[0] = '\0';
		return true;
	}
	return false;
}

/* SQL: zk_lock_holders(name), zk_lock_holders_key(key) */
ZK_SQL_FUNC(zk_lock_holders, holders_common(fcinfo, false, ZKF_LOCKS, false))
ZK_SQL_FUNC(zk_lock_holders_key, holders_common(fcinfo, true, ZKF_LOCKS, false))
/* SQL: zk_election_candidates(name): the candidates are lock contenders */
ZK_SQL_FUNC(zk_election_candidates, holders_common(fcinfo, false, ZKF_ELECTIONS, false))
/*
 * SQL: zk_campaign_candidates(name): the candidates of a campaign's
 * election (zk_campaign), in the session's namespace
 */
ZK_SQL_FUNC(zk_campaign_candidates, holders_common(fcinfo, false, ZKF_ELECTIONS, true))
/* SQL: zk_semaphore_holders(name): the pool's leases, all shown held */
ZK_SQL_FUNC(zk_semaphore_holders, holders_common(fcinfo, false, ZKF_SEMPOOL, false))

/* ---- zk_locks ---- */

/* zk_snapshot_begin's filter of zk_locks: the live entries of SQL locks */
static bool
want_lock(ZkEntry *e)
{
	return zk_entry_live(e) && e->kind == ZKK_LOCK && e->family == ZKF_LOCKS;
}

/*
 * The rows of a view over the table (zk_locks, zk_entries, zk_semaphores),
 * returned by a set-returning function (fcinfo): every entry want keeps,
 * copied under the lock a chunk at a time (zk_snapshot_next), each turned
 * into a row of the result by row.  The values of one chunk of rows live
 * in a memory context reset after each chunk, so that a view of any size
 * keeps one chunk's worth.
 */
void
zk_snapshot_rows(FunctionCallInfo fcinfo, bool (*want) (ZkEntry *e),
				 void (*row) (ReturnSetInfo *rsinfo, ZkLockRow *r))
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ZkSnapshot *snap;
	ZkLockRow  *rows;
	MemoryContext rowcxt;
	int			n;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	rowcxt = AllocSetContextCreate(CurrentMemoryContext, "zklock view rows",
								   ALLOCSET_DEFAULT_SIZES);
	snap = zk_snapshot_begin(want);
	while ((rows = zk_snapshot_next(snap, &n)) != NULL)	/* copied under the lock */
	{
		MemoryContext old = MemoryContextSwitchTo(rowcxt);

		for (i = 0; i < n; i++)
			row(rsinfo, &rows[i]);
		MemoryContextSwitchTo(old);
		MemoryContextReset(rowcxt);
	}
}

/* A database name column: the name of dbid, NULL when it has none */
static void
database_datum(Oid dbid, Datum *value, bool *isnull)
{
	char	   *db = OidIsValid(dbid) ? get_database_name(dbid) : NULL;

	if (db)
		*value = CStringGetTextDatum(db);
	else
		*isnull = true;
}

/*
 * One row of zk_locks or zk_semaphores from a copied entry: pid, database,
 * name, (column 3: the caller's), scope, state, token, node (our node, once
 * known, under the parent of "family"), requested_at, granted_at.
 */
void
zk_entry_row(ZkLockRow *r, bool held, int family, Datum *values, bool *nulls)
{
	memset(nulls, false, sizeof(bool) * 10);
	values[0] = Int32GetDatum(r->pid);
	database_datum(r->dbid, &values[1], &nulls[1]);
	values[2] = CStringGetTextDatum(zk_display_name(r->name));
	values[4] = CStringGetTextDatum(r->scope == ZKS_SESSION ? "session" : "transaction");
	values[5] = CStringGetTextDatum(r->outcome == ZKO_LOST ? "lost" :
									held ? "held" : "waiting");
	if (held && r->token != 0)
		values[6] = Int64GetDatum(r->token);
	else
		nulls[6] = true;
	if (r->node[0])
	{
		char		parent[ZKLOCK_PARENT_MAX + 1];

		zk_lock_parent(r->name, family, parent, sizeof(parent));
		values[7] = CStringGetTextDatum(psprintf("%s/%s", parent, r->node));
	}
	else
		nulls[7] = true;
	values[8] = TimestampTzGetDatum(r->requested_at);
	if (held && r->granted_at != 0)
		values[9] = TimestampTzGetDatum(r->granted_at);
	else
		nulls[9] = true;
}

/* One row of zk_locks (zk_snapshot_rows) */
static void
lock_row(ReturnSetInfo *rsinfo, ZkLockRow *e)
{
	Datum		values[10];
	bool		nulls[10];

	zk_entry_row(e, e->outcome == ZKO_GRANTED || e->outcome == ZKO_LOST, ZKF_LOCKS,
				 values, nulls);
	values[3] = CStringGetTextDatum(e->mode == ZKM_SHARED ? "shared" : "exclusive");
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* SQL: zk_locks_internal(), behind the view zk_locks */
ZK_SQL_PROC(zk_locks_internal, zk_snapshot_rows(fcinfo, want_lock, lock_row))


/* ---- zk_entries: every entry of the table, whatever its kind ---- */

/* The names of ZkEntryState and ZkOutcome in zk_entries */
static const char *const state_names[ZKE_DONE + 1] = {
	"free", "pending", "creating", "waiting", "held", "deleting", "done"
};
static const char *const outcome_names[ZKO_LOST + 1] = {
	"none", "granted", "busy", "failed", "lost"
};

/* names[v], or "?" for a value outside it */
#define ENUM_NAME(names, v) \
	((v) >= 0 && (v) < (int) lengthof(names) ? (names)[(v)] : "?")

/* zk_snapshot_begin's filter of zk_entries: every entry in use */
static bool
want_any(ZkEntry *e)
{
	return true;
}

/* One row of zk_entries (zk_snapshot_rows) */
static void
entry_row(ReturnSetInfo *rsinfo, ZkLockRow *r)
{
	Datum		values[13];
	bool		nulls[13];

	memset(nulls, false, sizeof(nulls));
	values[0] = Int32GetDatum(r->idx);
	if (r->pid != 0)
		values[1] = Int32GetDatum(r->pid);
	else
		nulls[1] = true;	/* the worker's own */
	database_datum(r->dbid, &values[2], &nulls[2]);
	values[3] = CStringGetTextDatum(zk_kind_label(r->kind));
	if (r->name[0])
		values[4] = CStringGetTextDatum(zk_display_name(r->name));
	else
		nulls[4] = true;
	values[5] = CStringGetTextDatum(ENUM_NAME(state_names, r->state));
	values[6] = CStringGetTextDatum(ENUM_NAME(outcome_names, r->outcome));
	values[7] = BoolGetDatum(r->released);
	values[8] = BoolGetDatum(r->queued);
	values[9] = BoolGetDatum(r->on_retry);
	values[10] = BoolGetDatum(r->in_doubt);
	values[11] = Int32GetDatum(r->outstanding);
	if (r->requested_at != 0)
		values[12] = TimestampTzGetDatum(r->requested_at);
	else
		nulls[12] = true;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * SQL: zk_entries_internal(), behind the view zk_entries.  Every entry in
 * use, copied under the shared lock a chunk at a time (zk_snapshot_next), for
 * operators who want to know what occupies the table (entries_used of
 * zk_status()) and what the worker still has to do.
 */
ZK_SQL_PROC(zk_entries_internal, zk_snapshot_rows(fcinfo, want_any, entry_row))
