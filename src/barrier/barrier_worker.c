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
 *	  This file: the watched objects, ZKK_BWAIT and the recipe's hooks;
 *	  barrier_member.c has the members, barrier_arrivals.c the one-off
 *	  reads (barrier_int.h their shared types).
 *
 *	  Everything here runs in the worker with zk_ctl->lock held.
 *
 *-------------------------------------------------------------------------
 */
#include "barrier_int.h"
#include "batch.h"

#include "trust.h"
#include "queue/queue.h"

#include "lib/stringinfo.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

static void obj_probe(BObj *o);
static void obj_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx);
static void barrier_ready_event(zhandle_t *h, int type, int state, const char *path, void *ctx);
static void barrier_evaluate(BObj *o);
static void barrier_keep_members(BObj *o, const struct String_vector *sv);
static void open_older_than(BObj *o, int64 czxid);

/* ------------------------------------------------------------------------
 * Watched objects
 * ------------------------------------------------------------------------
 */

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

/* The path of o's "ready" node (a barrier's) */
static void
obj_ready_path(BObj *o, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/%s", o->path, ZKB_READY);
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

/*
 * A completion or watcher of a watched object opens with
 * OBJ_COMPLETION_BEGIN(o, data): o is the object data names (obj_ctx), and
 * the callback returns at once if that object was forgotten meanwhile
 * (obj_by_ctx); then COMPLETION_BEGIN, whose entry is none (no entry's).
 * OBJ_COMPLETION_END closes it.
 */
#define OBJ_COMPLETION_BEGIN(o, data) \
	ZkEntry    *volatile none = NULL; \
	BObj	   *o = obj_by_ctx(data); \
	\
	if (o == NULL) \
		return; \
	COMPLETION_BEGIN

#define OBJ_COMPLETION_END	COMPLETION_END(none)

/* The barriers' memory context, made on first use (objs_cxt is its child) */
MemoryContext
zk_b_context(void)
{
	return ZK_LAZY_CONTEXT(b_cxt, "zklock barriers", ALLOCSET_DEFAULT_SIZES);
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
	objs_cxt = AllocSetContextCreate(zk_b_context(), "zklock barrier objects",
									 ALLOCSET_DEFAULT_SIZES);
	objs = zk_hash_create("zklock barrier objects", 32, ZK_PATH_MAX,
						  sizeof(BObj), true, objs_cxt);
	byid = zk_hash_create("zklock barrier object ids", 32, sizeof(uint32),
						  sizeof(BObjRef), false, objs_cxt);
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
		o->probe = BPROBE_IDLE;
		o->watching = false;
		o->members = 0;
		o->rmembers = NULL;
		o->nrmembers = 0;
		o->ready_czxid = 0;
		o->ready_version = -1;
		o->rwatching = false;
		o->node_session = 0;
		o->rclosing = false;
		/* its node's ACL, once per session (aclcheck.c): never waited for */
		zk_acl_check_node(key);
	}
	o->last_used = GetCurrentTimestamp();
	return o;
}

