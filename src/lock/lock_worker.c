/*-------------------------------------------------------------------------
 *
 * lock_worker.c
 *	  The worker's side of ZooKeeper's lock recipe, herd-free.
 *
 *	  Acquire: create <parent>/<guid>__lock__ (or __rlock__) as an ephemeral
 *	  sequential node and list <parent> right behind it, without waiting in
 *	  between: ZooKeeper answers one session's requests in order, so the
 *	  listing already shows the new node and an uncontended lock costs one
 *	  round trip.  Who holds is decided by zk_lock_blocker() (lock_names.c) from
 *	  the contenders in creation order: by sequence suffix while that is
 *	  unambiguous, by czxid (read for every contender) once the parent's
 *	  32-bit sequence has wrapped.  Otherwise only the predecessor that
 *	  blocks us is watched, with a get (never an exists: a watch on a node
 *	  that is already gone must not linger on the server), and its deletion
 *	  sends a new listing.  One release wakes one waiter.
 *
 *	  Release: a delete, sent without anyone waiting for it.  An entry its
 *	  owner let go is never granted: whatever state it is in, its node is
 *	  deleted as soon as its name is known, and a watch it set is removed
 *	  from the server (unless another local waiter watches the same node).
 *
 *	  Connection loss: a create whose reply was lost is "in doubt".  After
 *	  reconnecting, <parent> is listed and the node is found again by its
 *	  guid, so there is never an orphan nor a second entry.  Other requests
 *	  lost with the connection are sent again.  Any answer that is not
 *	  ZooKeeper's own (a client-side error such as a timeout or an
 *	  inconsistency) counts as a lost connection, never as a verdict.
 *
 *	  Parents: <root> and <root>/locks are persistent, <parent> is a
 *	  container node that ZooKeeper removes when empty; a create that finds
 *	  its parent gone recreates the chain and tries once more.
 *
 *	  The lock is a recipe on the common base (recipe.h): the worker's
 *	  common code calls zk_lock_ops' operations and knows nothing of
 *	  what follows.  zk_lock_holders' one-off read of every contender is a
 *	  second kind of entry with its own table, zk_holders_ops.
 *
 *	  Everything here runs in the worker with zk_ctl->lock held: the
 *	  completions and watchers take it themselves (COMPLETION_BEGIN), and
 *	  never throw: an error inside one is caught there and fails the one
 *	  request, because a longjmp through the client library would corrupt it.
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "batch.h"
#include "trust.h"
#include "lock.h"

#include <signal.h>

#include "lib/binaryheap.h"
#include "miscadmin.h"
#include "port.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"


static void send_list(ZkEntry *e);
static void send_create(ZkEntry *e);
static void send_delete(ZkEntry *e);
static void unwatch(ZkEntry *e);
static void holders_finish(ZkEntry *e);
static void lock_drive(ZkEntry *e);
static void hold_schedule(ZkEntry *e, TimestampTz due);

/* ---- helpers ---- */

/* The lock's parent node, under its family's directory (lock_names.c) */
static void
parent_path(ZkEntry *e, char *buf, size_t len)
{
	zk_lock_parent(e->name, e->family, buf, len);
}

/* The path of child (a contender's name) under e's lock parent */
static void
node_path(ZkEntry *e, const char *child, char *buf, size_t len)
{
	char		parent[ZKLOCK_PARENT_MAX + 1];

	parent_path(e, parent, sizeof(parent));
	snprintf(buf, len, "%s/%s", parent, child);
}

/* a definite failure: ZNOAUTH about the lock's parent is a refusal */
static void
fail_rc(ZkEntry *e, int rc)
{
	char		parent[ZKLOCK_PARENT_MAX + 1];

	parent_path(e, parent, sizeof(parent));
	zk_fail_rc(e, rc, parent, ERRCODE_CONNECTION_FAILURE, zerror(rc));
}

/* ---- watches on predecessors ---- */

/* A waiter's predecessor watch fired (watch_fired op): look again */
static void
pred_fired(ZkEntry *e)
{
	if (e->state == ZKE_WAITING)
		send_list(e);
}

/*
 * Take back the watch an abandoned waiter set, on the client and (when no
 * other entry of ours watches that node) on the server.
 */
static void
unwatch(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];

	node_path(e, e->watched, path, sizeof(path));
	zk_entry_unwatch(e, path, ZWATCHTYPE_DATA, zk_kind_watcher);
}

/* ---- completions ---- */

static ZkLogLimit lock_delete_log;

/* Completion of the zoo_adelete sent by send_delete() */
static void
delete_done(int rc, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->state == ZKE_DELETING && e->delete_inflight)
		{
			e->delete_inflight = false;
			if (!zk_rc_definite(rc))
				zk_retry_later(e);
			else
			{
				if (rc != ZOK && rc != ZNONODE)
				{
					zk_count(ZKCNT_ZK_ERRORS, 1);
					if (zk_log_limited(&lock_delete_log, "could not delete a lock node"))
						ereport(WARNING,
								(errmsg("zklock: could not delete the node %s of zookeeper lock \"%s\": %s",
										e->node, zk_log_name(e->name), zerror(rc))));
				}
				if (e->released)
					zk_count(ZKCNT_RELEASES, 1);
				zk_node_gone(e);
			}
		}
	}
	COMPLETION_END(e);
}

static void writer_checked(ZkEntry *e, int rc, const char *value, int value_len);

/* Completion of the zoo_awget sent by send_watched_get() */
static void
pred_get_done(int rc, const char *value, int value_len,
			  const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->watch == ZKEW_PENDING && ZKLK(e)->checking_writer)
			writer_checked(e, rc, value, value_len);
		else if (e != NULL && e->watch == ZKEW_PENDING)
		{
			bool		wanted = (e->state == ZKE_WAITING && !e->released);

			e->watch = ZKEW_NONE;
			if (rc == ZOK)
			{
				/* the watch is set; take it back at once if unwanted now */
				e->watch = ZKEW_SET;
				if (!wanted)
					unwatch(e);
			}
			else
			{
				char		path[ZK_PATH_MAX];

				/* no watch was set: it no longer counts */
				node_path(e, e->watched, path, sizeof(path));
				(void) zk_watch_drop(path);
			}

			if (rc == ZOK || !wanted)
				;				/* wait for the event, or the delete is on its way */
			else if (rc == ZNONODE)
			{
				/* already gone: no watch was left behind */
				e->watched[0] = '\0';
				send_list(e);
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);
			else
			{
				fail_rc(e, rc);
				send_delete(e);
			}
		}
	}
	COMPLETION_END(e);
}

/*
 * Upgrades and writers of other clients.  An upgrade (exclusive, asked by
 * a backend that holds the lock shared) is not blocked by a writer queued
 * behind its shared node: zklock's writers, like kazoo's WriteLock, wait
 * for every older node, shared ones included, so that writer waits for
 * the upgrader, and waiting for it in turn would never end.  But kazoo's
 * plain Lock waits only for older exclusive nodes: queued behind nothing
 * but shared nodes it HOLDS the lock, and granting the upgrade then would
 * make two exclusive holders.  The two write the same node names; the
 * data tells them apart (zklock's says which cluster holds it).  So before
 * an upgrade jumps such a writer, the worker reads it (with a watch, as it
 * would watch a predecessor): zklock's data lets the upgrade through (the
 * name is remembered in writer_ok); any other is waited for, as a
 * predecessor (a kazoo WriteLock there then waits for the upgrader and
 * the upgrade for it: it ends with the upgrade's timeout).
 */

/* The first writer behind base that nothing but shared nodes precede, or -1 */
static int
unverified_writer(ZkEntry *e, ZkContender *c, int n, int me)
{
	int			own = -1;
	int			i;

	for (i = 0; i < me; i++)
		if (strcmp(c[i].name, ZKLK(e)->base) == 0)
			own = i;
	if (own < 0)
		return -1;
	for (i = 0; i < me; i++)
	{
		if (zk_same_owner(&c[i], &c[me]) || c[i].shared)
			continue;
		/* the oldest exclusive node of another owner */
		if (i < own || strcmp(c[i].name, ZKLK(e)->writer_ok) == 0)
			return -1;
		return i;
	}
	return -1;
}

