/*-------------------------------------------------------------------------
 *
 * queue_worker.c
 *	  The queue recipe's worker half (kazoo LockingQueue layout, queue.h):
 *
 *	  ZKK_QPUB	a committing transaction's items.  Before its commit record
 *				the items go into one persistent node <root>/txns/<sysid>-
 *				<fullxid>, invisible to consumers; once PostgreSQL has
 *				committed, one multi deletes that node and creates the items
 *				(all or none; a second try finds the node gone and creates
 *				nothing); on abort the node is deleted.  Near the end of
 *				entries' sequence counter the items are named from the
 *				queue's next node instead ("Past the end of the counter").
 *	  ZKK_QCLAIM a dequeue.  Local waiters of a queue are served together in
 *				arrival order: one listing of entries and taken, then for
 *				each candidate one multi (check the entry, create the claim)
 *				and one read of the payload (at most 4 MB of them in flight
 *				and zklock.max_answer_bytes per dequeue: "How much one
 *				dequeue claims"; an item whose payload finds no room in
 *				the dsa is given back).  Claims are persistent and name
 *				the cluster and the (sub)transaction; at commit one multi
 *				deletes items and claims, at abort one multi deletes the
 *				claims.  A queue with waiters and nothing to take has one
 *				children watch on entries, and one on taken while every item
 *				is claimed.
 *	  ZKK_QINFO length, peek, purge, the zk_queues rows, releasing a
 *				dead cluster's claims, and dropping an unused queue's nodes
 *				("Dropping a queue").
 *
 *	  Per queue the worker keeps a QState (consumers) and a QSeq
 *	  (publications), caches that an idle queue loses after 10 to 20 s
 *	  ("Forgetting idle queues"), and a dropped one at once.
 *
 *	  Resolution: the settling of this cluster's transaction nodes and
 *	  claims left behind by a crash, from PostgreSQL's commit log
 *	  (xact_fate).  Why that is safe (the WAL mark, runs, heirs, MACs): see
 *	  src/README, section 5; when each step runs relative to COMMIT:
 *	  section 4.
 *
 *	  Runs in the worker, lock held (completions take it themselves).
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "history.h"
#include "queue.h"
#include "trust.h"

#include "access/timeline.h"
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

/* ------------------------------------------------------------------------
 * Worker-local state
 * ------------------------------------------------------------------------
 */

typedef struct Waiter
{
	uint32		idx;
	uint32		gen;
	int			tries;
	uint32		joined;			/* q->rounds when it joined: a round started
								 * before that answers nobody who joined it
								 * late (its listing may predate the call) */
} Waiter;

/*
 * A queue's two listings, entries and taken, sent back to back: only the
 * items (kazoo's "entry-PPP-<seq>" names), sorted, so that queue order is
 * name order.  "done" runs once both replies are in.
 */
typedef struct Listing
{
	char	  **entries;
	int			nentries;
	char	  **taken;
	int			ntaken;
	int			rc_entries;
	int			rc_taken;
	int			pending;		/* replies awaited */
	bool		taken_fresh;	/* taken was listed with entries this time */
	bool		cv_ok;			/* entries' cversion as of the listing: */
	int32		cversion;
	int64		czxid;			/* (and which entries: a foreign client may
								 * delete the queue and create it again) */
	int64		own_base;		/* *own_counter when it was answered */
	int64	   *own_counter;	/* the owner's count of entries it deleted,
								 * or NULL */
	void		(*done) (struct Listing *l);
	void	   *owner;
} Listing;

typedef struct QState
{
	char		name[ZKLOCK_QNAME_MAX + 1];	/* key: UTF-8 queue name */
	char		path[ZK_PATH_MAX];	/* <root>/queues/<encoded> */
	List	   *waiters;		/* Waiter *, arrival order */
	bool		parents_ok;
	Listing		list;			/* the last listing, or the one in flight */
	bool		again;			/* something changed: list again */
	bool		lost_race;		/* a candidate was taken under us */
	bool		ewatch;			/* children watch on entries set/sent */
	bool		twatch;			/* children watch on taken set/sent */
	bool		want_twatch;
	int			inflight;		/* claim attempts in flight */
	int			ncand;			/* candidates found by the last listing */
	int			loops;			/* relists without progress (NONODE) */
	HTAB	   *held;			/* HeldNode: this cluster's granted claims */
	List	   *gone;			/* claims let go while a listing was out */
	int			taken_others;	/* claims in the last taken listing not held
								 * here (by other clusters, kazoo, ...) */
	int			claimed_others; /* entries of the last listing claimed so */
	bool		unflushed_wait; /* a round stopped at a waiter still flushing */
	char	  **rest;			/* the candidates the last round left, in
								 * queue order */
	int			nrest;
	int			rest_head;		/* ... of which the first rest_head went to
								 * the open window's top-ups this round
								 * (freed, NULL; q_rest_compact) */
	bool		pipe_open;		/* a dequeue's window is open this round: */
	uint32		pipe_idx;		/* ... it takes more from rest as its reads */
	uint32		pipe_gen;		/* answer ("How much one dequeue claims") */
	bool		pipe_round;		/* this round had one: the waiters behind it
								 * were offered nothing yet */
	bool		settled;		/* ... and they are all there is: the entries
								 * watch has not fired since that listing,
								 * nothing was released or lost here */
	bool		rest_exact;		/* ... or all there is unless entries changed
								 * other than by our own consumes: nothing
								 * released, lost or claimed by others here
								 * since that listing ("A long queue") */
	int64		own_edeletes;	/* entries deleted by our consume multis */
	bool		verifying;		/* an exists of entries is out for that */
	bool		verified;		/* ... and said nothing else changed */
	int			verify_skip;	/* rounds to list without asking */
	int			verify_backoff; /* ... after the next miss */
	TimestampTz idle_since;		/* no waiters since, watches kept; or 0 */
	bool		quiet;			/* unused since the last forget sweep */
	ZkProgress	progress;		/* rounds started within one dispatch */
	uint32		rounds;			/* rounds started (q_kick) */
} QState;

/*
 * A queue this cluster publishes into: whether its parents are known to
 * exist, and how its items are named (see "Past the end of the counter")
 */
typedef struct QSeq
{
	char		name[ZKLOCK_QNAME_MAX + 1];	/* key: UTF-8 queue name */
	bool		parents_ok;		/* entries and taken exist, as far as known */
	bool		seq_explicit;	/* entries' counter (nearly) ran out: items
								 * are named from <queue>/next */
	bool		seq_probed;		/* next's existence asked */
	bool		seq_answered;	/* ... and answered */
	bool		seq_known;		/* seq_next, seq_version: as last seen */
	bool		seq_fetching;
	bool		seq_fresh;		/* seq_next as read, not advanced since */
	int64		seq_next;		/* the next free number */
	bool		seq_exists;		/* next exists (as last seen) */
	int32		seq_version;	/* ... and its version */
	int			refs;			/* PubOp ops that point here */
	bool		quiet;			/* unused since the last forget sweep */
} QSeq;

static HTAB *qseqs = NULL;

/*
 * A queue whose last waiter is served keeps its watches for this long: a
 * consumer that comes back at once (the usual loop) then finds them armed
 * instead of paying a removal and a new watch per item.
 */
#define Q_UNWATCH_IDLE_MS	500
static int	nidle_watched = 0;	/* queues with idle_since set */
static int	nunflushed_wait = 0;	/* queues with unflushed_wait set */

static int	q_distribute(QState *q, char **cand, int cand_total, bool owned);
static void q_rest_free(QState *q);
static void q_rest_compact(QState *q);
static void count_slots(ZkEntry *e, int *held, int *doubt);

static HTAB *qstates = NULL;
static MemoryContext qcxt = NULL;

/* one claim attempt: a multi (check entry, create claim), then a get */
typedef struct Attempt
{
	QState	   *q;
	uint32		idx;
	uint32		gen;
	int			slot;
	bool		multi_ok;
	bool		multi_doubt;
	char		node[ZKQ_NODE_MAX];
	char		epath[ZK_PATH_MAX];
	char		tpath[ZK_PATH_MAX];
	char		data[ZKLOCK_DATA_MAX + ZK_CLAIM_MAC_TAIL];	/* the claim's,
															 * signed for
															 * tpath */
	zoo_op_t	ops[2];
	zoo_op_result_t res[2];
} Attempt;

static bool txns_parent_ok = false;

/* resolution */
static bool resolve_needed = true;
static bool resolve_running = false;
static TimestampTz resolve_not_before = 0;	/* a settling pass waits for a
											 * run that may still die */
static bool was_in_recovery = true;
static bool entries_adopted = false;

static void qclaim_drive(ZkEntry *e);
static void q_kick(QState *q);
static void q_round_done(QState *q);
static void q_unsettle_all(void);
static void q_free_entry(ZkEntry *e);

static MemoryContext
q_context(void)
{
	if (qcxt == NULL)
		qcxt = AllocSetContextCreate(TopMemoryContext, "zklock queues",
									 ALLOCSET_DEFAULT_SIZES);
	return qcxt;
}

/*
 * The entry of a per-queue hash (keyed by the UTF-8 queue name, created in
 * q_context() on first use); NULL when absent and not created.  A new
 * entry is zeroed past its key.
 */
static void *
q_hash_entry(HTAB **h, const char *what, Size entrysize, const char *name,
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
		ctl.hcxt = q_context();
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

/* how many per-queue states this worker keeps, for zk_status() */
static void
q_tracked_update(void)
{
	zk_ctl->queues_tracked =
		(qstates ? (int) hash_get_num_entries(qstates) : 0) +
		(qseqs ? (int) hash_get_num_entries(qseqs) : 0);
}

static QState *
q_state(const char *name, bool create)
{
	bool		isnew;
	QState	   *q = q_hash_entry(&qstates, "zklock queue states", sizeof(QState),
								 name, create, &isnew);

	if (isnew)
	{
		zk_queue_path(q->name, q->path, sizeof(q->path));
		q_tracked_update();
	}
	if (q != NULL)
		q->quiet = false;
	return q;
}

static QSeq *
q_seq(const char *name)
{
	bool		isnew;
	QSeq	   *q = q_hash_entry(&qseqs, "zklock queues published", sizeof(QSeq),
								 name, true, &isnew);

	if (isnew)
		q_tracked_update();
	q->quiet = false;
	return q;
}

/* <queue>/<child> */
static void
q_seq_path(const QSeq *q, const char *child, char *out, size_t outlen)
{
	char		qpath[ZK_PATH_MAX];

	zk_queue_path(q->name, qpath, sizeof(qpath));
	snprintf(out, outlen, "%s/%s", qpath, child);
}

static bool
parents_known(const char *qname)
{
	return q_seq(qname)->parents_ok;
}

static void
parents_remember(const char *qname, bool ok)
{
	q_seq(qname)->parents_ok = ok;
}


/*
 * Send creates for every missing component of path (persistent, empty):
 * pipelined, answers ignored; the session's order makes whatever is sent
 * next see them.
 */
static void
send_ensure_path(const char *path)
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

static void
send_ensure_queue(const char *qpath)
{
	char		buf[ZK_PATH_MAX];

	snprintf(buf, sizeof(buf), "%s/entries", qpath);
	send_ensure_path(buf);
	snprintf(buf, sizeof(buf), "%s/taken", qpath);
	zk_create_parent(buf, 0);
}

static ZkClaimRec *
claims_of(ZkEntry *e)
{
	if (!DsaPointerIsValid(e->claims))
		return NULL;
	return (ZkClaimRec *) dsa_get_address(zk_dsa(), e->claims);
}

/* the token in our claims' data: which request made the claim */
static void
claim_token_of(ZkEntry *e, char *out, size_t outlen)
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
static bool
parse_u64(const char *s, int base, uint64 *v)
{
	char	   *end;

	if (s[0] == '\0' || s[0] == '-')
		return false;
	errno = 0;
	*v = strtoull(s, &end, base);
	return errno == 0 && *end == '\0';
}

/* ------------------------------------------------------------------------
 * The fate of a transaction, from PostgreSQL's commit log
 * ------------------------------------------------------------------------
 */
typedef enum Fate
{
	FATE_RUNNING,
	FATE_COMMITTED,
	FATE_ABORTED,
	FATE_UNKNOWN
} Fate;

static Fate
xact_fate(uint64 fxid, uint32 tli, uint64 lsn)
{
	FullTransactionId f = FullTransactionIdFromU64(fxid);
	TimeLineID	cur;
	LOCAL_FCINFO(fcinfo, 1);
	Datum		d;
	char	   *status;

	if (RecoveryInProgress() || !FullTransactionIdIsNormal(f))
		return FATE_UNKNOWN;
	cur = GetWALInsertionTimeLine();
	if (tli > cur || tli == 0)
		return FATE_UNKNOWN;	/* not our history: a diverged server */
	if (tli < cur)
	{
		List	   *hist = readTimeLineHistory(cur);

		if (!tliInHistory(tli, hist))
			return FATE_UNKNOWN;
		/* its WAL record never reached this server before the switch */
		if (lsn >= tliSwitchPoint(tli, hist, NULL))
			return FATE_ABORTED;
	}
	else if (lsn > GetFlushRecPtr(NULL))
		return FATE_UNKNOWN;
	if (!FullTransactionIdPrecedes(f, ReadNextFullTransactionId()))
		return FATE_UNKNOWN;

	InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = FullTransactionIdGetDatum(f);
	fcinfo->args[0].isnull = false;
	d = pg_xact_status(fcinfo);
	if (fcinfo->isnull)
		return FATE_UNKNOWN;	/* older than the commit log keeps */
	status = text_to_cstring(DatumGetTextPP(d));
	if (strcmp(status, "committed") == 0)
		return FATE_COMMITTED;
	if (strcmp(status, "in progress") == 0)
		return FATE_RUNNING;
	return FATE_ABORTED;
}

/* Does a live entry of this kind handle this (sub)transaction? */
static bool
entry_for_xid(ZkKind kind, uint64 fxid)
{
	int			i;

	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->state != ZKE_FREE && e->kind == kind && e->fxid == fxid)
			return true;
	}
	return false;
}

/*
 * Replayed transaction nodes.  A node's MAC binds its path and content, not
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

static void
given_up_add(uint64 fxid)
{
	if (ngiven_up == ZKQ_GIVEN_UP_MAX)
	{
		/* the oldest waits for the next start */
		memmove(given_up, given_up + 1, sizeof(uint64) * (ZKQ_GIVEN_UP_MAX - 1));
		ngiven_up--;
	}
	given_up[ngiven_up++] = fxid;
}

static int
given_up_find(uint64 fxid)
{
	int			i;

	for (i = 0; i < ngiven_up; i++)
		if (given_up[i] == fxid)
			return i;
	return -1;
}

static void
given_up_remove(uint64 fxid)
{
	int			i = given_up_find(fxid);

	if (i < 0)
		return;
	memmove(given_up + i, given_up + i + 1, sizeof(uint64) * (ngiven_up - i - 1));
	ngiven_up--;
}

/* ------------------------------------------------------------------------
 * Publication (ZKK_QPUB)
 * ------------------------------------------------------------------------
 */

/* <root>/txns/<sysid>-<run>-<fxid>; <sysid>-<fxid> before runs existed */
static void
txn_path(const ZkTxnHeader *h, char *out, size_t outlen)
{
	if (h->run == 0)
		snprintf(out, outlen, "%s/txns/" UINT64_FORMAT "-" UINT64_FORMAT,
				 zk_root, h->sysid, h->fxid);
	else
		snprintf(out, outlen, "%s/txns/" UINT64_FORMAT "-%016llx-" UINT64_FORMAT,
				 zk_root, h->sysid, (unsigned long long) h->run, h->fxid);
}

/*
 * New durable nodes wait until this run is registered and live on this
 * session (history.h): a server that finds the run dead may take it over.
 */
static bool
history_gate(ZkEntry *e)
{
	if (zk_history_ready())
		return true;
	if (zk_history_fenced())
		zk_fail(e, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
				"another server took over this server's zklock run (see the server log); restart PostgreSQL");
	else
		zk_retry_later(e);
	return false;
}

/* A publication in flight: the multi and its buffers */
typedef struct PubOp
{
	uint32		idx;
	uint32		gen;			/* NO_ENTRY: from the resolution */
	int			nops;
	zoo_op_t   *ops;
	zoo_op_result_t *res;
	char	  **paths;
	uint32	   *item_off;		/* per op: its item's offset in the blob */
	uint8	   *opkind;			/* per op: PUB_* */
	struct QSeq **opq;		/* per op: its queue (items, counters) */
	int64	   *opnum;			/* PUB_COUNTER: the value it writes */
	char	  **bufs;			/* per op: created name, or counter value */
	char	   *blob;			/* the resolution's own copy, or NULL */
	char		tpath[ZK_PATH_MAX];
	struct Scan *scan;
	bool		ensure;			/* send the parents' creates first */
	bool		waiting;		/* on pub_waits, for a queue's counter */
	int			tries;			/* sent again after a naming conflict */
	int			skips;			/* sent again after an op found done */
	/* the probe pass ("Ops found done"), while it runs */
	bool		probe_failed;	/* a probe's answer was lost */
	int			probe_next;		/* the next op to probe */
	int			probe_out;		/* probes in flight */
	uint64		probe_session;	/* the session they were sent in */
} PubOp;

#define PUB_OTHER		0		/* the transaction node, a recipe's op */
#define PUB_SEQ_ITEM	1		/* an item, named by entries' counter */
#define PUB_COUNTER		2		/* <queue>/next: set (or create) */
#define PUB_NAMED_ITEM	3		/* an item, named from <queue>/next */

static void scan_done_one(struct Scan *s, bool ok, int64 removed);

/* an op's path: under gates/ or arrivals/, plain components only */
static bool
op_path_valid(const char *path, int len)
{
	int			i;
	int			start = 0;

	if (!((len > 6 && strncmp(path, "gates/", 6) == 0) ||
		  (len > 9 && strncmp(path, "arrivals/", 9) == 0)))
		return false;
	for (i = 0; i <= len; i++)
	{
		if (i == len || path[i] == '/')
		{
			if (i == start || (i - start == 1 && path[start] == '.') ||
				(i - start == 2 && path[start] == '.' && path[start + 1] == '.'))
				return false;
			start = i + 1;
		}
		else if (path[i] == '\0')
			return false;
	}
	return true;
}

static bool
blob_valid(const char *blob, int len)
{
	const ZkTxnHeader *h = (const ZkTxnHeader *) blob;
	const char *p;
	const char *end = blob + len;
	uint32		i;

	if (len < (int) sizeof(ZkTxnHeader))
		return false;
	if (h->magic != ZKQ_TXN_MAGIC || h->total != (uint32) len)
		return false;
	p = blob + sizeof(ZkTxnHeader);
	for (i = 0; i < h->nitems; i++)
	{
		ZkTxnItem	it;

		if (end - p < (long) sizeof(ZkTxnItem))
			return false;
		memcpy(&it, p, sizeof(it));
		p += sizeof(ZkTxnItem);
		if (end - p < (long) it.qlen + (long) it.plen)
			return false;
		if (ZKQ_IS_OP(it.priority))
		{
			int			op = it.priority & ZKQ_OP_MASK;

			/* only the recipes' own subtrees, never ".." or an empty step */
			if ((op != ZKQ_OP_CREATE && op != ZKQ_OP_DELETE) ||
				(it.priority & ~(ZKQ_OP_ITEM | ZKQ_OP_SKIP | ZKQ_OP_MASK)) != 0 ||
				it.qlen == 0 || it.qlen > ZK_PATH_MAX - ZKLOCK_ROOT_MAX - 2 ||
				!op_path_valid(p, it.qlen))
				return false;
		}
		else if (it.qlen == 0 || it.qlen > ZKLOCK_QNAME_MAX || it.priority > 999)
			return false;
		p += it.qlen + it.plen;
	}
	return p == end;
}

static void publish_done(int rc, const void *data);
static void qpub_drive(ZkEntry *e);
static void pub_block(ZkEntry *e, PubOp *po, int rc);
static void pub_unblock(ZkEntry *e);
static void pub_block_resolve(PubOp *po, int rc);
static void pub_txn_written(ZkEntry *e);
static void pubop_free(PubOp *po);
static bool pub_send(PubOp *po);
static void seq_probe(QSeq *q);
static bool seq_fetch(QSeq *q);

/* ------------------------------------------------------------------------
 * Past the end of the counter
 *
 * ZooKeeper names a sequential child after its parent's count of child
 * creates, a signed 32-bit number: after 2^31 items a queue's entries run
 * out of names (ZooKeeper 3.8 gives ...2147483647 again, or negative
 * numbers).  Before that (ZKQ_SEQ_SWITCH), or once a create finds its name
 * taken, this cluster names the queue's items itself: entry-PPP-<10
 * digits> from 2^31 on, which sort after every name the counter gave, the
 * next number kept in <queue>/next.  The publishing multi sets next with
 * the version it read (or creates it), so clusters that publish at once
 * conflict there and read it again instead of taking one name twice; a
 * number taken anyway (next deleted or overwritten) fails the item's create
 * and next is read again, with entries and taken listed to step past every
 * name there.  A value of next near the end of ten digits is not believed:
 * the listing decides (numbers of consumed items are used again then).  A
 * worker that starts asks whether next exists before it publishes.
 * ------------------------------------------------------------------------
 */
#define ZKQ_SEQ_FIRST		INT64CONST(2147483648)	/* 2^31 */
#define ZKQ_SEQ_LAST		INT64CONST(9999999999)	/* ten digits */
#define ZKQ_SEQ_SWITCH		INT64CONST(2147418112)	/* 2^31 - 2^16 */
#define ZKQ_SEQ_SLACK		INT64CONST(1048576)	/* next beyond LAST - this:
													 * not believed */
#define ZKQ_NAMING_TRIES	50

static List *pub_waits = NIL;	/* PubOp waiting for a queue's next */

static ZkLogLimit seq_switch_log;

static void
seq_switch(QSeq *q, const char *why)
{
	if (q->seq_explicit)
		return;
	q->seq_explicit = true;
	q->seq_known = false;
	{
		char		path[ZK_PATH_MAX];

		q_seq_path(q, "next", path, sizeof(path));
		if (zk_log_limited(&seq_switch_log, "this cluster names a queue's items from its next node"))
			ereport(LOG,
					(errmsg("zklock: queue \"%s\": %s; this cluster names its items from %s from now on",
							zk_log_name(q->name), why, path)));
	}
}

/* the number in an item's name "entry-PPP-<10 digits>", or -1 */
static int64
seq_of_node(const char *child)
{
	int			prio;
	int64		v = 0;
	int			i;

	if (!zk_queue_node_priority(child, &prio) || strlen(child) != 20)
		return -1;
	for (i = 10; i < 20; i++)
	{
		if (child[i] < '0' || child[i] > '9')
			return -1;
		v = v * 10 + (child[i] - '0');
	}
	return v;
}

/* Send the PubOp again once every queue's counter it needs is known */
static void
pub_waits_fire(bool ok)
{
	List	   *waits = pub_waits;
	ListCell   *lc;

	pub_waits = NIL;
	foreach(lc, waits)
	{
		PubOp	   *po = lfirst(lc);
		ZkEntry    *e = NULL;

		po->waiting = false;
		if (po->gen != ZKLOCK_NO_ENTRY)
		{
			ZkEntry    *pe = zk_entry(po->idx);

			if (pe->gen == po->gen && pe->state != ZKE_FREE && pe->delete_inflight)
				e = pe;
			else
			{
				pubop_free(po); /* moved on without it (a new session) */
				continue;
			}
		}
		if (ok && zk_session_usable() && pub_send(po))
			continue;
		if (e != NULL)
		{
			e->delete_inflight = false;
			zk_retry_later(e);
		}
		else if (po->scan != NULL)
			scan_done_one(po->scan, false, 0);
		pubop_free(po);
	}
	list_free(waits);
}

typedef struct SeqFetch
{
	char		name[ZKLOCK_QNAME_MAX + 1];
	int			pending;
	bool		failed;
	bool		val_ok;
	int64		val;
	bool		exists;
	int32		version;
	int64		max_listed;
} SeqFetch;

