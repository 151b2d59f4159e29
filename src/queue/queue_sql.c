/*-------------------------------------------------------------------------
 *
 * queue_sql.c
 *	  SQL functions of the queue recipe: zk_enqueue (one item or an array
 *	  of them), zk_dequeue, zk_try_dequeue, zk_queue_length, zk_queue_peek,
 *	  zk_queue_purge, zk_queue_drop, zk_queues_internal and
 *	  zk_queue_release_cluster.  Run in backends; the work is in
 *	  queue_backend.c and the worker's queue_*.c (queue_worker.c lists them).
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "queue.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(zk_enqueue_bytea);
PG_FUNCTION_INFO_V1(zk_namespace_totals);
PG_FUNCTION_INFO_V1(zk_enqueue_text);
PG_FUNCTION_INFO_V1(zk_enqueue_bytea_array);
PG_FUNCTION_INFO_V1(zk_enqueue_text_array);
PG_FUNCTION_INFO_V1(zk_enqueue_later);
PG_FUNCTION_INFO_V1(zk_enqueue_grouped);
PG_FUNCTION_INFO_V1(zk_dequeue_sql);
PG_FUNCTION_INFO_V1(zk_try_dequeue_sql);
PG_FUNCTION_INFO_V1(zk_queue_length);
PG_FUNCTION_INFO_V1(zk_queue_peek);
PG_FUNCTION_INFO_V1(zk_queue_purge);
PG_FUNCTION_INFO_V1(zk_queue_drop);
PG_FUNCTION_INFO_V1(zk_queue_set_policy);
PG_FUNCTION_INFO_V1(zk_queue_move);
PG_FUNCTION_INFO_V1(zk_queues_internal);
PG_FUNCTION_INFO_V1(zk_queue_release_cluster);
PG_FUNCTION_INFO_V1(zk_queue_stats);
PG_FUNCTION_INFO_V1(zk_retry_later_sql);

/* Raise 22004 for an argument that must not be NULL, named by what */
static void
null_arg(const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("zklock %s must not be null", what),
			 errhint("Give a non-null %s.", what)));
}

/* the queue name (argument 0) in UTF-8 */
static char *
queue_arg(FunctionCallInfo fcinfo, int *len)
{
	text	   *t;
	int			rawlen;

	if (PG_ARGISNULL(0))
		null_arg("queue name");
	t = PG_GETARG_TEXT_PP(0);
	rawlen = VARSIZE_ANY_EXHDR(t);
	if (rawlen > ZKLOCK_NAME_MAX * 4)
		zk_check_name("queue name", rawlen);
	return zk_name_to_utf8(VARDATA_ANY(t), rawlen, len);
}

/* Integer argument argno, dflt when the call leaves it out; NULL is refused */
static int
int_arg(FunctionCallInfo fcinfo, int argno, int dflt, const char *what)
{
	if (PG_NARGS() <= argno)
		return dflt;
	if (PG_ARGISNULL(argno))
		null_arg(what);
	return PG_GETARG_INT32(argno);
}

/* SQL: zk_enqueue() */
Datum
zk_enqueue_bytea(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = queue_arg(fcinfo, &len);
	bytea	   *payload;
	int			priority;

	if (PG_ARGISNULL(1))
		null_arg("payload");
	priority = int_arg(fcinfo, 2, 100, "priority");
	payload = PG_GETARG_BYTEA_PP(1);
	zk_queue_enqueue(name, len, VARDATA_ANY(payload), VARSIZE_ANY_EXHDR(payload), priority);
	PG_RETURN_VOID();
}

/* SQL: zk_enqueue() */
Datum
zk_enqueue_text(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = queue_arg(fcinfo, &len);
	text	   *payload;
	char	   *u;
	int			plen;
	int			priority;

	if (PG_ARGISNULL(1))
		null_arg("payload");
	priority = int_arg(fcinfo, 2, 100, "priority");
	payload = PG_GETARG_TEXT_PP(1);
	plen = VARSIZE_ANY_EXHDR(payload);
	u = pg_server_to_any(VARDATA_ANY(payload), plen, PG_UTF8);
	if (u != VARDATA_ANY(payload))
		plen = strlen(u);
	zk_queue_enqueue(name, len, u, plen, priority);
	PG_RETURN_VOID();
}

/*
 * The payloads of the array argument argno of a batch zk_enqueue, in the
 * array's order: *payloads and *plens (palloc'd) and their number *n, 0
 * for an empty array.  Elements of type elemtype (BYTEAOID, or TEXTOID
 * for text, converted to UTF-8 as zk_enqueue_text does).  The array is
 * not NULL (the caller checked); refuses a NULL element (22004) and an
 * array of more than one dimension (2202E).  The queue's, the priority's
 * and the sizes' checks are zk_queue_enqueue_array's.
 */
