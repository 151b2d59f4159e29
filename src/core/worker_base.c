/*-------------------------------------------------------------------------
 *
 * worker_base.c
 *	  The worker's machinery that every recipe shares: the table of recipes
 *	  by entry kind and the calls into it, completion contexts and error
 *	  recovery, the worker's hold on zk_ctl->lock (zk_worker_enter/leave),
 *	  the session's handle, answering an entry's owner, the retry list, the
 *	  judgement of the client library's return codes, and the count of
 *	  local watchers per node.  Knows no recipe, and nothing of worker.c,
 *	  which calls it.  Runs in the worker, lock held.
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "batch.h"
#include "trust.h"

#include "common/pg_prng.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

/* The session's handle (the only one: worker.c opens and closes it) */
zhandle_t  *zk_zh = NULL;
uint64		zk_cur_session = 0;
uint64		zk_connects = 0;
uint64		zk_dispatch = 0;

/* Depth of zk_worker_enter(): the lock is held while it is above zero */
static int	lock_depth = 0;

/* zk_recipe_drive's nesting: only the outermost call is a dispatch */
static int	drive_depth = 0;

/* The operations of an entry's kind (the registry, src/zklock.c) */
#define KIND_OPS(e) (zk_registry->kinds[(e)->kind].ops)

/*
 * The worker halves in the order their hooks run: the base's group commit
 * (batch.c, not a recipe), then the registry's recipes
 */
static inline int
nrecipes(void)
{
	return 1 + zk_registry->nrecipes;
}

static inline const ZkRecipe *
recipe_at(int k)
{
	return k == 0 ? &zk_batch_recipe : zk_registry->recipes[k - 1];
}

/*
 * Call one of the recipes' hooks that take nothing (a member of ZkRecipe,
 * given by its offset) of every recipe that has it, in the list's order
 */
static void
recipes_call(size_t hook)
{
	int			k;

	for (k = 0; k < nrecipes(); k++)
	{
		void		(*fn) (void) = *(void (*const *) (void))
			((const char *) recipe_at(k) + hook);

		if (fn != NULL)
			fn();
	}
}

/*
 * Owners to wake once the lock is let go (zk_worker_defer_wake): a backend
 * woken while the worker still holds zk_ctl->lock -- its answer is set in
 * a completion, with the lock held -- would find the lock taken when it
 * reads its answer and wait for it (issue 40).  Woken by the outermost
 * zk_worker_leave(), after the release; a wake that does not fit is done
 * at once, as before.
 */
#define WAKES_MAX	64
static int	wakes[WAKES_MAX];
static int	nwakes = 0;

/*
 * With the lock held by the worker: remember to set procno's latch when it
 * is let go, and say true; false when the caller must set it now.
 */
bool
zk_worker_defer_wake(int procno)
{
	int			i;

	if (lock_depth == 0)
		return false;
	for (i = 0; i < nwakes; i++)
		if (wakes[i] == procno)
			return true;
	if (nwakes >= WAKES_MAX)
		return false;
	wakes[nwakes++] = procno;
	return true;
}

/* Set the latches zk_worker_defer_wake() kept, with the lock not held */
void
zk_worker_flush_wakes(void)
{
	int			n = nwakes;
	int			i;

	nwakes = 0;
	for (i = 0; i < n; i++)
		SetLatch(&GetPGProcByNumber(wakes[i])->procLatch);
}

/* Take zk_ctl->lock for the worker's bookkeeping (re-entrant). */
void
zk_worker_enter(void)
{
	if (lock_depth++ == 0)
		LWLockAcquire(zk_ctl->lock, LW_EXCLUSIVE);
}

/*
 * Undo one zk_worker_enter(); the outermost releases zk_ctl->lock, then
 * wakes the owners whose answers were set meanwhile
 */
void
zk_worker_leave(void)
{
	Assert(lock_depth > 0);
	if (--lock_depth == 0)
	{
		LWLockRelease(zk_ctl->lock);
		zk_worker_flush_wakes();
	}
}

/* After LWLockReleaseAll() in error recovery */
void
zk_worker_reset(void)
{
	lock_depth = 0;
}

/*
 * Error recovery in the worker, inside PG_CATCH: report the error, let go
 * of every LWLock and take the worker's lock again, at the depth (at
 * least 1) and in the memory context (NULL: TopMemoryContext) the PG_TRY
 * began with.  Errors are caught at several depths (a request's
 * completion called from a multi's): recovering to depth 1 would let the
 * inner zk_worker_leave() release the lock the outer code still uses.
 */