static void
seq_fetch_one_done(SeqFetch *f)
{
	QSeq	   *q;

	if (--f->pending > 0)
		return;
	q = q_seq(f->name);
	q->seq_fetching = false;
	if (!f->failed)
	{
		int64		n = ZKQ_SEQ_FIRST;

		if (f->val_ok && f->val > n)
			n = f->val;
		if (f->max_listed >= n)
			n = f->max_listed + 1;
		q->seq_next = n;
		q->seq_exists = f->exists;
		q->seq_version = f->version;
		q->seq_known = true;
		q->seq_fresh = true;
	}
	pub_waits_fire(!f->failed);
	pfree(f);
}

/* Completion of the zoo_aget sent by seq_fetch() */
static void
seq_get_done(int rc, const char *value, int value_len,
			 const struct Stat *stat, const void *data)
{
	SeqFetch   *f = (SeqFetch *) data;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		if (rc == ZOK && stat != NULL)
		{
			char		buf[16];

			f->exists = true;
			f->version = stat->version;
			/* another client's garbage: the listing decides */
			if (value != NULL && value_len > 0 && value_len < (int) sizeof(buf))
			{
				char	   *end;

				memcpy(buf, value, value_len);
				buf[value_len] = '\0';
				errno = 0;
				f->val = strtoll(buf, &end, 10);
				f->val_ok = (errno == 0 && *end == '\0' && end != buf &&
							 f->val >= ZKQ_SEQ_FIRST &&
							 f->val <= ZKQ_SEQ_LAST - ZKQ_SEQ_SLACK);
			}
		}
		else if (rc == ZNONODE)
			f->exists = false;
		else
			f->failed = true;
		seq_fetch_one_done(f);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_aget_children sent by seq_fetch() */
static void
seq_children_done(int rc, const struct String_vector *sv, const void *data)
{
	SeqFetch   *f = (SeqFetch *) data;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		if (rc == ZOK && sv != NULL)
		{
			int			i;

			for (i = 0; i < sv->count; i++)
			{
				int64		v = seq_of_node(sv->data[i]);

				if (v > f->max_listed)
					f->max_listed = v;
			}
		}
		else if (rc != ZNONODE)
			f->failed = true;
		seq_fetch_one_done(f);
	}
	COMPLETION_END(none);
}

/*
 * Read q's next, and list its entries and taken (pipelined); the PubOps on
 * pub_waits go on when the answers are in.  false: nothing could be sent.
 */
static bool
seq_fetch(QSeq *q)
{
	SeqFetch   *f;
	char		path[ZK_PATH_MAX];
	int			sent = 0;

	if (q->seq_fetching)
		return true;
	f = MemoryContextAllocZero(q_context(), sizeof(SeqFetch));
	strlcpy(f->name, q->name, sizeof(f->name));
	f->max_listed = -1;
	f->pending = 3;
	q_seq_path(q, "next", path, sizeof(path));
	if (zoo_aget(zk_zh, path, 0, seq_get_done, f) == ZOK)
		sent++;
	else
		f->failed = true;
	q_seq_path(q, "entries", path, sizeof(path));
	if (zoo_aget_children(zk_zh, path, 0, seq_children_done, f) == ZOK)
		sent++;
	else
		f->failed = true;
	q_seq_path(q, "taken", path, sizeof(path));
	if (zoo_aget_children(zk_zh, path, 0, seq_children_done, f) == ZOK)
		sent++;
	else
		f->failed = true;
	if (sent == 0)
	{
		pfree(f);
		return false;
	}
	f->pending = sent;
	q->seq_fetching = true;
	return true;
}

/* Completion of the zoo_aexists sent by seq_probe() */
static void
seq_probe_done(int rc, const struct Stat *stat, const void *data)
{
	char	   *name = (char *) data;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		QSeq	   *q = q_seq(name);

		if (rc == ZOK)
			seq_switch(q, "another cluster names its items itself (its entries' sequence counter is at its end)");
		if (rc == ZOK || rc == ZNONODE)
			q->seq_answered = true;
		else
			q->seq_probed = false;	/* ask again */
		pfree(name);
		pub_waits_fire(rc == ZOK || rc == ZNONODE);
	}
	COMPLETION_END(none);
}

/* Does q's next exist?  Asked once per worker (and after a failed ask). */
static void
seq_probe(QSeq *q)
{
	char		path[ZK_PATH_MAX];
	char	   *name;

	if (q->seq_probed || q->seq_explicit)
		return;
	name = MemoryContextStrdup(q_context(), q->name);
	q_seq_path(q, "next", path, sizeof(path));
	if (zoo_aexists(zk_zh, path, 0, seq_probe_done, name) == ZOK)
		q->seq_probed = true;
	else
		pfree(name);
}

/*
 * Send the publishing multi for a transaction's items: delete the
 * transaction node, create every item.  ensure: send the parents' creates
 * first (after a NONODE, and always from the resolution).
 */
static bool
send_publish(const char *blob, const char *tpath, uint32 idx, uint32 gen,
			 struct Scan *scan, bool ensure)
{
	PubOp	   *po = MemoryContextAllocZero(q_context(), sizeof(PubOp));

	po->idx = idx;
	po->gen = gen;
	po->scan = scan;
	po->ensure = ensure;
	if (scan != NULL)
	{
		/* the resolution's copy: ours to mark skipped ops in */
		const ZkTxnHeader *h = (const ZkTxnHeader *) blob;

		po->blob = MemoryContextAlloc(q_context(), h->total);
		memcpy(po->blob, blob, h->total);
	}
	strlcpy(po->tpath, tpath, sizeof(po->tpath));
	if (!pub_send(po))
	{
		pubop_free(po);
		return false;
	}
	return true;
}

/* the previous try's ops and buffers */
static void
pub_clear(PubOp *po)
{
	int			i;

	for (i = 0; i < po->nops; i++)
	{
		if (po->paths && po->paths[i])
			pfree(po->paths[i]);
		if (po->bufs && po->bufs[i])
			pfree(po->bufs[i]);
		if (po->opq && po->opq[i])
			po->opq[i]->refs--;
	}
	if (po->paths)
		pfree(po->paths);
	if (po->bufs)
		pfree(po->bufs);
	if (po->ops)
		pfree(po->ops);
	if (po->res)
		pfree(po->res);
	if (po->item_off)
		pfree(po->item_off);
	if (po->opkind)
		pfree(po->opkind);
	if (po->opq)
		pfree(po->opq);
	if (po->opnum)
		pfree(po->opnum);
	po->paths = po->bufs = NULL;
	po->ops = NULL;
	po->res = NULL;
	po->item_off = NULL;
	po->opkind = NULL;
	po->opq = NULL;
	po->opnum = NULL;
	po->nops = 0;
}

static int
cmp_cstrings(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * Before the multi: creates for the parents of its ops' creates, pipelined
 * (they cost no wait, so always), once per distinct parent: the arrivals
 * of one transaction share theirs, and creates per op would make a
 * publication of n arrivals cost 3n requests more.
 */
static void
pub_ensure_parents(PubOp *po, int nparents)
{
	char	  **parents = palloc(sizeof(char *) * nparents);
	int			k = 0;
	int			i;

	for (i = 1; i < po->nops && k < nparents; i++)
	{
		char	   *slash;

		if (po->opkind[i] != PUB_OTHER || po->ops[i].type != ZOO_CREATE_OP ||
			po->paths[i] == NULL)
			continue;
		slash = strrchr(po->paths[i], '/');
		if (slash == NULL || slash == po->paths[i])
			continue;
		parents[k++] = pnstrdup(po->paths[i], slash - po->paths[i]);
	}
	qsort(parents, k, sizeof(char *), cmp_cstrings);
	for (i = 0; i < k; i++)
	{
		if (i == 0 || strcmp(parents[i], parents[i - 1]) != 0)
			send_ensure_path(parents[i]);
	}
	for (i = 0; i < k; i++)
		pfree(parents[i]);
	pfree(parents);
}

/*
 * Build the multi from the blob and send it; or, when a queue that names
 * its items itself needs its next read first, wait on pub_waits (true).
 */
static bool
pub_send(PubOp *po)
{
	const char *blob;
	const ZkTxnHeader *h;
	const char *p;
	MemoryContext old;
	QSeq	  **qs;
	int		   *qcount;
	int		   *qused;
	int			nq = 0;
	uint32		i;
	int			j;
	int			n = 1;
	int			rc;
	bool		wait = false;
	bool		seq_failed = false;
	int			nparents = 0;

	if (po->blob != NULL)
		blob = po->blob;
	else
		blob = dsa_get_address(zk_dsa(), zk_entry(po->idx)->blob);
	h = (const ZkTxnHeader *) blob;
	pub_clear(po);
	old = MemoryContextSwitchTo(q_context());

	/* the queues that name their items themselves, and how many each */
	qs = palloc0(sizeof(QSeq *) * (h->nitems + 1));
	qcount = palloc0(sizeof(int) * (h->nitems + 1));
	qused = palloc0(sizeof(int) * (h->nitems + 1));
	p = blob + sizeof(ZkTxnHeader);
	for (i = 0; i < h->nitems; i++)
	{
		ZkTxnItem	it;
		char		qname[ZKLOCK_QNAME_MAX + 1];
		QSeq	   *q;

		memcpy(&it, p, sizeof(it));
		p += sizeof(ZkTxnItem);
		if (ZKQ_IS_OP(it.priority))
		{
			p += it.qlen + it.plen;
			continue;
		}
		memcpy(qname, p, it.qlen);
		qname[it.qlen] = '\0';
		p += it.qlen + it.plen;
		q = q_seq(qname);
		if (!q->seq_answered && !q->seq_explicit)
		{
			/* does it name its items itself?  (asked before commit, as a rule) */
			seq_probe(q);
			if (!q->seq_probed)
				seq_failed = true;
			wait = true;
			continue;
		}
		if (!q->seq_explicit)
			continue;
		for (j = 0; j < nq && qs[j] != q; j++)
			;
		if (j == nq)
			qs[nq++] = q;
		qcount[j]++;
	}
	if (seq_failed)
	{
		MemoryContextSwitchTo(old);
		pfree(qs);
		pfree(qcount);
		pfree(qused);
		return false;
	}
	for (j = 0; j < nq; j++)
	{
		if (qs[j]->seq_known && qs[j]->seq_next + qcount[j] - 1 > ZKQ_SEQ_LAST)
		{
			if (qs[j]->seq_fresh)
			{
				/*
				 * out of ten-digit names too: this time the counter's way,
				 * which fails, until ZKQ_NAMING_TRIES end in the warning
				 */
				qs[j] = NULL;
				continue;
			}
			/* read again: past LAST - SLACK, next yields to the listing */
			qs[j]->seq_known = false;
		}
		if (!qs[j]->seq_known)
		{
			if (!seq_fetch(qs[j]))
			{
				MemoryContextSwitchTo(old);
				pfree(qs);
				pfree(qcount);
				pfree(qused);
				return false;
			}
			wait = true;
		}
	}
	if (wait)
	{
		MemoryContextSwitchTo(old);
		pfree(qs);
		pfree(qcount);
		pfree(qused);
		if (!po->waiting)
		{
			old = MemoryContextSwitchTo(q_context());
			pub_waits = lappend(pub_waits, po);
			MemoryContextSwitchTo(old);
			po->waiting = true;
		}
		return true;
	}

	j = h->nitems + 2 * nq + 1;
	po->ops = palloc0(sizeof(zoo_op_t) * j);
	po->res = palloc0(sizeof(zoo_op_result_t) * j);
	po->paths = palloc0(sizeof(char *) * j);
	po->bufs = palloc0(sizeof(char *) * j);
	po->item_off = palloc0(sizeof(uint32) * j);
	po->opkind = palloc0(sizeof(uint8) * j);
	po->opq = palloc0(sizeof(QSeq *) * j);
	po->opnum = palloc0(sizeof(int64) * j);
	zoo_delete_op_init(&po->ops[0], po->tpath, -1);

	/*
	 * each such queue's next: set with the version read, or created; near
	 * the end of its (32-bit) version, deleted with it and created again
	 */
	for (j = 0; j < nq; j++)
	{
		QSeq	   *q = qs[j];
		char		npath[ZK_PATH_MAX];
		bool		recreate;

		if (q == NULL)
			continue;
		q_seq_path(q, "next", npath, sizeof(npath));
		recreate = q->seq_exists &&
			(q->seq_version < 0 || q->seq_version >= PG_INT32_MAX - 1);
		if (recreate)
		{
			po->opkind[n] = PUB_COUNTER;
			po->opq[n] = q;
			q->refs++;
			po->paths[n] = pstrdup(npath);
			zoo_delete_op_init(&po->ops[n], po->paths[n], q->seq_version);
			n++;
		}
		po->opkind[n] = PUB_COUNTER;
		po->opq[n] = q;
		q->refs++;
		po->opnum[n] = q->seq_next + qcount[j];
		po->paths[n] = pstrdup(npath);
		po->bufs[n] = psprintf(INT64_FORMAT, po->opnum[n]);
		if (!q->seq_exists || recreate)
			zoo_create_op_init(&po->ops[n], po->paths[n], po->bufs[n],
							   (int) strlen(po->bufs[n]), zk_acl(), 0,
							   NULL, 0);
		else
			zoo_set_op_init(&po->ops[n], po->paths[n], po->bufs[n],
							(int) strlen(po->bufs[n]), q->seq_version, NULL);
		n++;
	}

	p = blob + sizeof(ZkTxnHeader);
	for (i = 0; i < h->nitems; i++)
	{
		ZkTxnItem	it;
		uint32		off = (uint32) (p - blob);
		char		qname[ZK_PATH_MAX];
		char		qpath[ZK_PATH_MAX];
		QSeq	   *q;

		memcpy(&it, p, sizeof(it));
		p += sizeof(ZkTxnItem);
		memcpy(qname, p, it.qlen);
		qname[it.qlen] = '\0';
		p += it.qlen;
		if (ZKQ_IS_OP(it.priority))
		{
			if ((it.priority & ZKQ_OP_SKIP) == 0)
			{
				po->item_off[n] = off;
				po->paths[n] = psprintf("%s/%s", zk_root, qname);
				if ((it.priority & ZKQ_OP_MASK) == ZKQ_OP_CREATE)
				{
					/* its parents: ensured below, once per parent */
					nparents++;
					zoo_create_op_init(&po->ops[n], po->paths[n], p, (int) it.plen,
									   zk_acl(), 0, NULL, 0);
				}
				else
					zoo_delete_op_init(&po->ops[n], po->paths[n], -1);
				n++;
			}
			p += it.plen;
			continue;
		}
		zk_queue_path(qname, qpath, sizeof(qpath));
		if (po->ensure || !parents_known(qname))
		{
			send_ensure_queue(qpath);
			parents_remember(qname, true);
		}
		q = q_seq(qname);
		for (j = 0; j < nq && qs[j] != q; j++)
			;
		po->item_off[n] = off;
		po->opq[n] = q;
		q->refs++;
		if (j < nq)
		{
			po->opkind[n] = PUB_NAMED_ITEM;
			po->paths[n] = psprintf("%s/entries/entry-%03d-%010" PRId64,
									qpath, (int) it.priority, q->seq_next + qused[j]);
			qused[j]++;
			zoo_create_op_init(&po->ops[n], po->paths[n], p, (int) it.plen,
							   zk_acl(), 0, NULL, 0);
		}
		else
		{
			int			blen;

			po->opkind[n] = PUB_SEQ_ITEM;
			po->paths[n] = psprintf("%s/entries/entry-%03d-", qpath, (int) it.priority);
			blen = (int) strlen(po->paths[n]) + 16;
			po->bufs[n] = palloc0(blen);
			zoo_create_op_init(&po->ops[n], po->paths[n], p, (int) it.plen,
							   zk_acl(), ZOO_PERSISTENT_SEQUENTIAL,
							   po->bufs[n], blen);
		}
		n++;
		p += it.plen;
	}
	po->nops = n;
	pfree(qs);
	pfree(qcount);
	pfree(qused);
	MemoryContextSwitchTo(old);
	if (nparents > 0)
		pub_ensure_parents(po, nparents);
	rc = zoo_amulti(zk_zh, po->nops, po->ops, po->res, publish_done, po);
	return rc == ZOK;
}

static void
pubop_free(PubOp *po)
{
	if (po->waiting)
		pub_waits = list_delete_ptr(pub_waits, po);
	pub_clear(po);
	if (po->blob)
		pfree(po->blob);
	pfree(po);
}

/*
 * After a successful publication: the counters it set, and whether
 * entries' own counter is near its end (or past it: negative names).
 */
static void
pub_note_names(PubOp *po)
{
	int			i;

	for (i = 1; i < po->nops; i++)
	{
		QSeq	   *q = po->opq[i];

		if (q == NULL)
			continue;
		if (po->opkind[i] == PUB_COUNTER && po->ops[i].type != ZOO_DELETE_OP)
		{
			q->seq_next = po->opnum[i];
			q->seq_exists = true;
			q->seq_version = (po->ops[i].type == ZOO_CREATE_OP) ? 0 :
				po->ops[i].set_op.version + 1;
			q->seq_known = true;
			q->seq_fresh = false;
		}
		else if (po->opkind[i] == PUB_SEQ_ITEM && po->bufs[i] != NULL)
		{
			const char *child = strrchr(po->bufs[i], '/');

			if (child != NULL && strlen(child + 1) > 10)
			{
				const char *num = child + 1 + 10;

				if (*num == '-' || strtoll(num, NULL, 10) >= ZKQ_SEQ_SWITCH)
					seq_switch(q, "zookeeper's sequence counter of its entries is near its end");
			}
		}
	}
}

/*
 * A definite failure that comes from naming: next changed under us (set or
 * created by another cluster, deleted, overwritten), an item's own name
 * was taken, or a sequential create found its name there (entries' counter
 * ran out).  Such queues read next again; true: send it again.
 */
static bool
pub_naming_conflict(PubOp *po)
{
	int			i;

	if (po->tries >= ZKQ_NAMING_TRIES)
		return false;
	for (i = 1; i < po->nops; i++)
	{
		int			err = po->res[i].err;
		QSeq	   *q = po->opq[i];

		if (err == ZOK || err == ZRUNTIMEINCONSISTENCY)
			continue;
		if (q == NULL)
			return false;
		if (po->opkind[i] == PUB_COUNTER &&
			(err == ZBADVERSION || err == ZNODEEXISTS || err == ZNONODE))
		{
			q->seq_known = false;
			return true;
		}
		if (po->opkind[i] == PUB_NAMED_ITEM && err == ZNODEEXISTS)
		{
			q->seq_known = false;
			return true;
		}
		if (po->opkind[i] == PUB_SEQ_ITEM && err == ZNODEEXISTS)
		{
			seq_switch(q, "zookeeper's sequence counter of its entries has run out");
			q->seq_known = false;
			return true;
		}
		return false;
	}
	return false;
}

/*
 * A definite failure of the publishing multi: is it an op that found its
 * work already done (the node it creates exists, the node it deletes is
 * gone)?  Then mark it skipped in blob and say so (*at: its index): the
 * multi goes again.
 */
static bool
skip_done_op(PubOp *po, char *blob, int *at)
{
	int			i;

	for (i = 1; i < po->nops; i++)
	{
		int			err = po->res[i].err;
		ZkTxnItem	it;

		if (err == ZOK || err == ZRUNTIMEINCONSISTENCY)
			continue;
		if (po->opkind[i] != PUB_OTHER)
			return false;
		memcpy(&it, blob + po->item_off[i], sizeof(it));
		if (!ZKQ_IS_OP(it.priority))
			return false;
		if (((it.priority & ZKQ_OP_MASK) == ZKQ_OP_CREATE && err == ZNODEEXISTS) ||
			((it.priority & ZKQ_OP_MASK) == ZKQ_OP_DELETE && err == ZNONODE))
		{
			it.priority |= ZKQ_OP_SKIP;
			memcpy(blob + po->item_off[i], &it, sizeof(it));
			*at = i;
			return true;
		}
		return false;
	}
	return false;
}

/* ------------------------------------------------------------------------
 * Ops found done
 *
 * ZooKeeper stops a multi at its first failing op and reports nothing about
 * the ops after it.  A transaction that arrives n participants who have all
 * arrived already (a rerun of a step) would cost n multis of n, n-1, ...
 * ops, one op skipped each time: quadratic.  So from the second such
 * failure of one publication on, the ops after the failing one are probed
 * first, one exists each, at most ZKQ_PROBE_WINDOW in flight (each answer
 * sends the next, so a turn of the worker does bounded work), every op
 * found done is marked skipped, and then the multi goes again: about n + 3
 * requests.  An op done meanwhile by someone else fails that multi again
 * and is skipped then; every round skips at least one op, so it ends.
 * ------------------------------------------------------------------------
 */
#define ZKQ_PROBE_WINDOW	256

typedef struct ProbeCall
{
	PubOp	   *po;
	int			op;				/* index in po->ops */
} ProbeCall;

static void pub_probe_send(PubOp *po);
static void pub_resend(PubOp *po, ZkEntry *e);

/* the blob a PubOp marks skipped ops in, or NULL when its entry is gone */
static char *
pub_blob(PubOp *po, ZkEntry **ep)
{
	*ep = NULL;
	if (po->gen != ZKLOCK_NO_ENTRY)
	{
		ZkEntry    *pe = zk_entry(po->idx);

		if (pe->gen != po->gen || pe->state == ZKE_FREE || !DsaPointerIsValid(pe->blob))
			return NULL;
		*ep = pe;
		return dsa_get_address(zk_dsa(), pe->blob);
	}
	return po->blob;
}

/* is op i of po an op (not a queue item) that could be found done? */
static bool
pub_op_probeable(PubOp *po, const char *blob, int i)
{
	ZkTxnItem	it;

	if (po->opkind[i] != PUB_OTHER || po->item_off[i] == 0)
		return false;
	memcpy(&it, blob + po->item_off[i], sizeof(it));
	return ZKQ_IS_OP(it.priority) && (it.priority & ZKQ_OP_SKIP) == 0;
}

/* Completion of the zoo_aexists sent by pub_probe_send() */
static void
pub_probe_done(int rc, const struct Stat *stat, const void *data)
{
	ProbeCall  *c = (ProbeCall *) data;
	PubOp	   *po = c->po;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		ZkEntry    *pe;
		char	   *blob = pub_blob(po, &pe);

		e = pe;
		po->probe_out--;
		if (!zk_rc_definite(rc))
			po->probe_failed = true;
		else if (blob != NULL)
		{
			ZkTxnItem	it;
			int			op;

			memcpy(&it, blob + po->item_off[c->op], sizeof(it));
			op = it.priority & ZKQ_OP_MASK;
			if ((op == ZKQ_OP_CREATE && rc == ZOK) ||
				(op == ZKQ_OP_DELETE && rc == ZNONODE))
			{
				it.priority |= ZKQ_OP_SKIP;
				memcpy(blob + po->item_off[c->op], &it, sizeof(it));
			}
		}
		pfree(c);
		pub_probe_send(po);
	}
	COMPLETION_END(e);
}

/*
 * Send the next probes of po, up to the window; once every answer is in,
 * send the multi again (or hand the publication back to be retried).
 */
static void
pub_probe_send(PubOp *po)
{
	ZkEntry    *e;
	char	   *blob = pub_blob(po, &e);

	if (blob == NULL || po->probe_session != zk_cur_session)
	{
		/* its entry or session moved on without it */
		if (po->probe_out > 0)
			return;
		if (po->scan != NULL)
			scan_done_one(po->scan, false, 0);
		pubop_free(po);
		return;
	}
	while (!po->probe_failed && po->probe_out < ZKQ_PROBE_WINDOW &&
		   po->probe_next < po->nops)
	{
		int			i = po->probe_next++;
		ProbeCall  *c;

		if (!pub_op_probeable(po, blob, i))
			continue;
		if (!zk_session_usable())
		{
			po->probe_failed = true;
			break;
		}
		c = MemoryContextAlloc(q_context(), sizeof(ProbeCall));
		c->po = po;
		c->op = i;
		if (zoo_aexists(zk_zh, po->paths[i], 0, pub_probe_done, c) != ZOK)
		{
			pfree(c);
			po->probe_failed = true;
			break;
		}
		po->probe_out++;
	}
	if (po->probe_out > 0 || (!po->probe_failed && po->probe_next < po->nops))
		return;
	if (po->probe_failed || !zk_session_usable())
	{
		/* as after a lost reply: the whole publication again, later */
		if (e != NULL)
		{
			e->delete_inflight = false;
			zk_retry_later(e);
		}
		else if (po->scan != NULL)
			scan_done_one(po->scan, false, 0);
		pubop_free(po);
		return;
	}
	pub_resend(po, e);
}

