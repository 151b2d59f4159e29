/*-------------------------------------------------------------------------
 *
 * queue_publish.c
 *	  ZKK_QPUB: a committing transaction's items.  Before its commit record
 *	  the items go into one persistent node <root>/txns/<sysid>-<run>-
 *	  <fullxid>, invisible to consumers (send_txn_create); once PostgreSQL
 *	  has committed, one multi deletes that node and creates the items, all
 *	  or none (zk_q_pub_send); a second try finds the node gone and creates
 *	  nothing; on abort the node is deleted.  The same multi carries the
 *	  gates' and arrivals' writes of the transaction ("ops"); one found
 *	  already done is left out and the multi sent again ("Ops found done").
 *	  A publication refused by ZooKeeper (ACLs, quotas) waits, blocked, and
 *	  is retried ("Publications ZooKeeper refuses").
 *
 *	  Item names near the end of entries' counter: queue_naming.c.  The
 *	  settling pass (queue_settle.c) publishes through zk_q_send_publish
 *	  too.  src/README, sections 4 and 5.
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"
#include "batch.h"

#include "access/transam.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/xid8.h"


static void publish_done(int rc, const void *data);
static void pub_block(ZkEntry *e, PubOp *po, int rc);
static void pub_unblock(ZkEntry *e);
static void pub_block_resolve(PubOp *po, int rc);
static void pub_txn_written(ZkEntry *e);
static void pub_kept_answered(ZkEntry *e, int rc);
static void pub_waits_fire(bool ok);
static void total_unreserve(ZkEntry *e);
static void pub_probe_send(PubOp *po);
static void pub_resend(PubOp *po, ZkEntry *e);
static void
pub_create_done(int rc, const char *value, const void *data);
static void send_txn_create(ZkEntry *e);
static void pub_create_result(ZkEntry *e, int rc);

bool zk_q_txns_parent_ok = false;

List *zk_q_pub_waits = NIL;	/* PubOp waiting for a queue's next */

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
bool
zk_q_history_gate(ZkEntry *e)
{
	if (zk_history_ready())
		return true;
	if (zk_history_fenced())
		zk_fail(e, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
				"another server took over this server's zklock run (see the server log); restart PostgreSQL");
	else
	{
		char		refused[ZKLOCK_PARENT_MAX + 1];

		/* its registration was refused (NOAUTH): 42501 now, not a timeout */
		if (zk_history_refused(refused, sizeof(refused)))
			zk_fail_noauth(e, refused); /* nothing sent: still PENDING */
		else
			zk_retry_later(e);
	}
	return false;
}


/* the previous try's ops and buffers */
static void
pub_clear(PubOp *po)
{
	void	  **arrays[] = {
		(void **) &po->paths, (void **) &po->bufs, (void **) &po->ops,
		(void **) &po->res, (void **) &po->item_off, (void **) &po->opkind,
		(void **) &po->opq, (void **) &po->opnum
	};
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
	/* the per-op arrays (zk_q_pub_send), freed and forgotten */
	for (i = 0; i < (int) lengthof(arrays); i++)
	{
		if (*arrays[i] != NULL)
			pfree(*arrays[i]);
		*arrays[i] = NULL;
	}
	po->nops = 0;
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
	qsort(parents, k, sizeof(char *), zk_q_cmp_names);
	for (i = 0; i < k; i++)
	{
		if (i == 0 || strcmp(parents[i], parents[i - 1]) != 0)
			zk_q_send_ensure_path(parents[i]);
	}
	for (i = 0; i < k; i++)
		pfree(parents[i]);
	pfree(parents);
}

/* The queues of a publication that name their items themselves */
typedef struct PubNaming
{
	QSeq	  **qs;				/* each such queue once (NULL: out of names) */
	int		   *qcount;			/* ... its items in this publication */
	int		   *qused;			/* ... of which named so far */
	int			nq;
} PubNaming;

typedef enum PubNamingVerdict
{
	PUBN_READY,					/* every counter needed is known */
	PUBN_WAIT,					/* asked: the PubOp waits on zk_q_pub_waits */
	PUBN_FAILED					/* could not ask */
} PubNamingVerdict;

/* Free what pub_naming() allocated */
static void
pub_naming_free(PubNaming *pn)
{
	pfree(pn->qs);
	pfree(pn->qcount);
	pfree(pn->qused);
}

/*
 * Find the queues of blob's items that name their items from their next
 * node, and make sure each one's next is known; asks (a probe of next, or a
 * read of it) what is not.  In zk_q_context().
 */
static PubNamingVerdict
pub_naming(const char *blob, PubNaming *pn)
{
	const ZkTxnHeader *h = (const ZkTxnHeader *) blob;
	const char *p = blob + sizeof(ZkTxnHeader);
	bool		wait = false;
	bool		failed = false;
	uint32		i;
	int			j;

	pn->qs = palloc0(sizeof(QSeq *) * (h->nitems + 1));
	pn->qcount = palloc0(sizeof(int) * (h->nitems + 1));
	pn->qused = palloc0(sizeof(int) * (h->nitems + 1));
	pn->nq = 0;
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
		if (it.priority & (ZKQ_ITEM_DELAYED | ZKQ_ITEM_GROUPED))
			continue;			/* named under delayed, not by entries' */
		q = zk_q_seq(qname);
		if (q->naming == QSEQ_UNASKED || q->naming == QSEQ_ASKING)
		{
			/* does it name its items itself?  (asked before commit, as a rule) */
			zk_q_seq_probe(q, pub_waits_fire);
			if (q->naming == QSEQ_UNASKED)
				failed = true;	/* could not ask (the others are asked) */
			wait = true;
			continue;
		}
		if (q->naming != QSEQ_EXPLICIT)
			continue;
		for (j = 0; j < pn->nq && pn->qs[j] != q; j++)
			;
		if (j == pn->nq)
			pn->qs[pn->nq++] = q;
		pn->qcount[j]++;
	}
	if (failed)
		return PUBN_FAILED;
	for (j = 0; j < pn->nq; j++)
	{
		QSeq	   *q = pn->qs[j];

		if (q->next != QNEXT_UNKNOWN && q->seq_next + pn->qcount[j] - 1 > ZKQ_SEQ_LAST)
		{
			if (q->next == QNEXT_READ)
			{
				/*
				 * out of ten-digit names too: this time the counter's way,
				 * which fails, until ZKQ_NAMING_TRIES end in the warning
				 */
				pn->qs[j] = NULL;
				continue;
			}
			/* read again: past LAST - SLACK, next yields to the listing */
			q->next = QNEXT_UNKNOWN;
		}
		if (q->next == QNEXT_UNKNOWN)
		{
			if (!zk_q_seq_fetch(q, pub_waits_fire))
				return PUBN_FAILED;
			wait = true;
		}
	}
	return wait ? PUBN_WAIT : PUBN_READY;
}