void
zk_worker_recover(int depth, MemoryContext cxt)
{
	MemoryContextSwitchTo(TopMemoryContext);
	EmitErrorReport();
	FlushErrorState();
	LWLockReleaseAll();
	zk_worker_reset();
	zk_worker_enter();
	lock_depth = Max(depth, 1);
	if (cxt != NULL)
		MemoryContextSwitchTo(cxt);
}

/* How deep zk_worker_enter() is nested (0: the lock is not held) */
int
zk_worker_lock_depth(void)
{
	return lock_depth;
}

/*
 * An error inside a completion: report it, recover the lock, and let the
 * entry's recipe decide what becomes of the one request.
 */
void
zk_completion_error(ZkEntry *e, int depth, MemoryContext cxt)
{
	zk_worker_recover(depth, cxt);
	zk_count(ZKCNT_ZK_ERRORS, 1);
	if (e != NULL && e->state != ZKE_FREE)
		KIND_OPS(e)->drive_failed(e);
}

/*
 * Drive an entry one step through its recipe.  Not a completion, but
 * errors are still caught here: a failure (say a dynamic shared memory
 * segment that cannot be mapped) fails the one request and never the
 * worker.
 */
void
zk_recipe_drive(ZkEntry *e)
{
	volatile int outer = drive_depth;
	volatile int depth = zk_worker_lock_depth();
	MemoryContext volatile cxt = CurrentMemoryContext;

	if (drive_depth == 0)
		zk_dispatch_begin();
	drive_depth++;
	PG_TRY();
	{
		if (!KIND_OPS(e)->batched)
			zk_batch_flush();
		KIND_OPS(e)->drive(e);
	}
	PG_CATCH();
	{
		zk_completion_error(e, depth, cxt);
	}
	PG_END_TRY();
	drive_depth = outer;
}

/*
 * Drive entry e again from inside its recipe's own completion or drive: its
 * kind's drive, through the ops table (a recipe's lower parts reach the
 * drive above them so), in the caller's dispatch and error handling.
 */
void
zk_kind_drive(ZkEntry *e)
{
	KIND_OPS(e)->drive(e);
}

/*
 * An adopt op (recipe.h) for the kinds that take a previous worker's entry
 * as if its session had ended: their session_lost, with no reason given
 */
void
zk_adopt_as_lost(ZkEntry *e)
{
	KIND_OPS(e)->session_lost(e, NULL);
}

/*
 * The no-progress guard (recipe.h).  zk_dispatch counts the worker's
 * dispatches: a request served (zk_recipe_drive, not nested), a completion
 * (COMPLETION_BEGIN), a timer.  A ZkProgress counts the rounds of one
 * object within the current dispatch.
 */
void
zk_dispatch_begin(void)
{
	zk_dispatch++;
}

/*
 * Count one round of p's object in the current dispatch.  True (and the
 * count starts again) beyond ZK_PROGRESS_MAX rounds: the caller then fails
 * the object's requests and calls zk_no_progress_report.
 */
bool
zk_no_progress(ZkProgress *p)
{
	if (p->dispatch != zk_dispatch)
	{
		p->dispatch = zk_dispatch;
		p->steps = 0;
	}
	if (++p->steps <= ZK_PROGRESS_MAX)
		return false;
	p->steps = 0;
	return true;
}

static ZkLogLimit progress_log;

/* Say so in the server log (the recipe fails the requests concerned) */
void
zk_no_progress_report(const char *recipe, const char *name, const char *state)
{
	if (zk_log_limited(&progress_log, "came round without progress"))
		ereport(LOG,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("zklock worker: the %s \"%s\" came round %d times without progress",
						recipe, name, ZK_PROGRESS_MAX),
				 errdetail("State: %s.", state),
				 errhint("Its waiting requests fail with SQLSTATE XX000; the worker serves the others. Report this as a bug.")));
	zk_count(ZKCNT_ZK_ERRORS, 1);
}

/*
 * worker.c opened, connected or closed the session (h NULL): the handle
 * and session id every recipe sends with.
 */
void
zk_session_set(zhandle_t *h, uint64 session_id)
{
	zk_zh = h;
	zk_sock_fd = -1;			/* until zookeeper_interest names it */
	zk_cur_session = session_id;
	zk_connects++;
}