/* Add e to o's waiters, unless it is one already */
void
zk_b_obj_add(BObj *o, ZkEntry *e)
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
		MemoryContext old = MemoryContextSwitchTo(zk_b_context());

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
	if (o->rwatching && o->rinflight == 0 && o->creating == 0)
	{
		if (zk_zh != NULL)
		{
			char		rpath[ZK_PATH_MAX];

			obj_ready_path(o, rpath, sizeof(rpath));
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

/*
 * A member's create is sent, its watch on ready behind it (barrier_member.c).
 * That watch is what tells the member of an opening that comes right after
 * its node lands, before it is a waiter here.  Should the create's multi
 * fail for another write, the create is sent again alone after the watch,
 * whose answer then comes first, with nobody waiting yet: the watch stays
 * (obj_unwatch) until every create is answered (zk_b_obj_create_done).
 */
void
zk_b_obj_create_sent(BObj *o)
{
	o->creating++;
}

/* A member's create is answered, or will never be (zk_b_obj_create_sent) */
void
zk_b_obj_create_done(BObj *o)
{
	if (o->creating > 0)
		o->creating--;
}

/*
 * After a member's create was answered and the member stepped on (a
 * waiter now, if it waits): the watch goes if nobody waits any more
 */
void
zk_b_obj_unwatch_unused(BObj *o)
{
	if (o->creating == 0 && o->nw == 0 && !BOBJ_PROBING(o))
		obj_unwatch(o);
}

/* Drop o's waiter at position i (the last one takes its place) */
static void
obj_drop_waiter(BObj *o, int i)
{
	o->widx[i] = o->widx[o->nw - 1];
	o->wgen[i] = o->wgen[o->nw - 1];
	o->nw--;
}

/* Drop e from its object's waiters (and the watch with the last of them) */
void
zk_b_obj_remove_entry(BObj *o, ZkEntry *e)
{
	int			i;

	for (i = 0; i < o->nw; i++)
		if (o->widx[i] == zk_entry_index(e) && o->wgen[i] == e->gen)
		{
			obj_drop_waiter(o, i);
			break;
		}
	if (o->nw == 0 && !BOBJ_PROBING(o))
		obj_unwatch(o);
}

/* The object e waits on: its barrier for a member, else by its step */
BObj *
zk_b_obj_of(ZkEntry *e)
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
			obj_drop_waiter(o, i);
		else
			i++;
	}
}

/*
 * Something may have changed about o: probe it now, or when the probe in
 * flight returns (again), or once the session is usable (retry).  With no
 * waiter left it drops its watches instead.
 */
void
zk_b_obj_kick(BObj *o)
{
	obj_compact(o);
	if (o->nw == 0)
	{
		if (!BOBJ_PROBING(o))
			obj_unwatch(o);
		return;
	}
	if (BOBJ_PROBING(o))
	{
		o->probe = BPROBE_AGAIN;
		return;
	}
	if (!zk_session_usable())
	{
		o->probe = BPROBE_RETRY;
		any_retry = true;
		return;
	}
	obj_probe(o);
}

/*
 * An event of one of the object's watches (ctx): on the object's node, or
 * (ready) on its "ready", whose creation opens the members older than it.
 * Either way the object is looked at again.
 */
static void
obj_event(int type, void *ctx, bool ready)
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
		if (!ready)
			o->watching = false;
		else
		{
			o->rwatching = false;
			if (type == ZOO_CREATED_EVENT)
				open_older_than(o, 0);
		}
		zk_b_obj_kick(o);
	}
	OBJ_COMPLETION_END;
}

/*
 * Watcher of the zoo_awexists sent by arrivals_probed(), arrivals_counted()
 * and obj_probe(); the zoo_awget_children sent by arrivals_counted() and
 * obj_probe()
 */
static void
obj_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	obj_event(type, ctx, false);
}

/* Fail every live waiter of o with sqlstate and msg */
static void
obj_fail_waiters(BObj *o, int sqlstate, const char *msg)
{
	int			i;

	for (i = 0; i < o->nw; i++)
	{
		ZkEntry    *e = obj_waiter(o, i);

		if (e != NULL)
			zk_fail(e, sqlstate, msg);
	}
}

/* The probe failed without an answer: again when the session is usable */
static void
obj_probe_failed(BObj *o, int rc)
{
	o->probe = BPROBE_IDLE;
	if (!zk_rc_definite(rc))
	{
		o->probe = BPROBE_RETRY;
		any_retry = true;
		return;
	}
	/* a verdict we cannot use: fail the waiters rather than hang them */
	{
		char		msg[ZKLOCK_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "ZooKeeper refused to read %s: %s", o->path, zerror(rc));
		obj_fail_waiters(o, ERRCODE_CONNECTION_FAILURE, msg);
		obj_compact(o);
		if (o->nw == 0)
			obj_unwatch(o);
	}
}

/* After a probe's answer: probe again if asked, or drop the watch */
static void
obj_probe_end(BObj *o)
{
	bool		again = (o->probe == BPROBE_AGAIN);

	o->probe = BPROBE_IDLE;
	obj_compact(o);
	if (o->nw == 0)
	{
		obj_unwatch(o);
		return;
	}
	if (again)
		zk_b_obj_kick(o);
}

