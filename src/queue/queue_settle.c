/*-------------------------------------------------------------------------
 *
 * queue_settle.c
 *	  The settling pass: this cluster's transaction nodes and claims left
 *	  behind by a crash (or by an entry that gave up) are published,
 *	  deleted or ended from PostgreSQL's commit log (xact_fate), once the
 *	  run that wrote them is known dead (history.h); and the scan behind
 *	  zk_queue_release_cluster.  Nodes whose MAC does not verify, and this
 *	  run's nodes written again by someone else ("Replayed transaction
 *	  nodes"), are left alone.  Why that is safe: src/README, section 5.
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"

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


static void scan_send_txns(Scan *s);
static void scan_claimed(bool ok, void *arg);
static void scan_taken_listed(int rc, const struct String_vector *sv,
							  const void *data);
static void scan_list(Scan *s);

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

/*
 * The fate of transaction fxid, whose mark ended at lsn on timeline tli, from
 * this server's commit log and timeline history; FATE_UNKNOWN when this
 * server cannot tell (recovery, another history, too old, not flushed)
 */
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

/*
 * Did this server's WAL record the abort of fxid (its commit log says
 * aborted, not merely never finished)?  Asked of a transaction whose mark
 * this WAL holds and that xact_fate() found aborted: its id was handed out
 * before the mark, so this server never reuses it, and its abort record
 * lies in the history this server shares with the run that wrote the mark
 * (a copy's WAL ends there or later, but never without what precedes it):
 * the run's server rolled it back too.  A transaction that crashed, or
 * whose commit record lies past the end of this WAL, has no abort record
 * and is found only "not committed here": no proof.
 */
static bool
xact_abort_recorded(uint64 fxid)
{
	return TransactionIdDidAbort(XidFromFullTransactionId(FullTransactionIdFromU64(fxid)));
}

/* Does a live entry of this kind handle this (sub)transaction? */
static bool
entry_for_xid(ZkKind kind, uint64 fxid)
{
	int			i;

	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->state != ZKE_FREE && e->kind == kind && ZKQ(e)->fxid == fxid)
			return true;
	}
	return false;
}

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

/*
 * Is a transaction node's data (current header) well formed: lengths,
 * queue names, priorities, ops only under gates/ and arrivals/?
 */
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
		else if (it.qlen == 0 || it.qlen > ZKLOCK_QNAME_MAX ||
				 (it.priority & ~(ZKQ_ITEM_DELAYED | ZKQ_ITEM_GROUPED)) > 999 ||
				 ((it.priority & ZKQ_ITEM_DELAYED) && (it.priority & ZKQ_ITEM_GROUPED)) ||
				 ((it.priority & ZKQ_ITEM_DELAYED) && it.plen < ZKQ_DUE_LEN))
			return false;
		else if (it.priority & ZKQ_ITEM_GROUPED)
		{
			/* the group: 1 to ZKQ_GROUP_ENC_MAX bytes of a name encoded */
			int			glen;
			int			k;

			if (it.plen < 2 || p + it.qlen >= end)
				return false;
			glen = (unsigned char) p[it.qlen];
			if (glen < 1 || glen > ZKQ_GROUP_ENC_MAX || (uint32) glen + 1 > it.plen)
				return false;
			for (k = 0; k < glen; k++)
			{
				char		c = p[it.qlen + 1 + k];

				if (c == '/' || c == '\0' || (unsigned char) c < 0x20 || (unsigned char) c >= 0x7F)
					return false;
			}
		}
		p += it.qlen + it.plen;
	}
	return p == end;
}

/* ---- the scan of this (or a dead) cluster's claims and transactions ---- */

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
	bool		kept;			/* the delete of a kept node: not counted
								 * as settled */
	/* a release that may move the item instead (scan_release) */
	int			pending;		/* reads still to answer */
	int			rc_item;
	int			rc_qdata;
	int			rc_qacl;
	bool		qopen;			/* a foreign identity may write the queue's node */
	struct Stat istat;			/* the item's */
	struct Stat qstat;			/* the queue node's */
	char	   *item;			/* its data (palloc'd), or NULL */
	int			ilen;
	char	   *qdata;			/* the queue node's data (palloc'd), or NULL */
	int			qlen;
	char	   *dldata;			/* the dead letter's data (palloc'd), or NULL */
	int32		dlattempts;
	char		qpath[ZK_PATH_MAX];	/* the queue's node: its policy */
	char		dpath[ZK_PATH_MAX];	/* <dlq>/entries/entry-PPP- */
	char		created[ZK_PATH_MAX];
	zoo_op_t	ops[4];
	zoo_op_result_t res[4];
} ScanCall;

/* a settling pass runs again every second while it waits for a run */
static ZkLogLimit scan_summary_log;
static ZkLogLimit scan_left_log;

/*
 * The scan is over: log what it left alone, answer its request or end the
 * settling pass (again later when a run may still die)
 */
