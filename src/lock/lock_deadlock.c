/*-------------------------------------------------------------------------
 *
 * lock_deadlock.c
 *	  Deadlock detection across servers (issue 39), in the worker.
 *
 *	  A lock waiter that has waited deadlock_timeout (the backend's, noted
 *	  in its entry) is checked for a cycle of zk locks held and awaited by
 *	  backends of any cluster on the ensemble.
 *
 *	  Publish: the worker writes the waiter's wait record,
 *	  <root>/waits/<owner tag> (ephemeral; the owner tag is the first half
 *	  of every node name the backend makes, so anyone who sees a contender
 *	  knows whose it is): {"zklock_wait":1, "lock": the lock's node,
 *	  "node": the waiter's contender, "czxid", "base": an upgrade's shared
 *	  node, "every": ms to the next check, who waits (pid, port, host),
 *	  and "holds": the contenders the backend holds, when they fit}.  It is
 *	  written again at every check and deleted when the wait ends.
 *
 *	  Follow: from the waiter's contender, list its lock, take every
 *	  contender that blocks it (zk_lock_blockers), and read the wait record
 *	  of each blocker's owner; where there is one (fresh, naming a
 *	  contender of that owner, and the blocking node one it waits with or
 *	  holds), go on from that contender.  Reaching the waiter's own owner
 *	  through a node it holds now closes a cycle.  A node on its way out (a
 *	  call that failed, a create in doubt) carries its backend's owner tag
 *	  but is no edge: no one waits for that backend through it.  A blocking
 *	  owner that is a backend of this cluster (an entry of ours carries its
 *	  owner tag) is judged by what this worker knows now, not by its
 *	  record alone: an edge only when the blocking node is an entry of that
 *	  backend it holds or waits with and has not let go of, and the
 *	  record's contender one it still waits with (dl_local_edge).  At most
 *	  DL_DEPTH_MAX hops and DL_REQUESTS_MAX requests; past them the check
 *	  ends without a verdict.  A record older than twice its own "every"
 *	  (plus a second) is not followed: its waiter's cluster stopped
 *	  checking (crashed, its session not expired yet).
 *
 *	  Order: a backend's record goes before any node it names.  Before the
 *	  worker deletes a node, or gives it up, it deletes the wait record of
 *	  the node's backend if that record may name the node (the waiter's own
 *	  contender, a hold it lists, or any node when its holds did not fit:
 *	  zk_dl_node_going); one session's requests are applied in the order
 *	  sent, so that delete lands first.  Without a usable session neither
 *	  is sent: the record stays owed (dl_records) and the node's delete,
 *	  retried, comes back through here; a record delete whose fate was lost
 *	  with the connection is owed again.  A waiter that is granted deletes
 *	  its record at once (zk_dl_wait_over).
 *
 *	  Verify: every contender of the cycle is read again (exists), then
 *	  the record of every member of another cluster: the same write as the
 *	  one followed, or a rewrite (its owner's next check) naming the same
 *	  contender and still the blocking node.  Such a member's contenders
 *	  and its record must come from one ZooKeeper session (ephemeralOwner):
 *	  a node of its owner tag left by its worker's earlier session (given
 *	  up, not expired yet) is held by no one, and a record whose holds did
 *	  not fit (it takes any node of its owner) would otherwise take it.  Node names are never reused,
 *	  and the blocking between two existing contenders of one lock cannot
 *	  change; so at the first of these reads every contender existed and
 *	  every record said what was followed, and by Order no member's worker
 *	  had given up a node of the cycle by then.  Right before the verdict,
 *	  every member that is a backend of this cluster is looked at again
 *	  here (dl_cycle_live: still waiting with its contender, still wanting
 *	  the node the member before it waits for).
 *
 *	  What that guarantees: a victim is chosen only for a cycle that was
 *	  whole at one point of ZooKeeper's history, in the nodes and in every
 *	  member's record, and whose members on this cluster are all still in
 *	  it at the verdict: a backend of ours that failed (08006), was
 *	  cancelled or let go is never counted, whatever its requests' fate.
 *	  What it cannot: a member of another cluster whose backend has
 *	  stopped waiting while its worker's requests have not reached
 *	  ZooKeeper (that worker frozen, or its server cut off from the leader)
 *	  still looks as if it waits until its worker's deletes land, its
 *	  session expires (zklock.session_timeout) or its record grows older
 *	  than the bound above; no detector across servers can know sooner.
 *
 *	  Victim: exactly one member acts, the youngest waiter (the largest
 *	  czxid), when its own check finds the cycle: it gets 40P01.  It is the
 *	  last to reach its deadlock_timeout, so every older member has
 *	  published by then; with other timeouts, the re-checks (deadlock_timeout
 *	  x 1, 2, 4, 8, 16 ...) find it.
 *
 *	  Cost of a check: one write (the record), then per hop one listing and
 *	  one read per blocking owner, then one exists per contender of a cycle
 *	  and one read per member of another cluster.  A release whose backend
 *	  has a record out that may name the node costs one delete more.
 *
 *	  Not seen: a cycle through a PostgreSQL lock (a row lock, an advisory
 *	  lock), and kazoo's or Curator's contenders (they publish nothing).
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "lock.h"

#include "lib/binaryheap.h"
#include "miscadmin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define DL_DEPTH_MAX		16	/* hops of one check */
#define DL_REQUESTS_MAX		256 /* requests of one check */
#define DL_FANOUT_MAX		32	/* blocking owners followed per hop */
#define DL_CHECKS_MAX		4	/* checks in flight at once */
#define DL_STARTS_PER_TURN	8	/* checks started per turn */
#define DL_TAG_LEN			(ZKLOCK_GUID_LEN / 2)
#define DL_WHO_MAX			96
#define DL_HOLDS_MAX		512 /* the contenders a record lists as held */
#define DL_RECORD_MAX		(1024 + DL_HOLDS_MAX)

