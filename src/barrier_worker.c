/*-------------------------------------------------------------------------
 *
 * barrier_worker.c
 *	  The barrier recipes' worker half: waits for gates and arrivals
 *	  (ZKK_BWAIT), double barrier members (ZKK_BMEMBER), and one-off reads
 *	  of arrivals (ZKK_BINFO).
 *
 *	  Waits share one watched object per gate, arrivals node or barrier:
 *	  one probe (an exists or a children listing, with a watch) answers
 *	  every local waiter, so waiting costs one watch per object and
 *	  cluster, and all waiters it satisfies wake together.  A waiter is let
 *	  through only by what a probe read, never by an event alone, so a
 *	  spurious wake-up or a reconnect re-reads and re-counts.
 *
 *	  A barrier opens for a member when the members present (children
 *	  other than "ready") reach its parties, or when "ready" was created
 *	  after the member joined (the barrier opened while it waited).  A
 *	  "ready" older than the member is a leftover and opens nothing; the
 *	  first member that counts enough replaces it.
 *
 *	  Leaving is herd-free (kazoo's DoubleBarrier order): the member with
 *	  the lowest name watches the highest, the others delete their node
 *	  and watch the lowest.
 *
 *	  Everything here runs in the worker with zk_ctl->lock held.
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "trust.h"
#include "barrier.h"
#include "queue.h"

#include "lib/stringinfo.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

/* ------------------------------------------------------------------------
 * Watched objects
 * ------------------------------------------------------------------------
 */
typedef struct BObj
{
	char		path[ZK_PATH_MAX];	/* hash key */
	uint8		op;				/* ZKB_GATE, ZKB_ARRIVALS or ZKB_ENTER */
	int			nw;				/* waiters */
	int			cap;
	uint32	   *widx;
	uint32	   *wgen;
	bool		probing;		/* a probe is in flight */
	bool		again;			/* probe again when it returns */
	bool		watching;		/* a watch of ours may be set on path */
	bool		retry;			/* probe once the session is usable */
	/* the last probe of a barrier */
	int			members;
	int64		ready_czxid;	/* 0: no ready */
	int32		ready_version;
	bool		rwatching;		/* an exists watch of ours may be set on
								 * ready (see barrier_ready_event) */
	int			rinflight;		/* exists requests on ready not answered */
	bool		recheck;		/* on idle_checks */
	TimestampTz idle_since;
	uint32		id;				/* names it to ZooKeeper (obj_ctx) */
	TimestampTz last_used;		/* last looked up for an entry */
} BObj;

/* byid: an object's id to where it is now */
typedef struct BObjRef
{
	uint32		id;				/* hash key */
	BObj	   *o;
} BObjRef;

static HTAB *objs = NULL;
static HTAB *byid = NULL;
static uint32 next_id = 0;
static long objs_peak = 0;		/* objects at once since the last rebuild */
static bool any_retry = false;
static uint64 swept_connects = 0;
static List *idle_checks = NIL;	/* ids (Oid list): look again once idle */

#define IDLE_RECHECK_MS		2000
#define IDLE_RECHECKS_PER_TURN	64

/*
 * Forgetting idle objects (issue 23).  An object is a cache of one gate,
 * arrivals node or barrier: one that comes back after being forgotten is
 * probed again.  Without forgetting, a worker that served many names (one
 * per job, say) kept every one for ever (40,000 gate names: 77 MB).  ZooKeeper
 * never sees a BObj's address: its watches and completions carry the
 * object's id (obj_ctx), looked up in byid (obj_by_ctx); an answer or
 * event for an object forgotten meanwhile finds nothing and is dropped.
 * Every B_FORGET_SWEEP_MS an object is forgotten that has had no waiter, no
 * probe, no exists on ready in flight and no idle recheck pending for
 * B_FORGET_IDLE_MS; its watches were taken off by that recheck.  dynahash
 * keeps the memory of removed entries, so once the objects are down to a
 * quarter of their peak both tables move to a new memory context (at most
 * B_FORGET_PER_SWEEP objects are looked at per sweep) and the old one is
 * freed.
 */
#define B_FORGET_SWEEP_MS	5000
#define B_FORGET_IDLE_MS	10000
#define B_FORGET_PER_SWEEP	100000
static MemoryContext b_cxt = NULL;
static MemoryContext objs_cxt = NULL;	/* objs, byid and the waiter arrays */

/* The context that names o to ZooKeeper: its id, never its address */
static inline void *
obj_ctx(BObj *o)
{
	return (void *) (uintptr_t) o->id;
}

/* the object a watch or completion names, or NULL if forgotten */
static BObj *
obj_by_ctx(const void *ctx)
{
	uint32		id = (uint32) (uintptr_t) ctx;
	BObjRef    *r;

	if (byid == NULL)
		return NULL;
	r = hash_search(byid, &id, HASH_FIND, NULL);
	return r ? r->o : NULL;
}

static void obj_probe(BObj *o);
static int	barrier_watch_ready(BObj *o);
static void obj_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx);
static void barrier_ready_event(zhandle_t *h, int type, int state, const char *path, void *ctx);

/* The barriers' memory context, made on first use (objs_cxt is its child) */
static MemoryContext
b_context(void)
{
	if (b_cxt == NULL)
		b_cxt = AllocSetContextCreate(TopMemoryContext, "zklock barriers",
									  ALLOCSET_DEFAULT_SIZES);
	return b_cxt;
}

/*
 * The path of the gate, arrivals node or barrier "name" (encoded) under
 * <root>/<what>; what is "gates", "arrivals" or "barriers".
 */
void
zk_barrier_path(const char *what, const char *name, char *out, size_t outlen)
{
	char		ename[ZKLOCK_ENAME_MAX + 1];

	zk_encode_name(name, strlen(name), ename);
	snprintf(out, outlen, "%s/%s/%s", zk_root, what, ename);
}

/* The directory under the root that holds the objects of operation op */
static const char *
op_dir(int op)
{
	switch (op)
	{
		case ZKB_GATE:
			return "gates";
		case ZKB_ARRIVALS:
		case ZKB_LIST:
		case ZKB_RESET:
			return "arrivals";
		default:
			return "barriers";
	}
}

