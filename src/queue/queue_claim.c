/*-------------------------------------------------------------------------
 *
 * queue_claim.c
 *	  ZKK_QCLAIM's claims.  For each candidate one multi (check the entry,
 *	  create the claim) and one read of the payload, at most 4 MB of them
 *	  in flight and zklock.max_answer_bytes per dequeue ("How much one
 *	  dequeue claims"); an item whose payload finds no room in the dsa is
 *	  given back.  Claims are persistent and name the cluster and the
 *	  (sub)transaction; at commit one multi deletes items and claims, at
 *	  abort one multi deletes the claims (zk_q_send_end).  A claim whose reply
 *	  was lost is in doubt until a read of it says whose it is.
 *
 *	  The crash-safety argument: src/README, section 5.
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"
#include "batch.h"

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

/* the rounds above (queue_int.h): set by zk_q_rounds_init */
QRoundHooks zk_q_round_hooks;

static void claim_multi_done(int rc, const void *data);
static void claim_get_done(int rc, const char *value, int value_len,
						   const struct Stat *stat, const void *data);
static dsa_pointer store_msg(const char *node, const char *value, int value_len,
							 const struct Stat *stat);
static void give_back_done(int rc, const void *data);
static void
doubt_entry_done(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data);
static void end_done(int rc, const void *data);
static bool dead_letter_send(ZkEntry *e, int slot, QState *q, const char *tpath,
							 const char *value, int value_len, const struct Stat *stat);

static ZkLogLimit uncounted_log;	/* items whose hand-outs cannot be counted */

/*
 * One claim attempt: a multi (check the entry, create the claim, count the
 * hand-out), then a get.
 *
 * Counting hand-outs.  The multi also creates and deletes a child of the
 * item, ZKQ_HANDOUT_CHILD: nothing is left, but ZooKeeper adds 2 to the
 * item's cversion, which every read of the item returns in its Stat.  So
 * the item itself carries how often zklock handed it out (cversion / 2,
 * zk_message.attempts), in the same transaction as the claim: exact across
 * crashes and clusters, nothing to clean up, and no request more than
 * before.  kazoo and Curator read only the item's data, which stays as it
 * was.  The read sent behind the multi answers after it (one session's
 * requests are ordered), so it sees this hand-out counted; a read that
 * answered first (the multi was sent again on its own) is sent again.
 * (ZooKeeper shows a node's cversion as twice the children ever created
 * less those there now: a create and its delete add 2, a child there now
 * 1, which the halving drops.)
 *
 * The child needs CREATE and DELETE on the item, which zklock's ACL gives
 * but another client's item may not, and a node of that name another
 * client put there is in the way: then the claim goes again without the
 * count (two operations, as before), the item is handed out with attempts
 * NULL, and a rate-limited WARNING says so.  The queue goes on: one such
 * item never stops the items behind it.
 */
typedef struct Attempt
{
	QState	   *q;
	uint32		idx;
	uint32		gen;
	int			slot;
	bool		multi_ok;
	bool		multi_doubt;
	bool		multi_answered;
	bool		get_answered;	/* before the multi: kept below until it is */
	char	   *early;			/* the item read then (palloc'd), or NULL */
	int			early_len;
	struct Stat early_stat;
	char		node[ZKQ_NODE_MAX];
	char		epath[ZK_PATH_MAX];
	char		tpath[ZK_PATH_MAX];
	char		cpath[ZK_PATH_MAX + sizeof(ZKQ_HANDOUT_CHILD) + 1];	/* the
																	 * counting
																	 * child */
	bool		reread;			/* the get was sent again after the multi */
	bool		uncounted;		/* sent again without the counting child */
	char		data[ZKLOCK_DATA_MAX + ZK_CLAIM_MAC_TAIL];	/* the claim's,
															 * signed for
															 * tpath */
	char		qpath[ZK_PATH_MAX];	/* the queue's node: its policy's version */
	zoo_op_t	ops[5];
	zoo_op_result_t res[5];
} Attempt;

/* The first free claim slot of dequeue e, or -1 */
int
zk_q_free_slot(ZkEntry *e)
{
	ZkClaimRec *c = zk_q_claims_of(e);
	int			i;

	for (i = 0; i < ZKQ(e)->max_items; i++)
		if (c[i].status == ZKQC_FREE && c[i].node[0] == '\0')
			return i;
	return -1;
}

/* Claim slot of e: node, in the given status (ZKQC_*) */
static void
slot_set(ZkEntry *e, int slot, const char *node, uint8 status)
{
	ZkClaimRec *c = zk_q_claims_of(e);

	strlcpy(c[slot].node, node, sizeof(c[slot].node));
	c[slot].status = status;
}

/* Empty a claim slot of e, freeing the item it read */
static void
slot_clear(ZkEntry *e, int slot)
{
	ZkClaimRec *c = zk_q_claims_of(e);

	if (DsaPointerIsValid(c[slot].msg))
		dsa_free(zk_dsa(), c[slot].msg);
	c[slot].msg = InvalidDsaPointer;
	c[slot].has_item = false;
	c[slot].node[0] = '\0';
	c[slot].status = ZKQC_FREE;
}

/*
 * Claim node of queue q for dequeue e in slot: one multi (check the entry,
 * create the claim, signed), then a read of the item.  false: not sent.
 *
 * Both go through the batch (batch.c): the multis of every dequeue that
 * claims meanwhile, on any queue, go to ZooKeeper as one, and the read
 * right behind.  When a multi of claims fails because one of them lost its
 * item to another cluster, the others are sent again on their own, and
 * their reads, already on their way, answer first: such a read's item is
 * kept until its claim's answer says whether it is ours (the item's data
 * does not change once it is published).
 */