/* One hop of a check: a waiter and what blocks it */
typedef struct DlFrame
{
	char		dir[ZK_PATH_MAX];	/* its lock's node */
	char		child[ZKLOCK_NODE_MAX + 1];	/* its contender */
	char		base[ZKLOCK_NODE_MAX + 1];	/* an upgrade's shared node */
	char		owner[DL_TAG_LEN + 1];
	char		who[DL_WHO_MAX];	/* "process 12 on port 5432 of host h" */
	int64		czxid;			/* of child */
	int			nowners;		/* blocking owners found */
	int			next;			/* the next of them to follow */
	char		owners[DL_FANOUT_MAX][DL_TAG_LEN + 1];
	char		via[DL_FANOUT_MAX][ZKLOCK_NODE_MAX + 1];	/* a contender of
															 * each */
	int			edge;			/* the owner followed from here (cycle) */
	int64		rec_mzxid;		/* of its owner's record, as followed */
	int64		rec_session;	/* the session that made that record: its
								 * owner's worker's; a node of the owner made
								 * by another is a leftover, no edge */
	bool		local;			/* its owner is a backend of this cluster */
} DlFrame;

typedef enum DlPhase
{
	DLP_PUBLISH,				/* the record's create (or set) is out */
	DLP_PARENT,					/* <root>/waits is being made */
	DLP_LIST,					/* the top frame's lock is being listed */
	DLP_RECORD,					/* a blocking owner's record is being read */
	DLP_VERIFY					/* the cycle's contenders and records are
								 * being read again */
} DlPhase;

typedef struct DlCheck
{
	uint32		idx;			/* the waiter's entry */
	uint32		gen;
	DlPhase		phase;
	bool		inflight;		/* a request of it is out */
	bool		dead;			/* its session ended: free it when answered */
	int			requests;
	int64		now_ms;			/* ZooKeeper's time: our record's mtime */
	int			depth;
	int			verify_next;	/* the contender of the cycle read next */
	int			nseen;
	char		seen[DL_DEPTH_MAX * DL_FANOUT_MAX][DL_TAG_LEN + 1];
	DlFrame		frames[DL_DEPTH_MAX];
} DlCheck;

/* A waiter due for a check */
typedef struct DlDue
{
	uint32		idx;
	uint32		gen;
	TimestampTz due;
} DlDue;

/*
 * A wait record of one of our backends that may be in ZooKeeper (written,
 * or being written, and not yet deleted), by owner tag: the one thing that
 * must go before any node it names (lock_deadlock.c's header, "Order")
 */
typedef struct DlRecordOut
{
	char		owner[DL_TAG_LEN + 1];	/* the key */
	uint32		idx;			/* the waiter that wrote it ... */
	uint32		gen;			/* ... (DL_NO_WRITER: unknown) */
	bool		all;			/* it names every node of its owner (its holds
								 * did not fit, or unknown) */
} DlRecordOut;

#define DL_NO_WRITER		PG_UINT32_MAX

/* The context of a record's delete: whose, in which session */
typedef struct DlDelete
{
	char		owner[DL_TAG_LEN + 1];
	uint64		session;
} DlDelete;

static binaryheap *dl_heap = NULL;
static HTAB *dl_records = NULL; /* DlRecordOut, by owner tag */
static List *dl_checks = NIL;	/* DlCheck *, in flight */
static ZkDlVerdict dl_verdict = NULL;

static void dl_step(DlCheck *c);
static void dl_end(DlCheck *c, bool recheck);

/* the heap's order: the earliest due first */
static int
dl_due_cmp(Datum a, Datum b, void *arg)
{
	DlDue	   *x = (DlDue *) DatumGetPointer(a);
	DlDue	   *y = (DlDue *) DatumGetPointer(b);

	/* binaryheap keeps the largest first */
	if (x->due != y->due)
		return x->due > y->due ? -1 : 1;
	return 0;
}

/* Is c's waiter still waiting, the entry it was started for? */
static ZkEntry *
dl_entry(DlCheck *c)
{
	ZkEntry    *e = zk_entry(c->idx);

	if (e->gen != c->gen || e->kind != ZKK_LOCK || e->state != ZKE_WAITING ||
		e->released || pg_atomic_read_u32(&e->release_req) != 0)
		return NULL;
	return e;
}

/* The interval to e's next check: its deadlock_timeout, doubled each time */
static int64
dl_every_ms(ZkEntry *e)
{
	int			round = Min(ZKLK(e)->dl_round, 4);

	return (int64) Max(ZKLK(e)->dl_timeout_ms, 1) << round;
}

/* Put e on the heap, due after its next interval */
static void
dl_schedule(ZkEntry *e)
{
	MemoryContext old;
	DlDue	   *d;

	if (dl_heap == NULL)
	{
		old = MemoryContextSwitchTo(TopMemoryContext);
		/* one slot per waiting entry, and room for slots of waits over */
		dl_heap = binaryheap_allocate(4 * zk_ctl->max_entries + 16, dl_due_cmp, NULL);
		MemoryContextSwitchTo(old);
	}
	if (dl_heap->bh_size >= dl_heap->bh_space)
		return;					/* not checked: its wait ends by its timeout */
	d = MemoryContextAlloc(TopMemoryContext, sizeof(DlDue));
	d->idx = zk_entry_index(e);
	d->gen = e->gen;
	d->due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), dl_every_ms(e));
	binaryheap_add(dl_heap, PointerGetDatum(d));
	ZKLK(e)->dl_scheduled = true;
	zk_worker_wake_by(d->due);
}

/*
 * A lock entry of zk_lock and friends began to wait (lock_worker.c): it is
 * checked once it has waited its backend's deadlock_timeout
 */
void
zk_dl_waiting(ZkEntry *e)
{
	if (e->family != ZKF_LOCKS || ZKLK(e)->dl_timeout_ms <= 0 ||
		ZKLK(e)->dl_scheduled)
		return;
	ZKLK(e)->dl_round = 0;
	dl_schedule(e);
}

/* The path of a backend's wait record */
static void
dl_record_path(const char *owner, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/waits/%s", zk_root, owner);
}

