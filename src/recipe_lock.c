/*-------------------------------------------------------------------------
 *
 * recipe_lock.c
 *	  The worker's side of ZooKeeper's lock recipe, herd-free.
 *
 *	  Acquire: create <parent>/<guid>__lock__ (or __rlock__) as an ephemeral
 *	  sequential node and list <parent> right behind it, without waiting in
 *	  between: ZooKeeper answers one session's requests in order, so the
 *	  listing already shows the new node and an uncontended lock costs one
 *	  round trip.  The lowest contender holds an exclusive lock; a shared
 *	  one is held when no exclusive contender is older.  Otherwise only the
 *	  predecessor that blocks us is watched, with a get (never an exists:
 *	  a watch on a node that is already gone must not linger on the server),
 *	  and its deletion sends a new listing.  One release wakes one waiter.
 *
 *	  Release: a delete, sent without anyone waiting for it.
 *
 *	  Connection loss: a create whose reply was lost is "in doubt".  After
 *	  reconnecting, <parent> is listed and the node is found again by its
 *	  guid, so there is never an orphan nor a second entry.  Other requests
 *	  lost with the connection are sent again.
 *
 *	  Parents: <root> and <root>/locks are persistent, <parent> is a
 *	  container node that ZooKeeper removes when empty; a create that finds
 *	  its parent gone recreates the chain and tries once more.
 *
 *	  Everything here runs in the worker with zk_ctl->lock held.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"

#include <zookeeper.h>

#include "miscadmin.h"
#include "port.h"
#include "utils/memutils.h"

static zhandle_t *zh = NULL;
static uint64 cur_session = 0;

/* Entries to drive again once the session is usable */
static uint32 *retry_list = NULL;
static int	retry_count = 0;

static void send_list(ZkEntry *e);
static void send_create(ZkEntry *e);
static void send_delete(ZkEntry *e);
static void settle_unsent(ZkEntry *e);
static void holders_drive(ZkEntry *e);
static void holders_finish(ZkEntry *e);

/* ---- helpers ---- */

/* A completion's context names an entry and its generation. */
static const void *
ctx_of(ZkEntry *e)
{
	return (const void *) (uintptr_t) (((uint64) e->gen << 32) | zk_entry_index(e));
}

static ZkEntry *
entry_of(const void *ctx)
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

static bool
session_usable(void)
{
	return zh != NULL && zoo_state(zh) == ZOO_CONNECTED_STATE;
}

static void
retry_later(ZkEntry *e)
{
	if (e->on_retry)
		return;
	if (retry_list == NULL)
		retry_list = MemoryContextAlloc(TopMemoryContext,
										sizeof(uint32) * zk_ctl->max_entries);
	e->on_retry = true;
	retry_list[retry_count++] = zk_entry_index(e);
}

static void
node_path(ZkEntry *e, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", e->parent, e->node);
}

/* Tell the owner what became of its request. */
static void
finish(ZkEntry *e, ZkOutcome outcome, int sqlstate, const char *msg)
{
	if (e->outcome == ZKO_NONE || outcome == ZKO_LOST)
	{
		e->outcome = outcome;
		e->sqlstate = sqlstate;
		if (msg)
			strlcpy(e->errmsg, msg, sizeof(e->errmsg));
		if (outcome == ZKO_GRANTED)
		{
			e->granted_at = GetCurrentTimestamp();
			zk_count(ZKCNT_GRANTS, 1);
		}
	}
	zk_wake_owner(e);
}

/* The node is gone (or never existed): free or wait for the owner. */
static void
node_gone(ZkEntry *e)
{
	e->node[0] = '\0';
	e->in_doubt = false;
	if (e->released)
		zk_entry_free(e);
	else
		e->state = ZKE_DONE;
}

static void
fail(ZkEntry *e, int sqlstate, const char *msg)
{
	zk_count(ZKCNT_ZK_ERRORS, 1);
	finish(e, ZKO_FAILED, sqlstate, msg);
}