/*
 * A new worker starts with an empty retry list.  The entries a worker that
 * exited had put on its list (its list died with it, their marks did not):
 * those of kinds with an adopt op are that op's (kinds_adopt, once the
 * session is usable); the others go on this worker's list, or nobody would
 * drive them again and their owners would wait for good (a leader wait, a
 * lock request not sent yet when the worker was terminated).
 */
void
zk_retry_take_over(void)
{
	uint32	   *left = palloc(sizeof(uint32) * zk_ctl->max_entries);
	int			n = 0;
	int			i;

	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->on_retry && e->state != ZKE_FREE && !e->queued &&
			e->kind < ZKK_NUM && KIND_OPS(e)->adopt == NULL)
			left[n++] = (uint32) i;
	}
	zk_retry_forget_marks();
	for (i = 0; i < n; i++)
		zk_retry_add(zk_entry(left[i]));
	pfree(left);
}

/*
 * The first turn this worker's session is usable: hand every entry a
 * previous worker left in shared memory -- not free, not on the request
 * queue -- to its kind's adopt op, once.  An error fails that entry only.
 */
static void
kinds_adopt(void)
{
	static bool adopted = false;
	volatile int i;				/* lives across PG_TRY */

	if (adopted || !zk_session_usable())
		return;
	adopted = true;
	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *volatile e = zk_entry(i);
		int			depth;
		MemoryContext cxt;

		if (e->state == ZKE_FREE || e->queued || e->kind >= ZKK_NUM ||
			KIND_OPS(e)->adopt == NULL)
			continue;
		depth = zk_worker_lock_depth();
		cxt = CurrentMemoryContext;
		PG_TRY();
		{
			KIND_OPS(e)->adopt(e);
		}
		PG_CATCH();
		{
			zk_completion_error(e, depth, cxt);
		}
		PG_END_TRY();
	}
}

/*
 * The session is usable: drive everything on the retry list, in the order
 * it was put there; adopt a previous worker's entries (once); every kind's
 * and every recipe's turn.
 */
void
zk_recipes_reconnected(void)
{
	int			n = zk_retry_length();
	volatile int k;			/* lives across PG_TRY */

	/*
	 * Entries are taken off the live list one at a time: a drive may retry
	 * another entry (still further down, then it stays where it is) or free
	 * one (it leaves the list).  Walking a detached chain instead lost every
	 * entry behind one that a drive put on the new list.  At most the
	 * entries there at the start: those put back meanwhile wait for the
	 * next turn.
	 */
	while (n-- > 0)
	{
		uint32		idx = zk_retry_pop();
		ZkEntry    *e;

		if (idx == ZKLOCK_NO_ENTRY)
			break;
		e = zk_entry(idx);
		if (e->state != ZKE_FREE)
			zk_recipe_drive(e);
	}
	/* the ACLs of the nodes found there (aclcheck.c) */
	if (zk_session_usable())
		zk_acl_check_turn();
	/* what all of the root keeps in ZooKeeper (kept.c) */
	if (zk_session_usable())
		zk_kept_turn();
	kinds_adopt();
	for (k = 0; k < ZKK_NUM; k++)
		if (zk_registry->kinds[k].ops->turn && zk_session_usable())
		{
			int			depth = zk_worker_lock_depth();
			MemoryContext cxt = CurrentMemoryContext;

			PG_TRY();
			{
				zk_registry->kinds[k].ops->turn();
			}
			PG_CATCH();
			{
				zk_completion_error(NULL, depth, cxt);
			}
			PG_END_TRY();
		}
	for (k = 0; k < nrecipes(); k++)
		if (recipe_at(k)->session_usable && zk_session_usable())
		{
			int			depth = zk_worker_lock_depth();
			MemoryContext cxt = CurrentMemoryContext;

			PG_TRY();
			{
				recipe_at(k)->session_usable();
			}
			PG_CATCH();
			{
				zk_completion_error(NULL, depth, cxt);
			}
			PG_END_TRY();
		}
}

/*
 * The session ended (expired, closed, or the worker is exiting): every
 * request in flight is void and every ephemeral node gone.  Each entry's
 * recipe settles it.  Rare, so it may look at every entry.
 */
