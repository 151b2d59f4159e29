/*-------------------------------------------------------------------------
 *
 * queue_consume.c
 *	  ZKK_QCLAIM's rounds.  Local waiters of a queue are served together in
 *	  arrival order: one listing of entries and taken (zk_q_kick), then the
 *	  candidates go to the waiters (q_distribute) and each is claimed
 *	  (queue_claim.c).  A queue with waiters and nothing to take keeps one
 *	  children watch on entries, and one on taken while every item is
 *	  claimed; a queue whose last waiter left keeps them for
 *	  Q_UNWATCH_IDLE_MS, and its state for 10 to 20 s ("Forgetting idle
 *	  queues").  A long queue is not listed again for every item ("A long
 *	  queue": the rest of the last listing, checked by an exists of
 *	  entries).
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

int			zk_q_nidle_watched = 0;
int			zk_q_nunflushed_wait = 0;


static int	q_distribute(QState *q, char **cand, int cand_total, bool owned);
static void q_listing_done(QState *q);

/* ------------------------------------------------------------------------
 * Dequeue (ZKK_QCLAIM)
 * ------------------------------------------------------------------------
 */
static void
q_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	QState	   *volatile q = (QState *) ctx;
	ZkEntry    *volatile none = NULL;

	if (type != ZOO_CHILD_EVENT && type != ZOO_DELETED_EVENT)
		return;
	COMPLETION_BEGIN
	{
		size_t		l = strlen(q->path);

		zk_count(ZKCNT_WATCH_EVENTS, 1);
		if (strncmp(path, q->path, l) == 0 && strcmp(path + l, "/taken") == 0)
			q->twatch = qwatch_gone(q->twatch);
		else
			q->ewatch = false;
		q->again = true;
		q->settled = false;
		zk_q_kick(q);
	}
	NONE_COMPLETION_END;
}

/*
 * Remove the queue's watches on the server too.  The client library's
 * removal of one watcher only checks the server and forgets it locally
 * (the server keeps one watch per session and path); the worker is the
 * queue's only watcher of these paths, so all of them go.
 */
static void
q_unwatch(QState *q)
{
	char		buf[ZK_PATH_MAX];

	q->settled = false;
	q->rest_exact = false;
	/* delayed items known only through the watch: listed again when wanted */
	if (QWATCH_IS_SET(q->dwatch) && q->dstate == QDELAY_KNOWN)
		q->dstate = QDELAY_UNKNOWN;
	if (zk_zh == NULL)
	{
		q->ewatch = false;
		q->twatch = qwatch_gone(q->twatch);
		q->dwatch = qwatch_gone(q->dwatch);
		return;
	}
	if (QWATCH_IS_SET(q->dwatch))
	{
		snprintf(buf, sizeof(buf), "%s/delayed", q->path);
		(void) zoo_aremove_all_watches(zk_zh, buf, ZWATCHTYPE_CHILD, 0,
									   (void_completion_t *) zk_unwatch_done, NULL);
		q->dwatch = qwatch_gone(q->dwatch);
	}
	if (q->ewatch)
	{
		snprintf(buf, sizeof(buf), "%s/entries", q->path);
		(void) zoo_aremove_all_watches(zk_zh, buf, ZWATCHTYPE_CHILD, 0,
									   (void_completion_t *) zk_unwatch_done, NULL);
		q->ewatch = false;
	}
	if (QWATCH_IS_SET(q->twatch))
	{
		snprintf(buf, sizeof(buf), "%s/taken", q->path);
		(void) zoo_aremove_all_watches(zk_zh, buf, ZWATCHTYPE_CHILD, 0,
									   (void_completion_t *) zk_unwatch_done, NULL);
		q->twatch = qwatch_gone(q->twatch);
	}
}

/* q has no waiter: its watches go once it has stayed so for a moment */
void
zk_q_idle(QState *q)
{
	q->twatch = qwatch_want(q->twatch, false);
	q->dwatch = qwatch_want(q->dwatch, false);
	if (!q->ewatch && !QWATCH_IS_SET(q->twatch) && !QWATCH_IS_SET(q->dwatch))
	{
		if (q->idle_since != 0)
			zk_q_nidle_watched--;
		q->idle_since = 0;
		return;
	}
	if (q->idle_since == 0)
	{
		q->idle_since = GetCurrentTimestamp();
		zk_q_nidle_watched++;
	}
}

/* A queue has waiters again: it is not idle */
static void
q_busy(QState *q)
{
	if (q->idle_since != 0)
		zk_q_nidle_watched--;
	q->idle_since = 0;
}

/* Remove the watches of queues idle for Q_UNWATCH_IDLE_MS */
void
zk_q_unwatch_idle(void)
{
	HASH_SEQ_STATUS st;
	QState	   *q;
	TimestampTz now;

	if (zk_q_nidle_watched <= 0 || zk_qstates == NULL)
		return;
	now = GetCurrentTimestamp();
	hash_seq_init(&st, zk_qstates);
	while ((q = hash_seq_search(&st)) != NULL)
	{
		if (q->idle_since == 0)
			continue;
		if (q->waiters != NIL || q->list.pending > 0 || q->inflight > 0)
			continue;			/* zk_q_kick or zk_q_round_done decides */
		if (!TimestampDifferenceExceeds(q->idle_since, now, Q_UNWATCH_IDLE_MS) &&
			(q->ewatch || QWATCH_IS_SET(q->twatch) || QWATCH_IS_SET(q->dwatch)))
			continue;
		q_unwatch(q);
		q_busy(q);
	}
}

