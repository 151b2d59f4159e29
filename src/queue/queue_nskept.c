/*-------------------------------------------------------------------------
 *
 * queue_nskept.c
 *	  What one namespace keeps in ZooKeeper, against
 *	  zklock.max_namespace_items (issue 35).
 *
 *	  zklock.max_kept_items bounds one queue or arrivals object, and
 *	  zklock.max_kept_bytes/nodes all of the root (kept.c): without a share
 *	  per namespace, one tenant that fills many queues stops every other
 *	  tenant's publications at the root's bound.  ZooKeeper cannot count a
 *	  namespace for us (its nodes are children of the kinds' directories
 *	  every namespace shares, <root>/queues/<ns>:<name>), so the worker
 *	  counts it: a census lists <root>/queues and <root>/arrivals, keeps
 *	  the names of that namespace, and adds up the child counts of each
 *	  queue's entries node and of each arrivals node (one exists each, at
 *	  most ZK_READ_WINDOW in flight, never a listing of items).  A listing
 *	  of a shared directory larger than NS_LIST_MAX bytes (judged from its
 *	  child count before it is sent) is not read: the namespace is then not
 *	  bounded, said with a rate-limited WARNING (the root's bound still
 *	  holds).
 *
 *	  A publication (pre-commit, queue_publish.c) that adds items or
 *	  arrivals to a namespace is judged against the namespace's last census
 *	  (waiting for a new one when the last began more than NS_FRESH_MS
 *	  ago, longer for a census that lists and counts many names) plus
 *	  what this worker let through for the namespace and the
 *	  census may not have counted: each publication let through reserves
 *	  its items (NsResv) until a census that began after its entry was
 *	  seen gone (applied, or let go) has finished.  What was consumed since
 *	  the census is not subtracted until the next one: the estimate errs on
 *	  the side of refusing.  Clusters do not see each other's publications
 *	  between two censuses: each may let through what its own producers add
 *	  in that time (doc/limits.md).
 *
 *	  doc/limits.md, "What one namespace keeps".
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"

#include "utils/memutils.h"

#define NS_SLOTS		ZK_NS_SLOTS	/* namespaces counted at once */
#define NS_FRESH_MS		1000	/* a census younger is used as it is ... */
#define NS_FRESH_MAX_MS	60000	/* ... or, for a large one, up to this */
#define NS_LIST_MAX		(8 * 1024 * 1024)	/* bytes of one shared listing */

typedef struct NsWaiter
{
	const void *ectx;			/* zk_ctx_of(e) */
	int			adding;
	zk_q_answered_fn answered;	/* the caller's, once e has every answer */
} NsWaiter;

typedef struct NsCensus
{
	bool		used;
	char		ns[ZKLOCK_NS_MAX + 1];
	int64		counted;		/* items at the last census; -1 none */
	TimestampTz counted_at;		/* when that census began */
	bool		unbounded;		/* the last census could not count */
	int64		cost;			/* names it listed and counted */
	uint64		refused;		/* COMMITs refused */
	List	   *resv;			/* NsResv *: let through, maybe not counted */
	int64		reserved;		/* their items */
	/* a census under way */
	bool		running;
	uint32		run;			/* which one (stale answers are dropped) */
	TimestampTz started_at;
	int			lists;			/* directory reads out */
	int			inflight;		/* child counts out */
	int			rc;				/* first failure */
	bool		over;			/* a listing too large to read */
	int64		sum;
	int64		listed;			/* names of every namespace listed */
	int64		own;			/* of them, this namespace's */
	List	   *names;			/* char * paths still to count */
	List	   *waiters;		/* NsWaiter * */
	TimestampTz used_at;
} NsCensus;

/*
 * Items a publication let through adds to a namespace, in its slot's list
 * (NsCensus.resv, summed in .reserved): judging a publication costs the
 * same however many others are reserved.  resv_gen/resv_n (by entry
 * index) say whether an entry's current publication holds any, so that
 * checking it again finds them without a walk otherwise.
 */
typedef struct NsResv
{
	int			adding;
	uint32		idx;			/* the publication's entry */
	uint32		gen;
	TimestampTz gone_at;		/* when the entry was seen gone; 0 live */
} NsResv;

