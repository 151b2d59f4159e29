/*-------------------------------------------------------------------------
 *
 * queue_backend.c
 *	  The queue recipe's backend half: the items this transaction enqueued
 *	  (kept here until COMMIT), the claims its dequeues hold, and what
 *	  becomes of both at COMMIT, ROLLBACK, ROLLBACK TO SAVEPOINT and exit.
 *
 *	  What happens before and after the commit record: src/README,
 *	  section 4; why a crash at any instant loses or doubles nothing (the
 *	  WAL mark written here, mark_xid_insert): section 5.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "queue.h"
#include "trust.h"
#include "history.h"

#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/postmaster.h"
#include "replication/message.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"


typedef struct PendingItem
{
	SubTransactionId subid;
	Size		cost;			/* bytes it adds to the publishing request */
	int			priority;
	char	   *qname;			/* UTF-8 */
	int			qlen;
	char	   *payload;
	Size		plen;
	int64		due_ms;			/* a delayed item: due then (Unix ms), else 0 */
	char	   *group;			/* a grouped item: its group, encoded, else NULL */
	int			glen;
} PendingItem;

typedef struct HeldClaim
{
	SubTransactionId subid;
	uint32		idx;
	uint32		gen;
} HeldClaim;

static List *pending_items = NIL;	/* PendingItem *, this transaction */
static Size pending_bytes = 0;
static List *held_claims = NIL; /* HeldClaim *, this transaction */

/*
 * A zk_retry_later mark made in a subtransaction, undone if it aborts
 * while the claim it marked lives on (a claim of an outer level): the mark
 * is the subtransaction's work.  Newest first, so that undoing them in
 * order leaves the oldest one's hold_ms.  A claim that the abort ends
 * itself keeps its mark (doc/queues.md: a savepoint rolled back holds).
 */
typedef struct RetryMark
{
	SubTransactionId subid;
	uint32		idx;
	uint32		gen;
	int			slot;
	int64		prev_ms;		/* its hold_ms before the mark */
} RetryMark;

static List *retry_marks = NIL; /* RetryMark *, newest first */
static uint32 pub_idx = ZKLOCK_NO_ENTRY;
static uint32 pub_gen = 0;
static uint32 wait_idx = ZKLOCK_NO_ENTRY;	/* a request being waited for */
static uint32 wait_gen = 0;

/* the (sub)transaction whose WAL record is flushed, and where */
static uint64 marked_fxid = 0;
static XLogRecPtr marked_lsn = InvalidXLogRecPtr;
static TimeLineID marked_tli = 0;
static uint64 unflushing_fxid = 0;	/* mark_xid_insert's record, until flushed */
static XLogRecPtr unflushing_lsn = InvalidXLogRecPtr;
static TimeLineID unflushing_tli = 0;

static XLogRecPtr marked_rec = InvalidXLogRecPtr;	/* the record's start */
static XLogRecPtr unflushing_rec = InvalidXLogRecPtr;

static bool mark_xid_insert(uint64 *fxid, uint64 *lsn, uint32 *tli, uint64 *rec);
static void mark_xid_flush(bool flush);
static int64 held_marked_item(void);

static char claim_prefix[20];
static uint32 claim_counter = 0;

/* ---- helpers ---- */

/* Refuse "what" on a hot standby (25006): no transaction id to tie it to */
static void
require_primary(const char *what)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot %s during recovery", what),
				 errdetail("A hot standby has no transaction id to tie this zklock work to a commit."),
				 errhint("Run it on the primary; reads and waits (zk_queue_length(), zk_gate_wait(), zk_await()) work on a standby.")));
}

/*
 * Write the current transaction's WAL mark (history.h: this run and the
 * transaction's id) unless it has one: true when it was written now and
 * mark_xid_flush must follow.  A dequeue lets the worker list the queue
 * meanwhile and claims only after the flush; a publication's transaction
 * node is written during the flush (src/README, section 5).
 */
static bool
mark_xid_insert(uint64 *fxid, uint64 *lsn, uint32 *tli, uint64 *rec)
{
	FullTransactionId f = GetCurrentFullTransactionId();

	if (U64FromFullTransactionId(f) != marked_fxid)
	{
		ZkHistMark	mark;

		/* the mark names this run and transaction (history.h) */
		mark.run = zk_ctl->run_id;
		mark.fxid = U64FromFullTransactionId(f);
		unflushing_lsn = zk_log_logical_message(ZK_HIST_PREFIX, (const char *) &mark,
												sizeof(mark));
		unflushing_rec = ProcLastRecPtr;
		unflushing_fxid = U64FromFullTransactionId(f);
		unflushing_tli = GetWALInsertionTimeLine();
		*fxid = unflushing_fxid;
		*lsn = unflushing_lsn;
		*tli = unflushing_tli;
		*rec = unflushing_rec;
		return true;
	}
	*fxid = marked_fxid;
	*lsn = marked_lsn;
	*tli = marked_tli;
	*rec = marked_rec;
	return false;
}

/*
 * Flush the record mark_xid_insert wrote (unless the caller's commit
 * record will: flush false) and remember it as this transaction's mark.
 */
static void
mark_xid_flush(bool flush)
{
	if (flush)
		XLogFlush(unflushing_lsn);
	marked_fxid = unflushing_fxid;
	marked_lsn = unflushing_lsn;
	marked_tli = unflushing_tli;
	marked_rec = unflushing_rec;
}

/*
 * Let go of the entry (idx, gen) with the decision the worker is to carry
 * out (ZKQD_COMMIT or ZKQD_NONE), written before the release is seen;
 * nothing if it is no longer ours.  The caller wakes the worker.
 */
static void
release_idx(uint32 idx, uint32 gen, uint8 decision)
{
	ZkEntry    *e;

	if (idx == ZKLOCK_NO_ENTRY || zk_ctl == NULL)
		return;
	e = zk_entry(idx);
	if (e->gen != gen)
		return;
	ZKQ(e)->decision = decision;
	pg_write_barrier();
	(void) zk_release_entry(idx, gen);
}

/*
 * A new queue entry of this backend, filled in and returned with
 * zk_ctl->lock held; submit() queues it and says its index and gen.
 */
static ZkEntry *
new_queue_entry(ZkKind kind, const char *qname, int qlen)
{
	zk_backend_init();
	return zk_new_entry(kind, qname ? qname : "", qname ? qlen : 0,
						ZKM_EXCLUSIVE, ZKS_TRANSACTION, false);
}

/*
 * Queue the entry new_queue_entry returned and release zk_ctl->lock;
 * *idx and *gen name it from now on.  Wakes the worker.
 */
static void
submit(ZkEntry *e, uint32 *idx, uint32 *gen)
{
	*idx = zk_entry_index(e);
	*gen = e->gen;
	zk_enqueue(e);
	LWLockRelease(zk_ctl->lock);
	zk_wake_worker();
}

/* ---- enqueue ---- */

/*
 * The bounds a role's settings put on what one transaction publishes
 * (54000): an item's payload (plen, -1 for another recipe's write) at most
 * zklock.max_item_size, the transaction's writes with this one ("cost"
 * more) at most zklock.max_transaction_size.  "what" names the call.
 */