/* Start the probe pass after op "at" of po failed as done; true: started */
static bool
pub_probe_start(PubOp *po, int at)
{
	po->probe_failed = false;
	po->probe_next = at + 1;
	po->probe_out = 0;
	po->probe_session = zk_cur_session;
	pub_probe_send(po);
	return true;
}

/* The multi again, built anew from the blob without the skipped ops */
static void
pub_resend(PubOp *po, ZkEntry *e)
{
	bool		sent = pub_send(po);

	if (sent)
		return;
	if (e != NULL)
	{
		e->delete_inflight = false;
		zk_retry_later(e);
	}
	else if (po->scan != NULL)
		scan_done_one(po->scan, false, 0);
	pubop_free(po);
}

/*
 * A queue item's sequential create found its node there: ZooKeeper's
 * counter of the parent has wrapped (it names new children after the last
 * one again).  Returns the parent's path (in po), or NULL.
 */
static const char *
seq_exhausted(PubOp *po)
{
	int			i;

	for (i = 1; i < po->nops; i++)
	{
		if (po->res[i].err != ZNODEEXISTS)
			continue;
		if (po->opkind[i] == PUB_SEQ_ITEM || po->opkind[i] == PUB_NAMED_ITEM)
		{
			char	   *slash = strrchr(po->paths[i], '/');

			if (slash != NULL)
				*slash = '\0';
			return po->paths[i];
		}
	}
	return NULL;
}

/* ------------------------------------------------------------------------
 * Publications ZooKeeper refuses
 *
 * A committed transaction's publication can fail for good: a gate node that
 * another client gave children cannot be deleted (zk_gate_open), a parent
 * another client made ephemeral takes no children, an ACL refuses us, a
 * queue's names ran out.  What can be seen before the commit record is
 * checked then (send_txn_create: a gate node's children), and fails the
 * COMMIT.  What happens after it cannot fail the COMMIT any more: the entry
 * is kept (pub_blocked, zk_status().publications_blocked counts it), the
 * COMMIT that waits for it returns with a WARNING saying why, the server
 * log says it once with what to do, and the whole multi is tried again
 * every 1, 2, 4 ... ZKQ_BLOCKED_MAX_MS until ZooKeeper takes it: nothing of
 * the transaction is visible meanwhile, and nothing is dropped.  The
 * settling pass's publications (after a crash) are counted the same way
 * and the pass runs again after ZKQ_BLOCKED_RESOLVE_MS.
 * ------------------------------------------------------------------------
 */
#define ZKQ_BLOCKED_FIRST_MS	1000
#define ZKQ_BLOCKED_MAX_MS		10000
#define ZKQ_BLOCKED_RESOLVE_MS	30000

typedef struct Blocked
{
	uint32		idx;
	uint32		gen;
	TimestampTz due;
	int			interval_ms;
} Blocked;

static List *pub_blocked_list = NIL;	/* Blocked * */
static TimestampTz resolve_again_at = 0;

/* Why ZooKeeper refused po's multi (rc), in words, into buf */
static void
pub_refusal(PubOp *po, int rc, char *buf, size_t len)
{
	const char *full = seq_exhausted(po);
	int			i;

	if (full != NULL)
	{
		snprintf(buf, len, "zookeeper's sequence counter of %s has run out, and naming the items from the queue's next node failed too",
				 full);
		return;
	}
	for (i = 0; i < po->nops; i++)
	{
		int			err = po->res[i].err;
		const char *path = i == 0 ? po->tpath : po->paths[i];
		bool		del = po->ops[i].type == ZOO_DELETE_OP;

		if (err == ZOK || err == ZRUNTIMEINCONSISTENCY)
			continue;
		if (del && err == ZNOTEMPTY)
			snprintf(buf, len, "zookeeper cannot delete %s: another client created children under it",
					 path ? path : "?");
		else
			snprintf(buf, len, "zookeeper refused to %s %s: %s", del ? "delete" : "create",
					 path ? path : "?", zerror(err));
		return;
	}
	snprintf(buf, len, "zookeeper refused the publishing request: %s", zerror(rc));
}

static Blocked *
blocked_find(ZkEntry *e)
{
	ListCell   *lc;

	foreach(lc, pub_blocked_list)
	{
		Blocked    *b = lfirst(lc);

		if (b->idx == zk_entry_index(e) && b->gen == e->gen)
			return b;
	}
	return NULL;
}

static ZkLogLimit pub_block_log;

/* A committed transaction's publication failed for good: keep it, retry */
static void
pub_block(ZkEntry *e, PubOp *po, int rc)
{
	char		why[ZKLOCK_ERRMSG_MAX];
	Blocked    *b = blocked_find(e);

	pub_refusal(po, rc, why, sizeof(why));
	strlcpy(e->errmsg, why, sizeof(e->errmsg));
	if (!e->pub_blocked)
	{
		e->pub_blocked = true;
		zk_count(ZKCNT_ZK_ERRORS, 1);
		if (zk_log_limited(&pub_block_log, "zookeeper refuses to publish the work of a committed transaction"))
			ereport(WARNING,
					(errmsg("zklock: zookeeper refuses to publish the work of committed transaction " UINT64_FORMAT ": %s",
							e->fxid, why),
					 errdetail("Its queue items and gate and arrival changes stay in the transaction node %s, none of them visible; the worker tries the whole publication again every %d s until ZooKeeper takes it.",
							   po->tpath, ZKQ_BLOCKED_MAX_MS / 1000),
					 errhint("Remove what blocks it (for a gate node: the other client's children under it); zk_status().publications_blocked counts the transactions waiting so.")));
	}
	if (b == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(q_context());

		b = palloc0(sizeof(Blocked));
		b->idx = zk_entry_index(e);
		b->gen = e->gen;
		b->interval_ms = ZKQ_BLOCKED_FIRST_MS;
		pub_blocked_list = lappend(pub_blocked_list, b);
		MemoryContextSwitchTo(old);
	}
	else
		b->interval_ms = Min(b->interval_ms * 2, ZKQ_BLOCKED_MAX_MS);
	b->due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), b->interval_ms);
}

static ZkLogLimit pub_unblock_log;

/* ... and ZooKeeper has taken it now */
static void
pub_unblock(ZkEntry *e)
{
	Blocked    *b = blocked_find(e);

	if (b != NULL)
	{
		pub_blocked_list = list_delete_ptr(pub_blocked_list, b);
		pfree(b);
	}
	e->pub_blocked = false;
	if (zk_log_limited(&pub_unblock_log, "published the work of a transaction that zookeeper had refused"))
		ereport(LOG,
				(errmsg("zklock: published the work of transaction " UINT64_FORMAT " that zookeeper had refused",
						e->fxid)));
}

static ZkLogLimit pub_resolve_log;

/* The settling pass's publication was refused: count it, run it again */
static void
pub_block_resolve(PubOp *po, int rc)
{
	char		why[ZKLOCK_ERRMSG_MAX];

	pub_refusal(po, rc, why, sizeof(why));
	zk_ctl->pubs_blocked_resolve++;
	zk_count(ZKCNT_ZK_ERRORS, 1);
	if (zk_log_limited(&pub_resolve_log, "zookeeper refuses to publish a committed transaction node"))
		ereport(WARNING,
				(errmsg("zklock: zookeeper refuses to publish the committed transaction node %s: %s",
						po->tpath, why),
				 errdetail("Its queue items and gate and arrival changes stay in that node, none of them visible; the worker settles it again every %d s until ZooKeeper takes it.",
						   ZKQ_BLOCKED_RESOLVE_MS / 1000),
				 errhint("Remove what blocks it (for a gate node: the other client's children under it); zk_status().publications_blocked counts the transactions waiting so.")));
	resolve_again_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   ZKQ_BLOCKED_RESOLVE_MS);
}

/* Every turn with a usable session: send the refused ones that are due */
static void
pub_blocked_tick(void)
{
	TimestampTz now;
	ListCell   *lc;

	if (pub_blocked_list == NIL)
		return;
	now = GetCurrentTimestamp();
	foreach(lc, pub_blocked_list)
	{
		Blocked    *b = lfirst(lc);
		ZkEntry    *e = zk_entry(b->idx);

		if (e->gen != b->gen || e->state == ZKE_FREE || e->kind != ZKK_QPUB ||
			!e->pub_blocked)
		{
			pub_blocked_list = foreach_delete_current(pub_blocked_list, lc);
			pfree(b);
			continue;
		}
		if (now < b->due || e->delete_inflight || e->create_inflight || e->on_retry)
			continue;
		b->due = TimestampTzPlusMilliseconds(now, b->interval_ms);
		qpub_drive(e);
	}
}

/*
 * A publication that fails for a missing parent sends the parents' creates
 * and goes again (three times, then it is blocked, see pub_block).  A drop
 * of the queue elsewhere (zk_queue_drop, "Dropping a queue") that lands
 * between those creates and the multi fails it again, however often it
 * tries; as long as no parent's create was refused in this session (an
 * ACL), it goes on, up to ZKQ_PARENT_TRIES tries.
 */
#define ZKQ_PARENT_TRIES	20

/* Was the create of a parent of one of po's failed creates refused? */
static bool
pub_parent_refused(PubOp *po)
{
	char		refused[ZK_PATH_MAX];
	int			i;

	for (i = 1; i < po->nops; i++)
		if (po->res[i].err == ZNONODE && po->paths[i] != NULL &&
			zk_parent_refused(po->paths[i], refused, sizeof(refused)))
			return true;
	return false;
}

/* Completion of the zoo_amulti sent by pub_send() */
static void
publish_done(int rc, const void *data)
{
	PubOp	   *po = (PubOp *) data;
	ZkEntry    *volatile e = NULL;
	bool		applied;
	volatile bool missing_parent = false;	/* set inside COMPLETION_BEGIN */
	volatile bool keep = false;	/* read after COMPLETION_END */
	int			at = 0;
	int			i;

	COMPLETION_BEGIN
	{
		/* the transaction node gone: published now, or before */
		applied = (rc == ZOK);
		if (applied)
			pub_note_names(po);
		if (!applied && zk_rc_definite(rc))
		{
			if (po->res[0].err == ZNONODE)
				applied = true;
			for (i = 1; i < po->nops; i++)
				if (po->res[i].err == ZNONODE && po->opkind[i] != PUB_COUNTER)
					missing_parent = true;
		}
		if (po->gen != ZKLOCK_NO_ENTRY)
		{
			ZkEntry    *pe = zk_entry(po->idx);

			if (pe->gen == po->gen && pe->state != ZKE_FREE)
				e = pe;
		}
		if (!applied && zk_rc_definite(rc) && zk_session_usable() &&
			(e != NULL || po->scan != NULL) && pub_naming_conflict(po))
		{
			/* a queue's next read again, then the same multi renamed */
			po->tries++;
			keep = pub_send(po);
			if (!keep)
			{
				if (e != NULL)
				{
					e->delete_inflight = false;
					zk_retry_later(e);
				}
				else
					scan_done_one(po->scan, false, 0);
			}
		}
		else if (!applied && zk_rc_definite(rc) && zk_session_usable() &&
				 (e != NULL || po->scan != NULL) &&
				 skip_done_op(po, e != NULL ? dsa_get_address(zk_dsa(), e->blob) : po->blob,
							  &at))
		{
			/*
			 * an op found its work done: again without it; from the second
			 * time on, after probing the ops behind it ("Ops found done")
			 */
			keep = true;
			if (po->skips++ >= 1 && at + 1 < po->nops)
				(void) pub_probe_start(po, at);
			else
				pub_resend(po, e);
		}
		else if (e != NULL)
		{
			e->delete_inflight = false;
			if (applied)
			{
				if (e->pub_blocked)
					pub_unblock(e);
				q_free_entry(e);
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);
			else if (missing_parent &&
					 (e->errors < 3 ||
					  (e->errors < ZKQ_PARENT_TRIES && !pub_parent_refused(po))))
			{
				e->errors++;
				e->parents_tried = true;
				zk_retry_later(e);
			}
			else if (!zk_session_usable())
				zk_retry_later(e);	/* judged once it is usable again */
			else
				pub_block(e, po, rc);	/* kept, and tried again later */
		}
		else if (po->scan != NULL)
		{
			if (applied && po->blob != NULL)
				given_up_remove(((const ZkTxnHeader *) po->blob)->fxid);
			if (!applied && zk_rc_definite(rc) && zk_session_usable())
				pub_block_resolve(po, rc);
			scan_done_one(po->scan, applied || zk_rc_definite(rc), applied && rc == ZOK ? 1 : 0);
		}
	}
	COMPLETION_END(e);
	if (!keep)
		pubop_free(po);
}

static void
pub_create_done(int rc, const char *value, const void *data);

/* Completion of the zoo_aset sent by pub_create_done() */
static void
pub_set_done(int rc, const struct Stat *stat, const void *data)
{
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_entry_of(data);
		if (e != NULL)
		{
			e->create_inflight = false;
			if (rc == ZOK)
				pub_txn_written(e);
			else
				pub_create_done(rc, NULL, data);
		}
	}
	COMPLETION_END(e);
}

/*
 * A gate node's state before the commit record: its reply comes before the
 * transaction node's (one session answers in order), which then refuses the
 * COMMIT when the node has children (ZooKeeper could never delete it).
 */
static void
pub_check_done(int rc, const struct Stat *stat, const void *data)
{
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_entry_of(data);
		if (e != NULL && rc == ZOK && stat != NULL && stat->numChildren > 0 &&
			!e->pub_refused)
		{
			e->pub_refused = true;
			snprintf(e->errmsg, sizeof(e->errmsg),
					 "The gate node that zk_gate_open would delete has %d %s that zklock did not create (another client's), and ZooKeeper does not delete a node with children",
					 stat->numChildren, stat->numChildren == 1 ? "child" : "children");
		}
	}
	COMPLETION_END(e);
}

/* The transaction node is there: answer the COMMIT that waits for it */
static void
pub_txn_written(ZkEntry *e)
{
	e->state = ZKE_HELD;
	if (e->released)
		qpub_drive(e);
	else if (e->pub_refused)
		zk_finish(e, ZKO_BUSY, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, NULL);
	else
		zk_finish(e, ZKO_GRANTED, 0, NULL);
}

static void
send_txn_create(ZkEntry *e)
{
	char		tpath[ZK_PATH_MAX];
	char	   *blob = dsa_get_address(zk_dsa(), e->blob);
	const ZkTxnHeader *h = (const ZkTxnHeader *) blob;
	int			rc;

	e->pub_refused = false;
	txn_path(h, tpath, sizeof(tpath));
	if (!txns_parent_ok || e->parents_tried)
	{
		char		parent[ZK_PATH_MAX];

		snprintf(parent, sizeof(parent), "%s/txns", zk_root);
		send_ensure_path(parent);
		txns_parent_ok = true;
	}
	/* the queues' parents now, so that the publication finds them */
	{
		const char *p = blob + sizeof(ZkTxnHeader);
		uint32		i;

		for (i = 0; i < h->nitems; i++)
		{
			ZkTxnItem	it;
			char		qname[ZKLOCK_QNAME_MAX + 1];

			memcpy(&it, p, sizeof(it));
			p += sizeof(ZkTxnItem);
			if (ZKQ_IS_OP(it.priority))
			{
				/*
				 * an op's parents are ensured when it is published; a delete
				 * (a gate's opening) is looked at now: a node with children
				 * cannot be deleted, and the COMMIT must fail before its
				 * commit record, not after ("Publications ZooKeeper
				 * refuses")
				 */
				if ((it.priority & ZKQ_OP_MASK) == ZKQ_OP_DELETE &&
					(it.priority & ZKQ_OP_SKIP) == 0)
				{
					char		opath[ZK_PATH_MAX];

					snprintf(opath, sizeof(opath), "%s/%.*s", zk_root, (int) it.qlen, p);
					(void) zoo_aexists(zk_zh, opath, 0, pub_check_done, zk_ctx_of(e));
				}
				p += it.qlen + it.plen;
				continue;
			}
			memcpy(qname, p, it.qlen);
			qname[it.qlen] = '\0';
			p += it.qlen + it.plen;
			if (e->parents_tried || !parents_known(qname))
			{
				char		qpath[ZK_PATH_MAX];

				zk_queue_path(qname, qpath, sizeof(qpath));
				send_ensure_queue(qpath);
				parents_remember(qname, true);
			}
			/* before it is published: does it name its items itself? */
			seq_probe(q_seq(qname));
		}
	}
	e->state = ZKE_CREATING;
	rc = zoo_acreate(zk_zh, tpath, blob, (int) h->total, zk_acl(),
					 ZOO_PERSISTENT, pub_create_done, zk_ctx_of(e));
	if (rc == ZOK)
		e->create_inflight = true;
	else
		(void) zk_send_failed(e, rc, "create");
}

/* Completion of the zoo_acreate sent by send_txn_create() */
static void
pub_create_done(int rc, const char *value, const void *data)
{
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_entry_of(data);
		if (e != NULL)
		{
			e->create_inflight = false;
			if (rc == ZOK)
				pub_txn_written(e);
			else if (rc == ZNODEEXISTS)
			{
				/* ours by name: our first try, or a crashed incarnation's */
				char		tpath[ZK_PATH_MAX];
				char	   *blob = dsa_get_address(zk_dsa(), e->blob);
				const ZkTxnHeader *h = (const ZkTxnHeader *) blob;

				txn_path(h, tpath, sizeof(tpath));
				if (zoo_aset(zk_zh, tpath, blob, (int) h->total, -1,
							 pub_set_done, zk_ctx_of(e)) == ZOK)
					e->create_inflight = true;
				else
					zk_retry_later(e);
			}
			else if (rc == ZNONODE && !e->parents_tried)
			{
				e->parents_tried = true;
				txns_parent_ok = false;
				zk_retry_later(e);
			}
			else if (!zk_rc_definite(rc))
			{
				e->in_doubt = true;
				zk_retry_later(e);
			}
			else
			{
				char		msg[ZKLOCK_ERRMSG_MAX];

				char		tpath[ZK_PATH_MAX];

				snprintf(msg, sizeof(msg), "ZooKeeper refused the transaction's items: %s",
						 zerror(rc));
				txn_path((const ZkTxnHeader *) dsa_get_address(zk_dsa(), e->blob),
						 tpath, sizeof(tpath));
				e->state = ZKE_DONE;
				if (e->released)
					q_free_entry(e);
				else
					zk_fail_rc(e, rc, tpath, ERRCODE_CONNECTION_FAILURE, msg);
			}
		}
	}
	COMPLETION_END(e);
}

/* Completion of the zoo_adelete sent by qpub_drive() */
static void
pub_delete_done(int rc, const void *data)
{
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_entry_of(data);
		if (e != NULL)
		{
			e->delete_inflight = false;
			if (rc == ZOK || rc == ZNONODE)
				q_free_entry(e);
			else
				zk_retry_later(e);
		}
	}
	COMPLETION_END(e);
}

static void
qpub_drive(ZkEntry *e)
{
	if (e->create_inflight || e->delete_inflight)
		return;					/* its completion drives it on */
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	if (e->released)
	{
		char		tpath[ZK_PATH_MAX];
		char	   *blob;
		int			rc;

		if (e->state == ZKE_PENDING && !e->in_doubt)
		{
			q_free_entry(e);	/* nothing was sent */
			return;
		}
		blob = dsa_get_address(zk_dsa(), e->blob);
		txn_path((ZkTxnHeader *) blob, tpath, sizeof(tpath));
		if (e->decision == ZKQD_COMMIT && e->state == ZKE_HELD)
		{
			if (send_publish(blob, tpath, zk_entry_index(e), e->gen, NULL,
							 e->parents_tried))
				e->delete_inflight = true;
			else
				zk_retry_later(e);
			return;
		}
		rc = zoo_adelete(zk_zh, tpath, -1, pub_delete_done, zk_ctx_of(e));
		if (rc == ZOK)
			e->delete_inflight = true;
		else
			zk_retry_later(e);
		return;
	}
	if (e->state == ZKE_HELD)
		return;					/* waits for its owner's decision */
	if (!history_gate(e))
		return;
	send_txn_create(e);
}

/* ------------------------------------------------------------------------
 * Dequeue (ZKK_QCLAIM)
 * ------------------------------------------------------------------------
 */

static int
cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

static char **
copy_children(const struct String_vector *sv, int *n)
{
	MemoryContext old = MemoryContextSwitchTo(q_context());
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
	qsort(out, k, sizeof(char *), cmp_names);
	MemoryContextSwitchTo(old);
	*n = k;
	return out;
}

static void
listing_free(Listing *l)
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

static bool
listing_taken(Listing *l, const char *node)
{
	return l->ntaken > 0 &&
		bsearch(&node, l->taken, l->ntaken, sizeof(char *), cmp_names) != NULL;
}

/* The unclaimed items, in queue order, into cand (if given); their count */
static int
listing_unclaimed(Listing *l, char **cand)
{
	int			i;
	int			n = 0;

	for (i = 0; i < l->nentries; i++)
		if (!listing_taken(l, l->entries[i]))
		{
			if (cand)
				cand[n] = l->entries[i];
			n++;
		}
	return n;
}

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
 * Completion of the zoo_aget_children2 sent by listing_send(); the
 * zoo_awget_children2 sent by listing_send()
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
 * Completion of the zoo_aget_children sent by listing_send(); the
 * zoo_awget_children sent by listing_send()
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
static int
listing_send(Listing *l, const char *qpath, watcher_fn watcher, void *wctx,
			 bool watch_entries, bool watch_taken, bool list_taken)
{
	int			sent = 0;
	int			k;

	/*
	 * Without list_taken, taken counts as empty: the caller knows that every
	 * claim the last listing of taken showed was this cluster's, and those
	 * still held are skipped through QState.held.
	 */
	listing_free(l);
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
			q->twatch = false;
		else
			q->ewatch = false;
		q->again = true;
		q->settled = false;
		q_kick(q);
	}
	COMPLETION_END(none);
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
	if (zk_zh == NULL)
	{
		q->ewatch = q->twatch = false;
		return;
	}
	if (q->ewatch)
	{
		snprintf(buf, sizeof(buf), "%s/entries", q->path);
		(void) zoo_aremove_all_watches(zk_zh, buf, ZWATCHTYPE_CHILD, 0,
									   (void_completion_t *) zk_unwatch_done, NULL);
		q->ewatch = false;
	}
	if (q->twatch)
	{
		snprintf(buf, sizeof(buf), "%s/taken", q->path);
		(void) zoo_aremove_all_watches(zk_zh, buf, ZWATCHTYPE_CHILD, 0,
									   (void_completion_t *) zk_unwatch_done, NULL);
		q->twatch = false;
	}
}

/* q has no waiter: its watches go once it has stayed so for a moment */
static void
q_idle(QState *q)
{
	q->want_twatch = false;
	if (!q->ewatch && !q->twatch)
	{
		if (q->idle_since != 0)
			nidle_watched--;
		q->idle_since = 0;
		return;
	}
	if (q->idle_since == 0)
	{
		q->idle_since = GetCurrentTimestamp();
		nidle_watched++;
	}
}

static void
q_busy(QState *q)
{
	if (q->idle_since != 0)
		nidle_watched--;
	q->idle_since = 0;
}