void
zk_recipes_session_lost(const char *why)
{
	int			i;

	(void) zk_retry_take_all();
	zk_watch_forget_all();
	recipes_call(offsetof(ZkRecipe, session_reset));
	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->state == ZKE_FREE)
			continue;
		e->retry_prev = e->retry_next = ZKLOCK_NO_ENTRY;
		KIND_OPS(e)->session_lost(e, why);
	}
}

/*
 * The old handle is closed.  zookeeper_close() answered what it still had
 * in flight (ZCLOSING) after zk_recipes_session_lost: those late answers
 * ran on state the recipes had already reset, and counted down what they
 * had set to zero.  The recipes forget their per-session state once more,
 * now that no answer of the old session can come.
 */
void
zk_recipes_session_closed(void)
{
	zk_batch_session_closed();	/* what it held hears ZCLOSING too */
	recipes_call(offsetof(ZkRecipe, session_reset));
}

/* A worker starts: every recipe forgets what a previous one counted */
void
zk_recipes_worker_start(void)
{
	recipes_call(offsetof(ZkRecipe, worker_start));
}

/* The configuration was reloaded (lock not held) */
void
zk_recipes_reload(void)
{
	recipes_call(offsetof(ZkRecipe, reload));
}

/* The session is connected, new or taken up again */
void
zk_recipes_connected(void)
{
	recipes_call(offsetof(ZkRecipe, session_connected));
}

/* ---- helpers ---- */

/* A completion's context names an entry and its generation. */
const void *
zk_ctx_of(ZkEntry *e)
{
	return (const void *) (uintptr_t) (((uint64) e->gen << 32) | zk_entry_index(e));
}

/* The entry a context names, or NULL if it was freed (or reused) since */
ZkEntry *
zk_entry_of(const void *ctx)
{
	uint64		v = (uint64) (uintptr_t) ctx;
	uint32		idx = (uint32) (v & 0xFFFFFFFF);
	ZkEntry    *e;

	if (idx >= (uint32) zk_ctl->max_entries)
		return NULL;
	e = zk_entry(idx);
	if (e->gen != (uint32) (v >> 32) || e->state == ZKE_FREE)
		return NULL;
	return e;
}

/*
 * Free a request's own context (palloc'd) and the data it carries, when
 * it carries some: a batch item, or a recipe's record of one call
 */
void
zk_call_free(void *call, void *data)
{
	if (data)
		pfree(data);
	pfree(call);
}

/*
 * May requests be sent?  Only with a handle whose client is connected and
 * a session the worker counts as connected (not suspended, not expired).
 */
bool
zk_session_usable(void)
{
	return zk_zh != NULL && zoo_state(zk_zh) == ZOO_CONNECTED_STATE &&
		zk_ctl->conn_state == ZKC_CONNECTED;
}

/*
 * Drive e again once the session is usable: it goes on the retry list,
 * which zk_recipes_reconnected walks.
 */
void
zk_retry_later(ZkEntry *e)
{
	zk_retry_add(e);
}

/*
 * The opening a one-off request's drive shares: may it send now?  False,
 * having done what there was to do, when a request of its own is still in
 * flight (inflight: its completion goes on), the owner let go (the entry is
 * freed), it was answered already, or no session is usable (it is retried
 * when one is).
 */
bool
zk_drive_opening(ZkEntry *e, bool inflight)
{
	if (inflight)
		return false;
	if (e->released)
	{
		zk_entry_free(e);
		return false;
	}
	if (e->outcome != ZKO_NONE)
		return false;
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return false;
	}
	return true;
}


/* Tell the owner what became of its request. */
void
zk_finish(ZkEntry *e, ZkOutcome outcome, int sqlstate, const char *msg)
{
	if (e->outcome == ZKO_NONE || (outcome == ZKO_LOST && e->outcome == ZKO_GRANTED))
	{
		if (msg)
			strlcpy(e->errmsg, msg, sizeof(e->errmsg));
		e->sqlstate = sqlstate;
		if (outcome == ZKO_GRANTED)
		{
			e->granted_at = GetCurrentTimestamp();
			zk_count(ZKCNT_GRANTS, 1);
		}
		pg_write_barrier();
		e->outcome = outcome;
	}
	zk_wake_owner(e);
}

/* The node is gone (or never existed): free or wait for the owner. */
void
zk_node_gone(ZkEntry *e)
{
	e->node[0] = '\0';
	e->in_doubt = false;
	if (e->released)
		zk_entry_free(e);
	else
		e->state = ZKE_DONE;
}

