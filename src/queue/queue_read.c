/*-------------------------------------------------------------------------
 *
 * queue_read.c
 *	  ZKK_QINFO: the one-off operations on a queue: zk_queue_length,
 *	  zk_queue_peek, zk_queue_purge, the rows of zk_queues,
 *	  zk_queue_release_cluster (with queue_settle.c's scan) and
 *	  zk_queue_drop ("Dropping a queue").  Each sends a bounded window of
 *	  requests at a time (ZKQ_INFO_WINDOW) and bounds its answer
 *	  (zklock.max_answer_bytes; "The bounds of an answer").
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"

#include <ctype.h>

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


static void info_step(Info *in);
static void info_send_more(Info *in);
static void info_send_first(Info *in);
static bool purge_guard_drop(Info *in);
static void info_finish(Info *in);
static bool purge_guard_name(const char *child);

/* a purge's node under the queue node: purge-<session>-<n> ("Late purges") */
#define ZKQ_PURGE_GUARD_PREFIX	"purge-"

/* ------------------------------------------------------------------------
 * One-off reads (ZKK_QINFO) and the resolution scan
 * ------------------------------------------------------------------------
 */

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
	zoo_op_t	ops[4];
	zoo_op_result_t res[4];
	char		p1[ZK_PATH_MAX];
	char		p2[ZK_PATH_MAX];
} InfoCall;

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

/* The entry of a one-off read, or NULL once it was freed */
static ZkEntry *
info_entry(Info *in)
{
	return zk_q_entry_of(in->idx, in->gen);
}

/* Free a one-off read's state, rows and listings */
static void
info_free(Info *in)
{
	list_free_deep(in->rows);
	zk_q_listing_free(&in->list);
	zk_q_names_free(&in->names, &in->nnames);
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

	if (purge_guard_drop(in))
		return;					/* purge_guard_gone finishes */
	if (e == NULL)
	{
		info_free(in);
		return;
	}
	e->outstanding = 0;
	if (e->released)
	{
		zk_q_free_entry(e);
		info_free(in);
		return;
	}
	if (in->over)
	{
		char		msg[ZKLOCK_ERRMSG_MAX];

		if (in->limit[0] != '\0')
			strlcpy(msg, in->limit, sizeof(msg));
		else
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
		/* refused for want of permission: 42501 naming the queue */
		zk_fail_rc(e, in->fail_rc, in->qpath[0] ? in->qpath : NULL,
				   ERRCODE_CONNECTION_FAILURE, msg);
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
		zk_q_info_fail(in, ZOK);
		return NULL;
	}
	in->bytes += MAXALIGN(sz);
	r = MemoryContextAlloc(zk_q_context(), sizeof(Size) + sz);
	memcpy(r, &sz, sizeof(Size));
	old = MemoryContextSwitchTo(zk_q_context());
	in->rows = lappend(in->rows, r);
	MemoryContextSwitchTo(old);
	return r + sizeof(Size);
}

/* Add a copy of rec (sz bytes) to in's rows, within its cap */
static void
info_add_row(Info *in, const void *rec, Size sz)
{
	char	   *r = info_new_row(in, sz);

	if (r != NULL)
		memcpy(r, rec, sz);
}

/*
 * One request of a one-off read answered: send more within the window;
 * the last answer finishes the step
 */
void
zk_q_info_call_done(Info *in)
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

/* A one-off read failed with rc (the first failure is kept) */
void
zk_q_info_fail(Info *in, int rc)
{
	if (!in->failed)
	{
		in->failed = true;
		in->fail_rc = rc;
	}
}

/*
 * An InfoCall of in answered with rc and handled: a failure fails the read
 * (but ZNONODE: what it asked about is not there), then the call is done
 */