/* Remove the watches of queues idle for Q_UNWATCH_IDLE_MS */
static void
q_unwatch_idle(void)
{
	HASH_SEQ_STATUS st;
	QState	   *q;
	TimestampTz now;

	if (nidle_watched <= 0 || qstates == NULL)
		return;
	now = GetCurrentTimestamp();
	hash_seq_init(&st, qstates);
	while ((q = hash_seq_search(&st)) != NULL)
	{
		if (q->idle_since == 0)
			continue;
		if (q->waiters != NIL || q->list.pending > 0 || q->inflight > 0)
			continue;			/* q_kick or q_round_done decides */
		if (!TimestampDifferenceExceeds(q->idle_since, now, Q_UNWATCH_IDLE_MS) &&
			(q->ewatch || q->twatch))
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

static bool
q_forgettable(QState *q)
{
	return q->waiters == NIL && q->list.pending == 0 && q->inflight == 0 &&
		!q->verifying && !q->unflushed_wait && !q->ewatch && !q->twatch &&
		q->idle_since == 0 && q->gone == NIL &&
		(q->held == NULL || hash_get_num_entries(q->held) == 0);
}

static void
q_forget(QState *q)
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
	}
	listing_free(&q->list);
	q_rest_free(q);
	if (q->held != NULL)
		hash_destroy(q->held);
	(void) hash_search(qstates, q->name, HASH_REMOVE, NULL);
}

static void
q_forget_idle(void)
{
	static TimestampTz last_sweep = 0;
	TimestampTz now = GetCurrentTimestamp();
	HASH_SEQ_STATUS st;

	if (!TimestampDifferenceExceeds(last_sweep, now, Q_FORGET_SWEEP_MS))
		return;
	last_sweep = now;
	if (qstates != NULL)
	{
		QState	   *q;

		hash_seq_init(&st, qstates);
		while ((q = hash_seq_search(&st)) != NULL)
		{
			if (!q_forgettable(q))
				q->quiet = false;
			else if (!q->quiet)
				q->quiet = true;
			else
				q_forget(q);
		}
	}
	if (qseqs != NULL)
	{
		QSeq	   *qs;

		hash_seq_init(&st, qseqs);
		while ((qs = hash_seq_search(&st)) != NULL)
		{
			if (qs->refs > 0 || qs->seq_fetching ||
				(qs->seq_probed && !qs->seq_answered))
				qs->quiet = false;
			else if (!qs->quiet)
				qs->quiet = true;
			else
				(void) hash_search(qseqs, qs->name, HASH_REMOVE, NULL);
		}
	}
	q_tracked_update();
}

static ZkEntry *
waiter_entry(Waiter *w)
{
	ZkEntry    *e = zk_entry(w->idx);

	if (e->gen != w->gen || e->state == ZKE_FREE)
		return NULL;
	return e;
}

static bool
has_blocking_waiter(QState *q)
{
	ListCell   *lc;

	foreach(lc, q->waiters)
	{
		ZkEntry    *e = waiter_entry((Waiter *) lfirst(lc));

		if (e && !e->released && !e->try_only)
			return true;
	}
	return false;
}

static void q_listing_done(QState *q);

static void
q_listed(Listing *l)
{
	QState	   *q = (QState *) l->owner;

	if (l->rc_entries != ZOK)
		q->ewatch = false;
	if (l->rc_taken != ZOK)
		q->twatch = false;
	q_listing_done(q);
}