/* Is this return code a lost connection, to be retried after reconnect? */
static bool
rc_connection_lost(int rc)
{
	return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT;
}

/* Is this return code the end of the session (nodes gone with it)? */
static bool
rc_session_gone(int rc)
{
	return rc == ZSESSIONEXPIRED || rc == ZCLOSING || rc == ZINVALIDSTATE ||
		rc == ZSESSIONMOVED;
}

/* ---- completions ---- */

static void
delete_done(int rc, const void *ctx)
{
	ZkEntry    *e = entry_of(ctx);

	if (e == NULL || e->state != ZKE_DELETING)
		return;
	e->delete_inflight = false;
	if (rc_connection_lost(rc))
	{
		retry_later(e);
		return;
	}
	if (rc != ZOK && rc != ZNONODE && !rc_session_gone(rc))
	{
		zk_count(ZKCNT_ZK_ERRORS, 1);
		ereport(WARNING,
				(errmsg("zklock: could not delete zookeeper node %s/%s: %s",
						e->parent, e->node, zerror(rc))));
	}
	if (e->released)
		zk_count(ZKCNT_RELEASES, 1);
	node_gone(e);
}

/* Predecessor watch: any event on it means "look again". */
static void
pred_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	ZkEntry    *e;

	if (type == ZOO_SESSION_EVENT)
		return;
	zk_count(ZKCNT_WATCH_EVENTS, 1);
	e = entry_of(ctx);
	if (e == NULL || e->state != ZKE_WAITING)
		return;
	send_list(e);
}

static void
pred_get_done(int rc, const char *value, int value_len,
			  const struct Stat *stat, const void *ctx)
{
	ZkEntry    *e = entry_of(ctx);

	if (e == NULL || e->state != ZKE_WAITING)
		return;
	if (rc == ZOK)
		return;					/* watch is set; wait for it */
	if (rc == ZNONODE)
		send_list(e);			/* already gone: no watch was left behind */
	else if (rc_connection_lost(rc))
		retry_later(e);
	else if (!rc_session_gone(rc))
		fail(e, ERRCODE_CONNECTION_FAILURE, zerror(rc));
}

/* Decide from a listing of <parent> whether we hold the lock. */
static void
evaluate(ZkEntry *e, const struct String_vector *kids)
{
	int			myseq = zk_node_seq(e->node);
	int			pred = -1;
	int			predseq = -1;
	bool		found = false;
	int			i;
	char		path[ZKLOCK_PARENT_MAX + ZKLOCK_NODE_MAX + 2];

	for (i = 0; i < kids->count; i++)
	{
		const char *k = kids->data[i];
		bool		kshared;
		int			kseq;

		if (strcmp(k, e->node) == 0)
		{
			found = true;
			continue;
		}
		if (!zk_node_is_contender(k, &kshared))
			continue;
		/* never wait for our own backend's other node of this lock */
		if (e->owner_tag[0] != '\0' &&
			strncmp(k, e->owner_tag, ZKLOCK_GUID_LEN / 2) == 0)
			continue;
		kseq = zk_node_seq(k);
		if (kseq >= myseq)
			continue;
		/* a shared lock waits only for exclusive contenders */
		if (e->mode == ZKM_SHARED && kshared)
			continue;
		if (kseq > predseq)
		{
			predseq = kseq;
			pred = i;
		}
	}

	if (!found)
	{
		/* our node vanished under us (deleted by someone else) */
		node_gone(e);
		if (e->state == ZKE_DONE)
			fail(e, ERRCODE_CONNECTION_FAILURE,
				 "The lock node was deleted in ZooKeeper while waiting");
		return;
	}

	if (pred < 0)
	{
		e->state = ZKE_HELD;
		finish(e, ZKO_GRANTED, 0, NULL);
		return;
	}

	if (e->try_only)
	{
		finish(e, ZKO_BUSY, 0, NULL);
		send_delete(e);
		return;
	}

	e->state = ZKE_WAITING;
	snprintf(path, sizeof(path), "%s/%s", e->parent, kids->data[pred]);
	if (zoo_awget(zh, path, pred_watcher, (void *) ctx_of(e),
				  pred_get_done, ctx_of(e)) != ZOK)
		retry_later(e);
}