/*
 * Does a contender's data look like zklock's own node data (a JSON object
 * that begins with "cluster")?  Only the upgrade check asks (writer_checked).
 */
static bool
zklock_node_data(const char *value, int value_len)
{
	static const char prefix[] = "{\"cluster\":\"";

	return value != NULL && value_len >= (int) sizeof(prefix) - 1 &&
		memcmp(value, prefix, sizeof(prefix) - 1) == 0;
}

/* The read of a writer behind our base is back (pred_get_done) */
static void
writer_checked(ZkEntry *e, int rc, const char *value, int value_len)
{
	e->watch = ZKEW_NONE;
	ZKLK(e)->checking_writer = false;
	if (rc == ZOK)
		e->watch = ZKEW_SET;
	else
	{
		char		path[ZK_PATH_MAX];

		node_path(e, e->watched, path, sizeof(path));
		(void) zk_watch_drop(path);
		e->watched[0] = '\0';
	}
	if (e->released)
	{
		unwatch(e);
		return;
	}
	if (rc == ZOK && zklock_node_data(value, value_len))
	{
		/* zklock's: it waits for our shared node; look again */
		strlcpy(ZKLK(e)->writer_ok, e->watched, sizeof(ZKLK(e)->writer_ok));
		unwatch(e);
		send_list(e);
	}
	else if (rc == ZOK)
	{
		/* another client's writer, maybe holding: wait for it */
		if (e->try_only)
		{
			unwatch(e);
			zk_finish(e, ZKO_BUSY, 0, NULL);
			send_delete(e);
			return;
		}
		if (e->state != ZKE_WAITING)
		{
			e->state = ZKE_WAITING;
			zk_wake_owner(e);	/* its timeout now counts */
		}
	}
	else if (rc == ZNONODE || !zk_rc_definite(rc))
		send_list(e);			/* gone, or ask again */
	else
	{
		fail_rc(e, rc);
		send_delete(e);
	}
}

/*
 * Read node (a predecessor to wait for, or a writer to check) with a watch.
 * Counted from the moment the get is sent: a removal of the server's watch
 * by another waiter of ours must not overtake it.
 */
static void
send_watched_get(ZkEntry *e, const char *node, bool checking_writer)
{
	char		path[ZK_PATH_MAX];
	int			rc;

	strlcpy(e->watched, node, sizeof(e->watched));
	node_path(e, node, path, sizeof(path));
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	rc = zoo_awget(zk_zh, path, zk_kind_watcher, (void *) zk_ctx_of(e),
				   pred_get_done, zk_ctx_of(e));
	if (rc == ZOK)
	{
		zk_watch_set(path);
		e->watch = ZKEW_PENDING;
		ZKLK(e)->checking_writer = checking_writer;
	}
	else if (!zk_send_failed(e, rc, "get"))
		send_delete(e);
}

/* Read (and watch) a writer behind our base before an upgrade jumps it */
static void
check_writer(ZkEntry *e, const char *writer)
{
	send_watched_get(e, writer, true);
}

/* Wait for c[pred]: watch it with a get. */
static void
watch_predecessor(ZkEntry *e, const char *pred)
{
	if (e->state != ZKE_WAITING)
	{
		e->state = ZKE_WAITING;
		zk_wake_owner(e);		/* its timeout now counts */
		zk_dl_waiting(e);		/* and, after deadlock_timeout, a check */
	}
	send_watched_get(e, pred, false);
}

/*
 * The listing for czxid ordering after the sequence wrapped: the names,
 * then the czxids as the reads come back.
 */
typedef struct CzxidList
{
	int			n;
	int			outstanding;
	bool		failed;
	ZkContender *c;
	char	  **names;
} CzxidList;

/* Lists being resolved, by entry number (worker-private) */
static CzxidList **czxid_lists = NULL;

/* the lock's counters (lock.h) */
ZkLockShared *zk_lock_counts = NULL;

static void decide(ZkEntry *e, ZkContender *c, int n);

/* Free entry idx's czxid listing, if it has one */
static void
czxid_list_free(uint32 idx)
{
	CzxidList  *l;
	int			i;

	if (czxid_lists == NULL || (l = czxid_lists[idx]) == NULL)
		return;
	for (i = 0; i < l->n; i++)
		if (l->names[i])
			pfree(l->names[i]);
	pfree(l->names);
	pfree(l->c);
	pfree(l);
	czxid_lists[idx] = NULL;
}

typedef struct CzxidGet
{
	const void *ectx;
	int			slot;
} CzxidGet;

/* Completion of the zoo_aexists sent by order_by_czxid() */
static void
czxid_done(int rc, const struct Stat *stat, const void *ctx)
{
	CzxidGet   *g = (CzxidGet *) ctx;
	ENTRY_COMPLETION_BEGIN(e, g->ectx)
	{
		if (e != NULL && czxid_lists != NULL && czxid_lists[zk_entry_index(e)] != NULL)
		{
			CzxidList  *l = czxid_lists[zk_entry_index(e)];

			if (rc == ZOK && stat)
				l->c[g->slot].key = stat->czxid;
			else if (rc == ZNONODE)
				l->c[g->slot].key = PG_INT64_MAX;	/* gone: dropped below */
			else
				l->failed = true;
			if (--l->outstanding == 0)
			{
				int			i,
							k = 0;

				e->list_inflight = false;
				if (l->failed || e->released ||
					(e->state != ZKE_CREATING && e->state != ZKE_WAITING))
				{
					czxid_list_free(zk_entry_index(e));
					if (e->released)
						zk_recipe_drive(e);
					else
						zk_retry_later(e);
				}
				else
				{
					for (i = 0; i < l->n; i++)
						if (l->c[i].key != PG_INT64_MAX)
							l->c[k++] = l->c[i];
					zk_sort_contenders(l->c, k);
					decide(e, l->c, k);
					czxid_list_free(zk_entry_index(e));
				}
			}
		}
	}
	COMPLETION_END(e);
	free(g);
}

/*
 * The parent's sequence wrapped: read every contender's czxid, then
 * decide.  Rare; costs one read per contender.
 */
static void
order_by_czxid(ZkEntry *e, const struct String_vector *kids)
{
	uint32		idx = zk_entry_index(e);
	CzxidList  *l;
	int			i;

	if (czxid_lists == NULL)
		czxid_lists = MemoryContextAllocZero(TopMemoryContext,
											 sizeof(CzxidList *) * zk_ctl->max_entries);
	czxid_list_free(idx);
	l = MemoryContextAllocZero(TopMemoryContext, sizeof(CzxidList));
	l->c = MemoryContextAllocZero(TopMemoryContext, sizeof(ZkContender) * Max(kids->count, 1));
	l->names = MemoryContextAllocZero(TopMemoryContext, sizeof(char *) * Max(kids->count, 1));
	czxid_lists[idx] = l;
	/* decided when the reads are back; the state stays as it is */
	for (i = 0; i < kids->count; i++)
	{
		bool		shared;
		char		path[ZK_PATH_MAX];
		CzxidGet   *g;

		if (!zk_node_is_contender(kids->data[i], &shared))
			continue;
		l->names[l->n] = MemoryContextStrdup(TopMemoryContext, kids->data[i]);
		l->c[l->n].name = l->names[l->n];
		l->c[l->n].shared = shared;
		l->c[l->n].key = PG_INT64_MAX;
		g = malloc(sizeof(CzxidGet));
		if (g == NULL)
		{
			l->failed = true;
			break;
		}
		g->ectx = zk_ctx_of(e);
		g->slot = l->n;
		node_path(e, kids->data[i], path, sizeof(path));
		if (zoo_aexists(zk_zh, path, 0, czxid_done, g) != ZOK)
		{
			free(g);
			l->failed = true;
			break;
		}
		l->n++;
		l->outstanding++;
	}
	if (l->outstanding == 0)
	{
		czxid_list_free(idx);
		zk_retry_later(e);
	}
	else
		e->list_inflight = true;	/* the reads stand for the listing */
}