static void
scan_finish(Scan *s)
{
	zk_q_names_free(&s->queues, &s->nqueues);
	zk_q_names_free(&s->txns, &s->ntxns);
	if ((s->tinvalid > ZKQ_SCAN_LOG_MAX || s->tunknown > ZKQ_SCAN_LOG_MAX ||
		 s->tforged > 0 || s->treplayed > 0) &&
		zk_log_limited(&scan_summary_log, "left alone ... queue transaction nodes"))
		ereport(LOG,
				(errmsg("zklock: left alone " INT64_FORMAT " queue transaction nodes holding no valid items, " INT64_FORMAT " whose transaction is not in this server's history, and " INT64_FORMAT " transaction nodes and claims whose MAC does not verify; " INT64_FORMAT " transaction nodes this run had published already",
						s->tinvalid, s->tunknown, s->tforged, s->treplayed),
				 errdetail("Only the first %d of each of the first two were logged by name, and at most %d a minute of the others.",
						   ZKQ_SCAN_LOG_MAX, ZK_LOG_LIMIT_LINES)));
	zk_q_unsettle_all();			/* claims of this cluster may be released */
	if (s->release_all)
	{
		Info	   *in = s->info;
		void		(*done) (Info *) = s->info_done;

		if (s->own_release)
			zk_q_resolve_running = false;
		if (s->own_release && s->run != 0 && !s->failed)
			zk_history_left_forget(s->run);
		in->count = s->removed;
		if (s->failed)
			s->info_fail(in, ZCONNECTIONLOSS);
		pfree(s);
		done(in);
		return;
	}
	if (s->removed > 0)
		ereport(LOG,
				(errmsg("zklock: settled " INT64_FORMAT " queue claims and transactions left by an earlier run",
						s->removed)));
	if (!s->failed)
		zk_history_left_publish();	/* for zk_queue_release_cluster's hint */
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

	zk_q_resolve_running = false;
	if (!s->failed && !zk_history_took() && !zk_history_postponed())
		zk_mac_unsigned_done();
	if (s->failed || zk_history_took())
		zk_q_resolve_needed = true;	/* again on the next turn */
	else if (zk_history_postponed())
	{
		zk_q_resolve_needed = true;	/* a run that may yet die: in a second */
		zk_q_resolve_not_before = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
	}
	pfree(s);
}

/* One request of scan s is over (ok, removed nodes); the last finishes it */
void
zk_q_scan_done_one(Scan *s, bool ok, int64 removed)
{
	if (!ok)
		s->failed = true;
	s->removed += removed;
	if (--s->outstanding == 0)
		scan_finish(s);
}

/* Completion of the zoo_adelete of 4 callers, and of scan_kept's multi */
static void
scan_void_done(int rc, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		if (c->txn)
		{
			s->treading--;
			scan_send_txns(s);
		}
		zk_q_scan_done_one(s, zk_rc_definite(rc), rc == ZOK && !c->kept ? 1 : 0);
		pfree(c);
	}
	NONE_COMPLETION_END;
}

/*
 * A scan's call d was sent with rc: counted in outstanding and in its
 * window, true; or not (freed; the scan stops for good), false
 */
static bool
scan_call_sent(Scan *s, ScanCall *d, int rc, int *window)
{
	if (rc != ZOK)
	{
		pfree(d);
		s->failed = true;
		return false;
	}
	s->outstanding++;
	(*window)++;
	return true;
}

/*
 * List the taken of the next queues, at most ZKQ_INFO_WINDOW at a time (each
 * answer sends the next); stops for good after a failure.
 */
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
		d = MemoryContextAllocZero(zk_q_context(), sizeof(ScanCall));
		d->scan = s;
		strlcpy(d->qenc, s->queues[s->qnext++], sizeof(d->qenc));
		snprintf(buf, sizeof(buf), "%s/queues/%s/taken", zk_root, d->qenc);
		if (!scan_call_sent(s, d, zoo_aget_children(zk_zh, buf, 0, scan_taken_listed, d),
							&s->qlisting))
			break;
	}
	if (s->failed || s->qnext >= s->nqueues)
		zk_q_names_free(&s->queues, &s->nqueues);
}

