/*-------------------------------------------------------------------------
 *
 * barrier_sql.c
 *	  The barrier recipes' SQL functions: double barrier membership
 *	  (zk_barrier_enter, zk_barrier_leave), gates (zk_gate_close,
 *	  zk_gate_open, zk_gate_wait) and durable arrivals (zk_arrive, zk_await,
 *	  zk_arrivals, zk_arrivals_reset).  What they ask of the worker is in
 *	  barrier_backend.c.
 *
 *	  Gate changes and arrivals are written with the transaction at COMMIT
 *	  (zk_queue_txn_op: the queue's transaction node makes them exact across
 *	  crashes).  Membership belongs to the backend, not the transaction: it
 *	  lasts until zk_barrier_leave or the backend's exit.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "barrier.h"
#include "queue/queue.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(zk_barrier_enter);
PG_FUNCTION_INFO_V1(zk_barrier_leave);
PG_FUNCTION_INFO_V1(zk_arrive);
PG_FUNCTION_INFO_V1(zk_arrivals);
PG_FUNCTION_INFO_V1(zk_arrivals_reset);

/* A name or participant argument in UTF-8, checked */
#define arg_name zk_arg_text_name

/* The parties argument: not null, at least 1 */
static int32
arg_parties(FunctionCallInfo fcinfo, int argno)
{
	int32		parties = zk_arg_count(fcinfo, argno, "parties",
										"Give the number of parties to wait for, 1 or more.");

	/* more could never be counted: the worker lists at most that many */
	if (parties > zk_max_children)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("zklock parties must be at most zklock.max_children (%d)",
						zk_max_children),
				 errdetail("parties was %d.", parties),
				 errhint("Wait for fewer parties, or have a superuser raise zklock.max_children (reload).")));
	return parties;
}

/* ---- double barrier ---- */

/* SQL: zk_barrier_enter() */
Datum
zk_barrier_enter(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_name(fcinfo, 0, "barrier name", &len);
	int32		parties = arg_parties(fcinfo, 1);
	int64		timeout_ms = zk_arg_wait_ms(fcinfo, 2);

	PG_RETURN_BOOL(zk_barrier_enter_member(name, len, parties, timeout_ms));
}

/* SQL: zk_barrier_leave() */
Datum
zk_barrier_leave(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_name(fcinfo, 0, "barrier name", &len);
	int64		timeout_ms = zk_arg_wait_ms(fcinfo, 1);

	PG_RETURN_BOOL(zk_barrier_leave_member(name, len, timeout_ms));
}

/* ---- gates and arrivals ---- */

/*
 * Record op (a create, with this backend's node data, or a delete) of the
 * node rel in this transaction's node, published at COMMIT: a gate's change,
 * an arrival
 */
static void
txn_node_op(int op, const char *rel, const char *what)
{
	char		data[ZKLOCK_DATA_MAX];

	if (op == ZKQ_OP_CREATE)
		zk_build_node_data(data, sizeof(data));
	else
		data[0] = '\0';
	zk_queue_txn_op(op, rel, data, strlen(data), what);
}

/* zk_gate_open/close: record the gate's change */
static void
gate_change(FunctionCallInfo fcinfo, int op, const char *what)
{
	int			len;
	char	   *name = arg_name(fcinfo, 0, "gate name", &len);
	char		ename[ZKLOCK_ENAME_MAX + 1];
	char		rel[ZKLOCK_ENAME_MAX + 16];

	name = zk_qualify_name(name, len, &len);
	zk_encode_name(name, len, ename);
	snprintf(rel, sizeof(rel), "gates/%s", ename);
	txn_node_op(op, rel, what);
}

/*
 * zk_gate_wait(name, timeout) and zk_await(name, parties, timeout): wait
 * until the gate is open, or until parties have arrived (bop)
 */
static Datum
wait_common(FunctionCallInfo fcinfo, int bop, const char *label,
			const char *what)
{
	int			len;
	char	   *name = arg_name(fcinfo, 0, label, &len);
	int32		parties = bop == ZKB_ARRIVALS ? arg_parties(fcinfo, 1) : 0;
	int64		timeout_ms = zk_arg_wait_ms(fcinfo, bop == ZKB_ARRIVALS ? 2 : 1);

	PG_RETURN_BOOL(zk_barrier_wait(bop, name, len, parties, timeout_ms, what));
}

/* SQL: zk_gate_close(), zk_gate_open(), zk_gate_wait() */
ZK_SQL_PROC(zk_gate_close, gate_change(fcinfo, ZKQ_OP_CREATE, "close a gate"))
ZK_SQL_PROC(zk_gate_open, gate_change(fcinfo, ZKQ_OP_DELETE, "open a gate"))
ZK_SQL_FUNC(zk_gate_wait, wait_common(fcinfo, ZKB_GATE, "gate name", "wait for the gate"))

