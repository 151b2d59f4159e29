/*-------------------------------------------------------------------------
 *
 * barrier_backend.c
 *	  The barrier recipes' backend half and SQL functions: double barrier
 *	  membership (zk_barrier_enter, zk_barrier_leave), gates
 *	  (zk_gate_close, zk_gate_open, zk_gate_wait) and durable arrivals
 *	  (zk_arrive, zk_await, zk_arrivals, zk_arrivals_reset).
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
#include "queue.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(zk_barrier_enter);
PG_FUNCTION_INFO_V1(zk_barrier_leave);
PG_FUNCTION_INFO_V1(zk_gate_close);
PG_FUNCTION_INFO_V1(zk_gate_open);
PG_FUNCTION_INFO_V1(zk_gate_wait);
PG_FUNCTION_INFO_V1(zk_arrive);
PG_FUNCTION_INFO_V1(zk_await);
PG_FUNCTION_INFO_V1(zk_arrivals);
PG_FUNCTION_INFO_V1(zk_arrivals_reset);

/* this backend's barrier memberships */
typedef struct Membership
{
	char		name[ZKLOCK_NAME_MAX + 1];
	uint32		idx;
	uint32		gen;
} Membership;

static List *memberships = NIL;

/* ---- helpers ---- */

/* Let go of a barrier entry and wake the worker */
static void
release_entry(uint32 idx, uint32 gen)
{
	if (idx == ZKLOCK_NO_ENTRY || zk_ctl == NULL)
		return;
	(void) zk_release_entry(idx, gen);
	zk_wake_worker();
}

/* This session's membership of a double barrier, or NULL */
static Membership *
membership_of(const char *name)
{
	ListCell   *lc;

	foreach(lc, memberships)
	{
		Membership *m = lfirst(lc);

		if (strcmp(m->name, name) == 0)
			return m;
	}
	return NULL;
}

/* Forget a membership (its entry is let go separately) */
static void
membership_forget(Membership *m)
{
	memberships = list_delete_ptr(memberships, m);
	pfree(m);
}

/* A name or participant argument in UTF-8, checked */
#define arg_name zk_arg_text_name

/* The parties argument: not null, at least 1 */
static int32
arg_parties(FunctionCallInfo fcinfo, int argno)
{
	int32		parties;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock parties must not be null"),
				 errhint("Give the number of parties to wait for, 1 or more.")));
	parties = PG_GETARG_INT32(argno);
	if (parties < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock parties must be at least 1"),
				 errdetail("parties was %d.", parties),
				 errhint("Give the number of parties to wait for, 1 or more.")));
	return parties;
}

/* NULL: no limit (-1); else milliseconds, checked */
static int64
arg_timeout(FunctionCallInfo fcinfo, int argno)
{
	return zk_arg_wait_ms(fcinfo, argno);
}

/*
 * A barrier entry (member: session scope; waits and reads: transaction
 * scope)
 */
static ZkEntry *
new_entry(ZkKind kind, int bop, const char *name, int len, bool try_only)
{
	ZkEntry    *e;

	zk_backend_init();
	e = zk_new_entry(kind, name, len, ZKM_EXCLUSIVE,
					 kind == ZKK_BMEMBER ? ZKS_SESSION : ZKS_TRANSACTION, try_only);
	e->step.barrier = bop;
	return e;
}

/* queue e for the worker (lock held on entry, released here) */
static void
submit(ZkEntry *e, uint32 *idx, uint32 *gen)
{
	*idx = zk_entry_index(e);
	*gen = e->gen;
	zk_enqueue(e);
	LWLockRelease(zk_ctl->lock);
	zk_wake_worker();
}

/*
 * Wait for an entry's answer: true when granted, false when the timeout
 * passed or (timeout 0) the first look said no.  Any error lets go of the
 * entry first.
 */
static uint32 waiting_idx = ZKLOCK_NO_ENTRY;	/* let go at exit (FATAL) */
static uint32 waiting_gen = 0;

/*
 * Wait for a barrier request's answer: true if granted; on error the entry
 * is let go
 */
static bool
wait_entry(uint32 idx, uint32 gen, int64 timeout_ms, const char *what)
{
	int			outcome = ZKO_NONE;

	waiting_idx = idx;
	waiting_gen = gen;
	PG_TRY();
	{
		outcome = zk_wait_outcome(idx, timeout_ms == 0 ? -1 : timeout_ms,
								  zk_connect_timeout, what);
	}
	PG_CATCH();
	{
		waiting_idx = ZKLOCK_NO_ENTRY;
		release_entry(idx, gen);
		PG_RE_THROW();
	}
	PG_END_TRY();
	waiting_idx = ZKLOCK_NO_ENTRY;
	return outcome == ZKO_GRANTED;
}

/* ---- double barrier ---- */

