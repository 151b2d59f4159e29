/*-------------------------------------------------------------------------
 *
 * queue.h
 *	  The queue recipe's shared formats: what a backend and the worker hand
 *	  each other through dynamic shared memory (zk_dsa()), and what a
 *	  committing transaction writes into its ZooKeeper transaction node.
 *
 *	  ZooKeeper layout (kazoo's LockingQueue):
 *		<root>/queues/<name>/entries/entry-PPP-<seq>	item, data = payload
 *		<root>/queues/<name>/taken/entry-PPP-<seq>		claim
 *		<root>/queues/<name>/next						the next number, once
 *														this cluster names the
 *														items (counter's end)
 *		<root>/txns/<sysid>-<run>-<fullxid>			items of a transaction
 *														between its pre-commit
 *														and its publication
 *														(<sysid>-<fullxid>: before
 *														runs existed)
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_QUEUE_H
#define ZKLOCK_QUEUE_H

#include "zklock.h"
#include "trust.h"

#include "utils/dsa.h"

/*
 * ZooKeeper refuses a packet over jute.maxbuffer (1 MB less one byte by
 * default); a transaction's items travel in one create and one multi, so
 * their total, with paths and headers, must stay under it.
 */
/*
 * A queue entry's own fields (ZKK_QPUB, ZKK_QCLAIM, ZKK_QINFO), laid over
 * ZkEntry.part: ZKQ(e)->fxid.  Zeroed at allocation.
 */
typedef struct ZkQueuePart
{
	uint8		decision;		/* owner's ZKQD_*, set before letting go */
	uint8		qop;			/* ZKK_QINFO: ZkQinfoOp */
	int32		max_items;		/* QCLAIM: claims wanted; peek: rows; QPUB:
								 * the owner's zklock.max_kept_items */
	int32		nclaims;		/* QCLAIM: claims held (granted) */
	uint64		fxid;			/* QPUB, QCLAIM: the (sub)transaction */
	uint64		wal_lsn;		/* a flushed WAL record of fxid ... */
	uint32		wal_tli;		/* ... on this timeline */
	bool		wal_unflushed;	/* QCLAIM: that record is still being
								 * flushed; no claim may name it yet */
	bool		withdrawn;		/* QCLAIM: its owner timed out with nothing
								 * out or held: no attempt may be sent */
	bool		fence_checked;	/* QCLAIM: its claims verified ours once the
								 * run was fenced (queue_claim.c) */
	dsa_pointer claims;			/* QCLAIM: ZkClaimRec[max_items] */
	bool		pub_refused;	/* QPUB, before commit: ZooKeeper would
								 * refuse an op (errmsg says why) */
	bool		pub_over_kept;	/* QPUB, before commit: refused for
								 * zklock.max_kept_bytes/nodes (kept.c) */
	bool		pub_over_ns;	/* QPUB, before commit: refused for
								 * zklock.max_namespace_items
								 * (queue_nskept.c) */
	bool		pub_blocked;	/* QPUB, committed: ZooKeeper refuses the
								 * publication; retried (errmsg says why) */
	bool		end_blocked;	/* QCLAIM, let go: ZooKeeper refuses its
								 * consume or release (a node with
								 * children, NOAUTH); retried, paced */
	bool		create_unanswered;	/* QPUB: a create of its node went
									 * unanswered: its publication keeps
									 * the node (queue_publish.c) */
	bool		pub_over_items; /* QPUB, before commit: refused for
								 * zklock.max_kept_items */
	bool		checks_failed;	/* QPUB: a kept check went unanswered */
	bool		create_deferred;	/* QPUB: the node's create answered
									 * (create_rc) before the kept checks:
									 * acted on when they are in */
	int32		create_rc;
	bool		qcounted;		/* QCLAIM: its claims are in its queue's
								 * set of held claims (queue_consume.c) */

	/*
	 * QCLAIM, worker-private: the payload bytes stored for it, the largest
	 * item read for it, and whether a payload found no room in the dsa
	 * (queue_claim.c, "How much one dequeue claims")
	 */
	uint64		claim_bytes;
	uint32		claim_largest;
	bool		claim_refused;
} ZkQueuePart;