/* Make both tables, objs (by path) and byid (by id), in a new objs_cxt */
static void
objs_create(void)
{
	HASHCTL		ctl;

	objs_cxt = AllocSetContextCreate(b_context(), "zklock barrier objects",
									 ALLOCSET_DEFAULT_SIZES);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = ZK_PATH_MAX;
	ctl.entrysize = sizeof(BObj);
	ctl.hcxt = objs_cxt;
	objs = hash_create("zklock barrier objects", 32, &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(uint32);
	ctl.entrysize = sizeof(BObjRef);
	ctl.hcxt = objs_cxt;
	byid = hash_create("zklock barrier object ids", 32, &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	objs_peak = 0;
}

/*
 * The object of (op, name), made with a fresh id and nothing known about it
 * if it is new (a forgotten one comes back so and is probed again).  Marks
 * it used now.
 */
static BObj *
obj_get(int op, const char *name)
{
	char		key[ZK_PATH_MAX];
	bool		found;
	BObj	   *o;

	if (objs == NULL)
		objs_create();
	memset(key, 0, sizeof(key));
	zk_barrier_path(op_dir(op), name, key, sizeof(key));
	o = hash_search(objs, key, HASH_ENTER, &found);
	if (!found)
	{
		BObjRef    *r;
		bool		taken;

		/* a fresh id (one still in use after a wrap is skipped) */
		do
		{
			if (++next_id == 0)
				next_id = 1;
			r = hash_search(byid, &next_id, HASH_ENTER, &taken);
		} while (taken);
		r->o = o;
		o->id = next_id;
		o->recheck = false;
		o->rinflight = 0;
		o->idle_since = 0;
		objs_peak = Max(objs_peak, hash_get_num_entries(objs));
		o->op = op;
		o->nw = 0;
		o->cap = 0;
		o->widx = o->wgen = NULL;
		o->probing = o->again = o->watching = o->retry = false;
		o->members = 0;
		o->ready_czxid = 0;
		o->ready_version = -1;
		o->rwatching = false;
	}
	o->last_used = GetCurrentTimestamp();
	return o;
}

/* Add e to o's waiters, unless it is one already */
static void
obj_add(BObj *o, ZkEntry *e)
{
	int			i;

	for (i = 0; i < o->nw; i++)
		if (o->widx[i] == zk_entry_index(e) && o->wgen[i] == e->gen)
			return;
	if (o->nw == o->cap)
	{
		int			cap = Max(8, o->cap * 2);
		MemoryContext old = MemoryContextSwitchTo(objs_cxt);

		o->widx = o->widx ? repalloc(o->widx, cap * sizeof(uint32)) : palloc(cap * sizeof(uint32));
		o->wgen = o->wgen ? repalloc(o->wgen, cap * sizeof(uint32)) : palloc(cap * sizeof(uint32));
		o->cap = cap;
		MemoryContextSwitchTo(old);
	}
	o->widx[o->nw] = zk_entry_index(e);
	o->wgen[o->nw] = e->gen;
	o->nw++;
}

/*
 * Nobody waits on o any more: take off its watches (the one on ready only
 * when no exists on ready is in flight), and put it on idle_checks, whose
 * recheck catches any watch this misses.
 */
static void
obj_unwatch(BObj *o)
{
	/* whatever happens below, look again once it has been idle a while */
	if (!o->recheck)
	{
		MemoryContext old = MemoryContextSwitchTo(b_context());

		o->recheck = true;
		o->idle_since = GetCurrentTimestamp();
		idle_checks = lappend_oid(idle_checks, o->id);
		MemoryContextSwitchTo(old);
	}

	/*
	 * Not while an exists on ready is in flight: the removal would reach
	 * ZooKeeper after it and take off the watch a member's create just
	 * set; the last answer (ready_armed) takes it off if still unwanted.
	 */
	if (o->rwatching && o->rinflight == 0)
	{
		if (zk_zh != NULL)
		{
			char		rpath[ZK_PATH_MAX];

			snprintf(rpath, sizeof(rpath), "%s/%s", o->path, ZKB_READY);
			(void) zoo_aremove_all_watches(zk_zh, rpath, ZWATCHTYPE_ANY, 0,
										   (void_completion_t *) zk_unwatch_done, NULL);
		}
		o->rwatching = false;
	}
	if (!o->watching || zk_zh == NULL)
	{
		o->watching = false;
		return;
	}
	o->watching = false;
	/* the library takes the completion pointer itself as the function */
	(void) zoo_aremove_all_watches(zk_zh, o->path, ZWATCHTYPE_ANY, 0,
								   (void_completion_t *) zk_unwatch_done, NULL);
}

/* Drop e from its object's waiters (and the watch with the last of them) */
static void
obj_remove_entry(BObj *o, ZkEntry *e)
{
	int			i;

	for (i = 0; i < o->nw; i++)
		if (o->widx[i] == zk_entry_index(e) && o->wgen[i] == e->gen)
		{
			o->widx[i] = o->widx[o->nw - 1];
			o->wgen[i] = o->wgen[o->nw - 1];
			o->nw--;
			break;
		}
	if (o->nw == 0 && !o->probing)
		obj_unwatch(o);
}

/* The object e waits on: its barrier for a member, else by its step */
static BObj *
obj_of(ZkEntry *e)
{
	int			op = e->kind == ZKK_BMEMBER ? ZKB_ENTER : e->step.barrier;

	return obj_get(op, e->name);
}

/* The live waiter at position i, or NULL (and dropped) */
static ZkEntry *
obj_waiter(BObj *o, int i)
{
	ZkEntry    *e = zk_entry(o->widx[i]);

	if (e->gen != o->wgen[i] || e->state == ZKE_FREE || e->released ||
		e->outcome != ZKO_NONE)
		return NULL;
	return e;
}

/* Drop the waiters that are gone, answered or let go */
static void
obj_compact(BObj *o)
{
	int			i = 0;

	while (i < o->nw)
	{
		if (obj_waiter(o, i) == NULL)
		{
			o->widx[i] = o->widx[o->nw - 1];
			o->wgen[i] = o->wgen[o->nw - 1];
			o->nw--;
		}
		else
			i++;
	}
}

/*
 * Something may have changed about o: probe it now, or when the probe in
 * flight returns (again), or once the session is usable (retry).  With no
 * waiter left it drops its watches instead.
 */
static void
obj_kick(BObj *o)
{
	obj_compact(o);
	if (o->nw == 0)
	{
		if (!o->probing)
			obj_unwatch(o);
		return;
	}
	if (o->probing)
	{
		o->again = true;
		return;
	}
	if (!zk_session_usable())
	{
		o->retry = true;
		any_retry = true;
		return;
	}
	obj_probe(o);
}

/*
 * Watcher of the zoo_awexists sent by arrivals_probed() and obj_probe(); the
 * zoo_awget_children sent by obj_probe()
 */
static void
obj_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	ZkEntry    *volatile none = NULL;
	BObj	   *o = obj_by_ctx(ctx);

	if (type == ZOO_SESSION_EVENT || type == ZOO_NOTWATCHING_EVENT)
		return;
	if (o == NULL)
		return;					/* forgotten meanwhile (obj_by_ctx) */
	COMPLETION_BEGIN
	{
		zk_count(ZKCNT_WATCH_EVENTS, 1);
		o->watching = false;
		obj_kick(o);
	}
	COMPLETION_END(none);
}

/* The probe failed without an answer: again when the session is usable */
static void
obj_probe_failed(BObj *o, int rc)
{
	o->probing = false;
	o->again = false;
	if (!zk_rc_definite(rc))
	{
		o->retry = true;
		any_retry = true;
		return;
	}
	/* a verdict we cannot use: fail the waiters rather than hang them */
	{
		int			i;
		char		msg[ZKLOCK_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "ZooKeeper refused to read %s: %s", o->path, zerror(rc));
		for (i = 0; i < o->nw; i++)
		{
			ZkEntry    *e = obj_waiter(o, i);

			if (e != NULL)
				zk_fail(e, ERRCODE_CONNECTION_FAILURE, msg);
		}
		obj_compact(o);
		if (o->nw == 0)
			obj_unwatch(o);
	}
}

/* After a probe's answer: probe again if asked, or drop the watch */
static void
obj_probe_end(BObj *o)
{
	o->probing = false;
	obj_compact(o);
	if (o->nw == 0)
	{
		o->again = false;
		obj_unwatch(o);
		return;
	}
	if (o->again)
	{
		o->again = false;
		obj_kick(o);
	}
}

/* ---- gates ---- */

/* Completion of the zoo_awexists sent by obj_probe() */
static void
gate_probed(int rc, const struct Stat *stat, const void *data)
{
	ZkEntry    *volatile none = NULL;
	BObj	   *o = obj_by_ctx(data);

	if (o == NULL)
		return;					/* forgotten meanwhile (obj_by_ctx) */
	COMPLETION_BEGIN
	{
		if (rc == ZOK || rc == ZNONODE)
		{
			int			i;

			o->watching = true;
			for (i = 0; i < o->nw; i++)
			{
				ZkEntry    *e = obj_waiter(o, i);

				if (e == NULL)
					continue;
				if (rc == ZNONODE)
					zk_finish(e, ZKO_GRANTED, 0, NULL);
				else if (e->try_only)
					zk_finish(e, ZKO_BUSY, 0, NULL);
			}
			obj_probe_end(o);
		}
		else
			obj_probe_failed(o, rc);
	}
	COMPLETION_END(none);
}

/* ---- arrivals ---- */

/*
 * Answer o's waiters from a count of arrivals: granted once the count
 * reaches a waiter's parties, busy for a try that it does not.
 */
static void
arrivals_answer(BObj *o, int count)
{
	int			i;

	for (i = 0; i < o->nw; i++)
	{
		ZkEntry    *e = obj_waiter(o, i);

		if (e == NULL)
			continue;
		if (count >= e->parties)
			zk_finish(e, ZKO_GRANTED, 0, NULL);
		else if (e->try_only)
			zk_finish(e, ZKO_BUSY, 0, NULL);
	}
}

/* Completion of the zoo_awexists sent by arrivals_probed() */
static void
arrivals_dir_probed(int rc, const struct Stat *stat, const void *data)
{
	ZkEntry    *volatile none = NULL;
	BObj	   *o = obj_by_ctx(data);

	if (o == NULL)
		return;					/* forgotten meanwhile (obj_by_ctx) */
	COMPLETION_BEGIN
	{
		if (rc == ZNONODE)
		{
			/* still nobody: the exists watch tells of the first arrival */
			o->watching = true;
			arrivals_answer(o, 0);
			obj_probe_end(o);
		}
		else if (rc == ZOK)
		{
			/* created meanwhile: count its children */
			o->watching = true;
			o->again = true;
			obj_probe_end(o);
		}
		else
			obj_probe_failed(o, rc);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_awget_children sent by obj_probe() */
static void
arrivals_probed(int rc, const struct String_vector *sv, const void *data)
{
	ZkEntry    *volatile none = NULL;
	BObj	   *o = obj_by_ctx(data);

	if (o == NULL)
		return;					/* forgotten meanwhile (obj_by_ctx) */
	COMPLETION_BEGIN
	{
		if (rc == ZOK)
		{
			o->watching = true;
			arrivals_answer(o, sv ? sv->count : 0);
			obj_probe_end(o);
		}
		else if (rc == ZNONODE && zk_session_usable())
		{
			if (zoo_awexists(zk_zh, o->path, obj_watcher, obj_ctx(o), arrivals_dir_probed, obj_ctx(o)) != ZOK)
				obj_probe_failed(o, ZCONNECTIONLOSS);
		}
		else
			obj_probe_failed(o, rc);
	}
	COMPLETION_END(none);
}

/* ---- barriers: entering ---- */

static void barrier_evaluate(BObj *o);

/*
 * The opening of a barrier, seen by every member counted in it.  The
 * member that counts enough creates "ready"; a member that enters and
 * leaves at once deletes it again (leaving starts so, as in kazoo), and
 * then its own node.  A waiting member that learned of the change only by
 * listing the children again could find neither "ready" nor enough
 * members, and miss the opening.  So each probe of a barrier also sets an
 * exists watch on "ready", and whatever ready became afterwards:
 *
 * - its creation event opens every waiting member whose node's create has
 *   been answered: ZooKeeper sends a session the answers to requests it
 *   applied before a change ahead of that change's event, so those nodes
 *   are older than ready, and the barrier opened while they waited;
 * - an answer that finds ready there opens the members older than it (the
 *   rule of the listing: a ready older than a member is a leftover).
 *
 * Members that joined later are answered by the listing, as before.
 */
static void
open_older_than(BObj *o, int64 czxid)
{
	int			i;

	for (i = 0; i < o->nw; i++)
	{
		ZkEntry    *e = obj_waiter(o, i);

		if (e == NULL || e->step.barrier != ZKB_ENTER || e->node[0] == '\0' ||
			e->token == 0 || (czxid != 0 && e->token >= czxid))
			continue;
		e->step.barrier = ZKB_MEMBER;
		e->state = ZKE_HELD;
		zk_finish(e, ZKO_GRANTED, 0, NULL);
	}
}

/* Watcher of the zoo_awexists sent by barrier_watch_ready() */
static void
barrier_ready_event(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	ZkEntry    *volatile none = NULL;
	BObj	   *o = obj_by_ctx(ctx);

	if (type == ZOO_SESSION_EVENT || type == ZOO_NOTWATCHING_EVENT)
		return;
	if (o == NULL)
		return;					/* forgotten meanwhile (obj_by_ctx) */
	COMPLETION_BEGIN
	{
		zk_count(ZKCNT_WATCH_EVENTS, 1);
		o->rwatching = false;
		if (type == ZOO_CREATED_EVENT)
			open_older_than(o, 0);
		obj_kick(o);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_awexists sent by barrier_watch_ready() */
static void
ready_armed(int rc, const struct Stat *stat, const void *data)
{
	ZkEntry    *volatile none = NULL;
	BObj	   *o = obj_by_ctx(data);

	if (o == NULL)
		return;					/* forgotten meanwhile (obj_by_ctx) */
	COMPLETION_BEGIN
	{
		if (o->rinflight > 0)
			o->rinflight--;
		if (rc == ZOK || rc == ZNONODE)
			o->rwatching = true;
		if (rc == ZOK && stat != NULL && stat->czxid != 0)
			open_older_than(o, stat->czxid);

		/*
		 * Sent behind a member's create, the watch may arrive when nobody
		 * waits any more (the member left, was cancelled, or this very
		 * answer opened it): take it off, or it stays on a "ready" that
		 * may never change again.
		 */
		obj_compact(o);
		if (o->nw == 0 && !o->probing)
			obj_unwatch(o);
	}
	COMPLETION_END(none);
}

/* Send the exists watch on ready (before the listing of a probe) */
static int
barrier_watch_ready(BObj *o)
{
	char		rpath[ZK_PATH_MAX];
	int			rc;

	snprintf(rpath, sizeof(rpath), "%s/%s", o->path, ZKB_READY);
	rc = zoo_awexists(zk_zh, rpath, barrier_ready_event, obj_ctx(o), ready_armed, obj_ctx(o));
	if (rc == ZOK)
		o->rinflight++;
	return rc;
}

/*
 * Completion of the zoo_amulti sent by barrier_evaluate(); the zoo_adelete
 * sent by member_step()
 */
static void
ready_done(int rc, const void *data)
{
	/* another member may have made it first: either way it is there */
}

/* Completion of the zoo_acreate sent by barrier_evaluate() */
static void
ignore_created(int rc, const char *value, const void *data)
{
}

/* Completion of the zoo_aexists sent by barrier_probed() */
static void
ready_read(int rc, const struct Stat *stat, const void *data)
{
	ZkEntry    *volatile none = NULL;
	BObj	   *o = obj_by_ctx(data);

	if (o == NULL)
		return;					/* forgotten meanwhile (obj_by_ctx) */
	COMPLETION_BEGIN
	{
		if (rc == ZOK || rc == ZNONODE)
		{
			o->ready_czxid = (rc == ZOK && stat) ? stat->czxid : 0;
			o->ready_version = (rc == ZOK && stat) ? stat->version : -1;
			barrier_evaluate(o);
			obj_probe_end(o);
		}
		else
			obj_probe_failed(o, rc);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_awget_children sent by obj_probe() */
static void
barrier_probed(int rc, const struct String_vector *sv, const void *data)
{
	ZkEntry    *volatile none = NULL;
	BObj	   *o = obj_by_ctx(data);

	if (o == NULL)
		return;					/* forgotten meanwhile (obj_by_ctx) */
	COMPLETION_BEGIN
	{
		if (rc == ZOK || rc == ZNONODE)
		{
			int			i;
			bool		ready = false;

			o->watching = (rc == ZOK);
			o->members = 0;
			if (rc == ZOK && sv)
				for (i = 0; i < sv->count; i++)
				{
					if (strcmp(sv->data[i], ZKB_READY) == 0)
						ready = true;
					else
						o->members++;
				}
			if (ready && zk_session_usable())
			{
				char		rpath[ZK_PATH_MAX];

				snprintf(rpath, sizeof(rpath), "%s/%s", o->path, ZKB_READY);
				if (zoo_aexists(zk_zh, rpath, 0, ready_read, obj_ctx(o)) != ZOK)
					obj_probe_failed(o, ZCONNECTIONLOSS);
			}
			else if (ready)
				obj_probe_failed(o, ZCONNECTIONLOSS);
			else
			{
				o->ready_czxid = 0;
				o->ready_version = -1;
				barrier_evaluate(o);
				if (rc == ZNONODE)
					o->again = true;	/* our members are re-created */
				obj_probe_end(o);
			}
		}
		else
			obj_probe_failed(o, rc);
	}
	COMPLETION_END(none);
}

/*
 * Let through every waiting member the last probe opens the barrier for;
 * when the count opened it and "ready" is missing or older than one of
 * them, (re)create "ready" so that members who look later see it opened.
 */
static void
barrier_evaluate(BObj *o)
{
	int			i;
	bool		by_count = false;
	int64		oldest = 0;

	for (i = 0; i < o->nw; i++)
	{
		ZkEntry    *e = obj_waiter(o, i);

		if (e == NULL || e->step.barrier != ZKB_ENTER || e->node[0] == '\0')
			continue;
		if (o->members >= e->parties)
		{
			by_count = true;
			if (oldest == 0 || e->token < oldest)
				oldest = e->token;
			e->step.barrier = ZKB_MEMBER;
			e->state = ZKE_HELD;
			zk_finish(e, ZKO_GRANTED, 0, NULL);
		}
		else if (o->ready_czxid != 0 && o->ready_czxid > e->token)
		{
			e->step.barrier = ZKB_MEMBER;
			e->state = ZKE_HELD;
			zk_finish(e, ZKO_GRANTED, 0, NULL);
		}
		else if (e->try_only)
			zk_finish(e, ZKO_BUSY, 0, NULL);
	}
	if (by_count && (o->ready_czxid == 0 || o->ready_czxid < oldest) &&
		zk_session_usable())
	{
		char		rpath[ZK_PATH_MAX];

		snprintf(rpath, sizeof(rpath), "%s/%s", o->path, ZKB_READY);
		if (o->ready_czxid != 0)
		{
			/* a leftover: replace it, unless someone else just did */
			zoo_op_t   *ops = MemoryContextAllocZero(b_context(), 2 * sizeof(zoo_op_t));
			zoo_op_result_t *res = MemoryContextAllocZero(b_context(), 2 * sizeof(zoo_op_result_t));
			char	   *p = MemoryContextStrdup(b_context(), rpath);

			zoo_delete_op_init(&ops[0], p, o->ready_version);
			zoo_create_op_init(&ops[1], p, NULL, -1, zk_acl(), 0, NULL, 0);
			/* the buffers leak once per replaced leftover: rare and small */
			(void) zoo_amulti(zk_zh, 2, ops, res, ready_done, NULL);
		}
		else
			(void) zoo_acreate(zk_zh, rpath, NULL, -1, zk_acl(), 0,
							   ignore_created, NULL);
		o->ready_czxid = 0;
	}
}

/*
 * Send o's probe, with a watch: an exists for a gate, a listing for
 * arrivals, and for a barrier the exists watch on ready then the listing.
 * A request that cannot be sent counts as a connection loss (probed again
 * once the session is usable).
 */
static void
obj_probe(BObj *o)
{
	int			rc;

	o->retry = false;
	o->probing = true;
	switch (o->op)
	{
		case ZKB_GATE:
			rc = zoo_awexists(zk_zh, o->path, obj_watcher, obj_ctx(o), gate_probed, obj_ctx(o));
			break;
		case ZKB_ARRIVALS:
			rc = zoo_awget_children(zk_zh, o->path, obj_watcher, obj_ctx(o), arrivals_probed, obj_ctx(o));
			break;
		default:
			rc = barrier_watch_ready(o);
			if (rc == ZOK)
				rc = zoo_awget_children(zk_zh, o->path, obj_watcher, obj_ctx(o), barrier_probed, obj_ctx(o));
			break;
	}
	if (rc != ZOK)
		obj_probe_failed(o, ZCONNECTIONLOSS);
}

/* ------------------------------------------------------------------------
 * ZKK_BWAIT: a gate wait or an await
 * ------------------------------------------------------------------------
 */
static void
bwait_drive(ZkEntry *e)
{
	BObj	   *o = obj_of(e);

	if (e->released)
	{
		obj_remove_entry(o, e);
		zk_entry_free(e);
		return;
	}
	if (e->outcome != ZKO_NONE)
		return;
	if (e->state != ZKE_WAITING)
	{
		e->state = ZKE_WAITING;
		zk_wake_owner(e);		/* its timeout counts from now */
	}
	obj_add(o, e);
	obj_kick(o);
}

/* A drive of the wait threw: fail it, or free it if it was let go */
static void
bwait_drive_failed(ZkEntry *e)
{
	if (e->released)
	{
		obj_remove_entry(obj_of(e), e);
		zk_entry_free(e);
	}
	else
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "the zklock worker failed while serving the wait");
}

/*
 * The session ended: the wait stays on its object, which probes again once
 * a session is usable; a wait let go is freed.
 */
static void
bwait_session_lost(ZkEntry *e, const char *why)
{
	/* the object probes again once a session is usable */
	if (e->released)
	{
		obj_remove_entry(obj_of(e), e);
		zk_entry_free(e);
	}
	else
		obj_kick(obj_of(e));
}

/*
 * An idle object's watches, as the client library lists them: each one
 * it still holds (whatever our flags say) is taken off, on the server too;
 * where it holds none, nothing is sent.  Not while an exists on ready is
 * in flight (its answer decides, see ready_armed).
 *
 * Removing one watcher (function and context) only checks the server's
 * watch (ZooKeeper keeps one per path and session) and forgets the
 * watcher here; so it serves to ask whether the library holds one, and
 * the server's watch is removed whole.
 */
static void
drop_if_listed(const char *path, ZooWatcherType type, watcher_fn fn, void *ctx)
{
	if (zoo_aremove_watches(zk_zh, path, type, fn, ctx, 1,
							(void_completion_t *) zk_unwatch_done, NULL) == ZOK)
		(void) zoo_aremove_all_watches(zk_zh, path, type, 0,
									   (void_completion_t *) zk_unwatch_done, NULL);
}

/*
 * blind: also ask ZooKeeper to remove this session's watches on the
 * object's paths whether the library lists one or not (a removal with no
 * watcher named is always sent).  The fault run found, rarely, a watch on
 * ready left on the server that no list here named any more; once per
 * idle spell of an object, the two requests settle that for good.
 */
static void
obj_drop_listed_watches(BObj *o, bool blind)
{
	char		rpath[ZK_PATH_MAX];

	if (zk_zh == NULL || o->nw > 0 || o->probing || o->rinflight > 0)
		return;
	snprintf(rpath, sizeof(rpath), "%s/%s", o->path, ZKB_READY);
	drop_if_listed(rpath, ZWATCHTYPE_DATA, barrier_ready_event, obj_ctx(o));
	drop_if_listed(o->path, ZWATCHTYPE_ANY, obj_watcher, obj_ctx(o));
	if (blind && zk_session_usable())
	{
		if (o->op != ZKB_GATE && o->op != ZKB_ARRIVALS)
			(void) zoo_aremove_all_watches(zk_zh, rpath, ZWATCHTYPE_ANY, 0,
										   (void_completion_t *) zk_unwatch_done, NULL);
		(void) zoo_aremove_all_watches(zk_zh, o->path, ZWATCHTYPE_ANY, 0,
									   (void_completion_t *) zk_unwatch_done, NULL);
	}
	o->rwatching = o->watching = false;
}

/* The idle objects whose time came: their watches looked at again */
static void
idle_recheck(void)
{
	TimestampTz now = GetCurrentTimestamp();
	int			n = 0;

	while (idle_checks != NIL && n++ < IDLE_RECHECKS_PER_TURN)
	{
		BObj	   *o = obj_by_ctx((void *) (uintptr_t) linitial_oid(idle_checks));

		if (o == NULL)
		{
			/* (not forgotten while on the list; kept safe all the same) */
			idle_checks = list_delete_first(idle_checks);
			continue;
		}
		if (!TimestampDifferenceExceeds(o->idle_since, now, IDLE_RECHECK_MS))
			break;
		idle_checks = list_delete_first(idle_checks);
		o->recheck = false;
		obj_compact(o);
		obj_drop_listed_watches(o, true);
	}
}

/* Nothing refers to o: no waiter, nothing in flight, no recheck due */
static bool
obj_forgettable(BObj *o, TimestampTz now)
{
	return o->nw == 0 && !o->probing && !o->again && !o->retry &&
		o->rinflight == 0 && !o->recheck && !o->watching && !o->rwatching &&
		TimestampDifferenceExceeds(o->last_used, now, B_FORGET_IDLE_MS);
}

/* Move every object to a fresh context and free the old one */
static void
objs_rebuild(void)
{
	HTAB	   *old_objs = objs;
	MemoryContext old_cxt = objs_cxt;
	HASH_SEQ_STATUS st;
	BObj	   *o;

	objs_create();
	hash_seq_init(&st, old_objs);
	while ((o = hash_seq_search(&st)) != NULL)
	{
		BObj	   *n = hash_search(objs, o->path, HASH_ENTER, NULL);
		BObjRef    *r = hash_search(byid, &o->id, HASH_ENTER, NULL);

		memcpy(n, o, sizeof(BObj));
		if (o->cap > 0)
		{
			n->widx = MemoryContextAlloc(objs_cxt, o->cap * sizeof(uint32));
			n->wgen = MemoryContextAlloc(objs_cxt, o->cap * sizeof(uint32));
			memcpy(n->widx, o->widx, o->nw * sizeof(uint32));
			memcpy(n->wgen, o->wgen, o->nw * sizeof(uint32));
		}
		r->o = n;
	}
	objs_peak = hash_get_num_entries(objs);
	MemoryContextDelete(old_cxt);
#ifdef __GLIBC__
	/* give the freed pages back to the system, not only to malloc */
	malloc_trim(0);
#endif
}

/* Every B_FORGET_SWEEP_MS: forget the objects idle long enough */
static void
objs_forget_idle(void)
{
	static TimestampTz last_sweep = 0;
	TimestampTz now = GetCurrentTimestamp();
	HASH_SEQ_STATUS st;
	BObj	   *o;
	long		n = 0;

	if (objs == NULL || !TimestampDifferenceExceeds(last_sweep, now, B_FORGET_SWEEP_MS))
		return;
	last_sweep = now;
	hash_seq_init(&st, objs);
	while ((o = hash_seq_search(&st)) != NULL)
	{
		if (n++ >= B_FORGET_PER_SWEEP)
		{
			hash_seq_term(&st);
			break;
		}
		if (!obj_forgettable(o, now))
			continue;
		if (o->widx)
			pfree(o->widx);
		if (o->wgen)
			pfree(o->wgen);
		(void) hash_search(byid, &o->id, HASH_REMOVE, NULL);
		/* removing the entry just returned is allowed during a scan */
		(void) hash_search(objs, o->path, HASH_REMOVE, NULL);
	}
	if (objs_peak > 256 && hash_get_num_entries(objs) * 4 < objs_peak)
		objs_rebuild();
}

/*
 * The recipe's session_reset: the old session's probes and watches are
 * void, so every object with waiters probes again once the new session is
 * usable.  rinflight stays: the exists on ready are still answered.
 */
static void
b_session_reset(void)
{
	HASH_SEQ_STATUS st;
	BObj	   *o;

	if (objs == NULL)
		return;
	hash_seq_init(&st, objs);
	while ((o = hash_seq_search(&st)) != NULL)
	{
		/* (rinflight: the old session's requests are still answered) */
		o->probing = o->again = o->watching = o->rwatching = false;
		if (o->nw > 0)
		{
			o->retry = true;
			any_retry = true;
		}
	}
}

static void binfo_session_lost(ZkEntry *e, const char *why);
static void member_session_lost(ZkEntry *e, const char *why);

/*
 * The recipe's session_usable, every turn the session is usable.  The first
 * time it adopts the barrier entries a previous worker left in shared
 * memory; then idle rechecks and forgetting, after a reconnect the watches
 * nobody waits on, and the probes that waited for a usable session.
 */
static void
b_session_usable(void)
{
	static bool adopted = false;
	HASH_SEQ_STATUS st;
	BObj	   *o;

	if (!adopted)
	{
		int			i;

		/* the entries of a previous worker survive it in shared memory */
		adopted = true;
		for (i = 0; i < zk_ctl->max_entries; i++)
		{
			ZkEntry    *e = zk_entry(i);

			if (e->state == ZKE_FREE || e->queued)
				continue;
			if (e->kind == ZKK_BWAIT)
				bwait_drive(e);
			else if (e->kind == ZKK_BMEMBER)
				member_session_lost(e, NULL);
			else if (e->kind == ZKK_BINFO)
				binfo_session_lost(e, NULL);
		}
	}
	if (objs == NULL)
		return;
	idle_recheck();
	objs_forget_idle();
	if (swept_connects != zk_connects)
	{
		/*
		 * A removal of our watches that was in flight when the connection
		 * broke failed, yet the library still lists the watch and has just
		 * set it again on the server it reconnected to.  Take such watches
		 * off wherever nobody waits (a lookup in the library's own table
		 * where there is none: nothing is sent).
		 */
		swept_connects = zk_connects;
		hash_seq_init(&st, objs);
		while ((o = hash_seq_search(&st)) != NULL)
		{
			obj_compact(o);
			obj_drop_listed_watches(o, false);
		}
	}
	if (!any_retry)
		return;
	any_retry = false;
	hash_seq_init(&st, objs);
	while ((o = hash_seq_search(&st)) != NULL)
		if (o->retry)
		{
			o->retry = false;
			obj_kick(o);
		}
}

/* ------------------------------------------------------------------------
 * ZKK_BMEMBER: a double barrier's member
 * ------------------------------------------------------------------------
 */
static void member_step(ZkEntry *e);
static void leave_list(ZkEntry *e);

/* The path of child (a member's guid, or ready) in e's barrier */
static void
member_path(ZkEntry *e, const char *child, char *out, size_t outlen)
{
	char		dir[ZK_PATH_MAX];

	zk_barrier_path("barriers", e->name, dir, sizeof(dir));
	snprintf(out, outlen, "%s/%s", dir, child);
}

/* Watcher of the zoo_awexists sent by leave_watch() */
static void
member_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	ZkEntry    *volatile e = NULL;

	if (type == ZOO_SESSION_EVENT || type == ZOO_NOTWATCHING_EVENT)
		return;
	COMPLETION_BEGIN
	{
		zk_count(ZKCNT_WATCH_EVENTS, 1);
		e = zk_entry_of(ctx);
		if (e != NULL && e->watching)
		{
			if (path)
				(void) zk_watch_drop(path);
			e->watching = false;
			e->watched[0] = '\0';
			if (e->step.barrier == ZKB_LEAVE && !e->released)
				leave_list(e);
		}
	}
	COMPLETION_END(e);
}

/*
 * Take off the exists watch a leaving member set (leave_watch): only ours,
 * locally, while other watchers here share the path or the session is not
 * usable; else the session's watch on the server too.
 */
static void
member_unwatch(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];

	if (!e->watching)
		return;
	e->watching = false;
	member_path(e, e->watched, path, sizeof(path));
	e->watched[0] = '\0';
	if (zk_zh == NULL)
		return;
	if (zk_watch_drop(path) > 0 || !zk_session_usable())
		(void) zoo_aremove_watches(zk_zh, path, ZWATCHTYPE_DATA, member_watcher,
								   (void *) zk_ctx_of(e), 1,
								   (void_completion_t *) zk_unwatch_done, NULL);
	else
		(void) zoo_aremove_all_watches(zk_zh, path, ZWATCHTYPE_DATA, 0,
									   (void_completion_t *) zk_unwatch_done, NULL);
}

static ZkLogLimit member_delete_log;

/* Completion of the zoo_adelete sent by member_send_delete() */
static void
member_deleted(int rc, const void *ctx)
{
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_entry_of(ctx);
		if (e != NULL && e->delete_inflight)
		{
			e->delete_inflight = false;
			if (rc == ZOK || rc == ZNONODE)
			{
				e->node[0] = '\0';
				e->in_doubt = false;
				if (e->released)
					zk_entry_free(e);
				else if (e->step.barrier == ZKB_LEFT)
					zk_finish(e, ZKO_GRANTED, 0, NULL);
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);
			else
			{
				if (zk_log_limited(&member_delete_log, "could not delete the member node of a barrier"))
					ereport(WARNING,
							(errmsg("zklock: could not delete the member node of barrier \"%s\": %s",
									zk_log_name(e->name), zerror(rc))));
				e->node[0] = '\0';
				if (e->released)
					zk_entry_free(e);
				else if (e->step.barrier == ZKB_LEFT)
					zk_finish(e, ZKO_GRANTED, 0, NULL);
			}
		}
	}
	COMPLETION_END(e);
}

/* Send the delete of e's member node; retried later if it cannot be sent */
static void
member_send_delete(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];
	int			rc;

	member_path(e, e->guid, path, sizeof(path));
	rc = zoo_adelete(zk_zh, path, -1, member_deleted, zk_ctx_of(e));
	if (rc == ZOK)
		e->delete_inflight = true;
	else
		zk_retry_later(e);
}

/* Completion of the zoo_acreate2 sent by member_send_create() */
static void
member_created(int rc, const char *value, const struct Stat *stat, const void *ctx)
{
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_entry_of(ctx);
		if (e != NULL && e->create_inflight)
		{
			e->create_inflight = false;
			if (rc == ZOK || rc == ZNODEEXISTS)
			{
				/* ZNODEEXISTS: ours, by name, from a try whose reply was lost */
				e->in_doubt = false;
				strlcpy(e->node, e->guid, sizeof(e->node));
				if (rc == ZOK && stat && e->token == 0)
					e->token = stat->czxid;
				member_step(e);
			}
			else if (rc == ZNONODE && e->errors < 5)
			{
				/* the barrier's node (a container) or its parents are gone */
				e->errors++;
				e->parents_tried = true;
				member_step(e);
			}
			else if (!zk_rc_definite(rc))
			{
				e->in_doubt = true;
				zk_retry_later(e);
			}
			else
			{
				char		msg[ZKLOCK_ERRMSG_MAX];

				snprintf(msg, sizeof(msg), "ZooKeeper refused the member node: %s", zerror(rc));
				if (e->released)
					zk_entry_free(e);
				else
				{
					char		mpath[ZK_PATH_MAX];

					member_path(e, e->guid, mpath, sizeof(mpath));
					e->step.barrier = ZKB_LEFT;
					e->state = ZKE_DONE;
					zk_fail_rc(e, rc, mpath, ERRCODE_CONNECTION_FAILURE, msg);
				}
			}
		}
	}
	COMPLETION_END(e);
}

/* our member's czxid, when the create's reply did not tell it */
static void
member_stat(int rc, const struct Stat *stat, const void *ctx)
{
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_entry_of(ctx);
		if (e != NULL && e->list_inflight)
		{
			e->list_inflight = false;
			if (rc == ZOK && stat)
			{
				e->token = stat->czxid;
				member_step(e);
			}
			else if (rc == ZNONODE)
			{
				e->node[0] = '\0';
				member_step(e);
			}
			else
				zk_retry_later(e);
		}
	}
	COMPLETION_END(e);
}