/* Answer e's owner with an error (sqlstate, msg), counted in zk_status() */
void
zk_fail(ZkEntry *e, int sqlstate, const char *msg)
{
	zk_count(ZKCNT_ZK_ERRORS, 1);
	zk_finish(e, ZKO_FAILED, sqlstate, msg);
}

/*
 * Is this a verdict of ZooKeeper's (ZOK or an API error such as ZNONODE)?
 * Everything else -- connection loss, timeouts, the client's own
 * inconsistencies, a session that ended -- leaves the request's fate
 * unknown.
 */
bool
zk_rc_definite(int rc)
{
	if (rc == ZOK)
		return true;
	if (rc == ZSESSIONEXPIRED || rc == ZSESSIONMOVED || rc == ZCLOSING ||
		rc == ZAUTHFAILED)
		return false;
	return rc <= ZAPIERROR || rc == ZBADARGUMENTS || rc == ZUNIMPLEMENTED;
}

/*
 * A zoo_a* call returned rc without queueing its request: a bad request
 * fails for good; anything else is a connection problem and is retried
 * once the session is usable again.  Returns true when retrying.
 */
bool
zk_send_failed(ZkEntry *e, int rc, const char *what)
{
	char		msg[ZKLOCK_ERRMSG_MAX];

	if (!zk_rc_definite(rc) || rc == ZOK)
	{
		zk_retry_later(e);
		return true;
	}
	snprintf(msg, sizeof(msg), "ZooKeeper refused the %s request: %s", what, zerror(rc));
	zk_fail(e, ERRCODE_CONNECTION_FAILURE, msg);
	return false;
}

/*
 * A zoo_a* call of e returned rc: sent (ZOK), its request is in flight
 * (*inflight, that flag of e's, set); else zk_send_failed says what comes
 * of it.  True when sent.
 */
bool
zk_sent(ZkEntry *e, int rc, bool *inflight, const char *what)
{
	if (rc == ZOK)
	{
		*inflight = true;
		return true;
	}
	(void) zk_send_failed(e, rc, what);
	return false;
}

/*
 * ZooKeeper refused a request on path for want of permission (ZNOAUTH):
 * the owner's call fails at once with 42501 naming the path (the backend
 * builds the message, zk_raise_noauth).  Never a connection problem, never
 * retried: the same credentials would be refused again.
 */
void
zk_fail_noauth(ZkEntry *e, const char *path)
{
	zk_count(ZKCNT_NOAUTH, 1);
	zk_fail(e, ERRCODE_INSUFFICIENT_PRIVILEGE, path);
}

/*
 * A definite failure (zk_rc_definite) of a request about path: a refusal
 * for want of permission -- ZNOAUTH, or ZNONODE because a parent's create
 * was refused -- fails with 42501, anything else with sqlstate and msg.
 */
void
zk_fail_rc(ZkEntry *e, int rc, const char *path, int sqlstate, const char *msg)
{
	char		refused[ZKLOCK_PARENT_MAX + 1];

	if (rc == ZNOAUTH)
		zk_fail_noauth(e, path ? path : zk_root);
	else if (rc == ZNONODE && path && zk_parent_refused(path, refused, sizeof(refused)))
		zk_fail_noauth(e, refused);
	else
		zk_fail(e, sqlstate, msg);
}

/*
 * Parent nodes (<root>, <root>/locks, ...) are created with a completion
 * that remembers a refusal: the create they were sent for, answered after
 * them, then fails with ZNONODE, and zk_parent_refused tells it why.  The
 * paths wait in a small ring, found again by their sequence number (the
 * context); a path pushed out of the ring is simply not known.
 */
#define PARENT_RING		32

typedef struct ParentSent
{
	uint64		seq;
	char		path[ZKLOCK_PARENT_MAX + 1];
} ParentSent;

static ParentSent parent_ring[PARENT_RING];
static uint64 parent_seq = 0;
static char parent_refused[ZKLOCK_PARENT_MAX + 1];
static uint64 parent_refused_session = 0;

/* Completion of the zoo_acreate sent by zk_create_parent() */
static void
parent_create_done(int rc, const char *name, const void *ctx)
{
	uint64		seq = (uint64) (uintptr_t) ctx;
	ParentSent *p = &parent_ring[seq % PARENT_RING];

	/* no lock, no error possible: worker-private state only */
	if (p->seq != seq)
		return;
	if (rc == ZNOAUTH)
	{
		strlcpy(parent_refused, p->path, sizeof(parent_refused));
		parent_refused_session = zk_cur_session;
	}
	else if (rc == ZOK || rc == ZNODEEXISTS)
	{
		/* one that exists now is no longer the reason */
		if (strcmp(parent_refused, p->path) == 0)
			parent_refused[0] = '\0';
	}
}