/* Copy a field of another client's node data, keeping only [A-Za-z0-9._-] */
static bool
rival_field(const char *value, int value_len, const char *key, char *out, size_t outlen)
{
	char	   *p;

	if (!zk_json_field(value, value_len, key, out, outlen))
		return false;
	for (p = out; *p; p++)
		if (!isalnum((unsigned char) *p) && *p != '.' && *p != '_' && *p != '-')
			*p = '?';
	return true;
}

/*
 * An upgrade that can never be granted: another backend holds the lock
 * shared and upgrades too, waiting for our shared node.  40P01, naming the
 * other backend when its node's data (value, NULL when not read) is
 * zklock's.
 */
static void
upgrade_deadlock(ZkEntry *e, const char *value, int value_len)
{
	char		msg[ZKLOCK_ERRMSG_MAX];
	char		pid[16];
	char		port[16];
	char		host[64];

	if (value != NULL && zklock_node_data(value, value_len) &&
		rival_field(value, value_len, "pid", pid, sizeof(pid)) &&
		rival_field(value, value_len, "port", port, sizeof(port)))
	{
		if (!rival_field(value, value_len, "host", host, sizeof(host)))
			strlcpy(host, "?", sizeof(host));
		snprintf(msg, sizeof(msg), "process %s on port %s of host %s%s (both upgrade it)",
				 pid, port, host, ZKLOCK_UPGRADE_DEADLOCK_TAIL);
	}
	else
		strlcpy(msg, ZKLOCK_UPGRADE_DEADLOCK, sizeof(msg));
	pg_atomic_fetch_add_u64(&zk_lock_counts->deadlocks, 1);
	zk_finish(e, ZKO_FAILED, ERRCODE_T_R_DEADLOCK_DETECTED, msg);
	send_delete(e);
}

/* Completion of the read of the other upgrader's node (decide) */
static void
rival_read(int rc, const char *value, int value_len, const struct Stat *stat,
		   const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->kind == ZKK_LOCK && ZKLK(e)->rival_reading)
		{
			ZKLK(e)->rival_reading = false;
			/* still undecided: let go of, failed or lost meanwhile is settled */
			if (!e->released && e->outcome == ZKO_NONE &&
				(e->state == ZKE_CREATING || e->state == ZKE_WAITING))
				upgrade_deadlock(e, rc == ZOK ? value : NULL, value_len);
		}
	}
	COMPLETION_END(e);
}

/* e holds the lock: answer its owner */
static void
grant(ZkEntry *e)
{
	/*
	 * An upgrade may have been granted ahead of writers queued behind our
	 * shared node, whose czxids are smaller than our new node's: it keeps
	 * the shared hold's token, so exclusive grants' tokens still increase.
	 */
	if (ZKLK(e)->base[0] && ZKLK(e)->base_token != 0)
		e->token = ZKLK(e)->base_token;
	zk_dl_wait_over(e);
	e->state = ZKE_HELD;
	e->list_inflight = false;
	if (e->family == ZKF_ELECTIONS && e->outcome == ZKO_NONE &&
		!OidIsValid(e->dbid))
	{
		/*
		 * a candidacy of the cluster's (election.c) now leads; a session's
		 * campaign (zk_campaign: a database's) is not the cluster's
		 */
		pg_atomic_fetch_add_u64(&zk_lock_counts->leaderships, 1);
		ereport(LOG, (errmsg("zklock: leading election \"%s\"", e->name)));
	}
	zk_finish(e, ZKO_GRANTED, 0, NULL);
	if (e->family == ZKF_LOCKS && ZKLK(e)->max_hold_ms > 0 &&
		!ZKLK(e)->hold_scheduled)
		hold_schedule(e, TimestampTzPlusMilliseconds(e->granted_at,
													 ZKLK(e)->max_hold_ms));
}

/* Decide from contenders in creation order whether we hold the lock. */
static void
decide(ZkEntry *e, ZkContender *c, int n)
{
	int			me = -1;
	int			r;
	int			i;

	e->list_inflight = false;
	for (i = 0; i < n; i++)
		if (strcmp(c[i].name, e->node) == 0)
			me = i;

	if (me < 0)
	{
		/* our node vanished under us (deleted by someone else) */
		zk_node_gone(e);
		if (e->state == ZKE_DONE)
			zk_fail(e, ERRCODE_CONNECTION_FAILURE,
				 "The lock node was deleted in ZooKeeper while waiting");
		return;
	}

	r = zk_lock_blocker(c, n, me, ZKLK(e)->base[0] ? ZKLK(e)->base : NULL, false);
	if (r == ZKLOCK_HELD && ZKLK(e)->base[0] && !c[me].shared)
	{
		int			w = unverified_writer(e, c, n, me);

		if (w >= 0)
		{
			check_writer(e, c[w].name);
			return;
		}
	}
	if (r == ZKLOCK_HELD)
	{
		grant(e);
		return;
	}
	/*
	 * A try never waits, so it cannot be part of a deadlock: an upgrade
	 * that could never be granted is just not available to it (false, as
	 * pg_try_advisory_xact_lock answers), not 40P01.  So this comes first.
	 */
	if (e->try_only)
	{
		zk_finish(e, ZKO_BUSY, 0, NULL);
		send_delete(e);
		return;
	}
	if (r == ZKLOCK_DEADLOCK)
	{
		int			rv = zk_lock_upgrade_rival(c, n, me, ZKLK(e)->base[0] ? ZKLK(e)->base : NULL);

		if (ZKLK(e)->rival_reading)
			return;				/* its read is out: rival_read decides */
		if (rv >= 0 && zk_session_usable())
		{
			char		path[ZK_PATH_MAX];

			/* name the other session in the detail: read its node first */
			node_path(e, c[rv].name, path, sizeof(path));
			if (zoo_aget(zk_zh, path, 0, rival_read, zk_ctx_of(e)) == ZOK)
			{
				ZKLK(e)->rival_reading = true;
				return;
			}
		}
		upgrade_deadlock(e, NULL, 0);
		return;
	}
	watch_predecessor(e, c[r].name);
}

/* A listing of <parent>: order the contenders, then decide. */
static void
evaluate(ZkEntry *e, const struct String_vector *kids)
{
	ZkContender *c;
	int			n = 0;
	int			i;
	bool		wrapped = false;

	c = palloc_extended(sizeof(ZkContender) * Max(kids->count, 1), MCXT_ALLOC_NO_OOM);
	if (c == NULL)
	{
		zk_retry_later(e);
		return;
	}
	for (i = 0; i < kids->count; i++)
	{
		bool		shared;
		int64		seq;

		if (!zk_node_is_contender(kids->data[i], &shared) ||
			!zk_node_seq(kids->data[i], &seq))
			continue;
		c[n].name = kids->data[i];
		c[n].shared = shared;
		c[n].key = seq;
		if (seq < 0)
			wrapped = true;
		n++;
	}
	zk_sort_contenders(c, n);
	for (i = 1; i < n && !wrapped; i++)
		if (c[i].key == c[i - 1].key)
			wrapped = true;
	if (wrapped)
	{
		pfree(c);
		order_by_czxid(e, kids);
		return;
	}
	decide(e, c, n);
	pfree(c);
}

/* Completion of the zoo_aexists sent by list_done() */
static void
exists_done(int rc, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && rc == ZOK && stat)
			e->token = stat->czxid;
	}
	COMPLETION_END(e);
}