/*
 * Create e's ephemeral member node, named by its guid, in the barrier's
 * container node (after a ZNONODE the root and the barriers directory
 * first).  An entering member's exists watch on ready goes right behind.
 */
static void
member_send_create(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];
	int			rc;

	if (e->parents_tried)
	{
		char		dir[ZK_PATH_MAX];

		snprintf(dir, sizeof(dir), "%s/barriers", zk_root);
		zk_create_parent(zk_root, 0);
		zk_create_parent(dir, 0);
	}
	/* the barrier's own node is a container: gone when its last member is */
	{
		char		dir[ZK_PATH_MAX];

		zk_barrier_path("barriers", e->name, dir, sizeof(dir));
		zk_create_parent(dir, ZOO_CONTAINER);
	}
	member_path(e, e->guid, path, sizeof(path));
	e->state = ZKE_CREATING;
	rc = zoo_acreate2(zk_zh, path, e->data, strlen(e->data), zk_acl(),
					  ZOO_EPHEMERAL, member_created, zk_ctx_of(e));
	if (rc == ZOK)
	{
		e->create_inflight = true;
		e->session = zk_cur_session;

		/*
		 * The watch on "ready" goes right behind the create, not after its
		 * answer: ZooKeeper sets it next to the create, before another
		 * member can count this one and open the barrier.  Set after the
		 * answer, a worker that stalls meanwhile (or an answer held up)
		 * would find "ready" created and deleted again by members that
		 * entered and left at once, and miss the opening
		 * (barrier_ready_event).  ready_armed takes it off again if nobody
		 * waits by then.
		 */
		if (e->step.barrier == ZKB_ENTER)
			(void) barrier_watch_ready(obj_of(e));
	}
	else
		(void) zk_send_failed(e, rc, "create");
}