/*
 * Forgetting idle queues.  A QState or QSeq is a cache: a queue that comes
 * back after being forgotten is listed, its parents ensured and its next
 * probed again, as by a new worker.  Without forgetting, a worker that
 * served many queue names (one per job, say) would keep every one of them.
 * Every Q_FORGET_SWEEP_MS, a state that nothing points to and that was not
 * used since the previous sweep is removed; one used since is marked and
 * looked at again next time.  Nothing points to a QState without waiters,
 * listing, claim attempts, verification, held claims or watches; a watch
 * whose removal has not been answered yet is dropped from the client
 * library's table here (local removal), so that no event can reach the
 * freed state.  A QSeq is pointed to by the ops of publications in flight
 * (refs) and named by its probe and fetch.
 */
#define Q_FORGET_SWEEP_MS	10000

/* Can q be forgotten: nothing waits, is in flight, watched or held? */
static bool
q_forgettable(QState *q)
{
	return q->waiters == NIL && q->list.pending == 0 && q->inflight == 0 &&
		q->verify != QVERIFY_ASKING && !q->unflushed_wait && !q->ewatch &&
		!QWATCH_IS_SET(q->twatch) && !QWATCH_IS_SET(q->dwatch) &&
		q->idle_since == 0 && q->gone == NIL && q->dmoving == 0 &&
		q->dstate != QDELAY_LISTING && q->policy != QPOL_READING &&
		(q->held == NULL || hash_get_num_entries(q->held) == 0);
}

/* Forget q: remove its watches (blind) and its state */
void
zk_q_forget(QState *q)
{
	char		buf[ZK_PATH_MAX];

	if (zk_zh != NULL)
	{
		snprintf(buf, sizeof(buf), "%s/entries", q->path);
		(void) zoo_aremove_all_watches(zk_zh, buf, ZWATCHTYPE_CHILD, 1,
									   (void_completion_t *) zk_unwatch_done, NULL);
		snprintf(buf, sizeof(buf), "%s/taken", q->path);
		(void) zoo_aremove_all_watches(zk_zh, buf, ZWATCHTYPE_CHILD, 1,
									   (void_completion_t *) zk_unwatch_done, NULL);
		if (QWATCH_IS_SET(q->dwatch))
		{
			snprintf(buf, sizeof(buf), "%s/delayed", q->path);
			(void) zoo_aremove_all_watches(zk_zh, buf, ZWATCHTYPE_CHILD, 1,
										   (void_completion_t *) zk_unwatch_done, NULL);
		}
	}
	zk_q_listing_free(&q->list);
	zk_q_rest_free(q);
	if (q->held != NULL)
		hash_destroy(q->held);
	(void) hash_search(zk_qstates, q->name, HASH_REMOVE, NULL);
}

/* Every Q_FORGET_SWEEP_MS: forget the queues unused since the last sweep */
void
zk_q_forget_idle(void)
{
	static TimestampTz last_sweep = 0;
	TimestampTz now = GetCurrentTimestamp();
	HASH_SEQ_STATUS st;

	if (!TimestampDifferenceExceeds(last_sweep, now, Q_FORGET_SWEEP_MS))
		return;
	last_sweep = now;
	if (zk_qstates != NULL)
	{
		QState	   *q;

		hash_seq_init(&st, zk_qstates);
		while ((q = hash_seq_search(&st)) != NULL)
		{
			if (!q_forgettable(q))
				q->quiet = false;
			else if (!q->quiet)
				q->quiet = true;
			else
				zk_q_forget(q);
		}
	}
	if (zk_qseqs != NULL)
	{
		QSeq	   *qs;

		hash_seq_init(&st, zk_qseqs);
		while ((qs = hash_seq_search(&st)) != NULL)
		{
			if (qs->refs > 0 || qs->fetching || qs->naming == QSEQ_ASKING)
				qs->quiet = false;
			else if (!qs->quiet)
				qs->quiet = true;
			else
				(void) hash_search(zk_qseqs, qs->name, HASH_REMOVE, NULL);
		}
	}
	zk_q_tracked_update();
}

/* The entry of waiter w, or NULL once it was freed */
ZkEntry *
zk_q_waiter_entry(Waiter *w)
{
	return zk_q_entry_of(w->idx, w->gen);
}

/* The entry of waiter w; or NULL once it was freed, and w freed too */
static ZkEntry *
waiter_live(Waiter *w)
{
	ZkEntry    *e = zk_q_waiter_entry(w);

	if (e == NULL)
		pfree(w);
	return e;
}

/* Does a waiter of q wait for an item (not a try)?  Then watches are set */
static bool
has_blocking_waiter(QState *q)
{
	ListCell   *lc;

	foreach(lc, q->waiters)
	{
		ZkEntry    *e = zk_q_waiter_entry((Waiter *) lfirst(lc));

		if (e && !e->released && !e->try_only)
			return true;
	}
	return false;
}

