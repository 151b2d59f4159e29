/*-------------------------------------------------------------------------
 *
 * queue_state.c
 *	  The queue's worker state, below every other part of its worker half
 *	  (README, "Stack"): per-queue state (QState for consumers, QSeq for
 *	  publications) and its memory, paths and parents, the claims an entry
 *	  holds and their count per queue, the record of an item read, listings
 *	  of entries and taken, and freeing a queue entry of any kind.
 *
 *	  Runs in the worker, lock held (completions take it themselves).
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"

#include "access/transam.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/xid8.h"


HTAB *zk_qseqs = NULL;

HTAB *zk_qstates = NULL;
static MemoryContext qcxt = NULL;

/* resolution */
bool zk_q_resolve_needed = true;
bool zk_q_resolve_running = false;
TimestampTz zk_q_resolve_not_before = 0;	/* a settling pass waits for a
											 * run that may still die */

/* The memory of the queue recipe's worker state, made on first use */
MemoryContext
zk_q_context(void)
{
	return ZK_LAZY_CONTEXT(qcxt, "zklock queues", ALLOCSET_DEFAULT_SIZES);
}

/* ---- paced entries (QPaced) ---- */

/*
 * Schedule e's next try in *list: first_ms from now the first time (or
 * when it changes from quiet to not or back), then twice as long each
 * time, up to max_ms.  Returns its record.
 */
QPaced *
zk_q_paced_schedule(List **list, ZkEntry *e, bool quiet, int first_ms, int max_ms)
{
	QPaced	   *p = zk_entry_ref_find(*list, e);

	if (p == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(zk_q_context());

		p = palloc0(sizeof(QPaced));
		zk_entry_ref_set(&p->ref, e);
		p->interval_ms = first_ms;
		*list = lappend(*list, p);
		MemoryContextSwitchTo(old);
	}
	else if (p->quiet != quiet)
		p->interval_ms = first_ms;
	else
		p->interval_ms = Min(p->interval_ms * 2, max_ms);
	p->quiet = quiet;
	p->due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), p->interval_ms);
	return p;
}

/* e's tries are no longer paced: take it off *list */
void
zk_q_paced_forget(List **list, ZkEntry *e)
{
	QPaced	   *p = zk_entry_ref_find(*list, e);

	if (p != NULL)
	{
		*list = list_delete_ptr(*list, p);
		pfree(p);
	}
}

/*
 * Every usable turn: drive (drive) the entries of *list whose pause is over
 * and that are not busy; forget those gone, of another kind than kind (the
 * slot was reused), or no longer wanted.  They are driven once the list is
 * walked (a drive may take its entry off the list), each if still the same
 * entry of the kind.
 */
void
zk_q_paced_tick(List **list, int kind, bool (*wanted) (ZkEntry *e, QPaced *p),
				bool (*busy) (ZkEntry *e), void (*drive) (ZkEntry *e))
{
	TimestampTz now;
	ListCell   *lc;
	ZkEntryRef *due;
	int			ndue = 0;
	int			i;

	if (*list == NIL)
		return;
	due = palloc(sizeof(ZkEntryRef) * list_length(*list));
	now = GetCurrentTimestamp();
	foreach(lc, *list)
	{
		QPaced	   *p = lfirst(lc);
		ZkEntry    *e = zk_entry(p->ref.idx);

		if (e->gen != p->ref.gen || e->state == ZKE_FREE || e->kind != kind ||
			!wanted(e, p))
		{
			*list = foreach_delete_current(*list, lc);
			pfree(p);
			continue;
		}
		if (now < p->due || busy(e))
			continue;
		p->due = TimestampTzPlusMilliseconds(now, p->interval_ms);
		due[ndue++] = p->ref;
	}
	for (i = 0; i < ndue; i++)
	{
		ZkEntry    *e = zk_entry(due[i].idx);

		if (e->gen == due[i].gen && e->state != ZKE_FREE && e->kind == kind)
			drive(e);
	}
	pfree(due);
}

/*
 * The entry of a per-queue hash (keyed by the UTF-8 queue name, created in
 * zk_q_context() on first use); NULL when absent and not created.  A new
 * entry is zeroed past its key.
 */