/*
 * Send the create of a parent node (no data; flags 0 or ZOO_CONTAINER)
 * ahead of a create under it, without waiting: one that exists is fine,
 * and a refusal is remembered for zk_parent_refused.
 */
void
zk_create_parent(const char *path, int flags)
{
	uint64		seq = ++parent_seq;
	ParentSent *p = &parent_ring[seq % PARENT_RING];

	p->seq = seq;
	strlcpy(p->path, path, sizeof(p->path));
	(void) zoo_acreate(zk_zh, path, NULL, -1, zk_acl_path(path), flags,
					   parent_create_done, (const void *) (uintptr_t) seq);
}

/*
 * A create under path failed with ZNONODE after its parents were sent:
 * was one of them (a prefix of path) refused in this session?  Copies it.
 */
bool
zk_parent_refused(const char *path, char *refused, size_t len)
{
	size_t		n = strlen(parent_refused);

	if (n == 0 || parent_refused_session != zk_cur_session ||
		strncmp(path, parent_refused, n) != 0 ||
		(path[n] != '\0' && path[n] != '/'))
		return false;
	strlcpy(refused, parent_refused, len);
	return true;
}


/*
 * How many of our entries watch each node, or have a get that sets such a
 * watch in flight: the server keeps one watch per session and path, and a
 * removal takes every local watcher of the path with it, so it is only
 * sent for the last of them; the others remove their own watcher locally.
 * Worker-private; emptied when the session ends.
 */
typedef struct WatchRef
{
	char		path[ZK_PATH_MAX];
	int			refs;
} WatchRef;

static HTAB *watch_refs = NULL;

/* path's count of watchers (a new one at zero if create), or NULL */
static WatchRef *
watch_ref(const char *path, bool create)
{
	char		key[ZK_PATH_MAX];
	bool		found;
	WatchRef   *w;

	if (watch_refs == NULL)
	{
		if (!create)
			return NULL;
		watch_refs = zk_hash_create("zklock watches", 64, ZK_PATH_MAX,
									sizeof(WatchRef), true, TopMemoryContext);
	}
	memset(key, 0, sizeof(key));
	strlcpy(key, path, sizeof(key));
	w = hash_search(watch_refs, key, create ? HASH_ENTER : HASH_FIND, &found);
	if (w != NULL && create && !found)
		w->refs = 0;
	return w;
}

/* One more of our entries watches path, or has a get setting that watch */
void
zk_watch_set(const char *path)
{
	WatchRef   *w = watch_ref(path, true);

	if (w != NULL)
	{
		if (w->refs < 0)
			w->refs = 0;
		w->refs++;
	}
}

/* How many of our entries watch path (or have a get setting that watch) */
int
zk_watch_refs(const char *path)
{
	WatchRef   *w = watch_ref(path, false);

	return (w == NULL) ? 0 : Max(w->refs, 0);
}

/* One watcher of path is gone; returns how many remain */
int
zk_watch_drop(const char *path)
{
	WatchRef   *w = watch_ref(path, false);
	int			left;

	if (w == NULL)
		return 0;
	left = --w->refs;
	if (left <= 0)
		hash_search(watch_refs, w->path, HASH_REMOVE, NULL);
	return Max(left, 0);
}

/* The session ended and took its watches with it: forget every count */
void
zk_watch_forget_all(void)
{
	if (watch_refs != NULL)
	{
		hash_destroy(watch_refs);
		watch_refs = NULL;
	}
}


/*
 * In a watcher of one entry's watch (ctx: zk_ctx_of(e)), inside
 * COMPLETION_BEGIN: the entry whose watch on path fired -- counted, taken
 * off the local counts, and marked as watching nothing -- or NULL when the
 * entry is gone or no longer watches (a late event after an unwatch).
 */
static ZkEntry *
entry_watch_fired(const char *path, const void *ctx)
{
	ZkEntry    *e;

	zk_count(ZKCNT_WATCH_EVENTS, 1);
	e = zk_entry_of(ctx);
	if (e == NULL || e->watch != ZKEW_SET)
		return NULL;
	if (path)
		(void) zk_watch_drop(path);
	e->watch = ZKEW_NONE;
	e->watched[0] = '\0';
	return e;
}