/* ---- leaving ---- */

/* qsort comparator of C strings */
static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/* Completion of the zoo_awexists sent by leave_watch() */
static void
leave_exists(int rc, const struct Stat *stat, const void *ctx)
{
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_entry_of(ctx);
		if (e != NULL && e->watch_pending)
		{
			char		path[ZK_PATH_MAX];

			e->watch_pending = false;
			member_path(e, e->watched, path, sizeof(path));
			if (rc == ZOK)
			{
				e->watching = true;
				if (e->released || e->step.barrier != ZKB_LEAVE)
					member_unwatch(e);
			}
			else if (rc == ZNONODE)
			{
				/*
				 * Gone already.  ZooKeeper keeps an exists watch on the absent
				 * node (for its creation): take it off, then look again.
				 */
				e->watching = true;
				member_unwatch(e);
				if (!e->released && e->step.barrier == ZKB_LEAVE)
					leave_list(e);
			}
			else
			{
				(void) zk_watch_drop(path);
				e->watched[0] = '\0';
				if (!e->released && e->step.barrier == ZKB_LEAVE)
					zk_retry_later(e);
			}
		}
	}
	COMPLETION_END(e);
}

/* Watch the member child of e's barrier (an exists) until it leaves */
static void
leave_watch(ZkEntry *e, const char *child)
{
	char		path[ZK_PATH_MAX];
	int			rc;

	strlcpy(e->watched, child, sizeof(e->watched));
	member_path(e, child, path, sizeof(path));
	rc = zoo_awexists(zk_zh, path, member_watcher, (void *) zk_ctx_of(e),
					  leave_exists, zk_ctx_of(e));
	if (rc == ZOK)
	{
		zk_watch_set(path);
		e->watch_pending = true;
	}
	else
		zk_retry_later(e);
}