ZK_ENTRY_PART_FITS(ZkQueuePart);
#define ZKQ(e)		ZK_ENTRY_PART(e, ZkQueuePart)

/*
 * One namespace's census (queue_nskept.c), for zk_namespace_totals(): the
 * worker's copy of its table, written under zk_ctl->lock
 */
#define ZK_NS_SLOTS		64

typedef enum ZkNsState
{
	ZKNS_UNUSED = 0,
	ZKNS_COUNTING,				/* never counted yet */
	ZKNS_COUNTED,
	ZKNS_UNBOUNDED				/* a shared listing too large to count */
} ZkNsState;

typedef struct ZkNsUsage
{
	uint8		state;			/* ZkNsState */
	char		ns[ZKLOCK_NS_MAX + 1];
	int64		counted;		/* items at the last census */
	int64		reserved;		/* let through since, maybe not counted */
	TimestampTz counted_at;		/* when that census began */
	uint64		refused;		/* COMMITs refused for the namespace */
} ZkNsUsage;


/*
 * This cluster's hand-outs, consumes and releases of one queue since the
 * worker started (zk_queue_stats()); at most ZKQ_STATS_SLOTS queues, the
 * slot of the queue counted longest ago going to a new one
 */
#define ZKQ_STATS_SLOTS		256

typedef struct ZkQueueStat
{
	char		name[ZKLOCK_QNAME_MAX + 1];	/* qualified; "" unused */
	uint64		handed_out;		/* items a dequeue claimed and read */
	uint64		consumed;		/* items deleted by a committed dequeue */
	uint64		released;		/* claims ended without a consume */
	uint64		dead_lettered;	/* items a policy moved to a dead-letter
								 * queue (queue_claim.c, "Dead letters") */
	TimestampTz since;			/* when this slot began counting the queue */
	TimestampTz last_at;		/* its last count */
} ZkQueueStat;

/*
 * The queue's shared memory (ZkRecipeBackend.shmem_size): what zk_status(),
 * zk_namespace_totals() and zk_queue_stats() show of the worker's queues
 */
typedef struct ZkQueueShared
{
	int			queues_tracked; /* per-queue states the worker keeps */
	int			pubs_blocked_resolve;	/* transaction nodes the settling
										 * pass could not publish (refused) */
	ZkNsUsage	ns_usage[ZK_NS_SLOTS];	/* what each namespace keeps, as
										 * the worker last counted
										 * (queue_nskept.c) */
	ZkQueueStat stats[ZKQ_STATS_SLOTS];	/* per queue (queue_state.c) */
} ZkQueueShared;

extern ZkQueueShared *zk_q_shared;	/* queue_state.c */

#define ZKQ_TXN_MAX			1000000
#define ZKQ_TXN_BASE		1024	/* request and multi headers, the txn
									 * node's delete and path */
#define ZKQ_ITEM_OVERHEAD	128		/* per item besides payload, root and
									 * encoded name: op header, ACL, flags,
									 * "/queues/", "/entries/entry-PPP-" */
#define ZKQ_MULTI_BUDGET	500000	/* bytes of paths in one consuming multi */
#define ZKQ_MAX_ITEMS		1000	/* max_items of one dequeue */
#define ZKQ_NODE_MAX		32		/* "entry-PPP-<seq>" */
#define ZKQ_GROUPED_NAME_LEN 31	/* "entry-PPP-<10 digits>g<10 digits>" */
#define ZKQ_HANDOUT_CHILD	"zklock-handout"	/* made and deleted under an item
												 * by each claim: its cversion
												 * counts the hand-outs */

/*
 * The transaction node's data: a header, then the items.  Nodes written
 * before runs existed carry the header up to run, ZKQ_TXN_HEADER_V1_LEN
 * bytes (no run: settled as before), and before MACs up to mac,
 * ZKQ_TXN_HEADER_V2_LEN; the worker widens them when it reads one
 * (queue_settle.c), and accepts them unsigned only in the run that made the
 * cluster's key (trust.h).
 */