/*
 * The probe found more children than zklock.max_children (msg says so): no
 * waiter can ask for that many, so they fail with 54000, and a probe asked
 * for meanwhile is not sent.
 */
static void
obj_flooded(BObj *o, const char *msg)
{
	obj_fail_waiters(o, ERRCODE_PROGRAM_LIMIT_EXCEEDED, msg);
	if (o->probe == BPROBE_AGAIN)
		o->probe = BPROBE_OUT;	/* not again */
	obj_probe_end(o);
}

/* ---- gates ---- */

/* Completion of the zoo_awexists sent by obj_probe() */
static void
gate_probed(int rc, const struct Stat *stat, const void *data)
{
	OBJ_COMPLETION_BEGIN(o, data)
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
	OBJ_COMPLETION_END;
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

static void arrivals_dir_probed(int rc, const struct Stat *stat, const void *data);

/*
 * The arrivals node is missing (the session usable): watch for its
 * creation (an exists with a watch, arrivals_dir_probed); a request that
 * cannot be sent fails the probe
 */
static void
arrivals_watch_dir(BObj *o)
{
	if (zoo_awexists(zk_zh, o->path, obj_watcher, obj_ctx(o), arrivals_dir_probed, obj_ctx(o)) != ZOK)
		obj_probe_failed(o, ZCONNECTIONLOSS);
}

/* Completion of the zoo_awexists sent by arrivals_watch_dir() */
static void
arrivals_dir_probed(int rc, const struct Stat *stat, const void *data)
{
	OBJ_COMPLETION_BEGIN(o, data)
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
			o->probe = BPROBE_AGAIN;
			obj_probe_end(o);
		}
		else
			obj_probe_failed(o, rc);
	}
	OBJ_COMPLETION_END;
}

/* Completion of the zoo_awget_children sent by arrivals_counted() */
static void
arrivals_probed(int rc, const struct String_vector *sv, const void *data)
{
	OBJ_COMPLETION_BEGIN(o, data)
	{
		if (rc == ZOK)
		{
			o->watching = true;
			arrivals_answer(o, sv ? sv->count : 0);
			obj_probe_end(o);
		}
		else if (rc == ZNONODE && zk_session_usable())
			arrivals_watch_dir(o);
		else
			obj_probe_failed(o, rc);
	}
	OBJ_COMPLETION_END;
}

/*
 * Completion of the zoo_aexists sent by obj_probe(): the arrivals node's
 * stat counts its children without listing them (issue 35).  Waiters the
 * count satisfies are answered at once; for the others the children are
 * listed with a watch (arrivals_probed), which a change of them fires --
 * unless there are more than zklock.max_children, which no waiter can ask
 * for (arg_parties): they fail with 54000 rather than list them all.
 */
static void
arrivals_counted(int rc, const struct Stat *stat, const void *data)
{
	OBJ_COMPLETION_BEGIN(o, data)
	{
		char		msg[ZKLOCK_ERRMSG_MAX];

		if (rc == ZOK && stat != NULL)
		{
			arrivals_answer(o, stat->numChildren);
			obj_compact(o);
			if (o->nw == 0)
				obj_probe_end(o);
			else if (zk_children_over(stat, "The arrivals", msg, sizeof(msg)))
				obj_flooded(o, msg);
			else if (!zk_session_usable() ||
					 zoo_awget_children(zk_zh, o->path, obj_watcher, obj_ctx(o),
										arrivals_probed, obj_ctx(o)) != ZOK)
				obj_probe_failed(o, ZCONNECTIONLOSS);
		}
		else if (rc == ZNONODE && zk_session_usable())
			arrivals_watch_dir(o);
		else
			obj_probe_failed(o, rc == ZOK ? ZCONNECTIONLOSS : rc);
	}
	OBJ_COMPLETION_END;
}

/* ---- barriers: entering ---- */

/* A waiting member the barrier opened for: a member now, answered */
static void
member_open(ZkEntry *e)
{
	e->step.barrier = ZKB_MEMBER;
	e->state = ZKE_HELD;
	zk_finish(e, ZKO_GRANTED, 0, NULL);
}

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
		member_open(e);
	}
}