/*
 * Ops n... of po: each self-naming queue's next, set with the version
 * read, or created; near the end of its (32-bit) version, deleted with it
 * and created again.  Returns the next op's index.
 */
static int
pub_add_counters(PubOp *po, PubNaming *pn, int n)
{
	int			j;

	for (j = 0; j < pn->nq; j++)
	{
		QSeq	   *q = pn->qs[j];
		char		npath[ZK_PATH_MAX];
		bool		recreate;

		if (q == NULL)
			continue;
		zk_q_seq_path(q, "next", npath, sizeof(npath));
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
		po->opnum[n] = q->seq_next + pn->qcount[j];
		po->paths[n] = pstrdup(npath);
		po->bufs[n] = psprintf(INT64_FORMAT, po->opnum[n]);
		if (!q->seq_exists || recreate)
			zoo_create_op_init(&po->ops[n], po->paths[n], po->bufs[n],
							   (int) strlen(po->bufs[n]), zk_acl_path(po->paths[n]), 0,
							   NULL, 0);
		else
			zoo_set_op_init(&po->ops[n], po->paths[n], po->bufs[n],
							(int) strlen(po->bufs[n]), q->seq_version, NULL);
		n++;
	}
	return n;
}

/*
 * Ops n... of po: blob's items (created under entries, named by the
 * counter or from next) and recipe ops (not those found done).  Ensures
 * the queues' parents first where not known; *nparents counts the ops'
 * parents to ensure.  Returns the number of ops.
 */
static int
pub_add_items(PubOp *po, const char *blob, PubNaming *pn, int n, int *nparents)
{
	const ZkTxnHeader *h = (const ZkTxnHeader *) blob;
	const char *p = blob + sizeof(ZkTxnHeader);
	uint32		i;
	int			j;

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
					/* its parents: ensured by the caller, once per parent */
					(*nparents)++;
					zoo_create_op_init(&po->ops[n], po->paths[n], p, (int) it.plen,
									   zk_acl_path(po->paths[n]), 0, NULL, 0);
				}
				else
					zoo_delete_op_init(&po->ops[n], po->paths[n], -1);
				n++;
			}
			p += it.plen;
			continue;
		}
		zk_queue_path(qname, qpath, sizeof(qpath));
		if (po->ensure || !zk_q_parents_known(qname))
		{
			zk_q_send_ensure_queue(qpath);
			zk_q_parents_remember(qname, true);
		}
		q = zk_q_seq(qname);
		if (it.priority & ZKQ_ITEM_DELAYED)
		{
			/*
			 * A delayed item goes to <queue>/delayed, named by its due time
			 * (queue_delay.c), its data the payload behind the due time
			 */
			uint64		due = 0;
			int			k;
			int			blen;

			for (k = 0; k < ZKQ_DUE_LEN; k++)
				due = (due << 8) | (unsigned char) p[k];
			po->item_off[n] = off;
			po->opkind[n] = PUB_DELAYED_ITEM;
			po->paths[n] = psprintf("%s/delayed/due-%013" PRIu64 "-%03d-", qpath, due,
									(int) ZKQ_PRIO(it.priority));
			blen = (int) strlen(po->paths[n]) + 16;
			po->bufs[n] = palloc0(blen);
			zoo_create_op_init(&po->ops[n], po->paths[n], p + ZKQ_DUE_LEN,
							   (int) it.plen - ZKQ_DUE_LEN, zk_acl_path(po->paths[n]),
							   ZOO_PERSISTENT_SEQUENTIAL, po->bufs[n], blen);
			n++;
			p += it.plen;
			continue;
		}
		if (it.priority & ZKQ_ITEM_GROUPED)
		{
			/*
			 * A grouped item waits under <queue>/delayed, named by its group,
			 * in the order published (queue_delay.c, "Message groups"), its
			 * data the payload behind the group
			 */
			int			glen = (unsigned char) p[0];
			int			blen;

			po->item_off[n] = off;
			po->opkind[n] = PUB_DELAYED_ITEM;
			po->paths[n] = psprintf("%s/delayed/grp-%.*s~%03d-", qpath, glen, p + 1,
									(int) ZKQ_PRIO(it.priority));
			blen = (int) strlen(po->paths[n]) + 16;
			po->bufs[n] = palloc0(blen);
			zoo_create_op_init(&po->ops[n], po->paths[n], p + 1 + glen,
							   (int) it.plen - 1 - glen, zk_acl_path(po->paths[n]),
							   ZOO_PERSISTENT_SEQUENTIAL, po->bufs[n], blen);
			n++;
			p += it.plen;
			continue;
		}
		for (j = 0; j < pn->nq && pn->qs[j] != q; j++)
			;
		po->item_off[n] = off;
		po->opq[n] = q;
		q->refs++;
		if (j < pn->nq)
		{
			po->opkind[n] = PUB_NAMED_ITEM;
			po->paths[n] = psprintf("%s/entries/entry-%03d-%010" PRId64,
									qpath, (int) it.priority, q->seq_next + pn->qused[j]);
			pn->qused[j]++;
			zoo_create_op_init(&po->ops[n], po->paths[n], p, (int) it.plen,
							   zk_acl_path(po->paths[n]), 0, NULL, 0);
		}
		else
		{
			int			blen;

			po->opkind[n] = PUB_SEQ_ITEM;
			po->paths[n] = psprintf("%s/entries/entry-%03d-", qpath, (int) it.priority);
			blen = (int) strlen(po->paths[n]) + 16;
			po->bufs[n] = palloc0(blen);
			zoo_create_op_init(&po->ops[n], po->paths[n], p, (int) it.plen,
							   zk_acl_path(po->paths[n]), ZOO_PERSISTENT_SEQUENTIAL,
							   po->bufs[n], blen);
		}
		n++;
		p += it.plen;
	}
	return n;
}