static void
payloads_arg_at(FunctionCallInfo fcinfo, int argno, Oid elemtype, const char ***payloads,
				Size **plens, int *n)
{
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(argno);
	Datum	   *elems;
	bool	   *nulls;
	int			count;
	int			i;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("zklock payload array must have one dimension"),
				 errdetail("The array has %d dimensions; nothing was enqueued.", ARR_NDIM(arr)),
				 errhint("Pass a one-dimensional array, one element per item: flatten it with ARRAY(SELECT unnest(...)).")));
	deconstruct_array(arr, elemtype, -1, false, TYPALIGN_INT, &elems, &nulls, &count);
	*payloads = palloc(sizeof(char *) * Max(count, 1));
	*plens = palloc(sizeof(Size) * Max(count, 1));
	for (i = 0; i < count; i++)
	{
		struct varlena *v;
		const char *p;
		Size		len;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("zklock payload must not be null"),
					 errdetail("Payload %d of %d in the array is null; nothing was enqueued.", i + 1, count),
					 errhint("Leave out the null elements (array_remove(payloads, NULL)), or give a non-null payload for each.")));
		v = (struct varlena *) PG_DETOAST_DATUM_PACKED(elems[i]);
		p = VARDATA_ANY(v);
		len = VARSIZE_ANY_EXHDR(v);
		if (elemtype == TEXTOID)
		{
			char	   *u = pg_server_to_any(p, len, PG_UTF8);

			if (u != p)
				len = strlen(u);
			p = u;
		}
		(*payloads)[i] = p;
		(*plens)[i] = len;
	}
	*n = count;
}

/* payloads_arg_at of argument 1 (zk_enqueue's) */
static void
payloads_arg(FunctionCallInfo fcinfo, Oid elemtype, const char ***payloads, Size **plens, int *n)
{
	payloads_arg_at(fcinfo, 1, elemtype, payloads, plens, n);
}

/*
 * SQL: zk_enqueue(queue, payloads bytea[] or text[], priority): the
 * elements in order, as one zk_enqueue() each, all or none
 */
static Datum
enqueue_array(FunctionCallInfo fcinfo, Oid elemtype)
{
	int			len;
	char	   *name = queue_arg(fcinfo, &len);
	const char **payloads;
	Size	   *plens;
	int			n;
	int			priority;

	if (PG_ARGISNULL(1))
		null_arg("payload array");
	priority = int_arg(fcinfo, 2, 100, "priority");
	payloads_arg(fcinfo, elemtype, &payloads, &plens, &n);
	zk_queue_enqueue_array(name, len, payloads, plens, n, priority);
	PG_RETURN_VOID();
}

/* SQL: zk_enqueue(queue, payloads bytea[], priority) */
Datum
zk_enqueue_bytea_array(PG_FUNCTION_ARGS)
{
	return enqueue_array(fcinfo, BYTEAOID);
}

/* SQL: zk_enqueue(queue, payloads text[], priority) */
Datum
zk_enqueue_text_array(PG_FUNCTION_ARGS)
{
	return enqueue_array(fcinfo, TEXTOID);
}

/*
 * The due time of a delayed item (argument 2 of zk_enqueue_later): delay
 * (an interval from now) or not_before (a time), as Unix milliseconds; 0
 * when it is due already (an item like any other)
 */
static int64
due_arg(FunctionCallInfo fcinfo, int argno, Oid argtype)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz due;
	const char *what = (argtype == INTERVALOID) ? "delay" : "not_before";

	if (PG_ARGISNULL(argno))
		null_arg(what);
	if (argtype == INTERVALOID)
		due = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
													  TimestampTzGetDatum(now),
													  PG_GETARG_DATUM(argno)));
	else
		due = PG_GETARG_TIMESTAMPTZ(argno);
	if (TIMESTAMP_NOT_FINITE(due) ||
		due > now + (TimestampTz) ZKQ_DELAY_MAX_DAYS * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock %s is too far in the future", what),
				 errdetail("An item may be delayed by at most %d days.", ZKQ_DELAY_MAX_DAYS),
				 errhint("Give a shorter delay, or keep the item elsewhere and enqueue it later.")));
	if (due <= now)
		return 0;
	/* to Unix milliseconds, rounded up: never due before the time given */
	return (due + (TimestampTz) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY + 999) / 1000;
}

/*
 * SQL: zk_enqueue(queue, payload(s), delay interval | not_before
 * timestamptz, priority): as zk_enqueue, the items handed out only once
 * due (queue_delay.c); the payload's type and the time's from the
 * function's signature
 */
Datum
zk_enqueue_later(PG_FUNCTION_ARGS)
{
	Oid		   *argtypes;
	int			nargs;
	int			len;
	char	   *name;
	int			priority;
	int64		due_ms;

	(void) get_func_signature(fcinfo->flinfo->fn_oid, &argtypes, &nargs);
	if (nargs < 4)
		elog(ERROR, "zk_enqueue_later called with %d arguments", nargs);
	name = queue_arg(fcinfo, &len);
	if (PG_ARGISNULL(1))
		null_arg(argtypes[1] == BYTEAOID || argtypes[1] == TEXTOID ? "payload" : "payload array");
	due_ms = due_arg(fcinfo, 2, argtypes[2]);
	priority = int_arg(fcinfo, 3, 100, "priority");
	if (argtypes[1] == BYTEAOID)
	{
		bytea	   *payload = PG_GETARG_BYTEA_PP(1);

		zk_queue_enqueue_due(name, len, VARDATA_ANY(payload), VARSIZE_ANY_EXHDR(payload),
							 priority, due_ms);
	}
	else if (argtypes[1] == TEXTOID)
	{
		text	   *payload = PG_GETARG_TEXT_PP(1);
		int			plen = VARSIZE_ANY_EXHDR(payload);
		char	   *u = pg_server_to_any(VARDATA_ANY(payload), plen, PG_UTF8);

		if (u != VARDATA_ANY(payload))
			plen = strlen(u);
		zk_queue_enqueue_due(name, len, u, plen, priority, due_ms);
	}
	else
	{
		const char **payloads;
		Size	   *plens;
		int			n;

		payloads_arg(fcinfo, argtypes[1] == BYTEAARRAYOID ? BYTEAOID : TEXTOID,
					 &payloads, &plens, &n);
		zk_queue_enqueue_array_due(name, len, payloads, plens, n, priority, due_ms);
	}
	PG_RETURN_VOID();
}