static void
exists_done(int rc, const struct Stat *stat, const void *ctx)
{
	ZkEntry    *e = entry_of(ctx);

	if (e == NULL)
		return;
	if (rc == ZOK && stat)
		e->token = stat->czxid;
}

static void
list_done(int rc, const struct String_vector *kids, const void *ctx)
{
	ZkEntry    *e = entry_of(ctx);
	int			i;

	if (e == NULL || e->create_inflight)
		return;
	if (e->state != ZKE_CREATING && e->state != ZKE_WAITING)
		return;

	if (rc_connection_lost(rc))
	{
		retry_later(e);
		return;
	}
	if (rc_session_gone(rc))
		return;
	if (rc != ZOK && rc != ZNONODE)
	{
		fail(e, ERRCODE_CONNECTION_FAILURE, zerror(rc));
		if (e->in_doubt)
			retry_later(e);		/* still must find and delete it */
		else if (e->node[0])
			send_delete(e);
		else
			node_gone(e);
		return;
	}

	if (e->in_doubt)
	{
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
			return;
		}
		if (e->released)
		{
			send_delete(e);
			return;
		}
		/* adopt it: fetch its czxid, then list again */
		{
			char		path[ZKLOCK_PARENT_MAX + ZKLOCK_NODE_MAX + 2];

			node_path(e, path, sizeof(path));
			zoo_aexists(zh, path, 0, exists_done, ctx_of(e));
			send_list(e);
		}
		return;
	}

	if (rc == ZNONODE)
	{
		node_gone(e);
		if (e->state == ZKE_DONE)
			fail(e, ERRCODE_CONNECTION_FAILURE,
				 "The lock's parent node was deleted in ZooKeeper while waiting");
		return;
	}
	evaluate(e, kids);
}

static void create_done(int rc, const char *name, const struct Stat *stat,
						const void *ctx);

static void
parent_done(int rc, const char *name, const void *ctx)
{
	/* ZNODEEXISTS is the common case; a real failure shows up in the create */
}

/* Recreate <root>, <root>/locks and <parent>, then the contender again. */
static void
send_parents_and_create(ZkEntry *e)
{
	char		path[ZKLOCK_PARENT_MAX + 1];
	char	   *p;

	strlcpy(path, e->parent, sizeof(path));
	for (p = path + 1; *p; p++)
	{
		if (*p == '/')
		{
			*p = '\0';
			zoo_acreate(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
						ZOO_PERSISTENT, parent_done, NULL);
			*p = '/';
		}
	}
	zoo_acreate(zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
				ZOO_CONTAINER, parent_done, NULL);
	send_create(e);
}

static void
create_done(int rc, const char *name, const struct Stat *stat, const void *ctx)
{
	ZkEntry    *e = entry_of(ctx);
	const char *slash;

	if (e == NULL || e->state != ZKE_CREATING || !e->create_inflight)
		return;
	e->create_inflight = false;

	if (rc == ZOK)
	{
		slash = strrchr(name, '/');
		strlcpy(e->node, slash ? slash + 1 : name, sizeof(e->node));
		e->token = stat ? stat->czxid : 0;
		e->in_doubt = false;
		e->session = cur_session;
		if (e->released)
			send_delete(e);
		/* else the listing sent right behind decides */
		return;
	}
	if (rc == ZNONODE && !e->parents_tried)
	{
		e->parents_tried = true;
		if (e->released)
			zk_entry_free(e);
		else
			send_parents_and_create(e);
		return;
	}
	if (rc_connection_lost(rc))
	{
		e->in_doubt = true;
		retry_later(e);
		return;
	}
	if (rc_session_gone(rc))
		return;					/* zk_lock_session_lost settles it */

	{
		char		msg[ZKLOCK_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "Could not create the lock node under %s: %s",
				 e->parent, zerror(rc));
		fail(e, ERRCODE_CONNECTION_FAILURE, msg);
	}
	node_gone(e);
}

