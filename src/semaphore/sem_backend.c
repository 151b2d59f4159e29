/*-------------------------------------------------------------------------
 *
 * sem_backend.c
 *	  The semaphore recipe's backend half: taking and letting go of leases
 *	  for the zk_semaphore families (their SQL functions: sem_sql.c) and
 *	  the ends of transactions.
 *
 *	  Taking a lease follows kazoo's Semaphore: hold the guard (kazoo's lock
 *	  on <name>-__lock__, a ZKK_LOCK entry of family ZKF_SEMAPHORES), then
 *	  the worker takes a lease in the pool (ZKK_SEMLEASE, sem_worker.c),
 *	  then the guard is let go, whatever happened.  Waiters queue on the
 *	  guard, so they are served in order and only one of them watches the
 *	  pool.
 *
 *	  Holds are counted per name like the locks' (lock_backend.c): a
 *	  backend has at most one lease of a semaphore, and stacks transaction
 *	  and session holds on it; the lease goes when the last hold does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "lock/lock.h"
#include "semaphore.h"

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/wait_event.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

typedef struct LocalSem
{
	char	   *name;			/* UTF-8 */
	int			len;
	int32		max;
	int32		permits;		/* leases held at once (ZkSemPart.permits) */
	uint32		idx;			/* the ZKK_SEMLEASE entry */
	uint32		gen;
	List	   *subxids;		/* transaction holds, by subtransaction */
	int			session;		/* session holds */
} LocalSem;

static List *sems = NIL;

/* semaphore leases taken in ZooKeeper, and tries refused (zk_status) */
typedef struct SemShared
{
	pg_atomic_uint64 taken;
	pg_atomic_uint64 refused;	/* none free, or the wait timed out */
} SemShared;

static SemShared *sem_shared = NULL;	/* zk_sem_backend.shmem */

/* how long a try waits for the guard without lock_timeout */
#define SEM_TRY_GUARD_MS	10000

/* a guard or a lease being taken, let go at exit (FATAL) */
static uint32 guard_idx = ZKLOCK_NO_ENTRY;
static uint32 guard_gen = 0;
static uint32 taking_idx = ZKLOCK_NO_ENTRY;
static uint32 taking_gen = 0;

/* This backend's lease of the semaphore name (UTF-8, qualified), or NULL */
static LocalSem *
find_sem(const char *name, int len)
{
	ListCell   *lc;

	foreach(lc, sems)
	{
		LocalSem   *ls = lfirst(lc);

		if (ls->len == len && memcmp(ls->name, name, len) == 0)
			return ls;
	}
	return NULL;
}

/* Drop ls and let go of its lease: its last hold ended, or it was lost */
static void
forget(LocalSem *ls)
{
	sems = list_delete_ptr(sems, ls);
	zk_let_go(&ls->idx, ls->gen);
	list_free(ls->subxids);
	pfree(ls->name);
	pfree(ls);
}

/* the lease's outcome now (under the lock) */
static int
lease_outcome(LocalSem *ls)
{
	ZkEntry    *e;
	int			outcome;

	zk_backend_lock(LW_SHARED);
	e = zk_entry(ls->idx);
	outcome = (e->gen == ls->gen) ? e->outcome : ZKO_LOST;
	LWLockRelease(zk_ctl->lock);
	return outcome;
}

/*
 * Keep the lease entry's scope (shown by zk_semaphores) in step with the
 * holds: session while any session hold is left.  Only the owner writes it.
 */
static void
note_scope(LocalSem *ls)
{
	ZkEntry    *e = zk_entry(ls->idx);

	if (e->gen == ls->gen)
		e->scope = ls->session > 0 ? ZKS_SESSION : ZKS_TRANSACTION;
}

/*
 * The worker refused (sqlstate, msg): the pool in ZooKeeper has another
 * max_leases than the caller's (22023), fewer leases than the permits
 * asked for (22023), no number (22023), or there is no pool and the
 * caller gave no max_leases (42704)
 */
