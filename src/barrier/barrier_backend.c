/*-------------------------------------------------------------------------
 *
 * barrier_backend.c
 *	  The barrier recipes' backend half: double barrier membership (for
 *	  zk_barrier_enter, zk_barrier_leave), waits for gates and arrivals
 *	  (zk_gate_wait, zk_await) and reads of arrivals (zk_arrivals,
 *	  zk_arrivals_reset).  Their SQL functions are in barrier_sql.c.
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
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

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
	zk_let_go(&idx, gen);		/* (a copy of the caller's idx) */
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
	/* a read of arrivals answers at most this much (barrier_arrivals.c) */
	if (kind == ZKK_BINFO)
		e->answer_cap = (uint64) zk_max_answer_kb * 1024;
	return e;
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

/* A one-off read; returns the granted entry, or errors out */
static ZkEntry *
binfo(int bop, const char *name, int len, uint32 *idx, uint32 *gen, const char *what)
{
	ZkEntry    *e;

	zk_require_shmem();
	e = new_entry(ZKK_BINFO, bop, name, len, false);
	zk_submit_entry(e, idx, gen);
	(void) wait_entry(*idx, *gen, -1, what);
	return zk_entry(*idx);
}

/* ---- what the SQL functions (barrier_sql.c) call ---- */

/*
 * zk_barrier_enter's work: enter the double barrier as a member of this
 * session; false when the timeout passed (or, timeout 0, the first look
 * found it not open)
 */
bool
zk_barrier_enter_member(const char *name, int len, int32 parties, int64 timeout_ms)
{
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
	zk_submit_entry(e, &idx, &gen);

	ok = wait_entry(idx, gen, timeout_ms, "enter the barrier");
	if (!ok)
	{
		/* withdrawn: the worker deletes the member node */
		release_entry(idx, gen);
		return false;
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
	return true;
}

/*
 * zk_barrier_leave's work: leave the double barrier this session is a
 * member of; false when the timeout passed first
 */
bool
zk_barrier_leave_member(const char *name, int len, int64 timeout_ms)
{
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
		return true;	/* cannot happen: nothing left to leave */
	}
	e->step.barrier = ZKB_LEAVE;
	e->try_only = (timeout_ms == 0);
	e->outcome = ZKO_NONE;
	e->state = ZKE_HELD;
	e->requested_at = GetCurrentTimestamp();
	zk_submit_entry(e, &idx, &gen);

	ok = wait_entry(idx, gen, timeout_ms, "leave the barrier");
	/* either way the member is gone: the worker deletes what is left */
	release_entry(idx, gen);
	return ok;
}

/*
 * zk_gate_wait's and zk_await's work: submit a wait (ZKB_GATE, or
 * ZKB_ARRIVALS of parties) and wait for it; false on timeout
 */
bool
zk_barrier_wait(int bop, const char *name, int len, int32 parties,
				int64 timeout_ms, const char *what)
{
	ZkEntry    *e;
	uint32		idx;
	uint32		gen;
	bool		ok;

	zk_require_shmem();
	e = new_entry(ZKK_BWAIT, bop, name, len, timeout_ms == 0);
	e->parties = parties;
	zk_submit_entry(e, &idx, &gen);
	ok = wait_entry(idx, gen, timeout_ms, what);
	release_entry(idx, gen);
	return ok;
}

/*
 * zk_arrivals' read: the arrivals as ZkArrivalRec records after a ZkAnswer
 * header, copied into this backend's memory; NULL when there are none
 */
ZkAnswer *
zk_barrier_read_arrivals(const char *name, int len)
{
	uint32		idx;
	uint32		gen;
	ZkEntry    *e;
	char	   *copy = NULL;
	Size		size = 0;

	e = binfo(ZKB_LIST, name, len, &idx, &gen, "read the arrivals");
	if (DsaPointerIsValid(e->blob))
	{
		ZkAnswer   *a = dsa_get_address(zk_dsa(), e->blob);

		size = a->size;
		copy = palloc(size);
		memcpy(copy, a, size);
	}
	release_entry(idx, gen);
	return (ZkAnswer *) copy;
}

/* zk_arrivals_reset's work: delete every arrival; returns how many went */
int64
zk_barrier_reset_arrivals(const char *name, int len)
{
	uint32		idx;
	uint32		gen;
	ZkEntry    *e;
	int64		n;

	e = binfo(ZKB_RESET, name, len, &idx, &gen, "reset the arrivals");
	n = e->token;
	release_entry(idx, gen);
	return n;
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

/*
 * zk_path('barrier' | 'gate' | 'arrivals', name): <root>/barriers/,
 * <root>/gates/ or <root>/arrivals/ and the encoded name
 */
static void
barrier_path(const char *kind, int arg, const char *name, int len,
			 char *out, size_t outlen)
{
	char		ename[ZKLOCK_ENAME_MAX + 1];
	const char *dir;

	if (strcmp(kind, "barrier") == 0)
		dir = "barriers";
	else if (strcmp(kind, "gate") == 0)
		dir = "gates";
	else
		dir = "arrivals";
	name = zk_path_qname(name, len, &len);
	zk_encode_name(name, len, ename);
	snprintf(out, outlen, "%s/%s/%s", zk_root, dir, ename);
}

const ZkRecipeBackend zk_barrier_backend = {
	.at_exit = barrier_at_exit,
	ZK_PATH_HOOK("barrier, gate, arrivals", barrier_path, 0),
};