/* Completion of the zoo_aget_children sent by send_create() and send_list() */
static void
list_done(int rc, const struct String_vector *kids, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->kind == ZKK_LOCK && e->list_inflight &&
			(e->state == ZKE_CREATING || e->state == ZKE_WAITING))
		{
			e->list_inflight = false;
			if (e->create_inflight)
			{
				/* the create's own completion failed first: it decides */
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);
			else if (rc != ZOK && rc != ZNONODE)
			{
				fail_rc(e, rc);
				if (e->in_doubt)
					zk_retry_later(e);		/* still must find and delete it */
				else if (e->node[0])
					send_delete(e);
				else
					zk_node_gone(e);
			}
			else if (e->in_doubt)
			{
				int			i;

				/* find the node our lost create may have made, by its guid */
				e->in_doubt = false;
				e->node[0] = '\0';
				for (i = 0; rc == ZOK && i < kids->count; i++)
				{
					if (strncmp(kids->data[i], e->guid, ZKLOCK_GUID_LEN) == 0)
					{
						strlcpy(e->node, kids->data[i], sizeof(e->node));
						break;
					}
				}
				if (e->node[0] == '\0')
				{
					/* the create never happened */
					if (e->released)
						zk_entry_free(e);
					else
						send_create(e);
				}
				else if (e->released)
					send_delete(e);
				else
				{
					/* adopt it: fetch its czxid, then list again */
					char		path[ZK_PATH_MAX];

					e->session = zk_cur_session;
					node_path(e, e->node, path, sizeof(path));
					(void) zoo_aexists(zk_zh, path, 0, exists_done, zk_ctx_of(e));
					send_list(e);
				}
			}
			else if (e->released)
			{
				/* let go while the listing was on its way: never granted */
				if (e->node[0])
					send_delete(e);
				else
					zk_node_gone(e);
			}
			else if (rc == ZNONODE)
			{
				zk_node_gone(e);
				if (e->state == ZKE_DONE)
					zk_fail(e, ERRCODE_CONNECTION_FAILURE,
						 "The lock's parent node was deleted in ZooKeeper while waiting");
			}
			else if (e->node[0] == '\0')
				zk_retry_later(e); /* no node yet: cannot happen, be safe */
			else
				evaluate(e, kids);
		}
	}
	COMPLETION_END(e);
}

/* Recreate <root>, <root>/locks and <parent>, then the contender again. */
static void
send_parents_and_create(ZkEntry *e)
{
	char		path[ZKLOCK_PARENT_MAX + 1];
	char	   *p;

	parent_path(e, path, sizeof(path));
	for (p = path + 1; *p; p++)
	{
		if (*p == '/')
		{
			*p = '\0';
			zk_create_parent(path, ZOO_PERSISTENT);
			*p = '/';
		}
	}

	/*
	 * ZNODEEXISTS is the common case; a real failure shows up in the
	 * create (a refusal is remembered for it: zk_parent_refused)
	 */
	zk_create_parent(path, ZOO_CONTAINER);
	send_create(e);
}

/* Completion of the zoo_acreate2 sent by send_create() */
static void
create_done(int rc, const char *name, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->state == ZKE_CREATING && e->create_inflight)
		{
			e->create_inflight = false;
			if (rc == ZOK)
			{
				const char *slash = strrchr(name, '/');

				strlcpy(e->node, slash ? slash + 1 : name, sizeof(e->node));
				e->token = stat ? stat->czxid : 0;
				e->in_doubt = false;
				e->session = zk_cur_session;
				if (e->released)
					send_delete(e);
				else if (!e->list_inflight)
					send_list(e);	/* the pipelined listing was not sent */
				/* else the listing sent right behind decides */
			}
			else if (rc == ZNONODE && !e->parents_tried)
			{
				e->parents_tried = true;
				e->list_inflight = false;
				if (e->released)
					zk_entry_free(e);
				else
					send_parents_and_create(e);
			}
			else if (!zk_rc_definite(rc))
			{
				/*
				 * The create may have happened: find it by its guid.  The
				 * parents sent before it may not have: if it must be made
				 * again and finds no parent, they are sent again too.
				 */
				e->in_doubt = true;
				e->list_inflight = false;
				e->parents_tried = false;
				zk_retry_later(e);
			}
			else
			{
				char		msg[ZKLOCK_ERRMSG_MAX];
				char		parent[ZKLOCK_PARENT_MAX + 1];

				snprintf(msg, sizeof(msg), "Could not create the lock node for \"%s\": %s",
						 zk_name_part(e->name), zerror(rc));
				parent_path(e, parent, sizeof(parent));
				e->list_inflight = false;
				zk_fail_rc(e, rc, parent, ERRCODE_CONNECTION_FAILURE, msg);
				zk_node_gone(e);
			}
		}
	}
	COMPLETION_END(e);
}

/* ---- requests ---- */

/*
 * List the lock's parent (list_done decides).  Retried once the session is
 * usable; a listing the client refuses for good fails the request and
 * deletes the node, if any.
 */
static void
send_list(ZkEntry *e)
{
	char		parent[ZKLOCK_PARENT_MAX + 1];
	int			rc;

	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	parent_path(e, parent, sizeof(parent));
	rc = zk_batch_get_children(parent, list_done, zk_ctx_of(e));
	if (rc == ZOK)
		e->list_inflight = true;
	else if (!zk_send_failed(e, rc, "list") && e->node[0])
		send_delete(e);
}

/*
 * Delete e's node, nobody waiting (DELETING; delete_done frees or settles
 * the entry).  Takes its watch off first; with no node known the entry is
 * settled at once (zk_node_gone).
 */
static void
send_delete(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];

	unwatch(e);
	zk_dl_node_going(e);		/* its backend's wait record goes first */
	e->state = ZKE_DELETING;
	e->list_inflight = false;
	if (e->node[0] == '\0')
	{
		zk_node_gone(e);
		return;
	}
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	node_path(e, e->node, path, sizeof(path));
	zk_batch_delete(path, -1, delete_done, zk_ctx_of(e));
	e->delete_inflight = true;
}

/*
 * Create e's ephemeral sequential node (a fresh guid, __lock__ or
 * __rlock__) and pipeline the listing behind it.  Back to PENDING and the
 * retry list if the session is not usable.
 */
static void
send_create(ZkEntry *e)
{
	char		parent[ZKLOCK_PARENT_MAX + 1];
	char		path[ZK_PATH_MAX];

	parent_path(e, parent, sizeof(parent));
	zk_make_guid(e, true);
	snprintf(path, sizeof(path), "%s/%s%s", parent, e->guid,
			 e->mode == ZKM_SHARED ? "__rlock__" : "__lock__");
	e->state = ZKE_CREATING;
	e->node[0] = '\0';
	e->in_doubt = false;
	e->list_inflight = false;

	if (!zk_session_usable())
	{
		e->state = ZKE_PENDING;
		zk_retry_later(e);
		return;
	}
	/* its parent's ACL, once per session (aclcheck.c): never waited for */
	zk_acl_check_node(parent);
	/* gathered with other backends' writes (batch.c) */
	zk_batch_create(path, e->data, (int) strlen(e->data),
					ZOO_EPHEMERAL_SEQUENTIAL, create_done, zk_ctx_of(e));
	e->create_inflight = true;
	/* pipelined: the listing already shows the new node */
	if (zk_batch_get_children(parent, list_done, zk_ctx_of(e)) == ZOK)
		e->list_inflight = true;
	/* else create_done sends it */
}


/* ---- reading every contender of a lock (zk_lock_holders) ---- */

