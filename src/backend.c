/*-------------------------------------------------------------------------
 *
 * backend.c
 *	  The backend side of zklock: hand a request to the worker, wait for
 *	  its answer on our own latch, remember what we hold, and let go at the
 *	  end of the transaction, at ROLLBACK TO SAVEPOINT, or at exit.
 *
 *	  Backends never talk to ZooKeeper.  A request is an entry in shared
 *	  memory put on the worker's queue; the worker sets our latch when it has
 *	  an answer.  While waiting we run CHECK_FOR_INTERRUPTS(), so cancel,
 *	  statement_timeout and pg_terminate_backend always work; whatever ends a
 *	  wait hands the entry back to the worker, which removes its node even if
 *	  the create completes later.
 *
 *	  Releasing never waits for ZooKeeper: the entry is marked released and
 *	  queued, and the worker sends the delete.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"

#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/postmaster.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * A lock this backend holds or awaits.  For transaction scope, "subxids"
 * has one element per acquisition: the subtransaction that made it.
 */
typedef struct LocalLock
{
	char	   *name;
	int			len;
	ZkMode		mode;
	ZkScope		scope;
	uint32		idx;			/* shared entry */
	uint32		gen;
	int64		token;
	bool		granted;
	int			session_holds;	/* session scope count */
	List	   *subxids;		/* transaction scope acquisitions */
} LocalLock;

static List *local_locks = NIL;
static bool initialized = false;

static void xact_callback(XactEvent event, void *arg);
static void subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							 SubTransactionId parentSubid, void *arg);
static void backend_exit(int code, Datum arg);

void
zk_backend_init(void)
{
	if (initialized)
		return;
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	before_shmem_exit(backend_exit, (Datum) 0);
	initialized = true;
}

/* ---- local bookkeeping ---- */

static LocalLock *
find_local(const char *name, int len, ZkMode mode, ZkScope scope)
{
	ListCell   *lc;

	foreach(lc, local_locks)
	{
		LocalLock  *ll = lfirst(lc);

		if (ll->granted && ll->len == len && ll->mode == mode &&
			ll->scope == scope && memcmp(ll->name, name, len) == 0)
			return ll;
	}
	return NULL;
}

/*
 * Hand a shared entry back to the worker.  Returns true when the worker
 * must be woken.
 */
static bool
release_entry(uint32 idx, uint32 gen)
{
	ZkEntry    *e;
	bool		queued = false;

	LWLockAcquire(zk_ctl->lock, LW_EXCLUSIVE);
	e = zk_entry(idx);
	if (e->gen == gen && e->state != ZKE_FREE && !e->released)
	{
		if (e->outcome == ZKO_NONE)
			zk_count(ZKCNT_ABANDONED, 1);
		e->released = true;
		zk_enqueue(e);
		queued = true;
	}
	LWLockRelease(zk_ctl->lock);
	return queued;
}

/* Forget a local lock and release its entry; does not wake the worker. */
static bool
forget_local(LocalLock *ll)
{
	bool		wake;

	local_locks = list_delete_ptr(local_locks, ll);
	wake = release_entry(ll->idx, ll->gen);
	list_free(ll->subxids);
	pfree(ll->name);
	pfree(ll);
	return wake;
}

/* Release every local lock of a scope (or all, with scope < 0). */
static void
release_all(int scope)
{
	bool		wake = false;
	ListCell   *lc;

	if (local_locks == NIL || zk_ctl == NULL)
		return;
	foreach(lc, local_locks)
	{
		LocalLock  *ll = lfirst(lc);

		if (scope >= 0 && ll->scope != (ZkScope) scope)
			continue;
		wake |= release_entry(ll->idx, ll->gen);
		list_free(ll->subxids);
		pfree(ll->name);
		pfree(ll);
		local_locks = foreach_delete_current(local_locks, lc);
	}
	if (wake)
		zk_wake_worker();
}

static bool
holds_transaction_locks(void)
{
	ListCell   *lc;

	foreach(lc, local_locks)
	{
		if (((LocalLock *) lfirst(lc))->scope == ZKS_TRANSACTION)
			return true;
	}
	return false;
}

/* ---- identity stored in the node ---- */

