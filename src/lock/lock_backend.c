/*-------------------------------------------------------------------------
 *
 * lock_backend.c
 *	  The lock recipe's backend half: what this backend holds or awaits,
 *	  stacked holds per name and mode, re-entrancy across scopes, the
 *	  upgrade's pinned shared node, lost locks, the check before COMMIT, and
 *	  letting go at the end of the transaction, at ROLLBACK TO SAVEPOINT or
 *	  at exit.  Requests and waits go through backend.c.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "lock.h"

#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "lib/ilist.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/postmaster.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * Holds stacked on one lock: one element of "subxids" per transaction-scoped
 * acquisition (the subtransaction that made it), and a count of the
 * session-scoped ones.
 */
typedef struct Holds
{
	int			session;
	List	   *subxids;
} Holds;

/*
 * A lock this backend holds or awaits: one per name and mode, whatever the
 * scopes, so that session and transaction holds of one name stack on one
 * znode as PostgreSQL's advisory locks do.  h[0] are the holds in the
 * lock's own mode; on an exclusive lock, h[1] are shared holds that ride on
 * it (a backend that holds the exclusive lock is granted the shared one at
 * once, never queued behind someone waiting for itself).  The znode goes
 * when every hold is gone.
 */
typedef struct LocalLock
{
	dlist_node	node;			/* in local_locks, in order of acquisition */
	char	   *name;			/* UTF-8, qualified (zk_qualify_name) */
	int			len;
	ZkMode		mode;
	uint8		family;			/* ZKF_LOCKS, or ZKF_ELECTIONS for a
								 * campaign (zk_acquire_in) */
	uint32		idx;			/* shared entry */
	uint32		gen;
	int64		token;
	bool		granted;
	Holds		h[2];

	/*
	 * An exclusive lock taken while this backend held the same lock shared
	 * (an upgrade) may have been granted ahead of others queued behind our
	 * shared node; they stay blocked only while that node exists.  So the
	 * shared node, once its own holds are gone, is kept here and let go
	 * together with the exclusive one.
	 */
	uint32		pin_idx;
	uint32		pin_gen;
} LocalLock;

#define HOLDS_OWN	0
#define HOLDS_RIDER	1

/* Does this lock have transaction-scope holds? */
static bool
ll_has_xact(LocalLock *ll)
{
	return ll->h[0].subxids != NIL || ll->h[1].subxids != NIL;
}

/* Does this lock have session-scope holds? */
static bool
ll_has_session(LocalLock *ll)
{
	return ll->h[0].session > 0 || ll->h[1].session > 0;
}

/* No hold of either scope left? */
static bool
ll_empty(LocalLock *ll)
{
	return !ll_has_xact(ll) && !ll_has_session(ll);
}

/*
 * This backend's locks, held or awaited: a list in the order they were
 * taken (end of transaction, savepoints and exit walk it) and a hash table
 * by name and mode, so that finding one (every zk_lock, zk_unlock and
 * zk_lock_token) costs the same however many this backend holds.  A name
 * and mode is in local_locks at most once: a request is added only when
 * find_local found none, and an upgrade's downgrade (downgrade_riders)
 * puts a shared lock where no shared one of the name is left.
 *
 * The name is the one qualified with the namespace of the moment the lock
 * was asked for, as its entry and its node are.  zklock.namespace cannot be
 * SET while something is held, but it can change under held locks all the
 * same: a SET LOCAL reverts at the end of the transaction, a function's SET
 * clause when it returns, and a session lock outlives both.  Keyed by the
 * bare name, "x" of the new namespace would find "x" of the old one, and
 * be re-entered or let go of instead of taken.
 */
static dlist_head local_locks = DLIST_STATIC_INIT(local_locks);
static HTAB *local_hash = NULL;

typedef struct LocalLockKey
{
	int32		mode;			/* ZkMode */
	int32		family;			/* ZkLockFamily */
	int32		len;
	char		name[ZKLOCK_QNAME_MAX]; /* qualified, zero-padded */
} LocalLockKey;

typedef struct LocalLockEnt
{
	LocalLockKey key;
	LocalLock  *ll;
} LocalLockEnt;

/*
 * ZKCNT_LOST when check_lost last found none of this backend's locks lost
 * (lost_seen_valid): the worker counts every lock it marks lost, under the
 * lock, before it marks it, so while the count stays put no scan is needed.
 */
static uint64 lost_seen = 0;
static bool lost_seen_valid = false;

/*
 * The max_hold argument of the call under way (lock_sql.c sets it, the next
 * zk_acquire takes it): 0 when the call gave none
 */
int64		zk_lock_call_max_hold_ms = 0;

/* A zk_lock_holders query in flight, given back at exit if need be */
static uint32 query_idx = ZKLOCK_NO_ENTRY;
static uint32 query_gen = 0;

/* ---- local bookkeeping ---- */

/* The hash key of a qualified name and mode */
static void
local_key(LocalLockKey *key, int family, const char *name, int len, ZkMode mode)
{
	Assert(len <= ZKLOCK_QNAME_MAX);
	memset(key, 0, sizeof(LocalLockKey));
	key->mode = (int32) mode;
	key->family = family;
	key->len = len;
	memcpy(key->name, name, len);
}

/* The hash table, made on first use (it lives as long as the backend) */
static HTAB *
local_table(void)
{
	if (local_hash == NULL)
	{
		local_hash = zk_hash_create("zklock local locks", 64, sizeof(LocalLockKey),
									sizeof(LocalLockEnt), false, TopMemoryContext);
	}
	return local_hash;
}

/* Does this backend hold or await any lock? */
static bool
have_locals(void)
{
	return !dlist_is_empty(&local_locks);
}

/*
 * Add ll at the end of local_locks (or after the node "after") and to the
 * hash table.  The hash table may need memory: zk_acquire adds before it
 * allocates a shared entry, and downgrade_riders (which runs at the end of
 * transactions) after the lock it replaces has left the table, so that the
 * element that lock gave back is reused.
 */