static void
check_write_quota(Size cost, const char *what, Size plen)
{
	Size		max_txn = (Size) zk_max_transaction_kb * 1024;

	if (plen != (Size) -1 && plen > (Size) zk_max_item_kb * 1024)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("zklock queue payload is larger than zklock.max_item_size"),
				 errdetail("The payload has %zu bytes; zklock.max_item_size is %d kB.",
						   plen, zk_max_item_kb),
				 errhint("Store large data elsewhere and enqueue a reference to it, or ask a superuser to raise zklock.max_item_size for the role (ALTER ROLE ... SET).")));
	if (pending_bytes + cost + ZKQ_TXN_BASE > max_txn)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("zklock work of this transaction is larger than zklock.max_transaction_size"),
				 errdetail("To %s, this transaction's queue items and other zklock writes would need %zu bytes; zklock.max_transaction_size is %d kB.",
						   what, pending_bytes + cost + ZKQ_TXN_BASE, zk_max_transaction_kb),
				 errhint("Commit in smaller batches, or ask a superuser to raise zklock.max_transaction_size for the role (ALTER ROLE ... SET).")));
}

/*
 * Reports which element of an array an error of enqueue_items is about
 * (arg: the element's number, from 1, and the array's length)
 */
static void
enqueue_element_context(void *arg)
{
	const int  *at = (const int *) arg;

	errcontext("zklock payload %d of %d in the array", at[0], at[1]);
}

/*
 * Keep n items of one queue and priority for this (sub)transaction, in
 * this order, to be published at its COMMIT (queue_pre_commit): all of
 * them or, when one fails a check, none.  Checks the priority and name
 * once, then each item as one call per item would (its size, the
 * transaction's bytes with the items before it, the count per queue and
 * transaction), so that what is kept fits in one publishing request; only
 * then keeps them.  array: the items come from an array (an error names
 * the element).  n may be 0: the arguments are checked (and a hot standby
 * refused), nothing is kept.
 */
static void
enqueue_items(const char *qname, int qlen, const char *const *payloads, const Size *plens,
			  int n, int priority, bool array, int64 due_ms, const char *gkey, int gklen)
{
	char		genc[ZKQ_GROUP_KEY_MAX * 3 + 1];
	int			glen = 0;
	MemoryContext old;
	Size		added = 0;
	Size		base;
	char		ename[ZKLOCK_ENAME_MAX + 1];
	int			same = 0;
	int			at[2];
	ErrorContextCallback errcb;
	List	   *items = NIL;
	ListCell   *lc;
	int			i;

	zk_require_shmem();
	if (priority < 0 || priority > 999)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("zklock queue priority %d is out of range", priority),
				 errhint("Give a priority from 0 (first) to 999 (last); the default is 100.")));
	zk_check_name("queue name", qlen);
	if (gkey != NULL)
	{
		if (gklen == 0 || gklen > ZKQ_GROUP_KEY_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock queue group key must have 1 to %d bytes", ZKQ_GROUP_KEY_MAX),
					 errdetail("It has %d bytes in UTF-8; nothing was enqueued.", gklen),
					 errhint("Use a shorter key, for example a customer's id or a hash of a longer key.")));
		/* its characters as a name's (ZooKeeper's path rules) */
		zk_encode_name(gkey, gklen, genc);
		glen = strlen(genc);
	}
	if (n == 0)
	{
		/* nothing to keep, but a standby refuses every enqueue alike */
		require_primary("enqueue");
		return;
	}
	qname = zk_qualify_name(qname, qlen, &qlen);

	/*
	 * What an item adds to the multi that publishes the transaction (the
	 * larger of the two requests that carry it): the payload, the path with
	 * the name as encoded, and the create's own fields (ACL, flags, headers).
	 */
	zk_encode_name(qname, qlen, ename);
	base = strlen(zk_root) + strlen(ename) + ZKQ_ITEM_OVERHEAD;
	if (due_ms > 0)
		base += ZKQ_DUE_LEN + 32;	/* the due time, "/delayed/due-<ms>-" */
	if (glen > 0)
	{
		/* the group twice ("/delayed/grp-<group>~PPP-", its state node) */
		base += 2 * glen + 48;
		if (strlen(zk_root) + strlen(ename) + glen + 48 >= ZKLOCK_PARENT_MAX + ZKLOCK_ENAME_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock queue group key is too long for this queue"),
					 errdetail("The path of an item of group \"%.*s\" in queue \"%.*s\" would be longer than ZooKeeper paths zklock makes; nothing was enqueued.",
							   gklen, gkey, qlen, qname),
					 errhint("Use a shorter group key or queue name.")));
	}
	foreach(lc, pending_items)
	{
		PendingItem *p = lfirst(lc);

		if (p->qlen == qlen && memcmp(p->qname, qname, qlen) == 0)
			same++;
	}

	/* every item checked, in order, as if the ones before it were kept */
	at[1] = n;
	errcb.callback = enqueue_element_context;
	errcb.arg = at;
	errcb.previous = error_context_stack;
	if (array)
		error_context_stack = &errcb;
	for (i = 0; i < n; i++)
	{
		Size		plen = plens[i];
		Size		cost = plen + base;

		at[0] = i + 1;
		if (zk_q_dl_is_wrapped(payloads[i], plen))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock queue payload begins with the header of a dead letter"),
					 errdetail("Its first %d bytes are those zklock puts in front of an item a dead-letter policy moved.",
							   ZKQ_DL_MAGIC_LEN),
					 errhint("Enqueue the payload of a dead letter (zk_message.payload) instead, or move dead letters with zk_queue_move.")));
		if (cost + ZKQ_TXN_BASE > ZKQ_TXN_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("zklock queue payload is too large"),
					 errdetail("The payload has %zu bytes; one item of this queue may have at most %d bytes.",
							   plen, (int) (ZKQ_TXN_MAX - ZKQ_TXN_BASE - base)),
					 errhint("ZooKeeper takes at most 1 MB in one request (jute.maxbuffer): store large data elsewhere and enqueue a reference to it.")));
		if (pending_bytes + added + cost + ZKQ_TXN_BASE > ZKQ_TXN_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("zklock queue items of this transaction are too large together"),
					 errdetail("This transaction's items would need %zu bytes; one transaction may publish at most %d bytes.",
							   pending_bytes + added + cost + ZKQ_TXN_BASE, ZKQ_TXN_MAX),
					 errhint("ZooKeeper publishes a transaction's items in one request of at most 1 MB: commit in smaller batches.")));
		check_write_quota(added + cost, "enqueue", plen);
		if (same + i >= ZKQ_TXN_QUEUE_ITEMS)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("too many zklock queue items for one queue in this transaction"),
					 errdetail("One transaction may publish at most %d items into one queue.",
							   ZKQ_TXN_QUEUE_ITEMS),
					 errhint("Commit in smaller batches.")));
		added += cost;
	}
	error_context_stack = errcb.previous;
	require_primary("enqueue");
	(void) GetTopFullTransactionId();
	zk_backend_init();

	/*
	 * Then all of them, on a list of their own first: pending_items changes
	 * in one step at the end (list_concat enlarges it before it copies), so
	 * that running out of memory half-way keeps none.
	 */
	old = MemoryContextSwitchTo(TopMemoryContext);
	for (i = 0; i < n; i++)
	{
		PendingItem *it = palloc0(sizeof(PendingItem));

		it->subid = GetCurrentSubTransactionId();
		it->cost = plens[i] + base;
		it->priority = priority;
		it->qname = pnstrdup(qname, qlen);
		it->qlen = qlen;
		it->payload = palloc(Max(plens[i], 1));
		memcpy(it->payload, payloads[i], plens[i]);
		it->plen = plens[i];
		it->due_ms = due_ms;
		it->group = glen > 0 ? pnstrdup(genc, glen) : NULL;
		it->glen = glen;
		items = lappend(items, it);
	}
	if (pending_items == NIL)
		pending_items = items;
	else
	{
		pending_items = list_concat(pending_items, items);
		list_free(items);
	}
	MemoryContextSwitchTo(old);
	pending_bytes += added;
}