/*
 * SQL: zk_enqueue_grouped(queue, group_key, payload(s), priority): as
 * zk_enqueue, the items handed out after the group's earlier ones, one at a
 * time (queue_delay.c, "Message groups"); the payload's type from the
 * function's signature
 */
Datum
zk_enqueue_grouped(PG_FUNCTION_ARGS)
{
	Oid		   *argtypes;
	int			nargs;
	int			len;
	char	   *name;
	text	   *gtext;
	char	   *gkey;
	int			gklen;
	int			priority;
	const char **payloads;
	Size	   *plens;
	int			n;
	bool		array;

	(void) get_func_signature(fcinfo->flinfo->fn_oid, &argtypes, &nargs);
	if (nargs < 4)
		elog(ERROR, "zk_enqueue_grouped called with %d arguments", nargs);
	name = queue_arg(fcinfo, &len);
	if (PG_ARGISNULL(1))
		null_arg("group_key");
	array = (argtypes[2] != BYTEAOID && argtypes[2] != TEXTOID);
	if (PG_ARGISNULL(2))
		null_arg(array ? "payload array" : "payload");
	priority = int_arg(fcinfo, 3, 100, "priority");
	gtext = PG_GETARG_TEXT_PP(1);
	gklen = VARSIZE_ANY_EXHDR(gtext);
	gkey = pg_server_to_any(VARDATA_ANY(gtext), gklen, PG_UTF8);
	if (gkey != VARDATA_ANY(gtext))
		gklen = strlen(gkey);
	if (argtypes[2] == BYTEAOID)
	{
		bytea	   *payload = PG_GETARG_BYTEA_PP(2);

		payloads = palloc(sizeof(char *));
		plens = palloc(sizeof(Size));
		payloads[0] = VARDATA_ANY(payload);
		plens[0] = VARSIZE_ANY_EXHDR(payload);
		n = 1;
	}
	else if (argtypes[2] == TEXTOID)
	{
		text	   *payload = PG_GETARG_TEXT_PP(2);
		int			plen = VARSIZE_ANY_EXHDR(payload);
		char	   *u = pg_server_to_any(VARDATA_ANY(payload), plen, PG_UTF8);

		if (u != VARDATA_ANY(payload))
			plen = strlen(u);
		payloads = palloc(sizeof(char *));
		plens = palloc(sizeof(Size));
		payloads[0] = u;
		plens[0] = plen;
		n = 1;
	}
	else
		payloads_arg_at(fcinfo, 2, argtypes[2] == BYTEAARRAYOID ? BYTEAOID : TEXTOID,
						&payloads, &plens, &n);
	zk_queue_enqueue_grouped(name, len, gkey, gklen, payloads, plens, n, priority, array);
	PG_RETURN_VOID();
}

/* ---- rows of zk_message ---- */

typedef struct EmitCtx
{
	ReturnSetInfo *rsinfo;
	bool		handout;		/* a dequeue's rows (else a peek's) */
} EmitCtx;