static void
local_add(LocalLock *ll, dlist_node *after)
{
	LocalLockKey key;
	LocalLockEnt *ent;
	bool		found;

	local_key(&key, ll->family, ll->name, ll->len, ll->mode);
	ent = hash_search(local_table(), &key, HASH_ENTER, &found);
	Assert(!found);
	ent->ll = ll;
	if (after != NULL)
		dlist_insert_after(after, &ll->node);
	else
		dlist_push_tail(&local_locks, &ll->node);
}

/* Take ll out of local_locks and the hash table (it is not freed) */
static void
local_remove(LocalLock *ll)
{
	LocalLockKey key;
	LocalLockEnt *ent;

	dlist_delete(&ll->node);
	local_key(&key, ll->family, ll->name, ll->len, ll->mode);
	ent = hash_search(local_table(), &key, HASH_FIND, NULL);
	if (ent != NULL && ent->ll == ll)
		(void) hash_search(local_table(), &key, HASH_REMOVE, NULL);
}

/*
 * This backend's lock of this family, qualified name and mode, granted or
 * not, or NULL
 */
static LocalLock *
find_any_local(int family, const char *name, int len, ZkMode mode)
{
	LocalLockKey key;
	LocalLockEnt *ent;

	if (local_hash == NULL || len > ZKLOCK_QNAME_MAX)
		return NULL;
	local_key(&key, family, name, len, mode);
	ent = hash_search(local_hash, &key, HASH_FIND, NULL);
	return ent ? ent->ll : NULL;
}

/*
 * This backend's granted lock of this family, qualified name and mode, or
 * NULL
 */
static LocalLock *
find_local(int family, const char *name, int len, ZkMode mode)
{
	LocalLock  *ll = find_any_local(family, name, len, mode);

	return (ll != NULL && ll->granted) ? ll : NULL;
}

/* This backend's exclusive hold on the same name as a shared one, or NULL */
static LocalLock *
find_exclusive_holder(LocalLock *shared)
{
	LocalLock  *ll = find_local(shared->family, shared->name, shared->len, ZKM_EXCLUSIVE);

	return ll != shared ? ll : NULL;
}

/*
 * Free a local lock (already out of local_locks) and release its entry;
 * returns true when the worker must be woken.
 */
static bool
free_local(LocalLock *ll)
{
	bool		wake = false;
	LocalLock  *x;

	if (ll->mode == ZKM_SHARED && ll->granted &&
		(x = find_exclusive_holder(ll)) != NULL && x->pin_idx == ZKLOCK_NO_ENTRY)
	{
		/* an upgrade holds on: keep our shared node until it ends */
		x->pin_idx = ll->idx;
		x->pin_gen = ll->gen;
	}
	else
		wake = zk_release_entry(ll->idx, ll->gen);
	if (ll->pin_idx != ZKLOCK_NO_ENTRY)
		wake |= zk_release_entry(ll->pin_idx, ll->pin_gen);

	list_free(ll->h[0].subxids);
	list_free(ll->h[1].subxids);
	pfree(ll->name);
	pfree(ll);
	return wake;
}

/* Drop a lock from this backend's list and free it */
static bool
forget_local(LocalLock *ll)
{
	local_remove(ll);
	return free_local(ll);
}

/*
 * Keep the entry's scope (shown by zk_locks) in step with the holds.  One
 * byte written by its owner, read by zk_locks: no lock needed (this runs at
 * the end of transactions, where waiting for the lock is not an option).
 */
static void
set_entry_scope(LocalLock *ll)
{
	ZkEntry    *e = zk_entry(ll->idx);

	if (e->gen == ll->gen)
		e->scope = ll_has_session(ll) ? ZKS_SESSION : ZKS_TRANSACTION;
}

/*
 * An upgrade's exclusive lock whose own holds are gone while shared holds
 * still ride on it: those go back onto the shared node the upgrade pinned
 * (it was held all along), and the exclusive node goes, so the backend
 * holds what it asked for, not an exclusive lock.  Returns the shared lock
 * that replaces ll (ll is freed; *wake when the worker must run), or NULL
 * when there is nothing to do.  (Without a pinned node the shared holds
 * keep riding on the exclusive node until they end.)  The shared lock
 * takes ll's place in local_locks.
 */
static LocalLock *
downgrade_riders(LocalLock *ll, bool *wake)
{
	LocalLock  *sh;
	dlist_node *prev;

	if (ll->mode != ZKM_EXCLUSIVE || ll->pin_idx == ZKLOCK_NO_ENTRY ||
		ll->h[HOLDS_OWN].session > 0 || ll->h[HOLDS_OWN].subxids != NIL ||
		(ll->h[HOLDS_RIDER].session == 0 && ll->h[HOLDS_RIDER].subxids == NIL))
		return NULL;
	sh = MemoryContextAllocZero(TopMemoryContext, sizeof(LocalLock));
	sh->name = ll->name;
	sh->len = ll->len;
	sh->mode = ZKM_SHARED;
	sh->family = ll->family;
	sh->idx = ll->pin_idx;
	sh->gen = ll->pin_gen;
	sh->token = zk_entry(sh->idx)->gen == sh->gen ? zk_entry(sh->idx)->token : ll->token;
	sh->granted = true;
	sh->h[HOLDS_OWN] = ll->h[HOLDS_RIDER];
	sh->pin_idx = ZKLOCK_NO_ENTRY;
	prev = ll->node.prev;
	local_remove(ll);
	local_add(sh, prev);		/* in ll's place */
	*wake |= zk_release_entry(ll->idx, ll->gen);
	list_free(ll->h[HOLDS_OWN].subxids);
	pfree(ll);
	set_entry_scope(sh);
	return sh;
}

/*
 * Drop holds: the transaction-scoped ones (all of them, at the end of the
 * transaction) and/or the session-scoped ones, of every family or of
 * "family" only (>= 0).  Locks left with no hold are released.
 */