/* a committed claim consumed; if its item was already gone, the claim alone */
static void
scan_consume_done(int rc, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		if (rc != ZOK && zk_rc_definite(rc) && c->res[0].err == ZNONODE &&
			zk_session_usable() &&
			zoo_adelete(zk_zh, c->path, c->version, scan_void_done, c) == ZOK)
			c = NULL;			/* scan_void_done counts it */
		else
			zk_q_scan_done_one(s, zk_rc_definite(rc), rc == ZOK ? 1 : 0);
		if (c != NULL)
			pfree(c);
	}
	NONE_COMPLETION_END;
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
		/* another cluster's: all of it, or the one run named */
		if (s->sysid != GetSystemIdentifier())
			return (s->run == 0 || run == s->run) ? FATE_ABORTED : FATE_UNKNOWN;
		if (run != s->run)
			return FATE_UNKNOWN;
		st = zk_history_status(run);

		/*
		 * Only a run alive now is refused: this run, or one whose "live"
		 * the survey found (a copy's original may be alive too).  A run
		 * without it that the settling pass still gives time to register
		 * again (ZKR_LIVE, dead_long_enough) was taken over by this
		 * release (zk_history_take), as the operator says it is gone.
		 */
		if (st == ZKR_CURRENT || zk_history_alive(run))
			return FATE_UNKNOWN;

		/*
		 * What this server's WAL proves committed is settled so, as the
		 * settling pass would (its mark is here, or in recycled WAL before
		 * this data directory's fork from the run: the transaction is in
		 * this history, and so is its commit record, as this server never
		 * reuses the id of a transaction it replayed); the rest as rolled
		 * back.
		 */
		if (run != 0 && rec != 0)
		{
			v = zk_history_verify(tli, rec, run, fxid);
			if ((v == ZKH_VERIFIED ||
				 (v == ZKH_UNREADABLE && zk_history_lineage(run, &fork) && rec < fork)) &&
				xact_fate(fxid, tli, lsn) == FATE_COMMITTED)
				return FATE_COMMITTED;
		}
		return FATE_ABORTED;
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
			!(tli != 0 && tli < GetWALInsertionTimeLine()) &&
			!(v == ZKH_VERIFIED && f == FATE_ABORTED && xact_abort_recorded(fxid)))
		{
			/* logged once per run, with the call that releases it */
			zk_history_left_unproven(run);
			*quiet = true;
			return FATE_UNKNOWN;
		}
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
	ZkTxnHeader h;
	char	   *out;
	int			len;
	int			hlen;

	*had_mac = false;
	if (value_len < (int) ZKQ_TXN_HEADER_V1_LEN)
		return NULL;
	memset(&h, 0, sizeof(h));
	memcpy(&h, value, ZKQ_TXN_HEADER_V1_LEN);
	if (h.magic == ZKQ_TXN_MAGIC)
	{
		out = palloc(value_len);
		memcpy(out, value, value_len);
		*out_len = value_len;
		*had_mac = true;
		return blob_valid(out, value_len) ? out : NULL;
	}
	/* an older header is the current one's start (with run and rec: V2) */
	if (h.magic == ZKQ_TXN_MAGIC_V2 && value_len >= (int) ZKQ_TXN_HEADER_V2_LEN)
		hlen = ZKQ_TXN_HEADER_V2_LEN;
	else if (h.magic == ZKQ_TXN_MAGIC_V1)
		hlen = ZKQ_TXN_HEADER_V1_LEN;
	else
		return NULL;
	if (h.total != (uint32) value_len)
		return NULL;
	memcpy(&h, value, hlen);
	len = value_len + (int) sizeof(ZkTxnHeader) - hlen;
	h.magic = ZKQ_TXN_MAGIC;
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

/* A node of the scan is left alone: its MAC does not verify (logged) */
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

/*
 * What a replayed node is called in the log (scan_replayed): the node, a
 * short name of it, what this run did with its transaction already, and
 * what settling it again would do
 */
typedef struct ReplayWords
{
	const char *what;
	const char *noun;
	const char *done;
	const char *harm;
} ReplayWords;

static const ReplayWords replay_txn = {
	"transaction node", "node", "published its transaction",
	"publishing it would deliver its items and gate and arrival changes twice"
};
static const ReplayWords replay_claim = {
	"claim", "claim", "ended its transaction's claims",
	"consuming it would take another item of that name"
};

/*
 * Is the node at path, of transaction fxid written by run, committed as
 * node_fate says, one this run settled already ("Replayed transaction
 * nodes"): a copy a client created again from its data?  Then it is left
 * alone (the caller treats its fate as unknown, quietly), counted, and
 * logged in words.
 */
static bool
scan_replayed(Scan *s, uint64 run, uint64 fxid, const char *path,
			  const ReplayWords *words)
{
	if (run == 0 || zk_history_status(run) != ZKR_CURRENT ||
		zk_q_given_up_find(fxid) >= 0)
		return false;
	s->treplayed++;
	if (zk_log_limited(&replay_log, "left a replayed transaction node alone"))
		ereport(LOG,
				(errmsg("zklock: left the queue %s %s alone: this run %s already",
						words->what, path, words->done),
				 errdetail("A client that may write under zklock.root created the %s again from a copy of its data; %s.",
						   words->noun, words->harm),
				 errhint("Check who may write under zklock.root (zklock.acl), then delete the %s.",
						 words->noun)));
	return true;
}

/*
 * Kept published nodes (queue_publish.c, "Late creates"): one goes once no
 * create of it can come any more.  ZooKeeper applies no request of a
 * session that ended, and a session left behind ends a session timeout
 * after its last word at the latest; so a kept node of this run goes once
 * the worker has been on another session than the one that kept it for
 * twice the session timeout and 10 s, and one of a dead run (its every
 * session ended: history.h) goes with the run's other nodes.
 */
static uint64 kept_session = 0;	/* the session seen by the last pass */
static TimestampTz kept_session_since = 0;	/* ... first seen then */

/* Completion of the zoo_adelete of a kept node's child (release) */
static void
kept_child_gone(int rc, const void *data)
{
	/* the delete of the node behind it says how the release went */
}

/* The kept node c->path: delete it with its child now, or leave it; true:
 * c was sent (its completion counts it) */
