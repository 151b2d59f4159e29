/*-------------------------------------------------------------------------
 *
 * queue_int.h
 *	  The queue recipe's worker half: the types and functions its files
 *	  share (queue_worker.c and README list them).  Worker only: backends see
 *	  queue.h.  Nothing here is exported from the shared object under
 *	  another prefix than zk_.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_QUEUE_INT_H
#define ZKLOCK_QUEUE_INT_H

#include "recipe.h"
#include "history.h"
#include "queue.h"
#include "trust.h"
#include "nodes/pg_list.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

/* A dequeue waiting in its queue's QState (arrival order) */
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

/*
 * A round's open window (queue_claim.c, "How much one dequeue claims"): a
 * dequeue that may claim more than its first window takes more from the
 * round's rest as its reads answer, before any waiter behind it.
 *
 *	 QPIPE_NONE	  --q_distribute stops at a full window-->	QPIPE_OPEN
 *	 QPIPE_OPEN	  --the window's top-ups end (done, full of
 *					answers, the dequeue gone), or the
 *					session ends-->							QPIPE_CLOSED
 *	 any		  --zk_q_round_done-->						QPIPE_NONE
 *
 * QPIPE_OPEN and QPIPE_CLOSED both say that this round had a window: the
 * waiters behind it were offered nothing yet.
 */
typedef enum QPipe
{
	QPIPE_NONE = 0,
	QPIPE_OPEN,
	QPIPE_CLOSED
} QPipe;

/*
 * The check that a long queue's rest is still exact ("A long queue" in
 * queue_consume.c): one exists of entries instead of a listing.
 *
 *	 QVERIFY_NONE	   --zk_q_kick sends the exists-->		QVERIFY_ASKING
 *	 QVERIFY_ASKING	   --entries' child version grew by our
 *						 own consumes only-->				QVERIFY_CONFIRMED
 *	 QVERIFY_ASKING	   --anything else-->					QVERIFY_NONE
 *	 QVERIFY_CONFIRMED --the next round uses the rest-->	QVERIFY_NONE
 *	 any			   --the session ends-->				QVERIFY_NONE
 *
 * While QVERIFY_ASKING, no round starts (like a listing in flight).
 */
typedef enum QVerify
{
	QVERIFY_NONE = 0,
	QVERIFY_ASKING,
	QVERIFY_CONFIRMED
} QVerify;

/*
 * What this worker knows of a queue's dead-letter policy (queue_policy.c):
 *
 *	 QPOL_UNKNOWN --a round sends the reads-->			QPOL_READING
 *	 QPOL_READING --both answered-->					QPOL_KNOWN
 *	 QPOL_READING --a read failed-->					QPOL_UNKNOWN
 *	 QPOL_KNOWN	  --a claim found the node's version
 *					changed, a policy set here, the
 *					session ends-->						QPOL_UNKNOWN
 *
 * A round hands out items only while QPOL_KNOWN: each claim checks
 * policy_version (queue_claim.c, "Dead letters").
 */
typedef enum QPolicy
{
	QPOL_UNKNOWN = 0,
	QPOL_READING,
	QPOL_KNOWN
} QPolicy;

/*
 * What this worker knows of a queue's delayed items (queue_delay.c):
 *
 *	 QDELAY_UNKNOWN --a round or the tick lists delayed-->	QDELAY_LISTING
 *	 QDELAY_LISTING --answered-->							QDELAY_KNOWN
 *	 QDELAY_KNOWN	--its watch fires, an item is due-->	QDELAY_UNKNOWN
 */
typedef enum QDelay
{
	QDELAY_UNKNOWN = 0,
	QDELAY_LISTING,
	QDELAY_KNOWN
} QDelay;