/*
 * Bounded fan-out (issue 35; src/README, section 6, "Windows").  A read of
 * the contenders (zk_lock_holders, zk_election_candidates,
 * zk_semaphore_holders) first reads the lock node's stat and fails with
 * 54000 if it has more than zklock.max_children children (the lease
 * listing, <root>/leases, holds every namespace's leases: it is bounded in
 * bytes there, and in the caller's own leases once listed, zk_own_children);
 * then it lists them and reads them ZK_READ_WINDOW at a time (at most
 * ZK_READ_INFLIGHT_BYTES of them, zk_read_window), and stops
 * once the backend's segment is full: "needed" then says about how much
 * the whole answer needs (what was read, scaled to every contender), and
 * the backend asks again with a bigger segment, up to
 * zklock.max_answer_bytes (zk_query_holders).  A read's names live in a
 * memory context of its own, deleted when it finishes.
 */
typedef struct HoldersRead
{
	dsm_segment *seg;			/* the backend's segment, attached */
	MemoryContext cxt;			/* the names; NULL before the listing */
	char	  **names;			/* the contenders listed */
	bool	   *shared;
	int			n;
	int			next;			/* the next to read */
	int			read;			/* answers in */
	bool		full;			/* the segment is full: no more reads */
	Size		largest;		/* the largest data read so far */
	bool		over;			/* 54000: msg says why */
	char		msg[ZKLOCK_ERRMSG_MAX];
} HoldersRead;

/* Reads in progress, by entry number (worker-private) */
static HoldersRead *holder_reads = NULL;

typedef struct HolderGet
{
	const void *ectx;			/* the entry, as zk_ctx_of() gives it */
	bool		shared;
	char		name[FLEXIBLE_ARRAY_MEMBER];
} HolderGet;

static void holders_send_more(ZkEntry *e);

/*
 * Every contender of a zk_lock_holders read is answered (or the read
 * failed): detach the backend's segment, answer the owner, and free the
 * entry if it was let go meanwhile, else DONE.
 */
static void
holders_finish(ZkEntry *e)
{
	HoldersRead *rd = holder_reads ? &holder_reads[zk_entry_index(e)] : NULL;
	bool		over = false;
	char		msg[ZKLOCK_ERRMSG_MAX];

	if (rd != NULL)
	{
		if (rd->seg != NULL)
		{
			ZkHoldersBuf *buf = dsm_segment_address(rd->seg);

			/* stopped early: about what the whole answer needs */
			if (rd->full && rd->read > 0 && rd->n > rd->read)
				buf->needed = Max(buf->needed,
								  (Size) ((double) buf->needed * rd->n / rd->read));
			dsm_detach(rd->seg);
		}
		if (rd->cxt != NULL)
			MemoryContextDelete(rd->cxt);
		over = rd->over;
		strlcpy(msg, rd->msg, sizeof(msg));
		memset(rd, 0, sizeof(HoldersRead));
	}
	if (over)
		zk_fail(e, ERRCODE_PROGRAM_LIMIT_EXCEEDED, msg);
	else if (ZKLK(e)->query_failed)
		zk_fail(e, ERRCODE_CONNECTION_FAILURE,
			 "Could not read the lock's contenders from ZooKeeper");
	else
		zk_finish(e, ZKO_GRANTED, 0, NULL);
	if (e->released)
		zk_entry_free(e);
	else
		e->state = ZKE_DONE;
}

/* The read in progress of e, if it is still to be answered */
static HoldersRead *
holders_read_of(ZkEntry *e)
{
	if (e == NULL || e->state != ZKE_CREATING || e->kind != ZKK_HOLDERS ||
		holder_reads == NULL || holder_reads[zk_entry_index(e)].seg == NULL)
		return NULL;
	return &holder_reads[zk_entry_index(e)];
}

/* e's read fails: answered so (holders_finish) */
static void
holders_fail(ZkEntry *e)
{
	ZKLK(e)->query_failed = true;
	holders_finish(e);
}

/*
 * The read in progress of e that a listing or count answered with rc goes
 * on with; NULL when there is none, or when rc ended it: ZNONODE (nobody
 * holds or awaits the lock) answers it as it stands, another error fails it
 */
static HoldersRead *
holders_answered(ZkEntry *e, int rc)
{
	HoldersRead *rd = holders_read_of(e);

	if (rd == NULL)
		return NULL;
	if (rc == ZNONODE)
		holders_finish(e);		/* nobody holds or awaits it */
	else if (rc != ZOK)
		holders_fail(e);
	else
		return rd;
	return NULL;
}

/* Completion of the zoo_aget sent by holders_send_more() */
static void
holder_get_done(int rc, const char *value, int value_len,
				const struct Stat *stat, const void *ctx)
{
	HolderGet  *g = (HolderGet *) ctx;
	ENTRY_COMPLETION_BEGIN(e, g->ectx)
	{
		HoldersRead *rd;

		rd = holders_read_of(e);
		if (rd != NULL)
		{
			rd->read++;
			if (rc == ZOK && value_len > 0)
				rd->largest = Max(rd->largest, (Size) value_len);
			e->answered_at = GetCurrentTimestamp();
			if (rc == ZOK)
			{
				ZkHoldersBuf *buf = dsm_segment_address(rd->seg);
				int			namelen = Min((int) strlen(g->name), ZKLOCK_ENAME_MAX);
				int			datalen = Min(Max(value_len, 0), ZKLOCK_HOLDER_DATA_MAX);
				Size		need = MAXALIGN(sizeof(ZkHolderRec) + namelen + datalen);

				buf->needed += need;
				if (MAXALIGN(sizeof(ZkHoldersBuf)) + buf->used + need <= buf->size)
				{
					char	   *p = (char *) buf + MAXALIGN(sizeof(ZkHoldersBuf)) + buf->used;
					ZkHolderRec *rec = (ZkHolderRec *) p;

					rec->czxid = stat ? stat->czxid : 0;
					rec->shared = g->shared;
					rec->namelen = namelen;
					rec->datalen = datalen;
					memcpy(p + sizeof(ZkHolderRec), g->name, namelen);
					if (datalen > 0)
						memcpy(p + sizeof(ZkHolderRec) + namelen, value, datalen);
					buf->used += need;
					buf->count++;
				}
				else
					rd->full = true;	/* the backend asks again, bigger */
			}
			else if (rc != ZNONODE)
				ZKLK(e)->query_failed = true; /* ZNONODE: released meanwhile, skip */
			e->outstanding--;
			holders_send_more(e);
			if (e->outstanding <= 0)
				holders_finish(e);
		}
	}
	COMPLETION_END(e);
	free(g);
}

/*
 * Send the next reads of e's contenders until ZK_READ_WINDOW are out; none
 * once the segment is full, a read failed, the owner let go or the
 * session is not usable.
 */
static void
holders_send_more(ZkEntry *e)
{
	HoldersRead *rd = holders_read_of(e);

	if (rd == NULL || rd->full || ZKLK(e)->query_failed || e->released)
		return;
	if (!zk_session_usable())
	{
		ZKLK(e)->query_failed = true;
		return;
	}
	while (rd->next < rd->n &&
		   e->outstanding < zk_read_window(rd->read > 0, rd->largest))
	{
		HolderGet  *g;
		const char *name = rd->names[rd->next];
		char		path[ZK_PATH_MAX];

		g = malloc(offsetof(HolderGet, name) + strlen(name) + 1);
		if (g == NULL)
		{
			ZKLK(e)->query_failed = true;
			break;
		}
		g->ectx = zk_ctx_of(e);
		g->shared = rd->shared[rd->next];
		strcpy(g->name, name);
		node_path(e, name, path, sizeof(path));
		if (e->family == ZKF_LEASEDIR)
			strlcat(path, "/lease_holder", sizeof(path));	/* kazoo's lease node */
		if (zoo_aget(zk_zh, path, 0, holder_get_done, g) != ZOK)
		{
			free(g);
			ZKLK(e)->query_failed = true;
			break;
		}
		rd->next++;
		e->outstanding++;
	}
}