static void
wrong_max(const char *uname, int32 max, int sqlstate, const char *msg)
{
	if (sqlstate == ERRCODE_UNDEFINED_OBJECT)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("zookeeper semaphore \"%s\" has no pool", uname),
				 errdetail("%s.", msg),
				 errhint("Give max_leases: the first taker sets it.")));
	if (max == 0 || strncmp(msg, "The semaphore has", 17) != 0 ||
		strstr(msg, "fewer than") != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zookeeper semaphore \"%s\" cannot give what was asked", uname),
				 errdetail("%s.", msg),
				 errhint("Ask for fewer permits, or raise the number of leases with zk_semaphore_set_max().")));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("zookeeper semaphore \"%s\" does not have %d leases", uname, max),
			 errdetail("%s.", msg),
			 errhint("Use the same max_leases everywhere, or delete the semaphore's node once nobody holds a lease.")));
}

static bool pool_has_room(const char *name, int len, int32 max, int32 permits,
						  ZkScope scope, const char *uname);

/* Stack one more hold on the leases this backend has (ls) */
static void
stack_hold(LocalSem *ls, int32 max, int32 permits, ZkScope scope, const char *uname)
{
	MemoryContext old;

	if (max != 0 && ls->max != max)
	{
		/*
		 * Not the number this session took by: it may have been changed
		 * since (zk_semaphore_set_max, by anyone), so the pool's own number
		 * decides.  Its count raises 22023 when that is not max; a stacked
		 * hold takes no lease, so whether one is free does not matter.
		 */
		(void) pool_has_room(ls->name, ls->len, max, ls->permits, scope, uname);
		ls->max = max;
	}
	if (ls->permits != permits)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("this session holds %d %s of zookeeper semaphore \"%s\", not %d",
						ls->permits, ls->permits == 1 ? "permit" : "permits", uname, permits),
				 errdetail("A session holds one set of permits of a semaphore; taking it again stacks a hold on that set."),
				 errhint("Ask for the same number of permits, or let go of the semaphore first.")));
	old = MemoryContextSwitchTo(TopMemoryContext);
	if (scope == ZKS_TRANSACTION)
		ls->subxids = lappend_int(ls->subxids, GetCurrentSubTransactionId());
	else
		ls->session++;
	MemoryContextSwitchTo(old);
	note_scope(ls);
}

/*
 * A try's count of the pool (ZKSEM_COUNT): false when every lease is
 * held; raises 22023 when the semaphore has another max_leases.
 */
static bool
pool_has_room(const char *name, int len, int32 max, int32 permits, ZkScope scope,
			  const char *uname)
{
	ZkEntry    *e;
	int			outcome;
	int			sqlstate;
	char		msg[ZKLOCK_ERRMSG_MAX];

	e = zk_new_entry(ZKK_SEMLEASE, name, len, ZKM_EXCLUSIVE, scope, true);
	e->step.sem = ZKSEM_COUNT;
	e->parties = max;
	ZKSEM(e)->permits = permits;
	zk_submit_entry(e, &taking_idx, &taking_gen);
	PG_TRY();
	{
		outcome = zk_wait_outcome(taking_idx, -1, zk_connect_timeout,
								  "count the leases of a semaphore");
	}
	PG_CATCH();
	{
		zk_let_go(&taking_idx, taking_gen);
		PG_RE_THROW();
	}
	PG_END_TRY();
	sqlstate = 0;
	if (outcome == ZKO_BUSY)
	{
		zk_backend_lock(LW_SHARED);
		e = zk_entry(taking_idx);
		if (e->gen == taking_gen)
		{
			sqlstate = e->sqlstate;
			strlcpy(msg, e->errmsg, sizeof(msg));
		}
		LWLockRelease(zk_ctl->lock);
	}
	zk_let_go(&taking_idx, taking_gen);
	if (sqlstate == ERRCODE_INVALID_PARAMETER_VALUE || sqlstate == ERRCODE_UNDEFINED_OBJECT)
		wrong_max(uname, max, sqlstate, msg);
	if (outcome != ZKO_GRANTED)
	{
		pg_atomic_fetch_add_u64(&sem_shared->refused, 1);
		return false;
	}
	return true;
}