/*
 * Late creates
 *
 * A create that was sent but never answered (the connection was lost) may
 * still be applied later: a follower cut off from the quorum with the
 * request in hand can pass it on once the partition heals, after the
 * worker reconnected elsewhere, made the node again and published it.  The
 * late create would bring a published node back, and the next settling
 * pass (a restart, or another server taking the run over) would publish
 * its transaction a second time (seen in a 600 s fault run).  So the
 * publication of a transaction whose node had a create go unanswered does
 * not leave the path free: the same multi that deletes the node creates it
 * again as a small signed ZkTxnKept with one child.  A late create then
 * fails (the node exists); the multi sent again fails on its delete (the
 * node has a child), which says it was applied.  ZooKeeper applies no
 * request of a session that has ended, so the settling pass deletes a kept
 * node once the session that published it is gone for certain
 * (queue_settle.c).  Publications whose creates were all answered, the
 * common case, cost nothing more.
 */

/* Ops nops, nops + 1 of po: the node again, kept, and its child */
static void
pub_add_kept(PubOp *po, const ZkTxnHeader *h)
{
	int			n = po->nops;

	memset(&po->kept, 0, sizeof(po->kept));
	po->kept.magic = ZKQ_TXN_KEPT_MAGIC;
	po->kept.sysid = h->sysid;
	po->kept.fxid = h->fxid;
	po->kept.run = h->run;
	po->kept.session = zk_cur_session;
	zk_kept_sign(po->tpath, &po->kept);
	snprintf(po->kept_child, sizeof(po->kept_child), "%s/%s", po->tpath,
			 ZKQ_TXN_KEPT_CHILD);
	po->opkind[n] = PUB_KEPT;
	zoo_create_op_init(&po->ops[n], po->tpath, (const char *) &po->kept,
					   (int) sizeof(po->kept), zk_acl(), ZOO_PERSISTENT, NULL, 0);
	n++;
	po->opkind[n] = PUB_KEPT;
	zoo_create_op_init(&po->ops[n], po->kept_child, NULL, -1, zk_acl(),
					   ZOO_PERSISTENT, NULL, 0);
	n++;
	po->nops = n;
}

/*
 * Send the publishing multi of po: delete the transaction node, set the
 * self-naming queues' next nodes, create the items, apply the recipe ops.
 * A queue whose naming is not known yet makes po wait on zk_q_pub_waits
 * (true).  false: nothing could be sent.
 */
bool
zk_q_pub_send(PubOp *po)
{
	const char *blob;
	const ZkTxnHeader *h;
	MemoryContext old;
	PubNaming	pn;
	PubNamingVerdict v;
	int			j;
	int			nparents = 0;

	if (po->blob != NULL)
		blob = po->blob;
	else
		blob = dsa_get_address(zk_dsa(), zk_entry(po->idx)->blob);
	h = (const ZkTxnHeader *) blob;
	pub_clear(po);
	old = MemoryContextSwitchTo(zk_q_context());
	v = pub_naming(blob, &pn);
	if (v != PUBN_READY)
	{
		pub_naming_free(&pn);
		if (v == PUBN_WAIT && !po->waiting)
		{
			zk_q_pub_waits = lappend(zk_q_pub_waits, po);
			po->waiting = true;
		}
		MemoryContextSwitchTo(old);
		return v == PUBN_WAIT;
	}

	j = h->nitems + 2 * pn.nq + 1 + (po->keep ? 2 : 0);
	po->ops = palloc0(sizeof(zoo_op_t) * j);
	po->res = palloc0(sizeof(zoo_op_result_t) * j);
	po->paths = palloc0(sizeof(char *) * j);
	po->bufs = palloc0(sizeof(char *) * j);
	po->item_off = palloc0(sizeof(uint32) * j);
	po->opkind = palloc0(sizeof(uint8) * j);
	po->opq = palloc0(sizeof(QSeq *) * j);
	po->opnum = palloc0(sizeof(int64) * j);
	zoo_delete_op_init(&po->ops[0], po->tpath, -1);
	po->nops = pub_add_items(po, blob, &pn, pub_add_counters(po, &pn, 1),
							 &nparents);
	if (po->keep)
		pub_add_kept(po, h);
	pub_naming_free(&pn);
	MemoryContextSwitchTo(old);
	if (nparents > 0)
		pub_ensure_parents(po, nparents);
	/* gathered with other transactions' writes (batch.c) */
	zk_batch_multi(po->nops, po->ops, po->res, publish_done, po);
	return true;
}

/* Free a publication in flight (and take it off zk_q_pub_waits) */
void
zk_q_pubop_free(PubOp *po)
{
	if (po->waiting)
		zk_q_pub_waits = list_delete_ptr(zk_q_pub_waits, po);
	pub_clear(po);
	if (po->blob)
		pfree(po->blob);
	pfree(po);
}

/*
 * Hand a publication that was not sent back to be retried: its entry e (if
 * any) later, else the settling pass's (po->scan) as not done.  The caller
 * frees po.
 */
static void
pub_give_back(PubOp *po, ZkEntry *e)
{
	if (e != NULL)
	{
		e->delete_inflight = false;
		zk_retry_later(e);
	}
	else if (po->scan != NULL)
		po->scan_done(po->scan, false, 0);
}

/*
 * The naming answer the PubOps on zk_q_pub_waits waited for is in (ok: it
 * was read): send each again once every queue's counter it needs is known
 */
static void
pub_waits_fire(bool ok)
{
	List	   *waits = zk_q_pub_waits;
	ListCell   *lc;

	zk_q_pub_waits = NIL;
	foreach(lc, waits)
	{
		PubOp	   *po = lfirst(lc);
		ZkEntry    *e = NULL;

		po->waiting = false;
		if (po->gen != ZKLOCK_NO_ENTRY)
		{
			ZkEntry    *pe = zk_q_entry_of(po->idx, po->gen);

			if (pe != NULL && pe->delete_inflight)
				e = pe;
			else
			{
				zk_q_pubop_free(po); /* moved on without it (a new session) */
				continue;
			}
		}
		if (ok && zk_session_usable() && zk_q_pub_send(po))
			continue;
		pub_give_back(po, e);
		zk_q_pubop_free(po);
	}
	list_free(waits);
}

/*
 * Send the publishing multi for a transaction's items: delete the
 * transaction node, create every item.  ensure: send the parents' creates
 * first (after a NONODE, and always from the resolution).  keep: a create
 * of the node may still be on its way (queue_publish.c, "Late creates").
 */
bool
zk_q_send_publish(const char *blob, const char *tpath, uint32 idx, uint32 gen,
				  struct Scan *scan, zk_q_scan_fn scan_done, bool ensure, bool keep)
{
	PubOp	   *po = MemoryContextAllocZero(zk_q_context(), sizeof(PubOp));