/*
 * A children watch that a queue keeps while it is wanted: on taken
 * (QState.twatch, queue_consume.c) or on delayed (QState.dwatch,
 * queue_delay.c).  A listing sets it only when it is wanted; being wanted
 * outlives each watch, so that the next listing sets it again once it has
 * fired; a watch no longer wanted stays set until it fires or is removed.
 *
 *	 QWATCH_NONE	--wanted-->									QWATCH_WANTED
 *	 QWATCH_WANTED	--a listing sends it-->						QWATCH_SET
 *	 QWATCH_SET		--it fires, its listing fails, it is
 *					  removed (q_unwatch)-->						QWATCH_WANTED
 *	 QWATCH_SET		--no longer wanted-->							QWATCH_KEPT
 *	 QWATCH_KEPT	--wanted again (delayed only)-->				QWATCH_SET
 *	 QWATCH_KEPT	--it fires, its listing fails, it is removed-->	QWATCH_NONE
 *	 QWATCH_WANTED	--no longer wanted-->							QWATCH_NONE
 *
 * taken: wanted when a round ends with items claimed by others in sight
 * and no watch set (zk_q_round_done), no longer when the queue goes idle
 * (zk_q_idle); sent by zk_q_kick's listing for a blocking waiter; the
 * session's end (q_session_reset) makes it QWATCH_NONE.
 * delayed: wanted or not at each round, as a blocking waiter is there or
 * not (zk_q_delay_round), no longer when the queue goes idle; sent by
 * delay_list; the session's end (zk_q_delay_reset) is as its firing: still
 * wanted, it is set again by the next listing.
 *
 * The entries watch (QState.ewatch) is a plain boolean: whether it is
 * wanted is worked out afresh by each round (zk_q_kick), never kept.
 */
typedef enum QWatch
{
	QWATCH_NONE = 0,
	QWATCH_WANTED,				/* wanted, not set: the next listing sets it */
	QWATCH_SET,					/* set (or sent), and wanted */
	QWATCH_KEPT					/* set (or sent), no longer wanted */
} QWatch;

/* is a watch set (or sent)?  wanted? */
#define QWATCH_IS_SET(w)	((w) == QWATCH_SET || (w) == QWATCH_KEPT)
#define QWATCH_IS_WANTED(w) ((w) == QWATCH_WANTED || (w) == QWATCH_SET)

/* the watch went: fired, its listing failed, removed */
static inline QWatch
qwatch_gone(QWatch w)
{
	return w == QWATCH_SET ? QWATCH_WANTED : w == QWATCH_KEPT ? QWATCH_NONE : w;
}

/* the watch is wanted from now on, or no longer */
static inline QWatch
qwatch_want(QWatch w, bool want)
{
	if (QWATCH_IS_SET(w))
		return want ? QWATCH_SET : QWATCH_KEPT;
	return want ? QWATCH_WANTED : QWATCH_NONE;
}

/* what a queue node's data holds (zk_q_policy_parse) */
typedef enum QPolicyData
{
	QPOLICY_NONE = 0,			/* nothing: no policy */
	QPOLICY_SET,				/* a policy */
	QPOLICY_FOREIGN				/* something else: not zklock's */
} QPolicyData;

#define ZKQ_POLICY_DATA_MAX		4096	/* a policy's JSON, at most */

/*
 * What this worker knows of a queue it serves dequeues from: its waiters,
 * its last listing and what that left, its watches.  Made by zk_q_state,
 * forgotten when idle ("Forgetting idle queues" in queue_consume.c).
 */