/* Completion of the zoo_aget_children sent by leave_list() */
static void
leave_listed(int rc, const struct String_vector *sv, const void *ctx)
{
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_entry_of(ctx);
		if (e != NULL && e->list_inflight)
		{
			e->list_inflight = false;
			if (e->released || e->step.barrier != ZKB_LEAVE)
				member_step(e);
			else if (rc == ZOK || rc == ZNONODE)
			{
				char	  **m = NULL;
				int			n = 0;
				int			i;
				bool		mine = false;

				if (rc == ZOK && sv && sv->count > 0)
				{
					m = palloc(sizeof(char *) * sv->count);
					for (i = 0; i < sv->count; i++)
						if (strcmp(sv->data[i], ZKB_READY) != 0)
						{
							m[n++] = sv->data[i];
							if (e->node[0] && strcmp(sv->data[i], e->node) == 0)
								mine = true;
						}
					qsort(m, n, sizeof(char *), cmp_str);
				}
				if (!mine)
					e->node[0] = '\0';
				if (n == 0 || (n == 1 && mine))
				{
					/* everyone else has left */
					e->step.barrier = ZKB_LEFT;
					if (mine)
						member_send_delete(e);
					else
						zk_finish(e, ZKO_GRANTED, 0, NULL);
				}
				else if (e->try_only)
				{
					/*
					 * '0': others are still in, and that is the answer; the
					 * owner lets the entry go, which deletes our node
					 */
					zk_finish(e, ZKO_BUSY, 0, NULL);
				}
				else if (mine && strcmp(m[0], e->node) == 0)
					leave_watch(e, m[n - 1]);	/* lowest: wait for the highest */
				else
				{
					if (mine && !e->delete_inflight)
						member_send_delete(e);
					leave_watch(e, m[0]);	/* the others: wait for the lowest */
				}
				if (m)
					pfree(m);
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);
			else
			{
				e->step.barrier = ZKB_LEFT;
				zk_fail(e, ERRCODE_CONNECTION_FAILURE, zerror(rc));
			}
		}
	}
	COMPLETION_END(e);
}