/*
 * The watcher of every watch one entry sets (ctx: zk_ctx_of(e)), which
 * passes its event on: session events are none of the entry's; else, as a
 * completion, the entry whose watch on path fired (entry_watch_fired),
 * unless gone or let go, is handed to its kind's watch_fired op.  A recipe
 * takes the watch back with zk_entry_unwatch(..., zk_kind_watcher).
 */
void
zk_kind_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	ZkEntry    *volatile e = NULL;

	if (type == ZOO_SESSION_EVENT || type == ZOO_NOTWATCHING_EVENT)
		return;
	COMPLETION_BEGIN
	{
		e = entry_watch_fired(path, ctx);
		/* a kind that sets watches through it has the op */
		Assert(e == NULL || KIND_OPS(e)->watch_fired != NULL);
		if (e != NULL && !e->released && KIND_OPS(e)->watch_fired != NULL)
			KIND_OPS(e)->watch_fired(e);
	}
	COMPLETION_END(e);
}

/* Completion of every zoo_aremove_watches and zoo_aremove_all_watches */
void
zk_unwatch_done(int rc, const void *ctx)
{
	/* nothing to do: ZNOWATCHER means it fired meanwhile */
}

/*
 * Take back e's watch (of type ZWATCHTYPE_DATA or _CHILD) on path, which
 * the caller has already marked as not watched: with own (e's watcher),
 * only that watcher, on the client, while other entries here still watch
 * the path or the session is not usable; else (or without own: a recipe
 * whose entries never share a watched node) the session's watch on the
 * server too.
 *
 * The library declares the completion as a pointer to a completion but
 * uses the pointer itself as the function.
 */
void
zk_unwatch(ZkEntry *e, const char *path, int type, watcher_fn own)
{
	bool		shared;

	if (zk_zh == NULL)
		return;
	shared = zk_watch_drop(path) > 0 || !zk_session_usable();
	if (own != NULL && shared)
		(void) zoo_aremove_watches(zk_zh, path, type, own, (void *) zk_ctx_of(e), 1,
								   (void_completion_t *) zk_unwatch_done, NULL);
	else
		(void) zoo_aremove_all_watches(zk_zh, path, type, 0,
									   (void_completion_t *) zk_unwatch_done, NULL);
}

/*
 * A recipe's unwatch: if e watches, mark it as watching nothing and take
 * its watch on path back (zk_unwatch, with type and own).  The caller
 * works path out first, from e->watched where that names the node.
 */
void
zk_entry_unwatch(ZkEntry *e, const char *path, int type, watcher_fn own)
{
	if (e->watch != ZKEW_SET)
		return;
	e->watch = ZKEW_NONE;
	e->watched[0] = '\0';
	zk_unwatch(e, path, type, own);
}


/*
 * A fresh random guid for the entry's node names (32 hex digits, as a
 * kazoo uuid4().hex).  With owner_half, the first half names the owning
 * backend (owner_tag), so that lock contenders of one backend know each
 * other (see zk_lock_blocker).
 */
void
zk_make_guid(ZkEntry *e, bool owner_half)
{
	static pg_prng_state guid_prng;
	static bool guid_seeded = false;
	uint8		buf[ZKLOCK_GUID_LEN / 2];
	uint64		a;
	uint64		b;
	int			i;

	/*
	 * A guid must be unique, not secret (every client lists the names):
	 * 128 bits from the strong source once per worker, then its PRNG,
	 * without a system call per node (issue 40).
	 */
	if (!guid_seeded)
	{
		if (!pg_prng_strong_seed(&guid_prng))
			pg_prng_seed(&guid_prng,
						 (uint64) GetCurrentTimestamp() ^ ((uint64) MyProcPid << 40));
		guid_seeded = true;
	}
	a = pg_prng_uint64(&guid_prng);
	b = pg_prng_uint64(&guid_prng);
	memcpy(buf, &a, 8);
	memcpy(buf + 8, &b, 8);
	for (i = 0; i < (int) sizeof(buf); i++)
		snprintf(e->guid + 2 * i, 3, "%02x", buf[i]);
	if (owner_half && e->owner_tag[0] != '\0')
		memcpy(e->guid, e->owner_tag, ZKLOCK_GUID_LEN / 2);
}