/* SQL: zk_arrive() */
Datum
zk_arrive(PG_FUNCTION_ARGS)
{
	int			len;
	int			plen;
	char	   *name = arg_name(fcinfo, 0, "arrivals name", &len);
	char	   *part = arg_name(fcinfo, 1, "participant", &plen);
	char		ename[ZKLOCK_ENAME_MAX + 1];
	char		epart[ZKLOCK_ENAME_MAX + 1];
	char		rel[2 * ZKLOCK_ENAME_MAX + 16];

	name = zk_qualify_name(name, len, &len);
	zk_encode_name(name, len, ename);
	zk_encode_name(part, plen, epart);
	snprintf(rel, sizeof(rel), "arrivals/%s/%s", ename, epart);
	txn_node_op(ZKQ_OP_CREATE, rel, "arrive");
	PG_RETURN_VOID();
}

/* SQL: zk_await() */
ZK_SQL_FUNC(zk_await, wait_common(fcinfo, ZKB_ARRIVALS, "arrivals name", "await the arrivals"))

/* an arrival's participant, in the database encoding (NULL if it has none) */
static char *
decode_node_name(const char *enc, int len)
{
	char	   *raw = pnstrdup(enc, len);
	char	   *out = palloc(len + 1);
	int			n;

	n = zk_decode_name(raw, out, len + 1);
	return zk_utf8_to_server_noerror(out, n);
}

/*
 * The text field key of an arrival's data dt (len bytes), in the database
 * encoding; false when it is absent or cannot be converted
 */
static bool
arrival_text(const char *dt, int len, const char *key, Datum *value)
{
	char		f[ZKLOCK_DATA_MAX];
	char	   *s;

	if (!zk_json_field(dt, len, key, f, sizeof(f)) ||
		(s = zk_utf8_to_server_noerror(f, strlen(f))) == NULL)
		return false;
	*value = CStringGetTextDatum(s);
	return true;
}

/*
 * The number field key of an arrival's data dt (len bytes); false when it
 * is absent, not digits only, or maxlen digits or more
 */
static bool
arrival_number(const char *dt, int len, const char *key, size_t maxlen,
			   Datum *value)
{
	char		f[ZKLOCK_DATA_MAX];

	if (!zk_json_field(dt, len, key, f, sizeof(f)) ||
		strspn(f, "0123456789") != strlen(f) || strlen(f) >= maxlen)
		return false;
	*value = Int32GetDatum(atoi(f));
	return true;
}

/* SQL: zk_arrivals() */
Datum
zk_arrivals(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			len;
	char	   *name = arg_name(fcinfo, 0, "arrivals name", &len);
	ZkAnswer   *a;

	InitMaterializedSRF(fcinfo, 0);
	a = zk_barrier_read_arrivals(name, len);
	if (a != NULL)
	{
		char	   *p = (char *) a + sizeof(ZkAnswer);
		uint32		i;

		for (i = 0; i < a->count; i++)
		{
			ZkArrivalRec r;
			Datum		values[7];
			bool		nulls[7] = {false};
			const char *nm;
			const char *dt;
			char		f[ZKLOCK_DATA_MAX];
			char	   *part;

			memcpy(&r, p, sizeof(r));
			nm = p + sizeof(r);
			dt = nm + r.namelen;
			part = decode_node_name(nm, r.namelen);
			if (part == NULL)
				nulls[0] = true;
			else
				values[0] = CStringGetTextDatum(part);
			values[1] = TimestampTzGetDatum(time_t_to_timestamptz(r.ctime_ms / 1000) +
											(r.ctime_ms % 1000) * 1000);
			if (zk_json_field(dt, r.datalen, "cluster", f, sizeof(f)))
				values[2] = CStringGetTextDatum(f);
			else
				nulls[2] = true;
			nulls[3] = !arrival_text(dt, r.datalen, "host", &values[3]);
			nulls[4] = !arrival_number(dt, r.datalen, "port", 7, &values[4]);
			nulls[5] = !arrival_text(dt, r.datalen, "database", &values[5]);
			nulls[6] = !arrival_number(dt, r.datalen, "pid", 10, &values[6]);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
			p += MAXALIGN(sizeof(r) + r.namelen + r.datalen);
		}
	}
	return (Datum) 0;
}

/* SQL: zk_arrivals_reset() */
Datum
zk_arrivals_reset(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_name(fcinfo, 0, "arrivals name", &len);

	PG_RETURN_INT64(zk_barrier_reset_arrivals(name, len));
}