static void
drop_holds(bool xact, bool session, int family)
{
	bool		wake = false;
	dlist_mutable_iter it;

	if (!have_locals() || zk_ctl == NULL)
		return;
	dlist_foreach_modify(it, &local_locks)
	{
		LocalLock  *ll = dlist_container(LocalLock, node, it.cur);
		bool		changed = false;
		int			k;

		if (family >= 0 && ll->family != family)
			continue;
		for (k = 0; k < 2; k++)
		{
			if (xact && ll->h[k].subxids != NIL)
			{
				list_free(ll->h[k].subxids);
				ll->h[k].subxids = NIL;
				changed = true;
			}
			if (session && ll->h[k].session > 0)
			{
				ll->h[k].session = 0;
				changed = true;
			}
		}
		if (ll_empty(ll))
			wake |= forget_local(ll);
		else if (downgrade_riders(ll, &wake) == NULL && changed)
			set_entry_scope(ll);
	}
	if (wake)
		zk_wake_worker();
}

/* Does this backend hold any transaction-scope lock? */
static bool
holds_transaction_locks(void)
{
	dlist_iter	it;

	dlist_foreach(it, &local_locks)
	{
		if (ll_has_xact(dlist_container(LocalLock, node, it.cur)))
			return true;
	}
	return false;
}

/*
 * Every zklock call starts here: a lock lost with its ZooKeeper session is
 * reported (40001) on the holder's next call.  A lost session-scoped hold
 * is reported once and forgotten; a lost transaction-scoped hold stays, so
 * that the transaction cannot commit.  Looks at the entries only when the
 * worker has counted a lost lock (anyone's) since the last look that found
 * none of ours: a call costs the same however many locks are held.
 */
static void
check_lost(void)
{
	dlist_iter	it;
	LocalLock  *lost = NULL;
	char		msg[ZKLOCK_ERRMSG_MAX];
	char	   *name;
	int			family;
	uint64		nlost;

	if (!have_locals())
		return;
	pg_memory_barrier();
	nlost = pg_atomic_read_u64(&zk_ctl->counters[ZKCNT_LOST]);
	if (lost_seen_valid && nlost == lost_seen)
		return;
	zk_backend_lock(LW_SHARED);
	/* the worker counts and marks under the lock: this count is consistent */
	nlost = pg_atomic_read_u64(&zk_ctl->counters[ZKCNT_LOST]);
	dlist_foreach(it, &local_locks)
	{
		LocalLock  *ll = dlist_container(LocalLock, node, it.cur);
		ZkEntry    *e = zk_entry(ll->idx);

		if (ll->granted && e->gen == ll->gen && e->outcome == ZKO_LOST)
		{
			lost = ll;
			strlcpy(msg, e->errmsg, sizeof(msg));
			break;
		}
	}
	LWLockRelease(zk_ctl->lock);
	if (lost == NULL)
	{
		lost_seen = nlost;
		lost_seen_valid = true;
		return;
	}

	name = zk_display_name(lost->name);
	family = lost->family;
	if (ll_has_session(lost))
	{
		lost->h[0].session = lost->h[1].session = 0;
		if (ll_empty(lost) && forget_local(lost))
			zk_wake_worker();
	}
	if (family == ZKF_ELECTIONS)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("leadership of zookeeper election \"%s\" was lost", name),
				 errdetail("%s; another session may lead the election since.", msg),
				 errhint("Roll back, and campaign again before retrying the work that needed the leadership.")));
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("zookeeper lock \"%s\" was lost", name),
			 errdetail("%s; another session may have taken the lock since.", msg),
			 errhint("Roll back and retry the work that needed the lock.")));
}

/* Every call on a named lock starts here (name in UTF-8). */
static void
begin_call(const char *name, int len)
{
	zk_require_shmem();
	zk_check_name("lock name", len);
	zk_backend_init();
	check_lost();
}

/*
 * The start of a call on a lock local_locks may know: begin_call, then the
 * name (UTF-8, as the user wrote it) qualified with this session's
 * namespace of the moment (*qlen bytes), the one its entry carries.  Only
 * a call that asks ZooKeeper for something checks the namespace against
 * the registry of claims (zk_qualify_name): zk_new_entry leaves a name
 * qualified already as it is, so zk_acquire's check is this one.
 */
static char *
begin_lock_call(const char *name, int len, int *qlen, bool check)
{
	begin_call(name, len);
	return zk_qualify_name_ext(name, len, qlen, check);
}


/*
 * The longest the next acquisition may be held (0: no bound): the call's
 * max_hold, which is this acquisition's only, within zklock.max_hold
 */
static int64
take_max_hold(void)
{
	int64		max_hold = zk_lock_call_max_hold_ms;

	zk_lock_call_max_hold_ms = 0;
	if (zk_max_hold > 0 && (max_hold <= 0 || max_hold > zk_max_hold))
		max_hold = zk_max_hold;
	return max_hold;
}

/*
 * Take a lock.  Returns its fencing token; *acquired is false when a
 * try-lock found it taken.  timeout_ms < 0 waits forever.
 */
int64
zk_acquire(const char *name, int len, ZkMode mode, ZkScope scope,
		   bool try_only, int64 timeout_ms, bool *acquired)
{
	return zk_acquire_in(ZKF_LOCKS, name, len, mode, scope, try_only,
						 timeout_ms, acquired);
}

/*
 * zk_acquire in a family: ZKF_LOCKS, or ZKF_ELECTIONS for a session's
 * campaign (src/election/campaign_sql.c), an exclusive contender under
 * <root>/elections/<qualified name>, held, stacked, let go and lost as a
 * lock is.
 */