/* ---- requests ---- */

static void
send_list(ZkEntry *e)
{
	if (!session_usable() ||
		zoo_aget_children(zh, e->parent, 0, list_done, ctx_of(e)) != ZOK)
		retry_later(e);
}

static void
send_delete(ZkEntry *e)
{
	char		path[ZKLOCK_PARENT_MAX + ZKLOCK_NODE_MAX + 2];

	e->state = ZKE_DELETING;
	node_path(e, path, sizeof(path));
	if (!session_usable() ||
		zoo_adelete(zh, path, -1, delete_done, ctx_of(e)) != ZOK)
		retry_later(e);
	else
		e->delete_inflight = true;
}

static void
make_guid(ZkEntry *e)
{
	uint8		buf[ZKLOCK_GUID_LEN / 2];
	int			i;

	if (!pg_strong_random(buf, sizeof(buf)))
	{
		/* not expected; fall back on something unique enough */
		uint64		a = GetCurrentTimestamp() ^ ((uint64) MyProcPid << 40);
		uint64		b = ((uint64) e->gen << 32) | zk_entry_index(e);

		memcpy(buf, &a, 8);
		memcpy(buf + 8, &b, 8);
	}
	for (i = 0; i < (int) sizeof(buf); i++)
		snprintf(e->guid + 2 * i, 3, "%02x", buf[i]);
	/* the first half names the owning backend (see evaluate) */
	if (e->owner_tag[0] != '\0')
		memcpy(e->guid, e->owner_tag, ZKLOCK_GUID_LEN / 2);
}

static void
send_create(ZkEntry *e)
{
	char		path[ZKLOCK_PARENT_MAX + ZKLOCK_NODE_MAX + 2];
	int			rc;

	if (e->parent[0] == '\0')
		snprintf(e->parent, sizeof(e->parent), "%s/locks/%s",
				 zklock_root, e->ename);
	make_guid(e);
	snprintf(path, sizeof(path), "%s/%s%s", e->parent, e->guid,
			 e->mode == ZKM_SHARED ? "__rlock__" : "__lock__");
	e->state = ZKE_CREATING;
	e->node[0] = '\0';
	e->in_doubt = false;

	if (!session_usable())
	{
		e->state = ZKE_PENDING;
		retry_later(e);
		return;
	}
	rc = zoo_acreate2(zh, path, e->data, (int) strlen(e->data),
					  &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
					  create_done, ctx_of(e));
	if (rc != ZOK)
	{
		e->state = ZKE_PENDING;
		retry_later(e);
		return;
	}
	e->create_inflight = true;
	/* pipelined: the listing already shows the new node */
	zoo_aget_children(zh, e->parent, 0, list_done, ctx_of(e));
}


/* ---- reading every contender of a lock (zk_lock_holders) ---- */

/* Segments the worker has attached, by entry number. */
static dsm_segment **holder_segs = NULL;

typedef struct HolderGet
{
	const void *ectx;			/* the entry, as ctx_of() gives it */
	int32		seq;
	bool		shared;
	char		name[FLEXIBLE_ARRAY_MEMBER];
} HolderGet;

static void
holders_finish(ZkEntry *e)
{
	uint32		idx = zk_entry_index(e);

	if (holder_segs && holder_segs[idx])
	{
		dsm_detach(holder_segs[idx]);
		holder_segs[idx] = NULL;
	}
	if (e->query_failed)
		fail(e, ERRCODE_CONNECTION_FAILURE,
			 "Could not read the lock's contenders from ZooKeeper");
	else
		finish(e, ZKO_GRANTED, 0, NULL);
	if (e->released)
		zk_entry_free(e);
	else
		e->state = ZKE_DONE;
}