typedef struct QState
{
	char		name[ZKLOCK_QNAME_MAX + 1];	/* key: UTF-8 queue name */
	char		path[ZK_PATH_MAX];	/* <root>/queues/<encoded> */
	uint64		acl_session;	/* the session its ACLs were looked at in */
	List	   *waiters;		/* Waiter *, arrival order */
	bool		parents_ok;
	Listing		list;			/* the last listing, or the one in flight */
	bool		again;			/* something changed: list again */
	bool		lost_race;		/* a candidate was taken under us */
	bool		ewatch;			/* children watch on entries set/sent */
	QWatch		twatch;			/* children watch on taken */
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
								 * (freed, NULL; zk_q_rest_compact) */
	QPipe		pipe;			/* a dequeue's window this round: */
	uint32		pipe_idx;		/* ... it takes more from rest as its reads */
	uint32		pipe_gen;		/* answer ("How much one dequeue claims") */
	/*
	 * What rest is known to be.  Two facts, not one state: settled rests on
	 * the watches (and lets others' claims in when taken is watched),
	 * rest_exact on entries' child version (and none of others' claims).
	 * Each listing sets both afresh, either, both or neither; the entries
	 * watch firing (our own consumes fire it) ends settled but not
	 * rest_exact, which the exists of entries may then confirm; and
	 * zk_q_kick reads rest_exact also when settled (a round that cannot use
	 * rest at once).
	 */
	bool		settled;		/* ... and they are all there is: the entries
								 * watch has not fired since that listing,
								 * nothing was released or lost here */
	bool		rest_exact;		/* ... or all there is unless entries changed
								 * other than by our own consumes: nothing
								 * released, lost or claimed by others here
								 * since that listing ("A long queue") */
	int64		own_edeletes;	/* entries deleted by our consume multis */
	QVerify		verify;			/* the exists of entries for rest_exact */
	int			verify_skip;	/* rounds to list without asking */
	int			verify_backoff; /* ... after the next miss */
	TimestampTz idle_since;		/* no waiters since, watches kept; or 0 */
	bool		quiet;			/* unused since the last forget sweep */
	ZkProgress	progress;		/* rounds started within one dispatch */
	uint32		rounds;			/* rounds started (zk_q_kick) */
	/* the queue's dead-letter policy (queue_policy.c) */
	QPolicy		policy;
	uint32		policy_seq;		/* reads sent: only the last one counts */
	int32		policy_version; /* the queue node's data version */
	int64		policy_czxid;	/* entries' czxid when it was read: a queue
								 * dropped and made again (its version
								 * counted anew) is read again */
	int			max_attempts;	/* 0: none (or not believed) */
	char		dlq_path[ZK_PATH_MAX];	/* the dead-letter queue's node */
	TimestampTz dl_blocked_until;	/* moves refused: hand items out till then */
	int			dl_nonode;		/* moves that found no dead-letter queue */
	/* its delayed items (queue_delay.c) */
	QDelay		dstate;
	uint32		dseq;			/* listings sent: only the last one counts */
	QWatch		dwatch;			/* children watch on delayed (wanted: someone
								 * waits for an item) */
	int			dmoving;		/* moves into entries in flight */
	int64		next_due_ms;	/* the earliest not due yet (Unix ms), or 0 */
	int			ndelayed;		/* children of delayed at the last listing */
	uint64		dmoved;			/* items this worker moved into entries */
	/* its message groups (queue_delay.c, "Message groups") */
	char		gresume[ZKQ_GROUP_ENC_MAX + 1];	/* where the next look at them
												 * starts: "" the first */
	bool		gstirred;		/* a change since the look from the first */
} QState;

/*
 * How this cluster names a queue's items (queue_naming.c, "Past the end of
 * the counter").  A worker that meets a queue asks once whether its next
 * node exists before it publishes there:
 *
 *	 QSEQ_UNASKED  --zk_q_seq_probe sends the exists-->	QSEQ_ASKING
 *	 QSEQ_ASKING   --ZNONODE-->							QSEQ_COUNTER
 *	 QSEQ_ASKING   --an error, or the session ends-->	QSEQ_UNASKED (ask again)
 *	 any state	   --next exists, or entries' counter ran
 *					 out (seq_switch)-->					QSEQ_EXPLICIT
 *
 * QSEQ_COUNTER: items are named by ZooKeeper's sequence counter of entries.
 * QSEQ_EXPLICIT: for good (until the QSeq is forgotten), items are named
 * from <queue>/next, whose value is tracked by QSeqNext.
 */