bool
zk_q_send_attempt(QState *q, ZkEntry *e, int slot, const char *node)
{
	MemoryContext old = MemoryContextSwitchTo(zk_q_context());
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
	snprintf(a->cpath, sizeof(a->cpath), "%s/" ZKQ_HANDOUT_CHILD, a->epath);
	zk_claim_sign(a->tpath, e->data, a->data, sizeof(a->data));
	strlcpy(a->qpath, q->path, sizeof(a->qpath));
	zoo_check_op_init(&a->ops[0], a->epath, -1);
	zoo_create_op_init(&a->ops[1], a->tpath, a->data, (int) strlen(a->data),
					   zk_acl_path(a->tpath), ZOO_PERSISTENT, NULL, 0);
	/* under the policy this worker knows ("Dead letters", below) */
	zoo_check_op_init(&a->ops[2], a->qpath, q->policy_version);
	/* the hand-out counted in the item's cversion (above) */
	zoo_create_op_init(&a->ops[3], a->cpath, NULL, -1, zk_acl_path(a->cpath),
					   ZOO_PERSISTENT, NULL, 0);
	zoo_delete_op_init(&a->ops[4], a->cpath, -1);
	/* recorded as in doubt until the answer says otherwise */
	slot_set(e, slot, node, ZKQC_DOUBT);
	zk_batch_multi(5, a->ops, a->res, claim_multi_done, a);
	e->outstanding++;
	q->inflight++;
	rc = zk_batch_get(a->epath, claim_get_done, a);
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
ClaimWindow
zk_q_claim_window(ZkEntry *e)
{
	uint64		cap = e->answer_cap > 0 ? e->answer_cap : (uint64) 16 * 1024 * 1024;
	uint64		inflight = (uint64) Max(e->outstanding, 0);
	uint64		next;

	if (ZKQ(e)->claim_refused)
		return CLAIM_DONE;
	if (inflight == 0 && ZKQ(e)->claim_bytes == 0)
		return CLAIM_SEND;		/* at least one item, whatever its size */
	if (ZKQ(e)->claim_largest == 0)
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
	next = (inflight + 1) * ZKQ(e)->claim_largest;
	if (ZKQ(e)->claim_bytes + next > cap)
		return inflight > 0 ? CLAIM_FULL : CLAIM_DONE;
	if (inflight > 0 && next > ZKQ_CLAIM_INFLIGHT_BYTES)
		return CLAIM_FULL;
	return CLAIM_SEND;
}

/* Compact q->rest once the open window's top-ups are over */
void
zk_q_rest_compact(QState *q)
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

	if (q->pipe != QPIPE_OPEN)
		return;
	e = zk_entry(q->pipe_idx);
	if (e->gen != q->pipe_gen || e->state == ZKE_FREE || e->released ||
		ZKQ(e)->withdrawn || !zk_session_usable())
	{
		q->pipe = QPIPE_CLOSED;
		return;
	}
	while (q->rest_head < q->nrest && (slot = zk_q_free_slot(e)) >= 0)
	{
		ClaimWindow w = zk_q_claim_window(e);

		if (w == CLAIM_FULL)
			return;				/* more once the next read answers */
		if (w == CLAIM_DONE || !zk_q_send_attempt(q, e, slot, q->rest[q->rest_head]))
			break;
		pfree(q->rest[q->rest_head]);
		q->rest[q->rest_head++] = NULL;
	}
	q->pipe = QPIPE_CLOSED;
}

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
		   const struct Stat *stat, QState *q, bool counted)
{
	ZkClaimRec *c = zk_q_claims_of(e);
	uint32		rec = sizeof(ZkMsgRec) + Max(value_len, 0);
	GiveBack   *g;

	c[slot].status = ZKQC_HELD;
	c[slot].has_item = true;
	if (e->state == ZKE_HELD || DsaPointerIsValid(c[slot].msg))
		return;

	/*
	 * handed out too often: to the dead-letter queue instead ("Dead
	 * letters"), also when its owner let go before this read answered (a
	 * cancelled dequeue): released, the claim that was to move the item
	 * would leave it counted once more than its hand-outs
	 */
	if (counted && dead_letter_send(e, slot, q, tpath, value, value_len, stat))
		return;
	if (e->released)
		return;
	ZKQ(e)->claim_largest = Max(ZKQ(e)->claim_largest, rec);
	c[slot].msg = store_msg(c[slot].node, value, value_len, stat);
	if (DsaPointerIsValid(c[slot].msg))
	{
		ZKQ(e)->claim_bytes += rec;
		zk_q_stats_add(e->name, 1, 0, 0, 0);
		return;
	}
	ZKQ(e)->claim_refused = true;
	c[slot].has_item = false;
	g = MemoryContextAllocZero(zk_q_context(), sizeof(GiveBack));
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

/* Is e one of queue q's waiters? */
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

/*
 * A request about one of e's claims (a give-back, a dead letter's move) is
 * answered: drive e once nothing more is out, unless a round of q it is in
 * decides at its end; and kick q's waiters, who may take what came free
 */
static void
slot_request_done(ZkEntry *e, QState *q)
{
	if (e != NULL && e->outstanding > 0 && --e->outstanding == 0 &&
		(q == NULL || !q_is_waiter(q, e)))
		zk_kind_drive(e);
	if (q != NULL && q->waiters != NIL && q->list.pending == 0 && q->inflight == 0)
		zk_q_round_hooks.kick(q);
}

/* Completion of the zoo_adelete sent by claim_read() */
static void
give_back_done(int rc, const void *data)
{
	GiveBack   *g = (GiveBack *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		QState	   *q = NULL;

		e = zk_q_entry_of(g->idx, g->gen);
		if (e != NULL)
			q = zk_q_state(e->name, false);
		if (e != NULL && DsaPointerIsValid(ZKQ(e)->claims) &&
			zk_q_claims_of(e)[g->slot].status == ZKQC_RETURN)
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
				zk_q_claims_of(e)[g->slot].status = ZKQC_HELD;	/* released with
															 * the claim */
			else
				zk_q_claims_of(e)[g->slot].status = ZKQC_DOUBT;	/* read it again */
		}
		slot_request_done(e, q);
	}
	COMPLETION_END(e);
	pfree(g);
}