/*
 * Keep an item for this (sub)transaction, to be published at its COMMIT
 * (queue_pre_commit); checks the priority, name and sizes first, so that
 * what is kept fits in one publishing request.
 */
void
zk_queue_enqueue(const char *qname, int qlen, const char *payload, Size plen, int priority)
{
	enqueue_items(qname, qlen, &payload, &plen, 1, priority, false, 0, NULL, 0);
}

/* zk_queue_enqueue of an item handed out only from due_ms (0: at once) */
void
zk_queue_enqueue_due(const char *qname, int qlen, const char *payload, Size plen,
					 int priority, int64 due_ms)
{
	enqueue_items(qname, qlen, &payload, &plen, 1, priority, false, due_ms, NULL, 0);
}

/*
 * zk_queue_enqueue for each of the n items of an array, in its order, all
 * or none: one that fails a check (errors name its element) keeps none of
 * them; n 0 keeps nothing.
 */
void
zk_queue_enqueue_array(const char *qname, int qlen, const char *const *payloads,
					   const Size *plens, int n, int priority)
{
	enqueue_items(qname, qlen, payloads, plens, n, priority, true, 0, NULL, 0);
}

/* zk_queue_enqueue_array of items handed out only from due_ms (0: at once) */
void
zk_queue_enqueue_array_due(const char *qname, int qlen, const char *const *payloads,
						   const Size *plens, int n, int priority, int64 due_ms)
{
	enqueue_items(qname, qlen, payloads, plens, n, priority, true, due_ms, NULL, 0);
}

/*
 * zk_queue_enqueue_array of items of the group gkey (UTF-8, gklen bytes):
 * handed out in this order after the group's earlier items, one at a time
 * (queue_delay.c, "Message groups"); n 1 for one item
 */
void
zk_queue_enqueue_grouped(const char *qname, int qlen, const char *gkey, int gklen,
						 const char *const *payloads, const Size *plens, int n,
						 int priority, bool array)
{
	enqueue_items(qname, qlen, payloads, plens, n, priority, array, 0, gkey, gklen);
}

/*
 * Another recipe's write, applied with this transaction's queue items
 * exactly when it commits (see queue.h): op is ZKQ_OP_CREATE or
 * ZKQ_OP_DELETE, relpath the node's path under zklock.root.  what names
 * the action for the errors ("arrive", "open a gate").
 */
void
zk_queue_txn_op(int op, const char *relpath, const char *data, int dlen, const char *what)
{
	MemoryContext old;
	PendingItem *it;
	Size		cost;
	int			plen = strlen(relpath);

	zk_require_shmem();
	cost = dlen + strlen(zk_root) + plen + ZKQ_ITEM_OVERHEAD;
	if (pending_bytes + cost + ZKQ_TXN_BASE > ZKQ_TXN_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("zklock work of this transaction is too large to %s", what),
				 errdetail("This transaction's queue items and other zklock writes would need %zu bytes; one transaction may publish at most %d bytes.",
						   pending_bytes + cost + ZKQ_TXN_BASE, ZKQ_TXN_MAX),
				 errhint("ZooKeeper applies a transaction's writes in one request of at most 1 MB: commit in smaller batches.")));
	check_write_quota(cost, what, -1);
	require_primary(what);
	(void) GetTopFullTransactionId();
	zk_backend_init();

	/* the same write again, with nothing else on that node since: once */
	if (pending_items != NIL)
	{
		ListCell   *lc;
		PendingItem *last = NULL;

		foreach(lc, pending_items)
		{
			PendingItem *p = lfirst(lc);

			if (p->qlen == plen && memcmp(p->qname, relpath, plen) == 0)
				last = p;
		}
		if (last != NULL && last->priority == (ZKQ_OP_ITEM | op) &&
			last->subid == GetCurrentSubTransactionId())
			return;
	}

	old = MemoryContextSwitchTo(TopMemoryContext);
	it = palloc0(sizeof(PendingItem));
	it->subid = GetCurrentSubTransactionId();
	it->cost = cost;
	it->priority = ZKQ_OP_ITEM | op;
	it->qname = pnstrdup(relpath, plen);
	it->qlen = plen;
	it->payload = palloc(Max(dlen, 1));
	if (dlen > 0)
		memcpy(it->payload, data, dlen);
	it->plen = dlen;
	it->due_ms = 0;
	pending_items = lappend(pending_items, it);
	MemoryContextSwitchTo(old);
	pending_bytes += cost;
}

/* Free one item kept for this transaction, with its strings */
static void
pending_item_free(PendingItem *it)
{
	pfree(it->qname);
	pfree(it->payload);
	if (it->group != NULL)
		pfree(it->group);
	pfree(it);
}

/* Forget every item and write kept for this transaction */
static void
free_items(void)
{
	ListCell   *lc;

	foreach(lc, pending_items)
		pending_item_free(lfirst(lc));
	list_free(pending_items);
	pending_items = NIL;
	pending_bytes = 0;
}