/* Both listings of q answered (Listing.done): a failed one lost its watch */
static void
q_listed(Listing *l)
{
	QState	   *q = (QState *) l->owner;

	if (l->rc_entries != ZOK)
		q->ewatch = false;
	if (l->rc_taken != ZOK)
		q->twatch = qwatch_gone(q->twatch);
	q_listing_done(q);
}

/* Put the first waiting entry of q on the retry list: q is kicked again */
static void
q_retry(QState *q)
{
	ListCell   *lc;

	foreach(lc, q->waiters)
	{
		ZkEntry    *e = zk_q_waiter_entry((Waiter *) lfirst(lc));

		if (e != NULL)
		{
			zk_retry_later(e);
			return;
		}
	}
}

/* Drop waiters whose entries were let go or freed; drive those let go */
static void
q_prune(QState *q)
{
	List	   *keep = NIL;
	List	   *gone = NIL;
	ListCell   *lc;
	MemoryContext old = MemoryContextSwitchTo(zk_q_context());

	foreach(lc, q->waiters)
	{
		Waiter	   *w = (Waiter *) lfirst(lc);
		ZkEntry    *e = zk_q_waiter_entry(w);

		if (e == NULL)
			pfree(w);
		else if (e->released && e->outstanding == 0)
			gone = lappend(gone, w);
		else
			keep = lappend(keep, w);
	}
	list_free(q->waiters);
	q->waiters = keep;
	MemoryContextSwitchTo(old);
	foreach(lc, gone)
	{
		Waiter	   *w = (Waiter *) lfirst(lc);
		ZkEntry    *e = zk_q_waiter_entry(w);

		pfree(w);
		if (e != NULL)
		{
			e->state = ZKE_DONE;
			zk_qclaim_drive(e);
		}
	}
	list_free(gone);
}

/*
 * A long queue.  Listing entries costs the server, the network and the
 * worker's sort in proportion to the queue's length: 50,000 items are a
 * 1.2 MB answer.  A consumer draining a long queue would list it again for
 * every item, because its own consume changes entries.  So when the last
 * listing left at least ZKQ_VERIFY_MIN candidates, and nothing here since
 * then says it is out of date (no release, no lost race, no claim of
 * others), a round first asks entries' child version (one exists): if it
 * grew by exactly the entries our own consumes deleted, nobody else has
 * added or taken anything, and what the listing left is still all there
 * is, in order.  Any other change -- an item from anywhere, this cluster's
 * own publications included, a consume by another client, a purge -- makes
 * the versions differ, and the queue is listed again.
 */
#define ZKQ_VERIFY_MIN		256

/*
 * While others keep changing the queue (a producer), the versions differ
 * every time and the exists only adds to the listing: after a miss the next
 * 1, 2, 4 ... 64 rounds list without asking; a hit asks again every round.
 */
#define ZKQ_VERIFY_BACKOFF_MAX	64

/* the backoff after a miss: false while rounds are to list without asking */
static bool
q_verify_due(QState *q)
{
	if (q->verify_skip > 0)
	{
		q->verify_skip--;
		return false;
	}
	return true;
}

/* Completion of the zoo_aexists sent by zk_q_kick() */
static void
q_verified(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(QState, q, data)
	{
		q->verify = QVERIFY_NONE;
		if (rc == ZOK && stat != NULL && q->rest_exact && q->list.cv_ok &&
			stat->czxid == q->list.czxid &&
			stat->cversion == (int32) ((uint32) q->list.cversion +
									   (uint32) (q->own_edeletes - q->list.own_base)))
		{
			q->verify = QVERIFY_CONFIRMED;
			q->again = false;
			q->verify_backoff = 0;
		}
		else
		{
			q->rest_exact = false;
			q->again = true;
			q->verify_backoff = Min(Max(q->verify_backoff * 2, 1), ZKQ_VERIFY_BACKOFF_MAX);
			q->verify_skip = q->verify_backoff;
		}
		zk_q_kick(q);
	}
	NONE_COMPLETION_END;
}

/*
 * Fail q's waiters that hold and doubt nothing (noauth_path set: 42501
 * naming it; else XX000, the worker made no progress); keep the others.
 */
static void
fail_idle_waiters(QState *q, const char *noauth_path)
{
	List	   *keep = NIL;
	ListCell   *lc;
	MemoryContext old = MemoryContextSwitchTo(zk_q_context());

	foreach(lc, q->waiters)
	{
		Waiter	   *w = (Waiter *) lfirst(lc);
		ZkEntry    *e = waiter_live(w);
		int			held;
		int			doubt;

		if (e == NULL)
			continue;
		zk_q_count_slots(e, &held, &doubt);
		if (!e->released && held == 0 && doubt == 0 && e->outstanding == 0)
		{
			e->state = ZKE_DONE;
			if (noauth_path != NULL)
				zk_fail_noauth(e, noauth_path);
			else
				zk_fail(e, ERRCODE_INTERNAL_ERROR,
						"the zklock worker made no progress serving this queue");
			pfree(w);
			continue;
		}
		keep = lappend(keep, w);
	}
	list_free(q->waiters);
	q->waiters = keep;
	MemoryContextSwitchTo(old);
}