/* The lease taken (taking_idx): this backend's from now on */
static void
remember_lease(const char *name, int len, int32 max, int32 permits, ZkScope scope)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	LocalSem   *ls = palloc0(sizeof(LocalSem));
	ZkEntry    *e;

	/* the pool's number, which a NULL max_leases went by */
	zk_backend_lock(LW_SHARED);
	e = zk_entry(taking_idx);
	if (e->gen == taking_gen && e->parties > 0)
		max = e->parties;
	LWLockRelease(zk_ctl->lock);
	ls->name = pnstrdup(name, len);
	ls->len = len;
	ls->max = max;
	ls->permits = permits;
	ls->idx = taking_idx;
	ls->gen = taking_gen;
	if (scope == ZKS_TRANSACTION)
		ls->subxids = list_make1_int(GetCurrentSubTransactionId());
	else
		ls->session = 1;
	sems = lappend(sems, ls);
	MemoryContextSwitchTo(old);
	taking_idx = ZKLOCK_NO_ENTRY;
	pg_atomic_fetch_add_u64(&sem_shared->taken, 1);
}

/*
 * Take a lease (or stack a hold on ours).  Returns false when a try found
 * no lease free, or (timeout) raises 55P03.
 */
bool
zk_sem_acquire(const char *name, int len, int32 max, int32 permits, ZkScope scope,
			   bool try_only,
			   volatile int64 timeout_ms)	/* lives across PG_TRY */
{
	LocalSem   *ls = find_sem(name, len);
	char	   *uname = zk_display_name(pnstrdup(name, len));
	char		data[ZKLOCK_DATA_MAX];
	ZkEntry    *e;
	TimestampTz start = GetCurrentTimestamp();
	int			outcome;
	int			sqlstate = 0;
	char		msg[ZKLOCK_ERRMSG_MAX];

	if (ls != NULL && lease_outcome(ls) == ZKO_LOST)
	{
		ereport(WARNING,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("the lease of zookeeper semaphore \"%s\" was lost", uname),
				 errdetail("Its ZooKeeper session ended; a new lease is taken.")));
		forget(ls);
		ls = NULL;
	}
	if (ls != NULL)
	{
		stack_hold(ls, max, permits, scope, uname);
		return true;
	}

	zk_build_node_data(data, sizeof(data));

	/*
	 * A try first counts the pool: when every lease is held the answer is
	 * no, at once.  Otherwise it waits its turn for the guard, which a
	 * taker holds for a few milliseconds (not answering "no" because
	 * another caller is taking the other free lease just now), but not
	 * for long: lock_timeout, or SEM_TRY_GUARD_MS.
	 */
	if (try_only)
	{
		if (!pool_has_room(name, len, max, permits, scope, uname))
			return false;
		timeout_ms = LockTimeout > 0 ? LockTimeout : SEM_TRY_GUARD_MS;
	}

	/* the leases and, maybe, the pool (the guard is charged as a lock) */
	zk_quota_charge_write((Size) (permits + 1) * ZK_NODE_CHARGE,
						  "A semaphore's leases and pool");

	/* the guard */
	e = zk_new_entry(ZKK_LOCK, name, len, ZKM_EXCLUSIVE, ZKS_SESSION, false);
	e->family = ZKF_SEMAPHORES;
	e->parties = max;			/* for zk_semaphores, which shows it waiting */
	zk_submit_entry(e, &guard_idx, &guard_gen);
	PG_TRY();
	{
		outcome = zk_wait_outcome(guard_idx, timeout_ms,
								  zk_connect_timeout, "take the guard of a semaphore");
		if (outcome == ZKO_GRANTED)
		{
			int64		left = timeout_ms;

			if (timeout_ms > 0)
				left = Max(0, timeout_ms -
						   TimestampDifferenceMilliseconds(start, GetCurrentTimestamp()));
			if (try_only)
				left = 0;
			e = zk_new_entry(ZKK_SEMLEASE, name, len, ZKM_EXCLUSIVE, scope, try_only);
			e->parties = max;
			ZKSEM(e)->permits = permits;
			e->requested_at = start;	/* in line since the guard was asked */
			strlcpy(e->data, data, sizeof(e->data));
			zk_submit_entry(e, &taking_idx, &taking_gen);
			outcome = zk_wait_outcome(taking_idx, left, zk_connect_timeout,
									  "take a lease of a semaphore");
			if (outcome == ZKO_BUSY)
			{
				zk_backend_lock(LW_SHARED);
				e = zk_entry(taking_idx);
				sqlstate = e->sqlstate;
				strlcpy(msg, e->errmsg, sizeof(msg));
				LWLockRelease(zk_ctl->lock);
			}
		}
	}
	PG_CATCH();
	{
		zk_let_go(&taking_idx, taking_gen);
		zk_let_go(&guard_idx, guard_gen);
		PG_RE_THROW();
	}
	PG_END_TRY();
	zk_let_go(&guard_idx, guard_gen);

	if (outcome == ZKO_GRANTED)
	{
		remember_lease(name, len, max, permits, scope);
		return true;
	}
	zk_let_go(&taking_idx, taking_gen);
	if (sqlstate == ERRCODE_INVALID_PARAMETER_VALUE || sqlstate == ERRCODE_UNDEFINED_OBJECT)
		wrong_max(uname, max, sqlstate, msg);
	pg_atomic_fetch_add_u64(&sem_shared->refused, 1);
	if (try_only)
		return false;
	zk_count(ZKCNT_TIMEOUTS, 1);
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("timed out waiting for a lease of zookeeper semaphore \"%s\"", uname),
			 max == 0 ?
			 errdetail("Waited " INT64_FORMAT " ms; too few of the pool's leases were free.", timeout_ms) :
			 permits == 1 ?
			 errdetail("Waited " INT64_FORMAT " ms; all %d leases are held.", timeout_ms, max) :
			 errdetail("Waited " INT64_FORMAT " ms; fewer than %d of the %d leases were free.",
					   timeout_ms, permits, max),
			 errhint("Raise the timeout (or lock_timeout), or retry later; zk_semaphore_holders() shows who holds them.")));
	return false;
}