static void
build_node_data(char *out, size_t outlen)
{
	StringInfoData buf;
	char		host[256];
	char	   *db;

	if (gethostname(host, sizeof(host)) != 0)
		strlcpy(host, "unknown", sizeof(host));
	host[sizeof(host) - 1] = '\0';
	db = IsTransactionState() ? get_database_name(MyDatabaseId) : NULL;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"cluster\":\"" UINT64_FORMAT "\",\"host\":",
					 GetSystemIdentifier());
	escape_json(&buf, host);
	appendStringInfo(&buf, ",\"port\":%d,\"database\":", PostPortNumber);
	escape_json(&buf, db ? db : "");
	appendStringInfo(&buf, ",\"pid\":%d,\"user\":", MyProcPid);
	escape_json(&buf, GetUserNameFromId(GetUserId(), true) ?
				GetUserNameFromId(GetUserId(), true) : "");
	appendStringInfoString(&buf, ",\"application\":");
	escape_json(&buf, application_name ? application_name : "");
	appendStringInfoString(&buf, ",\"since\":");
	escape_json(&buf, timestamptz_to_str(GetCurrentTimestamp()));
	appendStringInfoChar(&buf, '}');

	if (buf.len >= (int) outlen)
	{
		/* too long (an extreme application_name): keep the essentials */
		resetStringInfo(&buf);
		appendStringInfo(&buf, "{\"cluster\":\"" UINT64_FORMAT "\",\"port\":%d,\"pid\":%d}",
						 GetSystemIdentifier(), PostPortNumber, MyProcPid);
	}
	strlcpy(out, buf.data, outlen);
	pfree(buf.data);
}

/* ---- waiting ---- */

static void
raise_failure(int sqlstate, const char *msg, const char *name)
{
	if (sqlstate == ERRCODE_T_R_SERIALIZATION_FAILURE)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("zookeeper lock \"%s\" was lost", name),
				 errdetail("%s.", msg),
				 errhint("Retry the transaction.")));
	ereport(ERROR,
			(errcode(sqlstate ? sqlstate : ERRCODE_CONNECTION_FAILURE),
			 errmsg("could not acquire zookeeper lock \"%s\"", name),
			 errdetail("%s.", msg),
			 errhint("Check zk_status() and the server log; retry when ZooKeeper is reachable.")));
}

/*
 * Wait for the worker's answer about our entry.  Returns true when granted,
 * false when a try-lock found the lock taken.  Raises errors on timeout,
 * cancel and failures; the caller then hands the entry back.
 */