static void
holder_get_done(int rc, const char *value, int value_len,
				const struct Stat *stat, const void *ctx)
{
	HolderGet  *g = (HolderGet *) ctx;
	ZkEntry    *e = entry_of(g->ectx);

	if (e != NULL && e->state == ZKE_CREATING && e->kind == ZKK_HOLDERS)
	{
		if (rc == ZOK)
		{
			ZkHoldersBuf *buf = dsm_segment_address(holder_segs[zk_entry_index(e)]);
			int			namelen = Min((int) strlen(g->name), 255);
			int			datalen = Min(Max(value_len, 0), ZKLOCK_HOLDER_DATA_MAX);
			Size		need = MAXALIGN(sizeof(ZkHolderRec) + namelen + datalen);

			buf->needed += need;
			if (MAXALIGN(sizeof(ZkHoldersBuf)) + buf->used + need <= buf->size)
			{
				char	   *p = (char *) buf + MAXALIGN(sizeof(ZkHoldersBuf)) + buf->used;
				ZkHolderRec *rec = (ZkHolderRec *) p;

				rec->czxid = stat ? stat->czxid : 0;
				rec->seq = g->seq;
				rec->shared = g->shared;
				rec->namelen = namelen;
				rec->datalen = datalen;
				memcpy(p + sizeof(ZkHolderRec), g->name, namelen);
				if (datalen > 0)
					memcpy(p + sizeof(ZkHolderRec) + namelen, value, datalen);
				buf->used += need;
				buf->count++;
			}
		}
		else if (rc != ZNONODE)
			e->query_failed = true; /* ZNONODE: released meanwhile, skip */
		if (--e->outstanding <= 0)
			holders_finish(e);
	}
	pfree(g);
}

static void
holders_list_done(int rc, const struct String_vector *kids, const void *ctx)
{
	ZkEntry    *e = entry_of(ctx);
	int			i;

	if (e == NULL || e->state != ZKE_CREATING || e->kind != ZKK_HOLDERS)
		return;
	if (rc == ZNONODE)
	{
		holders_finish(e);		/* nobody holds or awaits it */
		return;
	}
	if (rc != ZOK)
	{
		e->query_failed = true;
		holders_finish(e);
		return;
	}
	e->outstanding = 0;
	for (i = 0; i < kids->count; i++)
	{
		bool		shared;
		HolderGet  *g;
		char		path[ZKLOCK_PARENT_MAX + 258];

		if (!zk_node_is_contender(kids->data[i], &shared))
			continue;
		g = MemoryContextAlloc(TopMemoryContext,
							   offsetof(HolderGet, name) + strlen(kids->data[i]) + 1);
		g->ectx = ctx_of(e);
		g->seq = zk_node_seq(kids->data[i]);
		g->shared = shared;
		strcpy(g->name, kids->data[i]);
		snprintf(path, sizeof(path), "%s/%s", e->parent, kids->data[i]);
		if (zoo_aget(zh, path, 0, holder_get_done, g) != ZOK)
		{
			pfree(g);
			e->query_failed = true;
			continue;
		}
		e->outstanding++;
	}
	if (e->outstanding == 0)
		holders_finish(e);
}

static void
holders_drive(ZkEntry *e)
{
	uint32		idx = zk_entry_index(e);

	switch ((ZkEntryState) e->state)
	{
		case ZKE_PENDING:
			if (e->released)
			{
				zk_entry_free(e);
				break;
			}
			if (!session_usable())
			{
				retry_later(e);
				break;
			}
			if (holder_segs == NULL)
				holder_segs = MemoryContextAllocZero(TopMemoryContext,
													 sizeof(dsm_segment *) * zk_ctl->max_entries);
			holder_segs[idx] = dsm_attach(e->dsm);
			if (holder_segs[idx] == NULL)
			{
				/* the backend is gone already */
				e->query_failed = true;
				holders_finish(e);
				break;
			}
			snprintf(e->parent, sizeof(e->parent), "%s/locks/%s",
					 zklock_root, e->ename);
			e->state = ZKE_CREATING;
			if (zoo_aget_children(zh, e->parent, 0, holders_list_done, ctx_of(e)) != ZOK)
			{
				e->query_failed = true;
				holders_finish(e);
			}
			break;
		case ZKE_DONE:
			if (e->released)
				zk_entry_free(e);
			break;
		default:
			break;				/* in flight: holders_finish settles it */
	}
}