/*
 * The no-progress guard fired (recipe.h): the queue's rounds went round
 * without a request or an answer.  Fail its waiters that hold and doubt
 * nothing, with XX000, and forget what the rounds left, so the next
 * request starts from a listing.
 */
static void
q_no_progress(QState *q)
{
	char		state[256];
	Waiter	   *first = q->waiters != NIL ? (Waiter *) linitial(q->waiters) : NULL;
	ZkEntry    *fe = first ? zk_q_waiter_entry(first) : NULL;

	snprintf(state, sizeof(state),
			 "%d waiters (the first %s%s), %d candidates, %d left, settled %d, again %d, lost race %d, flushing %d",
			 list_length(q->waiters),
			 fe == NULL ? "gone" : fe->try_only ? "a try" : "a wait",
			 fe != NULL && ZKQ(fe)->wal_unflushed ? " still flushing" : "",
			 q->ncand, q->nrest, q->settled, q->again, q->lost_race,
			 q->unflushed_wait);
	zk_no_progress_report("queue", zk_log_name(q->name), state);
	fail_idle_waiters(q, NULL);
	if (q->unflushed_wait)
		zk_q_nunflushed_wait--;
	q->unflushed_wait = false;
	q->settled = false;
	q->rest_exact = false;
	q->again = false;
	q->ncand = 0;
	zk_q_rest_free(q);
}

/*
 * ZooKeeper refused to list q's entries or taken for want of permission
 * (ZNOAUTH): the same credentials would be refused at every round, so
 * every waiter that holds and doubts nothing fails at once with 42501
 * naming path, instead of retrying until its timeout.
 */
static void
q_refused(QState *q, const char *path)
{
	fail_idle_waiters(q, path);
	q->settled = false;
	q->rest_exact = false;
	q->again = false;
	q->ncand = 0;
}

/*
 * Start a round of q unless one is under way: use what the last listing
 * left when nothing changed since, else verify or list entries and taken
 */
void
zk_q_kick(QState *q)
{
	bool		blocking;
	bool		want_e;
	bool		want_t;
	bool		list_taken;
	int			sent;

	q->quiet = false;
	if (q->list.pending > 0 || q->inflight > 0 || q->verify == QVERIFY_ASKING)
	{
		q->again = true;
		return;
	}
	q_prune(q);
	if (q->waiters == NIL)
	{
		zk_q_idle(q);
		return;
	}
	q_busy(q);
	if (zk_no_progress(&q->progress))
	{
		q_no_progress(q);
		return;
	}
	if (!zk_session_usable())
	{
		q_retry(q);
		return;
	}
	q->rounds++;
	if (((q->settled && q->ewatch) || q->verify == QVERIFY_CONFIRMED) && !q->again && !q->lost_race &&
		q->parents_ok && !q->unflushed_wait && q->policy == QPOL_KNOWN)
	{
		/* nothing changed since the last listing: what it left will do */
		char	  **cand;
		int			n;

		zk_q_rest_compact(q);
		cand = q->rest;
		n = q->nrest;

		q->verify = QVERIFY_NONE;
		q->rest = NULL;
		q->nrest = 0;
		q->ncand = n;
		sent = q_distribute(q, cand, n, true);
		if (sent == 0 && q->ncand > 0 && !q->unflushed_wait)
		{
			/* could not send: list again */
			q->settled = false;
			q->rest_exact = false;
			q->again = true;
		}
		if (sent == 0 && q->inflight == 0)
			zk_q_round_done(q);
		return;
	}
	q->verify = QVERIFY_NONE;
	if (q->unflushed_wait && q->rest_exact && q->nrest >= ZKQ_VERIFY_MIN &&
		!q->lost_race)
	{
		/* a long queue: zk_q_resume_unflushed goes on with what is left */
		q->again = true;
		return;
	}
	if (q->rest_exact && q->list.cv_ok && q->nrest >= ZKQ_VERIFY_MIN &&
		!q->lost_race && q->parents_ok && !q->unflushed_wait &&
		q_verify_due(q))
	{
		char		buf[ZK_PATH_MAX];

		snprintf(buf, sizeof(buf), "%s/entries", q->path);
		if (zoo_aexists(zk_zh, buf, 0, q_verified, q) == ZOK)
		{
			q->verify = QVERIFY_ASKING;
			return;
		}
		q->rest_exact = false;
	}
	/*
	 * taken is listed again unless the last listing found nobody's claim
	 * there and no attempt has lost a race since: a claim made since then
	 * makes our attempt on that item fail, and that lost race lists taken.
	 */
	list_taken = q->lost_race || q->list.rc_taken != ZOK || q->taken_others > 0 ||
		!q->parents_ok;
	q->again = false;
	q->lost_race = false;
	blocking = has_blocking_waiter(q);
	if (!q->parents_ok)
		zk_q_send_ensure_queue(q->path);
	/* the policy every claim checks, read before the listing answers */
	if (q->policy == QPOL_UNKNOWN)
		zk_q_policy_read(q);
	/* and its delayed items, moved into entries when due (watched while
	 * someone waits) */
	zk_q_delay_round(q, has_blocking_waiter(q));
	want_e = blocking && !q->ewatch && q->ncand == 0;
	want_t = blocking && q->twatch == QWATCH_WANTED;
	if (want_t)
		list_taken = true;
	q->list.done = q_listed;
	q->list.owner = q;
	q->list.own_counter = &q->own_edeletes;
	q->rest_exact = false;
	sent = zk_q_listing_send(&q->list, q->path, q_watcher, q, want_e, want_t, list_taken);
	if (sent == 0)
	{
		q_retry(q);
		return;
	}
	if (want_e && (sent & 1))
		q->ewatch = true;
	if (want_t && (sent & 2))
		q->twatch = QWATCH_SET;
}