/* SQL: zk_barrier_enter() */
Datum
zk_barrier_enter(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_name(fcinfo, 0, "barrier name", &len);
	int32		parties = arg_parties(fcinfo, 1);
	int64		timeout_ms = arg_timeout(fcinfo, 2);
	ZkEntry    *e;
	uint32		idx;
	uint32		gen;
	char		data[ZKLOCK_DATA_MAX];
	char		disp[ZKLOCK_NAME_MAX + 1];
	bool		ok;
	Membership *m;

	zk_require_shmem();
	strlcpy(disp, name, sizeof(disp));
	if (membership_of(disp) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session is already a member of barrier \"%s\"", zk_display_name(disp)),
				 errhint("Call zk_barrier_leave('%s') first.", zk_display_name(disp))));
	zk_build_node_data(data, sizeof(data));
	e = new_entry(ZKK_BMEMBER, ZKB_ENTER, name, len, timeout_ms == 0);
	e->parties = parties;
	strlcpy(e->data, data, sizeof(e->data));
	/* a new name per member, kazoo's shape: 32 hex digits */
	snprintf(e->guid, sizeof(e->guid), "%s%08x%08x", e->owner_tag,
			 (unsigned) zk_entry_index(e), (unsigned) e->gen);
	submit(e, &idx, &gen);

	ok = wait_entry(idx, gen, timeout_ms, "enter the barrier");
	if (!ok)
	{
		/* withdrawn: the worker deletes the member node */
		release_entry(idx, gen);
		PG_RETURN_BOOL(false);
	}
	m = MemoryContextAllocZero(TopMemoryContext, sizeof(Membership));
	strlcpy(m->name, disp, sizeof(m->name));
	m->idx = idx;
	m->gen = gen;
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		memberships = lappend(memberships, m);
		MemoryContextSwitchTo(old);
	}
	PG_RETURN_BOOL(true);
}

/* SQL: zk_barrier_leave() */
Datum
zk_barrier_leave(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_name(fcinfo, 0, "barrier name", &len);
	int64		timeout_ms = arg_timeout(fcinfo, 1);
	Membership *m;
	ZkEntry    *e;
	uint32		idx;
	uint32		gen;
	bool		ok;

	zk_require_shmem();
	m = membership_of(name);
	if (m == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this session is not a member of barrier \"%s\"", zk_display_name(name)),
				 errhint("Call zk_barrier_enter('%s', parties) first.", zk_display_name(name))));
	idx = m->idx;
	gen = m->gen;
	membership_forget(m);

	/* turn the member entry into a leaving one */
	zk_backend_lock(LW_EXCLUSIVE);
	e = zk_entry(idx);
	if (e->gen != gen || e->state == ZKE_FREE)
	{
		LWLockRelease(zk_ctl->lock);
		PG_RETURN_BOOL(true);	/* cannot happen: nothing left to leave */
	}
	e->step.barrier = ZKB_LEAVE;
	e->try_only = (timeout_ms == 0);
	e->outcome = ZKO_NONE;
	e->state = ZKE_HELD;
	e->requested_at = GetCurrentTimestamp();
	submit(e, &idx, &gen);

	ok = wait_entry(idx, gen, timeout_ms, "leave the barrier");
	/* either way the member is gone: the worker deletes what is left */
	release_entry(idx, gen);
	PG_RETURN_BOOL(ok);
}

/* ---- gates ---- */

/*
 * zk_gate_open/close: record the gate's change in this transaction's node
 * (published at COMMIT)
 */
static void
gate_change(FunctionCallInfo fcinfo, int op, const char *what)
{
	int			len;
	char	   *name = arg_name(fcinfo, 0, "gate name", &len);
	char		ename[ZKLOCK_ENAME_MAX + 1];
	char		rel[ZKLOCK_ENAME_MAX + 16];
	char		data[ZKLOCK_DATA_MAX];

	name = zk_qualify_name(name, len, &len);
	zk_encode_name(name, len, ename);
	snprintf(rel, sizeof(rel), "gates/%s", ename);
	if (op == ZKQ_OP_CREATE)
		zk_build_node_data(data, sizeof(data));
	else
		data[0] = '\0';
	zk_queue_txn_op(op, rel, data, strlen(data), what);
}

/* SQL: zk_gate_close() */
Datum
zk_gate_close(PG_FUNCTION_ARGS)
{
	gate_change(fcinfo, ZKQ_OP_CREATE, "close a gate");
	PG_RETURN_VOID();
}

/* SQL: zk_gate_open() */
Datum
zk_gate_open(PG_FUNCTION_ARGS)
{
	gate_change(fcinfo, ZKQ_OP_DELETE, "open a gate");
	PG_RETURN_VOID();
}

/* Submit a wait (gate or arrivals) and wait for it; false on timeout */
static bool
wait_for(FunctionCallInfo fcinfo, int bop, const char *name, int len, int32 parties,
		 int64 timeout_ms, const char *what)
{
	ZkEntry    *e;
	uint32		idx;
	uint32		gen;
	bool		ok;

	zk_require_shmem();
	e = new_entry(ZKK_BWAIT, bop, name, len, timeout_ms == 0);
	e->parties = parties;
	submit(e, &idx, &gen);
	ok = wait_entry(idx, gen, timeout_ms, what);
	release_entry(idx, gen);
	return ok;
}