/* Why a dequeue that holds nothing fails: 53200 */
void
zk_q_claim_fail_refused(ZkEntry *e)
{
	char		msg[ZKLOCK_ERRMSG_MAX];

	snprintf(msg, sizeof(msg),
			 "the first item it claimed did not fit in the shared memory zklock keeps payloads in (zklock.max_payload_memory is %d kB) and was given back to the queue",
			 zk_max_payload_kb);
	e->state = ZKE_DONE;
	zk_fail(e, ERRCODE_OUT_OF_MEMORY, msg);
}

/* An attempt is over: top up the open window; the last one ends the round */
static void
attempt_finish(Attempt *a)
{
	QState	   *q = a->q;
	ZkEntry    *e = zk_q_entry_of(a->idx, a->gen);

	if (e != NULL)
		e->outstanding--;
	q->inflight--;
	if (a->early)
		pfree(a->early);
	pfree(a);
	claim_top_up(q);
	if (q->inflight == 0 && q->list.pending == 0)
		zk_q_round_hooks.round_done(q);
}

/* Completion of the zoo_amulti sent by zk_q_send_attempt() */
static void
claim_multi_done(int rc, const void *data)
{
	Attempt    *a = (Attempt *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		bool		resent = false;

		e = zk_q_entry_of(a->idx, a->gen);
		if (rc == ZOK)
			a->multi_ok = true;
		else if (e != NULL && zk_rc_definite(rc) && !a->uncounted && a->res[0].err == ZOK &&
				 a->res[1].err == ZOK && a->res[2].err == ZOK &&
				 (a->res[3].err != ZOK || a->res[4].err != ZOK))
		{
			/*
			 * The item was free, but its counting child could not be made
			 * (refused, or a node of that name is in the way): claim it
			 * again without the count (above), this attempt going on.
			 */
			if (zk_log_limited(&uncounted_log, "queue item not counted"))
				ereport(WARNING,
						(errmsg("zklock: cannot count the hand-outs of queue item \"%s\"", a->epath),
						 errdetail("ZooKeeper refused to create \"%s\" (%s); the item is handed out with attempts NULL.",
								   a->cpath, zerror(a->res[3].err != ZOK ? a->res[3].err : a->res[4].err)),
						 errhint("Give zklock's ZooKeeper identity CREATE and DELETE on the items of its queues, and delete nodes other clients put under them.")));
			a->uncounted = true;
			resent = true;
			zk_batch_multi(3, a->ops, a->res, claim_multi_done, a);
		}
		else if (zk_rc_definite(rc))
		{
			/* taken by someone else, or gone: not ours */
			if (a->res[0].err == ZOK && a->res[1].err == ZOK &&
				(a->res[2].err == ZBADVERSION || a->res[2].err == ZNONODE))
				a->q->policy = QPOL_UNKNOWN;	/* the policy changed: read it */
			a->q->lost_race = true;
			a->q->settled = false;
			a->q->rest_exact = false;
			if (e != NULL)
				slot_clear(e, a->slot);
			/*
			 * Not a race: refused for want of permission, at every try.
			 * The dequeue fails and claims nothing more (its window is
			 * done), so that no item is handed out to nobody.
			 */
			if (e != NULL && rc == ZNOAUTH)
			{
				zk_fail_noauth(e, a->tpath);
				ZKQ(e)->claim_refused = true;
			}
		}
		else
		{
			a->q->settled = false;	/* in doubt: the slot says so */
			a->q->rest_exact = false;
		}
		if (!resent)			/* else its answer comes again */
		{
			a->multi_answered = true;
			if (a->get_answered && e != NULL && a->multi_ok && a->early != NULL &&
				!a->reread)
			{
				/*
				 * Its read answered first (the multi was sent again alone:
				 * see above): the item is ours, but that read's count of
				 * hand-outs is older than this one.  Read it again; if that
				 * cannot be sent, the claim is in doubt and its check reads
				 * it.
				 */
				pfree(a->early);
				a->early = NULL;
				a->get_answered = false;
				a->reread = true;
				if (zk_batch_get(a->epath, claim_get_done, a) != ZOK)
					attempt_finish(a);
			}
			else if (a->get_answered)
			{
				/* its read answered first and the claim is not ours */
				attempt_finish(a);
			}
			else if (a->multi_doubt)
			{
				/* no get was sent */
				a->multi_doubt = false;
				attempt_finish(a);
			}
		}
	}
	COMPLETION_END(e);
}

/*
 * Copy an item read into the dsa as a ZkMsgRec; InvalidDsaPointer when
 * zklock.max_payload_memory leaves no room
 */
static dsa_pointer
store_msg(const char *node, const char *value, int value_len, const struct Stat *stat)
{
	dsa_area   *area = zk_dsa();
	Size		len = value_len > 0 ? value_len : 0;
	dsa_pointer dp = dsa_allocate_extended(area, sizeof(ZkMsgRec) + len, DSA_ALLOC_NO_OOM);

	if (!DsaPointerIsValid(dp))
		return dp;
	zk_q_msg_fill(dsa_get_address(area, dp), node, value, len, stat);
	return dp;
}