/* An entry whose request was never sent, at the end of a session. */
static void
settle_unsent(ZkEntry *e)
{
	if (e->released)
		zk_entry_free(e);
}

/*
 * Drive an entry one step: called for every entry taken off the queue and
 * for the entries on the retry list once the session is usable again.
 */
void
zk_lock_drive(zhandle_t *h, ZkEntry *e)
{
	if (e->kind == ZKK_HOLDERS)
	{
		holders_drive(e);
		return;
	}
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
			if (e->create_inflight)
				break;			/* its completion decides */
			if (e->in_doubt || e->node[0])
				send_list(e);
			else
				send_create(e);
			break;
		case ZKE_WAITING:
			if (e->released)
				send_delete(e);
			else
				send_list(e);
			break;
		case ZKE_HELD:
			if (e->released)
				send_delete(e);
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

void
zk_lock_set_handle(zhandle_t *h, uint64 session_id)
{
	zh = h;
	cur_session = session_id;
}

/*
 * The session is usable again: drive everything that waited for it.
 */
void
zk_lock_reconnected(zhandle_t *h)
{
	int			n = retry_count;
	int			i;
	uint32	   *todo;

	if (n == 0)
		return;
	todo = palloc(sizeof(uint32) * n);
	memcpy(todo, retry_list, sizeof(uint32) * n);
	retry_count = 0;
	for (i = 0; i < n; i++)
	{
		ZkEntry    *e = zk_entry(todo[i]);

		e->on_retry = false;
		if (e->state != ZKE_FREE)
			zk_lock_drive(h, e);
	}
	pfree(todo);
}

/*
 * The session ended (expired, closed, or the worker is exiting): its
 * ephemeral nodes are gone.  Locks held are lost, waits fail, released
 * entries are freed; requests never sent stay for the next session.
 * Rare, so it may look at every entry.
 */
void
zk_lock_session_lost(const char *why)
{
	char		msg[ZKLOCK_ERRMSG_MAX];

	int			i;

	retry_count = 0;
	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->state == ZKE_FREE)
			continue;
		e->on_retry = false;
		e->create_inflight = false;
		e->delete_inflight = false;
		e->in_doubt = false;
		if (e->kind == ZKK_HOLDERS)
		{
			if (e->state == ZKE_PENDING)
			{
				settle_unsent(e);
				if (e->state == ZKE_PENDING)
					retry_later(e);
			}
			else if (e->state == ZKE_CREATING)
			{
				e->outstanding = 0;
				e->query_failed = true;
				holders_finish(e);
			}
			continue;
		}
		switch ((ZkEntryState) e->state)
		{
			case ZKE_FREE:
				break;
			case ZKE_PENDING:
				settle_unsent(e);
				if (e->state == ZKE_PENDING)
					retry_later(e);
				break;
			case ZKE_HELD:
				if (!e->released)
				{
					zk_count(ZKCNT_LOST, 1);
				{
					snprintf(msg, sizeof(msg), "%s while the lock was held", why);
					finish(e, ZKO_LOST, ERRCODE_T_R_SERIALIZATION_FAILURE, msg);
				}
				}
				node_gone(e);
				break;
			case ZKE_CREATING:
			case ZKE_WAITING:
				if (!e->released)
				{
					snprintf(msg, sizeof(msg), "%s while waiting for the lock", why);
					fail(e, ERRCODE_CONNECTION_FAILURE, msg);
				}
				node_gone(e);
				break;
			case ZKE_DELETING:
			case ZKE_DONE:
				node_gone(e);
				break;
		}
	}
}