/* Is str in l (a List of C strings)? */
static bool
str_in_list(List *l, const char *str)
{
	ListCell   *lc;

	foreach(lc, l)
		if (strcmp((const char *) lfirst(lc), str) == 0)
			return true;
	return false;
}

/* Is node one of this cluster's held claims on q? */
static bool
q_is_held(QState *q, const char *node)
{
	char		key[ZKQ_NODE_MAX];

	if (q->held == NULL || hash_get_num_entries(q->held) == 0)
		return false;
	memset(key, 0, sizeof(key));
	strlcpy(key, node, sizeof(key));
	return hash_search(q->held, key, HASH_FIND, NULL) != NULL;
}

/* Hand a waiter what it claimed */
void
zk_q_grant(ZkEntry *e)
{
	ZkClaimRec *c = zk_q_claims_of(e);
	int			i;
	int			n = 0;

	for (i = 0; i < ZKQ(e)->max_items; i++)
		if (c[i].status == ZKQC_HELD)
			n++;
	ZKQ(e)->nclaims = n;
	e->state = ZKE_HELD;
	zk_q_count_held(e, true);
	zk_finish(e, ZKO_GRANTED, 0, NULL);
}

/* e's claim slots held, and in doubt or being given back */
void
zk_q_count_slots(ZkEntry *e, int *held, int *doubt)
{
	ZkClaimRec *c = zk_q_claims_of(e);
	int			i;

	*held = *doubt = 0;
	for (i = 0; i < ZKQ(e)->max_items; i++)
	{
		if (c[i].status == ZKQC_HELD)
			(*held)++;
		else if (c[i].status == ZKQC_DOUBT || c[i].status == ZKQC_RETURN)
			(*doubt)++;			/* unresolved: not granted meanwhile */
	}
}

/*
 * A listing of q answered: hand its unclaimed items to the waiters in
 * arrival order; keep what is left for the next round
 */
static void
q_listing_done(QState *q)
{
	int			cand_total = 0;
	char	  **cand;
	int			sent = 0;
	bool		had_gone = (q->gone != NIL);

	q->settled = false;
	q->rest_exact = false;
	if (q->list.rc_entries == ZNONODE || q->list.rc_taken == ZNONODE)
	{
		/* the queue's nodes are missing: create them and list again */
		q->parents_ok = false;
		if (q->policy == QPOL_KNOWN)
			q->policy = QPOL_UNKNOWN;	/* and read its policy then */
		if (++q->loops > 3)
		{
			q->loops = 0;
			q->ncand = 0;
			zk_q_listing_free(&q->list);
			zk_q_round_done(q);
			return;
		}
		q->again = true;
		zk_q_round_done(q);
		return;
	}
	if (q->list.rc_entries == ZNOAUTH || q->list.rc_taken == ZNOAUTH)
	{
		char		path[ZK_PATH_MAX];

		snprintf(path, sizeof(path), "%s/%s", q->path,
				 q->list.rc_entries == ZNOAUTH ? "entries" : "taken");
		q_refused(q, path);
		zk_q_listing_free(&q->list);
		zk_q_round_done(q);
		return;
	}
	if (q->list.rc_entries != ZOK || q->list.rc_taken != ZOK)
	{
		q->ncand = 0;
		q_retry(q);
		return;
	}
	if (q->policy == QPOL_KNOWN && q->list.cv_ok && q->policy_czxid != 0 &&
		q->list.czxid != q->policy_czxid)
	{
		/* another incarnation of the queue (dropped, made again): its policy */
		q->policy = QPOL_UNKNOWN;
		q->again = true;
		q->ncand = 0;
		zk_q_listing_free(&q->list);
		zk_q_round_done(q);
		return;
	}
	if (q->policy == QPOL_KNOWN && q->list.cv_ok && q->policy_czxid == 0)
		q->policy_czxid = q->list.czxid;	/* read before entries existed */
	if (q->policy != QPOL_KNOWN)
	{
		/* its read failed (the listing's answer came after it): again */
		q->ncand = 0;
		q_retry(q);
		return;
	}
	q->parents_ok = true;
	q->loops = 0;
	q_prune(q);

	/* candidates: entries nobody has claimed, in queue order */
	cand = palloc(sizeof(char *) * Max(q->list.nentries, 1));
	cand_total = zk_q_listing_unclaimed(&q->list, cand);
	if ((q->held != NULL && hash_get_num_entries(q->held) > 0) || q->gone != NIL)
	{
		/*
		 * claimed here since taken was last listed, or let go while this
		 * listing was out (consumed: the listing may predate the delete;
		 * released: the release kicks the queue again)
		 */
		int			i;
		int			k = 0;

		for (i = 0; i < cand_total; i++)
			if (!q_is_held(q, cand[i]) && !str_in_list(q->gone, cand[i]))
				cand[k++] = cand[i];
		cand_total = k;
	}
	q->claimed_others = 0;
	if (q->list.taken_fresh)
	{
		int			i;

		for (i = 0; i < q->list.nentries; i++)
			if (zk_q_listing_taken(&q->list, q->list.entries[i]) &&
				!q_is_held(q, q->list.entries[i]) &&
				!str_in_list(q->gone, q->list.entries[i]))
				q->claimed_others++;
		q->taken_others = 0;
		for (i = 0; i < q->list.ntaken; i++)
			if (!q_is_held(q, q->list.taken[i]) &&
				!str_in_list(q->gone, q->list.taken[i]))
				q->taken_others++;
	}
	list_free_deep(q->gone);
	q->gone = NIL;
	q->ncand = cand_total;
	/*
	 * Settled: the entries watch was armed by this listing or an earlier one
	 * and has not fired, and every claim of others it shows is watched; what
	 * this round leaves is then all a later waiter can take, until a watch
	 * fires or a claim here is let go or lost.
	 */
	q->settled = q->ewatch && !q->again && !q->lost_race &&
		(q->claimed_others == 0 || QWATCH_IS_SET(q->twatch));
	/* "A long queue": exact but for changes entries' version shows */
	q->rest_exact = q->list.cv_ok && !had_gone && !q->lost_race &&
		q->claimed_others == 0 && q->taken_others == 0;
	sent = q_distribute(q, cand, cand_total, false);
	pfree(cand);
	if (sent == 0 && q->inflight == 0)
		zk_q_round_done(q);
}