#define ZKQ_TXN_MAGIC_V1	0x5A4B5154	/* "ZKQT" */
#define ZKQ_TXN_MAGIC_V2	0x5A4B5132	/* "ZKQ2" */
#define ZKQ_TXN_MAGIC		0x5A4B5133	/* "ZKQ3" */
#define ZKQ_TXN_HEADER_V1_LEN	offsetof(ZkTxnHeader, run)
#define ZKQ_TXN_HEADER_V2_LEN	offsetof(ZkTxnHeader, mac)

typedef struct ZkTxnHeader
{
	uint32		magic;
	uint32		nitems;
	uint64		sysid;
	uint64		fxid;
	uint64		lsn;			/* the end of the transaction's mark:
								 * flushed before COMMIT goes on, maybe
								 * not yet when the node is written */
	uint32		tli;			/* ... on this timeline */
	uint32		total;			/* bytes, header included */
	uint64		run;			/* the run that wrote it (history.h) */
	uint64		rec;			/* the start of the mark (ZkHistMark) */
	uint8		mac[32];		/* HMAC-SHA256 of the node's path under the
								 * root and its data with this zeroed
								 * (trust.h) */
} ZkTxnHeader;

/*
 * A published transaction node kept against a late create of it
 * (queue_publish.c, "Late creates"): this data, and one child
 * ZKQ_TXN_KEPT_CHILD, so that the publishing multi sent again fails on its
 * delete.  The settling pass deletes it once the session that published it
 * is dead (queue_settle.c).
 */
#define ZKQ_TXN_KEPT_MAGIC	0x5A4B514B	/* "ZKQK" */
#define ZKQ_TXN_KEPT_CHILD	"kept"
typedef struct ZkTxnKept
{
	uint32		magic;
	uint32		zero;
	uint64		sysid;
	uint64		fxid;
	uint64		run;
	uint64		session;		/* the session that published it */
	uint8		mac[32];		/* HMAC-SHA256 of the node's path under the
								 * root and this with mac zeroed (trust.h) */
} ZkTxnKept;

typedef struct ZkTxnItem
{
	uint16		priority;		/* 0..999, or ZKQ_OP_* | ZKQ_OP_ITEM */
	uint16		qlen;			/* queue name, UTF-8, no terminator; for an
								 * op, the node's path under the root */
	uint32		plen;			/* payload; for an op, the node's data */
	/* followed by the name and the payload */
} ZkTxnItem;

/*
 * Besides queue items, a transaction node carries writes of other recipes
 * (gates, arrivals) that must happen exactly when the transaction commits:
 * "create this node unless it exists", "delete it unless it is gone".  They
 * go into the same publishing multi as the items; one that finds its work
 * already done is marked skipped (in the worker's copy) and the multi is
 * sent again without it.
 */
#define ZKQ_OP_ITEM			0x4000	/* priority field: this is an op */
#define ZKQ_ITEM_DELAYED	0x2000	/* priority field: a delayed item, its
									 * payload behind its due time (int64
									 * Unix ms, big-endian: ZKQ_DUE_LEN) */