	po->idx = idx;
	po->gen = gen;
	po->scan = scan;
	po->scan_done = scan_done;
	po->ensure = ensure;
	po->keep = keep;
	if (scan != NULL)
	{
		/* the resolution's copy: ours to mark skipped ops in */
		const ZkTxnHeader *h = (const ZkTxnHeader *) blob;

		po->blob = MemoryContextAlloc(zk_q_context(), h->total);
		memcpy(po->blob, blob, h->total);
	}
	strlcpy(po->tpath, tpath, sizeof(po->tpath));
	if (!zk_q_pub_send(po))
	{
		zk_q_pubop_free(po);
		return false;
	}
	return true;
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

/* the blob a PubOp marks skipped ops in, or NULL when its entry is gone */
static char *
pub_blob(PubOp *po, ZkEntry **ep)
{
	*ep = NULL;
	if (po->gen != ZKLOCK_NO_ENTRY)
	{
		ZkEntry    *pe = zk_q_entry_of(po->idx, po->gen);

		if (pe == NULL || !DsaPointerIsValid(pe->blob))
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
			po->scan_done(po->scan, false, 0);
		zk_q_pubop_free(po);
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
		c = MemoryContextAlloc(zk_q_context(), sizeof(ProbeCall));
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
		pub_give_back(po, e);
		zk_q_pubop_free(po);
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
	bool		sent = zk_q_pub_send(po);

	if (sent)
		return;
	pub_give_back(po, e);
	zk_q_pubop_free(po);
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

static List *pub_blocked_list = NIL;	/* QPaced *; quiet: paced, not
										 * refused (a drop races it) */
TimestampTz zk_q_resolve_again_at = 0;

/* Why ZooKeeper refused po's multi (rc), in words, into buf */
static void
pub_refusal(PubOp *po, int rc, char *buf, size_t len)
{
	const char *full = zk_q_seq_exhausted(po);
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

static ZkLogLimit pub_block_log;

/* A committed transaction's publication failed for good: keep it, retry */
static void
pub_block(ZkEntry *e, PubOp *po, int rc)
{
	char		why[ZKLOCK_ERRMSG_MAX];

	pub_refusal(po, rc, why, sizeof(why));
	strlcpy(e->errmsg, why, sizeof(e->errmsg));
	if (!ZKQ(e)->pub_blocked)
	{
		ZKQ(e)->pub_blocked = true;
		zk_count(ZKCNT_ZK_ERRORS, 1);
		if (zk_log_limited(&pub_block_log, "zookeeper refuses to publish the work of a committed transaction"))
			ereport(WARNING,
					(errmsg("zklock: zookeeper refuses to publish the work of committed transaction " UINT64_FORMAT ": %s",
							ZKQ(e)->fxid, why),
					 errdetail("Its queue items and gate and arrival changes stay in the transaction node %s, none of them visible; the worker tries the whole publication again every %d s until ZooKeeper takes it.",
							   po->tpath, ZKQ_BLOCKED_MAX_MS / 1000),
					 errhint("Remove what blocks it (for a gate node: the other client's children under it); zk_status().publications_blocked counts the transactions waiting so.")));
	}
	(void) zk_q_paced_schedule(&pub_blocked_list, e, false, ZKQ_BLOCKED_FIRST_MS,
							   ZKQ_BLOCKED_MAX_MS);
}

/*
 * A publication that a drop elsewhere keeps failing ("Dropping a queue"):
 * ZooKeeper takes the parents' creates, so nothing refuses it, and it goes
 * again, paced (ZKQ_PACED_FIRST_MS, doubling up to ZKQ_PACED_MAX_MS) so
 * that the worker does not spin while the drops go on.  It is not blocked:
 * the COMMIT waiting for it says nothing unless zklock.commit_timeout
 * passes first.
 */
#define ZKQ_PACED_FIRST_MS		10
#define ZKQ_PACED_MAX_MS		1000

static void
pub_pace(ZkEntry *e)
{
	(void) zk_q_paced_schedule(&pub_blocked_list, e, true, ZKQ_PACED_FIRST_MS,
							   ZKQ_PACED_MAX_MS);
}

static ZkLogLimit pub_unblock_log;

/* ... and ZooKeeper has taken it now */
static void
pub_unblock(ZkEntry *e)
{
	zk_q_paced_forget(&pub_blocked_list, e);
	ZKQ(e)->pub_blocked = false;
	if (zk_log_limited(&pub_unblock_log, "published the work of a transaction that zookeeper had refused"))
		ereport(LOG,
				(errmsg("zklock: published the work of transaction " UINT64_FORMAT " that zookeeper had refused",
						ZKQ(e)->fxid)));
}

static ZkLogLimit pub_resolve_log;

/* The settling pass's publication was refused: count it, run it again */
static void
pub_block_resolve(PubOp *po, int rc)
{
	char		why[ZKLOCK_ERRMSG_MAX];

	pub_refusal(po, rc, why, sizeof(why));
	zk_q_shared->pubs_blocked_resolve++;
	zk_count(ZKCNT_ZK_ERRORS, 1);
	if (zk_log_limited(&pub_resolve_log, "zookeeper refuses to publish a committed transaction node"))
		ereport(WARNING,
				(errmsg("zklock: zookeeper refuses to publish the committed transaction node %s: %s",
						po->tpath, why),
				 errdetail("Its queue items and gate and arrival changes stay in that node, none of them visible; the worker settles it again every %d s until ZooKeeper takes it.",
						   ZKQ_BLOCKED_RESOLVE_MS / 1000),
				 errhint("Remove what blocks it (for a gate node: the other client's children under it); zk_status().publications_blocked counts the transactions waiting so.")));
	zk_q_resolve_again_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   ZKQ_BLOCKED_RESOLVE_MS);
}

/* zk_q_pub_blocked_tick: a publication stays while refused or paced */
static bool
pub_wanted(ZkEntry *e, QPaced *p)
{
	return ZKQ(e)->pub_blocked || p->quiet;
}

/* ... and is sent again only with nothing of it out */
static bool
pub_busy(ZkEntry *e)
{
	return e->delete_inflight || e->create_inflight || e->on_retry;
}

/* Every turn with a usable session: send the refused ones that are due */
void
zk_q_pub_blocked_tick(void)
{
	zk_q_paced_tick(&pub_blocked_list, ZKK_QPUB, pub_wanted, pub_busy,
					zk_qpub_drive);
}

/*
 * A publication that fails for a missing parent sends the parents' creates
 * and goes again (three times, then it is blocked, see pub_block).  A drop
 * of the queue elsewhere (zk_queue_drop, "Dropping a queue") that lands
 * between those creates and the multi fails it again, however often it
 * tries; as long as no parent's create was refused in this session (an
 * ACL), it goes on: at once up to ZKQ_PARENT_TRIES tries, then paced
 * (pub_pace), up to ZKQ_PACED_TRIES tries (more than a minute of drops):
 * past that it is blocked (pub_block), counted and logged, and still tried
 * again, so that a publication that never goes through is not silent.
 */
#define ZKQ_PARENT_TRIES	20
#define ZKQ_PACED_TRIES		100

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

/* Completion of the zoo_amulti sent by zk_q_pub_send() */
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
			zk_q_pub_note_names(po);
		if (!applied && zk_rc_definite(rc))
		{
			/* kept: this multi was applied before ("Late creates") */
			if (po->res[0].err == ZNONODE ||
				(po->keep && po->res[0].err == ZNOTEMPTY))
				applied = true;
			for (i = 1; i < po->nops; i++)
				if (po->res[i].err == ZNONODE && po->opkind[i] != PUB_COUNTER)
					missing_parent = true;
		}
		if (po->gen != ZKLOCK_NO_ENTRY)
		{
			e = zk_q_entry_of(po->idx, po->gen);
		}
		if (!applied && zk_rc_definite(rc) && zk_session_usable() &&
			(e != NULL || po->scan != NULL) && zk_q_pub_naming_conflict(po))
		{
			/* a queue's next read again, then the same multi renamed */
			po->tries++;
			keep = zk_q_pub_send(po);
			if (!keep)
				pub_give_back(po, e);	/* po freed below */
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
				if (ZKQ(e)->pub_blocked)
					pub_unblock(e);
				zk_q_free_entry(e);
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);
			else if (missing_parent &&
					 (e->errors < 3 ||
					  (e->errors < ZKQ_PACED_TRIES && !pub_parent_refused(po))))
			{
				e->errors++;
				e->parents_tried = true;
				if (e->errors < ZKQ_PARENT_TRIES)
					zk_retry_later(e);
				else
					pub_pace(e);
			}
			else if (!zk_session_usable())
				zk_retry_later(e);	/* judged once it is usable again */
			else
				pub_block(e, po, rc);	/* kept, and tried again later */
		}
		else if (po->scan != NULL)
		{
			if (applied && po->blob != NULL)
				zk_q_given_up_remove(((const ZkTxnHeader *) po->blob)->fxid);
			if (!applied && zk_rc_definite(rc) && zk_session_usable())
				pub_block_resolve(po, rc);
			po->scan_done(po->scan, applied || zk_rc_definite(rc), applied && rc == ZOK ? 1 : 0);
		}
	}
	COMPLETION_END(e);
	if (!keep)
		zk_q_pubop_free(po);
}