/*
 * Hand the candidates to the waiters, in arrival order, each as many as it
 * wants; the number of claim attempts sent.  A waiter whose transaction's
 * WAL record is still being flushed stops the round (arrival order holds):
 * what is left is kept, and zk_q_resume_unflushed goes on with it once the
 * owner says the record is durable.
 */
static int
q_distribute(QState *q, char **cand, int cand_total, bool owned)
{
	ListCell   *lc;
	int			next = 0;
	int			sent = 0;

	foreach(lc, q->waiters)
	{
		Waiter	   *w = (Waiter *) lfirst(lc);
		ZkEntry    *e = zk_q_waiter_entry(w);
		int			slot;

		if (next >= cand_total)
			break;
		if (e == NULL || e->released || ZKQ(e)->withdrawn)
			continue;
		if (ZKQ(e)->wal_unflushed)
		{
			if (!q->unflushed_wait)
				zk_q_nunflushed_wait++;
			q->unflushed_wait = true;
			break;
		}
		while (next < cand_total && (slot = zk_q_free_slot(e)) >= 0)
		{
			ClaimWindow cw = zk_q_claim_window(e);

			if (cw == CLAIM_FULL)
			{
				/* it takes more as its reads answer, before anyone behind */
				q->pipe = QPIPE_OPEN;
				q->pipe_idx = w->idx;
				q->pipe_gen = w->gen;
				break;
			}
			if (cw == CLAIM_DONE || !zk_q_send_attempt(q, e, slot, cand[next]))
				break;
			next++;
			sent++;
		}
		if (q->pipe == QPIPE_OPEN)
			break;
	}
	/*
	 * What is left: for the next waiters, or after the one still flushing.
	 * cand is owned (q->rest handed over, names and array palloc'd in
	 * zk_q_context()): its names move over, the rest are freed, not copied --
	 * a long queue's rest is tens of thousands of names.
	 */
	{
		MemoryContext old = MemoryContextSwitchTo(zk_q_context());
		char	  **left = palloc(sizeof(char *) * Max(cand_total - next, 1));
		int			n = 0;
		int			i;

		if (owned)
		{
			for (i = 0; i < next; i++)
				pfree(cand[i]);
			if (cand_total > next)
				memcpy(left, cand + next, sizeof(char *) * (cand_total - next));
			n = cand_total - next;
			if (cand)
				pfree(cand);
		}
		else
			while (next < cand_total)
				left[n++] = pstrdup(cand[next++]);
		MemoryContextSwitchTo(old);
		zk_q_rest_free(q);			/* cand is never q->rest itself */
		q->rest = left;
		q->nrest = n;
	}
	return sent;
}

/* Free the candidates the last round left */
void
zk_q_rest_free(QState *q)
{
	int			i;

	for (i = 0; i < q->nrest; i++)
		if (q->rest[i] != NULL)
			pfree(q->rest[i]);
	if (q->rest)
		pfree(q->rest);
	q->rest = NULL;
	q->nrest = 0;
	q->rest_head = 0;
}

/*
 * Every turn: queues whose round stopped at a waiter still flushing go on
 * once it is done, with the candidates of that round.
 */