/* Put the first waiting entry of q on the retry list: q is kicked again */
static void
q_retry(QState *q)
{
	ListCell   *lc;

	foreach(lc, q->waiters)
	{
		ZkEntry    *e = waiter_entry((Waiter *) lfirst(lc));

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
	MemoryContext old = MemoryContextSwitchTo(q_context());

	foreach(lc, q->waiters)
	{
		Waiter	   *w = (Waiter *) lfirst(lc);
		ZkEntry    *e = waiter_entry(w);

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
		ZkEntry    *e = waiter_entry(w);

		pfree(w);
		if (e != NULL)
		{
			e->state = ZKE_DONE;
			qclaim_drive(e);
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

static void q_kick(QState *q);

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

/* Completion of the zoo_aexists sent by q_kick() */
static void
q_verified(int rc, const struct Stat *stat, const void *data)
{
	QState	   *volatile q = (QState *) data;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		q->verifying = false;
		if (rc == ZOK && stat != NULL && q->rest_exact && q->list.cv_ok &&
			stat->czxid == q->list.czxid &&
			stat->cversion == (int32) ((uint32) q->list.cversion +
									   (uint32) (q->own_edeletes - q->list.own_base)))
		{
			q->verified = true;
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
		q_kick(q);
	}
	COMPLETION_END(none);
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
	List	   *keep = NIL;
	ListCell   *lc;
	char		state[256];
	Waiter	   *first = q->waiters != NIL ? (Waiter *) linitial(q->waiters) : NULL;
	ZkEntry    *fe = first ? waiter_entry(first) : NULL;
	MemoryContext old;

	snprintf(state, sizeof(state),
			 "%d waiters (the first %s%s), %d candidates, %d left, settled %d, again %d, lost race %d, flushing %d",
			 list_length(q->waiters),
			 fe == NULL ? "gone" : fe->try_only ? "a try" : "a wait",
			 fe != NULL && fe->wal_unflushed ? " still flushing" : "",
			 q->ncand, q->nrest, q->settled, q->again, q->lost_race,
			 q->unflushed_wait);
	zk_no_progress_report("queue", zk_log_name(q->name), state);
	old = MemoryContextSwitchTo(q_context());
	foreach(lc, q->waiters)
	{
		Waiter	   *w = (Waiter *) lfirst(lc);
		ZkEntry    *e = waiter_entry(w);
		int			held;
		int			doubt;

		if (e == NULL)
		{
			pfree(w);
			continue;
		}
		count_slots(e, &held, &doubt);
		if (!e->released && held == 0 && doubt == 0 && e->outstanding == 0)
		{
			e->state = ZKE_DONE;
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
	if (q->unflushed_wait)
		nunflushed_wait--;
	q->unflushed_wait = false;
	q->settled = false;
	q->rest_exact = false;
	q->again = false;
	q->ncand = 0;
	q_rest_free(q);
}

static void
q_kick(QState *q)
{
	bool		blocking;
	bool		want_e;
	bool		want_t;
	bool		list_taken;
	int			sent;

	q->quiet = false;
	if (q->list.pending > 0 || q->inflight > 0 || q->verifying)
	{
		q->again = true;
		return;
	}
	q_prune(q);
	if (q->waiters == NIL)
	{
		q_idle(q);
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
	if (((q->settled && q->ewatch) || q->verified) && !q->again && !q->lost_race &&
		q->parents_ok && !q->unflushed_wait)
	{
		/* nothing changed since the last listing: what it left will do */
		char	  **cand;
		int			n;

		q_rest_compact(q);
		cand = q->rest;
		n = q->nrest;

		q->verified = false;
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
			q_round_done(q);
		return;
	}
	q->verified = false;
	if (q->unflushed_wait && q->rest_exact && q->nrest >= ZKQ_VERIFY_MIN &&
		!q->lost_race)
	{
		/* a long queue: q_resume_unflushed goes on with what is left */
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
			q->verifying = true;
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
		send_ensure_queue(q->path);
	want_e = blocking && !q->ewatch && q->ncand == 0;
	want_t = blocking && q->want_twatch && !q->twatch;
	if (want_t)
		list_taken = true;
	q->list.done = q_listed;
	q->list.owner = q;
	q->list.own_counter = &q->own_edeletes;
	q->rest_exact = false;
	sent = listing_send(&q->list, q->path, q_watcher, q, want_e, want_t, list_taken);
	if (sent == 0)
	{
		q_retry(q);
		return;
	}
	if (want_e && (sent & 1))
		q->ewatch = true;
	if (want_t && (sent & 2))
		q->twatch = true;
}

static void claim_multi_done(int rc, const void *data);
static void claim_get_done(int rc, const char *value, int value_len,
						   const struct Stat *stat, const void *data);
static dsa_pointer store_msg(const char *node, const char *value, int value_len,
							 const struct Stat *stat);

static int
free_slot(ZkEntry *e)
{
	ZkClaimRec *c = claims_of(e);
	int			i;

	for (i = 0; i < e->max_items; i++)
		if (c[i].status == ZKQC_FREE && c[i].node[0] == '\0')
			return i;
	return -1;
}

static void
slot_set(ZkEntry *e, int slot, const char *node, uint8 status)
{
	ZkClaimRec *c = claims_of(e);

	strlcpy(c[slot].node, node, sizeof(c[slot].node));
	c[slot].status = status;
}

static void
slot_clear(ZkEntry *e, int slot)
{
	ZkClaimRec *c = claims_of(e);

	if (DsaPointerIsValid(c[slot].msg))
		dsa_free(zk_dsa(), c[slot].msg);
	c[slot].msg = InvalidDsaPointer;
	c[slot].has_item = false;
	c[slot].node[0] = '\0';
	c[slot].status = ZKQC_FREE;
}

static bool
send_attempt(QState *q, ZkEntry *e, int slot, const char *node)
{
	MemoryContext old = MemoryContextSwitchTo(q_context());
	Attempt    *a = palloc0(sizeof(Attempt));
	int			rc;

	MemoryContextSwitchTo(old);
	a->q = q;
	a->idx = zk_entry_index(e);
	a->gen = e->gen;
	a->slot = slot;
	strlcpy(a->node, node, sizeof(a->node));
	snprintf(a->epath, sizeof(a->epath), "%s/entries/%s", q->path, node);
	snprintf(a->tpath, sizeof(a->tpath), "%s/taken/%s", q->path, node);
	zk_claim_sign(a->tpath, e->data, a->data, sizeof(a->data));
	zoo_check_op_init(&a->ops[0], a->epath, -1);
	zoo_create_op_init(&a->ops[1], a->tpath, a->data, (int) strlen(a->data),
					   zk_acl(), ZOO_PERSISTENT, NULL, 0);
	/* recorded as in doubt until the answer says otherwise */
	slot_set(e, slot, node, ZKQC_DOUBT);
	rc = zoo_amulti(zk_zh, 2, a->ops, a->res, claim_multi_done, a);
	if (rc != ZOK)
	{
		slot_clear(e, slot);
		pfree(a);
		return false;
	}
	e->outstanding++;
	q->inflight++;
	rc = zoo_aget(zk_zh, a->epath, 0, claim_get_done, a);
	if (rc != ZOK)
		a->multi_doubt = true;	/* no get follows: the multi's reply frees a */
	return true;
}

/*
 * How much one dequeue claims.  Each claim's read brings an item of up to
 * ZooKeeper's 1 MB into the client library's buffers and then into the
 * dsa, so 1000 items asked for at once could put a gigabyte in front of the
 * session's pings and in shared memory.  Like a peek, a dequeue keeps at
 * most ZKQ_CLAIM_INFLIGHT_BYTES of items in flight, judged by the largest
 * it has read so far (until its first read answers, as many attempts as
 * its cap holds of items of ZooKeeper's default limit of 1 MB, at most
 * ZKQ_CLAIM_FIRST_WINDOW), and it stops claiming once the payloads it
 * holds, with those in flight, would pass its owner's
 * zklock.max_answer_bytes: it is granted
 * fewer items than it asked for, at least one.  Small items are not slowed
 * down: after the first answer the window takes every item the listing
 * offers at once.
 *
 * A waiter whose window is full when the round hands out candidates keeps
 * the round (q->pipe_open): the waiters behind it wait for the next one,
 * and each read that answers tops its window up from the head of q->rest
 * (claim_top_up), so its items stay in queue order.
 */
#define ZKQ_CLAIM_INFLIGHT_BYTES	(4 * 1024 * 1024)
#define ZKQ_CLAIM_FIRST_WINDOW		4
#define ZKQ_ITEM_ASSUMED_BYTES		(1024 * 1024)	/* ZooKeeper's default
													 * jute.maxbuffer: the
													 * largest item, until
													 * one is read */

typedef enum ClaimWindow
{
	CLAIM_SEND,					/* one more attempt may go */
	CLAIM_FULL,					/* not before reads in flight answer */
	CLAIM_DONE					/* the cap is reached, or the dsa is full */
} ClaimWindow;

static ClaimWindow
claim_window(ZkEntry *e)
{
	uint64		cap = e->answer_cap > 0 ? e->answer_cap : (uint64) 16 * 1024 * 1024;
	uint64		inflight = (uint64) Max(e->outstanding, 0);
	uint64		next;

	if (e->claim_refused)
		return CLAIM_DONE;
	if (inflight == 0 && e->claim_bytes == 0)
		return CLAIM_SEND;		/* at least one item, whatever its size */
	if (e->claim_largest == 0)
	{
		/*
		 * No size known yet: as many as the cap holds of the largest items
		 * ZooKeeper stores by default (2 under a cap of 2 MB), at most
		 * ZKQ_CLAIM_FIRST_WINDOW; the first always goes (above).
		 */
		uint64		first = Min((uint64) ZKQ_CLAIM_FIRST_WINDOW,
								Max(cap / ZKQ_ITEM_ASSUMED_BYTES, 1));

		return inflight < first ? CLAIM_SEND : CLAIM_FULL;
	}
	next = (inflight + 1) * e->claim_largest;
	if (e->claim_bytes + next > cap)
		return inflight > 0 ? CLAIM_FULL : CLAIM_DONE;
	if (inflight > 0 && next > ZKQ_CLAIM_INFLIGHT_BYTES)
		return CLAIM_FULL;
	return CLAIM_SEND;
}

/* Compact q->rest once the open window's top-ups are over */
static void
q_rest_compact(QState *q)
{
	if (q->rest_head <= 0)
		return;
	if (q->nrest > q->rest_head)
		memmove(q->rest, q->rest + q->rest_head,
				sizeof(char *) * (q->nrest - q->rest_head));
	q->nrest -= q->rest_head;
	q->rest_head = 0;
}

/* A read of the open window answered: send what its window now allows */
static void
claim_top_up(QState *q)
{
	ZkEntry    *e;
	int			slot;

	if (!q->pipe_open)
		return;
	e = zk_entry(q->pipe_idx);
	if (e->gen != q->pipe_gen || e->state == ZKE_FREE || e->released ||
		e->withdrawn || !zk_session_usable())
	{
		q->pipe_open = false;
		return;
	}
	while (q->rest_head < q->nrest && (slot = free_slot(e)) >= 0)
	{
		ClaimWindow w = claim_window(e);

		if (w == CLAIM_FULL)
			return;				/* more once the next read answers */
		if (w == CLAIM_DONE || !send_attempt(q, e, slot, q->rest[q->rest_head]))
			break;
		pfree(q->rest[q->rest_head]);
		q->rest[q->rest_head++] = NULL;
	}
	q->pipe_open = false;
}

static void give_back_done(int rc, const void *data);

/* A claim whose payload found no room: the delete that gives it back */
typedef struct GiveBack
{
	uint32		idx;
	uint32		gen;
	int			slot;
	char		tpath[ZK_PATH_MAX];
} GiveBack;

/*
 * Our claim (tpath) on the item in e's slot was read: keep the payload for
 * the owner.  When the dsa has no room for it (zklock.max_payload_memory),
 * give the item back at once: delete the claim, so that it is free again
 * for everyone, and claim no more for this dequeue, which is granted what
 * it holds or fails with 53200.  An owner that let go already needs no
 * payload: its claim is released (or, verified at the end, consumed) as it
 * is.
 */
static void
claim_read(ZkEntry *e, int slot, const char *tpath, const char *value, int value_len,
		   const struct Stat *stat)
{
	ZkClaimRec *c = claims_of(e);
	uint32		rec = sizeof(ZkMsgRec) + Max(value_len, 0);
	GiveBack   *g;

	c[slot].status = ZKQC_HELD;
	c[slot].has_item = true;
	if (e->released || e->state == ZKE_HELD || DsaPointerIsValid(c[slot].msg))
		return;
	e->claim_largest = Max(e->claim_largest, rec);
	c[slot].msg = store_msg(c[slot].node, value, value_len, stat);
	if (DsaPointerIsValid(c[slot].msg))
	{
		e->claim_bytes += rec;
		return;
	}
	e->claim_refused = true;
	c[slot].has_item = false;
	g = MemoryContextAllocZero(q_context(), sizeof(GiveBack));
	g->idx = zk_entry_index(e);
	g->gen = e->gen;
	g->slot = slot;
	strlcpy(g->tpath, tpath, sizeof(g->tpath));
	if (zoo_adelete(zk_zh, g->tpath, -1, give_back_done, g) != ZOK)
	{
		/* ours or not once the session is back: read again then */
		pfree(g);
		c[slot].status = ZKQC_DOUBT;
		return;
	}
	c[slot].status = ZKQC_RETURN;
	e->outstanding++;
}

static bool
q_is_waiter(QState *q, ZkEntry *e)
{
	ListCell   *lc;

	foreach(lc, q->waiters)
	{
		Waiter	   *w = (Waiter *) lfirst(lc);

		if (w->idx == zk_entry_index(e) && w->gen == e->gen)
			return true;
	}
	return false;
}

/* Completion of the zoo_adelete sent by claim_read() */
static void
give_back_done(int rc, const void *data)
{
	GiveBack   *g = (GiveBack *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		ZkEntry    *pe = zk_entry(g->idx);
		QState	   *q = NULL;

		if (pe->gen == g->gen && pe->state != ZKE_FREE)
			e = pe;
		if (e != NULL)
			q = q_state(e->name, false);
		if (e != NULL && DsaPointerIsValid(e->claims) &&
			claims_of(e)[g->slot].status == ZKQC_RETURN)
		{
			if (rc == ZOK || rc == ZNONODE)
			{
				/* free again, for this cluster's waiters too */
				slot_clear(e, g->slot);
				if (q != NULL)
				{
					q->settled = false;
					q->rest_exact = false;
					q->again = true;
				}
			}
			else if (zk_rc_definite(rc))
				claims_of(e)[g->slot].status = ZKQC_HELD;	/* released with
															 * the claim */
			else
				claims_of(e)[g->slot].status = ZKQC_DOUBT;	/* read it again */
		}
		if (e != NULL && e->outstanding > 0 && --e->outstanding == 0 &&
			(q == NULL || !q_is_waiter(q, e)))
			qclaim_drive(e);	/* a round it is in decides at its end */
		if (q != NULL && q->waiters != NIL && q->list.pending == 0 && q->inflight == 0)
			q_kick(q);
	}
	COMPLETION_END(e);
	pfree(g);
}

/* Why a dequeue that holds nothing fails: 53200 */
static void
claim_fail_refused(ZkEntry *e)
{
	char		msg[ZKLOCK_ERRMSG_MAX];

	snprintf(msg, sizeof(msg),
			 "the first item it claimed did not fit in the shared memory zklock keeps payloads in (zklock.max_payload_memory is %d kB) and was given back to the queue",
			 zk_max_payload_kb);
	e->state = ZKE_DONE;
	zk_fail(e, ERRCODE_OUT_OF_MEMORY, msg);
}

static void q_round_done(QState *q);

static void
attempt_finish(Attempt *a)
{
	QState	   *q = a->q;
	ZkEntry    *e = zk_entry(a->idx);

	if (e->gen == a->gen && e->state != ZKE_FREE)
		e->outstanding--;
	q->inflight--;
	pfree(a);
	claim_top_up(q);
	if (q->inflight == 0 && q->list.pending == 0)
		q_round_done(q);
}

/* Completion of the zoo_amulti sent by send_attempt() */
static void
claim_multi_done(int rc, const void *data)
{
	Attempt    *a = (Attempt *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		ZkEntry    *pe = zk_entry(a->idx);

		if (pe->gen == a->gen && pe->state != ZKE_FREE)
			e = pe;
		if (rc == ZOK)
			a->multi_ok = true;
		else if (zk_rc_definite(rc))
		{
			/* taken by someone else, or gone: not ours */
			a->q->lost_race = true;
			a->q->settled = false;
			a->q->rest_exact = false;
			if (e != NULL)
				slot_clear(e, a->slot);
			/* not a race: refused for want of permission, at every try */
			if (e != NULL && rc == ZNOAUTH)
				zk_fail_noauth(e, a->tpath);
		}
		else
		{
			a->q->settled = false;	/* in doubt: the slot says so */
			a->q->rest_exact = false;
		}
		if (a->multi_doubt)
		{
			/* no get was sent */
			a->multi_doubt = false;
			attempt_finish(a);
		}
	}
	COMPLETION_END(e);
}

static dsa_pointer
store_msg(const char *node, const char *value, int value_len, const struct Stat *stat)
{
	dsa_area   *area = zk_dsa();
	Size		len = value_len > 0 ? value_len : 0;
	dsa_pointer dp = dsa_allocate_extended(area, sizeof(ZkMsgRec) + len, DSA_ALLOC_NO_OOM);
	ZkMsgRec   *m;
	int			prio = 0;

	if (!DsaPointerIsValid(dp))
		return dp;
	m = dsa_get_address(area, dp);
	m->czxid = zk_queue_msg_id(stat->czxid, node);
	m->ctime_ms = stat->ctime;
	(void) zk_queue_node_priority(node, &prio);
	m->priority = prio;
	m->len = (uint32) len;
	strlcpy(m->node, node, sizeof(m->node));
	if (len > 0)
		memcpy((char *) m + sizeof(ZkMsgRec), value, len);
	return dp;
}

/* Completion of the zoo_aget sent by send_attempt() */
static void
claim_get_done(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	Attempt    *a = (Attempt *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		ZkEntry    *pe = zk_entry(a->idx);

		if (pe->gen == a->gen && pe->state != ZKE_FREE)
			e = pe;
		if (e != NULL && a->multi_ok && rc == ZOK)
			claim_read(e, a->slot, a->tpath, value, value_len, stat);
		/* else ours, but unread: in doubt, sorted out on the retry */
		attempt_finish(a);
	}
	COMPLETION_END(e);
}

/*
 * Keep the items e claimed in its queue's set of this cluster's held
 * claims while its owner holds them (held), or take them out once it has
 * let go: its end is then sent ahead of any new listing.  A listing skips
 * them without listing taken for them (q_kick).  Only a hint: a claim it
 * misses (say, of a previous worker) makes an attempt fail, which lists
 * taken again.
 */
typedef struct HeldNode
{
	char		node[ZKQ_NODE_MAX];
	int			count;
} HeldNode;

static void
q_count_held(ZkEntry *e, bool held)
{
	QState	   *q;
	ZkClaimRec *c;
	int			i;

	if (e->qcounted == held)
		return;
	e->qcounted = held;
	q = q_state(e->name, false);
	if (q == NULL || !DsaPointerIsValid(e->claims))
		return;
	if (!held && e->decision != ZKQD_COMMIT)
	{
		/* its items may come back: the next round lists again */
		q->settled = false;
		q->rest_exact = false;
		q->again = true;
	}
	if (q->held == NULL)
	{
		HASHCTL		ctl;

		if (!held)
			return;
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = ZKQ_NODE_MAX;
		ctl.entrysize = sizeof(HeldNode);
		ctl.hcxt = q_context();
		q->held = hash_create("zklock held claims", 16, &ctl,
							  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	c = claims_of(e);
	for (i = 0; i < e->max_items; i++)
	{
		char		key[ZKQ_NODE_MAX];
		HeldNode   *h;
		bool		found;

		/* in: what the grant hands over; out: whatever names an item */
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
				MemoryContext old = MemoryContextSwitchTo(q_context());

				q->gone = lappend(q->gone, pstrdup(key));
				MemoryContextSwitchTo(old);
			}
			if (--h->count <= 0)
				(void) hash_search(q->held, key, HASH_REMOVE, NULL);
		}
	}
}

static bool
str_in_list(List *l, const char *str)
{
	ListCell   *lc;

	foreach(lc, l)
		if (strcmp((const char *) lfirst(lc), str) == 0)
			return true;
	return false;
}

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
static void
grant(ZkEntry *e)
{
	ZkClaimRec *c = claims_of(e);
	int			i;
	int			n = 0;

	for (i = 0; i < e->max_items; i++)
		if (c[i].status == ZKQC_HELD)
			n++;
	e->nclaims = n;
	e->state = ZKE_HELD;
	q_count_held(e, true);
	zk_finish(e, ZKO_GRANTED, 0, NULL);
}

static void
count_slots(ZkEntry *e, int *held, int *doubt)
{
	ZkClaimRec *c = claims_of(e);
	int			i;

	*held = *doubt = 0;
	for (i = 0; i < e->max_items; i++)
	{
		if (c[i].status == ZKQC_HELD)
			(*held)++;
		else if (c[i].status == ZKQC_DOUBT || c[i].status == ZKQC_RETURN)
			(*doubt)++;			/* unresolved: not granted meanwhile */
	}
}

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
		if (++q->loops > 3)
		{
			q->loops = 0;
			q->ncand = 0;
			listing_free(&q->list);
			q_round_done(q);
			return;
		}
		q->again = true;
		q_round_done(q);
		return;
	}
	if (q->list.rc_entries != ZOK || q->list.rc_taken != ZOK)
	{
		q->ncand = 0;
		q_retry(q);
		return;
	}
	q->parents_ok = true;
	q->loops = 0;
	q_prune(q);

	/* candidates: entries nobody has claimed, in queue order */
	cand = palloc(sizeof(char *) * Max(q->list.nentries, 1));
	cand_total = listing_unclaimed(&q->list, cand);
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
			if (listing_taken(&q->list, q->list.entries[i]) &&
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
		(q->claimed_others == 0 || q->twatch);
	/* "A long queue": exact but for changes entries' version shows */
	q->rest_exact = q->list.cv_ok && !had_gone && !q->lost_race &&
		q->claimed_others == 0 && q->taken_others == 0;
	sent = q_distribute(q, cand, cand_total, false);
	pfree(cand);
	if (sent == 0 && q->inflight == 0)
		q_round_done(q);
}

/*
 * Hand the candidates to the waiters, in arrival order, each as many as it
 * wants; the number of claim attempts sent.  A waiter whose transaction's
 * WAL record is still being flushed stops the round (arrival order holds):
 * what is left is kept, and q_resume_unflushed goes on with it once the
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
		ZkEntry    *e = waiter_entry(w);
		int			slot;

		if (next >= cand_total)
			break;
		if (e == NULL || e->released || e->withdrawn)
			continue;
		if (e->wal_unflushed)
		{
			if (!q->unflushed_wait)
				nunflushed_wait++;
			q->unflushed_wait = true;
			break;
		}
		while (next < cand_total && (slot = free_slot(e)) >= 0)
		{
			ClaimWindow cw = claim_window(e);

			if (cw == CLAIM_FULL)
			{
				/* it takes more as its reads answer, before anyone behind */
				q->pipe_open = q->pipe_round = true;
				q->pipe_idx = w->idx;
				q->pipe_gen = w->gen;
				break;
			}
			if (cw == CLAIM_DONE || !send_attempt(q, e, slot, cand[next]))
				break;
			next++;
			sent++;
		}
		if (q->pipe_open)
			break;
	}
	/*
	 * What is left: for the next waiters, or after the one still flushing.
	 * cand is owned (q->rest handed over, names and array palloc'd in
	 * q_context()): its names move over, the rest are freed, not copied --
	 * a long queue's rest is tens of thousands of names.
	 */
	{
		MemoryContext old = MemoryContextSwitchTo(q_context());
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
		q_rest_free(q);			/* cand is never q->rest itself */
		q->rest = left;
		q->nrest = n;
	}
	return sent;
}

static void
q_rest_free(QState *q)
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
static void
q_resume_unflushed(void)
{
	HASH_SEQ_STATUS st;
	QState	   *q;

	if (nunflushed_wait <= 0 || qstates == NULL)
		return;
	hash_seq_init(&st, qstates);
	while ((q = hash_seq_search(&st)) != NULL)
	{
		ListCell   *lc;
		bool		still = false;

		if (!q->unflushed_wait || q->list.pending > 0 || q->inflight > 0)
			continue;
		q_prune(q);
		foreach(lc, q->waiters)
		{
			ZkEntry    *e = waiter_entry((Waiter *) lfirst(lc));

			if (e != NULL && !e->released && e->wal_unflushed)
			{
				still = true;
				break;
			}
		}
		if (still)
			continue;
		q->unflushed_wait = false;
		nunflushed_wait--;
		if (!zk_session_usable() || q->waiters == NIL)
		{
			q_rest_free(q);
			q_kick(q);
			continue;
		}
		q_rest_compact(q);
		{
			char	  **cand = q->rest;
			int			n = q->nrest;
			int			sent;

			q->rest = NULL;
			q->nrest = 0;
			sent = q_distribute(q, cand, n, true);
			if (sent == 0 && q->inflight == 0)
				q_round_done(q);
		}
	}
}

/*
 * Every answer of a round is in: grant the waiters that got something,
 * decide what the others wait for.
 */
static void
q_round_done(QState *q)
{
	List	   *keep = NIL;
	List	   *doubtful = NIL;
	ListCell   *lc;
	bool		blocking = false;
	bool		pipe_round = q->pipe_round;
	bool		behind = false;
	bool		served_later = false;
	MemoryContext old;

	q->pipe_open = q->pipe_round = false;
	q_rest_compact(q);
	q_prune(q);
	old = MemoryContextSwitchTo(q_context());
	foreach(lc, q->waiters)
	{
		Waiter	   *w = (Waiter *) lfirst(lc);
		ZkEntry    *e = waiter_entry(w);
		int			held;
		int			doubt;

		if (e == NULL)
		{
			pfree(w);
			continue;
		}
		if (behind)
		{
			/* behind an open window: offered nothing yet, served next */
			keep = lappend(keep, w);
			served_later = true;
			continue;
		}
		if (pipe_round && w->idx == q->pipe_idx && w->gen == q->pipe_gen)
			behind = true;
		count_slots(e, &held, &doubt);
		if (doubt > 0)
		{
			/* sorted out on the retry, then back in the queue */
			doubtful = lappend(doubtful, e);
			pfree(w);
		}
		else if (held > 0)
		{
			grant(e);
			pfree(w);
		}
		else if (e->claim_refused && !e->released)
		{
			claim_fail_refused(e);
			pfree(w);
		}
		else if (e->try_only && w->joined != q->rounds &&
				 (q->ncand == 0 || (!e->wal_unflushed && ++w->tries >= 3)))
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
		q_idle(q);
		q->ncand = 0;
		return;
	}
	if (q->unflushed_wait)
		return;					/* q_resume_unflushed goes on */
	if (served_later || q->again || q->lost_race || (q->settled && q->nrest > 0))
	{
		q_kick(q);
		return;
	}
	if (!blocking)
	{
		/* only try-only waiters left after a lost race: list again */
		q_kick(q);
		return;
	}
	/*
	 * Nothing to take: wait for the watches that tell us of a change.  Items
	 * claimed by others when we listed come back only through a change of
	 * taken; items claimed here need no watch (a release here kicks the
	 * queue itself, a consume deletes the entry).  Watching taken for our
	 * own claims would list the queue again at each of them.
	 */
	if (q->claimed_others > 0 && !q->twatch)
	{
		q->want_twatch = true;
		q->ncand = 0;
		q_kick(q);
		return;
	}
	if (!q->ewatch || !q->settled)
	{
		/* no watch, or the last listing may not show everything: list */
		q->ncand = 0;
		q_kick(q);
		return;
	}
	/* watches set, nothing missed: the watcher kicks us */
}

/* ---- sorting out claims in doubt ---- */

typedef struct DoubtCheck
{
	uint32		idx;
	uint32		gen;
	int			slot;
	int			pending;		/* replies still to come (1 or 2) */
	bool		ours;
	char		epath[ZK_PATH_MAX];
	char		tpath[ZK_PATH_MAX];
} DoubtCheck;

static void
doubt_entry_done(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data);

static void
doubt_check_finish(DoubtCheck *d, ZkEntry *e)
{
	if (--d->pending > 0)
		return;
	pfree(d);
	if (e != NULL && --e->outstanding == 0)
		qclaim_drive(e);
}

/* Completion of the zoo_aget sent by send_doubt_checks() */
static void
doubt_claim_done(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data)
{
	DoubtCheck *d = (DoubtCheck *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		ZkEntry    *pe = zk_entry(d->idx);

		if (pe->gen == d->gen && pe->state != ZKE_FREE)
			e = pe;
		if (e != NULL)
		{
			char		tok[64];
			char		their[64];

			/* our request's token, signed for this very node */
			claim_token_of(e, tok, sizeof(tok));
			if (rc == ZOK && value != NULL &&
				zk_json_field(value, value_len, "claim", their, sizeof(their)) &&
				tok[0] != '\0' && strcmp(tok, their) == 0 &&
				zk_claim_verify(d->tpath, value, value_len) == ZKM_VERIFIED)
			{
				d->ours = true;
				if (d->pending == 1)
				{
					/* no read of the item went with it: held, unread */
					claims_of(e)[d->slot].status = ZKQC_HELD;
				}
			}
			else if (rc == ZOK || rc == ZNONODE)
				slot_clear(e, d->slot); /* not ours */
			/* else: still in doubt */
		}
		doubt_check_finish(d, e);
	}
	COMPLETION_END(e);
}

/* Completion of the zoo_aget sent by send_doubt_checks() */
static void
doubt_entry_done(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data)
{
	DoubtCheck *d = (DoubtCheck *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		ZkEntry    *pe = zk_entry(d->idx);

		if (pe->gen == d->gen && pe->state != ZKE_FREE)
			e = pe;
		if (e != NULL && d->ours)
		{
			ZkClaimRec *c = claims_of(e);

			if (rc == ZOK)
				claim_read(e, d->slot, d->tpath, value, value_len, stat);
			else if (rc == ZNONODE)
			{
				/*
				 * Our claim on an item that is gone: held without an item,
				 * so that letting go deletes the claim alone.
				 */
				if (DsaPointerIsValid(c[d->slot].msg))
					dsa_free(zk_dsa(), c[d->slot].msg);
				c[d->slot].msg = InvalidDsaPointer;
				c[d->slot].has_item = false;
				c[d->slot].status = ZKQC_HELD;
			}
			/* else: still in doubt */
		}
		doubt_check_finish(d, e);
	}
	COMPLETION_END(e);
}

/* Send the reads that decide every claim in doubt; true when some went */
static bool
send_doubt_checks(ZkEntry *e, QState *q)
{
	ZkClaimRec *c = claims_of(e);
	int			i;
	bool		sent = false;

	for (i = 0; i < e->max_items; i++)
	{
		DoubtCheck *d;

		if (c[i].status != ZKQC_DOUBT)
			continue;
		d = MemoryContextAllocZero(q_context(), sizeof(DoubtCheck));
		d->idx = zk_entry_index(e);
		d->gen = e->gen;
		d->slot = i;
		snprintf(d->tpath, sizeof(d->tpath), "%s/taken/%s", q->path, c[i].node);
		snprintf(d->epath, sizeof(d->epath), "%s/entries/%s", q->path, c[i].node);
		if (zoo_aget(zk_zh, d->tpath, 0, doubt_claim_done, d) != ZOK)
		{
			pfree(d);
			break;
		}
		d->pending = 1;
		e->outstanding++;
		/* the item's read goes with it; used only if the claim is ours */
		if (zoo_aget(zk_zh, d->epath, 0, doubt_entry_done, d) == ZOK)
			d->pending = 2;
		sent = true;
	}
	return sent;
}

/* ---- letting go: consume at commit, release otherwise ---- */

typedef struct EndOp
{
	uint32		idx;
	uint32		gen;
	int			nops;
	int			nentries;		/* of which deletes of entries */
	bool		verify;
	zoo_op_t   *ops;
	zoo_op_result_t *res;
	char	  **paths;
} EndOp;

static void end_done(int rc, const void *data);

static void
endop_free(EndOp *eo)
{
	int			i;

	for (i = 0; i < eo->nops; i++)
		pfree(eo->paths[i]);
	pfree(eo->paths);
	pfree(eo->ops);
	pfree(eo->res);
	pfree(eo);
}

/*
 * One multi: delete the claims (and, at commit, their items).  After a
 * first try whose fate is unknown, each claim is read first and deleted
 * only while it is still ours (verify): the first try may have landed and
 * the item been claimed again by someone else.
 */
static void
send_end(ZkEntry *e, QState *q)
{
	ZkClaimRec *c = claims_of(e);
	bool		consume = (e->decision == ZKQD_COMMIT);
	MemoryContext old;
	EndOp	   *eo;
	int			i;
	int			n = 0;
	int			rc;

	for (i = 0; i < e->max_items; i++)
		if (c[i].status == ZKQC_HELD)
			n += (consume && c[i].has_item) ? 2 : 1;
	if (n == 0)
	{
		q_free_entry(e);
		return;
	}
	/*
	 * After a session expired, only once this run is registered again: a
	 * server that took the run over meanwhile released these claims, and
	 * the nodes may be another consumer's claims of the same items by now.
	 */
	if (!zk_history_ready())
	{
		if (!zk_history_fenced() || !zk_session_usable())
		{
			zk_retry_later(e);
			return;
		}

		/*
		 * Fenced: the server that took this run over (a copy) settles only
		 * the claims its own WAL shows committed and leaves the others, so
		 * this server, whose WAL is the run's history, ends its claims
		 * itself: each one read first (once) and deleted only if still
		 * ours.
		 */
		if (!e->fence_checked)
		{
			e->fence_checked = true;
			e->in_doubt = true;
		}
	}
	if (e->in_doubt)
	{
		/* verify each claim: read it, delete only if still ours */
		for (i = 0; i < e->max_items; i++)
			if (c[i].status == ZKQC_HELD)
				c[i].status = ZKQC_DOUBT;
		e->in_doubt = false;
		(void) send_doubt_checks(e, q);
		return;
	}
	/*
	 * One multi per chunk of claims, each well under ZooKeeper's packet
	 * limit (jute.maxbuffer): every claim stands alone, so the chunks need
	 * not be atomic together.
	 */
	e->delete_inflight = true;
	e->state = ZKE_DELETING;
	i = 0;
	while (i < e->max_items)
	{
		int			first = i;
		int			nops = 0;
		Size		bytes = 0;
		int			k;

		for (; i < e->max_items; i++)
		{
			Size		one;

			if (c[i].status != ZKQC_HELD)
				continue;
			one = 2 * (strlen(q->path) + ZKQ_NODE_MAX + 32);
			if (nops > 0 && bytes + one > ZKQ_MULTI_BUDGET)
				break;
			bytes += one;
			nops += (consume && c[i].has_item) ? 2 : 1;
		}
		if (nops == 0)
			break;
		old = MemoryContextSwitchTo(q_context());
		eo = palloc0(sizeof(EndOp));
		eo->idx = zk_entry_index(e);
		eo->gen = e->gen;
		eo->nops = nops;
		eo->ops = palloc0(sizeof(zoo_op_t) * nops);
		eo->res = palloc0(sizeof(zoo_op_result_t) * nops);
		eo->paths = palloc0(sizeof(char *) * nops);
		n = 0;
		for (k = first; k < i; k++)
		{
			if (c[k].status != ZKQC_HELD)
				continue;
			if (consume && c[k].has_item)
			{
				eo->paths[n] = psprintf("%s/entries/%s", q->path, c[k].node);
				zoo_delete_op_init(&eo->ops[n], eo->paths[n], -1);
				n++;
				eo->nentries++;
			}
			eo->paths[n] = psprintf("%s/taken/%s", q->path, c[k].node);
			zoo_delete_op_init(&eo->ops[n], eo->paths[n], -1);
			n++;
		}
		MemoryContextSwitchTo(old);
		rc = zoo_amulti(zk_zh, eo->nops, eo->ops, eo->res, end_done, eo);
		if (rc != ZOK)
		{
			endop_free(eo);
			e->in_doubt = true; /* what was sent may land: verify */
			break;
		}
		e->outstanding++;
	}
	if (e->outstanding == 0)
	{
		e->delete_inflight = false;
		zk_retry_later(e);
	}
}

/* Completion of the zoo_amulti sent by send_end() */
static void
end_done(int rc, const void *data)
{
	EndOp	   *eo = (EndOp *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		ZkEntry    *pe = zk_entry(eo->idx);

		if (pe->gen == eo->gen && pe->state != ZKE_FREE)
			e = pe;
		if (e != NULL && rc == ZOK && eo->nentries > 0)
		{
			/* entries deleted for sure: a long queue's rest stays exact */
			QState	   *q = q_state(e->name, false);

			if (q != NULL)
				q->own_edeletes += eo->nentries;
		}
		if (e != NULL)
		{
			/* fate unknown, or some node was not there: verify each */
			if (rc != ZOK)
				e->in_doubt = true;
			if (--e->outstanding <= 0)
			{
				e->outstanding = 0;
				e->delete_inflight = false;
				if (e->in_doubt)
					zk_retry_later(e);
				else
				{
					bool		consumed = (e->decision == ZKQD_COMMIT);
					QState	   *q = q_state(e->name, false);

					if (consumed)
						zk_count(ZKCNT_RELEASES, e->nclaims);
					q_free_entry(e);
					/* items released here: this cluster's waiters may take them */
					if (!consumed && q != NULL)
					{
						q->settled = false;
						q->rest_exact = false;
					}
					if (!consumed && q != NULL && q->waiters != NIL)
						q_kick(q);
				}
			}
		}
	}
	COMPLETION_END(e);
	endop_free(eo);
}

/* delete a verified claim (and its item at commit) one by one */
typedef struct OneDel
{
	uint32		idx;
	uint32		gen;
} OneDel;

static void
qclaim_let_go(ZkEntry *e)
{
	QState	   *q = q_state(e->name, true);
	int			held;
	int			doubt;

	q_count_held(e, false);		/* its end is sent before any new listing */
	if (e->decision != ZKQD_COMMIT)
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
			ZkEntry    *we = waiter_entry((Waiter *) lfirst(lc));

			if (we != NULL && we != e && !we->released)
			{
				zk_retry_later(we);
				break;
			}
		}
	}
	if (e->outstanding > 0 || e->delete_inflight)
		return;					/* its answers drive it on */
	if (!DsaPointerIsValid(e->claims))
	{
		q_free_entry(e);
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
	count_slots(e, &held, &doubt);
	if (held == 0 && doubt == 0)
	{
		q_free_entry(e);
		if (q->waiters == NIL && q->list.pending == 0 && q->inflight == 0)
			q_idle(q);
		return;
	}
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	if (doubt > 0)
	{
		(void) send_doubt_checks(e, q);
		return;
	}
	send_end(e, q);
}

static void
qclaim_drive(ZkEntry *e)
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
	q = q_state(e->name, true);
	if (e->state == ZKE_HELD)
		return;					/* granted: waits for its owner */
	if (!DsaPointerIsValid(e->claims))
	{
		zk_fail(e, ERRCODE_OUT_OF_MEMORY, "the request carries no claim array");
		return;
	}
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	count_slots(e, &held, &doubt);
	if (doubt > 0)
	{
		(void) send_doubt_checks(e, q);
		return;
	}
	if (held > 0)
	{
		grant(e);
		return;
	}
	if (e->claim_refused)
	{
		claim_fail_refused(e);
		return;
	}
	if (!history_gate(e))
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
			MemoryContext old = MemoryContextSwitchTo(q_context());
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
	 * next round, started once this one ends (q_round_done), answers it.
	 */
	if (q->list.pending > 0 || q->inflight > 0 || q->verifying)
	{
		q->again = true;
		return;
	}
	q_kick(q);
}

static void
q_free_entry(ZkEntry *e)
{
	dsa_area   *area;

	if (e->state == ZKE_FREE)
		return;
	q_count_held(e, false);
	if (DsaPointerIsValid(e->claims) || DsaPointerIsValid(e->blob))
	{
		area = zk_dsa();
		if (DsaPointerIsValid(e->claims))
		{
			ZkClaimRec *c = claims_of(e);
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
 * One-off reads (ZKK_QINFO) and the resolution scan
 * ------------------------------------------------------------------------
 */

typedef struct Info
{
	uint32		idx;
	uint32		gen;
	int			op;
	int			outstanding;
	bool		failed;
	int			fail_rc;
	char		qpath[ZK_PATH_MAX];
	Listing		list;
	int64		count;
	List	   *rows;			/* palloc'd records (peek: ZkMsgRec+payload) */
	struct Scan *scan;
	bool		sending;		/* peek, purge, queues: requests still to send */
	int			next;			/* the listing's next entry (queues: name) */
	int			sent;			/* peek: reads sent */
	char	  **names;			/* queues: the encoded queue names to count */
	int			nnames;
	char		live[64];		/* release: a live run of the cluster found */
	Size		cap;			/* peek, queues: zklock.max_answer_bytes */
	Size		bytes;			/* the rows' bytes so far */
	Size		largest;		/* peek: the largest item read so far */
	bool		over;			/* the answer would exceed cap */
} Info;

/*
 * Peek and purge send one request per item, zk_queues one listing per
 * queue, and the resolution one listing of taken per queue, at most this
 * many at a time: a queue of 100,000 items (or 100,000 queues) must not put
 * 100,000 requests ahead of every other request of the session, nor hold
 * memory for all of them at once.
 */
#define ZKQ_INFO_WINDOW		256

/*
 * The bounds of an answer (issue 23).  A peek reads items one request
 * each; each answer is copied once, into the request's rows (at most one
 * item of ZooKeeper's 1 MB per completion), and the rows once more into
 * the answer when the last read is in (at most zklock.max_answer_bytes,
 * which the backend sends along).  A peek stops, and fails with 54000, as
 * soon as its rows would exceed that; and it keeps at most
 * ZKQ_PEEK_INFLIGHT_BYTES of items in flight, judged by the largest item it
 * has read (ZKQ_PEEK_FIRST_WINDOW reads until one has answered), so that
 * eight peeks of big items cannot queue hundreds of megabytes in front of
 * the session's other answers and its pings.  An answer larger than
 * ZKQ_ANSWER_DSM_MIN travels in a segment of its own, removed when the
 * request's entry is freed: dsa keeps the segments of large allocations
 * mapped for ever once freed.
 */
#define ZKQ_PEEK_INFLIGHT_BYTES	(4 * 1024 * 1024)
#define ZKQ_PEEK_FIRST_WINDOW	4
#define ZKQ_ANSWER_DSM_MIN		(256 * 1024)

typedef struct InfoCall
{
	Info	   *info;
	char		node[ZKQ_NODE_MAX];
	int			which;
	zoo_op_t	ops[3];
	zoo_op_result_t res[3];
	char		p1[ZK_PATH_MAX];
	char		p2[ZK_PATH_MAX];
} InfoCall;

static void info_step(Info *in);
static void info_fail(Info *in, int rc);

/* how many reads (peek) or listings may be in flight for in */
static int
info_window(Info *in)
{
	if (in->op != ZKQI_PEEK)
		return ZKQ_INFO_WINDOW;
	if (in->largest == 0)
		return ZKQ_PEEK_FIRST_WINDOW;
	return (int) Max(1, Min(ZKQ_INFO_WINDOW,
							ZKQ_PEEK_INFLIGHT_BYTES / Max(in->largest, 1024)));
}

/* a palloc'd copy of a listing's names, and its release */
static char **
names_copy(const struct String_vector *sv, int *n)
{
	char	  **names;
	int			i;

	*n = sv ? sv->count : 0;
	if (*n == 0)
		return NULL;
	names = MemoryContextAlloc(q_context(), sizeof(char *) * *n);
	for (i = 0; i < *n; i++)
		names[i] = MemoryContextStrdup(q_context(), sv->data[i]);
	return names;
}

static void
names_free(char ***names, int *n)
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

static ZkEntry *
info_entry(Info *in)
{
	ZkEntry    *e = zk_entry(in->idx);

	if (e->gen != in->gen || e->state == ZKE_FREE)
		return NULL;
	return e;
}

static void
info_free(Info *in)
{
	ListCell   *lc;

	foreach(lc, in->rows)
		pfree(lfirst(lc));
	list_free(in->rows);
	listing_free(&in->list);
	names_free(&in->names, &in->nnames);
	pfree(in);
}

/*
 * A segment of its own for a large answer, or NULL (out of segments or of
 * room in /dev/shm: the answer goes to dsa instead).  Never throws: it runs
 * in a completion.
 */
static dsm_segment *
answer_segment(Size total)
{
	MemoryContext mcx = CurrentMemoryContext;
	dsm_segment *volatile seg = NULL;

	PG_TRY();
	{
		seg = dsm_create(total, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(mcx);
		FlushErrorState();
		seg = NULL;
	}
	PG_END_TRY();
	return seg;
}

/* The answer is complete: hand it over */
static void
info_finish(Info *in)
{
	ZkEntry    *e = info_entry(in);

	if (e == NULL)
	{
		info_free(in);
		return;
	}
	e->outstanding = 0;
	if (e->released)
	{
		q_free_entry(e);
		info_free(in);
		return;
	}
	if (in->over)
	{
		char		msg[ZKLOCK_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "The answer would exceed zklock.max_answer_bytes (%zu kB)",
				 in->cap / 1024);
		e->state = ZKE_DONE;
		zk_fail(e, ERRCODE_PROGRAM_LIMIT_EXCEEDED, msg);
		info_free(in);
		return;
	}
	if (in->failed)
	{
		char		msg[ZKLOCK_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "a ZooKeeper read failed: %s", zerror(in->fail_rc));
		e->state = ZKE_DONE;
		zk_fail(e, ERRCODE_CONNECTION_FAILURE, msg);
		info_free(in);
		return;
	}
	e->token = in->count;
	if (in->rows != NIL)
	{
		ListCell   *lc;
		Size		total = MAXALIGN(sizeof(ZkAnswer));
		dsa_pointer dp = InvalidDsaPointer;
		dsm_segment *seg = NULL;
		char	   *p;

		foreach(lc, in->rows)
		{
			Size		sz = *(Size *) lfirst(lc);

			total += MAXALIGN(sz);
		}
		if (total >= ZKQ_ANSWER_DSM_MIN)
			seg = answer_segment(total);
		if (seg == NULL)
			dp = dsa_allocate_extended(zk_dsa(), total, DSA_ALLOC_NO_OOM);
		if (seg == NULL && !DsaPointerIsValid(dp) && total < ZKQ_ANSWER_DSM_MIN)
			seg = answer_segment(total);	/* the dsa is full: not its business */
		if (seg == NULL && !DsaPointerIsValid(dp))
		{
			e->state = ZKE_DONE;
			zk_fail(e, ERRCODE_OUT_OF_MEMORY, "out of dynamic shared memory for the answer");
			info_free(in);
			return;
		}
		p = seg ? dsm_segment_address(seg) : dsa_get_address(zk_dsa(), dp);
		((ZkAnswer *) p)->count = list_length(in->rows);
		((ZkAnswer *) p)->size = total;
		p += MAXALIGN(sizeof(ZkAnswer));
		foreach(lc, in->rows)
		{
			Size		sz = *(Size *) lfirst(lc);

			memcpy(p, (char *) lfirst(lc) + sizeof(Size), sz);
			p += MAXALIGN(sz);
		}
		if (seg != NULL)
		{
			/* kept until the entry is freed (zk_entry_free unpins it) */
			dsm_pin_segment(seg);
			e->dsm = dsm_segment_handle(seg);
			dsm_detach(seg);
		}
		else
			e->blob = dp;
	}
	e->state = ZKE_HELD;
	/* a refused release: token -1, the live run named in errmsg */
	zk_finish(e, ZKO_GRANTED, 0, in->live[0] ? in->live : NULL);
	info_free(in);
}

/*
 * A new row of sz bytes (a Size, then the record): where the caller writes
 * the record; NULL, the answer marked over, when it would exceed the cap.
 */
static char *
info_new_row(Info *in, Size sz)
{
	char	   *r;
	MemoryContext old;

	if (in->cap > 0 && in->bytes + MAXALIGN(sz) > in->cap)
	{
		in->over = true;
		in->sending = false;
		info_fail(in, ZOK);
		return NULL;
	}
	in->bytes += MAXALIGN(sz);
	r = MemoryContextAlloc(q_context(), sizeof(Size) + sz);
	memcpy(r, &sz, sizeof(Size));
	old = MemoryContextSwitchTo(q_context());
	in->rows = lappend(in->rows, r);
	MemoryContextSwitchTo(old);
	return r + sizeof(Size);
}

static void
info_add_row(Info *in, const void *rec, Size sz)
{
	char	   *r = info_new_row(in, sz);

	if (r != NULL)
		memcpy(r, rec, sz);
}

static void info_send_more(Info *in);

static void
info_call_done(Info *in)
{
	ZkEntry    *e = info_entry(in);

	/* a long request: each answer tells the waiting backend it goes on */
	if (e != NULL)
		e->answered_at = GetCurrentTimestamp();
	in->outstanding--;
	if (in->sending && in->outstanding < info_window(in))
		info_send_more(in);
	if (in->outstanding == 0)
		info_step(in);
}

static void
info_fail(Info *in, int rc)
{
	if (!in->failed)
	{
		in->failed = true;
		in->fail_rc = rc;
	}
}

/* a listing that failed for another reason than a missing queue */
static int
listing_error(Listing *l)
{
	if (l->rc_entries != ZOK && l->rc_entries != ZNONODE)
		return l->rc_entries;
	if (l->rc_taken != ZOK && l->rc_taken != ZNONODE)
		return l->rc_taken;
	return ZOK;
}

static void
info_listed(Listing *l)
{
	Info	   *in = (Info *) l->owner;
	int			rc = listing_error(l);

	if (rc != ZOK)
		info_fail(in, rc);
	info_call_done(in);
}

/* Completion of the zoo_aget sent by info_send_more() */
static void
info_peek_done(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	InfoCall   *c = (InfoCall *) data;
	Info	   *volatile in = c->info;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		if (rc == ZOK && !in->failed)
		{
			Size		len = value_len > 0 ? value_len : 0;
			char	   *buf = info_new_row(in, sizeof(ZkMsgRec) + len);

			in->largest = Max(in->largest, len);
			if (buf != NULL)
			{
				ZkMsgRec   *m = (ZkMsgRec *) buf;
				int			prio = 0;

				memset(m, 0, sizeof(ZkMsgRec));
				m->czxid = zk_queue_msg_id(stat->czxid, c->node);
				m->ctime_ms = stat->ctime;
				(void) zk_queue_node_priority(c->node, &prio);
				m->priority = prio;
				m->len = len;
				strlcpy(m->node, c->node, sizeof(m->node));
				if (len)
					memcpy(buf + sizeof(ZkMsgRec), value, len);
			}
		}
		else if (rc != ZOK && rc != ZNONODE)
			info_fail(in, rc);
		pfree(c);
		info_call_done(in);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_amulti sent by info_send_more() */
static void
info_purge_done(int rc, const void *data)
{
	InfoCall   *c = (InfoCall *) data;
	Info	   *volatile in = c->info;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		if (rc == ZOK)
			in->count++;
		else if (!zk_rc_definite(rc))
			info_fail(in, rc);
		pfree(c);
		info_call_done(in);
	}
	COMPLETION_END(none);
}

static InfoCall *
info_call(Info *in, const char *node)
{
	InfoCall   *c = MemoryContextAllocZero(q_context(), sizeof(InfoCall));

	c->info = in;
	if (node)
		strlcpy(c->node, node, sizeof(c->node));
	return c;
}

static void
info_send_listing(Info *in, const char *qpath)
{
	in->list.done = info_listed;
	in->list.owner = in;
	if (listing_send(&in->list, qpath, NULL, NULL, false, false, true) != 0)
		in->outstanding++;
	else
		info_fail(in, ZCONNECTIONLOSS);
}

/* ---- zk_queues: every queue under <root>/queues ---- */

/* one queue being counted */
typedef struct QueueCount
{
	Info	   *info;
	char		enc[ZKLOCK_ENAME_MAX + 1];
	Listing		list;
} QueueCount;

static void
queue_count_finish(Listing *l)
{
	QueueCount *qc = (QueueCount *) l->owner;
	Info	   *in = qc->info;
	char		name[ZKLOCK_QNAME_MAX + 1];
	int			nlen;
	char	   *rec;
	ZkQueueRow	row;

	/* a failed read fails the answer; a queue that went meanwhile counts 0 */
	if (listing_error(l) != ZOK)
		info_fail(in, listing_error(l));
	else
	{
		nlen = zk_decode_qname(qc->enc, name, sizeof(name));
		row.items = listing_unclaimed(l, NULL);
		row.claimed = l->ntaken;
		row.namelen = nlen;
		rec = palloc(sizeof(row) + nlen);
		memcpy(rec, &row, sizeof(row));
		memcpy(rec + sizeof(row), name, nlen);
		info_add_row(in, rec, sizeof(row) + nlen);
		pfree(rec);
	}
	listing_free(l);
	pfree(qc);
	info_call_done(in);
}

/* Completion of the zoo_aget_children sent by info_step() */
static void
info_queues_listed(int rc, const struct String_vector *sv, const void *data)
{
	InfoCall   *c = (InfoCall *) data;
	Info	   *volatile in = c->info;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		if (rc == ZOK && zk_session_usable())
		{
			/* counted ZKQ_INFO_WINDOW at a time (info_send_more) */
			in->names = names_copy(sv, &in->nnames);
			in->next = 0;
			in->sending = true;
			info_send_more(in);
		}
		else if (rc != ZNONODE && rc != ZOK)
			info_fail(in, rc);
		pfree(c);
		info_call_done(in);
	}
	COMPLETION_END(none);
}

/* ---- the scan of this (or a dead) cluster's claims and transactions ---- */

typedef struct Scan
{
	uint64		sysid;
	bool		release_all;	/* zk_queue_release_cluster: drop everything */
	uint64		run;			/* ... of this run only (0: every run) */
	bool		own_release;	/* a run of this cluster: holds resolve_running */
	Info	   *info;			/* release_all: the request */
	int			outstanding;
	bool		failed;
	int64		removed;
	char	  **queues;			/* encoded names whose taken is to list */
	int			nqueues;
	int			qnext;
	int			qlisting;		/* listings of taken out */
	char	  **txns;			/* transaction nodes still to read */
	int			ntxns;
	int			tnext;
	int			treading;		/* reads (deletes) of them out */
	int64		tinvalid;		/* nodes holding no valid items */
	int64		tunknown;		/* nodes of transactions not in history */
	int64		tforged;		/* nodes whose MAC does not verify */
	int64		treplayed;		/* this run's, created again ("Replayed") */
} Scan;

/*
 * The transaction nodes under <root>/txns are read ZKQ_INFO_WINDOW at a
 * time, like the listings of taken: 50,000 nodes (another client's, say)
 * must not make a starting worker send 50,000 reads at once and hold their
 * state (hundreds of megabytes).  What is left alone is logged for the
 * first ZKQ_SCAN_LOG_MAX nodes of each kind, then counted in one line at
 * the end of the pass.
 */
#define ZKQ_SCAN_LOG_MAX	5

typedef struct ScanCall
{
	Scan	   *scan;
	uint64		fxid;
	uint64		run;
	char		path[ZK_PATH_MAX];	/* txn node, or claim */
	char		epath[ZK_PATH_MAX]; /* the claim's item */
	char		qenc[ZKLOCK_ENAME_MAX + 1];
	int			version;		/* the claim's, when read */
	bool		txn;			/* a read (delete) of a txns window */
	zoo_op_t	ops[2];
	zoo_op_result_t res[2];
} ScanCall;

static void scan_send_txns(Scan *s);

static void scan_claimed(bool ok, void *arg);

/* a settling pass runs again every second while it waits for a run */
static ZkLogLimit scan_summary_log;
static ZkLogLimit scan_left_log;

static void
scan_finish(Scan *s)
{
	names_free(&s->queues, &s->nqueues);
	names_free(&s->txns, &s->ntxns);
	if ((s->tinvalid > ZKQ_SCAN_LOG_MAX || s->tunknown > ZKQ_SCAN_LOG_MAX ||
		 s->tforged > 0 || s->treplayed > 0) &&
		zk_log_limited(&scan_summary_log, "left alone ... queue transaction nodes"))
		ereport(LOG,
				(errmsg("zklock: left alone " INT64_FORMAT " queue transaction nodes holding no valid items, " INT64_FORMAT " whose transaction is not in this server's history, and " INT64_FORMAT " transaction nodes and claims whose MAC does not verify; " INT64_FORMAT " transaction nodes this run had published already",
						s->tinvalid, s->tunknown, s->tforged, s->treplayed),
				 errdetail("Only the first %d of each of the first two were logged by name, and at most %d a minute of the others.",
						   ZKQ_SCAN_LOG_MAX, ZK_LOG_LIMIT_LINES)));
	q_unsettle_all();			/* claims of this cluster may be released */
	if (s->release_all)
	{
		Info	   *in = s->info;

		if (s->own_release)
			resolve_running = false;
		in->count = s->removed;
		if (s->failed)
			info_fail(in, ZCONNECTIONLOSS);
		pfree(s);
		info_call_done(in);
		return;
	}
	if (s->removed > 0)
		ereport(LOG,
				(errmsg("zklock: settled " INT64_FORMAT " queue claims and transactions left by an earlier run",
						s->removed)));
	/* take over the dead runs found to be ancestors; forget empty ones */
	if (zk_session_usable() &&
		zk_history_claim(!s->failed && !zk_history_postponed(), scan_claimed, s))
		return;
	scan_claimed(true, s);
}

/* the end of a settling pass: again soon if it waited or took a run over */
static void
scan_claimed(bool ok, void *arg)
{
	Scan	   *s = (Scan *) arg;

	resolve_running = false;
	if (!s->failed && !zk_history_took() && !zk_history_postponed())
		zk_mac_unsigned_done();
	if (s->failed || zk_history_took())
		resolve_needed = true;	/* again on the next turn */
	else if (zk_history_postponed())
	{
		resolve_needed = true;	/* a run that may yet die: in a second */
		resolve_not_before = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
	}
	pfree(s);
}

static void
scan_done_one(Scan *s, bool ok, int64 removed)
{
	if (!ok)
		s->failed = true;
	s->removed += removed;
	if (--s->outstanding == 0)
		scan_finish(s);
}

/* Completion of the zoo_adelete of 4 callers */
static void
scan_void_done(int rc, const void *data)
{
	ScanCall   *c = (ScanCall *) data;
	Scan	   *volatile s = c->scan;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		if (c->txn)
		{
			s->treading--;
			scan_send_txns(s);
		}
		scan_done_one(s, zk_rc_definite(rc), rc == ZOK ? 1 : 0);
		pfree(c);
	}
	COMPLETION_END(none);
}

/*
 * List the taken of the next queues, at most ZKQ_INFO_WINDOW at a time (each
 * answer sends the next); stops for good after a failure.
 */
static void scan_taken_listed(int rc, const struct String_vector *sv,
							  const void *data);

static void
scan_send_queues(Scan *s)
{
	while (s->qlisting < ZKQ_INFO_WINDOW && s->qnext < s->nqueues && !s->failed)
	{
		ScanCall   *d;
		char		buf[ZK_PATH_MAX];

		if (!zk_session_usable())
		{
			s->failed = true;
			break;
		}
		d = MemoryContextAllocZero(q_context(), sizeof(ScanCall));
		d->scan = s;
		strlcpy(d->qenc, s->queues[s->qnext++], sizeof(d->qenc));
		snprintf(buf, sizeof(buf), "%s/queues/%s/taken", zk_root, d->qenc);
		if (zoo_aget_children(zk_zh, buf, 0, scan_taken_listed, d) != ZOK)
		{
			pfree(d);
			s->failed = true;
			break;
		}
		s->outstanding++;
		s->qlisting++;
	}
	if (s->failed || s->qnext >= s->nqueues)
		names_free(&s->queues, &s->nqueues);
}

/* a committed claim consumed; if its item was already gone, the claim alone */
static void
scan_consume_done(int rc, const void *data)
{
	ScanCall   *c = (ScanCall *) data;
	Scan	   *volatile s = c->scan;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		if (rc != ZOK && zk_rc_definite(rc) && c->res[0].err == ZNONODE &&
			zk_session_usable() &&
			zoo_adelete(zk_zh, c->path, c->version, scan_void_done, c) == ZOK)
			c = NULL;			/* scan_void_done counts it */
		else
			scan_done_one(s, zk_rc_definite(rc), rc == ZOK ? 1 : 0);
		if (c != NULL)
			pfree(c);
	}
	COMPLETION_END(none);
}

/*
 * What the settling pass does with a node of this cluster (history.h):
 * its transaction's fate, or FATE_UNKNOWN to leave it alone (*quiet: the
 * run's status was logged instead).  release_all: every node of the
 * target goes, but never one of this run or of a live run.
 */
static Fate
node_fate(Scan *s, ZkKind kind, uint64 run, uint64 fxid, uint32 tli,
		  uint64 lsn, uint64 rec, bool *quiet)
{
	ZkRunStatus st;
	ZkHistCheck v;
	uint64		fork;

	*quiet = false;
	if (s->release_all)
	{
		*quiet = true;
		if (s->sysid != GetSystemIdentifier())
			return FATE_ABORTED;
		if (run != s->run)
			return FATE_UNKNOWN;
		st = zk_history_status(run);
		/* a copy's original (denied) may be alive too */
		return (st == ZKR_CURRENT || st == ZKR_LIVE || zk_history_alive(run)) ?
			FATE_UNKNOWN : FATE_ABORTED;
	}
	if (run == 0)				/* written before runs existed */
		return entry_for_xid(kind, fxid) ? FATE_RUNNING : xact_fate(fxid, tli, lsn);
	st = zk_history_status(run);
	if (st == ZKR_CURRENT && entry_for_xid(kind, fxid))
		return FATE_RUNNING;
	/*
	 * This data directory's own previous run is ours to settle even when a
	 * copy took it over (ZKR_OTHER): this WAL is that run's history, and a
	 * copy settles only what its own WAL shows committed (below).
	 */
	if (st == ZKR_OTHER && zk_history_proven(run))
		st = ZKR_HEIR;
	if (st == ZKR_CURRENT || st == ZKR_HEIR)
	{
		Fate		f = FATE_UNKNOWN;

		v = zk_history_verify(tli, rec, run, fxid);
		if (v == ZKH_VERIFIED)
			f = xact_fate(fxid, tli, lsn);
		else if (v == ZKH_UNREADABLE)
		{
			/* recycled WAL: this data directory's own earlier run? */
			if (st == ZKR_CURRENT ||
				(zk_history_lineage(run, &fork) && rec < fork))
				f = xact_fate(fxid, tli, lsn);
		}
		else if (st == ZKR_HEIR)
			f = FATE_ABORTED;	/* it never happened in this history */

		/*
		 * A run taken over without proof that it was this data directory's
		 * own (a copy: a base backup, a clone) settles only what its WAL
		 * shows committed.  Its WAL may end before its original's commit
		 * record, so "not committed here" is no proof that the original
		 * did not commit: such a claim is left (an operator releases it
		 * with zk_queue_release_cluster once the original is known gone),
		 * never released into a second COMMIT.  Unless this server's
		 * timeline moved on from the run's (a promotion): what the run did
		 * after the switch is abandoned with its timeline, and what this
		 * WAL has before it is settled from the commit log.
		 */
		if (st == ZKR_HEIR && !zk_history_proven(run) &&
			f != FATE_COMMITTED && f != FATE_RUNNING &&
			!(tli != 0 && tli < GetWALInsertionTimeLine()))
			f = FATE_UNKNOWN;
		if (f == FATE_UNKNOWN || f == FATE_RUNNING)
			zk_history_left(run);	/* the run is not done with */
		return f;
	}
	if (st == ZKR_DEAD &&
		(zk_history_lineage(run, &fork) ||
		 zk_history_verify(tli, rec, run, fxid) == ZKH_VERIFIED))
		zk_history_want(run);	/* an ancestor: take it over, then settle */
	zk_history_left(run);
	*quiet = true;
	return FATE_UNKNOWN;
}

/*
 * A transaction node's data, widened to the current header (palloc'd);
 * *had_mac: it was written with a MAC (ZKQ_TXN_MAGIC), not by an older
 * version.
 */
static char *
txn_blob_widen(const char *value, int value_len, int *out_len, bool *had_mac)
{
	ZkTxnHeaderV1 v1;
	ZkTxnHeaderV2 v2;
	ZkTxnHeader h;
	char	   *out;
	int			len;
	int			hlen;

	*had_mac = false;
	if (value_len < (int) sizeof(ZkTxnHeaderV1))
		return NULL;
	memcpy(&v1, value, sizeof(v1));
	if (v1.magic == ZKQ_TXN_MAGIC)
	{
		out = palloc(value_len);
		memcpy(out, value, value_len);
		*out_len = value_len;
		*had_mac = true;
		return blob_valid(out, value_len) ? out : NULL;
	}
	memset(&h, 0, sizeof(h));
	if (v1.magic == ZKQ_TXN_MAGIC_V2 && value_len >= (int) sizeof(ZkTxnHeaderV2))
	{
		memcpy(&v2, value, sizeof(v2));
		hlen = sizeof(v2);
		h.run = v2.run;
		h.rec = v2.rec;
	}
	else if (v1.magic == ZKQ_TXN_MAGIC_V1)
		hlen = sizeof(v1);
	else
		return NULL;
	if (v1.total != (uint32) value_len)
		return NULL;
	len = value_len + (int) sizeof(ZkTxnHeader) - hlen;
	h.magic = ZKQ_TXN_MAGIC;
	h.nitems = v1.nitems;
	h.sysid = v1.sysid;
	h.fxid = v1.fxid;
	h.lsn = v1.lsn;
	h.tli = v1.tli;
	h.total = (uint32) len;
	out = palloc(len);
	memcpy(out, &h, sizeof(h));
	memcpy(out + sizeof(h), value + hlen, value_len - hlen);
	*out_len = len;
	if (!blob_valid(out, len))
	{
		pfree(out);
		return NULL;
	}
	return out;
}

/*
 * A node whose MAC does not verify (or that has none, outside the run that
 * made the key): not acted on, logged, counted.
 */
static ZkLogLimit forged_log;
static ZkLogLimit replay_log;

static void
scan_refused(Scan *s, const char *what, const char *path, ZkMacCheck mc)
{
	s->tforged++;
	if (zk_log_limited(&forged_log, "left a node alone: its MAC does not verify"))
		ereport(LOG,
				(errmsg("zklock: left the queue %s %s alone: %s",
						what, path,
						mc == ZKM_UNSIGNED ? "it has no MAC (only nodes of the run that made this cluster's key may lack one)" :
						"its MAC does not verify: this cluster did not write it there"),
				 errdetail("A client that may write under zklock.root wrote it, or a server with another key (zklock.key)."),
				 errhint("Check who may write under zklock.root (zklock.acl); delete the node once you know whose it is.")));
}

/* Completion of the zoo_aget sent by scan_send_txns() */
static void
scan_txn_data(int rc, const char *value, int value_len,
			  const struct Stat *stat, const void *data)
{
	ScanCall   *c = (ScanCall *) data;
	Scan	   *volatile s = c->scan;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		bool		counted = false;
		char	   *blob = NULL;
		int			blen = 0;
		bool		had_mac = false;
		ZkMacCheck	mc = ZKM_FORGED;

		if (rc == ZOK && value != NULL)
			blob = txn_blob_widen(value, value_len, &blen, &had_mac);
		if (blob != NULL)
			mc = zk_txn_verify(c->path, blob, blen, had_mac);
		if (blob != NULL && mc != ZKM_VERIFIED && mc != ZKM_UNSIGNED_OK)
			scan_refused(s, "transaction node", c->path, mc);
		else if (blob != NULL &&
				 ((const ZkTxnHeader *) blob)->fxid == c->fxid &&
				 ((const ZkTxnHeader *) blob)->run == c->run && zk_session_usable())
		{
			ZkTxnHeader h;
			Fate		f;
			bool		quiet;

			memcpy(&h, blob, sizeof(h));
			f = node_fate(s, ZKK_QPUB, h.run, c->fxid, h.tli, h.lsn, h.rec, &quiet);
			if (f == FATE_COMMITTED && h.run != 0 &&
				zk_history_status(h.run) == ZKR_CURRENT &&
				given_up_find(c->fxid) < 0)
			{
				/* this run published it: a copy created again ("Replayed") */
				f = FATE_UNKNOWN;
				quiet = true;
				s->treplayed++;
				if (zk_log_limited(&replay_log, "left a replayed transaction node alone"))
					ereport(LOG,
							(errmsg("zklock: left the queue transaction node %s alone: this run published its transaction already",
									c->path),
							 errdetail("A client that may write under zklock.root created the node again from a copy of its data; publishing it would deliver its items and gate and arrival changes twice."),
							 errhint("Check who may write under zklock.root (zklock.acl), then delete the node.")));
			}
			if (f == FATE_COMMITTED)
			{
				/* ensures the parents itself; its reply counts for us */
				if (send_publish(blob, c->path, ZKLOCK_NO_ENTRY, ZKLOCK_NO_ENTRY, s, true))
					counted = true;
				else
					s->failed = true;
			}
			else if (f == FATE_ABORTED)
			{
				ScanCall   *d = MemoryContextAllocZero(q_context(), sizeof(ScanCall));

				d->scan = s;
				strlcpy(d->path, c->path, sizeof(d->path));
				if (zoo_adelete(zk_zh, d->path, -1, scan_void_done, d) == ZOK)
				{
					s->outstanding++;
				}
				else
				{
					pfree(d);
					s->failed = true;
				}
			}
			else if (f == FATE_UNKNOWN && !quiet &&
					 ++s->tunknown <= ZKQ_SCAN_LOG_MAX &&
					 zk_log_limited(&scan_left_log, "left a queue node alone"))
				ereport(LOG,
						(errmsg("zklock: left the queue transaction node %s alone: its transaction is not in this server's history",
								c->path)));
		}
		else if (rc == ZOK && blob == NULL &&
				 ++s->tinvalid <= ZKQ_SCAN_LOG_MAX &&
				 zk_log_limited(&scan_left_log, "left a queue node alone"))
			ereport(LOG,
					(errmsg("zklock: the queue transaction node %s holds no valid items; left alone",
							c->path)));
		else if (!zk_rc_definite(rc))
			s->failed = true;
		if (c->txn)
		{
			s->treading--;
			scan_send_txns(s);
		}
		if (!counted)
			scan_done_one(s, true, 0);
		if (blob != NULL)
			pfree(blob);
		pfree(c);
	}
	COMPLETION_END(none);
}

/*
 * Read (release: delete) the next transaction nodes listed, until
 * ZKQ_INFO_WINDOW are out; each answer sends the next.  Stops for good
 * after a failure.
 */
static void
scan_send_txns(Scan *s)
{
	char		prefix[32];

	snprintf(prefix, sizeof(prefix), UINT64_FORMAT "-", s->sysid);
	while (s->treading < ZKQ_INFO_WINDOW && s->tnext < s->ntxns && !s->failed)
	{
		ScanCall   *d;
		uint64		fxid;
		uint64		run = 0;
		const char *name = s->txns[s->tnext++];
		const char *rest = name + strlen(prefix);
		const char *dash;
		bool		quiet;
		int			rc;

		if (!zk_session_usable())
		{
			s->failed = true;
			break;
		}
		/* <sysid>-<run>-<fxid>, or <sysid>-<fxid> before runs */
		dash = strchr(rest, '-');
		if (dash != NULL)
		{
			char		runhex[17];

			if (dash - rest != 16)
				continue;
			memcpy(runhex, rest, 16);
			runhex[16] = '\0';
			if (!parse_u64(runhex, 16, &run) || run == 0)
				continue;
			rest = dash + 1;
		}
		if (!parse_u64(rest, 10, &fxid))
			continue;
		if (s->release_all && s->sysid == GetSystemIdentifier() && run != s->run)
			continue;
		if (s->release_all &&
			node_fate(s, ZKK_QPUB, run, fxid, 0, 0, 0, &quiet) == FATE_UNKNOWN)
			continue;
		d = MemoryContextAllocZero(q_context(), sizeof(ScanCall));
		d->scan = s;
		d->fxid = fxid;
		d->run = run;
		d->txn = true;
		snprintf(d->path, sizeof(d->path), "%s/txns/%s", zk_root, name);
		if (s->release_all)
			rc = zoo_adelete(zk_zh, d->path, -1, scan_void_done, d);
		else
			rc = zoo_aget(zk_zh, d->path, 0, scan_txn_data, d);
		if (rc != ZOK)
		{
			pfree(d);
			s->failed = true;
			break;
		}
		s->outstanding++;
		s->treading++;
	}
	if (s->failed || s->tnext >= s->ntxns)
		names_free(&s->txns, &s->ntxns);
}

/* Completion of the zoo_aget_children sent by scan_list() */
static void
scan_txns_listed(int rc, const struct String_vector *sv, const void *data)
{
	ScanCall   *c = (ScanCall *) data;
	Scan	   *volatile s = c->scan;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		int			i;
		char		prefix[32];

		snprintf(prefix, sizeof(prefix), UINT64_FORMAT "-", s->sysid);
		if (rc == ZOK && zk_session_usable())
		{
			/* this cluster's, read a window at a time (scan_send_txns) */
			int			n = 0;

			s->txns = names_copy(sv, &s->ntxns);
			for (i = 0; i < s->ntxns; i++)
			{
				if (strncmp(s->txns[i], prefix, strlen(prefix)) == 0)
					s->txns[n++] = s->txns[i];
				else
					pfree(s->txns[i]);
			}
			s->ntxns = n;
			s->tnext = 0;
			scan_send_txns(s);
		}
		else if (rc != ZNONODE)
			s->failed = true;
		pfree(c);
		scan_done_one(s, true, 0);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_aget sent by scan_taken_listed() */
static void
scan_claim_data(int rc, const char *value, int value_len,
				const struct Stat *stat, const void *data)
{
	ScanCall   *c = (ScanCall *) data;
	Scan	   *volatile s = c->scan;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		char		f_cluster[32];
		char		f_xid[32];
		char		f_tli[16];
		char		f_lsn[32];
		char		f_run[32];
		char		f_rec[32];
		uint64		cluster;
		uint64		fxid;
		uint64		tli;
		uint64		lsn;
		uint64		run = 0;
		uint64		rec = 0;
		bool		sent = false;
		bool		quiet = false;
		bool		refused = false;

		bool		ours = (rc == ZOK && value != NULL && value_len > 0 &&
							zk_json_field(value, value_len, "cluster", f_cluster, sizeof(f_cluster)) &&
							parse_u64(f_cluster, 10, &cluster) && cluster == s->sysid &&
							zk_session_usable());
		bool		parsed = ours &&
			zk_json_field(value, value_len, "xid", f_xid, sizeof(f_xid)) &&
			parse_u64(f_xid, 10, &fxid) &&
			zk_json_field(value, value_len, "tli", f_tli, sizeof(f_tli)) &&
			parse_u64(f_tli, 10, &tli) &&
			zk_json_field(value, value_len, "lsn", f_lsn, sizeof(f_lsn)) &&
			parse_u64(f_lsn, 16, &lsn);

		/* its run and mark (none: written before runs existed) */
		if (parsed && zk_json_field(value, value_len, "run", f_run, sizeof(f_run)))
			parsed = parse_u64(f_run, 16, &run) && run != 0 &&
				zk_json_field(value, value_len, "rec", f_rec, sizeof(f_rec)) &&
				parse_u64(f_rec, 16, &rec);
		else if (ours && s->release_all &&
				 zk_json_field(value, value_len, "run", f_run, sizeof(f_run)))
			(void) parse_u64(f_run, 16, &run);

		/*
		 * This cluster's claims are acted on only when signed for this
		 * very node; another cluster's (a release) cannot be checked.
		 */
		if (ours && s->sysid == GetSystemIdentifier())
		{
			ZkMacCheck	mc = zk_claim_verify(c->path, value, value_len);

			if (mc != ZKM_VERIFIED && mc != ZKM_UNSIGNED_OK)
			{
				scan_refused(s, "claim", c->path, mc);
				ours = parsed = false;
				refused = true;
			}
		}

		/* a dead cluster's claim goes whatever else it says */
		if (ours && (parsed || s->release_all))
		{
			Fate		f;

			f = node_fate(s, ZKK_QCLAIM, run, fxid, (uint32) tli, lsn, rec, &quiet);
			if (f == FATE_COMMITTED && !s->release_all && run != 0 &&
				zk_history_status(run) == ZKR_CURRENT && given_up_find(fxid) < 0)
			{
				/*
				 * This run's claims are ended by their entries: a claim
				 * written again after a drop reused its item's name would
				 * consume another item ("Replayed transaction nodes").
				 */
				f = FATE_UNKNOWN;
				quiet = true;
				s->treplayed++;
				if (zk_log_limited(&replay_log, "left a replayed transaction node alone"))
					ereport(LOG,
							(errmsg("zklock: left the queue claim %s alone: this run ended its transaction's claims already",
									c->path),
							 errdetail("A client that may write under zklock.root created the claim again from a copy of its data; consuming it would take another item of that name."),
							 errhint("Check who may write under zklock.root (zklock.acl), then delete the claim.")));
			}
			if (f == FATE_COMMITTED)
			{
				/* consume: the item and the claim */
				c->version = stat->version;
				zoo_delete_op_init(&c->ops[0], c->epath, -1);
				zoo_delete_op_init(&c->ops[1], c->path, stat->version);
				if (zoo_amulti(zk_zh, 2, c->ops, c->res, scan_consume_done, c) == ZOK)
				{
					s->outstanding++;
					sent = true;
				}
				else
					s->failed = true;
			}
			else if (f == FATE_ABORTED)
			{
				if (zoo_adelete(zk_zh, c->path, stat->version, scan_void_done, c) == ZOK)
				{
					s->outstanding++;
					sent = true;
				}
				else
					s->failed = true;
			}
			else if (f == FATE_UNKNOWN && !quiet &&
					 zk_log_limited(&scan_left_log, "left a queue node alone"))
				ereport(LOG,
						(errmsg("zklock: left the queue claim %s alone: its transaction is not in this server's history",
								c->path)));
		}
		else if (ours && zk_log_limited(&scan_left_log, "left a queue node alone"))
			ereport(LOG,
					(errmsg("zklock: left the queue claim %s alone: its data names this cluster but no transaction",
							c->path)));
		else if (!refused && !zk_rc_definite(rc))
			s->failed = true;
		if (!sent)
			pfree(c);
		scan_done_one(s, true, 0);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_aget_children sent by scan_send_queues() */
static void
scan_taken_listed(int rc, const struct String_vector *sv, const void *data)
{
	ScanCall   *c = (ScanCall *) data;
	Scan	   *volatile s = c->scan;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		int			i;

		if (rc == ZOK && zk_session_usable())
		{
			for (i = 0; sv && i < sv->count; i++)
			{
				ScanCall   *d = MemoryContextAllocZero(q_context(), sizeof(ScanCall));

				d->scan = s;
				snprintf(d->path, sizeof(d->path), "%s/queues/%s/taken/%s",
						 zk_root, c->qenc, sv->data[i]);
				snprintf(d->epath, sizeof(d->epath), "%s/queues/%s/entries/%s",
						 zk_root, c->qenc, sv->data[i]);
				if (zoo_aget(zk_zh, d->path, 0, scan_claim_data, d) != ZOK)
				{
					pfree(d);
					s->failed = true;
					break;
				}
				s->outstanding++;
			}
		}
		else if (rc != ZNONODE)
			s->failed = true;
		pfree(c);
		s->qlisting--;
		scan_send_queues(s);
		scan_done_one(s, true, 0);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_aget_children sent by scan_list() */
static void
scan_queues_listed(int rc, const struct String_vector *sv, const void *data)
{
	ScanCall   *c = (ScanCall *) data;
	Scan	   *volatile s = c->scan;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		if (rc == ZOK && zk_session_usable())
		{
			s->queues = names_copy(sv, &s->nqueues);
			s->qnext = 0;
			scan_send_queues(s);
		}
		else if (rc != ZNONODE)
			s->failed = true;
		pfree(c);
		scan_done_one(s, true, 0);
	}
	COMPLETION_END(none);
}

static void scan_list(Scan *s);

/* the survey of runs answered: list the nodes */
static void
scan_surveyed(bool ok, void *arg)
{
	Scan	   *s = (Scan *) arg;

	if (!ok || !zk_session_usable())
	{
		s->failed = true;
		s->outstanding = 1;
		scan_done_one(s, true, 0);
		return;
	}
	scan_list(s);
}

/*
 * A settling pass (or a release): first what the runs of this cluster are
 * (history.c), then the nodes.  A dead cluster's release needs no survey.
 */
static bool
scan_start(Scan *s)
{
	if ((!s->release_all || s->sysid == GetSystemIdentifier()) &&
		zk_history_survey(scan_surveyed, s))
		return true;
	if (!s->release_all || s->sysid == GetSystemIdentifier())
	{
		scan_surveyed(false, s);
		return true;
	}
	scan_list(s);
	return true;
}

static void
scan_list(Scan *s)
{
	char		buf[ZK_PATH_MAX];
	ScanCall   *c1 = MemoryContextAllocZero(q_context(), sizeof(ScanCall));
	ScanCall   *c2 = MemoryContextAllocZero(q_context(), sizeof(ScanCall));

	c1->scan = s;
	c2->scan = s;
	/* one count for the start itself, so nothing finishes it early */
	s->outstanding = 1;
	snprintf(buf, sizeof(buf), "%s/txns", zk_root);
	if (zoo_aget_children(zk_zh, buf, 0, scan_txns_listed, c1) == ZOK)
		s->outstanding++;
	else
	{
		pfree(c1);
		s->failed = true;
	}
	snprintf(buf, sizeof(buf), "%s/queues", zk_root);
	if (zoo_aget_children(zk_zh, buf, 0, scan_queues_listed, c2) == ZOK)
		s->outstanding++;
	else
	{
		pfree(c2);
		s->failed = true;
	}
	scan_done_one(s, true, 0);
}

/*
 * zk_queue_release_cluster refuses a live cluster: before anything is
 * released, every run of the target registered under <root>/runs
 * (<sysid>-<run>, or only the named run) is asked whether its ephemeral
 * "live" exists.  One that does ends the request with count -1 and the
 * run's name (the backend raises 55006); a failed listing or read fails
 * it; otherwise the release goes on (scan_start).
 */
typedef struct LiveCheck
{
	Scan	   *scan;
	int			outstanding;
	bool		failed;
	int			fail_rc;
	char		want[64];		/* "<sysid>-" (every run) or "<sysid>-<run>" */
	bool		exact;
} LiveCheck;

typedef struct LiveCall
{
	LiveCheck  *lc;
	char		run[64];
} LiveCall;

static void
release_live_checked(LiveCheck *lc)
{
	Scan	   *s = lc->scan;
	Info	   *in = s->info;

	if (!lc->failed && in->live[0] == '\0')
	{
		pfree(lc);
		(void) scan_start(s);
		return;
	}
	/* refused or failed: nothing released (scan_finish's part, by hand) */
	if (lc->failed)
		info_fail(in, lc->fail_rc);
	else
		in->count = -1;
	if (s->own_release)
		resolve_running = false;
	pfree(lc);
	pfree(s);
	info_call_done(in);
}

static void
live_done_one(LiveCheck *lc, int rc)
{
	if (rc != ZOK && rc != ZNONODE && !lc->failed)
	{
		lc->failed = true;
		lc->fail_rc = rc;
	}
	if (--lc->outstanding == 0)
		release_live_checked(lc);
}

/* Completion of the zoo_aexists sent by release_runs_listed() */
static void
release_live_exists(int rc, const struct Stat *stat, const void *data)
{
	LiveCall   *c = (LiveCall *) data;
	LiveCheck  *volatile lc = c->lc;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		Info	   *in = lc->scan->info;

		if (rc == ZOK && in->live[0] == '\0')
			strlcpy(in->live, c->run, sizeof(in->live));
		pfree(c);
		live_done_one(lc, rc);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_aget_children sent by release_check_live() */
static void
release_runs_listed(int rc, const struct String_vector *sv, const void *data)
{
	LiveCheck  *volatile lc = (LiveCheck *) data;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		int			i;

		for (i = 0; rc == ZOK && sv != NULL && i < sv->count && !lc->failed; i++)
		{
			const char *run = sv->data[i];
			LiveCall   *c;
			char		path[ZK_PATH_MAX];
			int			src;

			if (lc->exact ? strcmp(run, lc->want) != 0 :
				strncmp(run, lc->want, strlen(lc->want)) != 0)
				continue;
			c = MemoryContextAllocZero(q_context(), sizeof(LiveCall));
			c->lc = lc;
			strlcpy(c->run, run, sizeof(c->run));
			snprintf(path, sizeof(path), "%s/runs/%s/live", zk_root, run);
			src = zk_session_usable() ?
				zoo_aexists(zk_zh, path, 0, release_live_exists, c) : ZCONNECTIONLOSS;
			if (src != ZOK)
			{
				pfree(c);
				lc->failed = true;
				lc->fail_rc = src;
				break;
			}
			lc->outstanding++;
		}
		live_done_one(lc, rc);
	}
	COMPLETION_END(none);
}

static void
release_check_live(Scan *s)
{
	LiveCheck  *lc = MemoryContextAllocZero(q_context(), sizeof(LiveCheck));
	char		path[ZK_PATH_MAX];
	int			rc;

	lc->scan = s;
	if (s->run != 0)
	{
		snprintf(lc->want, sizeof(lc->want), UINT64_FORMAT "-%016llx",
				 s->sysid, (unsigned long long) s->run);
		lc->exact = true;
	}
	else
		snprintf(lc->want, sizeof(lc->want), UINT64_FORMAT "-", s->sysid);
	lc->outstanding = 1;
	snprintf(path, sizeof(path), "%s/runs", zk_root);
	rc = zoo_aget_children(zk_zh, path, 0, release_runs_listed, lc);
	if (rc != ZOK)
	{
		lc->outstanding = 0;
		lc->failed = true;
		lc->fail_rc = rc;
		release_live_checked(lc);
	}
}

/* ------------------------------------------------------------------------
 * Dropping a queue (ZKQI_DROP, zk_queue_drop)
 *
 * A queue's nodes are persistent, as kazoo creates them, so every name ever
 * used keeps <queue>, entries and taken (and next) in ZooKeeper until it is
 * dropped.  A drop acts at once, not at COMMIT (like a purge):
 *
 *	1. This cluster's own use of the queue refuses it: a session waiting for
 *	   or claiming an item, a claim held by a transaction that has not
 *	   ended, the items of a committing transaction on their way into it
 *	   (drop_local_use).  Claims of ended transactions still being consumed
 *	   or released, and rounds of the worker still out, are waited for (up
 *	   to half of zklock.connect_timeout): their fate decides what the
 *	   queue holds.
 *	2. Three reads, pipelined: the queue node's children, and the stats of
 *	   entries and taken.  No queue node: nothing to do (false).  Items or
 *	   claims (anyone's), or a child zklock does not create (another
 *	   client's): refused, nothing deleted.
 *	3. Step 1 again; then what this worker remembers of the queue is
 *	   forgotten (its QState with its watches, its QSeq: parents known to
 *	   exist, how it names items), and one multi deletes the children found
 *	   and the queue node.  ZooKeeper never deletes a node with children, so
 *	   an item or a claim created since the reads, by anyone, fails the
 *	   whole multi, and the drop reads again (ZKQ_DROP_TRIES times at most).
 *	   Whatever lands after the multi finds the queue gone and creates it
 *	   again: a publication that fails with ZNONODE sends its parents'
 *	   creates and goes again (publish_done), a consumer's listing that
 *	   finds them missing creates them (q_listing_done), and this worker,
 *	   having forgotten the queue, ensures its parents before anything it
 *	   sends after the multi.  So a producer or consumer elsewhere (another
 *	   cluster) either came first, and the drop is refused, or comes after,
 *	   and the queue is simply there again.  A kazoo LockingQueue object
 *	   that ensured the paths before the drop does not create them again
 *	   (kazoo's put raises NoNodeError): such clients make a new object.
 * ------------------------------------------------------------------------
 */
#define ZKQ_DROP_TRIES		5

#define DROP_UNUSED		0
#define DROP_WAIT		1		/* something of the queue is ending here */
#define DROP_BUSY		2		/* this cluster uses the queue */

typedef struct Drop
{
	uint32		idx;
	uint32		gen;
	int			pending;		/* reads out */
	int			tries;			/* multis refused by a change */
	int			rc_children;
	int			rc_entries;
	int			rc_taken;
	int32		nentries;
	int32		ntaken;
	bool		has_entries;
	bool		has_taken;
	bool		has_next;
	int			nforeign;		/* other children of the queue node */
	char		foreign[ZKQ_NODE_MAX];	/* the first of them */
	char		qpath[ZK_PATH_MAX];
	int			nops;
	char		paths[4][ZK_PATH_MAX];
	zoo_op_t	ops[4];
	zoo_op_result_t res[4];
} Drop;

static void drop_read(Drop *d);
static void drop_multi_done(int rc, const void *data);

/* Does a transaction's blob hold items for queue qname? */
static bool
blob_names_queue(const char *blob, const char *qname)
{
	const ZkTxnHeader *h = (const ZkTxnHeader *) blob;
	const char *p = blob + sizeof(ZkTxnHeader);
	const char *end = blob + h->total;
	size_t		qlen = strlen(qname);
	uint32		i;

	for (i = 0; i < h->nitems && end - p >= (long) sizeof(ZkTxnItem); i++)
	{
		ZkTxnItem	it;

		memcpy(&it, p, sizeof(it));
		p += sizeof(ZkTxnItem);
		if (end - p < (long) it.qlen + (long) it.plen)
			break;
		if (!ZKQ_IS_OP(it.priority) && it.qlen == qlen && memcmp(p, qname, qlen) == 0)
			return true;
		p += it.qlen + it.plen;
	}
	return false;
}

/*
 * This cluster's use of queue qname (drop's step 1): DROP_BUSY, DROP_WAIT
 * (why says what, as a sentence without its period), or DROP_UNUSED.
 */
static int
drop_local_use(ZkEntry *self, const char *qname, char *why, size_t len)
{
	bool		isnew;
	QState	   *q;
	QSeq	   *qs;
	int			use = DROP_UNUSED;
	int			i;

	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e == self || e->state == ZKE_FREE)
			continue;
		if (e->kind == ZKK_QCLAIM && strcmp(e->name, qname) == 0)
		{
			if (!e->released && e->outcome == ZKO_NONE)
			{
				snprintf(why, len, "A session on this server (pid %d) is dequeuing from it",
						 e->pid);
				return DROP_BUSY;
			}
			if (!e->released && e->outcome == ZKO_GRANTED)
			{
				snprintf(why, len, "A transaction on this server (pid %d) holds %d %s on it",
						 e->pid, e->nclaims, e->nclaims == 1 ? "claim" : "claims");
				return DROP_BUSY;
			}
			if (use == DROP_UNUSED)
				snprintf(why, len, "The claims of a transaction on this server that has ended (pid %d) are still being consumed or released",
						 e->pid);
			use = DROP_WAIT;
		}
		else if (e->kind == ZKK_QPUB && DsaPointerIsValid(e->blob) &&
				 !(e->released && e->decision != ZKQD_COMMIT) &&
				 blob_names_queue(dsa_get_address(zk_dsa(), e->blob), qname))
		{
			snprintf(why, len, "The items of a %s transaction on this server (pid %d) are on their way into it",
					 e->released ? "committed" : "committing", e->pid);
			return DROP_BUSY;
		}
	}
	q = q_hash_entry(&qstates, "zklock queue states", sizeof(QState), qname,
					 false, &isnew);
	if (q != NULL && use == DROP_UNUSED)
	{
		ListCell   *lc;
		bool		live = false;

		foreach(lc, q->waiters)
			if (waiter_entry((Waiter *) lfirst(lc)) != NULL)
				live = true;
		if (live || q->list.pending > 0 || q->inflight > 0 || q->verifying ||
			q->unflushed_wait ||
			(q->held != NULL && hash_get_num_entries(q->held) > 0))
		{
			snprintf(why, len, "The zklock worker is still serving a dequeue from it");
			use = DROP_WAIT;
		}
	}
	qs = q_hash_entry(&qseqs, "zklock queues published", sizeof(QSeq), qname,
					  false, &isnew);
	if (qs != NULL && use == DROP_UNUSED &&
		(qs->refs > 0 || qs->seq_fetching || (qs->seq_probed && !qs->seq_answered)))
	{
		snprintf(why, len, "The zklock worker is still publishing items into it");
		use = DROP_WAIT;
	}
	return use;
}

/*
 * Forget what this worker knows of queue qname (drop's step 3): nothing in
 * use points to it (drop_local_use said so).  Its watches go, on the
 * server and in the client library.
 */
static void
drop_forget(const char *qname)
{
	bool		isnew;
	QState	   *q = q_hash_entry(&qstates, "zklock queue states", sizeof(QState),
								 qname, false, &isnew);
	QSeq	   *qs = q_hash_entry(&qseqs, "zklock queues published", sizeof(QSeq),
								  qname, false, &isnew);

	if (q != NULL)
	{
		if (q->idle_since != 0)
			nidle_watched--;
		q->idle_since = 0;
		list_free_deep(q->waiters); /* only waiters whose entries are gone */
		q->waiters = NIL;
		list_free_deep(q->gone);
		q->gone = NIL;
		q_forget(q);
	}
	if (qs != NULL)
		(void) hash_search(qseqs, qs->name, HASH_REMOVE, NULL);
	q_tracked_update();
}

/* The drop's entry, while the drop is still its request; or NULL */
static ZkEntry *
drop_entry(Drop *d)
{
	ZkEntry    *e = zk_entry(d->idx);

	if (e->gen != d->gen || e->state == ZKE_FREE || e->outstanding == 0)
		return NULL;
	return e;
}

/* Answer the drop (token ZKQ_DROP_*, why the detail of a refusal) */
static void
drop_answer(Drop *d, ZkEntry *e, int64 token, const char *why)
{
	e->outstanding = 0;
	if (e->released)
		q_free_entry(e);
	else
	{
		e->token = token;
		e->state = ZKE_HELD;
		zk_finish(e, ZKO_GRANTED, 0, why);
	}
	if (d != NULL)
		pfree(d);
}

static void
drop_fail(Drop *d, ZkEntry *e, int rc, const char *what)
{
	char		msg[ZKLOCK_ERRMSG_MAX];

	e->outstanding = 0;
	if (e->released)
		q_free_entry(e);
	else
	{
		snprintf(msg, sizeof(msg), "%s: %s", what, zerror(rc));
		e->state = ZKE_DONE;
		zk_fail_rc(e, rc, d->qpath, ERRCODE_CONNECTION_FAILURE, msg);
	}
	pfree(d);
}

/*
 * Step 1, for a new request or one back from waiting: true when it goes on
 * (or was answered); false when it waits for the retry list.
 */
static bool
drop_may_go(ZkEntry *e, Drop *d)
{
	char		why[ZKLOCK_ERRMSG_MAX];
	int			use = drop_local_use(e, e->name, why, sizeof(why));

	if (use == DROP_UNUSED)
		return true;
	if (use == DROP_WAIT &&
		GetCurrentTimestamp() < TimestampTzPlusMilliseconds(e->requested_at,
															 zk_connect_timeout / 2))
	{
		/* back from the retry list once something has happened */
		e->outstanding = 0;
		e->state = ZKE_PENDING;
		if (d != NULL)
			pfree(d);
		zk_retry_later(e);
		return false;
	}
	drop_answer(d, e, ZKQ_DROP_IN_USE, why);
	return false;
}

/* Step 3: forget the queue here, and send the multi */
static void
drop_send(Drop *d, ZkEntry *e)
{
	int			n = 0;
	int			rc;

	if (!drop_may_go(e, d))
		return;
	drop_forget(e->name);
	if (d->has_entries)
		snprintf(d->paths[n++], ZK_PATH_MAX, "%s/entries", d->qpath);
	if (d->has_taken)
		snprintf(d->paths[n++], ZK_PATH_MAX, "%s/taken", d->qpath);
	if (d->has_next)
		snprintf(d->paths[n++], ZK_PATH_MAX, "%s/next", d->qpath);
	strlcpy(d->paths[n++], d->qpath, ZK_PATH_MAX);
	d->nops = n;
	for (n = 0; n < d->nops; n++)
		zoo_delete_op_init(&d->ops[n], d->paths[n], -1);
	rc = zoo_amulti(zk_zh, d->nops, d->ops, d->res, drop_multi_done, d);
	if (rc != ZOK)
		drop_fail(d, e, rc, "could not send the deletes");
}

/* Completion of the zoo_amulti sent by drop_send() */
static void
drop_multi_done(int rc, const void *data)
{
	Drop	   *d = (Drop *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = drop_entry(d);
		if (e == NULL)
			pfree(d);			/* answered already: the session ended */
		else if (rc == ZOK)
			drop_answer(d, e, ZKQ_DROP_DONE, NULL);
		else if ((rc == ZNOTEMPTY || rc == ZNONODE) && ++d->tries < ZKQ_DROP_TRIES)
		{
			/* changed since the reads (an item, a claim, gone): read again */
			e->answered_at = GetCurrentTimestamp();
			if (zk_session_usable())
				drop_read(d);
			else
				drop_fail(d, e, ZCONNECTIONLOSS, "could not read the queue again");
		}
		else if (rc == ZNOTEMPTY || rc == ZNONODE)
		{
			char		why[ZKLOCK_ERRMSG_MAX];

			snprintf(why, sizeof(why),
					 "Its nodes changed between the reads and the deletes %d times in a row",
					 d->tries);
			drop_answer(d, e, ZKQ_DROP_CHANGING, why);
		}
		else if (!zk_rc_definite(rc))
			drop_fail(d, e, rc,
					  "ZooKeeper's answer to the deletes was lost, so the queue may or may not have been dropped (call zk_queue_drop again to know)");
		else
			drop_fail(d, e, rc, "ZooKeeper refused to delete the queue's nodes");
	}
	COMPLETION_END(e);
}

/* Step 2: the reads are in */
static void
drop_read_done(Drop *d)
{
	ZkEntry    *e;
	char		why[ZKLOCK_ERRMSG_MAX];

	if (--d->pending > 0)
		return;
	e = drop_entry(d);
	if (e == NULL)
	{
		pfree(d);
		return;
	}
	if (e->released)
	{
		e->outstanding = 0;
		q_free_entry(e);
		pfree(d);
		return;
	}
	if (d->rc_children != ZOK && d->rc_children != ZNONODE)
	{
		drop_fail(d, e, d->rc_children, "could not read the queue's node");
		return;
	}
	if (d->rc_entries != ZOK && d->rc_entries != ZNONODE)
	{
		drop_fail(d, e, d->rc_entries, "could not read the queue's entries");
		return;
	}
	if (d->rc_taken != ZOK && d->rc_taken != ZNONODE)
	{
		drop_fail(d, e, d->rc_taken, "could not read the queue's claims");
		return;
	}
	if (d->rc_children == ZNONODE)
	{
		/* nothing there (or gone since our multi was refused: not ours) */
		drop_forget(e->name);
		drop_answer(d, e, ZKQ_DROP_ABSENT, NULL);
		return;
	}
	if (d->nforeign > 0)
	{
		snprintf(why, sizeof(why),
				 "The queue's node %s has %d %s that no queue of zklock or kazoo creates (\"%s\"%s)",
				 d->qpath, d->nforeign, d->nforeign == 1 ? "child" : "children",
				 d->foreign, d->nforeign > 1 ? " among them" : "");
		drop_answer(d, e, ZKQ_DROP_FOREIGN, why);
		return;
	}
	if (d->nentries > 0 || d->ntaken > 0)
	{
		if (d->nentries > 0)
			snprintf(why, sizeof(why), "It holds %d %s and %d %s (in ZooKeeper, from every server and client)",
					 d->nentries, d->nentries == 1 ? "item" : "items",
					 d->ntaken, d->ntaken == 1 ? "claim" : "claims");
		else
			snprintf(why, sizeof(why), "It holds %d %s on items already gone (in ZooKeeper, from a server or client that has not ended them)",
					 d->ntaken, d->ntaken == 1 ? "claim" : "claims");
		drop_answer(d, e, ZKQ_DROP_ITEMS, why);
		return;
	}
	drop_send(d, e);
}

/* Completion of the zoo_aget_children sent by drop_read() */
static void
drop_children_done(int rc, const struct String_vector *sv, const void *data)
{
	Drop	   *d = (Drop *) data;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		int			i;

		d->rc_children = rc;
		for (i = 0; rc == ZOK && sv != NULL && i < sv->count; i++)
		{
			const char *c = sv->data[i];

			if (strcmp(c, "entries") == 0)
				d->has_entries = true;
			else if (strcmp(c, "taken") == 0)
				d->has_taken = true;
			else if (strcmp(c, "next") == 0)
				d->has_next = true;
			else if (d->nforeign++ == 0)
				strlcpy(d->foreign, c, sizeof(d->foreign));
		}
		drop_read_done(d);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_aexists sent by drop_read() */
static void
drop_entries_done(int rc, const struct Stat *stat, const void *data)
{
	Drop	   *d = (Drop *) data;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		d->rc_entries = rc;
		if (rc == ZOK && stat != NULL)
			d->nentries = stat->numChildren;
		drop_read_done(d);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_aexists sent by drop_read() */
static void
drop_taken_done(int rc, const struct Stat *stat, const void *data)
{
	Drop	   *d = (Drop *) data;
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		d->rc_taken = rc;
		if (rc == ZOK && stat != NULL)
			d->ntaken = stat->numChildren;
		drop_read_done(d);
	}
	COMPLETION_END(none);
}

/* Step 2: read the queue node's children and entries' and taken's stats */
static void
drop_read(Drop *d)
{
	char		buf[ZK_PATH_MAX];
	int			rc;

	d->pending = 1;				/* until everything is sent */
	d->rc_children = d->rc_entries = d->rc_taken = ZCONNECTIONLOSS;
	d->nentries = d->ntaken = 0;
	d->has_entries = d->has_taken = d->has_next = false;
	d->nforeign = 0;
	d->foreign[0] = '\0';
	rc = zoo_aget_children(zk_zh, d->qpath, 0, drop_children_done, d);
	if (rc == ZOK)
		d->pending++;
	snprintf(buf, sizeof(buf), "%s/entries", d->qpath);
	if (rc == ZOK && (rc = zoo_aexists(zk_zh, buf, 0, drop_entries_done, d)) == ZOK)
		d->pending++;
	snprintf(buf, sizeof(buf), "%s/taken", d->qpath);
	if (rc == ZOK && (rc = zoo_aexists(zk_zh, buf, 0, drop_taken_done, d)) == ZOK)
		d->pending++;
	drop_read_done(d);
}

/* A drop request (qinfo_drive): step 1, then the reads */
static void
drop_start(ZkEntry *e)
{
	Drop	   *d;

	if (!drop_may_go(e, NULL))
		return;
	d = MemoryContextAllocZero(q_context(), sizeof(Drop));
	d->idx = zk_entry_index(e);
	d->gen = e->gen;
	zk_queue_path(e->name, d->qpath, sizeof(d->qpath));
	e->state = ZKE_CREATING;
	e->outstanding = 1;			/* until answered */
	drop_read(d);
}

/* ---- the steps of a one-off read ---- */

/*
 * Peek, purge: send the next reads or deletes of the listed entries, until
 * ZKQ_INFO_WINDOW are in flight; zk_queues: the next listings of queues.  Stops for good once everything is sent,
 * a send failed, the backend gave up (a cancelled purge deletes no more)
 * or the session is not usable.
 */
static void
info_send_more(Info *in)
{
	ZkEntry    *e = info_entry(in);

	if (e == NULL || e->released || in->failed || !zk_session_usable())
	{
		in->sending = false;
		if (!in->failed && e != NULL && !e->released)
			info_fail(in, ZCONNECTIONLOSS);
		return;
	}
	while (in->op == ZKQI_QUEUES && in->outstanding < ZKQ_INFO_WINDOW)
	{
		QueueCount *qc;
		char		qpath[ZK_PATH_MAX];

		if (in->next >= in->nnames)
		{
			in->sending = false;
			names_free(&in->names, &in->nnames);
			return;
		}
		qc = MemoryContextAllocZero(q_context(), sizeof(QueueCount));
		qc->info = in;
		strlcpy(qc->enc, in->names[in->next++], sizeof(qc->enc));
		qc->list.done = queue_count_finish;
		qc->list.owner = qc;
		snprintf(qpath, sizeof(qpath), "%s/queues/%s", zk_root, qc->enc);
		if (listing_send(&qc->list, qpath, NULL, NULL, false, false, true) == 0)
		{
			pfree(qc);
			info_fail(in, ZCONNECTIONLOSS);
			in->sending = false;
			return;
		}
		in->outstanding++;
	}
	while (in->op != ZKQI_QUEUES && in->outstanding < info_window(in))
	{
		InfoCall   *c;
		const char *node;
		int			rc;

		if (in->next >= in->list.nentries ||
			(in->op == ZKQI_PEEK && in->sent >= e->max_items))
		{
			in->sending = false;
			return;
		}
		node = in->list.entries[in->next++];
		if (listing_taken(&in->list, node))
			continue;
		c = info_call(in, node);
		snprintf(c->p1, sizeof(c->p1), "%s/entries/%s", in->qpath, c->node);
		if (in->op == ZKQI_PEEK)
			rc = zoo_aget(zk_zh, c->p1, 0, info_peek_done, c);
		else
		{
			/* claim, unclaim and delete at once: only if unclaimed */
			snprintf(c->p2, sizeof(c->p2), "%s/taken/%s", in->qpath, c->node);
			zoo_create_op_init(&c->ops[0], c->p2, NULL, -1, zk_acl(),
							   ZOO_EPHEMERAL, NULL, 0);
			zoo_delete_op_init(&c->ops[1], c->p2, -1);
			zoo_delete_op_init(&c->ops[2], c->p1, -1);
			rc = zoo_amulti(zk_zh, 3, c->ops, c->res, info_purge_done, c);
		}
		if (rc != ZOK)
		{
			pfree(c);
			info_fail(in, rc);
			in->sending = false;
			return;
		}
		in->outstanding++;
		in->sent++;
	}
}

/*
 * Called when everything sent for the current step has answered: decide
 * the next step or finish.  Steps: 0 start, 1 listed, 2 done.
 */
static void
info_step(Info *in)
{
	ZkEntry    *e = info_entry(in);
	int			step;

	if (e == NULL || in->failed || e->released || !zk_session_usable())
	{
		if (!in->failed && (e == NULL || !e->released))
			info_fail(in, ZCONNECTIONLOSS);
		info_finish(in);
		return;
	}
	step = e->errors;			/* reused as the step counter */
	e->errors++;
	switch (in->op)
	{
		case ZKQI_LENGTH:
			if (step == 0)
				info_send_listing(in, in->qpath);
			else
				in->count = listing_unclaimed(&in->list, NULL);
			break;
		case ZKQI_PEEK:
		case ZKQI_PURGE:
			if (step == 0)
				info_send_listing(in, in->qpath);
			else if (step == 1)
			{
				in->sending = true;
				in->next = 0;
				info_send_more(in);
			}
			break;
		case ZKQI_QUEUES:
			if (step == 0)
			{
				char		buf[ZK_PATH_MAX];
				InfoCall   *c = info_call(in, NULL);

				snprintf(buf, sizeof(buf), "%s/queues", zk_root);
				if (zoo_aget_children(zk_zh, buf, 0, info_queues_listed, c) == ZOK)
					in->outstanding++;
				else
				{
					pfree(c);
					info_fail(in, ZCONNECTIONLOSS);
				}
			}
			break;
		case ZKQI_RELEASE_CLUSTER:
			if (step == 0)
			{
				Scan	   *s;

				s = MemoryContextAllocZero(q_context(), sizeof(Scan));
				if (e->fxid == GetSystemIdentifier())
				{
					s->own_release = true;
					resolve_running = true;
				}
				s->sysid = e->fxid;
				s->release_all = true;
				s->info = in;
				/* a run of this cluster: its 16 hex digits as the name */
				if (e->name[0] != '\0' && !parse_u64(e->name, 16, &s->run))
					s->run = 0;
				in->outstanding += 2;	/* one answered by scan_finish */
				release_check_live(s);
				info_call_done(in);
				return;
			}
			break;
	}
	if (in->outstanding == 0)
	{
		if (in->failed || step >= 1 || in->op == ZKQI_QUEUES ||
			in->op == ZKQI_RELEASE_CLUSTER)
			info_finish(in);
		else
			info_step(in);
	}
}

static void
qinfo_drive(ZkEntry *e)
{
	Info	   *in;

	if (e->outstanding > 0)
		return;					/* in flight: the last answer finishes it */
	if (e->released)
	{
		q_free_entry(e);
		return;
	}
	if (e->state != ZKE_PENDING)
		return;
	if (!zk_session_usable() ||
		(e->qop == ZKQI_RELEASE_CLUSTER && e->fxid == GetSystemIdentifier() &&
		 (resolve_running || !zk_history_ready())))
	{
		/* a run of this cluster: not during a settling pass (one survey) */
		zk_retry_later(e);
		return;
	}
	if (e->qop == ZKQI_DROP)
	{
		drop_start(e);
		return;
	}
	in = MemoryContextAllocZero(q_context(), sizeof(Info));
	in->idx = zk_entry_index(e);
	in->gen = e->gen;
	in->op = e->qop;
	if (in->op == ZKQI_PEEK || in->op == ZKQI_QUEUES)
		in->cap = (Size) e->fxid;	/* the backend's zklock.max_answer_bytes */
	if (e->name[0])
		zk_queue_path(e->name, in->qpath, sizeof(in->qpath));
	e->state = ZKE_CREATING;
	e->errors = 0;
	e->outstanding = 1;			/* until info_finish */
	info_step(in);
}

static void
qinfo_drive_failed(ZkEntry *e)
{
	if (e->released && e->outstanding == 0)
		q_free_entry(e);
	else if (e->outstanding == 0)
	{
		e->state = ZKE_DONE;
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "the queue request failed in the zklock worker");
	}
}

static void
qinfo_session_lost(ZkEntry *e, const char *why)
{
	/* the completions were called with the session's end: nothing waits */
	e->outstanding = 0;
	if (e->released)
		q_free_entry(e);
	else if (e->state != ZKE_HELD && e->outcome == ZKO_NONE)
	{
		e->state = ZKE_DONE;
		zk_fail(e, ERRCODE_CONNECTION_FAILURE, why);
	}
}

/* ------------------------------------------------------------------------
 * The table entries
 * ------------------------------------------------------------------------
 */

static ZkLogLimit q_giveup_log;

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
		given_up_add(e->fxid);	/* its nodes are the settling pass's */
		if (zk_log_limited(&q_giveup_log, "gave up a queue request after repeated errors"))
			ereport(WARNING,
					(errmsg("zklock: gave up a queue request after repeated errors"),
					 errdetail("The worker settles its claims and transaction nodes from the commit log when it next starts.")));
		q_free_entry(e);
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
	if (e->delete_inflight)
		e->in_doubt = true;
	e->create_inflight = e->delete_inflight = false;
	e->outstanding = 0;
	if (e->kind == ZKK_QCLAIM && e->state == ZKE_WAITING)
		e->state = ZKE_CREATING;
	if (e->kind == ZKK_QCLAIM && DsaPointerIsValid(e->claims))
	{
		/* a give-back's fate is unknown: ours or not, read it again */
		ZkClaimRec *c = claims_of(e);
		int			i;

		for (i = 0; i < e->max_items; i++)
			if (c[i].status == ZKQC_RETURN)
				c[i].status = ZKQC_DOUBT;
	}
	zk_retry_later(e);
}