/* A ZooKeeper time (Unix milliseconds) as a TimestampTz */
static TimestampTz
zk_time(int64 ms)
{
	return (TimestampTz) (ms * 1000) -
		((TimestampTz) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
}

/*
 * Valid UTF-8 (without NULs) in the database encoding, or NULL when some
 * character has no equivalent there: never an approximation.
 */
static char *
utf8_to_server_strict(const char *s, int len)
{
	int			enc = GetDatabaseEncoding();
	Oid			proc;
	int			cap;
	unsigned char *out;
	int			done;

	if (memchr(s, '\0', len) != NULL || !pg_verify_mbstr(PG_UTF8, s, len, true))
		return NULL;
	if (enc == PG_UTF8 || enc == PG_SQL_ASCII)
		return pnstrdup(s, len);
	proc = FindDefaultConversionProc(PG_UTF8, enc);
	if (!OidIsValid(proc))
		return NULL;
	cap = len * MAX_CONVERSION_GROWTH + 1;
	out = palloc(cap);
	done = pg_do_encoding_conversion_buf(proc, PG_UTF8, enc,
										 (unsigned char *) s, len, out, cap, true);
	if (done < len)
	{
		pfree(out);
		return NULL;
	}
	return (char *) out;
}

/*
 * zkq_emit_fn of the dequeues: one zk_message row (id, priority, enqueued
 * at, payload, and body: the payload as text when this database can hold it)
 */
static void
emit_message(const ZkMsgRec *m, const char *payload, void *arg)
{
	EmitCtx    *ctx = (EmitCtx *) arg;
	Datum		values[9];
	bool		nulls[9] = {false, false, false, false, false, false, true, true, true};
	int			natts = ctx->rsinfo->setDesc->natts;
	ZkDeadLetter dl;
	bool		dead = zk_q_dl_unwrap(payload, m->len, &dl);
	Size		plen = dead ? dl.plen : m->len;
	bytea	   *b;

	/* a dead letter: its payload without the header, which fills origin* */
	if (dead)
		payload = dl.payload;
	b = palloc(VARHDRSZ + plen);
	SET_VARSIZE(b, VARHDRSZ + plen);
	memcpy(VARDATA(b), payload, plen);
	values[0] = Int64GetDatum(m->msg_id);
	values[1] = Int32GetDatum(m->priority);
	values[2] = TimestampTzGetDatum(zk_time(m->ctime_ms));
	values[3] = PointerGetDatum(b);
	/* body: the payload as text when it is valid UTF-8 this database can hold */
	{
		char	   *s = utf8_to_server_strict(payload, plen);

		if (s != NULL)
			values[4] = CStringGetTextDatum(s);
		else
			nulls[4] = true;
	}
	/*
	 * attempts (not in the type of a database still at version 1.0): a
	 * hand-out counts at least 1, so a dequeue's 0 is one zklock could not
	 * count (queue_claim.c, "Counting hand-outs"): NULL
	 */
	values[5] = Int32GetDatum(m->attempts);
	nulls[5] = (ctx->handout && m->attempts <= 0);
	if (dead)
	{
		char	   *o = zk_utf8_to_server_noerror(dl.origin, dl.origin_len);

		values[6] = CStringGetTextDatum(o);
		values[7] = Int64GetDatum(dl.msg_id);
		values[8] = Int32GetDatum(dl.attempts);
		nulls[6] = nulls[7] = nulls[8] = false;
	}
	Assert(natts <= 9);
	(void) natts;
	tuplestore_putvalues(ctx->rsinfo->setResult, ctx->rsinfo->setDesc, values, nulls);
}

/*
 * zk_dequeue() and, with try_only, zk_try_dequeue() (no timeout argument:
 * it does not wait): their zk_message rows
 */
static Datum
dequeue_sql(FunctionCallInfo fcinfo, bool try_only)
{
	int			len;
	char	   *name = queue_arg(fcinfo, &len);
	int64		timeout = try_only ? -1 : zk_arg_wait_ms(fcinfo, 1);
	int			max_items = int_arg(fcinfo, try_only ? 1 : 2, 1, "max_items");
	EmitCtx		ctx;

	InitMaterializedSRF(fcinfo, 0);
	ctx.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ctx.handout = true;
	(void) zk_queue_dequeue(name, len, max_items, try_only, timeout, emit_message, &ctx);
	return (Datum) 0;
}

/* SQL: zk_dequeue() */
Datum
zk_dequeue_sql(PG_FUNCTION_ARGS)
{
	return dequeue_sql(fcinfo, false);
}

/* SQL: zk_try_dequeue() */
Datum
zk_try_dequeue_sql(PG_FUNCTION_ARGS)
{
	return dequeue_sql(fcinfo, true);
}

/* ---- reads ---- */

/* A queue read that answers with one number (length, purge) */
static int64
count_request(FunctionCallInfo fcinfo, ZkQinfoOp op, const char *what)
{
	int			len;
	char	   *name = queue_arg(fcinfo, &len);
	uint32		idx;
	uint32		gen;
	ZkEntry    *e = zk_queue_info(op, name, len, 0, 0, &idx, &gen, what);
	int64		n = e->token;

	zk_queue_info_done(idx, gen);
	return n;
}

/* SQL: zk_queue_length() */
Datum
zk_queue_length(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(count_request(fcinfo, ZKQI_LENGTH, "read the queue's length"));
}

/* a second queue name (argument argno, not NULL), qualified, in UTF-8 */
static char *
other_queue_arg(FunctionCallInfo fcinfo, int argno, const char *what, int *qlen)
{
	text	   *t;
	int			rawlen;
	int			len;
	char	   *u;

	if (PG_ARGISNULL(argno))
		null_arg(what);
	t = PG_GETARG_TEXT_PP(argno);
	rawlen = VARSIZE_ANY_EXHDR(t);
	if (rawlen > ZKLOCK_NAME_MAX * 4)
		zk_check_name(what, rawlen);
	u = zk_name_to_utf8(VARDATA_ANY(t), rawlen, &len);
	zk_check_name(what, len);
	return zk_qualify_name(u, len, qlen);
}

/*
 * SQL: zk_queue_set_policy(queue, max_attempts, dead_letter): a queue's
 * dead-letter policy, written into its node (queue_read.c, "A queue's
 * policy"); both NULL remove it.  Group admin.
 */
Datum
zk_queue_set_policy(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name;
	char	   *shown;
	int			max_attempts = 0;
	char	   *dlq = NULL;
	int			dlqlen = 0;
	uint32		idx;
	uint32		gen;
	ZkEntry    *e;
	int64		token;
	char		why[ZKLOCK_ERRMSG_MAX];

	zk_require_shmem();
	name = queue_arg(fcinfo, &len);
	zk_check_name("queue name", len);
	shown = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (PG_ARGISNULL(1) != PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock dead-letter policy needs both max_attempts and dead_letter"),
				 errdetail("%s is NULL.", PG_ARGISNULL(1) ? "max_attempts" : "dead_letter"),
				 errhint("Give both, or NULL for both to remove the queue's policy.")));
	if (!PG_ARGISNULL(1))
	{
		int			qlen;
		char	   *qname = zk_qualify_name(name, len, &qlen);

		max_attempts = PG_GETARG_INT32(1);
		if (max_attempts < 1 || max_attempts > ZKQ_POLICY_MAX_ATTEMPTS)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock max_attempts %d is out of range", max_attempts),
					 errhint("Give 1 to %d hand-outs.", ZKQ_POLICY_MAX_ATTEMPTS)));
		dlq = other_queue_arg(fcinfo, 2, "dead-letter queue name", &dlqlen);
		if (dlqlen == qlen && memcmp(dlq, qname, qlen) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock queue \"%s\" cannot be its own dead-letter queue", shown),
					 errhint("Name another queue, for example \"%s.dlq\".", shown)));
	}
	e = zk_queue_info_named(ZKQI_SET_POLICY, name, len, max_attempts, 0, dlq, dlqlen,
							&idx, &gen, "set the queue's policy");
	token = e->token;
	strlcpy(why, e->errmsg, sizeof(why));
	zk_queue_info_done(idx, gen);
	if (token == ZKQ_POLICY_FOREIGN)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot set the policy of zklock queue \"%s\" because its node holds another client's data", shown),
				 errdetail("%s; nothing was written.", why),
				 errhint("zklock keeps a queue's policy in the data of the queue's node and never overwrites data it did not write: empty the node's data with the client that wrote it, or use another queue.")));
	if (token == ZKQ_POLICY_CHANGING)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot set the policy of zklock queue \"%s\" because it keeps changing", shown),
				 errdetail("%s; nothing was written.", why),
				 errhint("Another session is setting the policy at the same time: try again.")));
	PG_RETURN_VOID();
}