/*
 * zk_semaphore_release(name): let go of one session hold; false and a
 * WARNING when there is none, or the lease had been lost
 */
bool
zk_sem_release_session(const char *name, int len)
{
	LocalSem   *ls = find_sem(name, len);
	bool		lost;

	if (ls == NULL || ls->session == 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("this session holds no session lease of zookeeper semaphore \"%s\"",
						zk_display_name(name))));
		return false;
	}
	lost = (lease_outcome(ls) == ZKO_LOST);
	ls->session--;
	if (ls->session == 0 && ls->subxids == NIL)
		forget(ls);
	else
		note_scope(ls);
	if (lost)
	{
		ereport(WARNING,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("the lease of zookeeper semaphore \"%s\" had been lost", zk_display_name(name)),
				 errdetail("Its ZooKeeper session ended while it was held.")));
		return false;
	}
	return true;
}

/* ---- zk_semaphore_set_max ---- */

/* how many times set_max reads and writes again when the pool changed meanwhile */
#define SEM_SET_ROUNDS	20

/* One step of set_max (ZKSEM_SETREAD or _SETWRITE); its outcome, and its entry's token */
static int
set_max_step(const char *name, int len, int step, int32 max, int32 version,
			 bool raise, int64 *token, int32 *version_read)
{
	ZkEntry    *e;
	int			outcome;

	e = zk_new_entry(ZKK_SEMLEASE, name, len, ZKM_EXCLUSIVE, ZKS_TRANSACTION, true);
	e->step.sem = step;
	e->parties = max;
	ZKSEM(e)->pool_version = version;
	ZKSEM(e)->version_known = true;
	ZKSEM(e)->raise = raise;
	zk_submit_entry(e, &taking_idx, &taking_gen);
	PG_TRY();
	{
		outcome = zk_wait_outcome(taking_idx, -1, zk_connect_timeout,
								  "change the number of leases of a semaphore");
	}
	PG_CATCH();
	{
		zk_let_go(&taking_idx, taking_gen);
		PG_RE_THROW();
	}
	PG_END_TRY();
	zk_backend_lock(LW_SHARED);
	e = zk_entry(taking_idx);
	*token = (e->gen == taking_gen) ? e->token : 0;
	*version_read = (e->gen == taking_gen) ? ZKSEM(e)->pool_version : 0;
	LWLockRelease(zk_ctl->lock);
	zk_let_go(&taking_idx, taking_gen);
	return outcome;
}