/* Completion of the zoo_aget sent by zk_q_send_attempt() */
static void
claim_get_done(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	Attempt    *a = (Attempt *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_q_entry_of(a->idx, a->gen);
		if (!a->multi_answered)
		{
			/* the claim's answer decides: keep the item until then */
			a->get_answered = true;
			if (rc == ZOK && stat != NULL)
			{
				a->early = MemoryContextAlloc(zk_q_context(), Max(value_len, 1));
				if (value_len > 0)
					memcpy(a->early, value, value_len);
				a->early_len = Max(value_len, 0);
				a->early_stat = *stat;
			}
		}
		else
		{
			if (e != NULL && a->multi_ok && rc == ZOK)
			{
				ZkClaimRec *c = zk_q_claims_of(e);

				claim_read(e, a->slot, a->tpath, value, value_len, stat, a->q,
						   !a->uncounted);
				/* not counted: attempts NULL (0 is no hand-out) */
				if (a->uncounted && DsaPointerIsValid(c[a->slot].msg))
					((ZkMsgRec *) dsa_get_address(zk_dsa(), c[a->slot].msg))->attempts = 0;
			}
			/* else ours, but unread: in doubt, sorted out on the retry */
			attempt_finish(a);
		}
	}
	COMPLETION_END(e);
}

/* ---- dead letters ---- */

/*
 * Dead letters.  A queue's policy (queue_policy.c) names a dead-letter
 * queue and max_attempts.  A claim whose read shows the item handed out
 * more often than that, this hand-out included (cversion / 2 > max_attempts:
 * max_attempts hand-outs ended without a consume), does not hand it out:
 * one multi deletes the item and our claim and creates the item in the
 * dead-letter queue (sequential, same priority), its data the payload
 * behind a header with the origin's name, msg_id and hand-outs
 * (queue_nodes.c).  Atomic: the item is in exactly one of the two queues,
 * whatever crashes; our claim stops anyone else from moving or taking it
 * meanwhile.  The dequeue that met it goes on with the next items.
 *
 * Every claim checks the version of the policy it was decided under
 * (zk_q_send_attempt), so no cluster hands an item out once more under a
 * policy that changed.  The fate of a move whose answer is lost is read
 * back like a claim's (the slot goes in doubt): gone, or still ours and
 * read again, which moves it then.  A move ZooKeeper refuses for good (the
 * dead-letter queue's ACL, a node another client put under the item, an
 * item too large to take a header) hands items out as if there were no
 * policy for ZKQ_DL_BLOCK_MS, with a rate-limited WARNING; a dead-letter
 * queue missing three times in a row (ensured again each time) too.
 */
#define ZKQ_DL_BLOCK_MS		10000

typedef struct DeadLetter
{
	uint32		idx;
	uint32		gen;
	int			slot;
	char		name[ZKLOCK_QNAME_MAX + 1];
	char		node[ZKQ_NODE_MAX];
	char		epath[ZK_PATH_MAX];
	char		tpath[ZK_PATH_MAX];
	char		dpath[ZK_PATH_MAX];		/* <dlq>/entries/entry-PPP- */
	char		created[ZK_PATH_MAX];
	int32		attempts;
	char	   *data;
	int			dlen;
	zoo_op_t	ops[3];
	zoo_op_result_t res[3];
} DeadLetter;

static ZkLogLimit dl_refused_log;
static ZkLogLimit dl_moved_log;

static void dead_letter_done(int rc, const void *data);

/* Moves into q's dead-letter queue are refused: hand items out for a while */
static void
dead_letter_block(QState *q, const char *why, int rc)
{
	q->dl_blocked_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ZKQ_DL_BLOCK_MS);
	if (zk_log_limited(&dl_refused_log, "queue dead letter refused"))
		ereport(WARNING,
				(errmsg("zklock: cannot move items of queue \"%s\" to its dead-letter queue",
						zk_log_name(q->name)),
				 errdetail("%s (%s); items handed out more often than the policy allows are handed out again meanwhile.",
						   why, zerror(rc)),
				 errhint("Check the dead-letter queue named in the queue's policy (zk_queue_set_policy): its nodes must exist with zklock's ACL, and nothing but zklock may write under the queue's items.")));
}

/*
 * The data of the dead letter of item node of queue qname (read as value,
 * stat), handed out attempts times there: zklock's header (queue_nodes.c),
 * then the payload -- a dead letter moved again carries its payload, not
 * the old header.  palloc'd in the worker's queue context, its length in
 * *dlen; NULL when the item is too large to take the header.  The settling
 * pass moves with it too (queue_settle.c, "A claim that would have moved its
 * item").
 */
char *
zk_q_dl_data(const char *qname, const char *node, const char *value, int value_len,
			 const struct Stat *stat, int32 attempts, int *dlen)
{
	const char *payload = value;
	Size		plen = Max(value_len, 0);
	ZkDeadLetter old;
	const char *origin;
	Size		hlen;
	char	   *data;

	if (value != NULL && zk_q_dl_unwrap(value, plen, &old))
	{
		payload = old.payload;
		plen = old.plen;
	}
	if (plen + ZKQ_DL_HEADER_MAX + 3 * ZK_PATH_MAX + ZKQ_TXN_BASE > ZKQ_TXN_MAX)
		return NULL;
	origin = zk_name_part(qname);
	data = MemoryContextAlloc(zk_q_context(), ZKQ_DL_HEADER_MAX + plen);
	hlen = zk_q_dl_header(data, origin, (int) strlen(origin), attempts,
						  zk_queue_msg_id(stat->czxid, node));
	if (plen > 0)
		memcpy(data + hlen, payload, plen);
	*dlen = (int) (hlen + plen);
	return data;
}