/* Before COMMIT: the items into their transaction node, or fail */
static void
queue_pre_commit(void)
{
	ListCell   *lc;
	volatile Size total = sizeof(ZkTxnHeader);	/* lives across PG_TRY */
	dsa_area   *area;
	dsa_pointer dp;
	char	   *p;
	ZkTxnHeader h;
	ZkEntry    *e;
	uint64		fxid;
	uint64		lsn;
	uint32		tli;
	uint64		rec;
	bool		unflushed;
	int			outcome;

	/*
	 * Another server took this run over and released its claims (history.h):
	 * committing would consume items that may be claimed by others by now.
	 */
	if (held_claims != NIL && zk_ctl != NULL && zk_ctl->run_fenced)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot commit the queue claims of this transaction"),
				 errdetail("Another server took over this server's zklock run and released its claims (see the server log); the transaction is rolled back."),
				 errhint("Restart PostgreSQL: a new run registers, and queues work again.")));
	/*
	 * An item marked with zk_retry_later goes back only when its claim is
	 * released: a COMMIT would consume it, also when a crash left its end to
	 * the settling pass, which knows the transaction's fate and not the
	 * mark (shared memory only).  So the COMMIT is refused: the transaction
	 * rolls back, and the item is held as asked.
	 */
	if (held_claims != NIL && zk_ctl != NULL)
	{
		int64		marked = held_marked_item();

		if (marked != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
					 errmsg("cannot commit a transaction that asked zk_retry_later to hold an item it dequeued"),
					 errdetail("COMMIT would consume item " INT64_FORMAT "; the transaction is rolled back instead, and the item comes back once its delay is over.",
							   marked),
					 errhint("End such a transaction with ROLLBACK; to keep other work, dequeue after a SAVEPOINT and roll back to it after zk_retry_later.")));
	}
	if (pending_items == NIL)
		return;
	foreach(lc, pending_items)
	{
		PendingItem *it = lfirst(lc);

		total += sizeof(ZkTxnItem) + it->qlen + it->plen + (it->due_ms > 0 ? ZKQ_DUE_LEN : 0) +
			(it->glen > 0 ? 1 + it->glen : 0);
	}
	/* larger than all of the root may keep (kept.c): 54000 */
	zk_kept_check((int64) total, (int64) list_length(pending_items) + 1, false,
				  "This transaction's queue items, gate changes and arrivals");
	/*
	 * The role's write rate, before anything is written (not even the WAL
	 * mark): ZooKeeper takes the bytes twice, as the transaction node and
	 * then as the items (quota.c)
	 */
	zk_quota_charge_write(2 * total, "This transaction's queue items, gate changes and arrivals");
	/*
	 * The top transaction's id in WAL (we are at top level), flushed below
	 * while the worker writes the transaction node: the node may land
	 * before its mark is durable.  Nothing acts on it meanwhile, and if the
	 * mark never becomes durable neither does the commit record after it
	 * (src/README, section 5, "The WAL mark").
	 */
	unflushed = mark_xid_insert(&fxid, &lsn, &tli, &rec);

	area = zk_dsa();
	dp = dsa_allocate_extended(area, total, DSA_ALLOC_NO_OOM);
	if (!DsaPointerIsValid(dp))
		zk_payload_memory_error(total, "The queue items of this transaction",
							 "The transaction is rolled back and publishes nothing; retry it when other sessions' queue work has ended, or commit in smaller batches.");
	p = dsa_get_address(area, dp);
	memset(&h, 0, sizeof(h));
	h.magic = ZKQ_TXN_MAGIC;
	h.nitems = list_length(pending_items);
	h.sysid = GetSystemIdentifier();
	h.fxid = fxid;
	h.lsn = lsn;
	h.tli = tli;
	h.total = (uint32) total;
	h.run = zk_ctl->run_id;
	h.rec = rec;
	memcpy(p, &h, sizeof(h));
	p += sizeof(h);
	foreach(lc, pending_items)
	{
		PendingItem *it = lfirst(lc);
		ZkTxnItem	ti;

		ti.priority = (uint16) it->priority;
		ti.qlen = (uint16) it->qlen;
		ti.plen = (uint32) it->plen;
		if (it->due_ms > 0)
		{
			/* a delayed item: its due time in front of the payload */
			ti.priority |= ZKQ_ITEM_DELAYED;
			ti.plen += ZKQ_DUE_LEN;
		}
		else if (it->glen > 0)
		{
			/* a grouped item: its group (length, encoded) in front */
			ti.priority |= ZKQ_ITEM_GROUPED;
			ti.plen += 1 + it->glen;
		}
		memcpy(p, &ti, sizeof(ti));
		p += sizeof(ti);
		memcpy(p, it->qname, it->qlen);
		p += it->qlen;
		if (it->due_ms > 0)
		{
			uint64		v = (uint64) it->due_ms;
			int			k;

			for (k = ZKQ_DUE_LEN - 1; k >= 0; k--)
			{
				p[k] = (char) (v & 0xFF);
				v >>= 8;
			}
			p += ZKQ_DUE_LEN;
		}
		else if (it->glen > 0)
		{
			*p++ = (char) it->glen;
			memcpy(p, it->group, it->glen);
			p += it->glen;
		}
		memcpy(p, it->payload, it->plen);
		p += it->plen;
	}
	/* signed for its path under the root (the worker's txn_path) */
	{
		char		rel[128];

		snprintf(rel, sizeof(rel), "txns/" UINT64_FORMAT "-%016llx-" UINT64_FORMAT,
				 h.sysid, (unsigned long long) h.run, h.fxid);
		PG_TRY();
		{
			zk_txn_sign(rel, dsa_get_address(area, dp), total);
		}
		PG_CATCH();
		{
			dsa_free(area, dp);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}

	PG_TRY();
	{
		e = new_queue_entry(ZKK_QPUB, NULL, 0);
	}
	PG_CATCH();
	{
		dsa_free(area, dp);
		PG_RE_THROW();
	}
	PG_END_TRY();
	ZKQ(e)->fxid = fxid;
	ZKQ(e)->wal_lsn = lsn;
	ZKQ(e)->wal_tli = tli;
	e->blob = dp;
	ZKQ(e)->max_items = zk_max_kept_items;	/* counted by the worker first */
	submit(e, &pub_idx, &pub_gen);
	/*
	 * Not flushed here: the commit record comes after it in WAL, and its
	 * flush (or queue_xact_end's, with synchronous_commit off) makes the
	 * mark durable first.  Until then nothing acts on the node (src/README,
	 * section 5, "The WAL mark"), and an abort deletes it.
	 */
	if (unflushed)
		mark_xid_flush(false);

	/* a pre-commit failure aborts the transaction; abort lets go of it */
	outcome = zk_wait_outcome(pub_idx, -1, ZK_ANSWER_AT_COMMIT,
						  "publish the queue items of this transaction");
	if (outcome == ZKO_BUSY)
	{
		/* ZooKeeper would refuse it after the commit record: fail now */
		char		msg[ZKLOCK_ERRMSG_MAX];
		int			sqlstate;
		bool		over_kept;
		bool		over_ns;

		zk_backend_lock(LW_SHARED);
		strlcpy(msg, zk_entry(pub_idx)->errmsg, sizeof(msg));
		sqlstate = zk_entry(pub_idx)->sqlstate;
		over_kept = ZKQ(zk_entry(pub_idx))->pub_over_kept;
		over_ns = ZKQ(zk_entry(pub_idx))->pub_over_ns;
		LWLockRelease(zk_ctl->lock);
		if (over_kept)
			zk_kept_error(msg); /* all of the root's (kept.c) */
		if (over_ns)
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("zookeeper keeps as many items of this namespace as zklock.max_namespace_items allows"),
					 errdetail("%s; the transaction is rolled back and nothing of it is published.", msg),
					 errhint("Consume items of this namespace's queues (or reset its arrivals) first, or ask a superuser to raise zklock.max_namespace_items.")));
		if (sqlstate == ERRCODE_CONFIGURATION_LIMIT_EXCEEDED)
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("zookeeper keeps too many items of a queue or arrivals object"),
					 errdetail("%s; the transaction is rolled back and nothing of it is published.", msg),
					 errhint("Consume items (or reset the arrivals) first, or ask a superuser to raise zklock.max_kept_items for the role (ALTER ROLE ... SET).")));
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot open a zookeeper gate whose node has children"),
				 errdetail("%s; the transaction is rolled back.", msg),
				 errhint("Remove the other client's children of the gate node (or let that client open the gate), then retry the transaction.")));
	}
	if (outcome != ZKO_GRANTED)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not publish the queue items of this transaction"),
				 errhint("Retry the transaction.")));
}