static bool
scan_kept(Scan *s, ScanCall *c, const ZkTxnKept *k, const struct Stat *stat)
{
	ZkRunStatus st = zk_history_status(k->run);
	TimestampTz now = GetCurrentTimestamp();
	bool		go = false;
	uint64		fork;

	if (kept_session != zk_cur_session)
	{
		kept_session = zk_cur_session;
		kept_session_since = now;
	}
	if (st == ZKR_CURRENT)
	{
		int			grace = 2 * Max(zk_session_timeout, zoo_recv_timeout(zk_zh)) + 10000;
		TimestampTz at = TimestampTzPlusMilliseconds(kept_session_since, grace);

		if (k->session != zk_cur_session && now >= at)
			go = true;
		else if (k->session != zk_cur_session &&
				 (zk_q_resolve_again_at == 0 || zk_q_resolve_again_at > at))
			zk_q_resolve_again_at = at;	/* the pass comes back for it */
	}
	else if (st == ZKR_HEIR || (st == ZKR_OTHER && zk_history_proven(k->run)))
		go = true;
	else if (s->release_all && k->run == s->run && !zk_history_alive(k->run))
		go = true;				/* the operator released its run */
	else
	{
		/* as node_fate: a dead ancestor is taken over, then settled */
		if (st == ZKR_DEAD && zk_history_lineage(k->run, &fork))
			zk_history_want(k->run);
		zk_history_left(k->run);
	}
	if (!go || !zk_session_usable())
		return false;
	snprintf(c->epath, sizeof(c->epath), "%s/%s", c->path, ZKQ_TXN_KEPT_CHILD);
	zoo_delete_op_init(&c->ops[0], c->epath, -1);
	zoo_delete_op_init(&c->ops[1], c->path, stat->version);
	/* a kept node changed meanwhile (BADVERSION) is judged next time */
	c->kept = true;
	if (zoo_amulti(zk_zh, 2, c->ops, c->res, scan_void_done, c) != ZOK)
	{
		s->failed = true;
		return false;
	}
	return true;
}

/* Completion of the zoo_aget sent by scan_send_txns() */
static void
scan_txn_data(int rc, const char *value, int value_len,
			  const struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		bool		counted = false;
		bool		kept = false;
		bool		kept_sent = false;
		char	   *blob = NULL;
		int			blen = 0;
		bool		had_mac = false;
		ZkMacCheck	mc = ZKM_FORGED;

		s->tanswered = true;
		if (rc == ZOK && value_len > 0)
			s->tlargest = Max(s->tlargest, (Size) value_len);
		if (rc == ZOK && value != NULL && value_len == (int) sizeof(ZkTxnKept) &&
			((const ZkTxnKept *) value)->magic == ZKQ_TXN_KEPT_MAGIC)
		{
			ZkTxnKept	k;

			kept = true;
			memcpy(&k, value, sizeof(k));
			if (!zk_kept_verify(c->path, &k) || k.sysid != s->sysid ||
				k.fxid != c->fxid || k.run != c->run)
				scan_refused(s, "transaction node", c->path, ZKM_FORGED);
			else if (stat != NULL && scan_kept(s, c, &k, stat))
				kept_sent = true;	/* scan_void_done goes on */
		}
		else if (rc == ZOK && value != NULL)
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
			if (f == FATE_COMMITTED &&
				scan_replayed(s, h.run, c->fxid, c->path, &replay_txn))
			{
				/* this run published it: a copy created again ("Replayed") */
				f = FATE_UNKNOWN;
				quiet = true;
			}
			if (f == FATE_COMMITTED)
			{
				/* ensures the parents itself; its reply counts for us */
				/* an entry gave it up: a create of it may be on its way */
				if (zk_q_send_publish(blob, c->path, ZKLOCK_NO_ENTRY, ZKLOCK_NO_ENTRY, s,
									  zk_q_scan_done_one, true,
									  zk_history_status(h.run) == ZKR_CURRENT))
					counted = true;
				else
					s->failed = true;
			}
			else if (f == FATE_ABORTED)
			{
				ScanCall   *d = MemoryContextAllocZero(zk_q_context(), sizeof(ScanCall));

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
		else if (rc == ZOK && blob == NULL && !kept &&
				 ++s->tinvalid <= ZKQ_SCAN_LOG_MAX &&
				 zk_log_limited(&scan_left_log, "left a queue node alone"))
			ereport(LOG,
					(errmsg("zklock: the queue transaction node %s holds no valid items; left alone",
							c->path)));
		else if (!zk_rc_definite(rc))
			s->failed = true;
		if (!kept_sent)
		{
			if (c->txn)
			{
				s->treading--;
				scan_send_txns(s);
			}
			if (!counted)
				zk_q_scan_done_one(s, true, 0);
			pfree(c);
		}
		if (blob != NULL)
			pfree(blob);
	}
	NONE_COMPLETION_END;
}

/*
 * How many reads of transaction nodes may be out (issue 35): a node holds
 * up to ZooKeeper's 1 MB of items, so at most ZKQ_SCAN_INFLIGHT_BYTES of
 * them, judged by the largest read so far (4 until one has answered);
 * deletes (a release) carry nothing back: ZKQ_INFO_WINDOW.
 */
#define ZKQ_SCAN_INFLIGHT_BYTES	(4 * 1024 * 1024)

static int
scan_txn_window(Scan *s)
{
	if (s->release_all && s->sysid != GetSystemIdentifier())
		return ZKQ_INFO_WINDOW;
	if (!s->tanswered)
		return 4;
	return (int) Max(1, Min(ZKQ_INFO_WINDOW,
							ZKQ_SCAN_INFLIGHT_BYTES / Max(s->tlargest, 1024)));
}

/*
 * Read (release: delete) the next transaction nodes listed, until
 * scan_txn_window() are out; each answer sends the next.  Stops for good
 * after a failure.
 */