/*
 * Our claim on the item in e's slot was read (claim_read): if q's policy
 * says it was handed out too often, send its move and return true (the
 * slot is ZKQC_RETURN until the answer); else false: hand it out.
 */
static bool
dead_letter_send(ZkEntry *e, int slot, QState *q, const char *tpath,
				 const char *value, int value_len, const struct Stat *stat)
{
	ZkClaimRec *c = zk_q_claims_of(e);
	int32		attempts;
	char	   *data;
	int			dlen;
	int			prio = 0;
	DeadLetter *dl;

	if (q == NULL || stat == NULL || q->policy != QPOL_KNOWN || q->max_attempts <= 0 ||
		q->dlq_path[0] == '\0')
		return false;
	attempts = stat->cversion > 0 ? stat->cversion / 2 : 0;
	if (attempts <= q->max_attempts)
		return false;
	if (q->dl_blocked_until > GetCurrentTimestamp())
		return false;
	data = zk_q_dl_data(e->name, c[slot].node, value, value_len, stat, attempts - 1,
						&dlen);
	if (data == NULL)
	{
		dead_letter_block(q, "An item is too large to take the dead-letter header", ZBADARGUMENTS);
		return false;
	}
	(void) zk_queue_node_priority(c[slot].node, &prio);
	dl = MemoryContextAllocZero(zk_q_context(), sizeof(DeadLetter));
	dl->idx = zk_entry_index(e);
	dl->gen = e->gen;
	dl->slot = slot;
	dl->attempts = attempts - 1;
	strlcpy(dl->name, e->name, sizeof(dl->name));
	strlcpy(dl->node, c[slot].node, sizeof(dl->node));
	snprintf(dl->epath, sizeof(dl->epath), "%s/entries/%s", q->path, c[slot].node);
	strlcpy(dl->tpath, tpath, sizeof(dl->tpath));
	snprintf(dl->dpath, sizeof(dl->dpath), "%s/entries/entry-%03d-", q->dlq_path, prio);
	dl->data = data;
	dl->dlen = dlen;
	zoo_delete_op_init(&dl->ops[0], dl->epath, -1);
	zoo_delete_op_init(&dl->ops[1], dl->tpath, -1);
	zoo_create_op_init(&dl->ops[2], dl->dpath, dl->data, dl->dlen, zk_acl_path(dl->dpath),
					   ZOO_SEQUENCE, dl->created, sizeof(dl->created));
	c[slot].has_item = false;
	if (zoo_amulti(zk_zh, 3, dl->ops, dl->res, dead_letter_done, dl) != ZOK)
	{
		/* ours or not once the session is back: read again then */
		pfree(dl->data);
		pfree(dl);
		c[slot].status = ZKQC_DOUBT;
		return true;
	}
	c[slot].status = ZKQC_RETURN;
	e->outstanding++;
	return true;
}