/*
 * Completion of the zoo_aset sent by pub_create_done(): answered as the
 * create would have been (ZOK: the node holds our data now)
 */
static void
pub_set_done(int rc, const struct Stat *stat, const void *data)
{
	pub_create_done(rc, NULL, data);
}

/*
 * A gate node's state before the commit record: its reply comes before the
 * transaction node's (one session answers in order), which then refuses the
 * COMMIT when the node has children (ZooKeeper could never delete it).
 */
static void
pub_check_done(int rc, const struct Stat *stat, const void *data)
{
	ENTRY_COMPLETION_BEGIN(e, data)
	{
		if (e != NULL && rc == ZOK && stat != NULL && stat->numChildren > 0 &&
			!ZKQ(e)->pub_refused)
		{
			ZKQ(e)->pub_refused = true;
			snprintf(e->errmsg, sizeof(e->errmsg),
					 "The gate node that zk_gate_open would delete has %d %s that zklock did not create (another client's), and ZooKeeper does not delete a node with children",
					 stat->numChildren, stat->numChildren == 1 ? "child" : "children");
		}
	}
	COMPLETION_END(e);
}

/* Refused for what ZooKeeper keeps (53400), not for a gate (55000) */
static inline bool
pub_refused_kept(ZkEntry *e)
{
	return ZKQ(e)->pub_over_items || ZKQ(e)->pub_over_kept || ZKQ(e)->pub_over_ns;
}

/*
 * The transaction node is there and every kept check answered (the create
 * goes beside them: pub_create_done waits for them): answer the COMMIT
 * that waits for it.  A refused one is answered BUSY with the node written
 * and HELD: the abort that follows deletes it (zk_qpub_drive).
 */
static void
pub_txn_written(ZkEntry *e)
{
	total_unreserve(e);			/* ZooKeeper counts it now */
	if (ZKQ(e)->checks_failed && !e->released && !ZKQ(e)->pub_refused)
	{
		/* a check went unanswered: both again (the create finds the node) */
		e->in_doubt = true;
		zk_retry_later(e);
		return;
	}
	e->state = ZKE_HELD;
	if (e->released)
		zk_qpub_drive(e);
	else if (ZKQ(e)->pub_refused)
		zk_finish(e, ZKO_BUSY, pub_refused_kept(e) ?
				  ERRCODE_CONFIGURATION_LIMIT_EXCEEDED :
				  ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, NULL);
	else
		zk_finish(e, ZKO_GRANTED, 0, NULL);
}

/*
 * Kept items (zklock.max_kept_items, the owner's, in e->max_items): before
 * the transaction node is written, one exists per queue it publishes into
 * (its entries node) and per arrivals object it arrives at, all sent at
 * once; numChildren, as ZooKeeper counts it, plus what the transaction
 * adds must stay within the bound, else the COMMIT fails (53400) and
 * nothing is published.  e->outstanding counts the answers awaited.  The
 * transaction node's create goes in the same turn (issue 40: a read waits
 * behind the session's writes in ZooKeeper, so a check first cost the
 * COMMIT a round of log flushes): its answer is acted on when the checks
 * are all in (pub_create_done).  A refusal found then answers the COMMIT
 * with the node written and HELD; the abort deletes it, as after a gate's
 * refusal.  A check that went unanswered sends both again (the create then
 * finds the node and sets it).
 *
 * In flight (issue 35): what a check lets through is reserved at once, in
 * this worker, for its node (a Resv on kept_resv), until the publication
 * is applied or let go (its entry is freed, or it is checked again): a
 * check counts ZooKeeper's children plus the reservations of the other
 * publications of this cluster.  ZooKeeper answers one session in order, so
 * a publication applied before a check was counted by ZooKeeper is freed
 * before its answer is read: counted once.  Concurrent COMMITs on one
 * cluster cannot pass the bound together; clusters checking at the same
 * instant can, each by what its own publications add (doc/limits.md).
 */