/*
 * SQL: zk_queue_move(from_queue, to_queue, max_items): up to max_items
 * unclaimed items moved, each exactly once (queue_move.c).
 * How many.  Group admin.
 */
Datum
zk_queue_move(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name;
	int			tolen;
	char	   *to;
	int			max_items;
	uint32		idx;
	uint32		gen;
	ZkEntry    *e;
	int64		n;

	zk_require_shmem();
	name = queue_arg(fcinfo, &len);
	zk_check_name("queue name", len);
	to = other_queue_arg(fcinfo, 1, "queue name", &tolen);
	max_items = int_arg(fcinfo, 2, 1000, "max_items");
	if (max_items < 1 || max_items > ZKQ_MOVE_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock max_items %d is out of range", max_items),
				 errhint("Move 1 to %d items per call; call it again for more.", ZKQ_MOVE_MAX)));
	{
		int			qlen;
		char	   *qname = zk_qualify_name(name, len, &qlen);

		if (qlen == tolen && memcmp(qname, to, qlen) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock cannot move the items of a queue into the same queue"),
					 errhint("Name two different queues.")));
	}
	e = zk_queue_info_named(ZKQI_MOVE, name, len, max_items, 0, to, tolen,
							&idx, &gen, "move the queue's items");
	n = e->token;
	zk_queue_info_done(idx, gen);
	PG_RETURN_INT64(n);
}

/* SQL: zk_queue_purge() */
Datum
zk_queue_purge(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(count_request(fcinfo, ZKQI_PURGE, "purge the queue"));
}

/*
 * Delete an empty, unused queue's nodes (queue_read.c, "Dropping a
 * queue"), at once: not undone by ROLLBACK.  true: dropped; false: there
 * was no such queue.  Refused with 55006 while it has items or claims, or
 * while this cluster uses it (this transaction's own items for it
 * included, which its COMMIT would publish).
 */
Datum
zk_queue_drop(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = queue_arg(fcinfo, &len);
	char	   *shown = text_to_cstring(PG_GETARG_TEXT_PP(0));
	uint32		idx;
	uint32		gen;
	ZkEntry    *e;
	int64		token;
	char		why[ZKLOCK_ERRMSG_MAX];
	int			mine;

	/* who may: EXECUTE, revoked from PUBLIC (the "admin" group) */
	zk_require_shmem();
	zk_check_name("queue name", len);
	mine = zk_queue_pending_items(name, len);
	if (mine > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot drop zklock queue \"%s\" while this transaction enqueues into it", shown),
				 errdetail("This transaction enqueued %d %s into it, published when it commits.",
						   mine, mine == 1 ? "item" : "items"),
				 errhint("Drop the queue after the transaction has ended and its items are consumed.")));
	e = zk_queue_info(ZKQI_DROP, name, len, 0, 0, &idx, &gen, "drop the queue");
	token = e->token;
	strlcpy(why, e->errmsg, sizeof(why));
	zk_queue_info_done(idx, gen);
	switch (token)
	{
		case ZKQ_DROP_DONE:
			PG_RETURN_BOOL(true);
		case ZKQ_DROP_ABSENT:
			PG_RETURN_BOOL(false);
		case ZKQ_DROP_ITEMS:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("cannot drop zklock queue \"%s\" because it is not empty", shown),
					 errdetail("%s; nothing was dropped.", why),
					 errhint("Consume the items (or delete the unclaimed ones with zk_queue_purge), wait until the transactions that claimed items have ended and delayed items are due and consumed, then drop it.")));
			break;
		case ZKQ_DROP_IN_USE:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("cannot drop zklock queue \"%s\" because it is in use on this server", shown),
					 errdetail("%s; nothing was dropped.", why),
					 errhint("Drop it once its consumers on this server have stopped waiting and the transactions that dequeue from or enqueue into it have ended.")));
			break;
		case ZKQ_DROP_FOREIGN:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("cannot drop zklock queue \"%s\" because its node has children zklock does not create", shown),
					 errdetail("%s; nothing was dropped.", why),
					 errhint("Another ZooKeeper client keeps its own nodes there: remove them with that client, or leave the queue.")));
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("cannot drop zklock queue \"%s\" because it keeps changing", shown),
					 errdetail("%s; nothing was dropped.", why),
					 errhint("Another client is using the queue: retry when it is idle.")));
			break;
	}
	PG_RETURN_BOOL(false);		/* not reached */
}

/*
 * The answer to a one-off read: in dsa, or in a segment of its own when
 * large (queue_read.c, info_finish).  Maps it (*seg) and returns its
 * address, or NULL when there is none; answer_unmap before letting go of
 * the entry.
 */