/* List e's barrier to decide how the leaving member waits (leave_listed) */
static void
leave_list(ZkEntry *e)
{
	char		dir[ZK_PATH_MAX];
	int			rc;

	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	zk_barrier_path("barriers", e->name, dir, sizeof(dir));
	rc = zoo_aget_children(zk_zh, dir, 0, leave_listed, zk_ctx_of(e));
	if (rc == ZOK)
		e->list_inflight = true;
	else
		zk_retry_later(e);
}

/* One step of a member, whatever it waits for */
static void
member_step(ZkEntry *e)
{
	if (e->create_inflight || e->delete_inflight || e->list_inflight ||
		e->watch_pending)
		return;					/* its completion steps it on */
	if (e->released)
	{
		obj_remove_entry(obj_of(e), e);
		member_unwatch(e);
		if ((e->node[0] || e->in_doubt) && zk_zh != NULL)
		{
			if (!zk_session_usable())
			{
				zk_retry_later(e);
				return;
			}
			member_send_delete(e);
		}
		else
			zk_entry_free(e);
		return;
	}
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	switch (e->step.barrier)
	{
		case ZKB_ENTER:
		case ZKB_MEMBER:
			if (e->node[0] == '\0')
			{
				member_send_create(e);
				return;
			}
			if (e->token == 0)
			{
				char		path[ZK_PATH_MAX];

				member_path(e, e->node, path, sizeof(path));
				if (zoo_aexists(zk_zh, path, 0, member_stat, zk_ctx_of(e)) == ZOK)
					e->list_inflight = true;
				else
					zk_retry_later(e);
				return;
			}
			if (e->step.barrier == ZKB_ENTER)
			{
				BObj	   *o = obj_of(e);

				if (e->state != ZKE_WAITING)
				{
					e->state = ZKE_WAITING;
					zk_wake_owner(e);
				}
				obj_add(o, e);
				obj_kick(o);
			}
			else
				e->state = ZKE_HELD;
			return;
		case ZKB_LEAVE:
			{
				char		path[ZK_PATH_MAX];

				obj_remove_entry(obj_of(e), e);
				if (e->state != ZKE_WAITING)
				{
					/* first step: the barrier closes behind us */
					member_path(e, ZKB_READY, path, sizeof(path));
					(void) zoo_adelete(zk_zh, path, -1, ready_done, NULL);
					e->state = ZKE_WAITING;
					zk_wake_owner(e);
				}
				if (!e->watching)
					leave_list(e);
				return;
			}
		default:
			return;
	}
}