/* Watcher of the zoo_awexists sent by zk_b_barrier_watch_ready() */
static void
barrier_ready_event(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	obj_event(type, ctx, true);
}

/* Completion of the zoo_awexists sent by zk_b_barrier_watch_ready() */
static void
ready_armed(int rc, const struct Stat *stat, const void *data)
{
	OBJ_COMPLETION_BEGIN(o, data)
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
		if (o->nw == 0 && !BOBJ_PROBING(o))
			obj_unwatch(o);
	}
	OBJ_COMPLETION_END;
}

/*
 * Send the exists watch on ready: before the listing of a probe, or (behind)
 * right behind the member's create handed to the batch before it.
 */
int
zk_b_barrier_watch_ready(BObj *o, bool behind)
{
	char		rpath[ZK_PATH_MAX];
	int			rc;

	obj_ready_path(o, rpath, sizeof(rpath));
	if (behind)
		rc = zk_batch_wexists(rpath, barrier_ready_event, obj_ctx(o), ready_armed, obj_ctx(o));
	else
		rc = zoo_awexists(zk_zh, rpath, barrier_ready_event, obj_ctx(o), ready_armed, obj_ctx(o));
	if (rc == ZOK)
		o->rinflight++;
	return rc;
}

/*
 * Keep the names of up to ZKB_READY_CHECKS members of the listing sv (ready
 * left out) for the create of ready that barrier_evaluate() may send.
 */
static void
barrier_keep_members(BObj *o, const struct String_vector *sv)
{
	Size		len = 0;
	char	   *p;
	int			i;
	int			n = 0;

	if (o->rmembers)
		pfree(o->rmembers);
	o->rmembers = NULL;
	o->nrmembers = 0;
	if (sv == NULL)
		return;
	for (i = 0; i < sv->count && n < ZKB_READY_CHECKS; i++)
		if (strcmp(sv->data[i], ZKB_READY) != 0 &&
			strlen(sv->data[i]) <= ZKLOCK_NODE_MAX)
		{
			len += strlen(sv->data[i]) + 1;
			n++;
		}
	if (n == 0)
		return;
	o->rmembers = p = MemoryContextAlloc(zk_b_context(), len);
	for (i = 0; i < sv->count && o->nrmembers < n; i++)
		if (strcmp(sv->data[i], ZKB_READY) != 0 &&
			strlen(sv->data[i]) <= ZKLOCK_NODE_MAX)
		{
			strcpy(p, sv->data[i]);
			p += strlen(p) + 1;
			o->nrmembers++;
		}
}

/* The multi that creates ready (barrier_evaluate), freed by its completion */
typedef struct ReadyCreate
{
	int			nops;
	zoo_op_t	ops[ZKB_READY_CHECKS + 2];
	zoo_op_result_t res[ZKB_READY_CHECKS + 2];
	char		paths[ZKB_READY_CHECKS + 1][ZK_PATH_MAX];
} ReadyCreate;

/* Completion of the zoo_amulti sent by barrier_evaluate() */
static void
ready_created(int rc, const void *data)
{
	/*
	 * ZNODEEXISTS: another member made it first; ZNONODE or ZBADVERSION: a
	 * member counted has gone (or ready changed) since the listing: the
	 * watch on the children probes again.  Either way nothing to do here.
	 */
	pfree((void *) data);
}

/* Completion of the delete of ready sent by zk_b_close_ready() */
static void
ready_closed(int rc, const void *data)
{
	OBJ_COMPLETION_BEGIN(o, data)
	{
		o->rclosing = false;
	}
	OBJ_COMPLETION_END;
}

/*
 * A member starts to leave: delete ready, so that the barrier closes behind
 * it.  The members of this server that leave together send one delete:
 * while it is unanswered it closes the barrier for all of them (a second
 * one, landing later, could only delete the ready of a next round).
 */
void
zk_b_close_ready(BObj *o)
{
	char		rpath[ZK_PATH_MAX];

	if (o->rclosing)
		return;
	obj_ready_path(o, rpath, sizeof(rpath));
	if (zoo_adelete(zk_zh, rpath, -1, ready_closed, obj_ctx(o)) == ZOK)
		o->rclosing = true;
}