int64
zk_acquire_in(int family, const char *name, int len, ZkMode mode,
			  ZkScope scope, bool try_only, int64 timeout_ms, bool *acquired)
{
	LocalLock  *ll;
	ZkEntry    *e;
	MemoryContext oldcxt;
	bool		granted = false;
	int			k;

	name = begin_lock_call(name, len, &len, true);

	/*
	 * Re-entrant: stack another hold on a lock we have; a shared request
	 * rides on our exclusive lock of the same name if we have one.
	 */
	ll = find_local(family, name, len, mode);
	k = HOLDS_OWN;
	if (ll == NULL && mode == ZKM_SHARED)
	{
		ll = find_local(family, name, len, ZKM_EXCLUSIVE);
		k = HOLDS_RIDER;
	}
	if (ll != NULL)
	{
		bool		had_session = ll_has_session(ll);

		if (scope == ZKS_TRANSACTION)
		{
			oldcxt = MemoryContextSwitchTo(TopMemoryContext);
			ll->h[k].subxids = lappend_int(ll->h[k].subxids,
										   GetCurrentSubTransactionId());
			MemoryContextSwitchTo(oldcxt);
		}
		else
		{
			ll->h[k].session++;
			if (!had_session)
				set_entry_scope(ll);
		}
		zk_lock_call_max_hold_ms = 0;	/* the first grant's bound holds */
		*acquired = true;
		return ll->token;
	}

	/*
	 * Everything that can fail for want of memory comes first, so that an
	 * entry, once allocated, is always known to local_locks.
	 */
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	ll = palloc0(sizeof(LocalLock));
	ll->name = pnstrdup(name, len);
	ll->len = len;
	ll->mode = mode;
	ll->family = family;
	ll->idx = ZKLOCK_NO_ENTRY;
	ll->pin_idx = ZKLOCK_NO_ENTRY;
	if (scope == ZKS_TRANSACTION)
		ll->h[0].subxids = list_make1_int(GetCurrentSubTransactionId());
	else
		ll->h[0].session = 1;
	MemoryContextSwitchTo(oldcxt);
	local_add(ll, NULL);

	PG_TRY();
	{
		e = zk_new_entry(ZKK_LOCK, name, len, mode, scope, try_only);
		e->family = family;
		ll->idx = zk_entry_index(e);
		ll->gen = e->gen;
		/* a wait this long is checked for a deadlock (lock_deadlock.c) */
		ZKLK(e)->dl_timeout_ms = try_only ? 0 : DeadlockTimeout;
		/* held longer than this, the worker takes it back (lock_worker.c) */
		ZKLK(e)->max_hold_ms = take_max_hold();

		/* an upgrade: name the shared node we hold (see zk_lock_blocker) */
		if (mode == ZKM_EXCLUSIVE)
		{
			LocalLock  *sh = find_local(family, name, len, ZKM_SHARED);

			if (sh != NULL)
			{
				ZkEntry    *se = zk_entry(sh->idx);

				if (se->gen == sh->gen && se->outcome == ZKO_GRANTED &&
					se->state == ZKE_HELD)
				{
					strlcpy(ZKLK(e)->base, se->node, sizeof(ZKLK(e)->base));
					ZKLK(e)->base_token = se->token;
				}
			}
		}
		zk_enqueue(e);
		LWLockRelease(zk_ctl->lock);
	}
	PG_CATCH();
	{
		if (forget_local(ll))
			zk_wake_worker();
		PG_RE_THROW();
	}
	PG_END_TRY();
	zk_count(ZKCNT_REQUESTS, 1);
	zk_wake_worker();

	PG_TRY();
	{
		granted = zk_wait_for_answer(ll->idx, ll->name, try_only ? -1 : timeout_ms,
								  &ll->token);
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

/* ---- several locks at once ---- */

/* A member of a multi-lock: its name in UTF-8 and its place in the call */
typedef struct MultiMember
{
	const char *name;
	int			len;
	int			pos;
} MultiMember;

/*
 * The canonical order of a multi-lock's members: the bytes of their UTF-8
 * names, a prefix first (then the call's order, so duplicates sit together).
 * Every backend of every cluster sorts the same way, whatever its database
 * encoding or collation.
 */
static int
member_cmp(const void *a, const void *b)
{
	const MultiMember *x = a;
	const MultiMember *y = b;
	int			c = memcmp(x->name, y->name, Min(x->len, y->len));

	if (c != 0)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->pos - y->pos;
}

/* Is member i a repeat of the member before it (the same name)? */
static bool
member_repeat(const MultiMember *m, int i)
{
	return i > 0 && m[i].len == m[i - 1].len &&
		memcmp(m[i].name, m[i - 1].name, m[i].len) == 0;
}

/*
 * The members of a multi-lock, names checked, in the canonical order;
 * *distinct counts the distinct names.  Freed by the caller.
 */
static MultiMember *
members_sorted(char **names, int *lens, int n, int *distinct)
{
	MultiMember *m = palloc(Max(n, 1) * sizeof(MultiMember));
	int			i;

	for (i = 0; i < n; i++)
	{
		zk_check_name("lock name", lens[i]);
		m[i].name = names[i];
		m[i].len = lens[i];
		m[i].pos = i;
	}
	qsort(m, n, sizeof(MultiMember), member_cmp);
	*distinct = 0;
	for (i = 0; i < n; i++)
		*distinct += member_repeat(m, i) ? 0 : 1;
	return m;
}

/*
 * Let go of the hold of (name, mode, scope) that zk_acquire stacked last,
 * for a multi-lock whose later member failed: the hold it found (a name this
 * backend held already keeps its older holds) or the lock it took.
 */
static void
undo_hold(const char *name, int len, ZkMode mode, ZkScope scope)
{
	LocalLock  *ll;
	int			k = HOLDS_OWN;
	bool		wake = false;

	/* the namespace cannot change within the call: zk_acquire's name */
	name = zk_qualify_name_ext(name, len, &len, false);
	ll = find_local(ZKF_LOCKS, name, len, mode);
	if (ll == NULL && mode == ZKM_SHARED)
	{
		ll = find_local(ZKF_LOCKS, name, len, ZKM_EXCLUSIVE);
		k = HOLDS_RIDER;
	}
	if (ll == NULL)
		return;
	if (scope == ZKS_TRANSACTION)
	{
		if (ll->h[k].subxids == NIL)
			return;
		ll->h[k].subxids = list_delete_last(ll->h[k].subxids);
	}
	else
	{
		if (ll->h[k].session == 0)
			return;
		ll->h[k].session--;
	}
	if (ll_empty(ll))
		wake = forget_local(ll);
	else
	{
		LocalLock  *sh = downgrade_riders(ll, &wake);

		set_entry_scope(sh != NULL ? sh : ll);
	}
	if (wake)
		zk_wake_worker();
}

/* Let go of the first "taken" members of m (sorted), the last one first */
static void
undo_members(const MultiMember *m, int taken, ZkMode mode, ZkScope scope)
{
	int			i;

	for (i = taken - 1; i >= 0; i--)
	{
		if (!member_repeat(m, i))
			undo_hold(m[i].name, m[i].len, mode, scope);
	}
}

/*
 * zk_acquire of a multi-lock's member mb, given "left" ms of the call's
 * timeout_ms (< 0: none).  zk_wait_for_answer knows only what was left for
 * this member, so a wait that runs out would report that much and nothing
 * of the call: its 55P03 is raised again with a detail of the whole call's
 * wait, its "distinct" names and the "held" of them already taken.
 */
static int64
acquire_member(const MultiMember *mb, ZkMode mode, ZkScope scope,
			   bool try_only, int64 left, int64 timeout_ms, int distinct,
			   int held, bool *acquired)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile int64 token = 0;

	PG_TRY();
	{
		token = zk_acquire(mb->name, mb->len, mode, scope, try_only, left,
						   acquired);
	}
	PG_CATCH();
	{
		ErrorData  *ed;

		MemoryContextSwitchTo(cxt);
		ed = CopyErrorData();
		if (ed->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE || timeout_ms < 0)
			PG_RE_THROW();
		FlushErrorState();
		if (distinct == 1)
			ed->detail = psprintf("The call waited " INT64_FORMAT " ms (its timeout) for its one lock, "
								  "\"%s\", which another session holds.",
								  timeout_ms, zk_display_name(pnstrdup(mb->name, mb->len)));
		else
			ed->detail = psprintf("The call waited " INT64_FORMAT " ms (its timeout) for its %d locks: "
								  "it had taken %d and was waiting for \"%s\", which another session holds.",
								  timeout_ms, distinct, held,
								  zk_display_name(pnstrdup(mb->name, mb->len)));
		ReThrowError(ed);
	}
	PG_END_TRY();
	return token;
}

/*
 * Take the members of m (sorted; "distinct" names) one after the other,
 * each distinct name once, within timeout_ms (< 0: no limit) from now;
 * *taken counts the members held so far, so that the caller can let go of
 * them whatever happens.  False when a try found a member taken.
 */
static bool
take_members(const MultiMember *m, int n, int distinct, ZkMode mode,
			 ZkScope scope, bool try_only, int64 timeout_ms, int64 max_hold,
			 int64 *tokens, volatile int *taken)
{
	TimestampTz deadline = timeout_ms >= 0 ?
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms) : 0;
	int			held = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		int64		left = -1;
		bool		acquired;

		if (member_repeat(m, i))
		{
			tokens[m[i].pos] = tokens[m[i - 1].pos];
			*taken = i + 1;
			continue;
		}
		if (deadline != 0)
		{
			TimestampTz now = GetCurrentTimestamp();

			left = now >= deadline ? 0 : (deadline - now + 999) / 1000;
		}
		zk_lock_call_max_hold_ms = max_hold;
		tokens[m[i].pos] = acquire_member(&m[i], mode, scope, try_only, left,
										  timeout_ms, distinct, held,
										  &acquired);
		if (!acquired)
			return false;
		held++;
		*taken = i + 1;
	}
	return true;
}