static void
q_session_reset(void)
{
	HASH_SEQ_STATUS st;
	QState	   *q;

	zk_history_session_reset();

	if (qstates != NULL)
	{
		hash_seq_init(&st, qstates);
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
			q->verifying = q->verified = false;
			q->ncand = 0;
			q->idle_since = 0;
			q->unflushed_wait = false;
			q->pipe_open = false;
			q_rest_free(q);
			listing_free(&q->list);
			q->list.rc_taken = ZCONNECTIONLOSS;	/* list taken first */
			q->taken_others = 0;
			list_free_deep(q->gone);
			q->gone = NIL;
		}
	}
	if (qseqs != NULL)
	{
		QSeq	   *qs;

		hash_seq_init(&st, qseqs);
		while ((qs = hash_seq_search(&st)) != NULL)
		{
			qs->parents_ok = false;
			qs->seq_fetching = false;
			qs->seq_known = false;
			if (!qs->seq_answered)
				qs->seq_probed = false;
		}
	}
	/* publications waiting for a counter: their entries go on anew */
	while (pub_waits != NIL)
	{
		PubOp	   *po = linitial(pub_waits);

		pub_waits = list_delete_first(pub_waits);
		po->waiting = false;
		if (po->scan != NULL)
			scan_done_one(po->scan, false, 0);
		pubop_free(po);
	}
	nidle_watched = 0;
	nunflushed_wait = 0;
	txns_parent_ok = false;
	resolve_running = false;
	resolve_needed = true;
}