void *
zk_q_hash_entry(HTAB **h, const char *what, Size entrysize, const char *name,
			 bool create, bool *isnew)
{
	char		key[ZKLOCK_QNAME_MAX + 1];
	bool		found;
	char	   *ent;

	*isnew = false;
	if (*h == NULL)
	{
		if (!create)
			return NULL;
		*h = zk_hash_create(what, 64, sizeof(key), entrysize, true, zk_q_context());
	}
	memset(key, 0, sizeof(key));
	strlcpy(key, name, sizeof(key));
	ent = hash_search(*h, key, create ? HASH_ENTER : HASH_FIND, &found);
	if (ent != NULL && create && !found)
	{
		memset(ent + sizeof(key), 0, entrysize - sizeof(key));
		*isnew = true;
	}
	return ent;
}

/*
 * The entry a completion was sent for, by index and generation: NULL once
 * it was freed (and maybe used again) meanwhile
 */
ZkEntry *
zk_q_entry_of(uint32 idx, uint32 gen)
{
	ZkEntry    *e = zk_entry(idx);

	return (e->gen == gen && e->state != ZKE_FREE) ? e : NULL;
}

/*
 * The entry (idx, gen) while a request of a long operation (a move, a
 * drop) is still what it waits for, its requests outstanding; else NULL
 */
ZkEntry *
zk_q_request_of(uint32 idx, uint32 gen)
{
	ZkEntry    *e = zk_q_entry_of(idx, gen);

	if (e == NULL || e->outstanding == 0)
		return NULL;
	return e;
}

/* the queue's shared memory (zk_queue_backend.shmem) */
ZkQueueShared *zk_q_shared = NULL;

/* how many per-queue states this worker keeps, for zk_status() */
void
zk_q_tracked_update(void)
{
	zk_q_shared->queues_tracked =
		(zk_qstates ? (int) hash_get_num_entries(zk_qstates) : 0) +
		(zk_qseqs ? (int) hash_get_num_entries(zk_qseqs) : 0);
}

/*
 * The ACLs of a queue's node, entries and taken, once per session
 * (aclcheck.c: a hash lookup each, the reads never waited for)
 */
static void
q_check_acls(const char *qpath)
{
	char		buf[ZK_PATH_MAX];

	zk_acl_check_node(qpath);
	snprintf(buf, sizeof(buf), "%s/entries", qpath);
	zk_acl_check_node(buf);
	snprintf(buf, sizeof(buf), "%s/taken", qpath);
	zk_acl_check_node(buf);
}

/* The consumer state of queue name (created when asked); marks it used */
QState *
zk_q_state(const char *name, bool create)
{
	bool		isnew;
	QState	   *q = zk_q_hash_entry(&zk_qstates, "zklock queue states", sizeof(QState),
								 name, create, &isnew);

	if (isnew)
	{
		zk_queue_path(q->name, q->path, sizeof(q->path));
		zk_q_tracked_update();
	}
	if (q != NULL)
	{
		q->quiet = false;
		if (q->acl_session != zk_cur_session && zk_session_usable())
		{
			q->acl_session = zk_cur_session;
			q_check_acls(q->path);
		}
	}
	return q;
}

/* The publication state of queue name, created on first use; marks it used */
QSeq *
zk_q_seq(const char *name)
{
	bool		isnew;
	QSeq	   *q = zk_q_hash_entry(&zk_qseqs, "zklock queues published", sizeof(QSeq),
								 name, true, &isnew);

	if (isnew)
	{
		char		qpath[ZK_PATH_MAX];

		zk_queue_path(q->name, qpath, sizeof(qpath));
		q_check_acls(qpath);
		zk_q_tracked_update();
	}
	q->quiet = false;
	return q;
}

/* <queue>/<child> */
void
zk_q_seq_path(const QSeq *q, const char *child, char *out, size_t outlen)
{
	char		qpath[ZK_PATH_MAX];

	zk_queue_path(q->name, qpath, sizeof(qpath));
	snprintf(out, outlen, "%s/%s", qpath, child);
}

/* Do entries and taken of qname exist, as far as this worker knows? */
bool
zk_q_parents_known(const char *qname)
{
	return zk_q_seq(qname)->parents_ok;
}

/* Remember whether entries and taken of qname exist (false after a NONODE) */
void
zk_q_parents_remember(const char *qname, bool ok)
{
	zk_q_seq(qname)->parents_ok = ok;
}

/*
 * Send creates for every missing component of path (persistent, empty):
 * pipelined, answers ignored; the session's order makes whatever is sent
 * next see them.
 */