/*
 * A drive of the member threw: forget what was in flight.  A member let go
 * still deletes its node (retried); any other is retried three times, then
 * fails.
 */
static void
member_drive_failed(ZkEntry *e)
{
	e->create_inflight = e->delete_inflight = e->list_inflight = false;
	e->watch_pending = false;
	if (e->released)
	{
		if (e->node[0] || e->in_doubt)
			zk_retry_later(e);
		else
		{
			obj_remove_entry(obj_of(e), e);
			zk_entry_free(e);
		}
		return;
	}
	if (e->errors++ < 3)
		zk_retry_later(e);
	else
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "the zklock worker failed while serving the barrier");
}

/*
 * The session ended and took our member node with it: a member that has
 * not left gets a new node in the next session (same name), so that it
 * still counts and is still waited for.
 */
static void
member_session_lost(ZkEntry *e, const char *why)
{
	e->create_inflight = e->delete_inflight = e->list_inflight = false;
	e->watch_pending = false;
	e->watching = false;
	e->watched[0] = '\0';
	e->in_doubt = false;
	e->node[0] = '\0';
	if (e->released)
	{
		obj_remove_entry(obj_of(e), e);
		zk_entry_free(e);
		return;
	}
	zk_retry_later(e);
}

/* ------------------------------------------------------------------------
 * ZKK_BINFO: list or reset arrivals
 * ------------------------------------------------------------------------
 */
typedef struct BInfo
{
	uint32		idx;
	uint32		gen;
	int			pending;
	int			count;
	bool		failed;
	StringInfoData rows;
	char		dir[ZK_PATH_MAX];
} BInfo;

/* The entry bi answers, or NULL if it was freed (and maybe reused) since */
static ZkEntry *
binfo_entry(BInfo *bi)
{
	ZkEntry    *e = zk_entry(bi->idx);

	return (e->gen == bi->gen && e->state != ZKE_FREE) ? e : NULL;
}

/*
 * All of bi's requests are answered: hand the rows to the owner in a dsa
 * answer, or start over if a read failed, or free the entry if it was let
 * go.  Frees bi.
 */
static void
binfo_finish(BInfo *bi)
{
	ZkEntry    *e = binfo_entry(bi);

	if (e != NULL)
	{
		e->list_inflight = false;
		if (e->released)
			zk_entry_free(e);
		else if (bi->failed)
			zk_retry_later(e);	/* all over again, when usable */
		else
		{
			dsa_area   *area = zk_dsa();
			Size		sz = sizeof(ZkAnswer) + bi->rows.len;
			dsa_pointer dp = dsa_allocate_extended(area, sz, DSA_ALLOC_NO_OOM);

			if (!DsaPointerIsValid(dp))
				zk_fail(e, ERRCODE_OUT_OF_MEMORY, "out of dynamic shared memory for the answer");
			else
			{
				ZkAnswer   *a = dsa_get_address(area, dp);

				a->count = bi->count;
				a->size = sz;
				memcpy((char *) a + sizeof(ZkAnswer), bi->rows.data, bi->rows.len);
				e->blob = dp;
				e->token = bi->count;
				e->state = ZKE_DONE;
				zk_finish(e, ZKO_GRANTED, 0, NULL);
			}
		}
	}
	pfree(bi->rows.data);
	pfree(bi);
}