static char *
answer_map(ZkEntry *e, dsm_segment **seg)
{
	*seg = NULL;
	if (e->dsm != DSM_HANDLE_INVALID)
	{
		*seg = dsm_attach(e->dsm);
		if (*seg == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not map the zklock worker's answer")));
		return dsm_segment_address(*seg);
	}
	if (DsaPointerIsValid(e->blob))
		return dsa_get_address(zk_dsa(), e->blob);
	return NULL;
}

/* Detach the segment answer_map attached, if it did */
static void
answer_unmap(dsm_segment *seg)
{
	if (seg != NULL)
		dsm_detach(seg);
}

/* zklock.max_answer_bytes, in bytes */
static uint64
answer_cap(void)
{
	return (uint64) zk_max_answer_kb * 1024;
}

/*
 * Hand the answer to the one-off read e (idx, gen), if it has one, to rows:
 * the answer's header and its records behind it.  The read is let go
 * whatever happens (PG_CATCH and after: gcc takes PG_FINALLY's flag for
 * clobbered in a function this small).
 */
static void
answer_rows(ZkEntry *e, uint32 idx, uint32 gen,
			void (*rows) (const ZkAnswer *a, char *p, void *arg), void *arg)
{
	dsm_segment *volatile seg = NULL;

	PG_TRY();
	{
		dsm_segment *s;
		char	   *p = answer_map(e, &s);

		seg = s;
		if (p != NULL)
			rows((const ZkAnswer *) p, p + MAXALIGN(sizeof(ZkAnswer)), arg);
	}
	PG_CATCH();
	{
		answer_unmap(seg);
		zk_queue_info_done(idx, gen);
		PG_RE_THROW();
	}
	PG_END_TRY();
	answer_unmap(seg);
	zk_queue_info_done(idx, gen);
}

/* answer_rows' rows of zk_queue_peek(): zk_message rows, in queue order */
static void
peek_rows(const ZkAnswer *a, char *p, void *arg)
{
	ZkMsgRec  **msgs = palloc(sizeof(ZkMsgRec *) * Max(a->count, 1));
	uint32		i;
	int			k;

	for (i = 0; i < a->count; i++)
	{
		msgs[i] = (ZkMsgRec *) p;
		p += MAXALIGN(sizeof(ZkMsgRec) + msgs[i]->len);
	}
	/* in queue order */
	for (i = 1; i < a->count; i++)
	{
		ZkMsgRec   *m = msgs[i];

		for (k = i - 1; k >= 0 && strcmp(msgs[k]->node, m->node) > 0; k--)
			msgs[k + 1] = msgs[k];
		msgs[k + 1] = m;
	}
	for (i = 0; i < a->count; i++)
		emit_message(msgs[i], (const char *) msgs[i] + sizeof(ZkMsgRec), arg);
}

/* SQL: zk_queue_peek() */
Datum
zk_queue_peek(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = queue_arg(fcinfo, &len);
	int			n = int_arg(fcinfo, 1, 10, "row count");
	uint32		idx;
	uint32		gen;
	ZkEntry    *e;
	EmitCtx		ctx;

	if (n < 0 || n > 100000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock peek count must be between 0 and 100000"),
				 errdetail("The count was %d.", n),
				 errhint("Ask for fewer rows.")));
	InitMaterializedSRF(fcinfo, 0);
	ctx.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ctx.handout = false;
	if (n == 0)
	{
		zk_check_name("queue name", len);
		return (Datum) 0;
	}
	e = zk_queue_info(ZKQI_PEEK, name, len, n, answer_cap(), &idx, &gen, "peek at the queue");
	answer_rows(e, idx, gen, peek_rows, &ctx);
	return (Datum) 0;
}

/*
 * How long ago (from the transaction's start, now()) a ZooKeeper ctime was:
 * ms since the epoch, on the server's clock; never below 0
 */
static Interval *
ctime_age(int64 ms)
{
	TimestampTz at = (TimestampTz) ms * 1000 -
		((TimestampTz) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC);
	int64		us = Max(GetCurrentTransactionStartTimestamp() - at, 0);
	Interval   *iv = palloc0(sizeof(Interval));

	iv->time = us;
	return iv;
}

/*
 * answer_rows' rows of zk_queues_internal() (arg: its ReturnSetInfo): one
 * a queue of this session's namespace
 */