static uint32 *resv_gen = NULL;	/* [max_entries]: gen of resv_n's entry */
static uint16 *resv_n = NULL;	/* [max_entries]: its reservations */

typedef struct NsCall
{
	int			slot;
	uint32		run;
	int			dir;			/* 0 queues, 1 arrivals */
} NsCall;

static NsCensus ns_tab[NS_SLOTS];
static uint32 ns_runs = 0;
static MemoryContext ns_cxt = NULL;
static ZkLogLimit over_log;

static const char *const ns_dirs[] = {"queues", "arrivals"};

static void ns_send_more(int slot);
static void ns_maybe_finish(int slot);

static MemoryContext
ns_context(void)
{
	return ZK_LAZY_CONTEXT(ns_cxt, "zklock namespace census", ALLOCSET_SMALL_SIZES);
}

static NsCall *
ns_call(int slot, int dir)
{
	NsCall	   *c = MemoryContextAlloc(ns_context(), sizeof(NsCall));

	c->slot = slot;
	c->run = ns_tab[slot].run;
	c->dir = dir;
	return c;
}

/* Is the answer c carries still the census its slot runs? */
static bool
ns_current(const NsCall *c)
{
	return ns_tab[c->slot].running && ns_tab[c->slot].run == c->run;
}

/* Note a failure of the running census of slot */
static void
ns_failed(int slot, int rc)
{
	if (ns_tab[slot].rc == ZOK)
		ns_tab[slot].rc = (rc == ZOK ? ZCONNECTIONLOSS : rc);
}

/* Completion of an exists of a queue's entries or an arrivals node */
static void
ns_counted(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(NsCall, c, data)
	{
		if (ns_current(c))
		{
			NsCensus   *n = &ns_tab[c->slot];

			n->inflight--;
			if (rc == ZOK && stat != NULL)
				n->sum += stat->numChildren;
			else if (rc != ZNONODE)
				ns_failed(c->slot, rc);
			ns_send_more(c->slot);
			ns_maybe_finish(c->slot);
		}
	}
	NONE_COMPLETION_END;
	pfree(c);
}

/* Send the next child counts, at most ZK_READ_WINDOW out */
static void
ns_send_more(int slot)
{
	NsCensus   *n = &ns_tab[slot];

	while (n->names != NIL && n->inflight < ZK_READ_WINDOW && n->rc == ZOK)
	{
		char	   *path = (char *) linitial(n->names);
		NsCall	   *c = ns_call(slot, 0);

		n->names = list_delete_first(n->names);
		if (zoo_aexists(zk_zh, path, 0, ns_counted, c) == ZOK)
			n->inflight++;
		else
		{
			pfree(c);
			ns_failed(slot, ZCONNECTIONLOSS);
		}
		pfree(path);
	}
}

/* Completion of the listing of a shared directory */
static void
ns_listed(int rc, const struct String_vector *sv, const void *data)
{
	DATA_COMPLETION_BEGIN(NsCall, c, data)
	{
		if (ns_current(c))
		{
			NsCensus   *n = &ns_tab[c->slot];

			n->lists--;
			if (rc == ZOK && sv != NULL)
			{
				MemoryContext old = MemoryContextSwitchTo(ns_context());
				int			i;

				n->listed += sv->count;
				for (i = 0; i < sv->count; i++)
				{
					if (!zk_child_in_namespace(sv->data[i], n->ns))
						continue;
					n->own++;
					n->names = lappend(n->names,
									   psprintf(c->dir == 0 ? "%s/%s/%s/entries" : "%s/%s/%s",
												zk_root, ns_dirs[c->dir], sv->data[i]));
					/* a queue's delayed items count too (queue_delay.c) */
					if (c->dir == 0)
						n->names = lappend(n->names,
										   psprintf("%s/%s/%s/delayed", zk_root,
													ns_dirs[c->dir], sv->data[i]));
				}
				MemoryContextSwitchTo(old);
				ns_send_more(c->slot);
			}
			else if (rc != ZNONODE)
				ns_failed(c->slot, rc);
			ns_maybe_finish(c->slot);
		}
	}
	NONE_COMPLETION_END;
	pfree(c);
}