typedef enum QSeqNaming
{
	QSEQ_UNASKED = 0,
	QSEQ_ASKING,
	QSEQ_COUNTER,
	QSEQ_EXPLICIT
} QSeqNaming;

/*
 * What this worker knows of <queue>/next (seq_next, seq_exists,
 * seq_version), in QSEQ_EXPLICIT:
 *
 *	 QNEXT_UNKNOWN	--a read of next and a listing of entries and taken
 *					  answered (seq_fetch)-->				QNEXT_READ
 *	 QNEXT_READ, QNEXT_ADVANCED --a publication that set next
 *					  went through (pub_note_names)-->		QNEXT_ADVANCED
 *	 any	--a naming conflict, the switch, a value near the end of the
 *			  ten digits that was not just read, the session ends-->
 *															QNEXT_UNKNOWN
 *
 * QNEXT_READ is believed even near the end of the ten digits (the listing
 * decided it); QNEXT_ADVANCED there is read again first.
 */
typedef enum QSeqNext
{
	QNEXT_UNKNOWN = 0,
	QNEXT_READ,
	QNEXT_ADVANCED
} QSeqNext;

/*
 * A queue this cluster publishes into: whether its parents are known to
 * exist, and how its items are named (see QSeqNaming)
 */
typedef struct QSeq
{
	char		name[ZKLOCK_QNAME_MAX + 1];	/* key: UTF-8 queue name */
	bool		parents_ok;		/* entries and taken exist, as far as known */
	QSeqNaming	naming;			/* counter or next (probe in flight) */
	QSeqNext	next;			/* what seq_next and friends are worth */
	bool		fetching;		/* a seq_fetch is in flight */
	int64		seq_next;		/* the next free number */
	bool		seq_exists;		/* next exists (as last seen) */
	int32		seq_version;	/* ... and its version */
	int			refs;			/* PubOp ops that point here */
	bool		quiet;			/* unused since the last forget sweep */
} QSeq;

/*
 * A queue whose last waiter is served keeps its watches for this long: a
 * consumer that comes back at once (the usual loop) then finds them armed
 * instead of paying a removal and a new watch per item.
 */
#define Q_UNWATCH_IDLE_MS	500
extern int	zk_q_nidle_watched;	/* queues with idle_since set */
extern int	zk_q_nunflushed_wait;	/* queues with unflushed_wait set */

/*
 * What a publication the settling pass sent calls when it is done (ok: it
 * was applied or refused for good; removed: its transaction node went)
 */
struct Scan;
typedef void (*zk_q_scan_fn) (struct Scan *s, bool ok, int64 removed);

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
	struct Scan *scan;			/* the settling pass's, or NULL ... */
	zk_q_scan_fn scan_done;		/* ... and what to tell it when done */
	bool		ensure;			/* send the parents' creates first */
	bool		keep;			/* keep the node against a late create
								 * (queue_publish.c, "Late creates") */
	ZkTxnKept	kept;			/* ... its data then */
	char		kept_child[ZK_PATH_MAX];
	bool		waiting;		/* on zk_q_pub_waits, for a queue's counter */
	int			tries;			/* sent again after a naming conflict */
	int			skips;			/* sent again after an op found done */
	/* the probe pass ("Ops found done"), while it runs */
	bool		probe_failed;	/* a probe's answer was lost */
	int			probe_next;		/* the next op to probe */
	int			probe_out;		/* probes in flight */
	uint64		probe_session;	/* the session they were sent in */
} PubOp;