static void
info_call_end(Info *in, InfoCall *c, int rc)
{
	if (rc != ZOK && rc != ZNONODE)
		zk_q_info_fail(in, rc);
	pfree(c);
	zk_q_info_call_done(in);
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

/* A one-off read's listing answered (Listing.done) */
static void
info_listed(Listing *l)
{
	Info	   *in = (Info *) l->owner;
	int			rc = listing_error(l);

	if (rc != ZOK)
		zk_q_info_fail(in, rc);
	zk_q_info_call_done(in);
}

/* Completion of the zoo_aget sent by info_send_more() */
static void
info_peek_done(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(InfoCall, c, Info, in, info, data)
	{
		if (rc == ZOK && !in->failed)
		{
			Size		len = value_len > 0 ? value_len : 0;
			char	   *buf = info_new_row(in, sizeof(ZkMsgRec) + len);

			in->largest = Max(in->largest, len);
			if (buf != NULL)
			{
				memset(buf, 0, sizeof(ZkMsgRec));
				zk_q_msg_fill((ZkMsgRec *) buf, c->node, value, len, stat);
			}
		}
		info_call_end(in, c, rc);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_amulti sent by info_send_more() */
static void
info_purge_done(int rc, const void *data)
{
	CALL_COMPLETION_BEGIN(InfoCall, c, Info, in, info, data)
	{
		if (rc == ZOK)
			in->count++;
		else if (!zk_rc_definite(rc) || rc == ZNOAUTH)
			zk_q_info_fail(in, rc);
		else if (c->res[0].err == ZNONODE)
			in->sending = false;	/* its node went: the queue was dropped */
		pfree(c);
		zk_q_info_call_done(in);
	}
	NONE_COMPLETION_END;
}

/* A new request of a one-off read about node, in zk_q_context() */
static InfoCall *
info_call(Info *in, const char *node)
{
	InfoCall   *c = MemoryContextAllocZero(zk_q_context(), sizeof(InfoCall));

	c->info = in;
	if (node)
		strlcpy(c->node, node, sizeof(c->node));
	return c;
}

/* ------------------------------------------------------------------------
 * Late purges (issue 36)
 *
 * ZooKeeper applies a request that a follower has already forwarded to its
 * leader even after the client closed or gave up its session (a change of
 * zklock.hosts, the worker's exit, a session given up; how-it-works.md,
 * "Requests of a session that ended").  A purge deletes items by name, and
 * a queue dropped and created again names its items from 0 again: a late
 * delete of the old session would remove a new item of the same name.  So
 * a purge first creates a node of its own under the queue node, ephemeral
 * and named after the session and a number never used again
 * (purge-<session>-<n>), lists the items only once that create is
 * answered, and each item's multi checks, first, that this node is still
 * there.  The node goes when the purge ends, with the session, or with
 * the queue: zk_queue_drop deletes such nodes in its multi.  A queue
 * created again never has it, so a late multi of the old queue's purge
 * fails there and deletes nothing.  (A create of the node itself that
 * lands late only leaves an ephemeral node of the old session, gone with
 * its close; no multi of that purge was sent.)
 * ------------------------------------------------------------------------
 */
static uint32 purge_guard_seq = 0;

/* Completion of the zoo_adelete sent by purge_guard_drop(): finish */
static void
purge_guard_gone(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(Info, in, data)
	{
		/* the session ended meanwhile: as every request of it */
		if (!zk_rc_definite(rc))
			zk_q_info_fail(in, rc);
		info_finish(in);
	}
	NONE_COMPLETION_END;
}

/*
 * A purge ends: its node goes (gone already if the session ended).  True
 * when its delete was sent: its answer finishes the purge, so that nothing
 * of it is left once the caller has its count.
 */
static bool
purge_guard_drop(Info *in)
{
	bool		sent;

	if (in->guard[0] == '\0')
		return false;
	sent = zk_session_usable() &&
		zoo_adelete(zk_zh, in->guard, -1, purge_guard_gone, in) == ZOK;
	in->guard[0] = '\0';
	return sent;
}

/* Completion of the zoo_acreate sent by purge_guard_send() */
static void
purge_guard_made(int rc, const char *value, const void *data)
{
	CALL_COMPLETION_BEGIN(InfoCall, c, Info, in, info, data)
	{
		if (rc == ZOK)
			strlcpy(in->guard, c->p1, sizeof(in->guard));
		/* ZNONODE: no queue node, nothing to purge (guard stays empty) */
		info_call_end(in, c, rc);
	}
	NONE_COMPLETION_END;
}

/* A purge's first step: create its node under the queue node */
static void
purge_guard_send(Info *in)
{
	InfoCall   *c = info_call(in, NULL);

	if (++purge_guard_seq == 0)
		purge_guard_seq = 1;
	snprintf(c->p1, sizeof(c->p1), "%s/" ZKQ_PURGE_GUARD_PREFIX "%016llx-%u", in->qpath,
			 (unsigned long long) zk_cur_session, purge_guard_seq);
	if (zoo_acreate(zk_zh, c->p1, NULL, -1, zk_acl_path(c->p1), ZOO_EPHEMERAL,
					purge_guard_made, c) != ZOK)
	{
		pfree(c);
		zk_q_info_fail(in, ZCONNECTIONLOSS);
		return;
	}
	in->outstanding++;
}

/* Is child (of a queue node) a purge's node, purge-<16 hex>-<digits>? */
static bool
purge_guard_name(const char *child)
{
	size_t		pl = strlen(ZKQ_PURGE_GUARD_PREFIX);
	const char *p;
	int			i;

	if (strncmp(child, ZKQ_PURGE_GUARD_PREFIX, pl) != 0)
		return false;
	p = child + pl;
	for (i = 0; i < 16; i++)
		if (!isxdigit((unsigned char) p[i]))
			return false;
	p += 16;
	if (*p++ != '-' || *p == '\0' || strlen(p) > 10)
		return false;
	for (; *p; p++)
		if (!isdigit((unsigned char) *p))
			return false;
	return true;
}

/* List entries and taken of qpath for a one-off read */
static void
info_send_listing(Info *in, const char *qpath)
{
	in->list.done = info_listed;
	in->list.owner = in;
	if (zk_q_listing_send(&in->list, qpath, NULL, NULL, false, false, true) != 0)
		in->outstanding++;
	else
		zk_q_info_fail(in, ZCONNECTIONLOSS);
}

/* ---- zk_queues: every queue under <root>/queues ---- */

/*
 * One queue being counted (issue 35: a queue of 60,000 items costs the same
 * as an empty one; issue 38: its metrics, doc/queues.md "zk_queues").
 *
 *	First, always: the child counts of entries, taken and delayed (three
 *	exists), the queue node's data and ACL (its dead-letter policy,
 *	believed only under zklock's ACL, as queue_policy.c believes it).
 *	Then two paths side by side, each a step per round of answers:
 *	- the oldest ready item (QR_), only with unclaimed items: the cached
 *	  candidates (MetricsCache, the ZKQ_METRICS_CANDIDATES unclaimed items
 *	  of lowest sequence number) while the last listing is younger than
 *	  ZKQ_METRICS_TTL_MS, else a listing of entries and taken (not past
 *	  zklock.max_children: then the cached candidates however old), then an
 *	  exists of each candidate and of its claim;
 *	- the oldest claim (QC_), only with 1..ZKQ_METRICS_CLAIMS claims: an
 *	  exists of the cached oldest claim (the same czxid: nothing claimed
 *	  since is older), else, or when it is gone, a listing of taken, then an
 *	  exists per claim for its ctime.
 *
 * So a queue costs five requests, and with ready items or claims at most
 * 2 * ZKQ_METRICS_CANDIDATES + 1 more (a listing of its items at most once
 * per TTL), and, when its oldest claim ended, a listing of taken and one
 * exists per claim (at most ZKQ_METRICS_CLAIMS, ZKQ_METRICS_CLAIM_WINDOW in
 * flight).  ZKQ_QUEUES_WINDOW queues at a time.
 */
#define ZKQ_QUEUES_WINDOW		16
#define ZKQ_METRICS_TTL_MS		10000
#define ZKQ_METRICS_CANDIDATES	4
#define ZKQ_METRICS_CLAIMS		256
#define ZKQ_METRICS_CLAIM_WINDOW	32	/* claims' exists in flight per queue */
#define ZKQ_METRICS_CACHED		4096	/* queues whose oldest items are kept */

/* what the worker keeps of a queue's oldest ready item and oldest claim */
typedef struct MetricsCache
{
	char		enc[ZKLOCK_ENAME_MAX + 1];	/* key: the queue's encoded name */
	TimestampTz listed_at;		/* the last listing of entries (0: none) */
	int			ncand;
	char		cand[ZKQ_METRICS_CANDIDATES][ZKQ_NODE_MAX];	/* oldest unclaimed
															 * first */
	char		claim[ZKQ_NODE_MAX];	/* the oldest claim ("" none) */
	int64		claim_czxid;
} MetricsCache;

static HTAB *metrics_cache = NULL;

typedef struct QueueCount
{
	Info	   *info;
	int			ready_step;		/* QR_: the oldest ready item's */
	int			claim_step;		/* QC_: the oldest claim's */
	int			pending;		/* requests out in this phase */
	int			rc;				/* the first failure */
	int32		nentries;
	int32		ntaken;
	int32		ndelayed;
	int			rc_data;
	int			rc_acl;
	bool		open;			/* a foreign identity may write the node */
	QPolicyData what;
	int			max_attempts;
	char		dlq[ZKLOCK_NAME_MAX + 1];
	/* the oldest ready item */
	bool		listing;		/* entries and taken listed in phase 2 */
	Listing		list;
	int			ncand;
	char		cand[ZKQ_METRICS_CANDIDATES][ZKQ_NODE_MAX];
	int64		cand_ctime[ZKQ_METRICS_CANDIDATES];	/* 0: gone */
	bool		cand_taken[ZKQ_METRICS_CANDIDATES];
	int64		ready_ctime;	/* 0: none known */
	/* the oldest claim */
	bool		claims_listed;
	char	  **claims;
	int			nclaims;
	int			claims_next;	/* the next claim to read */
	int64		claim_ctime;	/* 0: none known */
	int64		claim_czxid;
	char		claim[ZKQ_NODE_MAX];
	char		enc[ZKLOCK_ENAME_MAX + 1];
	char		qpath[ZK_PATH_MAX];
} QueueCount;

/* One request of phase 2 or 3 (which: what it asks; i: the candidate) */
typedef struct MetricsCall
{
	QueueCount *qc;
	int			which;
	int			i;
} MetricsCall;

#define QM_CAND_ENTRY	0		/* exists entries/<candidate> */
#define QM_CAND_TAKEN	1		/* exists taken/<candidate> */
#define QM_CLAIM		2		/* exists taken/<claim> */
#define QM_CLAIMS		3		/* get_children taken */
#define QM_CACHED_CLAIM	4		/* exists taken/<the cached oldest claim> */

/* the steps of a queue's oldest ready item, then of its oldest claim */
#define QR_START		0		/* phase 1 is out */
#define QR_LISTING		1		/* entries and taken listed */
#define QR_PROBING		2		/* the candidates' exists */
#define QR_DONE			3
#define QC_START		0
#define QC_CACHED		1		/* the cached oldest claim's exists */
#define QC_LISTING		2		/* taken listed */
#define QC_READING		3		/* each claim's exists */
#define QC_DONE			4

static void queue_count_step(QueueCount *qc);
static void queue_metric_send(QueueCount *qc, int which, int i, const char *folder,
							  const char *node);

/* The cache's entry for queue enc (made when make), or NULL; never throws */
static MetricsCache *
metrics_cached(const char *enc, bool make)
{
	MetricsCache *volatile mc = NULL;
	MemoryContext mcx = CurrentMemoryContext;

	PG_TRY();
	{
		bool		found;

		if (metrics_cache == NULL)
		{
			HASHCTL		ctl;

			memset(&ctl, 0, sizeof(ctl));
			ctl.keysize = ZKLOCK_ENAME_MAX + 1;
			ctl.entrysize = sizeof(MetricsCache);
			metrics_cache = hash_create("zklock queue metrics", 64, &ctl,
										HASH_ELEM | HASH_STRINGS);
		}
		if (make && hash_get_num_entries(metrics_cache) >= ZKQ_METRICS_CACHED &&
			hash_search(metrics_cache, enc, HASH_FIND, NULL) == NULL)
		{
			/* full: the queue listed longest ago gives its place */
			HASH_SEQ_STATUS st;
			MetricsCache *it;
			MetricsCache *old = NULL;

			hash_seq_init(&st, metrics_cache);
			while ((it = hash_seq_search(&st)) != NULL)
				if (old == NULL || it->listed_at < old->listed_at)
					old = it;
			if (old != NULL)
				hash_search(metrics_cache, old->enc, HASH_REMOVE, NULL);
		}
		mc = hash_search(metrics_cache, enc, make ? HASH_ENTER : HASH_FIND, &found);
		if (make && !found)
		{
			mc->listed_at = 0;
			mc->ncand = 0;
			mc->claim[0] = '\0';
			mc->claim_czxid = 0;
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(mcx);
		FlushErrorState();
		mc = NULL;
	}
	PG_END_TRY();
	return mc;
}

/* The sequence number of an item's name, entry-PPP-<seq> (max: none) */
static uint64
metrics_seq(const char *node)
{
	const char *dash = strrchr(node, '-');
	uint64		v;

	if (dash == NULL || !zk_q_parse_u64(dash + 1, 10, &v))
		return PG_UINT64_MAX;
	return v;
}

/* A zk_queues row: one queue's counts and metrics answered; add its row */
static void
queue_count_finish(QueueCount *qc)
{
	Info	   *in = qc->info;
	char		name[ZKLOCK_QNAME_MAX + 1];
	int			nlen;
	int			dlen = 0;
	char	   *rec;
	ZkQueueRow	row;

	/* a failed read fails the answer; a queue that went meanwhile counts 0 */
	if (qc->rc != ZOK)
		zk_q_info_fail(in, qc->rc);
	else
	{
		nlen = zk_decode_qname(qc->enc, name, sizeof(name));
		memset(&row, 0, sizeof(row));
		row.items = Max(qc->nentries - qc->ntaken, 0);
		row.claimed = qc->ntaken;
		row.delayed = qc->ndelayed;
		row.ready_ctime = row.items > 0 ? qc->ready_ctime : 0;
		row.claim_ctime = qc->claim_ctime;
		row.namelen = nlen;
		/* a policy only under zklock's ACL (queue_policy.c) */
		if (qc->what == QPOLICY_SET && qc->rc_data == ZOK && qc->rc_acl == ZOK && !qc->open)
		{
			row.max_attempts = qc->max_attempts;
			dlen = strlen(qc->dlq);
		}
		row.dlqlen = dlen;
		rec = palloc(sizeof(row) + nlen + dlen);
		memcpy(rec, &row, sizeof(row));
		memcpy(rec + sizeof(row), name, nlen);
		memcpy(rec + sizeof(row) + nlen, qc->dlq, dlen);
		info_add_row(in, rec, sizeof(row) + nlen + dlen);
		pfree(rec);
	}
	zk_q_listing_free(&qc->list);
	zk_q_names_free(&qc->claims, &qc->nclaims);
	pfree(qc);
	zk_q_info_call_done(in);
}

/* One request of qc answered with rc: after the last, the next phase */
static void
queue_count_answered(QueueCount *qc, int rc)
{
	if (rc != ZOK && rc != ZNONODE && rc != ZNOAUTH && qc->rc == ZOK)
		qc->rc = rc;
	if (--qc->pending == 0)
		queue_count_step(qc);
}

/* Completion of phase 1's zoo_aexists of entries, taken and delayed */
static void
queue_folder_counted(int rc, const struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(MetricsCall, c, QueueCount, qc, qc, data)
	{
		int32		n = (rc == ZOK && stat != NULL) ? stat->numChildren : 0;

		if (c->which == 0)
			qc->nentries = n;
		else if (c->which == 1)
			qc->ntaken = n;
		else
			qc->ndelayed = n;
		pfree(c);
		queue_count_answered(qc, rc == ZNOAUTH ? ZCONNECTIONLOSS : rc);
	}
	NONE_COMPLETION_END;
}

/* Completion of phase 1's zoo_aget of the queue node: its policy */
static void
queue_policy_got(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(QueueCount, qc, data)
	{
		qc->rc_data = rc;
		if (rc == ZOK)
			qc->what = zk_q_policy_parse(value, value_len, &qc->max_attempts,
										 qc->dlq, sizeof(qc->dlq));
		if (qc->what != QPOLICY_SET)
			qc->dlq[0] = '\0';
		queue_count_answered(qc, rc);
	}
	NONE_COMPLETION_END;
}

/* Completion of phase 1's zoo_aget_acl of the queue node */
static void
queue_acl_got(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(QueueCount, qc, data)
	{
		qc->rc_acl = rc;
		if (rc == ZOK && zk_acl_first_foreign(acl, ZOO_PERM_WRITE | ZOO_PERM_ADMIN) >= 0)
			qc->open = true;
		queue_count_answered(qc, rc);
	}
	NONE_COMPLETION_END;
}

/* Completion of an exists of phase 2 or 3 (MetricsCall.which) */
static void
queue_metric_read(int rc, const struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(MetricsCall, c, QueueCount, qc, qc, data)
	{
		bool		there = (rc == ZOK && stat != NULL);

		switch (c->which)
		{
			case QM_CAND_ENTRY:
				qc->cand_ctime[c->i] = there ? Max(stat->ctime, 1) : 0;
				break;
			case QM_CAND_TAKEN:
				qc->cand_taken[c->i] = (rc != ZNONODE);
				break;
			case QM_CLAIM:
			case QM_CACHED_CLAIM:
				/* the next claim's read, ZKQ_METRICS_CLAIM_WINDOW in flight */
				if (c->which == QM_CLAIM && qc->claims_next < qc->nclaims)
				{
					if (qc->rc == ZOK && zk_session_usable())
					{
						qc->claims_next++;
						queue_metric_send(qc, QM_CLAIM, qc->claims_next - 1, "taken",
										  qc->claims[qc->claims_next - 1]);
					}
					else if (qc->rc == ZOK)
						qc->rc = ZCONNECTIONLOSS;	/* not every claim read */
				}
				if (there && (c->which == QM_CLAIM || stat->czxid == qc->claim_czxid) &&
					(qc->claim_ctime == 0 || stat->ctime < qc->claim_ctime))
				{
					qc->claim_ctime = Max(stat->ctime, 1);
					qc->claim_czxid = stat->czxid;
					if (c->which == QM_CLAIM)
						strlcpy(qc->claim, qc->claims[c->i], sizeof(qc->claim));
				}
				break;
		}
		pfree(c);
		queue_count_answered(qc, rc);
	}
	NONE_COMPLETION_END;
}

/* Completion of phase 2's zoo_aget_children of taken */
static void
queue_claims_listed(int rc, const struct String_vector *sv, const void *data)
{
	CALL_COMPLETION_BEGIN(MetricsCall, c, QueueCount, qc, qc, data)
	{
		if (rc == ZOK && sv != NULL && sv->count <= ZKQ_METRICS_CLAIMS)
		{
			MemoryContext old = MemoryContextSwitchTo(zk_q_context());
			int			i;

			qc->claims = palloc(sizeof(char *) * Max(sv->count, 1));
			for (i = 0; i < sv->count; i++)
				if (strlen(sv->data[i]) < ZKQ_NODE_MAX)
					qc->claims[qc->nclaims++] = pstrdup(sv->data[i]);
			MemoryContextSwitchTo(old);
			qc->claims_listed = true;
		}
		pfree(c);
		queue_count_answered(qc, rc);
	}
	NONE_COMPLETION_END;
}

/* The listing of entries and taken of phase 2 is in (Listing.done) */
static void
queue_items_listed(Listing *l)
{
	QueueCount *qc = (QueueCount *) l->owner;

	if (l->rc_entries == ZOK && (l->rc_taken == ZOK || l->rc_taken == ZNONODE))
	{
		MetricsCache *mc;
		uint64		seqs[ZKQ_METRICS_CANDIDATES];
		int			i;

		/* the unclaimed items with the lowest sequence numbers, oldest first */
		qc->ncand = 0;
		for (i = 0; i < l->nentries; i++)
		{
			uint64		s;
			int			k;

			if (zk_q_listing_taken(l, l->entries[i]) || strlen(l->entries[i]) >= ZKQ_NODE_MAX)
				continue;
			s = metrics_seq(l->entries[i]);
			if (qc->ncand == ZKQ_METRICS_CANDIDATES && s >= seqs[qc->ncand - 1])
				continue;
			k = Min(qc->ncand, ZKQ_METRICS_CANDIDATES - 1);
			while (k > 0 && seqs[k - 1] > s)
			{
				seqs[k] = seqs[k - 1];
				strlcpy(qc->cand[k], qc->cand[k - 1], ZKQ_NODE_MAX);
				k--;
			}
			seqs[k] = s;
			strlcpy(qc->cand[k], l->entries[i], ZKQ_NODE_MAX);
			if (qc->ncand < ZKQ_METRICS_CANDIDATES)
				qc->ncand++;
		}
		mc = metrics_cached(qc->enc, true);
		if (mc != NULL)
		{
			mc->listed_at = GetCurrentTimestamp();
			mc->ncand = qc->ncand;
			memcpy(mc->cand, qc->cand, sizeof(mc->cand));
		}
		qc->listing = true;
	}
	zk_q_listing_free(l);
	queue_count_answered(qc, l->rc_entries != ZOK ? l->rc_entries : l->rc_taken);
}

/* A request of qc was sent with rc: counted, or its call freed and qc failed */
static void
metrics_sent(QueueCount *qc, MetricsCall *c, int rc)
{
	if (rc == ZOK)
		qc->pending++;
	else
	{
		pfree(c);
		if (qc->rc == ZOK)
			qc->rc = ZCONNECTIONLOSS;
	}
}

/* Send an exists of qc's path (folder)/(node) for phase 2 or 3 */
static void
queue_metric_send(QueueCount *qc, int which, int i, const char *folder, const char *node)
{
	MetricsCall *c = MemoryContextAllocZero(zk_q_context(), sizeof(MetricsCall));
	char		path[ZK_PATH_MAX];

	c->qc = qc;
	c->which = which;
	c->i = i;
	snprintf(path, sizeof(path), "%s/%s/%s", qc->qpath, folder, node);
	metrics_sent(qc, c, zoo_aexists(zk_zh, path, 0, queue_metric_read, c));
}

/* Send the exists of the candidates for the oldest ready item */
static void
queue_send_candidates(QueueCount *qc)
{
	int			i;

	for (i = 0; i < qc->ncand; i++)
	{
		queue_metric_send(qc, QM_CAND_ENTRY, i, "entries", qc->cand[i]);
		queue_metric_send(qc, QM_CAND_TAKEN, i, "taken", qc->cand[i]);
	}
}

/* qc's next listing of taken (phase 2 or 3) */
static void
queue_claims_list(QueueCount *qc)
{
	MetricsCall *c = MemoryContextAllocZero(zk_q_context(), sizeof(MetricsCall));
	char		path[ZK_PATH_MAX];

	c->qc = qc;
	c->which = QM_CLAIMS;
	snprintf(path, sizeof(path), "%s/taken", qc->qpath);
	metrics_sent(qc, c, zoo_aget_children(zk_zh, path, 0, queue_claims_listed, c));
}

/* The oldest candidate there and unclaimed: the oldest ready item's ctime */
static void
queue_ready_found(QueueCount *qc)
{
	int			i;

	for (i = 0; i < qc->ncand; i++)
		if (qc->cand_ctime[i] != 0 && !qc->cand_taken[i])
		{
			qc->ready_ctime = qc->cand_ctime[i];
			break;
		}
}

/*
 * The oldest ready item's next step: the cached candidates while the
 * listing is younger than the TTL, else a listing (at most
 * zklock.max_children entries; past that, the cached candidates however
 * old), then the candidates' exists.
 */
static void
queue_ready_next(QueueCount *qc)
{
	MetricsCache *mc;

	switch (qc->ready_step)
	{
		case QR_START:
			qc->ready_step = QR_DONE;
			if (qc->nentries - qc->ntaken <= 0)
				break;
			mc = metrics_cached(qc->enc, false);
			if (mc != NULL && mc->listed_at != 0 &&
				(GetCurrentTimestamp() - mc->listed_at < ZKQ_METRICS_TTL_MS * INT64CONST(1000) ||
				 qc->nentries > zk_max_children))
			{
				qc->ncand = mc->ncand;
				memcpy(qc->cand, mc->cand, sizeof(qc->cand));
				queue_send_candidates(qc);
				qc->ready_step = QR_PROBING;
			}
			else if (qc->nentries <= zk_max_children)
			{
				int			sent;

				qc->list.done = queue_items_listed;
				qc->list.owner = qc;
				sent = zk_q_listing_send(&qc->list, qc->qpath, NULL, NULL, false, false, true);
				if (sent != 0)
					qc->pending++;	/* "done" answers once */
				if (sent != 3 && qc->rc == ZOK)
					qc->rc = ZCONNECTIONLOSS;
				qc->ready_step = QR_LISTING;
			}
			break;
		case QR_LISTING:
			qc->ready_step = QR_DONE;
			if (qc->listing && qc->ncand > 0)
			{
				queue_send_candidates(qc);
				qc->ready_step = QR_PROBING;
			}
			break;
		case QR_PROBING:
			queue_ready_found(qc);
			qc->ready_step = QR_DONE;
			break;
	}
}

/*
 * The oldest claim's next step: the cached one if it is still there, the
 * same node (czxid: nothing claimed later is older), else a listing of
 * taken (1..ZKQ_METRICS_CLAIMS claims, or NULL), then an exists per claim.
 */
static void
queue_claim_next(QueueCount *qc)
{
	MetricsCache *mc;
	int			i;

	switch (qc->claim_step)
	{
		case QC_START:
			qc->claim_step = QC_DONE;
			if (qc->ntaken <= 0 || qc->ntaken > ZKQ_METRICS_CLAIMS)
				break;
			mc = metrics_cached(qc->enc, false);
			if (mc != NULL && mc->claim[0] != '\0')
			{
				qc->claim_czxid = mc->claim_czxid;
				strlcpy(qc->claim, mc->claim, sizeof(qc->claim));
				queue_metric_send(qc, QM_CACHED_CLAIM, 0, "taken", mc->claim);
				qc->claim_step = QC_CACHED;
			}
			else
			{
				queue_claims_list(qc);
				qc->claim_step = QC_LISTING;
			}
			break;
		case QC_CACHED:
			qc->claim_step = QC_DONE;
			if (qc->claim_ctime == 0)
			{
				/* gone, or claimed again since: list them */
				qc->claim[0] = '\0';
				queue_claims_list(qc);
				qc->claim_step = QC_LISTING;
			}
			break;
		case QC_LISTING:
			qc->claim_step = QC_DONE;
			if (qc->claims_listed && qc->nclaims > 0)
			{
				for (i = 0; i < Min(qc->nclaims, ZKQ_METRICS_CLAIM_WINDOW); i++)
					queue_metric_send(qc, QM_CLAIM, i, "taken", qc->claims[i]);
				qc->claims_next = i;
				qc->claim_step = QC_READING;
			}
			break;
		case QC_READING:
			qc->claim_step = QC_DONE;
			break;
	}
}

/*
 * Every request of qc's step is answered: send the next step's, or add the
 * row.  Nothing more is sent once the read failed or the session is not
 * usable.  Each step sends something or ends its path, so this ends.
 */
static void
queue_count_step(QueueCount *qc)
{
	Info	   *in = qc->info;

	while (qc->pending == 0 && (qc->ready_step != QR_DONE || qc->claim_step != QC_DONE))
	{
		ZkEntry    *e = info_entry(in);

		if (qc->rc != ZOK || in->failed || e == NULL || e->released || !zk_session_usable())
			break;
		if (qc->ready_step != QR_DONE)
			queue_ready_next(qc);
		if (qc->claim_step != QC_DONE)
			queue_claim_next(qc);
	}
	if (qc->pending > 0)
		return;
	if (qc->rc == ZOK && qc->claim_step == QC_DONE)
	{
		/* the oldest claim, for the next read */
		MetricsCache *mc = metrics_cached(qc->enc, qc->claim_ctime != 0);

		if (mc != NULL && qc->claim_ctime != 0 && qc->claim[0] != '\0')
		{
			strlcpy(mc->claim, qc->claim, sizeof(mc->claim));
			mc->claim_czxid = qc->claim_czxid;
		}
		else if (mc != NULL)
			mc->claim[0] = '\0';
	}
	queue_count_finish(qc);
}

/*
 * Completion of the zoo_aexists sent by info_send_count(): a folder's
 * child count (which: 0 the queues, 1 a queue's entries, 2 its taken).
 * More than zklock.max_children items is not listed: a length answers
 * from the counts.  The queues of every namespace are listed unless their
 * names alone would pass zklock.max_answer_bytes; zk_queues fails with
 * 54000 past zklock.max_children of the caller's own (info_queues_listed).
 */
static void
info_counted(int rc, const struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(InfoCall, c, Info, in, info, data)
	{
		if (rc == ZOK && stat != NULL)
		{
			static const char *const what[] = {"The queues", "The queue's items", "The queue's claims"};

			if (c->which == 2)
				in->stat_taken = stat->numChildren;
			else
				in->stat_entries = stat->numChildren;
			if (c->which == 0)
			{
				/* every namespace's queues: only their bytes (zk_own_children) */
				if (!in->over &&
					zk_listing_over(stat, in->cap, "queues", in->limit, sizeof(in->limit)))
				{
					in->over = true;
					in->sending = false;
					zk_q_info_fail(in, ZOK);
				}
			}
			else if (stat->numChildren > zk_max_children)
			{
				if (in->op == ZKQI_LENGTH)
					in->by_stat = true;
				else if (!in->over)
				{
					(void) zk_children_over(stat, what[c->which], in->limit, sizeof(in->limit));
					in->over = true;
					in->sending = false;
					zk_q_info_fail(in, ZOK);
				}
			}
		}
		info_call_end(in, c, rc);
	}
	NONE_COMPLETION_END;
}

/* Ask for the child counts of what in is about to list (info_counted) */
static void
info_send_count(Info *in)
{
	int			which;

	for (which = (in->op == ZKQI_QUEUES ? 0 : 1); which <= (in->op == ZKQI_QUEUES ? 0 : 2); which++)
	{
		InfoCall   *c = info_call(in, NULL);

		c->which = which;
		if (which == 0)
			snprintf(c->p1, sizeof(c->p1), "%s/queues", zk_root);
		else
			snprintf(c->p1, sizeof(c->p1), "%s/%s", in->qpath, which == 1 ? "entries" : "taken");
		if (zoo_aexists(zk_zh, c->p1, 0, info_counted, c) != ZOK)
		{
			pfree(c);
			zk_q_info_fail(in, ZCONNECTIONLOSS);
			return;
		}
		in->outstanding++;
	}
}

/* Completion of the zoo_aget_children sent by info_step() */
static void
info_queues_listed(int rc, const struct String_vector *sv, const void *data)
{
	CALL_COMPLETION_BEGIN(InfoCall, c, Info, in, info, data)
	{
		ZkEntry    *e = info_entry(in);

		if (rc == ZOK && zk_session_usable() && e != NULL)
		{
			/*
			 * The queues of the caller's namespace (every namespace's are
			 * children of <root>/queues), counted ZK_READ_WINDOW at a time
			 * (info_send_more)
			 */
			in->names = zk_own_children(sv, e->name, in->cap, "queues", zk_q_context(),
										&in->nnames, in->limit, sizeof(in->limit));
			if (in->nnames < 0)
			{
				in->nnames = 0;
				in->over = true;
				zk_q_info_fail(in, ZOK);
			}
			else
				info_send_first(in);
		}
		info_call_end(in, c, rc);
	}
	NONE_COMPLETION_END;
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
 *	   client's): refused, nothing deleted.  The nodes of purges ("Late
 *	   purges", up to ZKQ_DROP_GUARDS) go with the queue.
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
#define ZKQ_DROP_GUARDS		8	/* purges' nodes deleted with the queue */
#define ZKQ_GUARD_NAME_MAX	48	/* purge-<16 hex>-<10 digits> */

/* what this cluster does with a queue that is to be dropped (drop_local_use) */
typedef enum DropUse
{
	DROP_UNUSED = 0,			/* nothing: the drop may go on */
	DROP_WAIT,					/* something of the queue is ending here:
								 * the drop waits for it */
	DROP_BUSY					/* this cluster uses the queue: refused */
} DropUse;

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
	bool		has_delayed;
	int			rc_delayed;
	int32		ndelayed;
	int			nforeign;		/* other children of the queue node */
	char		foreign[ZKQ_NODE_MAX];	/* the first of them */
	int			nguards;		/* purges' nodes ("Late purges") */
	char		guards[ZKQ_DROP_GUARDS][ZKQ_GUARD_NAME_MAX];
	char		qpath[ZK_PATH_MAX];
	int			nops;
	char		paths[5 + ZKQ_DROP_GUARDS][ZK_PATH_MAX];
	zoo_op_t	ops[5 + ZKQ_DROP_GUARDS];
	zoo_op_result_t res[5 + ZKQ_DROP_GUARDS];
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
static DropUse
drop_local_use(ZkEntry *self, const char *qname, char *why, size_t len)
{
	bool		isnew;
	QState	   *q;
	QSeq	   *qs;
	DropUse		use = DROP_UNUSED;
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
						 e->pid, ZKQ(e)->nclaims, ZKQ(e)->nclaims == 1 ? "claim" : "claims");
				return DROP_BUSY;
			}
			if (use == DROP_UNUSED)
				snprintf(why, len, "The claims of a transaction on this server that has ended (pid %d) are still being consumed or released",
						 e->pid);
			use = DROP_WAIT;
		}
		else if (e->kind == ZKK_QPUB && DsaPointerIsValid(e->blob) &&
				 !(e->released && ZKQ(e)->decision != ZKQD_COMMIT) &&
				 blob_names_queue(dsa_get_address(zk_dsa(), e->blob), qname))
		{
			snprintf(why, len, "The items of a %s transaction on this server (pid %d) are on their way into it",
					 e->released ? "committed" : "committing", e->pid);
			return DROP_BUSY;
		}
	}
	q = zk_q_hash_entry(&zk_qstates, "zklock queue states", sizeof(QState), qname,
					 false, &isnew);
	if (q != NULL && use == DROP_UNUSED)
	{
		ListCell   *lc;
		bool		live = false;

		foreach(lc, q->waiters)
			if (zk_q_waiter_entry((Waiter *) lfirst(lc)) != NULL)
				live = true;
		if (live || q->list.pending > 0 || q->inflight > 0 || q->verify == QVERIFY_ASKING ||
			q->unflushed_wait ||
			(q->held != NULL && hash_get_num_entries(q->held) > 0))
		{
			snprintf(why, len, "The zklock worker is still serving a dequeue from it");
			use = DROP_WAIT;
		}
	}
	qs = zk_q_hash_entry(&zk_qseqs, "zklock queues published", sizeof(QSeq), qname,
					  false, &isnew);
	if (qs != NULL && use == DROP_UNUSED &&
		(qs->refs > 0 || qs->fetching || qs->naming == QSEQ_ASKING))
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
	QState	   *q = zk_q_hash_entry(&zk_qstates, "zklock queue states", sizeof(QState),
								 qname, false, &isnew);
	QSeq	   *qs = zk_q_hash_entry(&zk_qseqs, "zklock queues published", sizeof(QSeq),
								  qname, false, &isnew);

	if (q != NULL)
	{
		if (q->idle_since != 0)
			zk_q_nidle_watched--;
		q->idle_since = 0;
		list_free_deep(q->waiters); /* only waiters whose entries are gone */
		q->waiters = NIL;
		list_free_deep(q->gone);
		q->gone = NIL;
		zk_q_forget(q);
	}
	if (qs != NULL)
		(void) hash_search(zk_qseqs, qs->name, HASH_REMOVE, NULL);
	zk_q_tracked_update();
}

/* The drop's entry, while the drop is still its request; or NULL */
static ZkEntry *
drop_entry(Drop *d)
{
	return zk_q_request_of(d->idx, d->gen);
}

/* Answer the drop (token ZKQ_DROP_*, why the detail of a refusal) */
static void
drop_answer(Drop *d, ZkEntry *e, int64 token, const char *why)
{
	e->outstanding = 0;
	if (e->released)
		zk_q_free_entry(e);
	else
	{
		e->token = token;
		e->state = ZKE_HELD;
		zk_finish(e, ZKO_GRANTED, 0, why);
	}
	if (d != NULL)
		pfree(d);
}

/* A drop failed: free it if let go, else answer the error */
static void
drop_fail(Drop *d, ZkEntry *e, int rc, const char *what)
{
	char		msg[ZKLOCK_ERRMSG_MAX];

	e->outstanding = 0;
	if (e->released)
		zk_q_free_entry(e);
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
	DropUse		use = drop_local_use(e, e->name, why, sizeof(why));

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
	int			i;
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
	if (d->has_delayed)
		snprintf(d->paths[n++], ZK_PATH_MAX, "%s/delayed", d->qpath);
	/* purges' nodes: their late multis then fail ("Late purges") */
	for (i = 0; i < d->nguards && i < ZKQ_DROP_GUARDS; i++)
		snprintf(d->paths[n++], ZK_PATH_MAX, "%s/%s", d->qpath, d->guards[i]);
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
		zk_q_free_entry(e);
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
	if (d->rc_delayed != ZOK && d->rc_delayed != ZNONODE)
	{
		drop_fail(d, e, d->rc_delayed, "could not read the queue's delayed items");
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
	if (d->ndelayed > 0)
	{
		snprintf(why, sizeof(why), "It holds %d delayed %s, not due yet (in ZooKeeper, from every server)",
				 d->ndelayed, d->ndelayed == 1 ? "item" : "items");
		drop_answer(d, e, ZKQ_DROP_ITEMS, why);
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
	if (d->nguards > ZKQ_DROP_GUARDS)
	{
		snprintf(why, sizeof(why), "%d purges of it are running (in ZooKeeper, from every server)",
				 d->nguards);
		drop_answer(d, e, ZKQ_DROP_CHANGING, why);
		return;
	}
	drop_send(d, e);
}

/* Completion of the zoo_aget_children sent by drop_read() */
static void
drop_children_done(int rc, const struct String_vector *sv, const void *data)
{
	DATA_COMPLETION_BEGIN(Drop, d, data)
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
			else if (strcmp(c, "delayed") == 0)
				d->has_delayed = true;
			else if (purge_guard_name(c))
			{
				if (d->nguards < ZKQ_DROP_GUARDS)
					strlcpy(d->guards[d->nguards], c, ZKQ_GUARD_NAME_MAX);
				d->nguards++;
			}
			else if (d->nforeign++ == 0)
				strlcpy(d->foreign, c, sizeof(d->foreign));
		}
		drop_read_done(d);
	}
	NONE_COMPLETION_END;
}

/* The stat of entries or taken answered (rcp, n: where its rc and count go) */
static void
drop_count_one(Drop *d, int rc, const struct Stat *stat, int *rcp, int32 *n)
{
	*rcp = rc;
	if (rc == ZOK && stat != NULL)
		*n = stat->numChildren;
	drop_read_done(d);
}

/* Completion of the zoo_aexists sent by drop_read() */
static void
drop_entries_done(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(Drop, d, data)
	{
		drop_count_one(d, rc, stat, &d->rc_entries, &d->nentries);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aexists sent by drop_read() */
static void
drop_delayed_done(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(Drop, d, data)
	{
		drop_count_one(d, rc, stat, &d->rc_delayed, &d->ndelayed);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aexists sent by drop_read() */
static void
drop_taken_done(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(Drop, d, data)
	{
		drop_count_one(d, rc, stat, &d->rc_taken, &d->ntaken);
	}
	NONE_COMPLETION_END;
}

/* Step 2: read the queue node's children and entries' and taken's stats */
static void
drop_read_all(Drop *d)
{
	char		buf[ZK_PATH_MAX];
	int			rc;

	d->pending = 1;				/* until everything is sent */
	d->rc_children = d->rc_entries = d->rc_taken = ZCONNECTIONLOSS;
	d->nentries = d->ntaken = d->ndelayed = 0;
	d->rc_delayed = ZCONNECTIONLOSS;
	d->has_entries = d->has_taken = d->has_next = d->has_delayed = false;
	d->nforeign = 0;
	d->foreign[0] = '\0';
	d->nguards = 0;
	rc = zoo_aget_children(zk_zh, d->qpath, 0, drop_children_done, d);
	if (rc == ZOK)
		d->pending++;
	snprintf(buf, sizeof(buf), "%s/entries", d->qpath);
	if (rc == ZOK && (rc = zoo_aexists(zk_zh, buf, 0, drop_entries_done, d)) == ZOK)
		d->pending++;
	snprintf(buf, sizeof(buf), "%s/taken", d->qpath);
	if (rc == ZOK && (rc = zoo_aexists(zk_zh, buf, 0, drop_taken_done, d)) == ZOK)
		d->pending++;
	snprintf(buf, sizeof(buf), "%s/delayed", d->qpath);
	if (rc == ZOK && (rc = zoo_aexists(zk_zh, buf, 0, drop_delayed_done, d)) == ZOK)
		d->pending++;
	drop_read_done(d);
}

/*
 * Completion of the zoo_aexists sent by drop_read(): the queue node's
 * children are counted before they are listed (zklock.max_children, issue
 * 35).  zklock and kazoo make three at most; past the bound the drop fails
 * with 54000, nothing deleted.  Else the reads of step 2 go.
 */
static void
drop_counted(int rc, const struct Stat *stat, const void *data)
{
	Drop	   *d = (Drop *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		char		msg[ZKLOCK_ERRMSG_MAX];

		e = drop_entry(d);
		if (e == NULL)
			pfree(d);			/* answered already: the session ended */
		else if (e->released)
		{
			e->outstanding = 0;
			zk_q_free_entry(e);
			pfree(d);
		}
		else if (rc == ZOK &&
				 zk_children_over(stat, "The queue's node", msg, sizeof(msg)))
		{
			e->outstanding = 0;
			e->state = ZKE_DONE;
			zk_fail(e, ERRCODE_PROGRAM_LIMIT_EXCEEDED, msg);
			pfree(d);
		}
		else if (zk_session_usable())
			drop_read_all(d);	/* a failed count: the reads say so */
		else
			drop_fail(d, e, ZCONNECTIONLOSS, "could not read the queue's node");
	}
	COMPLETION_END(e);
}

/* Step 2: count the queue node's children (drop_counted), then read them */
static void
drop_read(Drop *d)
{
	int			rc;

	rc = zoo_aexists(zk_zh, d->qpath, 0, drop_counted, d);
	if (rc != ZOK)
	{
		ZkEntry    *e = drop_entry(d);

		if (e != NULL)
			drop_fail(d, e, rc, "could not read the queue's node");
		else
			pfree(d);
	}
}

/* A drop request (zk_qinfo_drive): step 1, then the reads */
static void
drop_start(ZkEntry *e)
{
	Drop	   *d;

	if (!drop_may_go(e, NULL))
		return;
	d = MemoryContextAllocZero(zk_q_context(), sizeof(Drop));
	d->idx = zk_entry_index(e);
	d->gen = e->gen;
	zk_queue_path(e->name, d->qpath, sizeof(d->qpath));
	e->state = ZKE_CREATING;
	e->outstanding = 1;			/* until answered */
	drop_read(d);
}

/* ---- the steps of a one-off read ---- */

/* Start sending with the first name (info_send_more) */
static void
info_send_first(Info *in)
{
	in->next = 0;
	in->sending = true;
	info_send_more(in);
}

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
			zk_q_info_fail(in, ZCONNECTIONLOSS);
		return;
	}
	while (in->op == ZKQI_QUEUES && in->outstanding < ZKQ_QUEUES_WINDOW)
	{
		QueueCount *qc;
		int			k;

		if (in->next >= in->nnames)
		{
			in->sending = false;
			zk_q_names_free(&in->names, &in->nnames);
			return;
		}
		qc = MemoryContextAllocZero(zk_q_context(), sizeof(QueueCount));
		qc->info = in;
		qc->rc = ZOK;
		qc->rc_data = qc->rc_acl = ZCONNECTIONLOSS;
		strlcpy(qc->enc, in->names[in->next++], sizeof(qc->enc));
		snprintf(qc->qpath, sizeof(qc->qpath), "%s/queues/%s", zk_root, qc->enc);
		/* phase 1: the three counts, the node's data and ACL */
		for (k = 0; k < 3 && qc->rc == ZOK; k++)
		{
			static const char *const folder[] = {"entries", "taken", "delayed"};
			MetricsCall *c = MemoryContextAllocZero(zk_q_context(), sizeof(MetricsCall));
			char		path[ZK_PATH_MAX];

			c->qc = qc;
			c->which = k;
			snprintf(path, sizeof(path), "%s/%s", qc->qpath, folder[k]);
			if (zoo_aexists(zk_zh, path, 0, queue_folder_counted, c) == ZOK)
				qc->pending++;
			else
			{
				pfree(c);
				qc->rc = ZCONNECTIONLOSS;
			}
		}
		if (qc->rc == ZOK && zoo_aget(zk_zh, qc->qpath, 0, queue_policy_got, qc) == ZOK)
			qc->pending++;
		else
			qc->rc = ZCONNECTIONLOSS;
		if (qc->rc == ZOK && zoo_aget_acl(zk_zh, qc->qpath, queue_acl_got, qc) == ZOK)
			qc->pending++;
		else
			qc->rc = ZCONNECTIONLOSS;
		if (qc->pending == 0)
		{
			pfree(qc);
			zk_q_info_fail(in, ZCONNECTIONLOSS);
			in->sending = false;
			return;
		}
		in->outstanding++;
		if (qc->rc != ZOK)
		{
			/* what was sent finishes it, failed */
			in->sending = false;
			return;
		}
	}
	while (in->op != ZKQI_QUEUES && in->outstanding < info_window(in))
	{
		InfoCall   *c;
		const char *node;
		int			rc;

		if (in->next >= in->list.nentries ||
			(in->op == ZKQI_PEEK && in->sent >= ZKQ(e)->max_items))
		{
			in->sending = false;
			return;
		}
		node = in->list.entries[in->next++];
		if (zk_q_listing_taken(&in->list, node))
			continue;
		c = info_call(in, node);
		snprintf(c->p1, sizeof(c->p1), "%s/entries/%s", in->qpath, c->node);
		if (in->op == ZKQI_PEEK)
			rc = zoo_aget(zk_zh, c->p1, 0, info_peek_done, c);
		else
		{
			/*
			 * claim, unclaim and delete at once: only if unclaimed, and
			 * only in the queue this purge listed ("Late purges")
			 */
			snprintf(c->p2, sizeof(c->p2), "%s/taken/%s", in->qpath, c->node);
			zoo_check_op_init(&c->ops[0], in->guard, -1);
			zoo_create_op_init(&c->ops[1], c->p2, NULL, -1, zk_acl_path(c->p2),
							   ZOO_EPHEMERAL, NULL, 0);
			zoo_delete_op_init(&c->ops[2], c->p2, -1);
			zoo_delete_op_init(&c->ops[3], c->p1, -1);
			rc = zoo_amulti(zk_zh, 4, c->ops, c->res, info_purge_done, c);
		}
		if (rc != ZOK)
		{
			pfree(c);
			zk_q_info_fail(in, rc);
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
			zk_q_info_fail(in, ZCONNECTIONLOSS);
		info_finish(in);
		return;
	}
	/*
	 * What is about to be listed is counted first (info_counted): the
	 * queues, and a queue's items for its length.  A peek's or purge's
	 * listing of the items is the one every dequeue makes: it is not
	 * refused (the items' number is bounded by the quotas of those who
	 * enqueue them); their reads are windowed (info_window).
	 */
	if (!in->counted && (in->op == ZKQI_QUEUES || in->op == ZKQI_LENGTH))
	{
		in->counted = true;
		info_send_count(in);
		if (in->outstanding > 0)
			return;
		if (in->failed)
		{
			info_finish(in);
			return;
		}
	}
	step = e->errors;			/* reused as the step counter */
	e->errors++;
	switch (in->op)
	{
		case ZKQI_LENGTH:
			if (in->by_stat)
				in->count = Max(in->stat_entries - in->stat_taken, 0);
			else if (step == 0)
				info_send_listing(in, in->qpath);
			else
				in->count = zk_q_listing_unclaimed(&in->list, NULL);
			break;
		case ZKQI_PURGE:
			/* its node first, then as a peek ("Late purges") */
			if (step == 0)
				purge_guard_send(in);
			else if (step == 1 && in->guard[0] != '\0')
				info_send_listing(in, in->qpath);
			else if (step == 2 && in->guard[0] != '\0')
				info_send_first(in);
			break;
		case ZKQI_PEEK:
			if (step == 0)
				info_send_listing(in, in->qpath);
			else if (step == 1)
				info_send_first(in);
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
					zk_q_info_fail(in, ZCONNECTIONLOSS);
				}
			}
			break;
		case ZKQI_RELEASE_CLUSTER:
			if (step == 0)
			{
				Scan	   *s;

				s = MemoryContextAllocZero(zk_q_context(), sizeof(Scan));
				if (ZKQ(e)->fxid == GetSystemIdentifier())
				{
					s->own_release = true;
					zk_q_resolve_running = true;
				}
				s->sysid = ZKQ(e)->fxid;
				s->release_all = true;
				s->info = in;
				s->info_done = zk_q_info_call_done;
				s->info_fail = zk_q_info_fail;
				/* a run of this cluster: its 16 hex digits as the name */
				if (e->name[0] != '\0' && !zk_q_parse_u64(e->name, 16, &s->run))
					s->run = 0;
				in->outstanding += 2;	/* one answered by scan_finish */
				zk_q_release_check_live(s);
				zk_q_info_call_done(in);
				return;
			}
			break;
	}
	if (in->outstanding == 0)
	{
		if (in->failed || step >= (in->op == ZKQI_PURGE ? 2 : 1) ||
			in->op == ZKQI_QUEUES || in->op == ZKQI_RELEASE_CLUSTER)
			info_finish(in);
		else
			info_step(in);
	}
}

/* Drive a one-off read (ZKK_QINFO's drive): start it, or free it when let go */
void
zk_qinfo_drive(ZkEntry *e)
{
	Info	   *in;

	if (e->outstanding > 0)
		return;					/* in flight: the last answer finishes it */
	if (e->released)
	{
		zk_q_free_entry(e);
		return;
	}
	if (e->state != ZKE_PENDING)
		return;
	if (!zk_session_usable() ||
		(ZKQ(e)->qop == ZKQI_RELEASE_CLUSTER && ZKQ(e)->fxid == GetSystemIdentifier() &&
		 (zk_q_resolve_running || !zk_history_ready())))
	{
		/* a run of this cluster: not during a settling pass (one survey) */
		zk_retry_later(e);
		return;
	}
	if (ZKQ(e)->qop == ZKQI_DROP)
	{
		drop_start(e);
		return;
	}
	if (ZKQ(e)->qop == ZKQI_SET_POLICY)
	{
		zk_q_policy_set_start(e);
		return;
	}
	if (ZKQ(e)->qop == ZKQI_MOVE)
	{
		zk_q_move_start(e);
		return;
	}
	in = MemoryContextAllocZero(zk_q_context(), sizeof(Info));
	in->idx = zk_entry_index(e);
	in->gen = e->gen;
	in->op = ZKQ(e)->qop;
	if (in->op == ZKQI_PEEK || in->op == ZKQI_QUEUES)
		in->cap = (Size) ZKQ(e)->fxid;	/* the backend's zklock.max_answer_bytes */
	if (in->op == ZKQI_QUEUES)
		snprintf(in->qpath, sizeof(in->qpath), "%s/queues", zk_root);	/* the name: its namespace */
	else if (e->name[0])
		zk_queue_path(e->name, in->qpath, sizeof(in->qpath));
	e->state = ZKE_CREATING;
	e->errors = 0;
	e->outstanding = 1;			/* until info_finish */
	info_step(in);
}

/* A one-off read could not be sent: fail it (or free it when let go) */
void
zk_qinfo_drive_failed(ZkEntry *e)
{
	if (e->released && e->outstanding == 0)
		zk_q_free_entry(e);
	else if (e->outstanding == 0)
	{
		e->state = ZKE_DONE;
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "the queue request failed in the zklock worker");
	}
}

/* The session ended under a one-off read: fail it with why */
void
zk_qinfo_session_lost(ZkEntry *e, const char *why)
{
	/* the completions were called with the session's end: nothing waits */
	e->outstanding = 0;
	if (e->released)
		zk_q_free_entry(e);
	else if (e->state != ZKE_HELD && e->outcome == ZKO_NONE)
	{
		e->state = ZKE_DONE;
		zk_fail(e, ERRCODE_CONNECTION_FAILURE, why);
	}
}