/* Completion of the zoo_aget_children sent by holders_counted() */
static void
holders_list_done(int rc, const struct String_vector *kids, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		HoldersRead *rd;

		rd = holders_answered(e, rc);
		if (rd == NULL)
			;
		else if (e->family == ZKF_LEASEDIR)
		{
			/* every namespace's leases: the caller's own are read (zk_leases) */
			rd->cxt = AllocSetContextCreate(TopMemoryContext, "zklock holders read",
											ALLOCSET_DEFAULT_SIZES);
			rd->names = zk_own_children(kids, e->name, (Size) e->answer_cap, "leases",
										rd->cxt, &rd->n, rd->msg, sizeof(rd->msg));
			if (rd->n < 0)
			{
				rd->n = 0;
				rd->over = true;
				holders_finish(e);
			}
			else
			{
				rd->shared = MemoryContextAllocZero(rd->cxt, sizeof(bool) * Max(rd->n, 1));
				e->outstanding = 0;
				holders_send_more(e);
				if (e->outstanding == 0)
					holders_finish(e);
			}
		}
		else if (kids->count > zk_max_children)
		{
			struct Stat st;

			/* it grew past the bound since its stat was read */
			memset(&st, 0, sizeof(st));
			st.numChildren = kids->count;
			rd->over = zk_children_over(&st, "Its contenders", rd->msg, sizeof(rd->msg));
			holders_finish(e);
		}
		else
		{
			int			i;

			rd->cxt = AllocSetContextCreate(TopMemoryContext, "zklock holders read",
											ALLOCSET_DEFAULT_SIZES);
			rd->names = MemoryContextAlloc(rd->cxt, sizeof(char *) * Max(kids->count, 1));
			rd->shared = MemoryContextAlloc(rd->cxt, sizeof(bool) * Max(kids->count, 1));
			for (i = 0; i < kids->count; i++)
			{
				bool		shared = false;

				if (e->family != ZKF_SEMPOOL &&		/* a pool's children are all leases */
					e->family != ZKF_LEASEDIR &&	/* and these are all lease names */
					!zk_node_is_contender(kids->data[i], &shared))
					continue;
				rd->shared[rd->n] = shared;
				rd->names[rd->n++] = MemoryContextStrdup(rd->cxt, kids->data[i]);
			}
			e->outstanding = 0;
			holders_send_more(e);
			if (e->outstanding == 0)
				holders_finish(e);
		}
	}
	COMPLETION_END(e);
}

/* Completion of the exists sent by holders_drive(): the node's child count */
static void
holders_counted(int rc, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		HoldersRead *rd;
		char		parent[ZKLOCK_PARENT_MAX + 1];

		rd = holders_answered(e, rc);
		if (rd == NULL)
			;
		else if (e->family == ZKF_LEASEDIR ?
				 zk_listing_over(stat, (Size) e->answer_cap, "leases", rd->msg, sizeof(rd->msg)) :
				 zk_children_over(stat, "Its contenders", rd->msg, sizeof(rd->msg)))
		{
			/* the leases of every namespace: only their bytes (zk_own_children) */
			rd->over = true;
			holders_finish(e);
		}
		else
		{
			/* sent after the exists, so after the writes it came behind */
			parent_path(e, parent, sizeof(parent));
			if (!zk_session_usable() ||
				zoo_aget_children(zk_zh, parent, 0, holders_list_done, zk_ctx_of(e)) != ZOK)
				holders_fail(e);
		}
	}
	COMPLETION_END(e);
}

/*
 * Drive a zk_lock_holders read: attach the segment the backend made, count
 * the lock's children, list them and read the contenders into it
 * (holders_counted, holders_list_done); once DONE and let go, free it.
 */
static void
holders_drive(ZkEntry *e)
{
	uint32		idx = zk_entry_index(e);
	char		parent[ZKLOCK_PARENT_MAX + 1];

	switch ((ZkEntryState) e->state)
	{
		case ZKE_PENDING:
			if (e->released)
			{
				zk_entry_free(e);
				break;
			}
			if (!zk_session_usable())
			{
				zk_retry_later(e);
				break;
			}
			if (holder_reads == NULL)
				holder_reads = MemoryContextAllocZero(TopMemoryContext,
													  sizeof(HoldersRead) * zk_ctl->max_entries);
			/* not a completion: an error here is caught by the caller */
			holder_reads[idx].seg = dsm_attach(e->dsm);
			e->state = ZKE_CREATING;
			if (holder_reads[idx].seg == NULL)
			{
				/* the backend is gone already */
				holders_fail(e);
				break;
			}
			parent_path(e, parent, sizeof(parent));
			/* behind the writes asked for before it (batch.c) */
			if (zk_batch_wexists(parent, NULL, NULL, holders_counted, zk_ctx_of(e)) != ZOK)
				holders_fail(e);
			break;
		case ZKE_DONE:
			if (e->released)
				zk_entry_free(e);
			break;
		default:
			break;				/* in flight: holders_finish settles it */
	}
}

/* ---- handing a released lock to the next local waiter ---- */

/*
 * A local handoff (issue 40).  Every client's release is a delete, and the
 * next waiter learns of it from its watch and lists the contenders again
 * before it is granted: a round trip to ZooKeeper (a durable write, then a
 * read) between one holder and the next.  When the holder and the next
 * waiter are both this cluster's, the worker knows all that listing would
 * tell, so it grants the waiter as the release is sent:
 *
 * - p held the lock exclusively and was no upgrade (decide(): no contender
 *   older than it but its own backend's), and its backend keeps no other
 *   node of the lock that it has not let go, so once p is let go nobody
 *   holds any node older than p;
 * - w waits for p itself (its watch is set on p, no listing is out): p is
 *   the youngest contender older than w that blocks it, and no node can be
 *   created older than w now; so once p is let go w blocks on nothing
 *   anyone holds -- what its next listing would say;
 * - both in the session in use.
 *
 * p's node stays in ZooKeeper until the delete lands, so every other client
 * still waits: the order across clusters is ZooKeeper's, as before, and w's
 * fencing token (its czxid) is larger than p's.  If the session ends before
 * the delete lands, w's node goes with it and w is lost like any holder.
 * Readers waiting for p are all granted; an upgrade never hands off or is
 * handed to.  w's watch on p fires when the delete lands and is ignored.
 */
static bool
handoff_from(ZkEntry *p)
{
	char		path[ZK_PATH_MAX];
	int			i;

	if (p->family != ZKF_LOCKS || p->mode == ZKM_SHARED ||
		ZKLK(p)->base[0] != '\0' || p->node[0] == '\0' ||
		p->session != zk_cur_session || !zk_session_usable())
		return false;
	/* nobody here waits for it: no need to look through the entries */
	node_path(p, p->node, path, sizeof(path));
	if (zk_watch_refs(path) == 0)
		return false;
	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *o = zk_entry(i);

		if (o != p && o->kind == ZKK_LOCK && o->state != ZKE_FREE &&
			!o->released && o->pid == p->pid && o->family == p->family &&
			strcmp(o->name, p->name) == 0)
			return false;
	}
	return true;
}

/* p was let go and its delete sent (handoff_from said yes): grant its waiters */
static void
hand_off(ZkEntry *p)
{
	char		ppath[ZK_PATH_MAX];
	int			left;
	int			i;

	node_path(p, p->node, ppath, sizeof(ppath));
	left = zk_watch_refs(ppath);	/* the most there can be */
	for (i = 0; i < zk_ctl->max_entries && left > 0; i++)
	{
		ZkEntry    *w = zk_entry(i);

		if (w == p || w->kind != ZKK_LOCK || w->state != ZKE_WAITING ||
			w->released || w->family != p->family ||
			w->session != p->session || w->watch != ZKEW_SET ||
			w->list_inflight || ZKLK(w)->base[0] != '\0' ||
			ZKLK(w)->checking_writer || ZKLK(w)->rival_reading ||
			strcmp(w->watched, p->node) != 0 || strcmp(w->name, p->name) != 0)
			continue;
		/*
		 * its watch (on ppath: same family, name and node) fires when the
		 * delete lands: no longer counted
		 */
		left = zk_watch_drop(ppath);
		w->watch = ZKEW_NONE;
		w->watched[0] = '\0';
		grant(w);
	}
}