/*
 * zk_semaphore_set_max(name, max, timeout): the pool's max_leases becomes
 * max for every taker of every cluster; returns the number it had.
 * Raising needs nothing more (a waiter is woken and goes by the new
 * number).  Lowering holds the semaphore's guard while it writes, as a
 * taker does while it counts and creates, so no taker counts by the old
 * number after the write: nobody new comes in until fewer than max hold
 * a lease (leases already held stay).  The write is at the version read:
 * a change in between is read again (SEM_SET_ROUNDS times at most).
 */
int32
zk_sem_set_max(const char *name, int len, int32 max, volatile int64 timeout_ms)
{
	char	   *uname = zk_display_name(pnstrdup(name, len));
	int			round;

	zk_quota_charge_write(ZK_NODE_CHARGE, "A semaphore's number of leases");
	for (round = 0; round < SEM_SET_ROUNDS; round++)
	{
		int64		read;
		int64		ignored;
		int32		cur;
		int32		version;
		int32		ignored_version;
		bool		lower;
		int			outcome;

		CHECK_FOR_INTERRUPTS();
		outcome = set_max_step(name, len, ZKSEM_SETREAD, 0, 0, false, &read, &version);
		if (read == -2 || outcome != ZKO_GRANTED)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("zookeeper semaphore \"%s\" has no pool", uname),
					 errdetail("Nobody holds a lease of it; its pool went with the last one."),
					 errhint("The next taker sets max_leases when it creates the pool.")));
		cur = (int32) read;		/* -1: no number in the pool */
		if (cur == max)
			return cur;
		lower = (cur < 0 || max < cur);
		if (lower)
		{
			ZkEntry    *g;

			/* the guard, as a taker holds it while it counts and creates */
			g = zk_new_entry(ZKK_LOCK, name, len, ZKM_EXCLUSIVE, ZKS_SESSION, false);
			g->family = ZKF_SEMAPHORES;
			g->parties = max;
			zk_submit_entry(g, &guard_idx, &guard_gen);
			PG_TRY();
			{
				outcome = zk_wait_outcome(guard_idx, timeout_ms, zk_connect_timeout,
										  "take the guard of a semaphore");
				if (outcome == ZKO_GRANTED)
					outcome = set_max_step(name, len, ZKSEM_SETWRITE, max, version,
										   false, &ignored, &ignored_version);
				else
					outcome = ZKO_NONE;
			}
			PG_CATCH();
			{
				zk_let_go(&guard_idx, guard_gen);
				PG_RE_THROW();
			}
			PG_END_TRY();
			zk_let_go(&guard_idx, guard_gen);
			if (outcome == ZKO_NONE)
				ereport(ERROR,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("timed out waiting for the guard of zookeeper semaphore \"%s\"", uname),
						 errdetail("Lowering the number of leases waits for the taker at the head of the line, which waits for a lease."),
						 errhint("Raise the timeout, or retry when fewer takers wait.")));
		}
		else
			outcome = set_max_step(name, len, ZKSEM_SETWRITE, max, version, true,
								   &ignored, &ignored_version);
		if (outcome == ZKO_GRANTED)
			return cur;
		/* the pool changed or went meanwhile: read it again */
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not change the number of leases of zookeeper semaphore \"%s\"", uname),
			 errdetail("Its pool changed %d times while this call wrote it.", SEM_SET_ROUNDS),
			 errhint("Retry.")));
	return -1;
}

/* ---- transactions ---- */

/*
 * Before COMMIT: a transaction whose lease was lost must not commit, and
 * while the session is suspended (or the worker has not heard from
 * ZooKeeper for 2/3 of the session timeout) the lease is in doubt: wait
 * up to zklock.commit_timeout for it to come back, as the locks do.
 */