/*
 * Take several locks, all or none (zk_lock(text[]) and its family): each
 * distinct name once, one after the other in the canonical order
 * (member_cmp), so two multi-locks never wait for each other in a circle.
 * tokens[i] gets names[i]'s token.  timeout_ms (< 0: no limit) bounds the
 * whole call.  A timeout, an error or a cancel lets go of every hold this
 * call took before the error goes on; so does a try that finds a member
 * taken, which returns false.  More distinct names than one backend may
 * hold (zklock.max_locks_per_backend) fail before anything is asked.
 */
bool
zk_acquire_all(char **names, int *lens, int n, ZkMode mode, ZkScope scope,
			   bool try_only, int64 timeout_ms, int64 *tokens)
{
	MultiMember *m;
	volatile int taken = 0;
	int			distinct;
	bool		all;
	int64		max_hold = zk_lock_call_max_hold_ms;

	zk_lock_call_max_hold_ms = 0;
	zk_require_shmem();
	m = members_sorted(names, lens, n, &distinct);
	if (distinct > zk_max_locks_per_backend)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many zookeeper locks in one call"),
				 errdetail("The call names %d distinct locks; one backend may hold at most %d (zklock.max_locks_per_backend).",
						   distinct, zk_max_locks_per_backend),
				 errhint("Lock fewer names at once, or have a superuser raise zklock.max_locks_per_backend.")));

	PG_TRY();
	{
		all = take_members(m, n, distinct, mode, scope, try_only, timeout_ms,
						   max_hold, tokens, &taken);
	}
	PG_CATCH();
	{
		undo_members(m, taken, mode, scope);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!all)
		undo_members(m, taken, mode, scope);
	pfree(m);
	return all;
}

/*
 * Let go of one session-scope hold of each distinct name (zk_unlock(text[])
 * and zk_unlock_shared(text[])).  True when every name had one; each that
 * had none gives zk_release's WARNING.
 */
bool
zk_release_all_of(char **names, int *lens, int n, ZkMode mode)
{
	int			distinct;
	MultiMember *m = members_sorted(names, lens, n, &distinct);
	bool		all = true;
	int			i;

	for (i = n - 1; i >= 0; i--)
	{
		if (!member_repeat(m, i) && !zk_release(m[i].name, m[i].len, mode))
			all = false;
	}
	pfree(m);
	return all;
}

/*
 * Release one session-scoped hold.  Returns false, with a WARNING as
 * PostgreSQL gives for advisory locks, when there is none.
 */
bool
zk_release(const char *name, int len, ZkMode mode)
{
	LocalLock  *ll;
	int			k;
	int			qlen;
	char	   *qname = begin_lock_call(name, len, &qlen, false);

	ll = find_local(ZKF_LOCKS, qname, qlen, mode);
	k = HOLDS_OWN;
	if ((ll == NULL || ll->h[0].session == 0) && mode == ZKM_SHARED)
	{
		ll = find_local(ZKF_LOCKS, qname, qlen, ZKM_EXCLUSIVE);
		k = HOLDS_RIDER;
	}
	if (ll == NULL || ll->h[k].session == 0)
	{
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("you don't own a session-level %s zookeeper lock \"%s\"",
						mode == ZKM_SHARED ? "shared" : "exclusive",
						zk_display_name(pnstrdup(name, len))),
				 errhint("Transaction-level locks are released at the end of the transaction, not by zk_unlock.")));
		return false;
	}
	ll->h[k].session--;
	if (ll_empty(ll))
	{
		if (forget_local(ll))
			zk_wake_worker();
	}
	else
	{
		bool		wake = false;
		LocalLock  *sh = downgrade_riders(ll, &wake);

		if (sh != NULL)
			ll = sh;
		if (!ll_has_session(ll))
			set_entry_scope(ll);
		if (wake)
			zk_wake_worker();
	}
	return true;
}