/* what each op of a publishing multi is (PubOp.opkind) */
typedef enum PubOpKind
{
	PUB_OTHER = 0,				/* the transaction node, a recipe's op */
	PUB_SEQ_ITEM,				/* an item, named by entries' counter */
	PUB_COUNTER,				/* <queue>/next: set (or create) */
	PUB_NAMED_ITEM,				/* an item, named from <queue>/next */
	PUB_KEPT,					/* the node kept, and its child */
	PUB_DELAYED_ITEM			/* a delayed item, under <queue>/delayed */
} PubOpKind;

/* May a dequeue claim one more item now?  (zk_q_claim_window) */
typedef enum ClaimWindow
{
	CLAIM_SEND,					/* one more attempt may go */
	CLAIM_FULL,					/* not before reads in flight answer */
	CLAIM_DONE					/* the cap is reached, or the dsa is full */
} ClaimWindow;

/*
 * Keep the items e claimed in its queue's set of this cluster's held
 * claims while its owner holds them (held), or take them out once it has
 * let go: its end is then sent ahead of any new listing.  A listing skips
 * them without listing taken for them (zk_q_kick).  Only a hint: a claim it
 * misses (say, of a previous worker) makes an attempt fail, which lists
 * taken again.
 */
typedef struct HeldNode
{
	char		node[ZKQ_NODE_MAX];
	int			count;
} HeldNode;

/* A one-off read in flight (ZKK_QINFO, queue_read.c) */
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
	char		guard[ZK_PATH_MAX];	/* purge: its node ("Late purges") */
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
	/* bounded fan-out (issue 35): the child counts read before listing */
	bool		counted;		/* the counts were asked for */
	bool		by_stat;		/* length: too many to list, from the counts */
	int32		stat_entries;
	int32		stat_taken;
	char		limit[ZKLOCK_ERRMSG_MAX];	/* over zklock.max_children */
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
 * The scan of a cluster's claims and transaction nodes: the settling pass
 * of this cluster's, or zk_queue_release_cluster's of another (queue_settle.c)
 */
typedef struct Scan
{
	uint64		sysid;
	bool		release_all;	/* zk_queue_release_cluster: drop everything */
	uint64		run;			/* ... of this run only (0: every run) */
	bool		own_release;	/* a run of this cluster: holds zk_q_resolve_running */
	Info	   *info;			/* release_all: the request, and how to */
	void		(*info_done) (Info *in);	/* answer it (queue_read.c's) */
	void		(*info_fail) (Info *in, int rc);
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
	bool		tanswered;		/* a read of one has answered */
	Size		tlargest;		/* the largest read so far (scan_txn_window) */
	int64		tinvalid;		/* nodes holding no valid items */
	int64		tunknown;		/* nodes of transactions not in history */
	int64		tforged;		/* nodes whose MAC does not verify */
	int64		treplayed;		/* this run's, created again ("Replayed") */
} Scan;

/* the numbers this cluster names items with ("Past the end of the counter") */
#define ZKQ_SEQ_FIRST		INT64CONST(2147483648)	/* 2^31 */
#define ZKQ_SEQ_LAST		INT64CONST(9999999999)	/* ten digits */
#define ZKQ_SEQ_SWITCH		INT64CONST(2147418112)	/* 2^31 - 2^16 */
#define ZKQ_SEQ_SLACK		INT64CONST(1048576)	/* next beyond LAST - this:
													 * not believed */
#define ZKQ_NAMING_TRIES	50

/*
 * An entry whose next try is paced (queue_state.c): a publication ZooKeeper
 * refuses or a drop elsewhere keeps failing (queue_publish.c), a consume or
 * release ZooKeeper refuses (queue_claim.c).  Each try waits interval_ms,
 * twice as long as the last up to a bound (zk_q_paced_schedule); the list's
 * tick (zk_q_paced_tick, every usable turn) drives those due.
 */
typedef struct QPaced
{
	ZkEntryRef	ref;			/* its entry (first) */
	TimestampTz due;
	int			interval_ms;
	bool		quiet;			/* a publication paced, not refused */
} QPaced;