/* Completion of the exists of a shared directory: list it, if not too large */
static void
ns_dir_counted(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(NsCall, c, data)
	{
		if (ns_current(c))
		{
			NsCensus   *n = &ns_tab[c->slot];
			char		path[ZK_PATH_MAX];

			n->lists--;
			if (rc == ZOK && stat != NULL &&
				(Size) stat->numChildren * ZK_LIST_NAME_MIN > NS_LIST_MAX)
				n->over = true;
			else if (rc == ZOK && stat != NULL && stat->numChildren > 0 && n->rc == ZOK)
			{
				NsCall	   *l = ns_call(c->slot, c->dir);

				snprintf(path, sizeof(path), "%s/%s", zk_root, ns_dirs[c->dir]);
				if (zoo_aget_children(zk_zh, path, 0, ns_listed, l) == ZOK)
					n->lists++;
				else
				{
					pfree(l);
					ns_failed(c->slot, ZCONNECTIONLOSS);
				}
			}
			else if (rc != ZOK && rc != ZNONODE)
				ns_failed(c->slot, rc);
			ns_maybe_finish(c->slot);
		}
	}
	NONE_COMPLETION_END;
	pfree(c);
}

/* Reserve adding items of slot's namespace for e's publication */
static void
resv_add(int slot, ZkEntry *e, int adding)
{
	NsCensus   *n = &ns_tab[slot];
	uint32		idx = zk_entry_index(e);
	NsResv	   *r = MemoryContextAlloc(ns_context(), sizeof(NsResv));

	if (resv_gen == NULL)
	{
		resv_gen = MemoryContextAllocZero(ns_context(), sizeof(uint32) * zk_ctl->max_entries);
		resv_n = MemoryContextAllocZero(ns_context(), sizeof(uint16) * zk_ctl->max_entries);
	}
	r->adding = adding;
	r->idx = idx;
	r->gen = e->gen;
	r->gone_at = 0;
	n->resv = lappend(n->resv, r);
	n->reserved += adding;
	if (resv_gen[idx] != e->gen)
	{
		resv_gen[idx] = e->gen;
		resv_n[idx] = 0;
	}
	resv_n[idx]++;
}

/* Is r's publication gone (applied, or let go)? */
static bool
resv_gone(const NsResv *r)
{
	return zk_q_entry_of(r->idx, r->gen) == NULL;
}

/*
 * Walk slot's reservations: with stamp_at (a census beginning then, which
 * counts what they added), those whose publication is gone are stamped
 * with it; those stamped at or before drop_upto (a census that began then
 * has finished) or gone for two minutes, and (idx, gen)'s own, are
 * dropped.
 */
static void
resv_walk(int slot, TimestampTz stamp_at, TimestampTz drop_upto, uint32 idx, uint32 gen)
{
	NsCensus   *n = &ns_tab[slot];
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	foreach(lc, n->resv)
	{
		NsResv	   *r = (NsResv *) lfirst(lc);

		if (stamp_at != 0 && r->gone_at == 0 && resv_gone(r))
			r->gone_at = stamp_at;
		if ((r->idx == idx && r->gen == gen) ||
			(r->gone_at != 0 &&
			 (r->gone_at <= drop_upto ||
			  TimestampDifferenceExceeds(r->gone_at, now, 2 * NS_FRESH_MAX_MS))))
		{
			n->reserved -= r->adding;
			if (resv_gen != NULL && resv_gen[r->idx] == r->gen && resv_n[r->idx] > 0)
				resv_n[r->idx]--;
			n->resv = foreach_delete_current(n->resv, lc);
			pfree(r);
		}
	}
}

/* Drop every reservation of slot (the slot goes to another namespace) */
static void
resv_clear(int slot)
{
	NsCensus   *n = &ns_tab[slot];
	ListCell   *lc;

	foreach(lc, n->resv)
	{
		NsResv	   *r = (NsResv *) lfirst(lc);

		if (resv_gen != NULL && resv_gen[r->idx] == r->gen && resv_n[r->idx] > 0)
			resv_n[r->idx]--;
		pfree(r);
	}
	list_free(n->resv);
	n->resv = NIL;
	n->reserved = 0;
}