/*
 * Drive a lock entry one step: a new request, its owner let go of it, or
 * it was waiting on the retry list for a usable session.
 */
static void
lock_drive(ZkEntry *e)
{
	switch ((ZkEntryState) e->state)
	{
		case ZKE_FREE:
			break;
		case ZKE_PENDING:
			if (e->released)
				zk_entry_free(e);
			else
			{
				if (e->requested_at == 0)
					e->requested_at = GetCurrentTimestamp();
				send_create(e);
			}
			break;
		case ZKE_CREATING:
			if (e->create_inflight || e->list_inflight)
				break;			/* a completion decides */
			if (e->released && e->node[0])
				send_delete(e);
			else if (e->in_doubt || e->node[0])
				send_list(e);
			else if (e->released)
				zk_entry_free(e);
			else
				send_create(e);
			break;
		case ZKE_WAITING:
			if (e->released)
				send_delete(e);
			else if (!e->list_inflight && e->watch == ZKEW_NONE)
			{
				if (e->watched[0])
					watch_predecessor(e, e->watched);
				else
					send_list(e);
			}
			break;
		case ZKE_HELD:
			if (e->released)
			{
				bool		hand = handoff_from(e);

				send_delete(e);
				if (hand)
					hand_off(e);
			}
			break;
		case ZKE_DELETING:
			if (!e->delete_inflight)
				send_delete(e);
			break;
		case ZKE_DONE:
			if (e->released)
				zk_entry_free(e);
			break;
	}
}

static ZkLogLimit lock_giveup_log;

/*
 * An error was caught while driving the entry or inside one of its
 * completions: look at it again from scratch (a create whose fate is
 * unknown is in doubt), and give up after the same failure three times.
 */
static void
lock_drive_failed(ZkEntry *e)
{
	if (e->state == ZKE_CREATING && e->node[0] == '\0')
		e->in_doubt = true;
	e->create_inflight = false;
	e->list_inflight = false;
	e->delete_inflight = false;
	if (++e->errors < 3)
	{
		zk_retry_later(e);
		return;
	}
	if (zk_log_limited(&lock_giveup_log, "giving up on a lock request after repeated errors"))
		ereport(WARNING,
				(errmsg("zklock: giving up on a request for zookeeper lock \"%s\" after repeated errors",
						zk_log_name(e->name)),
				 errdetail("Its node, if any, goes when the session ends.")));
	zk_fail(e, ERRCODE_INTERNAL_ERROR, "The zklock worker failed on this request repeatedly");
	if (e->kind == ZKK_LOCK)
		zk_dl_node_going(e);	/* its node is abandoned: no wait record names it */
	if (e->released)
		zk_entry_free(e);
	else
		e->state = ZKE_DONE;
}

/*
 * A drive or completion threw: the read fails unless answered, and is freed
 * if it was let go.
 */
static void
holders_drive_failed(ZkEntry *e)
{
	ZKLK(e)->query_failed = true;
	if (e->state == ZKE_PENDING || e->state == ZKE_CREATING)
	{
		e->state = ZKE_CREATING;
		e->outstanding = 0;
		holders_finish(e);
	}
	else if (e->released)
		zk_entry_free(e);
}

/* Forget the per-session reads of czxids */
static void
lock_session_reset(void)
{
	int			i;

	zk_dl_session_reset();
	zk_revoke_session_reset();
	if (czxid_lists == NULL)
		return;
	for (i = 0; i < zk_ctl->max_entries; i++)
		czxid_list_free(i);
}

/*
 * The session ended: its ephemeral nodes are gone.  A lock held is lost, a
 * wait fails, a released entry is freed; a request never sent stays for
 * the next session.
 */
static void
lock_session_lost(ZkEntry *e, const char *why)
{
	char		msg[ZKLOCK_ERRMSG_MAX];

	e->create_inflight = false;
	e->list_inflight = false;
	e->delete_inflight = false;
	e->in_doubt = false;
	e->watch = ZKEW_NONE;
	ZKLK(e)->checking_writer = false;
	e->watched[0] = '\0';
	switch ((ZkEntryState) e->state)
	{
		case ZKE_FREE:
			break;
		case ZKE_PENDING:
			if (e->released)
				zk_entry_free(e);
			else
				zk_retry_later(e);
			break;
		case ZKE_HELD:
			if (!e->released)
			{
				zk_count(ZKCNT_LOST, 1);
				snprintf(msg, sizeof(msg), "%s while the lock was held", why);
				zk_finish(e, ZKO_LOST, ERRCODE_T_R_SERIALIZATION_FAILURE, msg);
			}
			zk_node_gone(e);
			break;
		case ZKE_CREATING:
		case ZKE_WAITING:
			if (!e->released)
			{
				snprintf(msg, sizeof(msg), "%s while waiting for the lock", why);
				zk_fail(e, ERRCODE_CONNECTION_FAILURE, msg);
			}
			zk_node_gone(e);
			break;
		case ZKE_DELETING:
		case ZKE_DONE:
			zk_node_gone(e);
			break;
	}
}

/*
 * The session ended: a read not yet sent waits for the next session, one
 * in flight fails (its late answers find the segment detached).
 */
static void
holders_session_lost(ZkEntry *e, const char *why)
{
	if (e->state == ZKE_PENDING)
	{
		if (e->released)
			zk_entry_free(e);
		else
			zk_retry_later(e);
	}
	else if (e->state == ZKE_CREATING)
	{
		e->outstanding = 0;
		holders_fail(e);
	}
}

/* the recipe's hooks, and its kinds (recipelist.h) */
const ZkRecipe zk_lock_recipe = {
	.session_reset = lock_session_reset,
};

/*
 * A wait found in a cycle of waits across servers, this waiter its victim
 * (lock_deadlock.c): refused with 40P01, and its node goes
 */
static void
deadlock_verdict(ZkEntry *e, const char *detail)
{
	pg_atomic_fetch_add_u64(&zk_lock_counts->deadlocks, 1);
	zk_finish(e, ZKO_FAILED, ERRCODE_T_R_DEADLOCK_DETECTED, detail);
	send_delete(e);
}

/*
 * ---- Holds past their maximum ----
 *
 * A lock granted with a maximum hold (max_hold, zklock.max_hold) is on a
 * heap by the time it ends.  When that comes, the worker takes it back the
 * way a lost session does: the hold is marked lost (the holder's next zklock
 * call and its COMMIT fail with 40001), the holder's statement is cancelled,
 * and the node goes, so the next waiter is granted with a larger token.  A
 * holder that has passed its check before COMMIT (committing) is left to
 * finish: ending its lock then would let the next holder in while it still
 * commits; it is looked at again shortly.  The heap keeps a slot per grant
 * until it comes up; slots of locks let go of early are dropped when the
 * heap fills, by building it again from the entries.
 */
typedef struct HoldDue
{
	uint32		idx;
	uint32		gen;
	TimestampTz due;
} HoldDue;

static binaryheap *hold_heap = NULL;

#define HOLD_ENDS_PER_TURN	16	/* holds ended per turn of the worker */
#define HOLD_RECHECK_MS		100 /* a committing holder, looked at again */

/* the heap's order: the earliest due first (binaryheap keeps the largest) */
static int
hold_due_cmp(Datum a, Datum b, void *arg)
{
	HoldDue    *x = (HoldDue *) DatumGetPointer(a);
	HoldDue    *y = (HoldDue *) DatumGetPointer(b);

	if (x->due != y->due)
		return x->due > y->due ? -1 : 1;
	return 0;
}

/* Put a slot for e on the heap (there is room: see hold_schedule) */
static void
hold_push(ZkEntry *e)
{
	HoldDue    *d = MemoryContextAlloc(TopMemoryContext, sizeof(HoldDue));

	d->idx = zk_entry_index(e);
	d->gen = e->gen;
	d->due = ZKLK(e)->hold_due;
	binaryheap_add(hold_heap, PointerGetDatum(d));
}