/* The record of one of our backends that may be out, or NULL (create: make it) */
static DlRecordOut *
dl_record_out(const char *owner, bool create)
{
	char		key[DL_TAG_LEN + 1];
	bool		found;
	DlRecordOut *r;

	if (dl_records == NULL)
	{
		if (!create)
			return NULL;
		dl_records = zk_hash_create("zklock wait records", 64, DL_TAG_LEN + 1,
									sizeof(DlRecordOut), false, TopMemoryContext);
	}
	memset(key, 0, sizeof(key));
	strlcpy(key, owner, sizeof(key));
	r = hash_search(dl_records, key, create ? HASH_ENTER : HASH_FIND, &found);
	if (r != NULL && create && !found)
	{
		r->idx = DL_NO_WRITER;
		r->gen = 0;
		r->all = true;
	}
	return r;
}

/*
 * Completion of a record's delete.  One whose fate is unknown (the
 * connection went) may not have landed: in the same session the record is
 * owed again, so that the deletes of the nodes it names, sent again after
 * this one failed, are preceded by its delete again.
 */
static void
dl_deleted(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(DlDelete, d, data);
	{
		if (!zk_rc_definite(rc) && d->session == zk_cur_session &&
			dl_record_out(d->owner, false) == NULL)
			(void) dl_record_out(d->owner, true);	/* writer unknown, names all */
	}
	NONE_COMPLETION_END;
	free((void *) d);
}

/* Completion of a record's delete without a context (out of memory) */
static void
dl_deleted_untracked(int rc, const void *data)
{
}

/*
 * Delete the record r of one of our backends, now: it is no longer owed,
 * and its writer knows it is gone.  Without a usable session it stays owed
 * (the nodes it names cannot be deleted either: their deletes, retried,
 * come here first).
 */
static void
dl_record_delete(DlRecordOut *r)
{
	char		path[ZK_PATH_MAX];
	DlDelete   *d;

	if (!zk_session_usable())
		return;
	if (r->idx != DL_NO_WRITER)
	{
		ZkEntry    *w = zk_entry(r->idx);

		if (w->gen == r->gen && w->kind == ZKK_LOCK)
			ZKLK(w)->dl_published = false;
	}
	dl_record_path(r->owner, path, sizeof(path));
	d = malloc(sizeof(DlDelete));
	if (d != NULL)
	{
		strlcpy(d->owner, r->owner, sizeof(d->owner));
		d->session = zk_cur_session;
		if (zoo_adelete(zk_zh, path, -1, dl_deleted, d) != ZOK)
			free(d);
	}
	else
		(void) zoo_adelete(zk_zh, path, -1, dl_deleted_untracked, NULL);
	(void) hash_search(dl_records, r->owner, HASH_REMOVE, NULL);
}

/*
 * e stopped waiting (granted, let go, refused): its record, if it wrote the
 * one out, goes.  (A heap slot of it is dropped when it comes up.)
 */
void
zk_dl_wait_over(ZkEntry *e)
{
	DlRecordOut *r = dl_record_out(e->owner_tag, false);

	if (r != NULL && r->idx == zk_entry_index(e) && r->gen == e->gen)
		dl_record_delete(r);	/* owed still without a usable session */
	else
		ZKLK(e)->dl_published = false;	/* none of its own is out */
}

/*
 * e's node is about to be deleted, or abandoned (lock_worker.c): first the
 * wait record of its backend goes, if it may name that node (as its
 * writer's contender, as a hold it lists, or as any node of the backend),
 * so that its delete reaches ZooKeeper before the node's: one session's
 * requests are applied in order.  Verify relies on it (the header,
 * "Order").  Without a usable session the record stays owed, and so does
 * the node's delete, which comes here again.
 */
void
zk_dl_node_going(ZkEntry *e)
{
	DlRecordOut *r = dl_record_out(e->owner_tag, false);

	if (r != NULL &&
		((r->idx == zk_entry_index(e) && r->gen == e->gen) ||
		 r->all || ZKLK(e)->dl_listed))
		dl_record_delete(r);
	if (dl_record_out(e->owner_tag, false) == NULL)
	{
		ZKLK(e)->dl_listed = false;
		ZKLK(e)->dl_published = false;
	}
}

/* A field of a holder's JSON, or "?" */
static void
dl_field(const char *json, const char *key, char *out, size_t outlen)
{
	if (!zk_json_field(json, (int) strlen(json), key, out, outlen) || out[0] == '\0')
		strlcpy(out, "?", outlen);
}

/* "process <pid> on port <port> of host <host>", from a holder's JSON */
static void
dl_who(const char *json, char *out, size_t outlen)
{
	char		pid[16];
	char		port[16];
	char		host[64];

	dl_field(json, "pid", pid, sizeof(pid));
	dl_field(json, "port", port, sizeof(port));
	dl_field(json, "host", host, sizeof(host));
	snprintf(out, outlen, "process %s on port %s of host %s", pid, port, host);
	/* it goes into a JSON string as it is: no quote, no backslash */
	for (; *out; out++)
		if (*out == '"' || *out == '\\' || (unsigned char) *out < ' ')
			*out = '?';
}

/* Send a request for c (the caller sets c->phase first) */
static bool
dl_sent(DlCheck *c, int rc)
{
	if (rc != ZOK)
		return false;
	c->inflight = true;
	c->requests++;
	return true;
}

static void dl_publish(DlCheck *c, ZkEntry *e);
static void dl_stale_deleted(int rc, const void *data);
static bool dl_holds_list(const char *owner, char *out, size_t outlen);

/*
 * The record is written: ZooKeeper's time of the write (our clock for the
 * others' records), then follow
 */
static void
dl_written(DlCheck *c, const struct Stat *stat)
{
	c->now_ms = stat->mtime;
	c->phase = DLP_LIST;
	dl_step(c);
}

