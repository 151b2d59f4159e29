/*-------------------------------------------------------------------------
 *
 * sqlfuncs.c
 *	  SQL entry points that belong to no recipe (zk_status), and the
 *	  argument helpers every recipe's SQL functions use.  Run in backends.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"

#include <errno.h>

#include "access/htup_details.h"
#include "commands/dbcommands.h"
#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(zk_status);


/* an interval argument in milliseconds, checked; "null_hint" ends the hint */
static int64
interval_arg_ms(FunctionCallInfo fcinfo, int argno, const char *null_hint)
{
	Interval   *iv = PG_GETARG_INTERVAL_P(argno);
	int64		usecs;

	if (iv->month != 0 && (iv->month > 1200 || iv->month < -1200))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock timeout is out of range"),
				 errhint("Give a timeout between 0 and 100 years, or NULL to %s.",
						 null_hint)));
	usecs = iv->time + (int64) iv->day * USECS_PER_DAY +
		(int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock timeout must not be negative"),
				 errdetail("The timeout was %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(iv)))),
				 errhint("Give a timeout of zero or more, or NULL to %s.", null_hint)));
	return usecs / 1000;
}

/*
 * The row type of a function that returns one row about this cluster's
 * shared state (zk_status, zk_kept_totals), once that state is known to be
 * there (zk_require_shmem)
 */
TupleDesc
zk_status_row_type(FunctionCallInfo fcinfo)
{
	TupleDesc	tupdesc;

	zk_require_shmem();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	return tupdesc;
}

/*
 * A count argument argno, named what (its errors say so, with hint): not
 * NULL (22004), at least 1 (22023)
 */
int32
zk_arg_count(FunctionCallInfo fcinfo, int argno, const char *what,
			 const char *hint)
{
	int32		n;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock %s must not be null", what),
				 errhint("%s", hint)));
	n = PG_GETARG_INT32(argno);
	if (n < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock %s must be at least 1", what),
				 errdetail("%s was %d.", what, n),
				 errhint("%s", hint)));
	return n;
}

/*
 * How long to wait for a lock: the timeout argument, else lock_timeout when
 * set, else forever (-1).
 */
int64
zk_arg_timeout_ms(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return LockTimeout > 0 ? (int64) LockTimeout : -1;
	return interval_arg_ms(fcinfo, argno, "use lock_timeout");
}

/*
 * How long to wait for a queue item or a barrier: the timeout argument, else
 * without limit (-1).
 */
int64
zk_arg_wait_ms(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return -1;
	return interval_arg_ms(fcinfo, argno, "wait without limit");
}

/*
 * A name argument ("what" names it in messages) in UTF-8: not NULL, 1 to
 * ZKLOCK_NAME_MAX bytes once converted.
 */
char *
zk_arg_text_name(FunctionCallInfo fcinfo, int argno, const char *what, int *len)
{
	text	   *t;
	int			rawlen;
	char	   *u;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock %s must not be null", what),
				 errhint("The %s must have 1 to %d bytes.", what, ZKLOCK_NAME_MAX)));
	t = PG_GETARG_TEXT_PP(argno);
	rawlen = VARSIZE_ANY_EXHDR(t);
	u = rawlen > ZKLOCK_NAME_MAX ? NULL : zk_name_to_utf8(VARDATA_ANY(t), rawlen, len);
	if (u == NULL)
		*len = rawlen;
	zk_check_name(what, *len);
	return pnstrdup(u, *len);
}

/*
 * The lock's name in UTF-8: a text argument converted from the database
 * encoding (so the same text names the same lock from every database), or
 * a bigint key written in decimal.
 */
char *
zk_arg_name(FunctionCallInfo fcinfo, bool key, int *len)
{
	if (key)
	{
		char	   *buf = psprintf(INT64_FORMAT, PG_GETARG_INT64(0));

		*len = strlen(buf);
		return buf;
	}
	else
	{
		text	   *t = PG_GETARG_TEXT_PP(0);
		int			rawlen = VARSIZE_ANY_EXHDR(t);

		/* refuse absurd lengths before converting anything */
		if (rawlen > ZKLOCK_NAME_MAX)
			zk_check_name("lock name", rawlen);
		return zk_name_to_utf8(VARDATA_ANY(t), rawlen, len);
	}
}

/*
 * zk_status(): one row about the worker, its session and its counters.
 * Its columns: 7 about the worker and its entries, the base's counters to
 * zk_errors, 6 of the recipes' (ZkStatusCounts), the rest of the base's,
 * then 6 more.
 */
#define ZK_STATUS_COLS	(7 + ZKCNT_NUM + 6 + 6)