void
zk_q_resume_unflushed(void)
{
	HASH_SEQ_STATUS st;
	QState	   *q;

	if (zk_q_nunflushed_wait <= 0 || zk_qstates == NULL)
		return;
	hash_seq_init(&st, zk_qstates);
	while ((q = hash_seq_search(&st)) != NULL)
	{
		ListCell   *lc;
		bool		still = false;

		if (!q->unflushed_wait || q->list.pending > 0 || q->inflight > 0)
			continue;
		q_prune(q);
		foreach(lc, q->waiters)
		{
			ZkEntry    *e = zk_q_waiter_entry((Waiter *) lfirst(lc));

			if (e != NULL && !e->released && ZKQ(e)->wal_unflushed)
			{
				still = true;
				break;
			}
		}
		if (still)
			continue;
		q->unflushed_wait = false;
		zk_q_nunflushed_wait--;
		if (!zk_session_usable() || q->waiters == NIL)
		{
			zk_q_rest_free(q);
			zk_q_kick(q);
			continue;
		}
		zk_q_rest_compact(q);
		{
			char	  **cand = q->rest;
			int			n = q->nrest;
			int			sent;

			q->rest = NULL;
			q->nrest = 0;
			sent = q_distribute(q, cand, n, true);
			if (sent == 0 && q->inflight == 0)
				zk_q_round_done(q);
		}
	}
}

/*
 * Every answer of a round is in: zk_q_grant the waiters that got something,
 * decide what the others wait for.
 */