static void
scan_send_txns(Scan *s)
{
	char		prefix[32];

	snprintf(prefix, sizeof(prefix), UINT64_FORMAT "-", s->sysid);
	while (s->treading < scan_txn_window(s) && s->tnext < s->ntxns && !s->failed)
	{
		ScanCall   *d;
		uint64		fxid;
		uint64		run = 0;
		const char *name = s->txns[s->tnext++];
		const char *rest = name + strlen(prefix);
		const char *dash;
		bool		quiet;
		bool		own_run;
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
			if (!zk_q_parse_u64(runhex, 16, &run) || run == 0)
				continue;
			rest = dash + 1;
		}
		if (!zk_q_parse_u64(rest, 10, &fxid))
			continue;
		if (s->release_all && (s->sysid == GetSystemIdentifier() || s->run != 0) &&
			run != s->run)
			continue;
		if (s->release_all &&
			node_fate(s, ZKK_QPUB, run, fxid, 0, 0, 0, &quiet) == FATE_UNKNOWN)
			continue;
		/* a run of this cluster: read, to publish what this WAL proves */
		own_run = s->release_all && s->sysid == GetSystemIdentifier();
		d = MemoryContextAllocZero(zk_q_context(), sizeof(ScanCall));
		d->scan = s;
		d->fxid = fxid;
		d->run = run;
		d->txn = true;
		snprintf(d->path, sizeof(d->path), "%s/txns/%s", zk_root, name);
		if (s->release_all && !own_run)
		{
			/* a kept node's child first ("Late creates"); most have none */
			snprintf(d->epath, sizeof(d->epath), "%s/%s", d->path, ZKQ_TXN_KEPT_CHILD);
			rc = zoo_adelete(zk_zh, d->epath, -1, kept_child_gone, NULL);
			if (rc == ZOK)
				rc = zoo_adelete(zk_zh, d->path, -1, scan_void_done, d);
		}
		else
			rc = zoo_aget(zk_zh, d->path, 0, scan_txn_data, d);
		if (!scan_call_sent(s, d, rc, &s->treading))
			break;
	}
	if (s->failed || s->tnext >= s->ntxns)
		zk_q_names_free(&s->txns, &s->ntxns);
}

/*
 * Whether scan s uses the answer rc of one of its listings: one given while
 * the session is usable.  Otherwise the scan has failed, unless there was
 * nothing to list.
 */
static bool
scan_listing_usable(Scan *s, int rc)
{
	if (rc == ZOK && zk_session_usable())
		return true;
	if (rc != ZNONODE)
		s->failed = true;
	return false;
}

/* A listing c of scan s is over: freed, and the scan waits for one less */
static void
scan_listing_over(Scan *s, ScanCall *c)
{
	pfree(c);
	zk_q_scan_done_one(s, true, 0);
}

/* Completion of the zoo_aget_children sent by scan_list_send() */
static void
scan_txns_listed(int rc, const struct String_vector *sv, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		int			i;
		char		prefix[32];

		snprintf(prefix, sizeof(prefix), UINT64_FORMAT "-", s->sysid);
		if (scan_listing_usable(s, rc))
		{
			/* this cluster's, read a window at a time (scan_send_txns) */
			int			n = 0;

			s->txns = zk_q_names_copy(sv, &s->ntxns);
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
		scan_listing_over(s, c);
	}
	NONE_COMPLETION_END;
}

/*
 * A claim that would have moved its item.  A claim counts its hand-out in
 * the item before its read says how often the item was handed out
 * (queue_claim.c, "Counting hand-outs"), so the claim that finds more than
 * the policy's max_attempts -- the one that moves the item to the
 * dead-letter queue instead of handing it out -- is counted too.  When its
 * cluster died between the claim and the move (the worker killed, the
 * server stopped or promoted away, its answers lost), the claim is settled
 * here; released as any aborted claim, it would leave the item with one
 * count more than its hand-outs, and the next claim, anyone's, would move
 * it as handed out max_attempts + 1 times (origin_attempts), although no
 * transaction ever got it a (max_attempts + 1)th time.  So an aborted claim
 * is released after a look at its item and at its queue's policy (the
 * queue node's data and ACL, believed as queue_policy.c believes them):
 * when the count shows more hand-outs than the policy allows, it does what
 * the claim would have done -- one multi checks that the policy is the one
 * read, deletes the item and the claim (at the version read) and creates
 * the dead letter, with the hand-outs before this claim.  Anything else
 * (no policy, not believed, the item gone, the move refused) releases the
 * claim as before.
 */

/* Free what the look at c's item and policy kept */
static void
scan_release_free(ScanCall *c)
{
	if (c->item != NULL)
		pfree(c->item);
	if (c->qdata != NULL)
		pfree(c->qdata);
	if (c->dldata != NULL)
		pfree(c->dldata);
	c->item = c->qdata = c->dldata = NULL;
}

/* Release claim c (its version read) as before: its delete; c is given up */
static void
scan_release_plain(Scan *s, ScanCall *c)
{
	scan_release_free(c);
	if (zk_session_usable() &&
		zoo_adelete(zk_zh, c->path, c->version, scan_void_done, c) == ZOK)
		return;					/* scan_void_done counts it */
	pfree(c);
	zk_q_scan_done_one(s, false, 0);
}

static ZkLogLimit settle_dl_log;