/* PREPARE TRANSACTION of a transaction with queue work is refused (0A000) */
static void
queue_pre_prepare(void)
{
	if (pending_items != NIL || held_claims != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot prepare a transaction that used zookeeper queues, gates or arrivals"),
				 errdetail("Queue items, gate changes and arrivals are written by this backend at COMMIT."),
				 errhint("Commit or roll back the transaction instead.")));
}

/* ---- dequeue ---- */

/*
 * The data of e's claim nodes (JSON): cluster, transaction, run, timeline,
 * its mark's LSN and record, a claim id unique to this backend, pid, port
 * and host -- what the settling pass needs to end it after a crash.
 */
static void
build_claim_data(ZkEntry *e, uint64 fxid, uint64 lsn, uint32 tli, uint64 rec)
{
	StringInfoData buf;
	char		host[65];

	if (claim_prefix[0] == '\0')
	{
		uint8		r[6];
		int			i;

		if (!pg_strong_random(r, sizeof(r)))
			memset(r, MyProcPid & 0xff, sizeof(r));
		for (i = 0; i < (int) sizeof(r); i++)
			snprintf(claim_prefix + 2 * i, 3, "%02x", r[i]);
	}
	strlcpy(host, zk_host_name(), 65);	/* at most 64 bytes of it */
	initStringInfo(&buf);
	appendStringInfo(&buf,
					 "{\"cluster\":\"" UINT64_FORMAT "\",\"xid\":\"" UINT64_FORMAT
					 "\",\"run\":\"%016llx\",\"tli\":%u,\"lsn\":\"%llX\",\"rec\":\"%llX\",\"claim\":\"%s%x%08x\",\"pid\":%d,\"port\":%d,\"host\":",
					 GetSystemIdentifier(), fxid, (unsigned long long) zk_ctl->run_id,
					 tli, (unsigned long long) lsn, (unsigned long long) rec,
					 claim_prefix, MyProcPid, ++claim_counter, MyProcPid, PostPortNumber);
	escape_json(&buf, host);
	appendStringInfoChar(&buf, '}');
	strlcpy(e->data, buf.data, sizeof(e->data));
	pfree(buf.data);
}

/* qsort comparator of claimed messages: queue order (their node names) */
static int
cmp_msgs(const void *a, const void *b)
{
	const ZkMsgRec *x = *(ZkMsgRec *const *) a;
	const ZkMsgRec *y = *(ZkMsgRec *const *) b;

	return strcmp(x->node, y->node);
}

/*
 * A dequeue whose timeout passed, in the common case: no claim attempt of
 * it is out and none landed (nothing held or in doubt).  Marked withdrawn
 * under the exclusive lock, so the worker sends none from now on (it
 * learns of the release only later); then nothing of it can reach
 * ZooKeeper, and the call returns at once even if the worker is slow.
 * False when something is out, or the lock could not be had.
 */
static bool
try_withdraw(uint32 idx, uint32 gen)
{
	ZkEntry    *e;
	bool		done = false;

	if (!zk_backend_lock_timed(LW_EXCLUSIVE, zk_connect_timeout))
		return false;
	e = zk_entry(idx);
	if (e->gen == gen && e->state != ZKE_FREE && e->outstanding == 0 &&
		DsaPointerIsValid(ZKQ(e)->claims))
	{
		ZkClaimRec *c = dsa_get_address(zk_dsa(), ZKQ(e)->claims);
		int			i;

		done = true;
		for (i = 0; i < ZKQ(e)->max_items; i++)
			if (c[i].status == ZKQC_HELD || c[i].status == ZKQC_DOUBT)
				done = false;
		if (done)
			ZKQ(e)->withdrawn = true;
	}
	LWLockRelease(zk_ctl->lock);
	return done;
}

/*
 * Otherwise the call returns no row only once the worker has
 * withdrawn it: a claim attempt sent for it may have landed in ZooKeeper
 * (its reply lost with the connection), and such a claim names this
 * transaction, whose COMMIT would consume an item nobody received if the
 * worker restarted before releasing it.  The worker frees the entry once
 * no attempt of it is out and every claim of it is released; when that
 * does not happen within zklock.connect_timeout the call fails, and the
 * transaction's abort releases whatever may have landed.
 */