#define ZKQ_DUE_LEN			8
#define ZKQ_ITEM_GROUPED	0x1000	/* priority field: a grouped item, its
									 * payload behind its group (one byte of
									 * length, the group's key encoded) */
#define ZKQ_GROUP_KEY_MAX	64		/* bytes of a group key (UTF-8) */
#define ZKQ_GROUP_ENC_MAX	(ZKQ_GROUP_KEY_MAX * 3)
#define ZKQ_PRIO(p)			((p) & 0x03FF)	/* an item's priority, 0..999 */
#define ZKQ_DELAY_MAX_DAYS	366
#define ZKQ_OP_SKIP			0x8000	/* worker: found done, leave it out */
#define ZKQ_OP_MASK			0x00FF
#define ZKQ_OP_CREATE		1		/* create <root>/<path> (persistent) */
#define ZKQ_OP_DELETE		2		/* delete <root>/<path> */
#define ZKQ_IS_OP(prio)		(((prio) & ZKQ_OP_ITEM) != 0)

/* One message, as a dequeue or a peek returns it */
typedef struct ZkMsgRec
{
	int64		msg_id;		/* zk_queue_msg_id: the msg_id column */
	int64		ctime_ms;
	int32		priority;
	int32		attempts;		/* hand-outs by zklock, this one included
								 * (queue_claim.c, "Counting hand-outs");
								 * a dequeue's 0: not counted (NULL) */
	uint32		len;
	char		node[ZKQ_NODE_MAX];
	/* followed by the payload */
} ZkMsgRec;

/* One claim of a dequeue, in the array its entry's "claims" points to */
#define ZKQC_FREE		0
#define ZKQC_DOUBT		1		/* claim sent, reply lost: ours or not? */
#define ZKQC_HELD		2		/* ours, message read */
#define ZKQC_RETURN		3		/* ours, its payload found no room: the
								 * claim's delete is out (give it back) */
typedef struct ZkClaimRec
{
	char		node[ZKQ_NODE_MAX];
	uint8		status;
	bool		has_item;		/* HELD: the item was there when read, so a
								 * commit deletes it with the claim */
	dsa_pointer msg;			/* ZkMsgRec, once read, until the owner has
								 * copied it out (then freed, under the lock) */
	int64		msg_id;			/* HELD, copied out: its msg_id (0: none) */
	int64		hold_ms;		/* HELD: zk_retry_later's time (Unix ms)
								 * until which the item is held when its
								 * claim ends, commit or not; 0: none; -1:
								 * the hold refused, the claim released
								 * instead, never consumed (queue_claim.c,
								 * "Backoff") */
} ZkClaimRec;

/* What the owner decided about its queue entry before letting go of it */
#define ZKQD_NONE		0		/* abort, exit, or gave up waiting */
#define ZKQD_COMMIT		1

/* ZKK_QINFO operations */
typedef enum ZkQinfoOp
{
	ZKQI_LENGTH = 0,
	ZKQI_PEEK,
	ZKQI_PURGE,
	ZKQI_QUEUES,
	ZKQI_RELEASE_CLUSTER,
	ZKQI_DROP,
	ZKQI_SET_POLICY,			/* zk_queue_set_policy: e->data the dead-letter
								 * queue (qualified), max_items the attempts */
	ZKQI_MOVE					/* zk_queue_move: e->data the queue to move
								 * to (qualified), max_items how many */
} ZkQinfoOp;

/*
 * A ZKQI_DROP answer (the entry's token): dropped, not there, or refused
 * (errmsg says why, in a sentence for the error's detail)
 */
#define ZKQ_DROP_DONE		1	/* its nodes deleted in one multi */
#define ZKQ_DROP_ABSENT		0	/* no such queue: nothing to do */
#define ZKQ_DROP_ITEMS		(-1)	/* it has items or claims */
#define ZKQ_DROP_IN_USE		(-2)	/* this cluster uses it right now */
#define ZKQ_DROP_FOREIGN	(-3)	/* its node has children not zklock's */
#define ZKQ_DROP_CHANGING	(-4)	/* it changed under every try */

/* A ZKQI_SET_POLICY answer: 1 written, or refused (errmsg says why) */
#define ZKQ_POLICY_FOREIGN	(-1)	/* the node holds another client's data */
#define ZKQ_POLICY_CHANGING	(-2)	/* it changed under every try */
#define ZKQ_POLICY_MAX_ATTEMPTS	1000
#define ZKQ_MOVE_MAX		10000	/* items of one zk_queue_move */

/*
 * A ZKQI_QUEUES answer: one record per queue, each followed by its name and
 * its dead-letter queue's name (UTF-8, without the namespace)
 */
typedef struct ZkQueueRow
{
	int64		items;
	int64		claimed;
	int64		delayed;
	int64		ready_ctime;	/* the oldest ready item's ctime (ms), 0 none */
	int64		claim_ctime;	/* the oldest claim's ctime (ms), 0 none */
	int32		max_attempts;	/* the policy's, 0 without one */
	uint16		namelen;
	uint16		dlqlen;			/* 0 without a policy */
} ZkQueueRow;

#define ZKQ_TXN_QUEUE_ITEMS	1024	/* items of one transaction in one queue */

/*
 * The data of an item a dead-letter policy moved (queue_nodes.c, "dead
 * letters"): this magic, the origin's count and id and name, the payload
 */
#define ZKQ_DL_MAGIC		"\0zklock-dead-letter\1"
#define ZKQ_DL_MAGIC_LEN	20
#define ZKQ_DL_FIXED_LEN	(ZKQ_DL_MAGIC_LEN + 4 + 8 + 2)
#define ZKQ_DL_HEADER_MAX	(ZKQ_DL_FIXED_LEN + ZKLOCK_NAME_MAX)

typedef struct ZkDeadLetter
{
	int32		attempts;		/* hand-outs at the origin, not consumed */
	int64		msg_id;			/* its msg_id there */
	const char *origin;			/* the origin queue's name (UTF-8, not
								 * terminated, without its namespace) */
	int			origin_len;
	const char *payload;		/* the payload, within the data */
	Size		plen;
} ZkDeadLetter;

/* queue_nodes.c: paths (<root>/queues/<encoded name>), items, seals */
extern bool zk_q_dl_is_wrapped(const char *data, Size len);
extern Size zk_q_dl_header(char *out, const char *origin, int olen, int32 attempts,
						   int64 msg_id);
extern bool zk_q_dl_unwrap(const char *data, Size len, ZkDeadLetter *dl);
extern int64 zk_queue_msg_id(int64 czxid, const char *node);
extern bool zk_queue_node_priority(const char *child, int *priority);
extern void zk_queue_path(const char *name, char *out, size_t outlen);
extern void zk_txn_sign(const char *path, char *blob, size_t len);
extern ZkMacCheck zk_txn_verify(const char *path, const char *blob, size_t len,
								bool had_mac);
extern void zk_kept_sign(const char *path, ZkTxnKept *k);
extern bool zk_kept_verify(const char *path, const ZkTxnKept *k);

/* queue_backend.c */
typedef void (*zkq_emit_fn) (const ZkMsgRec *m, const char *payload, void *arg);
extern void zk_queue_enqueue(const char *qname, int qlen, const char *payload, Size plen,
							 int priority);
extern void zk_queue_enqueue_array(const char *qname, int qlen, const char *const *payloads,
								   const Size *plens, int n, int priority);
extern void zk_queue_enqueue_due(const char *qname, int qlen, const char *payload, Size plen,
								 int priority, int64 due_ms);
extern void zk_queue_enqueue_array_due(const char *qname, int qlen,
									   const char *const *payloads, const Size *plens,
									   int n, int priority, int64 due_ms);
extern void zk_queue_enqueue_grouped(const char *qname, int qlen, const char *gkey, int gklen,
									 const char *const *payloads, const Size *plens, int n,
									 int priority, bool array);
extern int	zk_queue_dequeue(const char *qname, int qlen, int max_items, bool try_only,
							 int64 timeout_ms, zkq_emit_fn emit, void *arg);
extern bool zk_queue_retry_later(int64 msg_id, int64 until_ms);
extern ZkEntry *zk_queue_info(ZkQinfoOp op, const char *qname, int qlen, int n, uint64 arg,
							  uint32 *idx, uint32 *gen, const char *what);
extern ZkEntry *zk_queue_info_named(ZkQinfoOp op, const char *qname, int qlen, int n,
									uint64 arg, const char *other, int olen,
									uint32 *idx, uint32 *gen, const char *what);
extern void zk_queue_info_done(uint32 idx, uint32 gen);
/* zk_queue_local_counts: one queue's claims held and consumers waiting here */
typedef struct ZkQueueLocal
{
	char		name[ZKLOCK_QNAME_MAX + 1]; /* the hash key */
	int			claims;
	int			waiting;
} ZkQueueLocal;
extern struct HTAB *zk_queue_local_counts(void);
extern int	zk_queue_pending_items(const char *qname, int qlen);
extern void zk_queue_txn_op(int op, const char *relpath, const char *data, int dlen,
							const char *what);

#endif							/* ZKLOCK_QUEUE_H */