void
zk_q_send_ensure_path(const char *path)
{
	char		buf[ZK_PATH_MAX];
	char	   *p;

	strlcpy(buf, path, sizeof(buf));
	for (p = buf + 1;; p++)
	{
		if (*p == '/' || *p == '\0')
		{
			char		c = *p;

			*p = '\0';
			zk_create_parent(buf, 0);
			*p = c;
			if (c == '\0')
				break;
		}
	}
}

/* Send the creates of a queue's parents, entries and taken (pipelined) */
void
zk_q_send_ensure_queue(const char *qpath)
{
	char		buf[ZK_PATH_MAX];

	snprintf(buf, sizeof(buf), "%s/entries", qpath);
	zk_q_send_ensure_path(buf);
	snprintf(buf, sizeof(buf), "%s/taken", qpath);
	zk_create_parent(buf, 0);
	/* delayed items until they are due (queue_delay.c) */
	snprintf(buf, sizeof(buf), "%s/delayed", qpath);
	zk_create_parent(buf, 0);
}

/* A dequeue entry's claim slots (ZkClaimRec[max_items] in the dsa), or NULL */
ZkClaimRec *
zk_q_claims_of(ZkEntry *e)
{
	if (!DsaPointerIsValid(ZKQ(e)->claims))
		return NULL;
	return (ZkClaimRec *) dsa_get_address(zk_dsa(), ZKQ(e)->claims);
}

/* the token in our claims' data: which request made the claim */
void
zk_q_claim_token_of(ZkEntry *e, char *out, size_t outlen)
{
	const char *p = strstr(e->data, "\"claim\":\"");

	out[0] = '\0';
	if (p)
	{
		int			i;

		p += 9;
		for (i = 0; p[i] && p[i] != '"' && i < (int) outlen - 1; i++)
			out[i] = p[i];
		out[i] = '\0';
	}
}

static int	last_slot = -1;	/* zk_q_stats_add's last slot (a hint) */

/*
 * Count hand-outs, consumes, releases and dead letters of queue name
 * (qualified) for zk_queue_stats(): in its slot of zk_q_shared->stats, or
 * in a new one (an unused slot, else the one counted longest ago, whose
 * counts start again); the last slot used is tried first.  Under the
 * worker's lock, which the completions hold already.
 */
void
zk_q_stats_add(const char *name, uint64 handed_out, uint64 consumed, uint64 released,
			   uint64 dead_lettered)
{
	ZkQueueStat *s = NULL;
	ZkQueueStat *victim = NULL;
	TimestampTz now = GetCurrentTimestamp();
	int			i;

	zk_worker_enter();
	/* the slot of the last queue counted first: one hot queue costs no scan */
	if (last_slot >= 0 && last_slot < ZKQ_STATS_SLOTS &&
		zk_q_shared->stats[last_slot].name[0] != '\0' &&
		strcmp(zk_q_shared->stats[last_slot].name, name) == 0)
		s = &zk_q_shared->stats[last_slot];
	for (i = 0; i < ZKQ_STATS_SLOTS && s == NULL; i++)
	{
		ZkQueueStat *x = &zk_q_shared->stats[i];

		if (x->name[0] != '\0' && strcmp(x->name, name) == 0)
			s = x;
		else if (victim == NULL || (victim->name[0] != '\0' &&
									(x->name[0] == '\0' || x->last_at < victim->last_at)))
			victim = x;
	}
	if (s == NULL)
	{
		s = victim;
		memset(s, 0, sizeof(*s));
		strlcpy(s->name, name, sizeof(s->name));
		s->since = now;
	}
	s->handed_out += handed_out;
	s->consumed += consumed;
	s->released += released;
	s->dead_lettered += dead_lettered;
	s->last_at = now;
	last_slot = (int) (s - zk_q_shared->stats);
	zk_worker_leave();
}

/*
 * The record of an item node read (a dequeue's claim, a peek): m, with room
 * for len bytes of value behind it, gets the item's id, time, priority,
 * name and payload
 */