/* Completion of the zoo_aexists sent by barrier_probed() */
static void
ready_read(int rc, const struct Stat *stat, const void *data)
{
	OBJ_COMPLETION_BEGIN(o, data)
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
	OBJ_COMPLETION_END;
}

/* Completion of the zoo_awget_children sent by obj_probe() */
static void
barrier_probed(int rc, const struct String_vector *sv, const void *data)
{
	OBJ_COMPLETION_BEGIN(o, data)
	{
		char		msg[ZKLOCK_ERRMSG_MAX];
		struct Stat st;

		memset(&st, 0, sizeof(st));
		st.numChildren = (rc == ZOK && sv) ? sv->count : 0;
		if (zk_children_over(&st, "The barrier's members", msg, sizeof(msg)))
		{
			/* flooded (no zklock session counts that many): not again */
			o->watching = true;
			obj_flooded(o, msg);
		}
		else if (rc == ZOK || rc == ZNONODE)
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
			barrier_keep_members(o, rc == ZOK ? sv : NULL);
			if (ready && zk_session_usable())
			{
				char		rpath[ZK_PATH_MAX];

				obj_ready_path(o, rpath, sizeof(rpath));
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
					o->probe = BPROBE_AGAIN;	/* our members are re-created */
				obj_probe_end(o);
			}
		}
		else
			obj_probe_failed(o, rc);
	}
	OBJ_COMPLETION_END;
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
			member_open(e);
		}
		else if (o->ready_czxid != 0 && o->ready_czxid > e->token)
		{
			member_open(e);
		}
		else if (e->try_only)
			zk_finish(e, ZKO_BUSY, 0, NULL);
	}
	if (by_count && (o->ready_czxid == 0 || o->ready_czxid < oldest) &&
		zk_session_usable())
	{
		/*
		 * One multi: check that every member counted (up to
		 * ZKB_READY_CHECKS) is still there, replace a leftover ready (at
		 * the version read) and create ready.  A create sent by a session
		 * that then ended may still be applied later (ZooKeeper applies a
		 * request already forwarded to its leader after the client closed
		 * or gave up the session), when this round's members have left and
		 * a next round's are waiting: an unconditional ready, newer than
		 * their nodes, would open that round before its parties came.  The
		 * checks fail it then: a member of this round has gone (and if all
		 * of them were still there, they would open it by their count).
		 */
		ReadyCreate *rcr = MemoryContextAllocZero(zk_b_context(), sizeof(ReadyCreate));
		const char *m = o->rmembers;
		char	   *rpath = rcr->paths[ZKB_READY_CHECKS];

		obj_ready_path(o, rpath, ZK_PATH_MAX);
		for (i = 0; i < o->nrmembers; i++)
		{
			snprintf(rcr->paths[i], ZK_PATH_MAX, "%s/%s", o->path, m);
			zoo_check_op_init(&rcr->ops[rcr->nops++], rcr->paths[i], -1);
			m += strlen(m) + 1;
		}
		if (o->ready_czxid != 0)
			/* a leftover: replace it, unless someone else just did */
			zoo_delete_op_init(&rcr->ops[rcr->nops++], rpath, o->ready_version);
		zoo_create_op_init(&rcr->ops[rcr->nops++], rpath, NULL, -1,
						   zk_acl_path(rpath), 0, NULL, 0);
		if (zoo_amulti(zk_zh, rcr->nops, rcr->ops, rcr->res, ready_created, rcr) != ZOK)
			pfree(rcr);
		o->ready_czxid = 0;
	}
}

/*
 * Send o's probe, with a watch: an exists for a gate; for arrivals an
 * exists that counts them, then (arrivals_counted) a listing with a watch
 * if a waiter wants more; and for a barrier the exists watch on ready then
 * the listing.
 * A request that cannot be sent counts as a connection loss (probed again
 * once the session is usable).
 */