/* Completion of the zoo_amulti sent by dead_letter_send() */
static void
dead_letter_done(int rc, const void *data)
{
	DeadLetter *dl = (DeadLetter *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		QState	   *q = zk_q_state(dl->name, false);
		ZkClaimRec *c;

		e = zk_q_entry_of(dl->idx, dl->gen);
		c = (e != NULL) ? zk_q_claims_of(e) : NULL;
		if (c != NULL && c[dl->slot].status == ZKQC_RETURN &&
			strcmp(c[dl->slot].node, dl->node) == 0)
		{
			if (rc == ZOK)
			{
				slot_clear(e, dl->slot);
				zk_q_stats_add(dl->name, 0, 0, 0, 1);
				if (q != NULL)
				{
					q->own_edeletes++;	/* a long queue's rest stays exact */
					q->dl_nonode = 0;
				}
				if (zk_log_limited(&dl_moved_log, "queue dead letter"))
					ereport(LOG,
							(errmsg("zklock: moved item \"%s\" of queue \"%s\" to its dead-letter queue as \"%s\" after %d hand-outs",
									dl->node, zk_log_name(dl->name), dl->created, dl->attempts)));
			}
			else if (zk_rc_definite(rc) &&
					 (dl->res[0].err == ZNONODE || dl->res[1].err == ZNONODE))
				slot_clear(e, dl->slot);	/* gone: not ours any more */
			else if (zk_rc_definite(rc))
			{
				/* refused, nothing changed: read it again (and hand it out) */
				c[dl->slot].status = ZKQC_DOUBT;
				if (q != NULL && q->dlq_path[0] != '\0')
				{
					zk_q_send_ensure_queue(q->dlq_path);
					if (dl->res[2].err != ZNONODE || ++q->dl_nonode >= 3)
					{
						q->dl_nonode = 0;
						dead_letter_block(q, dl->res[2].err == ZNONODE ?
										  "The dead-letter queue's nodes cannot be created" :
										  "ZooKeeper refused the move", rc);
					}
				}
			}
			else
				c[dl->slot].status = ZKQC_DOUBT;	/* read it again */
		}
		slot_request_done(e, q);
	}
	COMPLETION_END(e);
	pfree(dl->data);
	pfree(dl);
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

/* One reply of a doubt check is in; after the last the dequeue goes on */
static void
doubt_check_finish(DoubtCheck *d, ZkEntry *e)
{
	if (--d->pending > 0)
		return;
	pfree(d);
	if (e != NULL && --e->outstanding == 0)
		zk_kind_drive(e);
}

/* Completion of the zoo_aget sent by zk_q_send_doubt_checks() */
static void
doubt_claim_done(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data)
{
	DoubtCheck *d = (DoubtCheck *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_q_entry_of(d->idx, d->gen);
		if (e != NULL)
		{
			char		tok[64];
			char		their[64];

			/* our request's token, signed for this very node */
			zk_q_claim_token_of(e, tok, sizeof(tok));
			if (rc == ZOK && value != NULL &&
				zk_json_field(value, value_len, "claim", their, sizeof(their)) &&
				tok[0] != '\0' && strcmp(tok, their) == 0 &&
				zk_claim_verify(d->tpath, value, value_len) == ZKM_VERIFIED)
			{
				d->ours = true;
				if (d->pending == 1)
				{
					/* no read of the item went with it: held, unread */
					zk_q_claims_of(e)[d->slot].status = ZKQC_HELD;
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

/* Completion of the zoo_aget sent by zk_q_send_doubt_checks() */
static void
doubt_entry_done(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data)
{
	DoubtCheck *d = (DoubtCheck *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_q_entry_of(d->idx, d->gen);
		if (e != NULL && d->ours)
		{
			ZkClaimRec *c = zk_q_claims_of(e);

			if (rc == ZOK)
				claim_read(e, d->slot, d->tpath, value, value_len, stat,
						   zk_q_state(e->name, false), true);
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
bool
zk_q_send_doubt_checks(ZkEntry *e, QState *q)
{
	ZkClaimRec *c = zk_q_claims_of(e);
	int			i;
	bool		sent = false;

	for (i = 0; i < ZKQ(e)->max_items; i++)
	{
		DoubtCheck *d;

		if (c[i].status != ZKQC_DOUBT)
			continue;
		d = MemoryContextAllocZero(zk_q_context(), sizeof(DoubtCheck));
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
	int			nholds;			/* claims made holds (two ops each) */
	int			nreturned;		/* claims released for a refused hold */
	bool		verify;
	zoo_op_t   *ops;
	zoo_op_result_t *res;
	char	  **paths;
	char	  **datas;			/* a hold's claim data, or NULL */
} EndOp;

/* Free an end multi and its paths */
static void
endop_free(EndOp *eo)
{
	int			i;

	for (i = 0; i < eo->nops; i++)
	{
		pfree(eo->paths[i]);
		if (eo->datas[i] != NULL)
			pfree(eo->datas[i]);
	}
	pfree(eo->datas);
	pfree(eo->paths);
	pfree(eo->ops);
	pfree(eo->res);
	pfree(eo);
}

/*
 * Backoff (zk_retry_later, doc/queues.md "Retry later").  A claim whose
 * owner asked for a backoff is not deleted when it ends, commit or not:
 * the end multi turns it into a hold instead, two ops in place of the
 * delete(s):
 *
 *	set    taken/<item>            {"zklock_hold":1,"until":<ms>,"index":...}
 *	create delayed/hold-<ms>-<item>  (empty: the index of holds by due time)
 *
 * The item stays where it is and stays claimed, so no zklock or kazoo
 * consumer takes it meanwhile; its hand-out is counted already.  The hold
 * names no cluster, so no settling pass or zk_queue_release_cluster takes
 * it for a claim of theirs, and a claim in doubt read back as a hold is
 * not ours any more (the end landed).  The index sits among the delayed
 * items, so every worker that serves the queue lists it, watches it and
 * sees when it is due without reading it (queue_delay.c), and ends it
 * with one multi: delete the index and the claim at the version read.  So
 * the item comes back whoever is up then, as a delayed item does.  The
 * claim's version is 0 until the set (a claim is created once and never
 * written), so the set fails on anything else.  A hold the multi cannot
 * make (refused for good: an old queue without its delayed node whose
 * create failed too, an ACL) is given up: the claim is released at once,
 * with a WARNING -- released, not consumed, at commit too (end_ops_of).
 */
#define ZKQ_HOLD_PREFIX		"hold-"

/* The hold's index name (in delayed) and claim data for item node */
static void
hold_format(const char *node, int64 until_ms, char **index, char **data)
{
	*index = psprintf(ZKQ_HOLD_PREFIX "%013lld-%s", (long long) until_ms, node);
	*data = psprintf("{\"zklock_hold\":1,\"until\":%lld,\"index\":\"%s\"}",
					 (long long) until_ms, *index);
}

/* Completion of the create of a queue's delayed node before a hold */
static void
hold_parent_done(int rc, const char *value, const void *data)
{
	/* nothing to do: the multi behind it says whether the hold was made */
}

static ZkLogLimit hold_log;

/*
 * The ops that end claim c: a hold two (set, create); a claim whose hold
 * was refused one, its delete alone, commit or not (hold_ms < 0: the item
 * goes back, as zk_retry_later asked, never consumed); else the claim's
 * delete, and at commit its item's before it.
 */
static int
end_ops_of(const ZkClaimRec *c, bool consume)
{
	if (c->hold_ms != 0)
		return c->hold_ms > 0 ? 2 : 1;
	return (consume && c->has_item) ? 2 : 1;
}

/*
 * One multi: delete the claims (and, at commit, their items), or make them
 * holds (above).  After a
 * first try whose fate is unknown, each claim is read first and deleted
 * only while it is still ours (verify): the first try may have landed and
 * the item been claimed again by someone else.
 */
void
zk_q_send_end(ZkEntry *e, QState *q)
{
	ZkClaimRec *c = zk_q_claims_of(e);
	bool		consume = (ZKQ(e)->decision == ZKQD_COMMIT);
	MemoryContext old;
	EndOp	   *eo;
	int			i;
	int			n = 0;

	bool		holds = false;

	for (i = 0; i < ZKQ(e)->max_items; i++)
		if (c[i].status == ZKQC_HELD)
		{
			n += end_ops_of(&c[i], consume);
			holds |= (c[i].hold_ms > 0);
		}
	if (n == 0)
	{
		zk_q_free_entry(e);
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
		if (!ZKQ(e)->fence_checked)
		{
			ZKQ(e)->fence_checked = true;
			e->in_doubt = true;
		}
	}
	if (e->in_doubt)
	{
		/* verify each claim: read it, delete only if still ours */
		for (i = 0; i < ZKQ(e)->max_items; i++)
			if (c[i].status == ZKQC_HELD)
				c[i].status = ZKQC_DOUBT;
		e->in_doubt = false;
		(void) zk_q_send_doubt_checks(e, q);
		return;
	}
	/*
	 * One multi per chunk of claims, each well under ZooKeeper's packet
	 * limit (jute.maxbuffer): every claim stands alone, so the chunks need
	 * not be atomic together.
	 */
	e->delete_inflight = true;
	e->state = ZKE_DELETING;
	ZKQ(e)->end_blocked = false;		/* until this try is refused too */
	if (holds)
	{
		/*
		 * The holds' index goes under delayed, which a queue kazoo made
		 * has not: created first (it is there already, mostly), in the
		 * session's order ahead of the multi
		 */
		char		dpath[ZK_PATH_MAX];

		snprintf(dpath, sizeof(dpath), "%s/delayed", q->path);
		(void) zoo_acreate(zk_zh, dpath, NULL, -1, zk_acl_path(dpath), ZOO_PERSISTENT,
						   hold_parent_done, NULL);
	}
	i = 0;
	while (i < ZKQ(e)->max_items)
	{
		int			first = i;
		int			nops = 0;
		Size		bytes = 0;
		int			k;

		for (; i < ZKQ(e)->max_items; i++)
		{
			Size		one;

			if (c[i].status != ZKQC_HELD)
				continue;
			one = 2 * (strlen(q->path) + ZKQ_NODE_MAX + 32);
			if (nops > 0 && bytes + one > ZKQ_MULTI_BUDGET)
				break;
			bytes += one;
			nops += end_ops_of(&c[i], consume);
		}
		if (nops == 0)
			break;
		old = MemoryContextSwitchTo(zk_q_context());
		eo = palloc0(sizeof(EndOp));
		eo->idx = zk_entry_index(e);
		eo->gen = e->gen;
		eo->nops = nops;
		eo->ops = palloc0(sizeof(zoo_op_t) * nops);
		eo->res = palloc0(sizeof(zoo_op_result_t) * nops);
		eo->paths = palloc0(sizeof(char *) * nops);
		eo->datas = palloc0(sizeof(char *) * nops);
		n = 0;
		for (k = first; k < i; k++)
		{
			if (c[k].status != ZKQC_HELD)
				continue;
			if (c[k].hold_ms > 0)
			{
				char	   *index;

				hold_format(c[k].node, c[k].hold_ms, &index, &eo->datas[n]);
				eo->paths[n] = psprintf("%s/taken/%s", q->path, c[k].node);
				zoo_set_op_init(&eo->ops[n], eo->paths[n], eo->datas[n],
								(int) strlen(eo->datas[n]), 0, NULL);
				n++;
				eo->paths[n] = psprintf("%s/delayed/%s", q->path, index);
				zoo_create_op_init(&eo->ops[n], eo->paths[n], NULL, -1,
								   zk_acl_path(eo->paths[n]), ZOO_PERSISTENT, NULL, 0);
				n++;
				pfree(index);
				eo->nholds++;
				continue;
			}
			if (c[k].hold_ms < 0)
				eo->nreturned++;	/* a refused hold: released (above) */
			else if (consume && c[k].has_item)
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
		/* gathered with other transactions' writes (batch.c) */
		zk_batch_multi(eo->nops, eo->ops, eo->res, end_done, eo);
		e->outstanding++;
	}
	if (e->outstanding == 0)
	{
		e->delete_inflight = false;
		zk_retry_later(e);
	}
}

/*
 * Ends ZooKeeper refuses.  A consume or release whose multi is refused for
 * good -- an item or claim that has children (ZNOTEMPTY: another client
 * wrote a node under it; zklock never deletes what it did not write) or a
 * delete refused for want of permission (ZNOAUTH) -- changed nothing: the
 * multi is atomic.  The claims stay, so no dequeue gets those items again
 * (exactly once); the entry is logged (rate-limited), counted
 * (noauth_refusals or zk_errors, zk_status().consumes_blocked while it
 * lasts) and tried again, paced: after 1 s, doubling up to 60 s, never at
 * once.  Once the children are gone (or the ACL allows it) the end goes
 * through.
 */
#define ZKQ_END_RETRY_MIN_MS	1000
#define ZKQ_END_RETRY_MAX_MS	60000

static List *end_blocked_list = NIL;	/* QPaced * */
static ZkLogLimit end_blocked_log;

/* The end of e was refused with rc on path: pace its next try, say so */
static void
end_block(ZkEntry *e, int rc, const char *path)
{
	QPaced	   *b = zk_q_paced_schedule(&end_blocked_list, e, false,
											ZKQ_END_RETRY_MIN_MS, ZKQ_END_RETRY_MAX_MS);
	bool		consume = (ZKQ(e)->decision == ZKQD_COMMIT);

	ZKQ(e)->end_blocked = true;
	if (rc == ZNOAUTH)
		zk_count(ZKCNT_NOAUTH, 1);
	else
		zk_count(ZKCNT_ZK_ERRORS, 1);
	if (!zk_log_limited(&end_blocked_log, "queue consume refused"))
		return;
	if (rc == ZNOTEMPTY)
		ereport(WARNING,
				(errmsg("zklock: zookeeper refused to %s queue claims of \"%s\": node \"%s\" has children",
						consume ? "consume" : "release", zk_log_name(e->name), path),
				 errdetail("Another ZooKeeper client created nodes under it, and zklock deletes only what it wrote. The %s stays in place, claimed by this cluster, so that no dequeue gets it again; zklock tries again in %d s.",
						   consume ? "consumed item" : "claim", b->interval_ms / 1000),
				 errhint("Delete the nodes under \"%s\" (zkCli.sh deleteall, kazoo's delete with recursive=True): the %s then completes on its own.",
						 path, consume ? "consume" : "release")));
	else
		ereport(WARNING,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("zklock: zookeeper refused access to \"%s\" when %s queue claims of \"%s\"",
						path, consume ? "consuming" : "releasing", zk_log_name(e->name)),
				 errdetail("The node's ACL does not let this cluster's ZooKeeper identity delete it (NOAUTH). The items stay in place, claimed by this cluster, so that no dequeue gets them again; zklock tries again in %d s.",
						   b->interval_ms / 1000),
				 errhint("Check zklock.auth_file, zklock.acl and the ACL of the queue's nodes (zk_status().acl_problems, zklock.acl_repair).")));
}

/* zk_q_end_blocked_tick: a dequeue stays on the list while it lives */
static bool
end_wanted(ZkEntry *e, QPaced *p)
{
	return true;
}

/* ... and is tried again only once its end is refused and nothing is out */
static bool
end_busy(ZkEntry *e)
{
	return !ZKQ(e)->end_blocked || e->outstanding > 0 || e->delete_inflight ||
		e->on_retry;
}

/* Drive the ends refused earlier whose pause is over (each turn) */
void
zk_q_end_blocked_tick(void)
{
	zk_q_paced_tick(&end_blocked_list, ZKK_QCLAIM, end_wanted, end_busy,
					zk_kind_drive);
}

/* Completion of the zoo_amulti sent by zk_q_send_end() */
static void
end_done(int rc, const void *data)
{
	EndOp	   *eo = (EndOp *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		int			refused = ZOK;
		const char *refused_path = NULL;
		int			i;

		e = zk_q_entry_of(eo->idx, eo->gen);
		/* refused for good (atomic: nothing changed), and by which node? */
		for (i = 0; rc != ZOK && zk_rc_definite(rc) && i < eo->nops; i++)
			if (eo->res[i].err == ZNOTEMPTY || eo->res[i].err == ZNOAUTH)
			{
				refused = eo->res[i].err;
				refused_path = eo->paths[i];
				break;
			}
		if (e != NULL && rc != ZOK && zk_rc_definite(rc) && eo->nholds > 0)
		{
			/* a hold refused for good: released at once instead (Backoff) */
			ZkClaimRec *c = zk_q_claims_of(e);

			/*
			 * Not 0: at commit a plain end would consume the item, which
			 * zk_retry_later asked to have back (end_ops_of)
			 */
			for (i = 0; i < ZKQ(e)->max_items; i++)
				if (c[i].hold_ms > 0)
					c[i].hold_ms = -1;
			if (zk_log_limited(&hold_log, "queue hold refused"))
				ereport(WARNING,
						(errmsg("zklock: cannot hold items of queue \"%s\" for zk_retry_later",
								zk_log_name(e->name)),
						 errdetail("ZooKeeper refused the hold (%s); the items go back at once.",
								   zerror(refused != ZOK ? refused : rc)),
						 errhint("Check the ACL of the queue's nodes (zk_status().acl_problems, zklock.acl_repair).")));
			refused = ZOK;		/* not blocked: verified and ended again */
		}
		else if (e != NULL && refused != ZOK)
			end_block(e, refused, refused_path);
		if (e != NULL && rc == ZOK)
			zk_q_stats_add(e->name, 0, eo->nentries,
						   eo->nholds + (ZKQ(e)->decision == ZKQD_COMMIT ? (uint64) eo->nreturned :
										 (uint64) (eo->nops - eo->nentries - 2 * eo->nholds)), 0);
		if (e != NULL && rc == ZOK && eo->nentries > 0)
		{
			/* entries deleted for sure: a long queue's rest stays exact */
			QState	   *q = zk_q_state(e->name, false);

			if (q != NULL)
				q->own_edeletes += eo->nentries;
		}
		if (e != NULL)
		{
			/* fate unknown, or some node was not there: verify each */
			if (rc != ZOK && refused == ZOK)
				e->in_doubt = true;
			if (--e->outstanding <= 0)
			{
				e->outstanding = 0;
				e->delete_inflight = false;
				if (ZKQ(e)->end_blocked)
					;			/* zk_q_end_blocked_tick tries again, paced */
				else if (e->in_doubt)
					zk_retry_later(e);
				else
				{
					bool		consumed = (ZKQ(e)->decision == ZKQD_COMMIT);
					QState	   *q = zk_q_state(e->name, false);

					if (consumed)
						zk_count(ZKCNT_RELEASES, ZKQ(e)->nclaims);
					zk_q_free_entry(e);
					/* items released here: this cluster's waiters may take them */
					if (!consumed && q != NULL)
					{
						q->settled = false;
						q->rest_exact = false;
					}
					if (!consumed && q != NULL && q->waiters != NIL)
						zk_q_round_hooks.kick(q);
				}
			}
		}
	}
	COMPLETION_END(e);
	endop_free(eo);
}