/* One of bi's requests is answered; the last one finishes it */
static void
binfo_step_done(BInfo *bi)
{
	if (--bi->pending == 0)
		binfo_finish(bi);
}

typedef struct BInfoCall
{
	BInfo	   *bi;
	char		name[FLEXIBLE_ARRAY_MEMBER];	/* the child, as listed */
} BInfoCall;

/* Completion of the zoo_aget sent by binfo_listed() */
static void
binfo_got(int rc, const char *value, int value_len, const struct Stat *stat,
		  const void *data)
{
	ZkEntry    *volatile none = NULL;
	BInfoCall  *c = (BInfoCall *) data;

	COMPLETION_BEGIN
	{
		BInfo	   *bi = c->bi;

		if (rc == ZOK && stat)
		{
			ZkArrivalRec r;
			int			nl = strlen(c->name);
			int			dl = value ? Min(value_len, ZKLOCK_DATA_MAX * 2) : 0;

			r.ctime_ms = stat->ctime;
			r.namelen = nl;
			r.datalen = Max(dl, 0);
			appendBinaryStringInfo(&bi->rows, (char *) &r, sizeof(r));
			appendBinaryStringInfo(&bi->rows, c->name, nl);
			if (r.datalen > 0)
				appendBinaryStringInfo(&bi->rows, value, r.datalen);
			while (bi->rows.len % MAXIMUM_ALIGNOF)
				appendStringInfoChar(&bi->rows, '\0');
			bi->count++;
		}
		else if (rc != ZNONODE)
			bi->failed = true;
		pfree(c);
		binfo_step_done(bi);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_adelete sent by binfo_listed() */
static void
binfo_deleted(int rc, const void *data)
{
	ZkEntry    *volatile none = NULL;
	BInfoCall  *c = (BInfoCall *) data;

	COMPLETION_BEGIN
	{
		BInfo	   *bi = c->bi;

		if (rc == ZOK && c->name[0] != '\0')
			bi->count++;
		else if (rc != ZOK && rc != ZNONODE && c->name[0] != '\0')
			bi->failed = true;
		pfree(c);
		binfo_step_done(bi);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_aget_children sent by binfo_drive() */
static void
binfo_listed(int rc, const struct String_vector *sv, const void *data)
{
	ZkEntry    *volatile none = NULL;
	BInfo	   *bi = (BInfo *) data;

	COMPLETION_BEGIN
	{
		ZkEntry    *e = binfo_entry(bi);

		if ((rc == ZOK || rc == ZNONODE) && e != NULL && zk_session_usable())
		{
			int			i;
			bool		reset = (e->step.barrier == ZKB_RESET);

			bi->pending = 1;
			for (i = 0; rc == ZOK && sv && i < sv->count; i++)
			{
				size_t		nlen = strlen(sv->data[i]);
				BInfoCall  *c;
				char		path[ZK_PATH_MAX];
				int			src;

				/*
				 * Not a participant anyone arrived as through zklock (at
				 * most ZKLOCK_ENAME_MAX bytes): another client's node,
				 * whose path would not even fit.  Not ours to show or
				 * delete.
				 */
				if (nlen > ZKLOCK_ENAME_MAX)
					continue;
				c = MemoryContextAllocZero(b_context(), offsetof(BInfoCall, name) + nlen + 1);

				c->bi = bi;
				memcpy(c->name, sv->data[i], nlen + 1);
				snprintf(path, sizeof(path), "%s/%s", bi->dir, sv->data[i]);
				if (reset)
					src = zoo_adelete(zk_zh, path, -1, binfo_deleted, c);
				else
					src = zoo_aget(zk_zh, path, 0, binfo_got, c);
				if (src == ZOK)
					bi->pending++;
				else
				{
					bi->failed = true;
					pfree(c);
				}
			}
			if (reset && rc == ZOK)
			{
				/* the node itself, once empty (not counted) */
				BInfoCall  *c = MemoryContextAllocZero(b_context(), offsetof(BInfoCall, name) + 1);

				c->bi = bi;
				c->name[0] = '\0';
				if (zoo_adelete(zk_zh, bi->dir, -1, binfo_deleted, c) == ZOK)
					bi->pending++;
				else
					pfree(c);
			}
			binfo_step_done(bi);
		}
		else
		{
			bi->failed = !(e == NULL || zk_rc_definite(rc));
			if (e != NULL && !bi->failed)
			{
				/* a verdict: fail the request */
				e->list_inflight = false;
				if (e->released)
					zk_entry_free(e);
				else
					zk_fail(e, ERRCODE_CONNECTION_FAILURE, zerror(rc));
				e = NULL;
				pfree(bi->rows.data);
				pfree(bi);
			}
			else
				binfo_finish(bi);
		}
	}
	COMPLETION_END(none);
}

/*
 * A list reads every arrival; a reset deletes them one by one and then the
 * node itself (not counted; it fails harmlessly if one arrived meanwhile).
 */
static void
binfo_drive(ZkEntry *e)
{
	BInfo	   *bi;
	int			rc;

	if (e->list_inflight)
		return;
	if (e->released)
	{
		zk_entry_free(e);
		return;
	}
	if (e->outcome != ZKO_NONE)
		return;
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	bi = MemoryContextAllocZero(b_context(), sizeof(BInfo));
	bi->idx = zk_entry_index(e);
	bi->gen = e->gen;
	{
		MemoryContext old = MemoryContextSwitchTo(b_context());

		initStringInfo(&bi->rows);
		MemoryContextSwitchTo(old);
	}
	zk_barrier_path("arrivals", e->name, bi->dir, sizeof(bi->dir));
	rc = zoo_aget_children(zk_zh, bi->dir, 0, binfo_listed, bi);
	if (rc == ZOK)
		e->list_inflight = true;
	else
	{
		pfree(bi->rows.data);
		pfree(bi);
		zk_retry_later(e);
	}
}

/* A drive of the read threw: fail it, or free it if it was let go */
static void
binfo_drive_failed(ZkEntry *e)
{
	e->list_inflight = false;
	if (e->released)
		zk_entry_free(e);
	else
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "the zklock worker failed while reading the arrivals");
}

/* The session ended: the read starts over when usable, unless answered */
static void
binfo_session_lost(ZkEntry *e, const char *why)
{
	/* its reads are void: their completions find list_inflight cleared */
	e->list_inflight = false;
	if (e->released)
		zk_entry_free(e);
	else if (e->outcome == ZKO_NONE)
		zk_retry_later(e);
}

/* ------------------------------------------------------------------------
 * The tables
 * ------------------------------------------------------------------------
 */
const ZkRecipe zk_barrier_recipe = {
	.session_reset = b_session_reset,
	.session_usable = b_session_usable,
};

const ZkKindOps zk_bwait_ops = {
	.drive = bwait_drive,
	.drive_failed = bwait_drive_failed,
	.session_lost = bwait_session_lost,
};

const ZkKindOps zk_bmember_ops = {
	.drive = member_step,
	.drive_failed = member_drive_failed,
	.session_lost = member_session_lost,
};

const ZkKindOps zk_binfo_ops = {
	.drive = binfo_drive,
	.drive_failed = binfo_drive_failed,
	.session_lost = binfo_session_lost,
};