static void
queues_rows(const ZkAnswer *a, char *p, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	uint32		i;
	MemoryContext rowcxt = AllocSetContextCreate(CurrentMemoryContext,
												 "zk_queues rows",
												 ALLOCSET_DEFAULT_SIZES);
	HTAB	   *counts = zk_queue_local_counts();	/* one pass over the table */

	for (i = 0; i < a->count; i++)
	{
		ZkQueueRow	row;
		char		name[ZKLOCK_NAME_MAX * 4 + 1];
		char		dlq[ZKLOCK_NAME_MAX * 4 + 1];
		Datum		values[10];
		bool		nulls[10];
		char	   *shown;
		ZkQueueLocal *local;
		MemoryContext old;
		int			k;

		memcpy(&row, p, sizeof(row));
		memcpy(name, p + sizeof(row), Min(row.namelen, sizeof(name) - 1));
		name[Min(row.namelen, sizeof(name) - 1)] = '\0';
		memcpy(dlq, p + sizeof(row) + row.namelen, Min(row.dlqlen, sizeof(dlq) - 1));
		dlq[Min(row.dlqlen, sizeof(dlq) - 1)] = '\0';
		p += MAXALIGN(sizeof(row) + row.namelen + row.dlqlen);
		/* the queues of this session's namespace only */
		if (!zk_name_in_namespace(name, zk_current_namespace()))
			continue;
		local = hash_search(counts, name, HASH_FIND, NULL);
		old = MemoryContextSwitchTo(rowcxt);
		memset(nulls, 0, sizeof(nulls));
		shown = zk_display_name(name);
		if (shown == NULL)
			nulls[0] = true;
		else
			values[0] = CStringGetTextDatum(shown);
		values[1] = Int64GetDatum(row.items);
		values[2] = Int64GetDatum(row.claimed);
		values[3] = Int32GetDatum(local ? local->claims : 0);
		values[4] = Int32GetDatum(local ? local->waiting : 0);
		values[5] = Int64GetDatum(row.delayed);
		/* the policy's dead-letter queue, as its name is shown */
		shown = row.dlqlen > 0 ? zk_display_name(dlq) : NULL;
		nulls[6] = (shown == NULL);
		if (shown != NULL)
			values[6] = CStringGetTextDatum(shown);
		nulls[7] = (row.max_attempts <= 0);
		values[7] = Int32GetDatum(row.max_attempts);
		/* ages from ZooKeeper's ctime (the server's clock), never below 0 */
		for (k = 0; k < 2; k++)
		{
			int64		ms = k == 0 ? row.ready_ctime : row.claim_ctime;

			nulls[8 + k] = (ms <= 0);
			if (ms > 0)
				values[8 + k] = IntervalPGetDatum(ctime_age(ms));
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		MemoryContextSwitchTo(old);
		MemoryContextReset(rowcxt);
	}
}

/*
 * SQL: zk_retry_later(msg_id, delay): the item this transaction dequeued
 * goes back when the transaction ends, commit or rollback, but is handed
 * out again only after delay (queue_claim.c, "Backoff"); a delay of zero
 * or less takes a backoff set earlier back
 */
Datum
zk_retry_later_sql(PG_FUNCTION_ARGS)
{
	int64		msg_id;
	int64		until_ms;

	if (PG_ARGISNULL(0))
		null_arg("msg_id");
	msg_id = PG_GETARG_INT64(0);
	until_ms = due_arg(fcinfo, 1, INTERVALOID);
	if (!zk_queue_retry_later(msg_id, until_ms))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this transaction holds no zklock queue item with msg_id " INT64_FORMAT, msg_id),
				 errdetail("zk_retry_later acts on an item that this transaction dequeued and still holds."),
				 errhint("Call it in the transaction that dequeued the item, before COMMIT or ROLLBACK, with the msg_id zk_dequeue returned.")));
	PG_RETURN_VOID();
}

/* SQL: zk_queues_internal() */
Datum
zk_queues_internal(PG_FUNCTION_ARGS)
{
	uint32		idx;
	uint32		gen;
	ZkEntry    *e;

	InitMaterializedSRF(fcinfo, 0);
	(void) zk_current_namespace();	/* the namespace is ours (nsclaim.c) */
	/* "queues", qualified: the worker lists this namespace's queues only */
	e = zk_queue_info(ZKQI_QUEUES, "queues", 6, 0, answer_cap(), &idx, &gen, "list the queues");
	answer_rows(e, idx, gen, queues_rows, fcinfo->resultinfo);
	return (Datum) 0;
}

/* SQL: zk_queue_release_cluster() */
Datum
zk_queue_release_cluster(PG_FUNCTION_ARGS)
{
	char	   *s;
	char	   *end;
	char	   *run = NULL;
	uint64		sysid;
	uint32		idx;
	uint32		gen;
	ZkEntry    *e;
	int64		n;

	/* who may: EXECUTE, revoked from PUBLIC (the "admin" group) */
	if (PG_ARGISNULL(0))
		null_arg("cluster");
	s = text_to_cstring(PG_GETARG_TEXT_PP(0));
	errno = 0;
	sysid = strtoull(s, &end, 10);
	/* "<sysid>", or "<sysid>-<run>" (16 hex digits) for one run */
	if (*end == '-' && strlen(end + 1) == 16 && strspn(end + 1, "0123456789abcdef") == 16 &&
		strspn(end + 1, "0") != 16)
	{
		run = end + 1;
		end += 17;
	}
	if (s[0] == '\0' || s[0] == '-' || *end != '\0' || errno != 0 || sysid == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid cluster system identifier: \"%s\"", s),
				 errhint("Give the decimal system_identifier of pg_control_system() of the cluster that will not come back, as text, or a run of this cluster as the server log names it (<system identifier>-<16 hex digits>).")));
	if (sysid == GetSystemIdentifier() && run == NULL)
	{
		char		left[ZK_LEFT_RUNS_MAX];

		/* the runs the last settling pass left alone, for the hint */
		LWLockAcquire(zk_ctl->lock, LW_SHARED);
		strlcpy(left, zk_ctl->left_runs, sizeof(left));
		LWLockRelease(zk_ctl->lock);
		if (left[0] != '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cannot release this cluster's own queue claims"),
					 errdetail("The zklock worker settles this cluster's claims from its commit log; it left alone those of the dead runs %s (a restored backup or a copy cannot tell from its WAL whether their transactions committed).",
							   left),
					 errhint("Once that server is gone for good, release one run: zk_queue_release_cluster('<system identifier>-<run>') with a run named above.")));
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot release this cluster's own queue claims"),
				 errdetail("The zklock worker settles this cluster's claims from its commit log; its last settling pass left no dead run's claims alone."),
				 errhint("Give the identifier of a cluster that will never come back, or one run of this cluster that the server log says was left alone.")));
	}
	if (run != NULL && sysid == GetSystemIdentifier() &&
		strtoull(run, NULL, 16) == zk_ctl->run_id)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot release run \"%s\": it is this server's own run", s),
				 errdetail("The zklock worker settles this run's queue claims and transaction nodes itself."),
				 errhint("Give a dead run of this cluster: the server log and the detail of zk_queue_release_cluster('" UINT64_FORMAT "') name those left alone.",
						 sysid)));
	e = zk_queue_info(ZKQI_RELEASE_CLUSTER, run, run ? 16 : 0, 0, sysid, &idx, &gen,
					  "release the cluster's queue claims");
	n = e->token;
	if (n < 0)
	{
		char		live[ZKLOCK_ERRMSG_MAX];

		/* the worker found a run of that cluster alive: nothing released */
		strlcpy(live, e->errmsg, sizeof(live));
		zk_queue_info_done(idx, gen);
		if (run != NULL && strcmp(live, s) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("cannot release run \"%s\" from this cluster: run %s of that system identifier is alive",
							s, live),
					 errdetail("A server with that system identifier runs (a copy or a restored backup, %s/runs/%s/live exists); its WAL may show which of the run's transactions committed, which this server cannot know.",
							   zk_root, live),
					 errhint("Run SELECT zk_queue_release_cluster('%s') on that server.", s)));
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cluster \"%s\" is alive", s),
				 errdetail("Its run %s is registered in ZooKeeper with a live session (%s/runs/%s/live exists); releasing its claims would let a second consumer take items it holds.",
						   live, zk_root, live),
				 errhint("Stop that cluster, or wait until its ZooKeeper session expires, then retry.")));
	}
	zk_queue_info_done(idx, gen);
	PG_RETURN_INT64(n);
}