/* Completion of the parent's create: publish again */
static void
dl_parent_made(int rc, const char *value, const void *data)
{
	DATA_COMPLETION_BEGIN(DlCheck, c, data);
	{
		ZkEntry    *e;

		c->inflight = false;
		if (c->dead || (e = dl_entry(c)) == NULL)
			dl_end(c, false);
		else if (rc == ZOK || rc == ZNODEEXISTS)
			dl_publish(c, e);
		else
			dl_end(c, true);
	}
	NONE_COMPLETION_END;
}

/*
 * The answer to the record's create (created) or set: ZooKeeper's time and
 * on; a create that found it there sets it, a set that found it gone
 * creates it, a create without <root>/waits makes that first
 */
static void
dl_write_answered(DlCheck *c, int rc, const struct Stat *stat, bool created)
{
	ZkEntry    *e;

	c->inflight = false;
	if (c->dead || (e = dl_entry(c)) == NULL)
		dl_end(c, false);
	else if (rc == ZOK && !created && zk_cur_session != 0 &&
			 (uint64) stat->ephemeralOwner != zk_cur_session)
	{
		/*
		 * The record there is one our worker's earlier session made (given
		 * up, not expired yet): the others take this owner's contenders only
		 * from the session that wrote its record (dl_verified), so that one
		 * goes and ours is made in this session
		 */
		char		path[ZK_PATH_MAX];

		ZKLK(e)->dl_published = false;
		dl_record_path(c->frames[0].owner, path, sizeof(path));
		c->phase = DLP_PUBLISH;
		if (c->requests >= DL_REQUESTS_MAX ||
			!dl_sent(c, zoo_adelete(zk_zh, path, stat->version, dl_stale_deleted, c)))
			dl_end(c, true);
	}
	else if (rc == ZOK)
		dl_written(c, stat);
	else if (rc == ZNODEEXISTS && created)
	{
		/* ours (the owner tag is this backend's): set it */
		ZKLK(e)->dl_published = true;
		dl_publish(c, e);
	}
	else if (rc == ZNONODE && !created)
	{
		ZKLK(e)->dl_published = false;	/* gone: create it */
		dl_publish(c, e);
	}
	else if (rc == ZNONODE && c->phase == DLP_PUBLISH)
	{
		/* no <root>/waits yet: make it (persistent), then again */
		char		parent[ZK_PATH_MAX];

		ZKLK(e)->dl_published = false;
		snprintf(parent, sizeof(parent), "%s/waits", zk_root);
		c->phase = DLP_PARENT;
		if (!dl_sent(c, zoo_acreate(zk_zh, parent, NULL, -1, zk_acl_path(parent),
									0, dl_parent_made, c)))
			dl_end(c, true);
	}
	else
	{
		/*
		 * Refused: there is none.  An answer lost with the connection may
		 * hide a create that landed: the record stays "published", so that
		 * the wait's end deletes whatever is there.
		 */
		if (created && zk_rc_definite(rc))
			ZKLK(e)->dl_published = false;
		dl_end(c, true);
	}
}

/* Completion of the delete of an earlier session's record: make ours */
static void
dl_stale_deleted(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(DlCheck, c, data);
	{
		ZkEntry    *e;

		c->inflight = false;
		if (c->dead || (e = dl_entry(c)) == NULL)
			dl_end(c, false);
		else if (rc == ZOK || rc == ZNONODE || rc == ZBADVERSION)
			dl_publish(c, e);	/* gone (or rewritten): create, or set again */
		else
			dl_end(c, true);
	}
	NONE_COMPLETION_END;
}

/* Completion of the record's create (zoo_acreate2) */
static void
dl_created(int rc, const char *value, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(DlCheck, c, data);
	dl_write_answered(c, rc, stat, true);
	NONE_COMPLETION_END;
}

/* Completion of the record's set */
static void
dl_set_done(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(DlCheck, c, data);
	dl_write_answered(c, rc, stat, false);
	NONE_COMPLETION_END;
}

/* Write the waiter's record: set it when it is there, else create it */
static void
dl_publish(DlCheck *c, ZkEntry *e)
{
	char		path[ZK_PATH_MAX];
	char		rec[DL_RECORD_MAX];
	char		holds[DL_HOLDS_MAX];
	bool		all;
	DlFrame    *f = &c->frames[0];
	DlRecordOut *r;
	int			rc;

	if (c->requests >= DL_REQUESTS_MAX)
	{
		dl_end(c, true);
		return;
	}
	dl_record_path(f->owner, path, sizeof(path));
	all = dl_holds_list(f->owner, holds, sizeof(holds));
	snprintf(rec, sizeof(rec),
			 "{\"zklock_wait\":1,\"lock\":\"%s\",\"node\":\"%s\",\"czxid\":" INT64_FORMAT
			 ",\"base\":\"%s\",\"every\":" INT64_FORMAT ",\"who\":\"%s\""
			 ",\"holds_all\":%d,\"holds\":\"%s\"}",
			 f->dir, f->child, f->czxid, f->base, dl_every_ms(e), f->who,
			 all ? 1 : 0, all ? holds : "");
	c->phase = DLP_PUBLISH;
	/* out from now on (or soon): before any node it names goes, it goes */
	r = dl_record_out(f->owner, true);
	r->idx = zk_entry_index(e);
	r->gen = e->gen;
	r->all = !all;
	if (ZKLK(e)->dl_published)
		rc = zoo_aset(zk_zh, path, rec, (int) strlen(rec), -1, dl_set_done, c);
	else
	{
		rc = zoo_acreate2(zk_zh, path, rec, (int) strlen(rec), zk_acl_path(path),
						  ZOO_EPHEMERAL, dl_created, c);
		if (rc == ZOK)
			ZKLK(e)->dl_published = true;	/* zk_dl_wait_over deletes it */
	}
	if (!dl_sent(c, rc))
		dl_end(c, true);
}

/* Has the check met this owner already? */
static bool
dl_seen(DlCheck *c, const char *owner)
{
	int			i;

	for (i = 0; i < c->nseen; i++)
		if (strcmp(c->seen[i], owner) == 0)
			return true;
	return false;
}