/* Drop what e's publication reserved in any namespace (checked again) */
void
zk_q_ns_unreserve(ZkEntry *e)
{
	uint32		idx = zk_entry_index(e);
	int			i;

	if (resv_gen == NULL || resv_gen[idx] != e->gen || resv_n[idx] == 0)
		return;
	for (i = 0; i < NS_SLOTS; i++)
		if (ns_tab[i].used && ns_tab[i].resv != NIL)
			resv_walk(i, 0, 0, idx, e->gen);
}

/* Copy slot's counts to shared memory, for zk_namespace_totals() */
static void
ns_publish(int slot)
{
	NsCensus   *n = &ns_tab[slot];
	ZkNsUsage  *u = &zk_q_shared->ns_usage[slot];

	zk_worker_enter();
	u->state = !n->used ? ZKNS_UNUSED :
		n->counted < 0 ? ZKNS_COUNTING :
		n->unbounded ? ZKNS_UNBOUNDED : ZKNS_COUNTED;
	strlcpy(u->ns, n->ns, sizeof(u->ns));
	u->counted = Max(n->counted, 0);
	u->reserved = n->reserved;
	u->counted_at = n->counted < 0 ? 0 : n->counted_at;
	u->refused = n->refused;
	zk_worker_leave();
}

/* Judge e's publication against slot's counts (refused: e->pub_refused) */
static void
ns_judge(ZkEntry *e, int slot, int adding)
{
	NsCensus   *n = &ns_tab[slot];
	int64		kept;

	if (n->unbounded || ZKQ(e)->pub_refused)
		return;
	/* e's own were dropped when its check began (zk_q_ns_unreserve) */
	kept = n->counted + n->reserved;
	if (kept + adding > zk_max_namespace_items)
	{
		ZKQ(e)->pub_refused = true;
		ZKQ(e)->pub_over_ns = true;
		n->refused++;
		ns_publish(slot);
		snprintf(e->errmsg, sizeof(e->errmsg),
				 "ZooKeeper keeps about %lld items of this namespace; this transaction adds %d; zklock.max_namespace_items is %d (namespace \"%s\")",
				 (long long) kept, adding, zk_max_namespace_items, n->ns);
		return;
	}
	resv_add(slot, e, adding);
	ns_publish(slot);
}

/* Everything of slot's census answered: store it and answer its waiters */
static void
ns_maybe_finish(int slot)
{
	NsCensus   *n = &ns_tab[slot];
	List	   *waiters;
	ListCell   *lc;
	int			rc;

	if (!n->running || n->lists > 0 || n->inflight > 0 ||
		(n->names != NIL && n->rc == ZOK))
		return;
	rc = n->rc;
	n->running = false;
	list_free_deep(n->names);
	n->names = NIL;
	if (rc == ZOK)
	{
		n->counted = n->sum;
		n->counted_at = n->started_at;
		n->cost = n->listed / 20 + n->own;
		ns_publish(slot);
		/* what it counted is no longer reserved */
		resv_walk(slot, 0, n->started_at, PG_UINT32_MAX, 0);
		n->unbounded = n->over;
		if (n->over && zk_log_limited(&over_log, "namespace census over"))
			ereport(WARNING,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("zklock: %s/queues or %s/arrivals has too many children to count namespace \"%s\"; zklock.max_namespace_items is not enforced for it",
							zk_root, zk_root, n->ns),
					 errdetail("Listing it would read more than %d MB of names of every namespace.",
							   NS_LIST_MAX / (1024 * 1024)),
					 errhint("Drop unused queues (zk_queue_drop) and reset unused arrivals; zklock.max_kept_nodes still bounds the root.")));
	}
	waiters = n->waiters;
	n->waiters = NIL;
	foreach(lc, waiters)
	{
		NsWaiter   *w = (NsWaiter *) lfirst(lc);
		ZkEntry    *e = zk_entry_of(w->ectx);

		if (e != NULL && e->outstanding > 0)
		{
			e->outstanding--;
			/* a failed census: judged from the last, if any */
			if (n->counted >= 0)
				ns_judge(e, slot, w->adding);
			if (e->outstanding == 0)
				w->answered(e, rc);
		}
	}
	list_free_deep(waiters);
}

