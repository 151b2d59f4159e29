/*-------------------------------------------------------------------------
 *
 * queue_worker.c
 *	  The queue recipe's worker half, on top of its parts: its place in the
 *	  worker (the recipe's hooks: session reset and usable, worker start)
 *	  and its kinds' tables (kazoo LockingQueue layout, queue.h).
 *
 *	  The worker half is split the way the queue works (queue_int.h holds
 *	  their private types):
 *
 *	  queue_worker.c	the recipe's hooks (session reset and usable, worker
 *						start, adoption) and kinds' tables
 *	  queue_state.c		per-queue state (QState for consumers, QSeq for
 *						publications) and its memory, paths and parents,
 *						listings of entries and taken, freeing an entry
 *	  queue_nodes.c		paths, item names and ids, seals (pure)
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

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/memutils.h"

/* whether the server was in recovery at the last turn (a promotion settles) */
static bool was_in_recovery = true;

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
		zk_q_given_up_add(ZKQ(e)->fxid);	/* its nodes are the settling pass's */
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
		ZKQ(e)->create_unanswered = true;	/* queue_publish.c, "Late creates" */
	if (e->delete_inflight)
		e->in_doubt = true;
	e->create_inflight = e->delete_inflight = false;
	e->outstanding = 0;
	if (e->kind == ZKK_QCLAIM && e->state == ZKE_WAITING)
		e->state = ZKE_CREATING;
	if (e->kind == ZKK_QCLAIM && DsaPointerIsValid(ZKQ(e)->claims))
	{
		/* a give-back's fate is unknown: ours or not, read it again */
		ZkClaimRec *c = zk_q_claims_of(e);
		int			i;

		for (i = 0; i < ZKQ(e)->max_items; i++)
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
	zk_q_groups_reset();

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
			q->ewatch = false;
			q->twatch = QWATCH_NONE;
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
			q->policy = QPOL_UNKNOWN;	/* read again in the new session */
			zk_q_delay_reset(q);
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
			po->scan_done(po->scan, false, 0);
		zk_q_pubop_free(po);
	}
	zk_q_nidle_watched = 0;
	zk_q_nunflushed_wait = 0;
	zk_q_txns_parent_ok = false;
	zk_q_resolve_running = false;
	zk_q_resolve_needed = true;
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
	zk_q_delay_tick();
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
		zk_q_shared->pubs_blocked_resolve = 0;	/* this pass counts them anew */
		zk_q_resolve_running = true;
		(void) zk_q_scan_start(s);
	}
}

/* A worker starts: it knows no queue yet, its settling pass counts anew */
static void
q_worker_start(void)
{
	zk_q_shared->queues_tracked = 0;
	zk_q_shared->pubs_blocked_resolve = 0;
	zk_q_rounds_init();
}

/* the recipe's hooks, and its kinds (recipelist.h) */
const ZkRecipe zk_queue_recipe = {
	.worker_start = q_worker_start,
	.session_connected = zk_history_connected,	/* history.c */
	.session_reset = q_session_reset,
	.session_usable = q_session_usable,
};

/* A previous worker's read fails: its answer cannot come */
static void
qinfo_adopt(ZkEntry *e)
{
	zk_qinfo_session_lost(e, "The zklock worker restarted");
}

/*
 * A publication: batched, it goes as a zk_batch_multi.  A previous worker's
 * publication or dequeue is taken as if its session had ended.
 */
const ZkKindOps zk_qpub_ops =
	ZK_KIND_OPS(zk_qpub_drive, qdurable_drive_failed, qdurable_session_lost,
				.adopt = zk_adopt_as_lost,
				.batched = true);

/*
 * A dequeue: batched, its claims and consumes go as a zk_batch_multi, and
 * a claim's read behind it
 */
const ZkKindOps zk_qclaim_ops =
	ZK_KIND_OPS(zk_qclaim_drive, qdurable_drive_failed, qdurable_session_lost,
				.adopt = zk_adopt_as_lost,
				.batched = true);

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

const ZkKindOps zk_qinfo_ops =
	ZK_KIND_OPS(zk_qinfo_drive, zk_qinfo_drive_failed, zk_qinfo_session_lost,
				.adopt = qinfo_adopt,
				.entry_freed = qinfo_freed);