/*
 * Does the backend of this worker whose owner tag is "owner" hold the
 * contender "node" now?  A node of it that is on its way out (a call that
 * failed, a wait let go of, a create in doubt) blocks others only until the
 * worker's delete lands: no one waits for that backend through it, so a
 * cycle closed through it would be false.
 */
static bool
dl_own_hold(const char *owner, const char *node)
{
	int			i;

	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->kind == ZKK_LOCK && e->state == ZKE_HELD && !e->released &&
			pg_atomic_read_u32(&e->release_req) == 0 &&
			strcmp(e->owner_tag, owner) == 0 && strcmp(e->node, node) == 0)
			return true;
	}
	return false;
}

/*
 * Is e a live lock entry, held or waiting, that its backend has not let go
 * of?
 */
static bool
dl_live(ZkEntry *e)
{
	return e->kind == ZKK_LOCK && !e->released &&
		pg_atomic_read_u32(&e->release_req) == 0 &&
		(e->state == ZKE_HELD || e->state == ZKE_WAITING);
}

/*
 * Is "owner" a backend of this cluster (an entry of ours carries its tag)?
 * Then what its nodes stand for is known here, now, better than from its
 * record: *node_e is the entry of ours whose contender "node" is (by its
 * guid; NULL for none: a node on its way out that no entry tracks any
 * more, or none of ours), *child_e the one of "child" (may be NULL).
 */
static bool
dl_local(const char *owner, const char *node, ZkEntry **node_e,
		 const char *child, ZkEntry **child_e)
{
	bool		local = false;
	int			i;

	*node_e = NULL;
	if (child_e)
		*child_e = NULL;
	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->state == ZKE_FREE || strcmp(e->owner_tag, owner) != 0)
			continue;
		local = true;
		if (e->kind != ZKK_LOCK || e->guid[0] == '\0')
			continue;
		if (strncmp(e->guid, node, ZKLOCK_GUID_LEN) == 0)
			*node_e = e;
		if (child_e && child && strncmp(e->guid, child, ZKLOCK_GUID_LEN) == 0)
			*child_e = e;
	}
	return local;
}

/*
 * For a frame g of a backend of ours, reached through its contender "via":
 * does that backend wait with g's contender and want "via" (hold it, or wait
 * with it), now?
 */
static bool
dl_local_edge(DlFrame *g, const char *via)
{
	ZkEntry    *ve;
	ZkEntry    *ce;

	(void) dl_local(g->owner, via, &ve, g->child, &ce);
	return ve != NULL && dl_live(ve) && strcmp(ve->node, via) == 0 &&
		ce != NULL && dl_live(ce) && ce->state == ZKE_WAITING &&
		strcmp(ce->node, g->child) == 0;
}

/*
 * The contenders the backend whose owner tag is "owner" holds, for its wait
 * record ("holds": names separated by spaces, at most outlen - 1 bytes).
 * False when they do not all fit: then the record says so and a follower
 * takes any contender of the owner as held.  While the backend waits it
 * takes nothing more, so the list stays true as long as the wait.
 */
static bool
dl_holds_list(const char *owner, char *out, size_t outlen)
{
	size_t		used = 0;
	int			i;

	out[0] = '\0';
	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);
		size_t		len;

		if (e->kind != ZKK_LOCK || e->state != ZKE_HELD || e->released ||
			pg_atomic_read_u32(&e->release_req) != 0 ||
			e->node[0] == '\0' || strcmp(e->owner_tag, owner) != 0)
			continue;
		len = strlen(e->node);
		if (used + len + 2 > outlen)
			return false;
		if (used > 0)
			out[used++] = ' ';
		memcpy(out + used, e->node, len + 1);
		used += len;
		ZKLK(e)->dl_listed = true;	/* its delete deletes the record first */
	}
	return true;
}