/* Completion of the zoo_amulti sent by scan_release_decide() */
static void
scan_release_moved(int rc, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		if (rc == ZOK)
		{
			char		qname[ZKLOCK_QNAME_MAX + 1];
			const char *node = strrchr(c->path, '/') + 1;

			zk_decode_qname(c->qenc, qname, sizeof(qname));
			zk_q_stats_add(qname, 0, 0, 0, 1);
			if (zk_log_limited(&settle_dl_log, "queue dead letter settled"))
				ereport(LOG,
						(errmsg("zklock: moved item \"%s\" of queue \"%s\" to its dead-letter queue as \"%s\" after %d hand-outs",
								node, zk_log_name(qname), c->created, c->dlattempts),
						 errdetail("The claim that was to move it was left by an earlier run.")));
			scan_release_free(c);
			pfree(c);
			zk_q_scan_done_one(s, true, 1);
		}
		else if (zk_rc_definite(rc))
			scan_release_plain(s, c);	/* nothing changed: release it */
		else
		{
			/* moved or not: the next pass finds the claim, or not */
			scan_release_free(c);
			pfree(c);
			zk_q_scan_done_one(s, false, 0);
		}
	}
	NONE_COMPLETION_END;
}

/* Both reads of claim c's look are in: move its item, or release it */
static void
scan_release_decide(Scan *s, ScanCall *c)
{
	int			max_attempts = 0;
	char		dlq[ZKLOCK_NAME_MAX + 1];
	char		qname[ZKLOCK_QNAME_MAX + 1];
	char		dq[ZKLOCK_QNAME_MAX + 1];
	char		dlq_path[ZK_PATH_MAX];
	const char *node = strrchr(c->path, '/') + 1;
	int32		attempts;
	int			prio = 0;
	int			dlen = 0;

	if (c->rc_item != ZOK || c->rc_qdata != ZOK || c->rc_qacl != ZOK || c->qopen ||
		zk_q_policy_parse(c->qdata, c->qlen, &max_attempts, dlq, sizeof(dlq)) != QPOLICY_SET ||
		max_attempts <= 0 || !zk_session_usable())
	{
		scan_release_plain(s, c);
		return;
	}
	attempts = c->istat.cversion > 0 ? c->istat.cversion / 2 : 0;
	if (attempts <= max_attempts)
	{
		scan_release_plain(s, c);	/* a hand-out: it goes back */
		return;
	}
	zk_decode_qname(c->qenc, qname, sizeof(qname));
	c->dlattempts = attempts - 1;
	c->dldata = zk_q_dl_data(qname, node, c->item, c->ilen, &c->istat, c->dlattempts, &dlen);
	if (c->dldata == NULL)
	{
		scan_release_plain(s, c);	/* too large: handed out again */
		return;
	}
	zk_q_policy_dlq_qname(qname, dlq, dq, sizeof(dq));
	zk_queue_path(dq, dlq_path, sizeof(dlq_path));
	(void) zk_queue_node_priority(node, &prio);
	snprintf(c->dpath, sizeof(c->dpath), "%s/entries/entry-%03d-", dlq_path, prio);
	/* under the policy read, the item and the claim (at the version read) */
	zoo_check_op_init(&c->ops[0], c->qpath, c->qstat.version);
	zoo_delete_op_init(&c->ops[1], c->epath, -1);
	zoo_delete_op_init(&c->ops[2], c->path, c->version);
	zoo_create_op_init(&c->ops[3], c->dpath, c->dldata, dlen, zk_acl_path(c->dpath),
					   ZOO_SEQUENCE, c->created, sizeof(c->created));
	if (zoo_amulti(zk_zh, 4, c->ops, c->res, scan_release_moved, c) != ZOK)
	{
		scan_release_free(c);
		pfree(c);
		zk_q_scan_done_one(s, false, 0);
	}
}

/* One read of claim c's look is in; after the last, decide */
static void
scan_release_answered(Scan *s, ScanCall *c)
{
	if (--c->pending == 0)
		scan_release_decide(s, c);
}

/* a copy of data read, in the worker's queue context */
static char *
scan_copy(const char *value, int value_len)
{
	char	   *p = MemoryContextAlloc(zk_q_context(), Max(value_len, 1));

	if (value_len > 0)
		memcpy(p, value, value_len);
	return p;
}