static void
sem_pre_commit(void)
{
	TimestampTz deadline = 0;

	for (;;)
	{
		ListCell   *lc;
		LocalSem   *first = NULL;
		int			conn;

		foreach(lc, sems)
		{
			LocalSem   *ls = lfirst(lc);

			if (ls->subxids == NIL)
				continue;
			if (first == NULL)
				first = ls;
			if (lease_outcome(ls) == ZKO_LOST)
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("the lease of zookeeper semaphore \"%s\" was lost before commit",
								zk_display_name(ls->name)),
						 errdetail("Its ZooKeeper session ended; another client may have taken the lease."),
						 errhint("Retry the transaction.")));
		}
		if (first == NULL)
			return;
		zk_backend_lock(LW_SHARED);
		conn = zk_fresh_conn_state();
		LWLockRelease(zk_ctl->lock);
		if (conn == ZKC_CONNECTED)
			return;
		zk_commit_wait_session(&deadline, conn,
							   psprintf("the lease of zookeeper semaphore \"%s\"",
										zk_display_name(first->name)));
	}
}

/*
 * End this backend's transaction holds (xact) and/or session holds
 * (session) on every semaphore; a lease left without a hold is let go.
 */
static void
drop_holds(bool xact, bool session)
{
	ListCell   *lc;

	foreach(lc, sems)
	{
		LocalSem   *ls = lfirst(lc);

		if (xact)
		{
			list_free(ls->subxids);
			ls->subxids = NIL;
		}
		if (session)
			ls->session = 0;
		if (ls->subxids == NIL && ls->session == 0)
		{
			sems = foreach_delete_current(sems, lc);
			zk_let_go(&ls->idx, ls->gen);
			pfree(ls->name);
			pfree(ls);
		}
		else
			note_scope(ls);
	}
}

/* The recipe's xact_end: transaction holds end, committed or not */
static void
sem_xact_end(bool commit)
{
	drop_holds(true, false);
}

/*
 * The recipe's subxact_end: a committed subtransaction's holds pass to its
 * parent, an aborted one's end (and a lease left without a hold goes).
 */
static void
sem_subxact_end(bool commit, SubTransactionId mySubid, SubTransactionId parentSubid)
{
	ListCell   *lc;

	foreach(lc, sems)
	{
		LocalSem   *ls = lfirst(lc);
		ListCell   *sc;

		foreach(sc, ls->subxids)
		{
			if ((SubTransactionId) lfirst_int(sc) != mySubid)
				continue;
			if (commit)
				lfirst_int(sc) = (int) parentSubid;
			else
				ls->subxids = foreach_delete_current(ls->subxids, sc);
		}
		if (ls->subxids == NIL && ls->session == 0)
		{
			sems = foreach_delete_current(sems, lc);
			zk_let_go(&ls->idx, ls->gen);
			pfree(ls->name);
			pfree(ls);
		}
	}
}

/* PREPARE TRANSACTION with a transaction hold on a lease is refused (0A000) */
static void
sem_pre_prepare(void)
{
	ListCell   *lc;

	foreach(lc, sems)
		if (((LocalSem *) lfirst(lc))->subxids != NIL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot prepare a transaction that holds zookeeper semaphore leases"),
					 errdetail("A lease belongs to this backend's ZooKeeper session and cannot outlive it."),
					 errhint("Commit or roll back the transaction instead.")));
}

/* The recipe's at_exit: a guard or lease being taken, and every lease, go */
static void
sem_at_exit(void)
{
	zk_let_go(&taking_idx, taking_gen);
	zk_let_go(&guard_idx, guard_gen);
	drop_holds(true, true);
}

/* zk_status(): the semaphore's counters */
static void
sem_status(ZkStatusCounts *c)
{
	c->sem_taken += pg_atomic_read_u64(&sem_shared->taken);
	c->sem_refused += pg_atomic_read_u64(&sem_shared->refused);
}

const ZkRecipeBackend zk_sem_backend = {
	ZK_XACT_HOOKS(sem_pre_commit, sem_pre_prepare, sem_xact_end, sem_subxact_end),
	.at_exit = sem_at_exit,
	ZK_PATH_HOOK("semaphore", zk_lock_kind_path, ZKF_SEMPOOL),
	.status = sem_status,
	ZK_SHMEM_AREA("zklock semaphores", SemShared, sem_shared),
};