void
zk_q_msg_fill(ZkMsgRec *m, const char *node, const char *value, Size len,
			  const struct Stat *stat)
{
	int			prio = 0;

	m->msg_id = zk_queue_msg_id(stat->czxid, node);
	m->ctime_ms = stat->ctime;
	(void) zk_queue_node_priority(node, &prio);
	m->priority = prio;
	/*
	 * 2 a hand-out (queue_claim.c, "Counting hand-outs"); a child another
	 * client keeps there adds 1, which the halving drops
	 */
	m->attempts = stat->cversion > 0 ? stat->cversion / 2 : 0;
	m->len = (uint32) len;
	strlcpy(m->node, node, sizeof(m->node));
	if (len > 0)
		memcpy((char *) m + sizeof(ZkMsgRec), value, len);
}

/* a string field of our JSON node data, or false */
bool
zk_q_parse_u64(const char *s, int base, uint64 *v)
{
	char	   *end;

	if (s[0] == '\0' || s[0] == '-')
		return false;
	errno = 0;
	*v = strtoull(s, &end, base);
	return errno == 0 && *end == '\0';
}

/* qsort/bsearch comparator of C strings (char *): node names in queue order */
int
zk_q_cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * The item names of a listing (others' nodes skipped), sorted, in zk_q_context();
 * n their count
 */
static char **
copy_children(const struct String_vector *sv, int *n)
{
	MemoryContext old = MemoryContextSwitchTo(zk_q_context());
	char	  **out;
	int			i;
	int			k = 0;

	out = palloc(sizeof(char *) * Max(sv ? sv->count : 0, 1));
	for (i = 0; sv && i < sv->count; i++)
	{
		int			prio;

		if (zk_queue_node_priority(sv->data[i], &prio))
			out[k++] = pstrdup(sv->data[i]);
	}
	qsort(out, k, sizeof(char *), zk_q_cmp_names);
	MemoryContextSwitchTo(old);
	*n = k;
	return out;
}

/* Free the names of listing l and empty it */
void
zk_q_listing_free(Listing *l)
{
	int			i;

	for (i = 0; i < l->nentries; i++)
		pfree(l->entries[i]);
	for (i = 0; i < l->ntaken; i++)
		pfree(l->taken[i]);
	if (l->entries)
		pfree(l->entries);
	if (l->taken)
		pfree(l->taken);
	l->entries = l->taken = NULL;
	l->nentries = l->ntaken = 0;
}

/* Is node claimed, according to listing l's taken? */
bool
zk_q_listing_taken(Listing *l, const char *node)
{
	return l->ntaken > 0 &&
		bsearch(&node, l->taken, l->ntaken, sizeof(char *), zk_q_cmp_names) != NULL;
}

/* The unclaimed items, in queue order, into cand (if given); their count */
int
zk_q_listing_unclaimed(Listing *l, char **cand)
{
	int			i;
	int			n = 0;

	for (i = 0; i < l->nentries; i++)
		if (!zk_q_listing_taken(l, l->entries[i]))
		{
			if (cand)
				cand[n] = l->entries[i];
			n++;
		}
	return n;
}

/* One of listing l's two replies is in; "done" runs after the last */
static void
listing_reply(Listing *l, bool taken, int rc, const struct String_vector *sv)
{
	if (taken)
	{
		l->rc_taken = rc;
		if (rc == ZOK)
			l->taken = copy_children(sv, &l->ntaken);
	}
	else
	{
		l->rc_entries = rc;
		if (rc == ZOK)
			l->entries = copy_children(sv, &l->nentries);
	}
	if (--l->pending == 0)
		l->done(l);
}

/*
 * Completion of the zoo_aget_children2 sent by zk_q_listing_send(); the
 * zoo_awget_children2 sent by zk_q_listing_send()
 */
static void
listing_entries_done(int rc, const struct String_vector *sv,
					 const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(Listing, l, data)
	{
		/*
		 * Replies come in the order the server applied the requests: the
		 * consumes counted from now on are the ones this listing predates.
		 */
		l->cv_ok = (rc == ZOK && stat != NULL && l->own_counter != NULL);
		if (l->cv_ok)
		{
			l->cversion = stat->cversion;
			l->czxid = stat->czxid;
			l->own_base = *l->own_counter;
		}
		listing_reply(l, false, rc, sv);
	}
	NONE_COMPLETION_END;
}

/*
 * Completion of the zoo_aget_children sent by zk_q_listing_send(); the
 * zoo_awget_children sent by zk_q_listing_send()
 */
static void
listing_taken_done(int rc, const struct String_vector *sv, const void *data)
{
	DATA_COMPLETION_BEGIN(Listing, l, data)
	{
		listing_reply(l, true, rc, sv);
	}
	NONE_COMPLETION_END;
}

/*
 * List qpath's entries and taken, each with a children watch (watcher,
 * wctx) when asked.  A listing that cannot be sent answers
 * ZCONNECTIONLOSS.  Returns a mask of what was sent: 1 entries, 2 taken;
 * with 0, "done" is not called.
 */
int
zk_q_listing_send(Listing *l, const char *qpath, watcher_fn watcher, void *wctx,
			 bool watch_entries, bool watch_taken, bool list_taken)
{
	int			sent = 0;
	int			k;

	/*
	 * Without list_taken, taken counts as empty: the caller knows that every
	 * claim the last listing of taken showed was this cluster's, and those
	 * still held are skipped through QState.held.
	 */
	zk_q_listing_free(l);
	l->rc_taken = list_taken ? ZCONNECTIONLOSS : ZOK;
	l->rc_entries = ZCONNECTIONLOSS;
	l->pending = 0;
	l->taken_fresh = list_taken;
	l->cv_ok = false;
	for (k = 0; k < (list_taken ? 2 : 1); k++)
	{
		char		buf[ZK_PATH_MAX];
		bool		watch = k ? watch_taken : watch_entries;
		int			rc;

		snprintf(buf, sizeof(buf), "%s/%s", qpath, k ? "taken" : "entries");
		if (k == 0 && watch)
			rc = zoo_awget_children2(zk_zh, buf, watcher, wctx, listing_entries_done, l);
		else if (k == 0)
			rc = zoo_aget_children2(zk_zh, buf, 0, listing_entries_done, l);
		else if (watch)
			rc = zoo_awget_children(zk_zh, buf, watcher, wctx, listing_taken_done, l);
		else
			rc = zoo_aget_children(zk_zh, buf, 0, listing_taken_done, l);
		if (rc == ZOK)
		{
			sent |= 1 << k;
			l->pending++;
		}
	}
	return sent;
}

/*
 * Free a queue entry of any kind: its claims' and answer's dsa memory, its
 * answer segment, its place in the held claims; then the entry itself
 */
void
zk_q_free_entry(ZkEntry *e)
{
	dsa_area   *area;

	if (e->state == ZKE_FREE)
		return;
	zk_q_count_held(e, false);
	if (DsaPointerIsValid(ZKQ(e)->claims) || DsaPointerIsValid(e->blob))
	{
		area = zk_dsa();
		if (DsaPointerIsValid(ZKQ(e)->claims))
		{
			ZkClaimRec *c = zk_q_claims_of(e);
			int			i;

			for (i = 0; i < ZKQ(e)->max_items; i++)
				if (DsaPointerIsValid(c[i].msg))
					dsa_free(area, c[i].msg);
			dsa_free(area, ZKQ(e)->claims);
			ZKQ(e)->claims = InvalidDsaPointer;
		}
		if (DsaPointerIsValid(e->blob))
		{
			dsa_free(area, e->blob);
			e->blob = InvalidDsaPointer;
		}
	}
	if (e->released)
	{
		/*
		 * A COMMIT may be waiting for its items to be published: wake it
		 * once the entry is free, which is what it looks at (set before, the
		 * latch may be reset by a wake-up that still sees the entry).
		 */
		int			procno = e->kind == ZKK_QPUB ? e->procno : -1;

		zk_entry_free(e);
		if (procno >= 0)
			SetLatch(&GetPGProcByNumber(procno)->procLatch);
	}
	else
	{
		e->state = ZKE_DONE;
		zk_wake_owner(e);
	}
}

/* Add e's claims to its queue's held set (held) or take them out */
void
zk_q_count_held(ZkEntry *e, bool held)
{
	QState	   *q;
	ZkClaimRec *c;
	int			i;

	if (ZKQ(e)->qcounted == held)
		return;
	ZKQ(e)->qcounted = held;
	q = zk_q_state(e->name, false);
	if (q == NULL || !DsaPointerIsValid(ZKQ(e)->claims))
		return;
	if (!held && ZKQ(e)->decision != ZKQD_COMMIT)
	{
		/* its items may come back: the next round lists again */
		q->settled = false;
		q->rest_exact = false;
		q->again = true;
	}
	if (q->held == NULL)
	{
		if (!held)
			return;
		q->held = zk_hash_create("zklock held claims", 16, ZKQ_NODE_MAX,
								 sizeof(HeldNode), true, zk_q_context());
	}
	c = zk_q_claims_of(e);
	for (i = 0; i < ZKQ(e)->max_items; i++)
	{
		char		key[ZKQ_NODE_MAX];
		HeldNode   *h;
		bool		found;

		/* in: what the zk_q_grant hands over; out: whatever names an item */
		if (c[i].node[0] == '\0' || (held && c[i].status != ZKQC_HELD))
			continue;
		memset(key, 0, sizeof(key));
		strlcpy(key, c[i].node, sizeof(key));
		h = hash_search(q->held, key, held ? HASH_ENTER : HASH_FIND, &found);
		if (h == NULL)
			continue;
		if (held)
			h->count = found ? h->count + 1 : 1;
		else
		{
			if (q->list.pending > 0)
			{
				/* the listing in flight may still show it: ours, too */
				MemoryContext old = MemoryContextSwitchTo(zk_q_context());

				q->gone = lappend(q->gone, pstrdup(key));
				MemoryContextSwitchTo(old);
			}
			if (--h->count <= 0)
				(void) hash_search(q->held, key, HASH_REMOVE, NULL);
		}
	}
}

/*
 * The given-up transactions, which the settling pass (queue_settle.c)
 * consults.  Replayed transaction nodes.  A node's MAC binds its path and content, not
 * its creation: a client that read a genuine node (it exists between the
 * backend's write and the publication) could create it again, same bytes,
 * once it was published, and a settling pass would find a node that
 * verifies and names a committed transaction, and publish it a second time.
 * The same holds for a claim written again on an item whose name a drop
 * let the queue use again.  This run's own nodes are published (claims
 * ended) by their entries (node_fate: running), which live until their
 * nodes are gone, except when one gives up after repeated errors
 * (qdurable_drive_failed) and leaves its nodes to the settling pass.  So a
 * settling pass acts on a committed node of this run only if an entry gave
 * it up: their fxids are kept here (a transaction node's until its
 * publication is applied).  A worker that restarts forgets them; their
 * nodes are then settled when the server next starts (as an earlier run's).
 * Left alone is the safe side: items wait, none is delivered twice.
 */
#define ZKQ_GIVEN_UP_MAX	1024

static uint64 given_up[ZKQ_GIVEN_UP_MAX];
static int	ngiven_up = 0;

/* An entry gave up its nodes: the settling pass may act on them */
void
zk_q_given_up_add(uint64 fxid)
{
	if (ngiven_up == ZKQ_GIVEN_UP_MAX)
	{
		/* the oldest waits for the next start */
		memmove(given_up, given_up + 1, sizeof(uint64) * (ZKQ_GIVEN_UP_MAX - 1));
		ngiven_up--;
	}
	given_up[ngiven_up++] = fxid;
}

/* fxid's place among the given-up transactions, or -1 */
int
zk_q_given_up_find(uint64 fxid)
{
	int			i;

	for (i = 0; i < ngiven_up; i++)
		if (given_up[i] == fxid)
			return i;
	return -1;
}

/* fxid's publication was applied: no longer given up */
void
zk_q_given_up_remove(uint64 fxid)
{
	int			i = zk_q_given_up_find(fxid);

	if (i < 0)
		return;
	memmove(given_up + i, given_up + i + 1, sizeof(uint64) * (ngiven_up - i - 1));
	ngiven_up--;
}

/* a palloc'd copy of a listing's names, and its release */
/* a palloc'd copy of a listing's names, and its release */
char **
zk_q_names_copy(const struct String_vector *sv, int *n)
{
	char	  **names;
	int			i;

	*n = sv ? sv->count : 0;
	if (*n == 0)
		return NULL;
	names = MemoryContextAlloc(zk_q_context(), sizeof(char *) * *n);
	for (i = 0; i < *n; i++)
		names[i] = MemoryContextStrdup(zk_q_context(), sv->data[i]);
	return names;
}

/* Free an array of names and empty it */
void
zk_q_names_free(char ***names, int *n)
{
	int			i;

	if (*names == NULL)
		return;
	for (i = 0; i < *n; i++)
		if ((*names)[i] != NULL)
			pfree((*names)[i]);
	pfree(*names);
	*names = NULL;
	*n = 0;
}