static void
wait_withdrawn(uint32 idx, uint32 gen)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   zk_connect_timeout);

	for (;;)
	{
		bool		gone = false;

		if (zk_backend_lock_timed(LW_SHARED, 20))
		{
			ZkEntry    *e = zk_entry(idx);

			gone = (e->gen != gen || e->state == ZKE_FREE);
			LWLockRelease(zk_ctl->lock);
		}
		if (gone)
			return;
		if (GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not withdraw a dequeue whose timeout passed"),
					 errdetail("A claim of this dequeue may have reached ZooKeeper, and the zklock worker could not release it within zklock.connect_timeout (%d ms).",
							   zk_connect_timeout),
					 errhint("Roll back and retry when ZooKeeper is reachable: an item this transaction may have claimed is released when it ends.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, zk_wait_event(ZKW_ANSWER));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * The rows are copied out: the payloads leave the dsa now, not when the
 * transaction ends (a transaction that dequeues from many queues would keep
 * them all).  The claims stay, with what the worker needs to end them: the
 * node names, their status, and whether the item is to be consumed
 * (has_item).  Under the lock, exclusively: the worker frees a slot's
 * message only under it too (slot_clear, q_free_entry, a doubt check), so no
 * pointer is freed twice.  An error here (an interrupt while waiting for the
 * lock) leaves them to the worker, which frees them with the entry.
 */
static void
free_payloads(uint32 idx, uint32 gen)
{
	ZkEntry    *e;
	dsa_area   *area = zk_dsa();

	zk_backend_lock(LW_EXCLUSIVE);
	e = zk_entry(idx);
	if (e->gen == gen && e->state != ZKE_FREE && DsaPointerIsValid(ZKQ(e)->claims))
	{
		ZkClaimRec *c = dsa_get_address(area, ZKQ(e)->claims);
		int			i;

		for (i = 0; i < ZKQ(e)->max_items; i++)
			if (c[i].status == ZKQC_HELD && DsaPointerIsValid(c[i].msg))
			{
				/* what zk_retry_later finds it by */
				c[i].msg_id = ((ZkMsgRec *) dsa_get_address(area, c[i].msg))->msg_id;
				dsa_free(area, c[i].msg);
				c[i].msg = InvalidDsaPointer;
			}
	}
	LWLockRelease(zk_ctl->lock);
}

/*
 * Claim up to max_items of a queue for this (sub)transaction, waiting up
 * to timeout_ms (< 0: no limit) unless try_only.  Calls emit for each
 * message, in queue order.
 */
int
zk_queue_dequeue(const char *qname, int qlen, int max_items, bool try_only,
				 int64 timeout_ms, zkq_emit_fn emit, void *arg)
{
	ZkEntry    *e;
	uint32		idx;
	uint32		gen;
	uint64		fxid;
	uint64		lsn;
	uint32		tli;
	uint64		rec;
	dsa_area   *area;
	dsa_pointer claims;
	int			outcome = ZKO_NONE;
	int			n = 0;
	MemoryContext old;
	HeldClaim  *hc;
	bool		unflushed;

	zk_require_shmem();
	zk_check_name("queue name", qlen);
	if (max_items < 1 || max_items > ZKQ_MAX_ITEMS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock max_items must be between 1 and %d", ZKQ_MAX_ITEMS),
				 errdetail("max_items was %d.", max_items),
				 errhint("Ask for at least one item, at most %d at once.", ZKQ_MAX_ITEMS)));
	require_primary("dequeue");
	unflushed = mark_xid_insert(&fxid, &lsn, &tli, &rec);

	/* everything that can fail before the entry exists */
	hc = MemoryContextAllocZero(TopMemoryContext, sizeof(HeldClaim));
	area = zk_dsa();
	claims = dsa_allocate_extended(area, sizeof(ZkClaimRec) * max_items,
								   DSA_ALLOC_NO_OOM | DSA_ALLOC_ZERO);
	if (!DsaPointerIsValid(claims))
		zk_payload_memory_error(sizeof(ZkClaimRec) * max_items, "This dequeue",
							 "Retry when other sessions' queue work has ended, or ask for fewer items at once.");
	PG_TRY();
	{
		e = new_queue_entry(ZKK_QCLAIM, qname, qlen);
	}
	PG_CATCH();
	{
		dsa_free(area, claims);
		PG_RE_THROW();
	}
	PG_END_TRY();
	e->try_only = try_only;
	ZKQ(e)->max_items = max_items;
	e->answer_cap = (uint64) zk_max_answer_kb * 1024;
	ZKQ(e)->fxid = fxid;
	ZKQ(e)->wal_lsn = lsn;
	ZKQ(e)->wal_tli = tli;
	ZKQ(e)->claims = claims;
	ZKQ(e)->wal_unflushed = unflushed;
	build_claim_data(e, fxid, lsn, tli, rec);
	submit(e, &idx, &gen);
	wait_idx = idx;
	wait_gen = gen;

	PG_TRY();
	{
		if (unflushed)
		{
			/* the worker lists the queue meanwhile; it claims once we say */
			mark_xid_flush(true);
			zk_backend_lock(LW_EXCLUSIVE);
			if (zk_entry(idx)->gen == gen)
				ZKQ(zk_entry(idx))->wal_unflushed = false;
			LWLockRelease(zk_ctl->lock);
			zk_wake_worker();
		}
		outcome = zk_wait_outcome(idx, try_only ? -1 : timeout_ms, zk_connect_timeout, "dequeue");
	}
	PG_CATCH();
	{
		wait_idx = ZKLOCK_NO_ENTRY;
		release_idx(idx, gen, ZKQD_NONE);
		zk_wake_worker();
		PG_RE_THROW();
	}
	PG_END_TRY();
	wait_idx = ZKLOCK_NO_ENTRY;

	if (outcome != ZKO_GRANTED)
	{
		bool		settled = (outcome != ZKO_NONE || try_withdraw(idx, gen));

		release_idx(idx, gen, ZKQD_NONE);
		zk_wake_worker();
		pfree(hc);
		if (!settled)
			wait_withdrawn(idx, gen);
		return 0;
	}

	/* granted: ours until the transaction ends */
	hc->subid = GetCurrentSubTransactionId();
	hc->idx = idx;
	hc->gen = gen;
	old = MemoryContextSwitchTo(TopMemoryContext);
	held_claims = lappend(held_claims, hc);
	MemoryContextSwitchTo(old);

	{
		ZkEntry    *ge = zk_entry(idx);
		ZkClaimRec *c = dsa_get_address(area, ZKQ(ge)->claims);
		ZkMsgRec  **msgs = palloc(sizeof(ZkMsgRec *) * max_items);
		int			i;

		for (i = 0; i < max_items; i++)
			if (c[i].status == ZKQC_HELD && DsaPointerIsValid(c[i].msg))
				msgs[n++] = dsa_get_address(area, c[i].msg);
		qsort(msgs, n, sizeof(ZkMsgRec *), cmp_msgs);
		for (i = 0; i < n; i++)
			emit(msgs[i], (const char *) msgs[i] + sizeof(ZkMsgRec), arg);
		pfree(msgs);
	}
	free_payloads(idx, gen);
	return n;
}

/*
 * The claim records of a dequeue this transaction holds, and their number
 * (*n; 0 and NULL when its entry is gone).  With zk_ctl->lock held.
 */
static ZkClaimRec *
held_claim_recs(HeldClaim *hc, dsa_area *area, int *n)
{
	ZkEntry    *e = zk_entry(hc->idx);

	*n = 0;
	if (e->gen != hc->gen || e->state == ZKE_FREE || !DsaPointerIsValid(ZKQ(e)->claims))
		return NULL;
	*n = ZKQ(e)->max_items;
	return dsa_get_address(area, ZKQ(e)->claims);
}

/* The msg_id of an item this transaction holds and marked, or 0 */
static int64
held_marked_item(void)
{
	ListCell   *lc;
	int64		marked = 0;
	dsa_area   *area = zk_dsa();

	zk_backend_lock(LW_SHARED);
	foreach(lc, held_claims)
	{
		int			n;
		ZkClaimRec *c = held_claim_recs(lfirst(lc), area, &n);
		int			i;

		for (i = 0; i < n && marked == 0; i++)
			if (c[i].status != ZKQC_FREE && c[i].hold_ms > 0)
				marked = c[i].msg_id;
	}
	LWLockRelease(zk_ctl->lock);
	return marked;
}

/*
 * zk_retry_later: the item msg_id that this transaction holds is to be
 * held until until_ms (Unix ms; 0: not held) once its claim ends, commit
 * or not (queue_claim.c, "Backoff").  False when no claim of this
 * transaction or of its open savepoints has that item.
 */
bool
zk_queue_retry_later(int64 msg_id, int64 until_ms)
{
	ListCell   *lc;
	bool		found = false;
	dsa_area   *area;

	if (msg_id == 0 || held_claims == NIL || zk_ctl == NULL)
		return false;
	area = zk_dsa();
	zk_backend_lock(LW_EXCLUSIVE);
	foreach(lc, held_claims)
	{
		HeldClaim  *hc = lfirst(lc);
		int			n;
		ZkClaimRec *c = held_claim_recs(hc, area, &n);
		int			i;

		for (i = 0; i < n; i++)
			if (c[i].status != ZKQC_FREE && c[i].msg_id == msg_id)
			{
				if (GetCurrentTransactionNestLevel() > 1)
				{
					/* undone if this subtransaction aborts (RetryMark) */
					MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
					RetryMark  *m = palloc(sizeof(RetryMark));

					m->subid = GetCurrentSubTransactionId();
					m->idx = hc->idx;
					m->gen = hc->gen;
					m->slot = i;
					m->prev_ms = c[i].hold_ms;
					retry_marks = lcons(m, retry_marks);
					MemoryContextSwitchTo(old);
				}
				c[i].hold_ms = until_ms;
				found = true;
			}
	}
	LWLockRelease(zk_ctl->lock);
	return found;
}

/*
 * Subtransaction mySubid ends: its marks go to its parent (commit), or are
 * undone on the claims still held (abort: run after the abort let go of
 * its own claims, whose marks stand)
 */
static void
retry_marks_subxact_end(bool commit, SubTransactionId mySubid,
						SubTransactionId parentSubid)
{
	ListCell   *lc;
	bool		locked = false;

	foreach(lc, retry_marks)
	{
		RetryMark  *m = lfirst(lc);
		ListCell   *hl;

		if (m->subid != mySubid)
			continue;
		if (commit)
		{
			m->subid = parentSubid;
			continue;
		}
		foreach(hl, held_claims)
		{
			HeldClaim  *hc = lfirst(hl);
			ZkEntry    *e;

			if (hc->idx != m->idx || hc->gen != m->gen)
				continue;
			if (!locked)
			{
				zk_backend_lock(LW_EXCLUSIVE);
				locked = true;
			}
			e = zk_entry(hc->idx);
			if (e->gen == hc->gen && e->state != ZKE_FREE &&
				DsaPointerIsValid(ZKQ(e)->claims))
				((ZkClaimRec *) dsa_get_address(zk_dsa(), ZKQ(e)->claims))[m->slot].hold_ms =
					m->prev_ms;
			break;
		}
		retry_marks = foreach_delete_current(retry_marks, lc);
		pfree(m);
	}
	if (locked)
		LWLockRelease(zk_ctl->lock);
}

/* The transaction ends: its marks are with its claims now */
static void
retry_marks_free(void)
{
	list_free_deep(retry_marks);
	retry_marks = NIL;
}

/* ---- one-off reads ---- */

/*
 * Ask the worker; returns the entry (granted) for the caller to read, and
 * its index and generation for zk_queue_info_done.
 */
ZkEntry *
zk_queue_info(ZkQinfoOp op, const char *qname, int qlen, int n, uint64 arg,
			  uint32 *idx, uint32 *gen, const char *what)
{
	return zk_queue_info_named(op, qname, qlen, n, arg, NULL, 0, idx, gen, what);
}

/*
 * zk_queue_info with a second name for the worker (other, olen bytes of
 * UTF-8, qualified: a dead-letter queue, the queue a move goes to), handed
 * over in the entry's data (NUL-terminated)
 */
ZkEntry *
zk_queue_info_named(ZkQinfoOp op, const char *qname, int qlen, int n, uint64 arg,
					const char *other, int olen, uint32 *idx, uint32 *gen,
					const char *what)
{
	ZkEntry    *e;

	zk_require_shmem();
	if (qname != NULL)
		zk_check_name("queue name", qlen);
	if (other != NULL && olen >= ZKLOCK_DATA_MAX)
		zk_check_name("queue name", olen);
	e = new_queue_entry(ZKK_QINFO, qname, qlen);
	ZKQ(e)->qop = (uint8) op;
	ZKQ(e)->max_items = n;
	ZKQ(e)->fxid = arg;
	if (other != NULL)
	{
		memcpy(e->data, other, olen);
		e->data[olen] = '\0';
	}
	submit(e, idx, gen);
	wait_idx = *idx;
	wait_gen = *gen;
	PG_TRY();
	{
		(void) zk_wait_outcome(*idx, -1, zk_connect_timeout, what);
	}
	PG_CATCH();
	{
		wait_idx = ZKLOCK_NO_ENTRY;
		release_idx(*idx, *gen, ZKQD_NONE);
		zk_wake_worker();
		PG_RE_THROW();
	}
	PG_END_TRY();
	return zk_entry(*idx);
}

/* The caller has read zk_queue_info's answer: let go of the entry */
void
zk_queue_info_done(uint32 idx, uint32 gen)
{
	wait_idx = ZKLOCK_NO_ENTRY;
	release_idx(idx, gen, ZKQD_NONE);
	zk_wake_worker();
}

/* slots of the entry table read under one hold of the shared lock */
#define ZKQ_COUNT_CHUNK 256

/*
 * This cluster's claims held and consumers waiting, per queue, for
 * zk_queues: one pass over the table, ZKQ_COUNT_CHUNK slots at a time
 * under the shared lock (so the lock is never held for long), into a hash
 * table by queue name (ZkQueueLocal, in CurrentMemoryContext) that the
 * caller looks each queue up in.  One pass whatever the number of queues:
 * a zk_queues of Q queues costs Q lookups, not Q passes over the table.
 */
HTAB *
zk_queue_local_counts(void)
{
	HTAB	   *counts;
	int			from;
	struct
	{
		char		name[ZKLOCK_QNAME_MAX + 1];
		int			claims;
		int			waiting;
	}		   *chunk;

	counts = zk_hash_create("zklock queue counts", 64, ZKLOCK_QNAME_MAX + 1,
							sizeof(ZkQueueLocal), true, CurrentMemoryContext);
	chunk = palloc(sizeof(*chunk) * ZKQ_COUNT_CHUNK);
	for (from = 0; from < zk_ctl->max_entries; from += ZKQ_COUNT_CHUNK)
	{
		int			end = Min(from + ZKQ_COUNT_CHUNK, zk_ctl->max_entries);
		int			n = 0;
		int			i;

		zk_backend_lock(LW_SHARED);
		for (i = from; i < end; i++)
		{
			ZkEntry    *e = zk_entry(i);

			if (e->state == ZKE_FREE || e->kind != ZKK_QCLAIM || e->released ||
				(e->outcome != ZKO_GRANTED && e->outcome != ZKO_NONE))
				continue;
			strlcpy(chunk[n].name, e->name, sizeof(chunk[n].name));
			chunk[n].claims = e->outcome == ZKO_GRANTED ? ZKQ(e)->nclaims : 0;
			chunk[n].waiting = e->outcome == ZKO_NONE ? 1 : 0;
			n++;
		}
		LWLockRelease(zk_ctl->lock);
		for (i = 0; i < n; i++)
		{
			bool		found;
			ZkQueueLocal *q = hash_search(counts, chunk[i].name, HASH_ENTER, &found);

			if (!found)
				q->claims = q->waiting = 0;
			q->claims += chunk[i].claims;
			q->waiting += chunk[i].waiting;
		}
	}
	pfree(chunk);
	return counts;
}

/*
 * How many items this transaction enqueued into a queue so far (the name
 * as the user gave it, in UTF-8): they are published at its COMMIT
 */
int
zk_queue_pending_items(const char *qname, int qlen)
{
	ListCell   *lc;
	int			n = 0;

	qname = zk_qualify_name(qname, qlen, &qlen);
	foreach(lc, pending_items)
	{
		PendingItem *it = lfirst(lc);

		if (!ZKQ_IS_OP(it->priority) && it->qlen == qlen &&
			memcmp(it->qname, qname, qlen) == 0)
			n++;
	}
	return n;
}

/* ---- end of transaction ---- */

/*
 * Let go of the claims of this transaction (all) or of subtransaction
 * subid, to be consumed (commit) or put back; wakes the worker.
 */
static void
release_claims(bool commit, bool all, SubTransactionId subid)
{
	ListCell   *lc;
	bool		wake = false;

	foreach(lc, held_claims)
	{
		HeldClaim  *hc = lfirst(lc);

		if (!all && hc->subid != subid)
			continue;
		release_idx(hc->idx, hc->gen, commit ? ZKQD_COMMIT : ZKQD_NONE);
		wake = true;
		held_claims = foreach_delete_current(held_claims, lc);
		pfree(hc);
	}
	if (wake)
		zk_wake_worker();
}

/*
 * The recipe's xact_end: once the commit record is flushed, let go of the
 * claims and of the publication with the transaction's decision; after a
 * COMMIT wait up to zklock.commit_timeout for the items to be visible,
 * and warn if they are not (the worker publishes them later).
 */
static void
queue_xact_end(bool commit)
{
	/*
	 * Publish and consume only what is durably committed: with
	 * synchronous_commit = off the commit record may not be on disk yet, and
	 * a crash now would undo the transaction but not ZooKeeper's changes.
	 */
	if (commit && (held_claims != NIL || pub_idx != ZKLOCK_NO_ENTRY) &&
		XactLastCommitEnd != InvalidXLogRecPtr)
		XLogFlush(XactLastCommitEnd);

	if (wait_idx != ZKLOCK_NO_ENTRY)
	{
		release_idx(wait_idx, wait_gen, ZKQD_NONE);
		wait_idx = ZKLOCK_NO_ENTRY;
	}
	release_claims(commit, true, 0);
	if (pub_idx != ZKLOCK_NO_ENTRY)
	{
		uint32		idx = pub_idx;
		uint32		gen = pub_gen;

		pub_idx = ZKLOCK_NO_ENTRY;
		release_idx(idx, gen, commit ? ZKQD_COMMIT : ZKQD_NONE);
		zk_wake_worker();
		if (commit && zk_ctl != NULL)
		{
			/* the items are safe; wait a moment for them to be visible */
			TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															zk_commit_timeout);

			bool		blocked = false;
			char		msg[ZKLOCK_ERRMSG_MAX];

			msg[0] = '\0';
			while (zk_entry(idx)->gen == gen && GetCurrentTimestamp() < until)
			{
				/* ZooKeeper refused it for good: say so now, and why */
				if (ZKQ(zk_entry(idx))->pub_blocked &&
					zk_backend_lock_timed(LW_SHARED, 20))
				{
					ZkEntry    *pe = zk_entry(idx);

					blocked = (pe->gen == gen && ZKQ(pe)->pub_blocked);
					if (blocked)
						strlcpy(msg, pe->errmsg, sizeof(msg));
					LWLockRelease(zk_ctl->lock);
					if (blocked)
						break;
				}
				(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
								 5, zk_wait_event(ZKW_ANSWER));
				ResetLatch(MyLatch);
			}
			if (blocked)
				ereport(WARNING,
						(errcode(ERRCODE_WARNING),
						 errmsg("zookeeper refuses to publish the zklock work of this committed transaction"),
						 errdetail("The transaction is committed, but its queue items and gate and arrival changes are not visible: %s.",
								   msg),
						 errhint("The zklock worker publishes them, all together, once ZooKeeper takes them: remove what blocks it (for a gate node, the other client's children under it); zk_status().publications_blocked counts such transactions.")));
			else if (zk_entry(idx)->gen == gen)
				ereport(WARNING,
						(errmsg("the queue items of this transaction are committed but not yet visible in zookeeper"),
						 errdetail("ZooKeeper did not take them within zklock.commit_timeout (%d ms).",
								   zk_commit_timeout),
						 errhint("The zklock worker publishes them as soon as ZooKeeper is reachable.")));
		}
	}
	free_items();
	retry_marks_free();
	marked_fxid = 0;
}

/*
 * The recipe's subxact_end: a committed subtransaction hands its items and
 * claims to its parent; an aborted one drops its items and lets go of its
 * claims and of a dequeue still waiting.
 */
static void
queue_subxact_end(bool commit, SubTransactionId mySubid,
				  SubTransactionId parentSubid)
{
	ListCell   *lc;

	foreach(lc, pending_items)
	{
		PendingItem *it = lfirst(lc);

		if (it->subid != mySubid)
			continue;
		if (commit)
			it->subid = parentSubid;
		else
		{
			pending_bytes -= it->cost;
			pending_items = foreach_delete_current(pending_items, lc);
			pending_item_free(it);
		}
	}
	if (commit)
	{
		foreach(lc, held_claims)
		{
			HeldClaim  *hc = lfirst(lc);

			if (hc->subid == mySubid)
				hc->subid = parentSubid;
		}
	}
	else
	{
		if (wait_idx != ZKLOCK_NO_ENTRY)
		{
			release_idx(wait_idx, wait_gen, ZKQD_NONE);
			wait_idx = ZKLOCK_NO_ENTRY;
			zk_wake_worker();
		}
		release_claims(false, false, mySubid);
	}
	retry_marks_subxact_end(commit, mySubid, parentSubid);
}

/*
 * The recipe's at_exit: let go of everything; the claims go back, nothing
 * is published.
 */
static void
queue_at_exit(void)
{
	if (wait_idx != ZKLOCK_NO_ENTRY)
	{
		release_idx(wait_idx, wait_gen, ZKQD_NONE);
		wait_idx = ZKLOCK_NO_ENTRY;
	}
	release_claims(false, true, 0);
	retry_marks_free();
	if (pub_idx != ZKLOCK_NO_ENTRY)
	{
		release_idx(pub_idx, pub_gen, ZKQD_NONE);
		pub_idx = ZKLOCK_NO_ENTRY;
	}
}

/* zk_path('queue', name): <root>/queues/<encoded name> */
static void
queue_path(const char *kind, int arg, const char *name, int len,
		   char *out, size_t outlen)
{
	zk_queue_path(zk_path_qname(name, len, &len), out, outlen);
}

/*
 * zk_status(): committed transactions whose items ZooKeeper refuses, and
 * dequeues let go whose consume or release it refuses (lock held, shared)
 */
static void
queue_status_entry(const ZkEntry *e, ZkStatusCounts *c)
{
	if (e->kind == ZKK_QPUB && ZKQ(e)->pub_blocked)
		c->pubs_blocked++;
	if (e->kind == ZKK_QCLAIM && ZKQ(e)->end_blocked)
		c->ends_blocked++;
}

/* zk_status(): what the worker keeps of the queues, and what it cannot publish */
static void
queue_status(ZkStatusCounts *c)
{
	c->queues_tracked += zk_q_shared->queues_tracked;
	c->pubs_blocked += zk_q_shared->pubs_blocked_resolve;
}

const ZkRecipeBackend zk_queue_backend = {
	ZK_XACT_HOOKS(queue_pre_commit, queue_pre_prepare, queue_xact_end, queue_subxact_end),
	.at_exit = queue_at_exit,
	ZK_PATH_HOOK("queue", queue_path, 0),
	.status_entry = queue_status_entry,
	.status = queue_status,
	ZK_SHMEM_AREA("zklock queues", ZkQueueShared, zk_q_shared),
};