Datum
zk_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[ZK_STATUS_COLS];
	bool		nulls[ZK_STATUS_COLS];
	ZkStatusCounts counts = {0};
	int			acl_problems;
	char		acl_problem[ZKLOCK_PARENT_MAX + 1];
	int			conn;
	uint64		sid;
	int			stimeout;
	int			wpid;
	int			used;
	int			max;
	int			auth;
	char		servers[ZKLOCK_HOSTS_MAX];
	char		sidbuf[32];
	int			i;
	int			n = 0;

	tupdesc = zk_status_row_type(fcinfo);

	zk_backend_lock(LW_SHARED);
	conn = zk_ctl->conn_state;
	sid = zk_ctl->session_id;
	stimeout = zk_ctl->session_timeout;
	wpid = zk_ctl->worker_pid;
	used = zk_ctl->used;
	max = zk_ctl->max_entries;
	/* what the recipes count, over their entries and of their own */
	for (i = 0; i < zk_registry->nrecipes; i++)
		if (zk_registry->backends[i]->status)
			zk_registry->backends[i]->status(&counts);
	for (i = 0; i < max; i++)
	{
		ZkEntry    *e = zk_entry(i);
		int			k;

		if (e->state == ZKE_FREE)
			continue;
		for (k = 0; k < zk_registry->nrecipes; k++)
			if (zk_registry->backends[k]->status_entry)
				zk_registry->backends[k]->status_entry(e, &counts);
	}
	strlcpy(servers, zk_ctl->servers, sizeof(servers));
	auth = zk_ctl->auth_state;
	acl_problems = zk_ctl->acl_problems;
	strlcpy(acl_problem, zk_ctl->acl_problem, sizeof(acl_problem));
	LWLockRelease(zk_ctl->lock);

	memset(nulls, 0, sizeof(nulls));
	values[n++] = CStringGetTextDatum(zk_conn_state_name(conn));
	values[n] = CStringGetTextDatum(servers);
	nulls[n++] = (servers[0] == '\0');
	snprintf(sidbuf, sizeof(sidbuf), "0x%llx", (unsigned long long) sid);
	values[n] = CStringGetTextDatum(sidbuf);
	nulls[n++] = (sid == 0);
	{
		Interval   *iv = palloc0(sizeof(Interval));

		iv->time = (int64) stimeout * 1000;
		values[n] = IntervalPGetDatum(iv);
		nulls[n++] = (stimeout == 0);
	}
	values[n] = Int32GetDatum(wpid);
	nulls[n++] = (wpid == 0);
	values[n++] = Int32GetDatum(used);
	values[n++] = Int32GetDatum(max);
	for (i = 0; i <= ZKCNT_ZK_ERRORS; i++)
		values[n++] = Int64GetDatum((int64) pg_atomic_read_u64(&zk_ctl->counters[i]));
	values[n++] = Int64GetDatum(counts.deadlocks);
	values[n++] = Int64GetDatum(counts.leases_taken);
	values[n++] = Int64GetDatum(counts.leases_refused);
	values[n++] = Int64GetDatum(counts.leaderships);
	values[n++] = Int64GetDatum(counts.sem_taken);
	values[n++] = Int64GetDatum(counts.sem_refused);
	for (i = ZKCNT_ZK_ERRORS + 1; i < ZKCNT_NUM; i++)
		values[n++] = Int64GetDatum((int64) pg_atomic_read_u64(&zk_ctl->counters[i]));
	values[n++] = Int32GetDatum(counts.queues_tracked);
	/* committed transactions whose zklock work ZooKeeper refuses */
	values[n++] = Int32GetDatum(counts.pubs_blocked);
	/* the scheme and whether it works, never who */
	values[n++] = CStringGetTextDatum(zk_auth_state_name(auth));
	/* nodes found open to other ZooKeeper identities (aclcheck.c) */
	values[n++] = Int32GetDatum(acl_problems);
	values[n] = CStringGetTextDatum(acl_problem);
	nulls[n++] = (acl_problem[0] == '\0');
	values[n++] = Int32GetDatum(counts.ends_blocked);
	Assert(n == ZK_STATUS_COLS);
	/* a 1.0 catalog's zk_status has fewer columns: they come first */

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * zk_path(kind, name) -> the ZooKeeper path of a name of this session's
 * namespace, for other clients (kazoo, Curator) that take part in the same
 * lock, queue, barrier, gate, arrivals, semaphore or lease.  Elections are
 * the cluster's (zklock.elections), so theirs is outside any namespace.
 */
/*
 * A name of this session's namespace for a recipe's path hook: a path sends
 * nothing to ZooKeeper, so no claim is checked
 */
char *
zk_path_qname(const char *name, int len, int *qlen)
{
	return zk_qualify_name_ext(name, len, qlen, false);
}

/* Is kind one of kinds (comma separated, with spaces: a path_kinds)? */
static bool
path_kind_of(const char *kinds, const char *kind)
{
	size_t		len = strlen(kind);
	const char *p = kinds;

	while (*p)
	{
		size_t		n = strcspn(p, ",");

		if (n == len && strncmp(p, kind, len) == 0)
			return true;
		p += n;
		p += strspn(p, ", ");
	}
	return false;
}

PG_FUNCTION_INFO_V1(zk_path);

/* SQL: zk_path() */
Datum
zk_path(PG_FUNCTION_ARGS)
{
	char	   *kind = text_to_cstring(PG_GETARG_TEXT_PP(0));
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 1, "name", &len);
	char		out[ZKLOCK_PARENT_MAX + 1];
	StringInfoData kinds;
	int			k;

	initStringInfo(&kinds);
	for (k = 0; k < zk_registry->nrecipes; k++)
	{
		const ZkRecipeBackend *rb = zk_registry->backends[k];

		if (rb->path == NULL)
			continue;
		if (path_kind_of(rb->path_kinds, kind))
		{
			rb->path(kind, rb->path_arg, name, len, out, sizeof(out));
			PG_RETURN_TEXT_P(cstring_to_text(out));
		}
		appendStringInfo(&kinds, "%s%s", kinds.len > 0 ? ", " : "", rb->path_kinds);
	}
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown zklock recipe \"%s\"", kind),
			 errhint("Use one of %s.", kinds.data)));
}