typedef struct Resv
{
	uint64		hash;			/* of the node's full path (kept_resv) */
	int64		nodes;			/* the items added (kept_resv), or nodes */
	int64		bytes;			/* and bytes (total_resv) */
	uint32		idx;			/* the publication's entry */
	uint32		gen;
} Resv;

static List *kept_resv = NIL;	/* Resv *, in zk_q_context() */

/*
 * What the reservations in *list hold but (idx, gen)'s, into *nodes and
 * *bytes: only those of the node whose path hashes to hash when by_hash.
 * A reservation whose publication is gone (applied, or let go) is dropped
 * on the way, and so are (idx, gen)'s own when drop_own.
 */
static void
resv_sum(List **list, bool by_hash, uint64 hash, uint32 idx, uint32 gen,
		 bool drop_own, int64 *nodes, int64 *bytes)
{
	ListCell   *lc;

	*nodes = 0;
	*bytes = 0;
	foreach(lc, *list)
	{
		Resv	   *r = (Resv *) lfirst(lc);
		bool		own = r->idx == idx && r->gen == gen;

		if (zk_q_entry_of(r->idx, r->gen) == NULL || (own && drop_own))
		{
			*list = foreach_delete_current(*list, lc);
			pfree(r);
		}
		else if (!own && (!by_hash || r->hash == hash))
		{
			*nodes += r->nodes;
			*bytes += r->bytes;
		}
	}
}

/* Reserve nodes and bytes in *list, for the node of hash, for e's publication */
static void
resv_add(List **list, ZkEntry *e, uint64 hash, int64 nodes, int64 bytes)
{
	MemoryContext old = MemoryContextSwitchTo(zk_q_context());
	Resv	   *r = palloc(sizeof(Resv));

	r->hash = hash;
	r->nodes = nodes;
	r->bytes = bytes;
	r->idx = zk_entry_index(e);
	r->gen = e->gen;
	*list = lappend(*list, r);
	MemoryContextSwitchTo(old);
}

/*
 * Items reserved for the node whose path hashes to hash by the live
 * publications of this cluster but (idx, gen); the dead ones are dropped
 * on the way, and so are (idx, gen)'s own when drop_own.
 */
static int64
kept_reserved(uint64 hash, uint32 idx, uint32 gen, bool drop_own)
{
	int64		n;
	int64		b;

	resv_sum(&kept_resv, true, hash, idx, gen, drop_own, &n, &b);
	return n;
}

/*
 * The root's totals in flight (issue 35, 994 part F): what a total check
 * (pub_total_done) lets through is reserved the same way (Resv), for the
 * publication's entry, until ZooKeeper counts it: its transaction node
 * written (pub_txn_written; the items that replace it at publishing carry
 * the same data), or the entry let go, refused or checked again.  The
 * answers of one session come in order, so a total read answered after
 * the transaction node's create counts that node, and one answered before
 * it counts the reservation: once either way.  Concurrent COMMITs on one
 * cluster cannot pass zklock.max_kept_bytes or max_kept_nodes together.
 */
static List *total_resv = NIL;	/* Resv *, in zk_q_context() */

/* Drop e's own reservation of the totals, if any */
static void
total_unreserve(ZkEntry *e)
{
	int64		n;
	int64		b;

	resv_sum(&total_resv, false, 0, zk_entry_index(e), e->gen, true, &n, &b);
}

typedef struct KeptObj
{
	char		path[ZK_PATH_MAX];	/* the hash key: the node's full path */
	int			adding;
} KeptObj;

/* What a publication adds to one namespace (zklock.max_namespace_items) */
typedef struct NsAdd
{
	char		ns[ZKLOCK_NS_MAX + 1];
	int			adding;
} NsAdd;

/* Count one item or arrival of qname's namespace into adds (a List) */
static List *
ns_add(List *adds, const char *qname)
{
	char		ns[ZKLOCK_NS_MAX + 1];
	ListCell   *lc;
	NsAdd	   *a;

	zk_qname_namespace(qname, ns, sizeof(ns));
	foreach(lc, adds)
	{
		a = (NsAdd *) lfirst(lc);
		if (strcmp(a->ns, ns) == 0)
		{
			a->adding++;
			return adds;
		}
	}
	a = palloc0(sizeof(NsAdd));
	strlcpy(a->ns, ns, sizeof(a->ns));
	a->adding = 1;
	return lappend(adds, a);
}

typedef struct KeptCheck
{
	const void *ectx;			/* zk_ctx_of(e) */
	uint64		hash;			/* of the node's full path (Resv) */
	int			adding;			/* items the transaction adds there */
	int			limit;
	char		path[ZK_PATH_MAX];	/* under the root, for the message */
} KeptCheck;


/* Completion of the zoo_aexists sent by pub_kept_send() */
static void
pub_kept_done(int rc, const struct Stat *stat, const void *data)
{
	KeptCheck  *c = (KeptCheck *) data;
	ENTRY_COMPLETION_BEGIN(e, c->ectx)
	{
		if (e != NULL && e->outstanding > 0)
		{
			e->outstanding--;
			if ((rc == ZOK && stat != NULL) || rc == ZNONODE)
			{
				int			kept = rc == ZOK ? stat->numChildren : 0;
				int64		others = kept_reserved(c->hash, zk_entry_index(e),
												   e->gen, false);

				if ((int64) kept + others + c->adding > c->limit)
				{
					if (!ZKQ(e)->pub_refused)
					{
						ZKQ(e)->pub_refused = true;
						ZKQ(e)->pub_over_items = true;
						if (others > 0)
							snprintf(e->errmsg, sizeof(e->errmsg),
									 "ZooKeeper keeps %d items under %s and other transactions of this server are adding %lld; this transaction adds %d; zklock.max_kept_items is %d",
									 kept, c->path, (long long) others, c->adding, c->limit);
						else
							snprintf(e->errmsg, sizeof(e->errmsg),
									 "ZooKeeper keeps %d items under %s; this transaction adds %d; zklock.max_kept_items is %d",
									 kept, c->path, c->adding, c->limit);
					}
				}
				else if (!ZKQ(e)->pub_refused)
					resv_add(&kept_resv, e, c->hash, c->adding, 0);
			}
			if (e->outstanding == 0)
				pub_kept_answered(e, rc);
		}
	}
	COMPLETION_END(e);
	pfree(c);
}

/* A publication refused with its node not written: answer BUSY (53400) */
static void
pub_refuse_unwritten(ZkEntry *e)
{
	(void) kept_reserved(0, zk_entry_index(e), e->gen, true);
	total_unreserve(e);
	e->state = e->in_doubt ? ZKE_CREATING : ZKE_PENDING;
	if (e->released)
		zk_qpub_drive(e);		/* frees it, or deletes a node in doubt */
	else
		zk_finish(e, ZKO_BUSY, ERRCODE_CONFIGURATION_LIMIT_EXCEEDED, NULL);
}

