/*-------------------------------------------------------------------------
 *
 * queue_naming.c
 *	  How this cluster names a queue's items once ZooKeeper's sequence
 *	  counter of its entries runs out (QSeqNaming, QSeqNext in
 *	  queue_int.h): the probe of <queue>/next, its reads, the conflicts of
 *	  publishing multis over it, and zk_q_send_publish, which starts every
 *	  publication.
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


static ZkLogLimit seq_switch_log;

/* From now on, this cluster names q's items from its next node (logged) */
static void
seq_switch(QSeq *q, const char *why)
{
	if (q->naming == QSEQ_EXPLICIT)
		return;
	q->naming = QSEQ_EXPLICIT;
	q->next = QNEXT_UNKNOWN;
	{
		char		path[ZK_PATH_MAX];

		zk_q_seq_path(q, "next", path, sizeof(path));
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
	zk_q_naming_fn done;		/* the caller's, once every reply is in */
} SeqFetch;

/*
 * One reply of a seq_fetch is in; after the last, next is known (the larger
 * of next and the listings) and the waiting publications go on
 */
static void
seq_fetch_one_done(SeqFetch *f)
{
	QSeq	   *q;

	if (--f->pending > 0)
		return;
	q = zk_q_seq(f->name);
	q->fetching = false;
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
		q->next = QNEXT_READ;
	}
	f->done(!f->failed);
	pfree(f);
}

/* Completion of the zoo_aget sent by zk_q_seq_fetch() */
static void
seq_get_done(int rc, const char *value, int value_len,
			 const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(SeqFetch, f, data)
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
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget_children sent by zk_q_seq_fetch() */
static void
seq_children_done(int rc, const struct String_vector *sv, const void *data)
{
	DATA_COMPLETION_BEGIN(SeqFetch, f, data)
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
	NONE_COMPLETION_END;
}

/*
 * Read q's next, and list its entries and taken (pipelined); "done", the
 * caller's, runs when the answers are in.  false: nothing could be sent.
 */
bool
zk_q_seq_fetch(QSeq *q, zk_q_naming_fn done)
{
	SeqFetch   *f;
	char		path[ZK_PATH_MAX];
	int			sent = 0;

	if (q->fetching)
		return true;
	f = MemoryContextAllocZero(zk_q_context(), sizeof(SeqFetch));
	strlcpy(f->name, q->name, sizeof(f->name));
	f->max_listed = -1;
	f->done = done;
	f->pending = 3;
	zk_q_seq_path(q, "next", path, sizeof(path));
	if (zoo_aget(zk_zh, path, 0, seq_get_done, f) == ZOK)
		sent++;
	else
		f->failed = true;
	zk_q_seq_path(q, "entries", path, sizeof(path));
	if (zoo_aget_children(zk_zh, path, 0, seq_children_done, f) == ZOK)
		sent++;
	else
		f->failed = true;
	zk_q_seq_path(q, "taken", path, sizeof(path));
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
	q->fetching = true;
	return true;
}

/* What a zk_q_seq_probe() asks about, and whom it answers */
typedef struct SeqProbe
{
	char		name[ZKLOCK_QNAME_MAX + 1];
	zk_q_naming_fn done;
} SeqProbe;

/* Completion of the zoo_aexists sent by zk_q_seq_probe() */
static void
seq_probe_done(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(SeqProbe, p, data)
	{
		QSeq	   *q = zk_q_seq(p->name);
		zk_q_naming_fn done = p->done;

		if (rc == ZOK)
			seq_switch(q, "another cluster names its items itself (its entries' sequence counter is at its end)");
		if (rc == ZNONODE && q->naming == QSEQ_ASKING)
			q->naming = QSEQ_COUNTER;
		else if (rc != ZOK && rc != ZNONODE && q->naming == QSEQ_ASKING)
			q->naming = QSEQ_UNASKED;	/* ask again */
		pfree(p);
		done(rc == ZOK || rc == ZNONODE);
	}
	NONE_COMPLETION_END;
}

/*
 * Does q's next exist?  Asked once per worker (and after a failed ask);
 * "done", the caller's, runs with the answer.
 */
void
zk_q_seq_probe(QSeq *q, zk_q_naming_fn done)
{
	char		path[ZK_PATH_MAX];
	SeqProbe   *p;

	if (q->naming != QSEQ_UNASKED)
		return;
	p = MemoryContextAllocZero(zk_q_context(), sizeof(SeqProbe));
	strlcpy(p->name, q->name, sizeof(p->name));
	p->done = done;
	zk_q_seq_path(q, "next", path, sizeof(path));
	if (zoo_aexists(zk_zh, path, 0, seq_probe_done, p) == ZOK)
		q->naming = QSEQ_ASKING;
	else
		pfree(p);
}

/*
 * After a successful publication: the counters it set, and whether
 * entries' own counter is near its end (or past it: negative names).
 */
void
zk_q_pub_note_names(PubOp *po)
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
			q->next = QNEXT_ADVANCED;
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
bool
zk_q_pub_naming_conflict(PubOp *po)
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
			q->next = QNEXT_UNKNOWN;
			return true;
		}
		if (po->opkind[i] == PUB_NAMED_ITEM && err == ZNODEEXISTS)
		{
			q->next = QNEXT_UNKNOWN;
			return true;
		}
		if (po->opkind[i] == PUB_SEQ_ITEM && err == ZNODEEXISTS)
		{
			seq_switch(q, "zookeeper's sequence counter of its entries has run out");
			q->next = QNEXT_UNKNOWN;
			return true;
		}
		return false;
	}
	return false;
}

/*
 * A queue item's sequential create found its node there: ZooKeeper's
 * counter of the parent has wrapped (it names new children after the last
 * one again).  Returns the parent's path (in po), or NULL.
 */
const char *
zk_q_seq_exhausted(PubOp *po)
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