/* queue_state.c */
extern QPaced *zk_q_paced_schedule(List **list, ZkEntry *e, bool quiet,
								   int first_ms, int max_ms);
extern void zk_q_paced_forget(List **list, ZkEntry *e);
extern void zk_q_paced_tick(List **list, int kind,
							bool (*wanted) (ZkEntry *e, QPaced *p),
							bool (*busy) (ZkEntry *e),
							void (*drive) (ZkEntry *e));
extern HTAB *zk_qseqs;
extern HTAB *zk_qstates;
extern bool zk_q_resolve_needed;
extern bool zk_q_resolve_running;
extern TimestampTz zk_q_resolve_not_before;
extern MemoryContext zk_q_context(void);
extern ZkEntry *zk_q_entry_of(uint32 idx, uint32 gen);
extern ZkEntry *zk_q_request_of(uint32 idx, uint32 gen);
extern void *zk_q_hash_entry(HTAB **h, const char *what, Size entrysize,
							 const char *name, bool create, bool *isnew);
extern void zk_q_tracked_update(void);
extern QState *zk_q_state(const char *name, bool create);
extern QSeq *zk_q_seq(const char *name);
extern void zk_q_seq_path(const QSeq *q, const char *child, char *out,
						  size_t outlen);
extern bool zk_q_parents_known(const char *qname);
extern void zk_q_parents_remember(const char *qname, bool ok);
extern void zk_q_send_ensure_path(const char *path);
extern void zk_q_send_ensure_queue(const char *qpath);
extern ZkClaimRec *zk_q_claims_of(ZkEntry *e);
extern void zk_q_claim_token_of(ZkEntry *e, char *out, size_t outlen);
extern void zk_q_stats_add(const char *name, uint64 handed_out, uint64 consumed,
						   uint64 released, uint64 dead_lettered);
extern void zk_q_msg_fill(ZkMsgRec *m, const char *node, const char *value,
						  Size len, const struct Stat *stat);
extern bool zk_q_parse_u64(const char *s, int base, uint64 *v);
extern int zk_q_cmp_names(const void *a, const void *b);
extern void zk_q_listing_free(Listing *l);
extern bool zk_q_listing_taken(Listing *l, const char *node);
extern int zk_q_listing_unclaimed(Listing *l, char **cand);
extern int	zk_q_listing_send(Listing *l, const char *qpath,
							  watcher_fn watcher, void *wctx,
							  bool watch_entries, bool watch_taken,
							  bool list_taken);
extern void zk_q_free_entry(ZkEntry *e);
extern void zk_q_count_held(ZkEntry *e, bool held);
extern void zk_q_given_up_add(uint64 fxid);
extern int	zk_q_given_up_find(uint64 fxid);
extern void zk_q_given_up_remove(uint64 fxid);

/* queue_publish.c */
extern bool zk_q_txns_parent_ok;
extern List *zk_q_pub_waits;
extern bool zk_q_send_publish(const char *blob, const char *tpath, uint32 idx,
							  uint32 gen, struct Scan *scan, zk_q_scan_fn scan_done,
							  bool ensure, bool keep);
extern TimestampTz zk_q_resolve_again_at;
extern bool zk_q_history_gate(ZkEntry *e);
extern bool zk_q_pub_send(PubOp *po);
extern void zk_q_pubop_free(PubOp *po);
extern void zk_q_pub_blocked_tick(void);
extern void zk_q_end_blocked_tick(void);
extern void zk_qpub_drive(ZkEntry *e);

/* queue_policy.c */
extern QPolicyData zk_q_policy_parse(const char *data, int len, int *max_attempts,
									 char *dlq, size_t dlqlen);
extern void zk_q_policy_dlq_qname(const char *qname, const char *dlq, char *out,
								  size_t outlen);
extern void zk_q_policy_read(QState *q);
extern void zk_q_policy_set_start(ZkEntry *e);