static void
obj_probe(BObj *o)
{
	int			rc;

	o->probe = BPROBE_OUT;
	switch (o->op)
	{
		case ZKB_GATE:
			rc = zoo_awexists(zk_zh, o->path, obj_watcher, obj_ctx(o), gate_probed, obj_ctx(o));
			break;
		case ZKB_ARRIVALS:
			/* the count first; the listing only when it is needed */
			rc = zoo_aexists(zk_zh, o->path, 0, arrivals_counted, obj_ctx(o));
			break;
		default:
			rc = zk_b_barrier_watch_ready(o, false);
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

/*
 * e waits on o (a wait, or an entering member): its owner is told once
 * that it waits, and o, a waiter more, probes (zk_b_obj_kick)
 */
void
zk_b_obj_wait(BObj *o, ZkEntry *e)
{
	if (e->state != ZKE_WAITING)
	{
		e->state = ZKE_WAITING;
		zk_wake_owner(e);		/* its timeout counts from now */
	}
	zk_b_obj_add(o, e);
	zk_b_obj_kick(o);
}

/* A wait or member let go: off its object's waiters, and freed */
void
zk_b_entry_free(ZkEntry *e)
{
	zk_b_obj_remove_entry(zk_b_obj_of(e), e);
	zk_entry_free(e);
}

static void
bwait_drive(ZkEntry *e)
{
	BObj	   *o = zk_b_obj_of(e);

	if (e->released)
	{
		zk_b_entry_free(e);
		return;
	}
	if (e->outcome != ZKO_NONE)
		return;
	zk_b_obj_wait(o, e);
}

/* A drive of the wait threw: fail it, or free it if it was let go */
static void
bwait_drive_failed(ZkEntry *e)
{
	if (e->released)
		zk_b_entry_free(e);
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
		zk_b_entry_free(e);
	else
		zk_b_obj_kick(zk_b_obj_of(e));
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

	if (zk_zh == NULL || o->nw > 0 || BOBJ_PROBING(o) || o->rinflight > 0 ||
		o->creating > 0)
		return;
	obj_ready_path(o, rpath, sizeof(rpath));
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

/*
 * An idle object's count of members' creates in flight, checked against
 * the entries: a count that no member's create stands for any more (an
 * answer that never came back to it) would keep the watch on ready for
 * good, and the object too.  Only at an idle recheck, a few per turn.
 */
static void
obj_check_creating(BObj *o)
{
	int			i;

	if (o->creating == 0)
		return;
	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->state != ZKE_FREE && e->kind == ZKK_BMEMBER && e->create_inflight &&
			zk_b_obj_of(e) == o)
			return;
	}
	o->creating = 0;
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
		obj_check_creating(o);
		obj_drop_listed_watches(o, true);
	}
}

/* Nothing refers to o: no waiter, nothing in flight, no recheck due */
static bool
obj_forgettable(BObj *o, TimestampTz now)
{
	return o->nw == 0 && o->probe == BPROBE_IDLE &&
		o->rinflight == 0 && o->creating == 0 && !o->recheck &&
		!o->watching && !o->rwatching &&
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
		if (o->rmembers)
			pfree(o->rmembers);
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
		o->watching = o->rwatching = false;
		if (o->nw > 0)
		{
			o->probe = BPROBE_RETRY;
			any_retry = true;
		}
		else if (o->probe != BPROBE_RETRY)
			o->probe = BPROBE_IDLE;
	}
}

/*
 * The recipe's session_usable, every turn the session is usable: idle
 * rechecks and forgetting, after a reconnect the watches nobody waits on,
 * and the probes that waited for a usable session.  (A previous worker's
 * entries are adopted by each kind's adopt op.)
 */
static void
b_session_usable(void)
{
	HASH_SEQ_STATUS st;
	BObj	   *o;

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
		if (o->probe == BPROBE_RETRY)
		{
			o->probe = BPROBE_IDLE;
			zk_b_obj_kick(o);
		}
}

/* ------------------------------------------------------------------------
 * The tables
 * ------------------------------------------------------------------------
 */
const ZkRecipe zk_barrier_recipe = {
	.session_reset = b_session_reset,
	.session_usable = b_session_usable,
};

/* A barrier wait: a previous worker's wait joins again (adopt) */
const ZkKindOps zk_bwait_ops =
	ZK_KIND_OPS(bwait_drive, bwait_drive_failed, bwait_session_lost,
				.adopt = bwait_drive);