/*
 * Has the node whose stat this is more children than zklock.max_children?
 * If so, msg says so (what names the node for a user: "the arrivals").
 * Sizes of listings and of fan-outs of reads are bounded by this and by
 * ZK_READ_WINDOW (recipe.h).
 */
bool
zk_children_over(const struct Stat *stat, const char *what, char *msg, size_t len)
{
	if (stat == NULL || stat->numChildren <= zk_max_children)
		return false;
	snprintf(msg, len, "%s %s %d nodes, more than zklock.max_children (%d) allows to list",
			 what, stat->numChildren == 1 ? "has" : "have", stat->numChildren,
			 zk_max_children);
	return true;
}

/*
 * Listings of a directory every namespace shares (issue 35; src/README,
 * section 6): <root>/queues for zk_queues, <root>/leases for zk_leases.
 * Every tenant's names are children of the same node, so the count
 * zklock.max_children bounds is the caller's own names, never the others':
 * a tenant with many names cannot make another's views fail.  What the
 * listing itself costs is bounded in bytes by the caller's
 * zklock.max_answer_bytes ("cap"): before it is sent, from the node's child
 * count (zk_listing_over: each name takes at least ZK_LIST_NAME_MIN bytes
 * of the answer), and once it is in, from its names (zk_own_children).
 */
bool
zk_listing_over(const struct Stat *stat, Size cap, const char *what,
				char *msg, size_t len)
{
	Size		least;

	if (stat == NULL || stat->numChildren <= 0)
		return false;
	least = (Size) stat->numChildren * ZK_LIST_NAME_MIN;
	if (least <= cap)
		return false;
	snprintf(msg, len, "Listing the %s means reading %d names of every namespace, at least %zu kB, "
			 "more than zklock.max_answer_bytes (%zu kB)",
			 what, stat->numChildren, (least + 1023) / 1024, cap / 1024);
	return true;
}

/*
 * The children of a shared directory that are names of qname's namespace
 * (zk_child_in_namespace), copied into cxt: *n of them (NULL when none).
 * NULL with *n = -1 and msg saying why (54000) when the listing is larger
 * than cap bytes, or holds more than zklock.max_children names of that
 * namespace ("what" names them for a user: "queues").  The others'
 * names are looked at once and never copied: 6 to 9 ms for 100,000 of
 * them (measured on the test machine), within one completion.
 */
char	  **
zk_own_children(const struct String_vector *kids, const char *qname, Size cap,
				const char *what, MemoryContext cxt, int *n, char *msg, size_t len)
{
	char		ns[ZKLOCK_NS_MAX + 1];
	Size		bytes = 0;
	int			own = 0;
	int			count = kids ? kids->count : 0;
	int			i;
	char	  **names;

	*n = 0;
	zk_qname_namespace(qname, ns, sizeof(ns));
	for (i = 0; i < count; i++)
	{
		bytes += 4 + strlen(kids->data[i]);
		if (zk_child_in_namespace(kids->data[i], ns))
			own++;
	}
	if (bytes > cap)
	{
		snprintf(msg, len, "Listing the %s read %d names of every namespace, %zu kB, "
				 "more than zklock.max_answer_bytes (%zu kB)",
				 what, count, (bytes + 1023) / 1024, cap / 1024);
		*n = -1;
		return NULL;
	}
	if (own > zk_max_children)
	{
		snprintf(msg, len, "This namespace has %d %s, more than zklock.max_children (%d) allows to list",
				 own, what, zk_max_children);
		*n = -1;
		return NULL;
	}
	if (own == 0)
		return NULL;
	names = MemoryContextAlloc(cxt, sizeof(char *) * own);
	for (i = 0; i < count && *n < own; i++)
		if (zk_child_in_namespace(kids->data[i], ns))
			names[(*n)++] = MemoryContextStrdup(cxt, kids->data[i]);
	return names;
}

/*
 * How many reads of children's data one call may have in flight: at most
 * ZK_READ_WINDOW, and at most ZK_READ_INFLIGHT_BYTES of answers judged by
 * the largest so far (4 until one has answered).
 */
int
zk_read_window(bool answered, Size largest)
{
	if (!answered)
		return 4;
	return (int) Max(1, Min(ZK_READ_WINDOW,
							ZK_READ_INFLIGHT_BYTES / Max(largest, 1024)));
}