/*
 * zk_unlock_all(): let go of every session-scope lock (not the campaigns:
 * zk_resign lets go of those)
 */
void
zk_release_all_session(void)
{
	zk_require_shmem();
	zk_backend_init();
	check_lost();
	drop_holds(false, true, ZKF_LOCKS);
}

/*
 * The token of a lock this backend holds: the exclusive one if held, else
 * the shared one.  *held is false when it holds neither.
 */
int64
zk_held_token(const char *name, int len, bool *held)
{
	LocalLock  *ll;

	name = begin_lock_call(name, len, &len, false);
	ll = find_local(ZKF_LOCKS, name, len, ZKM_EXCLUSIVE);
	if (ll == NULL)
		ll = find_local(ZKF_LOCKS, name, len, ZKM_SHARED);
	*held = (ll != NULL);
	return ll ? ll->token : 0;
}

/*
 * zk_resign: let go of this backend's campaign of the name (family
 * ZKF_ELECTIONS), every hold of either scope at once.  False when it has
 * none.  A transaction-scope campaign let go of here no longer decides
 * its transaction's COMMIT.
 */
bool
zk_campaign_resign(const char *name, int len)
{
	LocalLock  *ll;
	int			qlen;
	char	   *qname = begin_lock_call(name, len, &qlen, false);

	ll = find_any_local(ZKF_ELECTIONS, qname, qlen, ZKM_EXCLUSIVE);
	if (ll == NULL || !ll->granted)
		return false;
	if (forget_local(ll))
		zk_wake_worker();
	return true;
}

/*
 * The token of this backend's campaign of the name while it leads: granted,
 * not lost, and the worker's session connected and fresh (as zk_is_leader
 * asks); *leads is false otherwise.
 */
int64
zk_campaign_leading(const char *name, int len, bool *leads)
{
	LocalLock  *ll;
	int64		token = 0;

	name = begin_lock_call(name, len, &len, false);
	ll = find_local(ZKF_ELECTIONS, name, len, ZKM_EXCLUSIVE);
	*leads = false;
	if (ll == NULL)
		return 0;
	zk_backend_lock(LW_SHARED);
	{
		ZkEntry    *e = zk_entry(ll->idx);

		if (e->gen == ll->gen && e->state == ZKE_HELD && e->outcome == ZKO_GRANTED &&
			zk_fresh_conn_state() == ZKC_CONNECTED)
		{
			*leads = true;
			token = ll->token;
		}
	}
	LWLockRelease(zk_ctl->lock);
	return token;
}

/*
 * Read every contender of a lock from ZooKeeper.  The worker writes what it
 * finds into a dynamic shared memory segment we give it; returns that
 * segment (the caller detaches it).
 */
dsm_segment *
zk_query_holders(const char *name, int len, int family)
{
	/* elections are the cluster's: their names are outside namespaces */
	return zk_query_holders_in(name, len, family, family != ZKF_ELECTIONS);
}

/*
 * zk_query_holders, the name qualified with the session's namespace or not
 * (a campaign's election, zk_campaign_candidates, is qualified; a cluster's
 * is not)
 */
dsm_segment *
zk_query_holders_in(const char *name, int len, int family, bool qualified)
{
	volatile Size size = 64 * 1024;	/* lives across PG_TRY */
	Size		cap = Max((Size) zk_max_answer_kb * 1024, size);
	int			attempt;

	begin_call(name, len);

	for (attempt = 0; attempt < 5; attempt++)
	{
		dsm_segment *seg = dsm_create(size, 0);
		ZkHoldersBuf *buf = dsm_segment_address(seg);
		ZkEntry    *e;
		uint32		idx;
		uint32		gen;
		bool		done = false;

		memset(buf, 0, sizeof(ZkHoldersBuf));
		buf->size = size;
		zk_next_entry_unqualified = !qualified;
		e = zk_new_entry(ZKK_HOLDERS, name, len, ZKM_EXCLUSIVE, ZKS_TRANSACTION, false);
		e->family = family;
		e->dsm = dsm_segment_handle(seg);
		e->answer_cap = cap;	/* bounds <root>/leases' listing (ZKF_LEASEDIR) */
		idx = zk_entry_index(e);
		gen = e->gen;
		query_idx = idx;
		query_gen = gen;
		zk_enqueue(e);
		LWLockRelease(zk_ctl->lock);
		zk_wake_worker();

		PG_TRY();
		{
			done = zk_wait_for_answer(idx, pnstrdup(name, len), -1, NULL);
		}
		PG_CATCH();
		{
			query_idx = ZKLOCK_NO_ENTRY;
			if (zk_release_entry(idx, gen))
				zk_wake_worker();
			PG_RE_THROW();
		}
		PG_END_TRY();
		query_idx = ZKLOCK_NO_ENTRY;
		if (zk_release_entry(idx, gen))
			zk_wake_worker();

		if (done && MAXALIGN(sizeof(ZkHoldersBuf)) + buf->needed <= buf->size)
			return seg;
		/* the worker stopped once it was full; "needed" is about the whole */
		if (size >= cap)
		{
			Size		needed = buf->needed;

			dsm_detach(seg);
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("too many contenders to list for zookeeper lock \"%s\"",
							zk_display_name(pnstrdup(name, len))),
					 errdetail("Their list needs about %zu kB, more than zklock.max_answer_bytes (%zu kB).",
							   (needed + 1023) / 1024, cap / 1024),
					 errhint("Have a superuser raise zklock.max_answer_bytes for this session.")));
		}
		size = Max(MAXALIGN(sizeof(ZkHoldersBuf)) + buf->needed + buf->needed / 4 + 4096,
				   size * 4);
		size = Min(size, cap);
		dsm_detach(seg);
	}
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("too many contenders to list for zookeeper lock \"%s\"",
					zk_display_name(pnstrdup(name, len))),
			 errhint("The lock's contenders kept growing while being read; retry.")));
	return NULL;				/* keep the compiler quiet */
}