/*
 * The heap is full of slots: build it again from the entries whose holds
 * are scheduled (at most one each), dropping the slots of locks let go of.
 */
static void
hold_heap_rebuild(void)
{
	int			i;

	while (!binaryheap_empty(hold_heap))
		pfree(DatumGetPointer(binaryheap_remove_first(hold_heap)));
	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->kind == ZKK_LOCK && e->state != ZKE_FREE && ZKLK(e)->hold_scheduled)
			hold_push(e);
	}
}

/* e's hold ends at due */
static void
hold_schedule(ZkEntry *e, TimestampTz due)
{
	if (hold_heap == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		hold_heap = binaryheap_allocate(2 * zk_ctl->max_entries + 16, hold_due_cmp, NULL);
		MemoryContextSwitchTo(old);
	}
	ZKLK(e)->hold_scheduled = true;
	ZKLK(e)->hold_due = due;
	if (hold_heap->bh_size >= hold_heap->bh_space)
		hold_heap_rebuild();	/* leaves at most max_entries slots, e's too */
	else
		hold_push(e);
	zk_worker_wake_by(due);
}

/* Is e held, granted and not being let go of? */
static bool
hold_live(ZkEntry *e)
{
	return e->kind == ZKK_LOCK && e->state == ZKE_HELD && !e->released &&
		e->outcome == ZKO_GRANTED && pg_atomic_read_u32(&e->release_req) == 0;
}

/*
 * Is o another hold of e's backend on e's lock?  An upgrade holds two nodes
 * of one lock, the shared one it began with (pinned) and the exclusive one:
 * writers queued behind the shared node stay out only while it exists, so
 * the two are taken back together, never one alone.
 */
static bool
hold_sibling(ZkEntry *e, ZkEntry *o)
{
	return o != e && hold_live(o) && o->pid == e->pid &&
		o->family == e->family && strcmp(o->name, e->name) == 0;
}

/*
 * Is e's backend committing (a hold of it passed the check before COMMIT)?
 * Then none of its holds is taken back, and it is not signalled: a cancel
 * would end a COMMIT's wait for a synchronous standby, and a lock of the
 * transaction would go while it commits.
 */
static bool
hold_owner_committing(ZkEntry *e)
{
	int			i;

	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *o = zk_entry(i);

		if (o->kind == ZKK_LOCK && o->pid == e->pid && o->state != ZKE_FREE &&
			ZKLK(o)->committing)
			return true;
	}
	return false;
}

/* Take one hold back: lost for its owner, its node deleted */
static void
hold_take_back(ZkEntry *e, const char *msg)
{
	ZKLK(e)->hold_scheduled = false;
	zk_count(ZKCNT_LOST, 1);
	zk_finish(e, ZKO_LOST, ERRCODE_T_R_SERIALIZATION_FAILURE, msg);
	send_delete(e);
}

/*
 * Take e's hold back, with the other node of an upgrade: lost for its
 * owner (msg says why, logged says so in the server log), its node
 * deleted, its owner's statement cancelled
 */
static void
hold_end(ZkEntry *e, const char *msg, const char *logged)
{
	int			i;

	ereport(LOG,
			(errmsg("zklock: took back zookeeper lock \"%s\" from process %d, %s",
					zk_log_name(e->name), e->pid, logged)));
	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *o = zk_entry(i);

		if (hold_sibling(e, o))
			hold_take_back(o, msg);
	}
	hold_take_back(e, msg);
	/* cancel what the holder is doing, as pg_cancel_backend would */
	if (e->pid > 0)
		(void) kill(e->pid, SIGINT);
}

/*
 * e's hold is due to end: take it back, with the other node of an upgrade,
 * unless it is going anyway or its backend is committing (then look again
 * shortly).  True when it was taken back.
 */
static bool
hold_over(ZkEntry *e, TimestampTz now)
{
	char		msg[ZKLOCK_ERRMSG_MAX];
	char		logged[128];

	if (!hold_live(e))
		return false;
	if (hold_owner_committing(e))
	{
		hold_schedule(e, TimestampTzPlusMilliseconds(now, HOLD_RECHECK_MS));
		return false;
	}
	snprintf(msg, sizeof(msg),
			 "It was held longer than its maximum of " INT64_FORMAT " ms (max_hold, zklock.max_hold), and the zklock worker took it back",
			 ZKLK(e)->max_hold_ms);
	snprintf(logged, sizeof(logged), "held longer than its maximum of " INT64_FORMAT " ms",
			 ZKLK(e)->max_hold_ms);
	hold_end(e, msg, logged);
	return true;
}

/* Every turn: the holds due to end, a few at a time */
static void
hold_turn(void)
{
	TimestampTz now;
	int			ended = 0;

	if (hold_heap == NULL || binaryheap_empty(hold_heap))
		return;
	now = GetCurrentTimestamp();
	while (!binaryheap_empty(hold_heap))
	{
		HoldDue    *d = (HoldDue *) DatumGetPointer(binaryheap_first(hold_heap));
		ZkEntry    *e;

		if (d->due > now)
		{
			zk_worker_wake_by(d->due);
			break;
		}
		if (ended >= HOLD_ENDS_PER_TURN)
		{
			zk_worker_wake_by(TimestampTzPlusMilliseconds(now, 10));
			break;
		}
		(void) binaryheap_remove_first(hold_heap);
		e = zk_entry(d->idx);
		if (e->gen == d->gen && e->kind == ZKK_LOCK &&
			ZKLK(e)->hold_scheduled && ZKLK(e)->hold_due == d->due)
		{
			ZKLK(e)->hold_scheduled = false;
			if (hold_over(e, now))
				ended++;
		}
		pfree(d);
	}
}

/*
 * A revoke request (zk_lock_revoke, lock_revoke.c) names node: when it is
 * a lock this cluster holds, take it back as a hold past its maximum is,
 * unless its owner is committing (then later).  A contender of ours not
 * granted yet may be by the time the request goes: later too.
 */
static ZkRevokeResult
revoke_take(const char *node)
{
	int			i;

	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->kind != ZKK_LOCK || e->family != ZKF_LOCKS || e->state == ZKE_FREE)
			continue;
		if (e->node[0] == '\0' && e->guid[0] != '\0' && !e->released &&
			e->outcome == ZKO_NONE && strncmp(node, e->guid, ZKLOCK_GUID_LEN) == 0)
			return ZK_RV_LATER; /* its create in doubt: its node, once found */
		if (strcmp(e->node, node) != 0)
			continue;
		if (hold_live(e))
		{
			if (hold_owner_committing(e))
				return ZK_RV_LATER;
			hold_end(e, "An operator revoked it (zk_lock_revoke), and the zklock worker took it back",
					 "revoked by zk_lock_revoke");
			return ZK_RV_TAKEN;
		}
		if (!e->released && e->outcome == ZKO_NONE &&
			(e->state == ZKE_CREATING || e->state == ZKE_WAITING))
			return ZK_RV_LATER;
		return ZK_RV_NONE;
	}
	return ZK_RV_NONE;
}

/*
 * Every turn: the waits due for a deadlock check, the holds due to end,
 * the revoke requests
 */
static void
lock_turn(void)
{
	zk_dl_turn(deadlock_verdict);
	hold_turn();
	zk_revoke_turn(revoke_take);
}

const ZkKindOps zk_lock_ops =
	ZK_KIND_OPS(lock_drive, lock_drive_failed, lock_session_lost,
				.watch_fired = pred_fired,
				.turn = lock_turn,
				.batched = true);

/* A read of a lock's contenders: batched, its listing is an ordered read */
const ZkKindOps zk_holders_ops =
	ZK_KIND_OPS(holders_drive, holders_drive_failed, holders_session_lost,
				.batched = true);