/* Is "node" one of the space-separated names of "list"? */
static bool
dl_listed_in(const char *list, const char *node)
{
	size_t		len = strlen(node);
	const char *p = list;

	while ((p = strstr(p, node)) != NULL)
	{
		if ((p == list || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0'))
			return true;
		p += len;
	}
	return false;
}

/*
 * Completion of the listing of the top frame's lock: the owners of what
 * blocks its waiter
 */
static void
dl_listed(int rc, const struct String_vector *kids, const void *data)
{
	DATA_COMPLETION_BEGIN(DlCheck, c, data);
	{
		DlFrame    *f = &c->frames[c->depth - 1];
		ZkContender *con;
		int		   *blk;
		int			n = 0;
		int			me = -1;
		int			nb;
		int			i;
		bool		wrapped = false;

		c->inflight = false;
		if (c->dead || dl_entry(c) == NULL)
		{
			dl_end(c, false);
			goto done;
		}
		f->nowners = 0;
		f->next = 0;
		if (rc == ZOK && kids->count > 0)
		{
			con = palloc(sizeof(ZkContender) * kids->count);
			blk = palloc(sizeof(int) * DL_FANOUT_MAX * 4);
			for (i = 0; i < kids->count; i++)
			{
				int64		seq;

				if (!zk_node_is_contender(kids->data[i], &con[n].shared) ||
					!zk_node_seq(kids->data[i], &seq))
					continue;
				if (seq < 0)
					wrapped = true;
				con[n].name = kids->data[i];
				con[n].key = seq;
				n++;
			}
			zk_sort_contenders(con, n);
			for (i = 0; i < n; i++)
				if (strcmp(con[i].name, f->child) == 0)
					me = i;
			if (!wrapped && me >= 0)
			{
				nb = zk_lock_blockers(con, n, me, f->base, blk, DL_FANOUT_MAX * 4);
				for (i = 0; i < Min(nb, DL_FANOUT_MAX * 4); i++)
				{
					const char *b = con[blk[i]].name;
					char		owner[DL_TAG_LEN + 1];
					int			k;
					bool		dup = false;

					if (strlen(b) < DL_TAG_LEN)
						continue;
					strlcpy(owner, b, sizeof(owner));
					for (k = 0; k < f->nowners; k++)
						if (strcmp(f->owners[k], owner) == 0)
						{
							/* of our own backend: through a node it holds */
							if (strcmp(owner, c->frames[0].owner) == 0 &&
								!dl_own_hold(owner, f->via[k]) &&
								dl_own_hold(owner, b))
								strlcpy(f->via[k], b, sizeof(f->via[0]));
							dup = true;
						}
					if (dup || f->nowners >= DL_FANOUT_MAX)
						continue;
					strlcpy(f->owners[f->nowners], owner, sizeof(f->owners[0]));
					strlcpy(f->via[f->nowners], b, sizeof(f->via[0]));
					f->nowners++;
				}
			}
			pfree(blk);
			pfree(con);
		}
		/* a frame we cannot read (gone, wrapped, an error): a dead end */
		c->phase = DLP_RECORD;
		dl_step(c);
done:	;
	}
	NONE_COMPLETION_END;
}

/* Parse an integer field of a record; false without it */
static bool
dl_int_field(const char *json, int len, const char *key, int64 *v)
{
	char		buf[32];
	char	   *end;

	if (!zk_json_field(json, len, key, buf, sizeof(buf)) || buf[0] == '\0')
		return false;
	errno = 0;
	*v = strtoll(buf, &end, 10);
	return errno == 0 && *end == '\0';
}

/*
 * Does the owner of the record "value" (read into g) block through "via":
 * its waiting contender, an upgrade's shared node, or one it holds?  A
 * record without the full list of holds ("holds_all" not 1) takes any.
 * With the full list, an empty one ("holds":"", a waiter that holds
 * nothing; zk_json_field reports an empty value as absent) takes none: a
 * node of that owner on its way out (a failed call's, a released hold's,
 * one of its worker's earlier session not expired yet) is no edge.
 */
static bool
dl_via_held(const char *value, int value_len, DlFrame *g, const char *via)
{
	char		holds[DL_HOLDS_MAX];
	int64		all;

	if (strcmp(via, g->child) == 0 || strcmp(via, g->base) == 0)
		return true;
	if (!dl_int_field(value, value_len, "holds_all", &all) || all != 1)
		return true;
	if (!zk_json_field(value, value_len, "holds", holds, sizeof(holds)))
		return false;			/* holds nothing */
	return dl_listed_in(holds, via);
}

/*
 * Completion of the read of a blocking owner's wait record: a fresh one
 * naming a contender of that owner is followed (a new frame)
 */
static void
dl_record_read(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(DlCheck, c, data);
	{
		DlFrame    *f = &c->frames[c->depth - 1];
		const char *owner = f->owners[f->next - 1];
		int64		czxid;
		int64		every;
		DlFrame    *g;
		ZkEntry    *ve;

		c->inflight = false;
		if (c->dead || dl_entry(c) == NULL)
		{
			dl_end(c, false);
			goto done;
		}
		if (rc == ZOK && value != NULL && value_len > 0 && value_len < DL_RECORD_MAX &&
			c->depth < DL_DEPTH_MAX &&
			dl_int_field(value, value_len, "czxid", &czxid) &&
			dl_int_field(value, value_len, "every", &every) &&
			every > 0 && stat->mtime >= c->now_ms - (2 * every + 1000) &&
			stat->ephemeralOwner != 0)
		{
			g = &c->frames[c->depth];
			memset(g, 0, sizeof(DlFrame));
			if (zk_json_field(value, value_len, "lock", g->dir, sizeof(g->dir)) &&
				zk_json_field(value, value_len, "node", g->child, sizeof(g->child)) &&
				zk_json_field(value, value_len, "who", g->who, sizeof(g->who)) &&
				strncmp(g->child, owner, DL_TAG_LEN) == 0 &&
				strncmp(g->dir, zk_root, strlen(zk_root)) == 0)
			{
				/* a record names a contender of its own owner, under our root */
				if (!zk_json_field(value, value_len, "base", g->base, sizeof(g->base)))
					g->base[0] = '\0';	/* not an upgrade */

				/*
				 * ... and blocks f's waiter through a node it waits with or
				 * holds (the record's "holds", when they all fit), not one
				 * on its way out
				 */
				strlcpy(g->owner, owner, sizeof(g->owner));
				g->local = dl_local(owner, f->via[f->next - 1], &ve, NULL, NULL);
				if (dl_via_held(value, value_len, g, f->via[f->next - 1]) &&
					(!g->local || dl_local_edge(g, f->via[f->next - 1])))
				{
					g->czxid = czxid;
					g->rec_mzxid = stat->mzxid;
					g->rec_session = stat->ephemeralOwner;
					f->edge = f->next - 1;
					c->depth++;
					c->phase = DLP_LIST;
				}
			}
		}
		dl_step(c);
done:	;
	}
	NONE_COMPLETION_END;
}

/*
 * Completion of an exists of the cycle's contenders: a frame's waiting
 * contender (part 0) or the node it waits for (part 1), each of the owner
 * whose record was followed.  Another cluster's owner's node must come from
 * the session that wrote that owner's record: a node of the same owner tag
 * left by its worker's earlier session (given up, not expired yet) is held
 * by no one (a record that does not list every hold takes any node of its
 * owner, so this is where such a leftover is told apart).
 */
static void
dl_verified(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(DlCheck, c, data);
	{
		int			k = c->verify_next / 3;
		int			t = (c->verify_next % 3 == 0) ? k : (k + 1) % c->depth;
		DlFrame    *o = &c->frames[t];

		c->inflight = false;
		if (c->dead || dl_entry(c) == NULL)
			dl_end(c, false);
		else if (rc != ZOK || stat == NULL)
			dl_end(c, true);	/* gone: the cycle broke, or was never one */
		else if (t != 0 && !o->local && stat->ephemeralOwner != o->rec_session)
			dl_end(c, true);	/* a leftover of another session: no edge */
		else
		{
			c->verify_next++;
			dl_step(c);
		}
	}
	NONE_COMPLETION_END;
}

/*
 * Does the record "value" (read again) still say what frame g was followed
 * from: its owner waits with g's contender on g's lock, and blocks the
 * frame before it through "via"?  (A rewrite at its owner's next check
 * says so again: that owner's worker found it waiting then.)
 */
static bool
dl_record_same(const char *value, int value_len, DlFrame *g, const char *via)
{
	char		dir[ZK_PATH_MAX];
	char		child[ZKLOCK_NODE_MAX + 1];

	return value != NULL && value_len > 0 && value_len < DL_RECORD_MAX &&
		zk_json_field(value, value_len, "lock", dir, sizeof(dir)) &&
		zk_json_field(value, value_len, "node", child, sizeof(child)) &&
		strcmp(dir, g->dir) == 0 && strcmp(child, g->child) == 0 &&
		dl_via_held(value, value_len, g, via);
}

/*
 * Completion of the second read of a cycle member's record: the same write
 * as the one followed, or one that says the same, or the cycle is not taken
 */
static void
dl_reread(int rc, const char *value, int value_len,
		  const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(DlCheck, c, data);
	{
		int			k = c->verify_next / 3;
		DlFrame    *g = &c->frames[k];
		DlFrame    *p = &c->frames[k - 1];

		c->inflight = false;
		if (c->dead || dl_entry(c) == NULL)
			dl_end(c, false);
		else if (rc != ZOK || stat == NULL ||
				 stat->ephemeralOwner != g->rec_session ||
				 (stat->mzxid != g->rec_mzxid &&
				  !dl_record_same(value, value_len, g, p->via[p->edge])))
			dl_end(c, true);	/* gone or changed: its wait moved or ended */
		else
		{
			c->verify_next++;
			dl_step(c);
		}
	}
	NONE_COMPLETION_END;
}

/*
 * Does every member of the cycle that is a backend of ours still wait as
 * the cycle says, and want the node through which the one before it waits
 * for it?  Asked right before the verdict: what our own backends have let
 * go of is known here at once, before ZooKeeper hears of it.
 */
static bool
dl_cycle_live(DlCheck *c)
{
	int			k;

	for (k = 0; k < c->depth; k++)
	{
		DlFrame    *f = &c->frames[k];
		DlFrame    *to = &c->frames[(k + 1) % c->depth];
		const char *via = f->via[f->edge];

		if (to == &c->frames[0])
		{
			if (!dl_own_hold(to->owner, via))
				return false;
		}
		else if (to->local && !dl_local_edge(to, via))
			return false;
	}
	return true;
}

/*
 * The cycle is real: the youngest waiter of it is the victim.  If that is
 * ours, say so (the detail names each waiter and what blocks it, as
 * PostgreSQL does) and refuse the wait.
 */
static void
dl_cycle(DlCheck *c, ZkEntry *e)
{
	int			victim = 0;
	int			i;
	char		detail[ZKLOCK_ERRMSG_MAX];
	StringInfoData buf;

	for (i = 1; i < c->depth; i++)
		if (c->frames[i].czxid > c->frames[victim].czxid)
			victim = i;
	if (victim != 0 || dl_verdict == NULL)
	{
		dl_end(c, true);
		return;
	}
	initStringInfo(&buf);
	for (i = 0; i < c->depth; i++)
	{
		DlFrame    *f = &c->frames[i];
		DlFrame    *to = &c->frames[(i + 1) % c->depth];
		const char *enc = strrchr(f->dir, '/');
		char		name[ZKLOCK_QNAME_MAX + 1];
		int			n = zk_decode_qname(enc ? enc + 1 : f->dir, name, sizeof(name) - 1);

		name[Max(n, 0)] = '\0';
		appendStringInfo(&buf, "%s%s waits for zookeeper lock \"%s\"; blocked by %s.",
						 i > 0 ? " " : "", f->who, zk_display_name(name), to->who);
	}
	strlcpy(detail, buf.data, sizeof(detail));
	pfree(buf.data);
	dl_end(c, false);
	dl_verdict(e, detail);
}

/*
 * The next request of a check, from its phase: list the top frame's lock,
 * read the next blocking owner's record (or back up a frame when none is
 * left), or read the next contender of a cycle found.
 */
static void
dl_step(DlCheck *c)
{
	ZkEntry    *e = dl_entry(c);
	char		path[ZK_PATH_MAX];

	if (e == NULL || !zk_session_usable() || c->requests >= DL_REQUESTS_MAX)
	{
		dl_end(c, e != NULL);
		return;
	}
	for (;;)
	{
		DlFrame    *f = &c->frames[c->depth - 1];

		switch (c->phase)
		{
			case DLP_LIST:
				if (!dl_sent(c, zoo_aget_children(zk_zh, f->dir, 0, dl_listed, c)))
					dl_end(c, true);
				return;
			case DLP_RECORD:
				if (f->next >= f->nowners)
				{
					/* every owner of this frame followed: back up */
					if (--c->depth == 0)
					{
						dl_end(c, true);	/* no cycle through us */
						return;
					}
					continue;
				}
				if (strcmp(f->owners[f->next], c->frames[0].owner) == 0 &&
					!dl_own_hold(f->owners[f->next], f->via[f->next]))
				{
					/* back to us through a node on its way out: no edge */
					f->next++;
					continue;
				}
				if (strcmp(f->owners[f->next], c->frames[0].owner) == 0)
				{
					/* back to us: a cycle, frames[0..depth-1] */
					f->edge = f->next;
					c->phase = DLP_VERIFY;
					c->verify_next = 0;
					continue;
				}
				if (dl_seen(c, f->owners[f->next]) ||
					c->nseen >= (int) lengthof(c->seen))
				{
					f->next++;
					continue;
				}
				strlcpy(c->seen[c->nseen++], f->owners[f->next], sizeof(c->seen[0]));
				dl_record_path(f->owners[f->next], path, sizeof(path));
				f->next++;
				if (!dl_sent(c, zoo_aget(zk_zh, path, 0, dl_record_read, c)))
					dl_end(c, true);
				return;
			case DLP_VERIFY:
				{
					/*
					 * each frame's waiter, the contender it waits for, then
					 * (another cluster's member) its record again
					 */
					int			k = c->verify_next / 3;
					int			part = c->verify_next % 3;
					DlFrame    *g = &c->frames[k];

					if (k >= c->depth)
					{
						if (dl_cycle_live(c))
							dl_cycle(c, e);
						else
							dl_end(c, true);
						return;
					}
					if (part == 2)
					{
						if (k == 0 || g->local)
						{
							c->verify_next++;	/* known here: dl_cycle_live */
							continue;
						}
						dl_record_path(g->owner, path, sizeof(path));
						if (!dl_sent(c, zoo_aget(zk_zh, path, 0, dl_reread, c)))
							dl_end(c, true);
						return;
					}
					snprintf(path, sizeof(path), "%s/%s", g->dir,
							 part == 0 ? g->child : g->via[g->edge]);
					if (!dl_sent(c, zoo_aexists(zk_zh, path, 0, dl_verified, c)))
						dl_end(c, true);
					return;
				}
			default:
				dl_end(c, true);
				return;
		}
	}
}

/*
 * A check is over: free it (later, if a request of it is still out), and
 * when asked put its waiter back on the heap for the next check
 */
static void
dl_end(DlCheck *c, bool recheck)
{
	ZkEntry    *e = c->dead ? NULL : dl_entry(c);

	if (e != NULL)
	{
		ZKLK(e)->dl_checking = false;
		if (recheck)
		{
			if (ZKLK(e)->dl_round < 30)
				ZKLK(e)->dl_round++;
			dl_schedule(e);
		}
	}
	if (c->inflight)
	{
		c->dead = true;			/* its completion frees it */
		return;
	}
	dl_checks = list_delete_ptr(dl_checks, c);
	pfree(c);
}

/* Begin a check of e: its own frame, then its record */
static void
dl_start(ZkEntry *e)
{
	DlCheck    *c = MemoryContextAllocZero(TopMemoryContext, sizeof(DlCheck));
	DlFrame    *f = &c->frames[0];
	MemoryContext old;

	c->idx = zk_entry_index(e);
	c->gen = e->gen;
	c->depth = 1;
	zk_lock_parent(e->name, e->family, f->dir, sizeof(f->dir));
	strlcpy(f->child, e->node, sizeof(f->child));
	strlcpy(f->base, ZKLK(e)->base, sizeof(f->base));
	strlcpy(f->owner, e->node, sizeof(f->owner));
	dl_who(e->data, f->who, sizeof(f->who));
	f->czxid = e->token;
	old = MemoryContextSwitchTo(TopMemoryContext);
	dl_checks = lappend(dl_checks, c);
	MemoryContextSwitchTo(old);
	ZKLK(e)->dl_checking = true;
	dl_publish(c, e);
}

/*
 * Every turn the session is usable (the lock's turn op): start the checks
 * that are due, a few at a time, and ask for a turn when the next one is.
 * verdict refuses a wait found in a cycle (lock_worker.c).
 */
void
zk_dl_turn(ZkDlVerdict verdict)
{
	TimestampTz now;
	int			started = 0;

	dl_verdict = verdict;
	if (dl_heap == NULL || binaryheap_empty(dl_heap) || !zk_session_usable())
		return;
	now = GetCurrentTimestamp();
	while (!binaryheap_empty(dl_heap))
	{
		DlDue	   *d = (DlDue *) DatumGetPointer(binaryheap_first(dl_heap));
		ZkEntry    *e;

		if (d->due > now)
		{
			zk_worker_wake_by(d->due);
			break;
		}
		if (list_length(dl_checks) >= DL_CHECKS_MAX || started >= DL_STARTS_PER_TURN)
		{
			zk_worker_wake_by(TimestampTzPlusMilliseconds(now, 10));
			break;
		}
		(void) binaryheap_remove_first(dl_heap);
		e = zk_entry(d->idx);
		if (e->gen == d->gen && e->kind == ZKK_LOCK)
			ZKLK(e)->dl_scheduled = false;
		if (e->gen == d->gen && e->kind == ZKK_LOCK && e->state == ZKE_WAITING &&
			!e->released && pg_atomic_read_u32(&e->release_req) == 0 &&
			!ZKLK(e)->dl_checking && e->node[0] != '\0')
		{
			dl_start(e);
			started++;
		}
		pfree(d);
	}
}

/*
 * The session ended: its records went with it, and the checks' requests
 * are answered with errors (their completions free them); the waiters are
 * asked again from scratch when they wait in the next session
 */
void
zk_dl_session_reset(void)
{
	ListCell   *lc;

	List	   *idle = NIL;

	foreach(lc, dl_checks)
	{
		DlCheck    *c = (DlCheck *) lfirst(lc);
		ZkEntry    *e = zk_entry(c->idx);

		if (e->gen == c->gen && e->kind == ZKK_LOCK)
		{
			ZKLK(e)->dl_checking = false;
			ZKLK(e)->dl_published = false;
		}
		c->dead = true;
		if (!c->inflight)
			idle = lappend(idle, c);
	}
	foreach(lc, idle)
	{
		dl_checks = list_delete_ptr(dl_checks, lfirst(lc));
		pfree(lfirst(lc));
	}
	list_free(idle);
	/* the records went with the session */
	if (dl_records != NULL)
	{
		hash_destroy(dl_records);
		dl_records = NULL;
	}
	while (dl_heap != NULL && !binaryheap_empty(dl_heap))
	{
		DlDue	   *d = (DlDue *) DatumGetPointer(binaryheap_remove_first(dl_heap));
		ZkEntry    *e = zk_entry(d->idx);

		if (e->gen == d->gen && e->kind == ZKK_LOCK)
		{
			ZKLK(e)->dl_scheduled = false;
			ZKLK(e)->dl_published = false;
		}
		pfree(d);
	}
}