/* Start a census of slot's namespace; false when nothing could be sent */
static bool
ns_start(int slot)
{
	NsCensus   *n = &ns_tab[slot];
	int			dir;

	n->running = true;
	n->run = ++ns_runs;
	/* publications gone by now are counted by this census */
	n->started_at = GetCurrentTimestamp();
	resv_walk(slot, n->started_at, 0, PG_UINT32_MAX, 0);
	n->lists = 0;
	n->inflight = 0;
	n->rc = ZOK;
	n->over = false;
	n->sum = 0;
	n->listed = 0;
	n->own = 0;
	n->names = NIL;
	for (dir = 0; dir < (int) lengthof(ns_dirs); dir++)
	{
		char		path[ZK_PATH_MAX];
		NsCall	   *c = ns_call(slot, dir);

		snprintf(path, sizeof(path), "%s/%s", zk_root, ns_dirs[dir]);
		if (zoo_aexists(zk_zh, path, 0, ns_dir_counted, c) == ZOK)
			n->lists++;
		else
		{
			pfree(c);
			ns_failed(slot, ZCONNECTIONLOSS);
		}
	}
	if (n->lists == 0)
	{
		n->running = false;
		return false;
	}
	return true;
}

/* The slot of namespace ns (a new one, or the least recently used idle one) */
static int
ns_slot(const char *ns)
{
	int			i;
	int			best = -1;

	for (i = 0; i < NS_SLOTS; i++)
		if (ns_tab[i].used && strcmp(ns_tab[i].ns, ns) == 0)
			return i;
	for (i = 0; i < NS_SLOTS; i++)
	{
		if (!ns_tab[i].used)
		{
			best = i;
			break;
		}
		if (!ns_tab[i].running && ns_tab[i].waiters == NIL &&
			(best < 0 || ns_tab[i].used_at < ns_tab[best].used_at))
			best = i;
	}
	if (best < 0)
		return -1;
	resv_clear(best);
	memset(&ns_tab[best], 0, sizeof(NsCensus));
	ns_tab[best].used = true;
	strlcpy(ns_tab[best].ns, ns, sizeof(ns_tab[best].ns));
	ns_tab[best].counted = -1;
	ns_publish(best);
	return best;
}

/*
 * Check that e's publication may add "adding" items and arrivals to
 * namespace ns.  Judged at once from a census that began less than
 * NS_FRESH_MS ago (e->pub_refused set when refused), or e waits for a new
 * one (e->outstanding counts it; the census calls "answered", the caller's
 * continuation, when e's last answer is in).  Let through unchecked when no census can be had
 * (every slot busy counting, or nothing could be sent: then the
 * transaction node's create fails too, and the publication is checked
 * again when it is retried).
 */
void
zk_q_ns_check(ZkEntry *e, const char *ns, int adding, zk_q_answered_fn answered)
{
	int			slot;
	NsCensus   *n;
	TimestampTz now = GetCurrentTimestamp();

	if (zk_max_namespace_items <= 0 || adding <= 0)
		return;
	slot = ns_slot(ns);
	if (slot < 0)
		return;
	n = &ns_tab[slot];
	n->used_at = now;
	if (!n->running)
	{
		/*
		 * a census is redone after a second, or after longer for one that
		 * costs more: 1 ms per name counted and per 20 names listed (a
		 * namespace of 10,000 queues among 100,000 is counted at most
		 * every 16 s, about 600 exists a second)
		 */
		int			fresh = (int) Min(NS_FRESH_MS + n->cost, NS_FRESH_MAX_MS);

		if (n->counted >= 0 &&
			!TimestampDifferenceExceeds(n->counted_at, now, fresh))
		{
			ns_judge(e, slot, adding);
			return;
		}
		if (!ns_start(slot))
			return;
	}
	/* waits for the census under way */
	{
		MemoryContext old = MemoryContextSwitchTo(ns_context());
		NsWaiter   *w = palloc(sizeof(NsWaiter));

		w->ectx = zk_ctx_of(e);
		w->adding = adding;
		w->answered = answered;
		n->waiters = lappend(n->waiters, w);
		MemoryContextSwitchTo(old);
	}
	e->outstanding++;
}