/*
 * zk_lock_revoke: ask every cluster to take back the holds of nodes (the
 * names of n contenders of the lock, at most ZK_REVOKE_BATCH), and wait up
 * to timeout_ms (< 0: without limit) for their nodes to go.  gone[i] says
 * whether nodes[i] went.  One ZKK_REVOKE entry each (lock_revoke.c), let
 * go of (its request deleted) before returning, or on error.
 */
void
zk_revoke_holders(const char *name, int len, char **nodes, int n,
				  int64 timeout_ms, bool *gone)
{
	uint32		idx[ZK_REVOKE_BATCH];
	uint32		gen[ZK_REVOKE_BATCH];
	volatile int made = 0;
	char		what[ZKLOCK_NAME_MAX * 4 + 64];
	int			i;

	Assert(n <= ZK_REVOKE_BATCH);
	begin_call(name, len);
	snprintf(what, sizeof(what), "revoke zookeeper lock \"%s\"",
			 zk_display_name(pnstrdup(name, len)));
	PG_TRY();
	{
		TimestampTz deadline;

		for (i = 0; i < n; i++)
		{
			ZkEntry    *e = zk_new_entry(ZKK_REVOKE, name, len, ZKM_EXCLUSIVE,
										 ZKS_TRANSACTION, false);

			e->family = ZKF_LOCKS;
			strlcpy(e->node, nodes[i], sizeof(e->node));
			idx[i] = zk_entry_index(e);
			gen[i] = e->gen;
			made = i + 1;
			zk_enqueue(e);
			LWLockRelease(zk_ctl->lock);
		}
		zk_wake_worker();
		deadline = timeout_ms >= 0 ?
			TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms) : 0;
		for (i = 0; i < n; i++)
		{
			int64		left = -1;

			if (deadline != 0)
			{
				long		secs;
				int			usecs;

				TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
				left = (int64) secs * 1000 + usecs / 1000;
			}
			gone[i] = zk_wait_outcome(idx[i], left, zk_connect_timeout, what) == ZKO_GRANTED;
		}
	}
	PG_CATCH();
	{
		bool		wake = false;

		for (i = 0; i < made; i++)
			wake |= zk_release_entry(idx[i], gen[i]);
		if (wake)
			zk_wake_worker();
		PG_RE_THROW();
	}
	PG_END_TRY();
	{
		bool		wake = false;

		for (i = 0; i < n; i++)
			wake |= zk_release_entry(idx[i], gen[i]);
		if (wake)
			zk_wake_worker();
	}
}

/*
 * Is e an entry a backend holds or awaits: in use, not let go of, and not
 * answered with a failure?  (zk_locks and zk_semaphores show only those.)
 * Lock held.
 */
bool
zk_entry_live(ZkEntry *e)
{
	if (e->released || pg_atomic_read_u32(&e->release_req) != 0)
		return false;
	return e->outcome == ZKO_NONE || e->outcome == ZKO_GRANTED || e->outcome == ZKO_LOST;
}

/*
 * Walk this cluster's entries in use that "want" accepts (zk_locks,
 * zk_semaphores, zk_entries) a chunk at a time: zk_snapshot_next copies the
 * rows of the next ZK_SNAPSHOT_CHUNK slots of the table under the shared
 * lock and returns them once the lock is released; the caller builds its
 * rows from them.  "want" runs under the lock: it only looks at the entry.
 * So a reader of a table of any size holds the lock for one chunk at a
 * time (the worker and the backends never wait longer than that for it)
 * and keeps one chunk of copies in memory, plus what it puts into its
 * tuplestore (work_mem, then disk).  Each row is one entry's state at one
 * moment; rows of different chunks may be of different moments, as the
 * rows of pg_stat_activity are.
 */
ZkSnapshot *
zk_snapshot_begin(bool (*want) (ZkEntry *e))
{
	ZkSnapshot *s;

	zk_require_shmem();
	s = palloc0(sizeof(ZkSnapshot));
	s->want = want;
	s->next = 0;
	return s;
}

/*
 * The next chunk's rows (*n of them, possibly 0), or NULL when the table
 * has been read to its end.  The rows stay valid until the next call.
 */
ZkLockRow *
zk_snapshot_next(ZkSnapshot *s, int *n)
{
	int			end;
	int			i;
	int			k = 0;

	*n = 0;
	if (s->next >= zk_ctl->max_entries)
		return NULL;
	end = Min(s->next + ZK_SNAPSHOT_CHUNK, zk_ctl->max_entries);
	zk_backend_lock(LW_SHARED);
	for (i = s->next; i < end; i++)
	{
		ZkEntry    *e = zk_entry(i);
		ZkLockRow  *r;

		if (e->state == ZKE_FREE || !s->want(e))
			continue;
		r = &s->rows[k++];
		r->idx = i;
		r->state = e->state;
		r->released = e->released || pg_atomic_read_u32(&e->release_req) != 0;
		r->queued = e->queued;
		r->on_retry = e->on_retry;
		r->in_doubt = e->in_doubt;
		r->outstanding = e->outstanding;
		r->pid = e->pid;
		r->dbid = e->dbid;
		r->kind = e->kind;
		r->family = e->family;
		r->mode = e->mode;
		r->scope = e->scope;
		r->parties = e->parties;
		r->outcome = e->outcome;
		r->token = e->token;
		r->requested_at = e->requested_at;
		r->granted_at = e->granted_at;
		strlcpy(r->name, e->name, sizeof(r->name));
		strlcpy(r->node, e->node, sizeof(r->node));
	}
	LWLockRelease(zk_ctl->lock);
	s->next = end;
	*n = k;
	return s->rows;
}

/* ---- end of transaction, savepoints, exit ---- */

/*
 * Mark (or unmark) this backend's transaction-scope holds as committing
 * (ZkLockPart.committing): a maximum hold does not end them meanwhile
 */