/*
 * The last of the kept checks answered (rc: its return code; also called
 * by the namespace census, queue_nskept.c).  The transaction node's create
 * went beside them: its answer, in or still to come, decides
 * (pub_create_result).  Without a create sent (its send failed): refuse,
 * retry, or write the node now.
 */
static void
pub_kept_answered(ZkEntry *e, int rc)
{
	if (rc != ZOK && rc != ZNONODE)
		ZKQ(e)->checks_failed = true;
	if (e->create_inflight)
		return;					/* pub_create_done goes on */
	if (ZKQ(e)->create_deferred)
	{
		ZKQ(e)->create_deferred = false;
		pub_create_result(e, ZKQ(e)->create_rc);
	}
	else if (e->released)
		zk_qpub_drive(e);
	else if (ZKQ(e)->pub_refused)
		pub_refuse_unwritten(e);
	else if (ZKQ(e)->checks_failed)
		zk_retry_later(e);		/* checked again next time */
	else
		send_txn_create(e);
}

/*
 * What all of the root keeps (kept.c), read in the same round trip as the
 * kept-items checks: the stats node ZooKeeper keeps for the root's quota.
 * The transaction adds at most its node's bytes and one node per op plus
 * its own.
 */
typedef struct KeptTotal
{
	const void *ectx;			/* zk_ctx_of(e) */
	int64		add_nodes;
	int64		add_bytes;
} KeptTotal;

/* Completion of the zoo_aget sent by pub_total_send() */
static void
pub_total_done(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	KeptTotal  *t = (KeptTotal *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		int64		nodes = 0;
		int64		bytes = 0;
		bool		read = (rc == ZOK &&
							zk_kept_parse(value, value_len, &nodes, &bytes));

		if (read)
			zk_kept_store(nodes, bytes);
		else if (rc == ZOK)
			zk_kept_garbled(value, value_len);	/* not enforced: say so */
		else if (rc == ZNONODE)
			zk_kept_request();	/* the quota is gone: set it up again */
		e = zk_entry_of(t->ectx);
		if (e != NULL && e->outstanding > 0)
		{
			e->outstanding--;
			if (read && !ZKQ(e)->pub_refused)
			{
				int64		rn;
				int64		rb;

				/* what this cluster's other publications are adding */
				resv_sum(&total_resv, false, 0, zk_entry_index(e), e->gen, true,
						 &rn, &rb);
				if (zk_kept_over(nodes + rn, bytes + rb, t->add_nodes, t->add_bytes,
								 e->errmsg, sizeof(e->errmsg)))
				{
					ZKQ(e)->pub_refused = true;
					ZKQ(e)->pub_over_kept = true;
					zk_ctl->kept_refused++;
				}
				else
					resv_add(&total_resv, e, 0, t->add_nodes, t->add_bytes);
			}
			if (e->outstanding == 0)
				pub_kept_answered(e, rc == ZNONODE ? ZOK : rc);
		}
	}
	COMPLETION_END(e);
	pfree(t);
}

/* Send the read of the root's totals for e's publication, if enforced */
static void
pub_total_send(ZkEntry *e, const ZkTxnHeader *h)
{
	KeptTotal  *t;
	char		path[ZK_PATH_MAX];

	if (!zk_kept_enforced())
		return;
	t = MemoryContextAlloc(zk_q_context(), sizeof(KeptTotal));
	t->ectx = zk_ctx_of(e);
	t->add_nodes = (int64) h->nitems + 1;
	t->add_bytes = (int64) h->total;
	zk_kept_stats_path(path, sizeof(path));
	if (zoo_aget(zk_zh, path, 0, pub_total_done, t) == ZOK)
		e->outstanding++;
	else
		pfree(t);
}

/*
 * Send the kept-items checks of e's publication (e->outstanding counts
 * them); true when it was refused at once (answered: nothing to send).
 */
static bool
pub_kept_send(ZkEntry *e)
{
	char	   *blob = dsa_get_address(zk_dsa(), e->blob);
	const ZkTxnHeader *h = (const ZkTxnHeader *) blob;
	const char *p = blob + sizeof(ZkTxnHeader);
	HTAB	   *objs;
	HASH_SEQ_STATUS seq;
	KeptObj    *k;
	uint32		i;
	int			rootlen = strlen(zk_root);
	List	   *adds = NIL;
	ListCell   *lc;

	if (h->nitems == 0)
		return false;
	/* checked again: what it reserved before is reserved anew */
	(void) kept_reserved(0, zk_entry_index(e), e->gen, true);
	total_unreserve(e);
	ZKQ(e)->pub_over_kept = false;
	ZKQ(e)->pub_over_ns = false;
	ZKQ(e)->pub_over_items = false;
	zk_q_ns_unreserve(e);
	pub_total_send(e, h);		/* all of the root's (kept.c) */
	objs = zk_hash_create("zklock kept checks", 16, ZK_PATH_MAX, sizeof(KeptObj),
						  true, CurrentMemoryContext);
	for (i = 0; i < h->nitems; i++)
	{
		ZkTxnItem	it;
		char		path[ZK_PATH_MAX];
		bool		found;

		memcpy(&it, p, sizeof(it));
		p += sizeof(ZkTxnItem);
		memset(path, 0, sizeof(path));
		if (!ZKQ_IS_OP(it.priority))
		{
			char		qname[ZKLOCK_QNAME_MAX + 1];
			char		qpath[ZK_PATH_MAX];

			memcpy(qname, p, it.qlen);
			qname[it.qlen] = '\0';
			zk_queue_path(qname, qpath, sizeof(qpath));
			snprintf(path, sizeof(path), "%s/%s", qpath,
					 (it.priority & (ZKQ_ITEM_DELAYED | ZKQ_ITEM_GROUPED)) ? "delayed" : "entries");
			adds = ns_add(adds, qname);
		}
		else if ((it.priority & ZKQ_OP_MASK) == ZKQ_OP_CREATE &&
				 (it.priority & ZKQ_OP_SKIP) == 0 &&
				 it.qlen > 9 && memcmp(p, "arrivals/", 9) == 0)
		{
			/* an arrival: arrivals/<name>/<participant>, counted under <name> */
			const char *slash = memrchr(p, '/', it.qlen);

			if (slash != NULL && slash > p + 9)
			{
				char		enc[ZKLOCK_ENAME_MAX + 1];
				char		qname[ZKLOCK_QNAME_MAX + 2];

				snprintf(path, sizeof(path), "%s/%.*s", zk_root, (int) (slash - p), p);
				strlcpy(enc, p + 9, Min(sizeof(enc), (size_t) (slash - p - 9) + 1));
				zk_decode_qname(enc, qname, sizeof(qname));
				adds = ns_add(adds, qname);
			}
		}
		p += it.qlen + it.plen;
		if (path[0] == '\0' || ZKQ(e)->max_items <= 0)
			continue;
		k = hash_search(objs, path, HASH_ENTER, &found);
		if (!found)
			k->adding = 0;
		k->adding++;
	}
	hash_seq_init(&seq, objs);
	while ((k = hash_seq_search(&seq)) != NULL)
	{
		KeptCheck  *c = MemoryContextAlloc(zk_q_context(), sizeof(KeptCheck));

		strlcpy(c->path, strncmp(k->path, zk_root, rootlen) == 0 ?
				k->path + rootlen + 1 : k->path, sizeof(c->path));
		c->ectx = zk_ctx_of(e);
		c->hash = hash_bytes_extended((const unsigned char *) k->path,
									  strlen(k->path), 0);
		c->adding = k->adding;
		c->limit = ZKQ(e)->max_items;
		if (zoo_aexists(zk_zh, k->path, 0, pub_kept_done, c) == ZOK)
			e->outstanding++;
		else
			pfree(c);
	}
	hash_destroy(objs);
	/* each namespace's share (queue_nskept.c) */
	foreach(lc, adds)
	{
		NsAdd	   *a = (NsAdd *) lfirst(lc);

		zk_q_ns_check(e, a->ns, a->adding, pub_kept_answered);
	}
	list_free_deep(adds);
	if (e->outstanding == 0 && ZKQ(e)->pub_refused)
	{
		pub_refuse_unwritten(e);	/* refused from a census at once */
		return true;
	}
	return false;
}