/* queue_move.c */
extern void zk_q_move_start(ZkEntry *e);

/* queue_nskept.c */
/* what a publication's check calls when its last answer is in (rc: ZOK or why) */
typedef void (*zk_q_answered_fn) (ZkEntry *e, int rc);
extern void zk_q_ns_check(ZkEntry *e, const char *ns, int adding,
						  zk_q_answered_fn answered);
extern void zk_q_ns_unreserve(ZkEntry *e);

/* queue_naming.c; what a read of a queue's naming calls with its answer */
typedef void (*zk_q_naming_fn) (bool ok);
extern bool zk_q_seq_fetch(QSeq *q, zk_q_naming_fn done);
extern void zk_q_seq_probe(QSeq *q, zk_q_naming_fn done);
extern void zk_q_pub_note_names(PubOp *po);
extern bool zk_q_pub_naming_conflict(PubOp *po);
extern const char *zk_q_seq_exhausted(PubOp *po);

/* queue_claim.c */
extern int zk_q_free_slot(ZkEntry *e);
extern bool zk_q_send_attempt(QState *q, ZkEntry *e, int slot,
							  const char *node);
extern ClaimWindow zk_q_claim_window(ZkEntry *e);
extern void zk_q_rest_compact(QState *q);
extern void zk_q_claim_fail_refused(ZkEntry *e);
extern bool zk_q_send_doubt_checks(ZkEntry *e, QState *q);
extern void zk_q_send_end(ZkEntry *e, QState *q);
extern char *zk_q_dl_data(const char *qname, const char *node, const char *value,
						  int value_len, const struct Stat *stat, int32 attempts,
						  int *dlen);

/*
 * What a dequeue's claims hand back up to the rounds above them
 * (queue_consume.c fills it in at the worker's start, zk_q_rounds_init):
 * the last attempt of a round to end ends the round; an end or give-back
 * that put items back kicks the queue's waiters.  The claims never call
 * the rounds by name.
 */
typedef struct QRoundHooks
{
	void		(*round_done) (QState *q);
	void		(*kick) (QState *q);
} QRoundHooks;
extern QRoundHooks zk_q_round_hooks;

/* queue_delay.c */
extern void zk_q_delay_round(QState *q, bool watch);
extern void zk_q_delay_tick(void);
extern void zk_q_delay_reset(QState *q);
extern void zk_q_groups_reset(void);

/* queue_consume.c */
extern void zk_q_rounds_init(void);
extern void zk_qclaim_drive(ZkEntry *e);
extern void zk_q_idle(QState *q);
extern void zk_q_unwatch_idle(void);
extern void zk_q_forget(QState *q);
extern void zk_q_forget_idle(void);
extern ZkEntry *zk_q_waiter_entry(Waiter *w);
extern void zk_q_kick(QState *q);
extern void zk_q_unsettle_all(void);
extern void zk_q_grant(ZkEntry *e);
extern void zk_q_count_slots(ZkEntry *e, int *held, int *doubt);
extern void zk_q_rest_free(QState *q);
extern void zk_q_resume_unflushed(void);
extern void zk_q_round_done(QState *q);

/* queue_read.c */
extern char ** zk_q_names_copy(const struct String_vector *sv, int *n);
extern void zk_q_names_free(char ***names, int *n);
extern void zk_q_info_call_done(Info *in);
extern void zk_q_info_fail(Info *in, int rc);
extern void zk_qinfo_drive(ZkEntry *e);
extern void zk_qinfo_drive_failed(ZkEntry *e);
extern void zk_qinfo_session_lost(ZkEntry *e, const char *why);

/* queue_settle.c */
extern void zk_q_scan_done_one(Scan *s, bool ok, int64 removed);
extern bool zk_q_scan_start(Scan *s);
extern void zk_q_release_check_live(Scan *s);

#endif							/* ZKLOCK_QUEUE_INT_H */