static void
mark_committing(bool on)
{
	dlist_iter	it;

	dlist_foreach(it, &local_locks)
	{
		LocalLock  *ll = dlist_container(LocalLock, node, it.cur);
		ZkEntry    *e = zk_entry(ll->idx);

		if (ll->granted && e->gen == ll->gen && e->kind == ZKK_LOCK &&
			(on ? ll_has_xact(ll) : ZKLK(e)->committing))
			ZKLK(e)->committing = on;
	}
}

/*
 * Before COMMIT: a transaction whose lock was lost must not commit; while
 * the session is suspended, wait up to zklock.commit_timeout for it to
 * come back.
 */
static void
check_before_commit(void)
{
	TimestampTz deadline = 0;
	char	   *first = NULL;

	for (;;)
	{
		dlist_iter	it;
		bool		any = false;
		int			conn;
		char	   *lost = NULL;
		int			lost_family = ZKF_LOCKS;
		char		msg[ZKLOCK_ERRMSG_MAX];

		zk_backend_lock(LW_SHARED);
		conn = zk_fresh_conn_state();
		dlist_foreach(it, &local_locks)
		{
			LocalLock  *ll = dlist_container(LocalLock, node, it.cur);
			ZkEntry    *e = zk_entry(ll->idx);

			if (!ll_has_xact(ll) || !ll->granted)
				continue;
			any = true;
			if (first == NULL)
				first = ll->name;	/* lives as long as the transaction's holds */
			if (e->gen != ll->gen || e->outcome == ZKO_LOST)
			{
				lost = ll->name;
				lost_family = ll->family;
				strlcpy(msg, e->gen == ll->gen ? e->errmsg : "The lock entry was released", sizeof(msg));
				break;
			}
		}

		/*
		 * Checked and about to commit: from here a maximum hold must not end
		 * the lock (the worker would let the next holder in while this
		 * transaction commits), so say so under the lock the worker marks
		 * lost holds with.  Only the owner writes the byte; a shared lock
		 * orders it with the worker's look.
		 */
		if (lost == NULL && (!any || conn == ZKC_CONNECTED))
			mark_committing(true);
		LWLockRelease(zk_ctl->lock);

		if (lost && lost_family == ZKF_ELECTIONS)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("leadership of zookeeper election \"%s\" was lost before commit",
							zk_display_name(lost)),
					 errdetail("%s; another session may lead the election since.", msg),
					 errhint("Retry the transaction: campaign again first.")));
		else if (lost)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("zookeeper lock \"%s\" was lost before commit", zk_display_name(lost)),
					 errdetail("%s; another session may have taken the lock since.", msg),
					 errhint("Retry the transaction.")));
		if (!any || conn == ZKC_CONNECTED)
			return;

		/* suspended: the lock is in doubt until the session answers */
		zk_commit_wait_session(&deadline, conn,
							   psprintf("zookeeper lock \"%s\"", zk_display_name(first)));
	}
}

/* Before COMMIT: check the locks are still held (check_before_commit) */
static void
lock_pre_commit(void)
{
	if (have_locals())
		check_before_commit();
}

/* PREPARE TRANSACTION is refused while transaction-scope locks are held */
static void
lock_pre_prepare(void)
{
	if (holds_transaction_locks())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot prepare a transaction that holds zookeeper locks"),
				 errdetail("A zookeeper lock belongs to this backend's request and cannot be handed to a prepared transaction."),
				 errhint("Commit or roll back the transaction instead.")));
}

/* End of transaction: let go of transaction-scope holds */
static void
lock_xact_end(bool commit)
{
	drop_holds(true, false, -1);
	/* what session holds are left may end by their maximum again */
	if (have_locals() && zk_ctl != NULL)
		mark_committing(false);
}

/*
 * ROLLBACK TO SAVEPOINT releases what the rolled-back subtransaction took;
 * RELEASE SAVEPOINT hands its acquisitions to the parent.
 */
static void
lock_subxact_end(bool commit, SubTransactionId mySubid,
				 SubTransactionId parentSubid)
{
	dlist_mutable_iter it;
	bool		wake = false;

	if (!have_locals())
		return;

	dlist_foreach_modify(it, &local_locks)
	{
		LocalLock  *ll = dlist_container(LocalLock, node, it.cur);
		int			k;

		if (!ll_has_xact(ll))
			continue;
		for (k = 0; k < 2; k++)
		{
			ListCell   *sc;

			foreach(sc, ll->h[k].subxids)
			{
				if ((SubTransactionId) lfirst_int(sc) != mySubid)
					continue;
				if (commit)
					lfirst_int(sc) = (int) parentSubid;
				else
					ll->h[k].subxids = foreach_delete_current(ll->h[k].subxids, sc);
			}
		}
		if (ll_empty(ll))
			wake |= forget_local(ll);
		else
			(void) downgrade_riders(ll, &wake);
	}
	if (wake)
		zk_wake_worker();
}

/*
 * A backend that exits lets go of everything at once, whatever it was
 * doing: holds, a wait in progress (its entry is in local_locks already),
 * a zk_lock_holders query.
 */
static void
lock_at_exit(void)
{
	if (query_idx != ZKLOCK_NO_ENTRY)
	{
		(void) zk_release_entry(query_idx, query_gen);
		query_idx = ZKLOCK_NO_ENTRY;
	}
	drop_holds(true, true, -1);
}

/* zk_status(): the lock's counters */
static void
lock_status(ZkStatusCounts *c)
{
	c->deadlocks += pg_atomic_read_u64(&zk_lock_counts->deadlocks);
	c->leaderships += pg_atomic_read_u64(&zk_lock_counts->leaderships);
}

const ZkRecipeBackend zk_lock_backend = {
	ZK_XACT_HOOKS(lock_pre_commit, lock_pre_prepare, lock_xact_end, lock_subxact_end),
	.at_exit = lock_at_exit,
	ZK_PATH_HOOK("lock", zk_lock_kind_path, ZKF_LOCKS),
	.status = lock_status,
	ZK_SHMEM_AREA("zklock locks", ZkLockShared, zk_lock_counts),
};