/* Completion of the zoo_aget of the item sent by scan_release() */
static void
scan_release_item_done(int rc, const char *value, int value_len,
					   const struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		c->rc_item = (rc == ZOK && stat == NULL) ? ZSYSTEMERROR : rc;
		if (c->rc_item == ZOK)
		{
			c->istat = *stat;
			c->item = scan_copy(value, value_len);
			c->ilen = Max(value_len, 0);
		}
		scan_release_answered(s, c);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget of the queue's node sent by scan_release() */
static void
scan_release_qdata_done(int rc, const char *value, int value_len,
						const struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		c->rc_qdata = (rc == ZOK && stat == NULL) ? ZSYSTEMERROR : rc;
		if (c->rc_qdata == ZOK)
		{
			c->qstat = *stat;
			c->qdata = scan_copy(value, value_len);
			c->qlen = Max(value_len, 0);
		}
		scan_release_answered(s, c);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget_acl of the queue's node sent by scan_release() */
static void
scan_release_acl_done(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		c->rc_qacl = rc;
		if (rc == ZOK && zk_acl_first_foreign(acl, ZOO_PERM_WRITE | ZOO_PERM_ADMIN) >= 0)
			c->qopen = true;
		scan_release_answered(s, c);
	}
	NONE_COMPLETION_END;
}

/*
 * Release aborted claim c, read at version: first the look at its item and
 * its queue's policy (above), pipelined.  false: nothing sent.
 */
static bool
scan_release(Scan *s, ScanCall *c, int version)
{
	c->version = version;
	c->rc_item = c->rc_qdata = c->rc_qacl = ZCONNECTIONLOSS;
	snprintf(c->qpath, sizeof(c->qpath), "%s/queues/%s", zk_root, c->qenc);
	c->pending = 1;				/* until every read is sent */
	if (zoo_aget(zk_zh, c->epath, 0, scan_release_item_done, c) != ZOK)
		return false;
	c->pending++;
	if (zoo_aget(zk_zh, c->qpath, 0, scan_release_qdata_done, c) == ZOK)
		c->pending++;
	if (zoo_aget_acl(zk_zh, c->qpath, scan_release_acl_done, c) == ZOK)
		c->pending++;
	c->pending--;				/* the reads answer after this returns */
	return true;
}

/* Completion of the zoo_aget sent by scan_taken_listed() */
static void
scan_claim_data(int rc, const char *value, int value_len,
				const struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		char		f_cluster[32];
		char		f_xid[32];
		char		f_tli[16];
		char		f_lsn[32];
		char		f_run[32];
		char		f_rec[32];
		uint64		cluster;
		uint64		fxid = 0;
		uint64		tli = 0;
		uint64		lsn = 0;
		uint64		run = 0;
		uint64		rec = 0;
		bool		sent = false;
		bool		quiet = false;
		bool		refused = false;

		bool		ours = (rc == ZOK && value != NULL && value_len > 0 &&
							zk_json_field(value, value_len, "cluster", f_cluster, sizeof(f_cluster)) &&
							zk_q_parse_u64(f_cluster, 10, &cluster) && cluster == s->sysid &&
							zk_session_usable());
		bool		parsed = ours &&
			zk_json_field(value, value_len, "xid", f_xid, sizeof(f_xid)) &&
			zk_q_parse_u64(f_xid, 10, &fxid) &&
			zk_json_field(value, value_len, "tli", f_tli, sizeof(f_tli)) &&
			zk_q_parse_u64(f_tli, 10, &tli) &&
			zk_json_field(value, value_len, "lsn", f_lsn, sizeof(f_lsn)) &&
			zk_q_parse_u64(f_lsn, 16, &lsn);

		/* its run and mark (none: written before runs existed) */
		if (parsed && zk_json_field(value, value_len, "run", f_run, sizeof(f_run)))
			parsed = zk_q_parse_u64(f_run, 16, &run) && run != 0 &&
				zk_json_field(value, value_len, "rec", f_rec, sizeof(f_rec)) &&
				zk_q_parse_u64(f_rec, 16, &rec);
		else if (ours && s->release_all &&
				 zk_json_field(value, value_len, "run", f_run, sizeof(f_run)))
			(void) zk_q_parse_u64(f_run, 16, &run);

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

			/* (a release of a claim it cannot read: as rolled back) */
			f = node_fate(s, ZKK_QCLAIM, run, fxid, (uint32) tli, lsn,
						  parsed ? rec : 0, &quiet);
			if (f == FATE_COMMITTED && !s->release_all &&
				scan_replayed(s, run, fxid, c->path, &replay_claim))
			{
				/*
				 * This run's claims are ended by their entries: a claim
				 * written again after a drop reused its item's name would
				 * consume another item ("Replayed transaction nodes").
				 */
				f = FATE_UNKNOWN;
				quiet = true;
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
				/* released, or moved when it was to move ("A claim that would...") */
				if (scan_release(s, c, stat->version) ||
					zoo_adelete(zk_zh, c->path, stat->version, scan_void_done, c) == ZOK)
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
		zk_q_scan_done_one(s, true, 0);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget_children sent by scan_send_queues() */
static void
scan_taken_listed(int rc, const struct String_vector *sv, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		int			i;

		if (scan_listing_usable(s, rc))
		{
			for (i = 0; sv && i < sv->count; i++)
			{
				ScanCall   *d = MemoryContextAllocZero(zk_q_context(), sizeof(ScanCall));

				d->scan = s;
				snprintf(d->path, sizeof(d->path), "%s/queues/%s/taken/%s",
						 zk_root, c->qenc, sv->data[i]);
				snprintf(d->epath, sizeof(d->epath), "%s/queues/%s/entries/%s",
						 zk_root, c->qenc, sv->data[i]);
				strlcpy(d->qenc, c->qenc, sizeof(d->qenc));
				if (zoo_aget(zk_zh, d->path, 0, scan_claim_data, d) != ZOK)
				{
					pfree(d);
					s->failed = true;
					break;
				}
				s->outstanding++;
			}
		}
		pfree(c);
		s->qlisting--;
		scan_send_queues(s);
		zk_q_scan_done_one(s, true, 0);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget_children sent by scan_list_send() */
static void
scan_queues_listed(int rc, const struct String_vector *sv, const void *data)
{
	CALL_COMPLETION_BEGIN(ScanCall, c, Scan, s, scan, data)
	{
		if (scan_listing_usable(s, rc))
		{
			s->queues = zk_q_names_copy(sv, &s->nqueues);
			s->qnext = 0;
			scan_send_queues(s);
		}
		scan_listing_over(s, c);
	}
	NONE_COMPLETION_END;
}

/* a run released by the operator was taken over (or that failed) */
static void
scan_taken_over(bool ok, void *arg)
{
	Scan	   *s = (Scan *) arg;

	if (!ok && zk_history_take_refused())
	{
		Info	   *in = s->info;
		void		(*done) (Info *);

		/*
		 * Its run node changed since the survey: its server registered
		 * again.  Refused as a live run (55006), nothing released.
		 */
		zk_history_run_name(s->run, in->live, sizeof(in->live));
		in->count = -1;
		if (s->own_release)
			zk_q_resolve_running = false;
		done = s->info_done;
		pfree(s);
		done(in);
		return;
	}
	if (!ok || !zk_session_usable())
	{
		s->failed = true;
		s->outstanding = 1;
		zk_q_scan_done_one(s, true, 0);
		return;
	}
	scan_list(s);
}

/*
 * the survey of runs answered: list the nodes (a release of one run of
 * this cluster takes it over first: zk_history_take)
 */
static void
scan_surveyed(bool ok, void *arg)
{
	Scan	   *s = (Scan *) arg;

	if (!ok || !zk_session_usable())
	{
		s->failed = true;
		s->outstanding = 1;
		zk_q_scan_done_one(s, true, 0);
		return;
	}
	if (s->own_release && s->run != 0 &&
		zk_history_take(s->run, scan_taken_over, s))
		return;
	scan_list(s);
}

/*
 * A settling pass (or a release): first what the runs of this cluster are
 * (history.c), then the nodes.  A dead cluster's release needs no survey.
 */
bool
zk_q_scan_start(Scan *s)
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

/* Send one listing of scan_list(): <root>/<dir>, answered by done */
static void
scan_list_send(Scan *s, const char *dir, strings_completion_t done)
{
	char		buf[ZK_PATH_MAX];
	ScanCall   *c = MemoryContextAllocZero(zk_q_context(), sizeof(ScanCall));

	c->scan = s;
	snprintf(buf, sizeof(buf), "%s/%s", zk_root, dir);
	if (zoo_aget_children(zk_zh, buf, 0, done, c) == ZOK)
		s->outstanding++;
	else
	{
		pfree(c);
		s->failed = true;
	}
}

/* Start the scan: list the queues and the transaction nodes */
static void
scan_list(Scan *s)
{
	/* one count for the start itself, so nothing finishes it early */
	s->outstanding = 1;
	scan_list_send(s, "txns", scan_txns_listed);
	scan_list_send(s, "queues", scan_queues_listed);
	zk_q_scan_done_one(s, true, 0);
}

/*
 * zk_queue_release_cluster refuses a live cluster: before anything is
 * released, every run of the target registered under <root>/runs
 * (<sysid>-<run>, or only the named run of this cluster) is asked whether
 * its ephemeral "live" exists.  One that does ends the request with count -1 and the
 * run's name (the backend raises 55006); a failed listing or read fails
 * it; otherwise the release goes on (zk_q_scan_start).
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

/*
 * zk_queue_release_cluster: the check for a live run is over; release when
 * none is live, else refuse
 */
static void
release_live_checked(LiveCheck *lc)
{
	Scan	   *s = lc->scan;
	Info	   *in = s->info;
	void		(*done) (Info *);

	if (!lc->failed && in->live[0] == '\0')
	{
		pfree(lc);
		(void) zk_q_scan_start(s);
		return;
	}
	/* refused or failed: nothing released (scan_finish's part, by hand) */
	done = s->info_done;
	if (lc->failed)
		s->info_fail(in, lc->fail_rc);
	else
		in->count = -1;
	if (s->own_release)
		zk_q_resolve_running = false;
	pfree(lc);
	pfree(s);
	done(in);
}

/* One reply of the live-run check is in; the last decides */
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
	CALL_COMPLETION_BEGIN(LiveCall, c, LiveCheck, lc, lc, data)
	{
		Info	   *in = lc->scan->info;

		if (rc == ZOK && in->live[0] == '\0')
			strlcpy(in->live, c->run, sizeof(in->live));
		pfree(c);
		live_done_one(lc, rc);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget_children sent by zk_q_release_check_live() */
static void
release_runs_listed(int rc, const struct String_vector *sv, const void *data)
{
	DATA_COMPLETION_BEGIN(LiveCheck, lc, data)
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
			c = MemoryContextAllocZero(zk_q_context(), sizeof(LiveCall));
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
	NONE_COMPLETION_END;
}

/*
 * zk_queue_release_cluster: before releasing, make sure no run of that
 * cluster (or that run) is live in ZooKeeper
 */
void
zk_q_release_check_live(Scan *s)
{
	LiveCheck  *lc = MemoryContextAllocZero(zk_q_context(), sizeof(LiveCheck));
	char		path[ZK_PATH_MAX];
	int			rc;

	lc->scan = s;

	/*
	 * One run of this cluster: only that run must be dead.  One run of
	 * another cluster: none of that identifier may be alive either, as a
	 * live server of it (a copy, a restored backup) may be settling that
	 * run from its WAL, which this server cannot read; the operator
	 * releases it there.
	 */
	if (s->run != 0 && s->sysid == GetSystemIdentifier())
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