void
zk_q_round_done(QState *q)
{
	List	   *keep = NIL;
	List	   *doubtful = NIL;
	ListCell   *lc;
	bool		blocking = false;
	bool		pipe_round = (q->pipe != QPIPE_NONE);
	bool		behind = false;
	bool		served_later = false;
	MemoryContext old;

	q->pipe = QPIPE_NONE;
	zk_q_rest_compact(q);
	q_prune(q);
	old = MemoryContextSwitchTo(zk_q_context());
	foreach(lc, q->waiters)
	{
		Waiter	   *w = (Waiter *) lfirst(lc);
		ZkEntry    *e = waiter_live(w);
		int			held;
		int			doubt;

		if (e == NULL)
			continue;
		if (behind)
		{
			/* behind an open window: offered nothing yet, served next */
			keep = lappend(keep, w);
			served_later = true;
			continue;
		}
		if (pipe_round && w->idx == q->pipe_idx && w->gen == q->pipe_gen)
			behind = true;
		zk_q_count_slots(e, &held, &doubt);
		if (doubt > 0)
		{
			/* sorted out on the retry, then back in the queue */
			doubtful = lappend(doubtful, e);
			pfree(w);
		}
		else if (held > 0)
		{
			zk_q_grant(e);
			pfree(w);
		}
		else if (ZKQ(e)->claim_refused && !e->released)
		{
			zk_q_claim_fail_refused(e);
			pfree(w);
		}
		else if (e->try_only && w->joined != q->rounds &&
				 q->dmoving == 0 && q->dstate != QDELAY_LISTING &&
				 (q->ncand == 0 || (!ZKQ(e)->wal_unflushed && ++w->tries >= 3)))
		{
			e->state = ZKE_DONE;
			zk_finish(e, ZKO_BUSY, 0, NULL);
			pfree(w);
		}
		else
		{
			if (!e->try_only)
			{
				blocking = true;
				/*
				 * Waiting starts (and its timeout with it) only once a
				 * round has offered it what was free: not while the round
				 * stopped at a waiter whose WAL record is being flushed,
				 * nor after a race lost to another client (up to three
				 * rounds: the next one offers the items behind).
				 */
				if (e->state != ZKE_WAITING && !q->unflushed_wait &&
					w->joined != q->rounds &&
					!((q->lost_race || q->again) && ++w->tries < 3))
				{
					e->state = ZKE_WAITING;
					zk_wake_owner(e);	/* its timeout runs from now */
				}
			}
			keep = lappend(keep, w);
		}
	}
	list_free(q->waiters);
	q->waiters = keep;
	MemoryContextSwitchTo(old);
	foreach(lc, doubtful)
		zk_retry_later((ZkEntry *) lfirst(lc));
	list_free(doubtful);

	if (q->waiters == NIL)
	{
		zk_q_idle(q);
		q->ncand = 0;
		return;
	}
	if (q->unflushed_wait)
		return;					/* zk_q_resume_unflushed goes on */
	if (served_later || q->again || q->lost_race || (q->settled && q->nrest > 0))
	{
		zk_q_kick(q);
		return;
	}
	if (!blocking && (q->dmoving > 0 || q->dstate == QDELAY_LISTING))
		return;					/* the delayed items' moves kick it (queue_delay.c) */
	if (!blocking)
	{
		/* only try-only waiters left after a lost race: list again */
		zk_q_kick(q);
		return;
	}
	/*
	 * Nothing to take: wait for the watches that tell us of a change.  Items
	 * claimed by others when we listed come back only through a change of
	 * taken; items claimed here need no watch (a release here kicks the
	 * queue itself, a consume deletes the entry).  Watching taken for our
	 * own claims would list the queue again at each of them.
	 */
	if (q->claimed_others > 0 && !QWATCH_IS_SET(q->twatch))
	{
		q->twatch = QWATCH_WANTED;
		q->ncand = 0;
		zk_q_kick(q);
		return;
	}
	if (!q->ewatch || !q->settled)
	{
		/* no watch, or the last listing may not show everything: list */
		q->ncand = 0;
		zk_q_kick(q);
		return;
	}
	/* watches set, nothing missed: the watcher kicks us */
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
 * The owner let go of dequeue e: at commit its end deletes items and claims,
 * otherwise the claims only; claims in doubt are read first
 */
static void
qclaim_let_go(ZkEntry *e)
{
	QState	   *q = zk_q_state(e->name, true);
	int			held;
	int			doubt;

	zk_q_count_held(e, false);		/* its end is sent before any new listing */
	if (ZKQ(e)->decision != ZKQD_COMMIT)
	{
		/*
		 * Its items come back once the release lands: this cluster's waiters
		 * list again on the next turn, after the release is sent.
		 */
		ListCell   *lc;

		q->settled = false;
		q->rest_exact = false;
		q->again = true;
		foreach(lc, q->waiters)
		{
			ZkEntry    *we = zk_q_waiter_entry((Waiter *) lfirst(lc));

			if (we != NULL && we != e && !we->released)
			{
				zk_retry_later(we);
				break;
			}
		}
	}
	if (e->outstanding > 0 || e->delete_inflight)
		return;					/* its answers drive it on */
	if (!DsaPointerIsValid(ZKQ(e)->claims))
	{
		zk_q_free_entry(e);
		return;
	}
	/* still among the waiters? */
	if (list_length(q->waiters) > 0)
	{
		ListCell   *lc;

		foreach(lc, q->waiters)
		{
			Waiter	   *w = (Waiter *) lfirst(lc);

			if (w->idx == zk_entry_index(e) && w->gen == e->gen)
			{
				q->waiters = foreach_delete_current(q->waiters, lc);
				pfree(w);
				break;
			}
		}
	}
	zk_q_count_slots(e, &held, &doubt);
	if (held == 0 && doubt == 0)
	{
		zk_q_free_entry(e);
		if (q->waiters == NIL && q->list.pending == 0 && q->inflight == 0)
			zk_q_idle(q);
		return;
	}
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	if (doubt > 0)
	{
		(void) zk_q_send_doubt_checks(e, q);
		return;
	}
	zk_q_send_end(e, q);
}

/*
 * Drive a dequeue (ZKK_QCLAIM's drive): let go, sort out doubt, or join its
 * queue's waiters and kick a round
 */
void
zk_qclaim_drive(ZkEntry *e)
{
	QState	   *q;
	int			held;
	int			doubt;

	Assert(e->kind == ZKK_QCLAIM);
	if (e->released)
	{
		qclaim_let_go(e);
		return;
	}
	if (e->outstanding > 0 || e->delete_inflight)
		return;
	q = zk_q_state(e->name, true);
	if (e->state == ZKE_HELD)
		return;					/* granted: waits for its owner */
	if (!DsaPointerIsValid(ZKQ(e)->claims))
	{
		zk_fail(e, ERRCODE_OUT_OF_MEMORY, "the request carries no claim array");
		return;
	}
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	zk_q_count_slots(e, &held, &doubt);
	if (doubt > 0)
	{
		/*
		 * A claim (or give-back) of an earlier session is read back only
		 * once that session can land nothing more (zk_history_ready:
		 * its "live" is gone): else its late claim could land after the
		 * read said "not ours", and strand the item.
		 */
		if (!zk_history_ready() && !zk_history_fenced())
		{
			zk_retry_later(e);
			return;
		}
		(void) zk_q_send_doubt_checks(e, q);
		return;
	}
	if (held > 0)
	{
		zk_q_grant(e);
		return;
	}
	if (ZKQ(e)->claim_refused)
	{
		zk_q_claim_fail_refused(e);
		return;
	}
	if (!zk_q_history_gate(e))
		return;
	/* a new request, or back from a retry: wait in the queue */
	{
		ListCell   *lc;
		bool		found = false;

		foreach(lc, q->waiters)
		{
			Waiter	   *w = (Waiter *) lfirst(lc);

			if (w->idx == zk_entry_index(e) && w->gen == e->gen)
				found = true;
		}
		if (!found)
		{
			MemoryContext old = MemoryContextSwitchTo(zk_q_context());
			Waiter	   *w = palloc0(sizeof(Waiter));

			w->idx = zk_entry_index(e);
			w->gen = e->gen;
			w->joined = q->rounds;
			q->waiters = lappend(q->waiters, w);
			MemoryContextSwitchTo(old);
		}
	}
	if (e->state == ZKE_PENDING)
		e->state = ZKE_CREATING;
	/*
	 * A round under way may offer it what its listing left, but only the
	 * next round, started once this one ends (zk_q_round_done), answers it.
	 */
	if (q->list.pending > 0 || q->inflight > 0 || q->verify == QVERIFY_ASKING)
	{
		q->again = true;
		return;
	}
	zk_q_kick(q);
}

/*
 * Hand the claims below what they call back when an attempt, an end or a
 * give-back is over (QRoundHooks); once, at the worker's start
 */
void
zk_q_rounds_init(void)
{
	zk_q_round_hooks.round_done = zk_q_round_done;
	zk_q_round_hooks.kick = zk_q_kick;
}
