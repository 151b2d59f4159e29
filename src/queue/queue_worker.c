/*-------------------------------------------------------------------------
 *
 * queue_worker.c
 *	  The queue recipe's worker half: what its parts share, and its place
 *	  in the worker (kazoo LockingQueue layout, queue.h).
 *
 *	  The worker half is split the way the queue works (queue_int.h holds
 *	  their private types):
 *
 *	  queue_worker.c	per-queue state (QState for consumers, QSeq for
 *						publications) and its memory, paths and parents,
 *						listings of entries and taken, the recipe's hooks
 *						(session reset and usable, worker start) and kinds
 *	  queue_publish.c	ZKK_QPUB: a committing transaction's items, from
 *						its transaction node to the publishing multi
 *	  queue_naming.c	item names past the end of entries' sequence counter
 *	  queue_nskept.c	the census of what one namespace keeps, against
 *						zklock.max_namespace_items, for publications
 *	  queue_consume.c	ZKK_QCLAIM's rounds: who of a queue's waiters is
 *						offered which items, watches, idle queues
 *	  queue_claim.c		ZKK_QCLAIM's claims: attempts, reads, claims in
 *						doubt, and the end of a claim at commit or abort
 *	  queue_read.c		ZKK_QINFO: length, peek, purge, zk_queues, releasing
 *						a dead cluster's claims, dropping a queue
 *	  queue_settle.c	the settling of this cluster's transaction nodes and
 *						claims left behind by a crash (xact_fate)
 *
 *	  Why publications and claims are exactly once (the WAL mark, runs,
 *	  heirs, MACs): src/README, section 5; when each step runs relative to
 *	  COMMIT: section 4.
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
static bool was_in_recovery = true;

/* The memory of the queue recipe's worker state, made on first use */
MemoryContext
zk_q_context(void)
{
	if (qcxt == NULL)
		qcxt = AllocSetContextCreate(TopMemoryContext, "zklock queues",
									 ALLOCSET_DEFAULT_SIZES);
	return qcxt;
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
		HASHCTL		ctl;

		if (!create)
			return NULL;
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(key);
		ctl.entrysize = entrysize;
		ctl.hcxt = zk_q_context();
		*h = hash_create(what, 64, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
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

/* how many per-queue states this worker keeps, for zk_status() */
void
zk_q_tracked_update(void)
{
	zk_ctl->queues_tracked =
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
}

/* A dequeue entry's claim slots (ZkClaimRec[max_items] in the dsa), or NULL */
ZkClaimRec *
zk_q_claims_of(ZkEntry *e)
{
	if (!DsaPointerIsValid(e->claims))
		return NULL;
	return (ZkClaimRec *) dsa_get_address(zk_dsa(), e->claims);
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
	Listing    *volatile l = (Listing *) data;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
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
	COMPLETION_END(none);
}

/*
 * Completion of the zoo_aget_children sent by zk_q_listing_send(); the
 * zoo_awget_children sent by zk_q_listing_send()
 */
static void
listing_taken_done(int rc, const struct String_vector *sv, const void *data)
{
	Listing    *volatile l = (Listing *) data;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		listing_reply(l, true, rc, sv);
	}
	COMPLETION_END(none);
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
	if (DsaPointerIsValid(e->claims) || DsaPointerIsValid(e->blob))
	{
		area = zk_dsa();
		if (DsaPointerIsValid(e->claims))
		{
			ZkClaimRec *c = zk_q_claims_of(e);
			int			i;

			for (i = 0; i < e->max_items; i++)
				if (DsaPointerIsValid(c[i].msg))
					dsa_free(area, c[i].msg);
			dsa_free(area, e->claims);
			e->claims = InvalidDsaPointer;
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

/* ------------------------------------------------------------------------
 * The table entries
 * ------------------------------------------------------------------------
 */

static ZkLogLimit q_giveup_log;

/*
 * A publication's or a dequeue's step could not be sent: retried up to five
 * times; then a let-go entry gives its nodes to the settling pass
 */
static void
qdurable_drive_failed(ZkEntry *e)
{
	/* durable in ZooKeeper: try again once the session is usable */
	e->create_inflight = e->delete_inflight = false;
	e->outstanding = 0;
	if (e->errors++ < 5)
		zk_retry_later(e);
	else if (e->released)
	{
		zk_q_given_up_add(e->fxid);	/* its nodes are the settling pass's */
		if (zk_log_limited(&q_giveup_log, "gave up a queue request after repeated errors"))
			ereport(WARNING,
					(errmsg("zklock: gave up a queue request after repeated errors"),
					 errdetail("The worker settles its claims and transaction nodes from the commit log when it next starts.")));
		zk_q_free_entry(e);
	}
	else if (e->outcome == ZKO_NONE)
	{
		e->state = ZKE_DONE;
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "the queue request failed in the zklock worker");
	}
}

/*
 * The session ended: claims and transaction nodes are persistent, so the
 * requests go on in the next session.  Whatever was in flight is in doubt.
 */
static void
qdurable_session_lost(ZkEntry *e, const char *why)
{
	if (e->create_inflight || (e->kind == ZKK_QPUB && e->state == ZKE_CREATING))
		e->in_doubt = true;
	if (e->kind == ZKK_QPUB && e->state == ZKE_CREATING && e->create_inflight)
		e->create_unanswered = true;	/* queue_publish.c, "Late creates" */
	if (e->delete_inflight)
		e->in_doubt = true;
	e->create_inflight = e->delete_inflight = false;
	e->outstanding = 0;
	if (e->kind == ZKK_QCLAIM && e->state == ZKE_WAITING)
		e->state = ZKE_CREATING;
	if (e->kind == ZKK_QCLAIM && DsaPointerIsValid(e->claims))
	{
		/* a give-back's fate is unknown: ours or not, read it again */
		ZkClaimRec *c = zk_q_claims_of(e);
		int			i;

		for (i = 0; i < e->max_items; i++)
			if (c[i].status == ZKQC_RETURN)
				c[i].status = ZKQC_DOUBT;
	}
	zk_retry_later(e);
}

/*
 * The session ended (session_reset hook): every queue lists again and every
 * naming is asked again; claims in flight are in doubt.  Called again once
 * the old handle is closed: the answers it gave meanwhile (ZCLOSING) counted
 * down what this had set to zero, so the counts start from zero once more.
 */
static void
q_session_reset(void)
{
	HASH_SEQ_STATUS st;
	QState	   *q;
	int			i;

	zk_history_session_reset();

	/* nothing of the old session is in flight any more */
	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->state != ZKE_FREE &&
			(e->kind == ZKK_QPUB || e->kind == ZKK_QCLAIM || e->kind == ZKK_QINFO))
			e->outstanding = 0;
	}

	if (zk_qstates != NULL)
	{
		hash_seq_init(&st, zk_qstates);
		while ((q = hash_seq_search(&st)) != NULL)
		{
			ListCell   *lc;

			foreach(lc, q->waiters)
				pfree(lfirst(lc));
			list_free(q->waiters);
			q->waiters = NIL;
			q->list.pending = q->inflight = 0;
			q->ewatch = q->twatch = q->want_twatch = false;
			q->again = q->lost_race = false;
			q->settled = false;
			q->rest_exact = false;
			q->verify = QVERIFY_NONE;
			q->ncand = 0;
			q->idle_since = 0;
			q->unflushed_wait = false;
			if (q->pipe == QPIPE_OPEN)
				q->pipe = QPIPE_CLOSED;
			zk_q_rest_free(q);
			zk_q_listing_free(&q->list);
			q->list.rc_taken = ZCONNECTIONLOSS;	/* list taken first */
			q->taken_others = 0;
			list_free_deep(q->gone);
			q->gone = NIL;
		}
	}
	if (zk_qseqs != NULL)
	{
		QSeq	   *qs;

		hash_seq_init(&st, zk_qseqs);
		while ((qs = hash_seq_search(&st)) != NULL)
		{
			qs->parents_ok = false;
			qs->fetching = false;
			qs->next = QNEXT_UNKNOWN;
			if (qs->naming == QSEQ_ASKING)
				qs->naming = QSEQ_UNASKED;	/* its answer is lost */
		}
	}
	/* publications waiting for a counter: their entries go on anew */
	while (zk_q_pub_waits != NIL)
	{
		PubOp	   *po = linitial(zk_q_pub_waits);

		zk_q_pub_waits = list_delete_first(zk_q_pub_waits);
		po->waiting = false;
		if (po->scan != NULL)
			zk_q_scan_done_one(po->scan, false, 0);
		zk_q_pubop_free(po);
	}
	zk_q_nidle_watched = 0;
	zk_q_nunflushed_wait = 0;
	zk_q_txns_parent_ok = false;
	zk_q_resolve_running = false;
	zk_q_resolve_needed = true;
}

/*
 * Every queue lists again before it trusts what it knew; those with waiters
 * and no round under way, at once.
 */
void
zk_q_unsettle_all(void)
{
	HASH_SEQ_STATUS st;
	QState	   *q;
	List	   *kick = NIL;
	ListCell   *lc;

	if (zk_qstates == NULL)
		return;
	hash_seq_init(&st, zk_qstates);
	while ((q = hash_seq_search(&st)) != NULL)
	{
		q->settled = false;
		q->rest_exact = false;
		q->again = true;
		if (q->waiters != NIL && q->list.pending == 0 && q->inflight == 0)
			kick = lappend(kick, q);
	}
	foreach(lc, kick)
		zk_q_kick((QState *) lfirst(lc));
	list_free(kick);
}

/*
 * Called every turn while the session is usable: settle what a crash left
 * behind once this server is a primary.  (A previous worker's entries are
 * adopted by each kind's adopt op.)
 */
static void
q_session_usable(void)
{
	bool		in_recovery;
	static uint64 reconnects = 0;
	uint64		now_reconnects = pg_atomic_read_u64(&zk_ctl->counters[ZKCNT_RECONNECTS]);

	if (now_reconnects != reconnects)
	{
		/* events missed while disconnected come back, but be sure */
		reconnects = now_reconnects;
		zk_q_unsettle_all();
	}
	zk_q_unwatch_idle();
	zk_q_resume_unflushed();
	zk_q_forget_idle();
	zk_q_pub_blocked_tick();
	zk_q_end_blocked_tick();
	in_recovery = RecoveryInProgress();
	if (was_in_recovery && !in_recovery)
		zk_q_resolve_needed = true;	/* started, or promoted */
	was_in_recovery = in_recovery;
	zk_history_turn();
	if (zk_q_resolve_again_at != 0 && !zk_q_resolve_running &&
		GetCurrentTimestamp() >= zk_q_resolve_again_at)
	{
		/* a publication of the last pass was refused: try it again */
		zk_q_resolve_again_at = 0;
		zk_q_resolve_needed = true;
	}
	if (zk_q_resolve_needed && !zk_q_resolve_running && !in_recovery && zk_history_ready() &&
		(zk_q_resolve_not_before == 0 || GetCurrentTimestamp() >= zk_q_resolve_not_before))
	{
		Scan	   *s = MemoryContextAllocZero(zk_q_context(), sizeof(Scan));

		s->sysid = GetSystemIdentifier();
		zk_q_resolve_needed = false;
		zk_ctl->pubs_blocked_resolve = 0;	/* this pass counts them anew */
		zk_q_resolve_running = true;
		(void) zk_q_scan_start(s);
	}
}

/* A worker starts: it knows no queue yet, its settling pass counts anew */
static void
q_worker_start(void)
{
	zk_ctl->queues_tracked = 0;
	zk_ctl->pubs_blocked_resolve = 0;
}

/* the recipe's hooks, and its kinds (recipelist.h) */
const ZkRecipe zk_queue_recipe = {
	.worker_start = q_worker_start,
	.session_connected = zk_history_connected,	/* history.c */
	.session_reset = q_session_reset,
	.session_usable = q_session_usable,
};

/* A previous worker's publication or dequeue: as if its session had ended */
static void
qdurable_adopt(ZkEntry *e)
{
	qdurable_session_lost(e, NULL);
}

/* A previous worker's read fails: its answer cannot come */
static void
qinfo_adopt(ZkEntry *e)
{
	zk_qinfo_session_lost(e, "The zklock worker restarted");
}

const ZkKindOps zk_qpub_ops = {
	.drive = zk_qpub_drive,
	.drive_failed = qdurable_drive_failed,
	.session_lost = qdurable_session_lost,
	.adopt = qdurable_adopt,
	.batched = true,			/* publications: zk_batch_multi */
};

const ZkKindOps zk_qclaim_ops = {
	.drive = zk_qclaim_drive,
	.drive_failed = qdurable_drive_failed,
	.session_lost = qdurable_session_lost,
	.adopt = qdurable_adopt,
	.batched = true,			/* claims and consumes: zk_batch_multi, and a claim's read behind it */
};

/* A freed read's large answer has its own segment: gone once nobody maps it */
static void
qinfo_freed(ZkEntry *e)
{
	if (e->dsm != DSM_HANDLE_INVALID)
	{
		dsm_unpin_segment(e->dsm);
		e->dsm = DSM_HANDLE_INVALID;
	}
}

const ZkKindOps zk_qinfo_ops = {
	.drive = zk_qinfo_drive,
	.drive_failed = zk_qinfo_drive_failed,
	.session_lost = zk_qinfo_session_lost,
	.adopt = qinfo_adopt,
	.entry_freed = qinfo_freed,
};