static bool
wait_for_answer(LocalLock *ll, bool try_only, int64 timeout_ms)
{
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz answer_deadline = TimestampTzPlusMilliseconds(start, zklock_connect_timeout);
	TimestampTz lock_deadline = (timeout_ms >= 0) ?
		TimestampTzPlusMilliseconds(start, timeout_ms) : 0;
	TimestampTz disconnected_since = 0;

	for (;;)
	{
		ZkEntry    *e;
		int			outcome;
		int			state;
		int			conn;
		int			sqlstate;
		char		msg[ZKLOCK_ERRMSG_MAX];
		TimestampTz now;
		long		wait_ms = 1000;

		LWLockAcquire(zk_ctl->lock, LW_SHARED);
		e = zk_entry(ll->idx);
		outcome = e->outcome;
		state = e->state;
		sqlstate = e->sqlstate;
		strlcpy(msg, e->errmsg, sizeof(msg));
		ll->token = e->token;
		conn = zk_ctl->conn_state;
		LWLockRelease(zk_ctl->lock);

		switch ((ZkOutcome) outcome)
		{
			case ZKO_GRANTED:
				return true;
			case ZKO_BUSY:
				return false;
			case ZKO_FAILED:
			case ZKO_LOST:
				raise_failure(sqlstate, msg, ll->name);
				break;
			case ZKO_NONE:
				break;
		}

		now = GetCurrentTimestamp();
		if (state == ZKE_WAITING)
		{
			/* ZooKeeper answered: we are queued behind someone */
			if (conn != ZKC_CONNECTED)
			{
				if (disconnected_since == 0)
					disconnected_since = now;
				if (now >= TimestampTzPlusMilliseconds(disconnected_since, zklock_connect_timeout))
					ereport(ERROR,
							(errcode(ERRCODE_CONNECTION_FAILURE),
							 errmsg("lost the zookeeper connection while waiting for lock \"%s\"",
									ll->name),
							 errdetail("The connection has been down for longer than zklock.connect_timeout (%d ms).",
									   zklock_connect_timeout),
							 errhint("Check that ZooKeeper is running and reachable from this server, then retry.")));
				wait_ms = Min(wait_ms, zklock_connect_timeout);
			}
			else
				disconnected_since = 0;

			if (lock_deadline != 0 && now >= lock_deadline)
			{
				zk_count(ZKCNT_TIMEOUTS, 1);
				ereport(ERROR,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("timed out waiting for zookeeper lock \"%s\"", ll->name),
						 errdetail("Waited " INT64_FORMAT " ms; the lock is held by another session.",
								   timeout_ms),
						 errhint("Raise the timeout (or lock_timeout), or retry later.")));
			}
		}
		else if (now >= answer_deadline)
		{
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("zookeeper did not answer the request for lock \"%s\"", ll->name),
					 conn == ZKC_CONNECTED ?
					 errdetail("ZooKeeper did not reply within zklock.connect_timeout (%d ms).",
							   zklock_connect_timeout) :
					 errdetail("No usable ZooKeeper session within zklock.connect_timeout (%d ms); the connection is \"%s\".",
							   zklock_connect_timeout, zk_conn_state_name(conn)),
					 errhint("Check that ZooKeeper is running and that zklock.hosts is right (see zk_status()), then retry.")));
		}

		/* sleep until woken, or the nearest deadline */
		if (state != ZKE_WAITING)
			wait_ms = Min(wait_ms, (long) (TimestampDifferenceMilliseconds(now, answer_deadline) + 1));
		else if (lock_deadline != 0)
			wait_ms = Min(wait_ms, (long) (TimestampDifferenceMilliseconds(now, lock_deadline) + 1));

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 wait_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Take a lock.  Returns its fencing token; *acquired is false when a
 * try-lock found it taken.  timeout_ms < 0 waits forever.
 */
int64
zk_acquire(const char *name, int len, ZkMode mode, ZkScope scope,
		   bool try_only, int64 timeout_ms, bool *acquired)
{
	LocalLock  *ll;
	ZkEntry    *e;
	MemoryContext oldcxt;
	char		data[ZKLOCK_DATA_MAX];
	bool		granted = false;

	zk_require_shmem();
	zk_check_name(name, len);
	zk_backend_init();

	/* re-entrant: stack another hold on a lock we have */
	ll = find_local(name, len, mode, scope);
	if (ll != NULL)
	{
		if (scope == ZKS_TRANSACTION)
		{
			oldcxt = MemoryContextSwitchTo(TopMemoryContext);
			ll->subxids = lappend_int(ll->subxids, GetCurrentSubTransactionId());
			MemoryContextSwitchTo(oldcxt);
		}
		else
			ll->session_holds++;
		*acquired = true;
		return ll->token;
	}

	build_node_data(data, sizeof(data));

	LWLockAcquire(zk_ctl->lock, LW_EXCLUSIVE);
	e = zk_entry_alloc();
	if (e == NULL)
	{
		int			max = zk_ctl->max_entries;

		LWLockRelease(zk_ctl->lock);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of zklock lock entries"),
				 errdetail("All %d entries of zklock.max_locks are held or awaited.", max),
				 errhint("Increase zklock.max_locks and restart the server, or release locks.")));
	}
	e->procno = MyProc->pgprocno;
	e->pid = MyProcPid;
	e->dbid = MyDatabaseId;
	e->mode = mode;
	e->scope = scope;
	e->try_only = try_only;
	e->requested_at = GetCurrentTimestamp();
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	zk_encode_name(name, len, e->ename);
	strlcpy(e->data, data, sizeof(e->data));

	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	ll = palloc0(sizeof(LocalLock));
	ll->name = pnstrdup(name, len);
	ll->len = len;
	ll->mode = mode;
	ll->scope = scope;
	ll->idx = zk_entry_index(e);
	ll->gen = e->gen;
	if (scope == ZKS_TRANSACTION)
		ll->subxids = list_make1_int(GetCurrentSubTransactionId());
	else
		ll->session_holds = 1;
	local_locks = lappend(local_locks, ll);
	MemoryContextSwitchTo(oldcxt);

	zk_enqueue(e);
	LWLockRelease(zk_ctl->lock);
	zk_count(ZKCNT_REQUESTS, 1);
	zk_wake_worker();

	PG_TRY();
	{
		granted = wait_for_answer(ll, try_only, timeout_ms);
	}
	PG_CATCH();
	{
		if (forget_local(ll))
			zk_wake_worker();
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (!granted)
	{
		if (forget_local(ll))
			zk_wake_worker();
		*acquired = false;
		return 0;
	}
	ll->granted = true;
	*acquired = true;
	return ll->token;
}