/* SQL: zk_gate_wait() */
Datum
zk_gate_wait(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_name(fcinfo, 0, "gate name", &len);
	int64		timeout_ms = arg_timeout(fcinfo, 1);

	PG_RETURN_BOOL(wait_for(fcinfo, ZKB_GATE, name, len, 0, timeout_ms,
							"wait for the gate"));
}

/* ---- arrivals ---- */

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
	char		data[ZKLOCK_DATA_MAX];

	name = zk_qualify_name(name, len, &len);
	zk_encode_name(name, len, ename);
	zk_encode_name(part, plen, epart);
	snprintf(rel, sizeof(rel), "arrivals/%s/%s", ename, epart);
	zk_build_node_data(data, sizeof(data));
	zk_queue_txn_op(ZKQ_OP_CREATE, rel, data, strlen(data), "arrive");
	PG_RETURN_VOID();
}

/* SQL: zk_await() */
Datum
zk_await(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_name(fcinfo, 0, "arrivals name", &len);
	int32		parties = arg_parties(fcinfo, 1);
	int64		timeout_ms = arg_timeout(fcinfo, 2);

	PG_RETURN_BOOL(wait_for(fcinfo, ZKB_ARRIVALS, name, len, parties, timeout_ms,
							"await the arrivals"));
}

/* A one-off read; returns the granted entry, or errors out */
static ZkEntry *
binfo(int bop, const char *name, int len, uint32 *idx, uint32 *gen, const char *what)
{
	ZkEntry    *e;

	zk_require_shmem();
	e = new_entry(ZKK_BINFO, bop, name, len, false);
	submit(e, idx, gen);
	(void) wait_entry(*idx, *gen, -1, what);
	return zk_entry(*idx);
}

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

/* SQL: zk_arrivals() */
Datum
zk_arrivals(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			len;
	char	   *name = arg_name(fcinfo, 0, "arrivals name", &len);
	uint32		idx;
	uint32		gen;
	ZkEntry    *e;
	char	   *copy = NULL;
	Size		size = 0;

	InitMaterializedSRF(fcinfo, 0);
	e = binfo(ZKB_LIST, name, len, &idx, &gen, "read the arrivals");
	if (DsaPointerIsValid(e->blob))
	{
		ZkAnswer   *a = dsa_get_address(zk_dsa(), e->blob);

		size = a->size;
		copy = palloc(size);
		memcpy(copy, a, size);
	}
	release_entry(idx, gen);
	if (copy != NULL)
	{
		ZkAnswer   *a = (ZkAnswer *) copy;
		char	   *p = copy + sizeof(ZkAnswer);
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
			if (zk_json_field(dt, r.datalen, "host", f, sizeof(f)) &&
				(part = zk_utf8_to_server_noerror(f, strlen(f))) != NULL)
				values[3] = CStringGetTextDatum(part);
			else
				nulls[3] = true;
			if (zk_json_field(dt, r.datalen, "port", f, sizeof(f)) &&
				strspn(f, "0123456789") == strlen(f) && strlen(f) < 7)
				values[4] = Int32GetDatum(atoi(f));
			else
				nulls[4] = true;
			if (zk_json_field(dt, r.datalen, "database", f, sizeof(f)) &&
				(part = zk_utf8_to_server_noerror(f, strlen(f))) != NULL)
				values[5] = CStringGetTextDatum(part);
			else
				nulls[5] = true;
			if (zk_json_field(dt, r.datalen, "pid", f, sizeof(f)) &&
				strspn(f, "0123456789") == strlen(f) && strlen(f) < 10)
				values[6] = Int32GetDatum(atoi(f));
			else
				nulls[6] = true;
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
	uint32		idx;
	uint32		gen;
	ZkEntry    *e;
	int64		n;

	e = binfo(ZKB_RESET, name, len, &idx, &gen, "reset the arrivals");
	n = e->token;
	release_entry(idx, gen);
	PG_RETURN_INT64(n);
}

/* ---- the backend's recipe table ---- */

/* At exit: let go of the wait in progress and every membership */
static void
barrier_at_exit(void)
{
	ListCell   *lc;

	if (waiting_idx != ZKLOCK_NO_ENTRY)
		(void) zk_release_entry(waiting_idx, waiting_gen);
	waiting_idx = ZKLOCK_NO_ENTRY;
	foreach(lc, memberships)
	{
		Membership *m = lfirst(lc);

		(void) zk_release_entry(m->idx, m->gen);
	}
	memberships = NIL;
}

const ZkRecipeBackend zk_barrier_backend = {
	.pre_commit = NULL,
	.pre_prepare = NULL,
	.xact_end = NULL,
	.subxact_end = NULL,
	.at_exit = barrier_at_exit,
};