/*
 * zk_namespace_totals(): what each namespace keeps, as the worker last
 * counted it (queue_nskept.c), against zklock.max_namespace_items; group
 * monitor.  A copy is taken under the lock, the rows made after.
 */
Datum
zk_namespace_totals(PG_FUNCTION_ARGS)
{
	static const char *const states[] = {"", "counting", "counted", "not bounded"};
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ZkNsUsage  *copy;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	zk_require_shmem();
	copy = palloc(sizeof(ZkNsUsage) * ZK_NS_SLOTS);
	zk_backend_lock(LW_SHARED);
	memcpy(copy, zk_q_shared->ns_usage, sizeof(ZkNsUsage) * ZK_NS_SLOTS);
	LWLockRelease(zk_ctl->lock);
	for (i = 0; i < ZK_NS_SLOTS; i++)
	{
		ZkNsUsage  *u = &copy[i];
		Datum		values[7];
		bool		nulls[7] = {false, false, false, false, false, false, false};
		char	   *ns;

		if (u->state == ZKNS_UNUSED || u->state > ZKNS_UNBOUNDED)
			continue;
		u->ns[sizeof(u->ns) - 1] = '\0';
		ns = zk_utf8_to_server_noerror(u->ns, strlen(u->ns));
		if (ns != NULL)
			values[0] = CStringGetTextDatum(ns);
		else
			nulls[0] = true;
		values[1] = CStringGetTextDatum(states[u->state]);
		values[2] = Int64GetDatum(u->counted);
		nulls[2] = (u->state == ZKNS_COUNTING);
		values[3] = Int64GetDatum(u->reserved);
		values[4] = Int64GetDatum((int64) zk_max_namespace_items);
		nulls[4] = (zk_max_namespace_items <= 0);
		values[5] = TimestampTzGetDatum(u->counted_at);
		nulls[5] = (u->counted_at == 0);
		values[6] = Int64GetDatum((int64) u->refused);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * SQL: zk_queue_stats(): this cluster's hand-outs, consumes and releases of
 * each queue of the session's namespace since the worker started (or since
 * the queue got its slot back), from a copy of zk_q_shared->stats taken
 * under the lock; no request to ZooKeeper.
 */
Datum
zk_queue_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ZkQueueStat *copy;
	const char *ns;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	zk_require_shmem();
	ns = zk_current_namespace();
	copy = palloc(sizeof(ZkQueueStat) * ZKQ_STATS_SLOTS);
	zk_backend_lock(LW_SHARED);
	memcpy(copy, zk_q_shared->stats, sizeof(ZkQueueStat) * ZKQ_STATS_SLOTS);
	LWLockRelease(zk_ctl->lock);
	for (i = 0; i < ZKQ_STATS_SLOTS; i++)
	{
		ZkQueueStat *s = &copy[i];
		Datum		values[7];
		bool		nulls[7] = {false, false, false, false, false, false, false};
		char	   *shown;

		s->name[sizeof(s->name) - 1] = '\0';
		if (s->name[0] == '\0' || !zk_name_in_namespace(s->name, ns))
			continue;
		shown = zk_display_name(s->name);
		if (shown == NULL)
			nulls[0] = true;
		else
			values[0] = CStringGetTextDatum(shown);
		values[1] = Int64GetDatum((int64) s->handed_out);
		values[2] = Int64GetDatum((int64) s->consumed);
		values[3] = Int64GetDatum((int64) s->released);
		values[4] = Int64GetDatum((int64) s->dead_lettered);
		values[5] = TimestampTzGetDatum(s->since);
		values[6] = TimestampTzGetDatum(s->last_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