/* ---- end of transaction, savepoints, exit ---- */

/*
 * Before COMMIT: a transaction whose lock was lost must not commit; while
 * the session is suspended, wait a bounded time for it to come back.
 */
static void
check_before_commit(void)
{
	TimestampTz deadline = 0;

	for (;;)
	{
		ListCell   *lc;
		bool		any = false;
		int			conn;
		char	   *lost = NULL;

		LWLockAcquire(zk_ctl->lock, LW_SHARED);
		conn = zk_ctl->conn_state;
		foreach(lc, local_locks)
		{
			LocalLock  *ll = lfirst(lc);
			ZkEntry    *e = zk_entry(ll->idx);

			if (ll->scope != ZKS_TRANSACTION || !ll->granted)
				continue;
			any = true;
			if (e->gen != ll->gen || e->outcome == ZKO_LOST)
			{
				lost = ll->name;
				break;
			}
		}
		LWLockRelease(zk_ctl->lock);

		if (lost)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("zookeeper lock \"%s\" was lost before commit", lost),
					 errdetail("The ZooKeeper session that held it ended; another session may have taken the lock."),
					 errhint("Retry the transaction.")));
		if (!any || conn == ZKC_CONNECTED)
			return;

		/* suspended: the lock is in doubt until the session answers */
		if (deadline == 0)
			deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   zklock_connect_timeout);
		if (GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not confirm zookeeper locks before commit"),
					 errdetail("The ZooKeeper connection is \"%s\" and did not come back within zklock.connect_timeout (%d ms).",
							   zk_conn_state_name(conn), zklock_connect_timeout),
					 errhint("Retry the transaction when ZooKeeper is reachable.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 100, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
			if (local_locks != NIL)
				check_before_commit();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (holds_transaction_locks())
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot prepare a transaction that holds zookeeper locks"),
						 errdetail("A zookeeper lock belongs to this backend's request and cannot be handed to a prepared transaction."),
						 errhint("Commit or roll back the transaction instead.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			release_all(ZKS_TRANSACTION);
			break;
		default:
			break;
	}
}

/*
 * ROLLBACK TO SAVEPOINT releases what the rolled-back subtransaction took;
 * RELEASE SAVEPOINT hands its acquisitions to the parent.
 */
static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;
	bool		wake = false;

	if (local_locks == NIL)
		return;
	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;

	foreach(lc, local_locks)
	{
		LocalLock  *ll = lfirst(lc);
		ListCell   *sc;

		if (ll->scope != ZKS_TRANSACTION)
			continue;
		foreach(sc, ll->subxids)
		{
			if ((SubTransactionId) lfirst_int(sc) != mySubid)
				continue;
			if (event == SUBXACT_EVENT_COMMIT_SUB)
				lfirst_int(sc) = (int) parentSubid;
			else
				ll->subxids = foreach_delete_current(ll->subxids, sc);
		}
		if (ll->subxids == NIL)
		{
			wake |= release_entry(ll->idx, ll->gen);
			pfree(ll->name);
			pfree(ll);
			local_locks = foreach_delete_current(local_locks, lc);
		}
	}
	if (wake)
		zk_wake_worker();
}

/* A backend that exits lets go of everything at once. */
static void
backend_exit(int code, Datum arg)
{
	release_all(-1);
}