/*
 * Every queue lists again before it trusts what it knew; those with waiters
 * and no round under way, at once.
 */
static void
q_unsettle_all(void)
{
	HASH_SEQ_STATUS st;
	QState	   *q;
	List	   *kick = NIL;
	ListCell   *lc;

	if (qstates == NULL)
		return;
	hash_seq_init(&st, qstates);
	while ((q = hash_seq_search(&st)) != NULL)
	{
		q->settled = false;
		q->rest_exact = false;
		q->again = true;
		if (q->waiters != NIL && q->list.pending == 0 && q->inflight == 0)
			kick = lappend(kick, q);
	}
	foreach(lc, kick)
		q_kick((QState *) lfirst(lc));
	list_free(kick);
}

/*
 * Called every turn while the session is usable: adopt the entries of a
 * previous worker (they survive it in shared memory), and settle what a
 * crash left behind once this server is a primary.
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
		q_unsettle_all();
	}
	if (!entries_adopted)
	{
		int			i;

		entries_adopted = true;
		for (i = 0; i < zk_ctl->max_entries; i++)
		{
			ZkEntry    *e = zk_entry(i);

			if (e->state == ZKE_FREE || e->queued ||
				(e->kind != ZKK_QPUB && e->kind != ZKK_QCLAIM && e->kind != ZKK_QINFO))
				continue;
			if (e->kind == ZKK_QINFO)
			{
				qinfo_session_lost(e, "The zklock worker restarted");
				continue;
			}
			qdurable_session_lost(e, NULL);
		}
	}
	q_unwatch_idle();
	q_resume_unflushed();
	q_forget_idle();
	pub_blocked_tick();
	in_recovery = RecoveryInProgress();
	if (was_in_recovery && !in_recovery)
		resolve_needed = true;	/* started, or promoted */
	was_in_recovery = in_recovery;
	zk_history_turn();
	if (resolve_again_at != 0 && !resolve_running &&
		GetCurrentTimestamp() >= resolve_again_at)
	{
		/* a publication of the last pass was refused: try it again */
		resolve_again_at = 0;
		resolve_needed = true;
	}
	if (resolve_needed && !resolve_running && !in_recovery && zk_history_ready() &&
		(resolve_not_before == 0 || GetCurrentTimestamp() >= resolve_not_before))
	{
		Scan	   *s = MemoryContextAllocZero(q_context(), sizeof(Scan));

		s->sysid = GetSystemIdentifier();
		resolve_needed = false;
		zk_ctl->pubs_blocked_resolve = 0;	/* this pass counts them anew */
		resolve_running = true;
		(void) scan_start(s);
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

const ZkKindOps zk_qpub_ops = {
	.drive = qpub_drive,
	.drive_failed = qdurable_drive_failed,
	.session_lost = qdurable_session_lost,
};

const ZkKindOps zk_qclaim_ops = {
	.drive = qclaim_drive,
	.drive_failed = qdurable_drive_failed,
	.session_lost = qdurable_session_lost,
};

const ZkKindOps zk_qinfo_ops = {
	.drive = qinfo_drive,
	.drive_failed = qinfo_drive_failed,
	.session_lost = qinfo_session_lost,
};