/*
 * Before the commit record: create the transaction node with the items
 * (its parents first after a NONODE), and check each gate it opens.
 * A create left unanswered makes its publication keep the node ("Late
 * creates").
 */
static void
send_txn_create(ZkEntry *e)
{
	char		tpath[ZK_PATH_MAX];
	char	   *blob = dsa_get_address(zk_dsa(), e->blob);
	const ZkTxnHeader *h = (const ZkTxnHeader *) blob;
	int			rc;

	txn_path(h, tpath, sizeof(tpath));
	if (!zk_q_txns_parent_ok || e->parents_tried)
	{
		char		parent[ZK_PATH_MAX];

		snprintf(parent, sizeof(parent), "%s/txns", zk_root);
		zk_q_send_ensure_path(parent);
		zk_q_txns_parent_ok = true;
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
			if (e->parents_tried || !zk_q_parents_known(qname))
			{
				char		qpath[ZK_PATH_MAX];

				zk_queue_path(qname, qpath, sizeof(qpath));
				zk_q_send_ensure_queue(qpath);
				zk_q_parents_remember(qname, true);
			}
			/* before it is published: does it name its items itself? */
			zk_q_seq_probe(zk_q_seq(qname), pub_waits_fire);
		}
	}
	e->state = ZKE_CREATING;
	rc = zoo_acreate(zk_zh, tpath, blob, (int) h->total, zk_acl(),
					 ZOO_PERSISTENT, pub_create_done, zk_ctx_of(e));
	(void) zk_sent(e, rc, &e->create_inflight, "create");
}

/*
 * Completion of the zoo_acreate sent by send_txn_create() (and of the
 * zoo_aset after a NODEEXISTS): acted on once the kept checks sent beside
 * it are all answered, else kept until the last of them is
 */
static void
pub_create_done(int rc, const char *value, const void *data)
{
	ENTRY_COMPLETION_BEGIN(e, data)
	{
		if (e != NULL)
		{
			e->create_inflight = false;
			if (e->outstanding > 0)
			{
				ZKQ(e)->create_deferred = true;
				ZKQ(e)->create_rc = rc;
			}
			else
				pub_create_result(e, rc);
		}
	}
	COMPLETION_END(e);
}

/* The create's answer (rc), every kept check answered */
static void
pub_create_result(ZkEntry *e, int rc)
{
	if (rc == ZOK)
		pub_txn_written(e);
	else if (pub_refused_kept(e) && rc != ZNODEEXISTS && zk_rc_definite(rc))
		pub_refuse_unwritten(e);	/* refused, and nothing written */
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
		zk_q_txns_parent_ok = false;
		zk_retry_later(e);
	}
	else if (!zk_rc_definite(rc))
	{
		e->in_doubt = true;
		ZKQ(e)->create_unanswered = true;	/* "Late creates" */
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
			zk_q_free_entry(e);
		else
			zk_fail_rc(e, rc, tpath, ERRCODE_CONNECTION_FAILURE, msg);
	}
}

/* Completion of the zoo_adelete sent by zk_qpub_drive() */
static void
pub_delete_done(int rc, const void *data)
{
	ENTRY_COMPLETION_BEGIN(e, data)
	{
		if (e != NULL)
		{
			e->delete_inflight = false;
			if (rc == ZOK || rc == ZNONODE)
				zk_q_free_entry(e);
			else
				zk_retry_later(e);
		}
	}
	COMPLETION_END(e);
}

/*
 * Drive a publication (ZKK_QPUB's drive): write the transaction node, or
 * once let go publish it (COMMIT) or delete it
 */
void
zk_qpub_drive(ZkEntry *e)
{
	if (e->create_inflight || e->delete_inflight || e->outstanding > 0)
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
			zk_q_free_entry(e);	/* nothing was sent */
			return;
		}
		blob = dsa_get_address(zk_dsa(), e->blob);
		txn_path((ZkTxnHeader *) blob, tpath, sizeof(tpath));
		if (ZKQ(e)->decision == ZKQD_COMMIT && e->state == ZKE_HELD)
		{
			if (zk_q_send_publish(blob, tpath, zk_entry_index(e), e->gen, NULL, NULL,
							 e->parents_tried, ZKQ(e)->create_unanswered))
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
	if (!zk_q_history_gate(e))
		return;
	ZKQ(e)->pub_refused = false;
	ZKQ(e)->checks_failed = false;
	ZKQ(e)->create_deferred = false;
	/* the checks and the create at once: pub_create_done waits for both */
	if (pub_kept_send(e) || ZKQ(e)->pub_refused)
		return;					/* refused (at once, or when the rest answer) */
	send_txn_create(e);
}
