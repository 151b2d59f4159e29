/*-------------------------------------------------------------------------
 *
 * queue_delay.c
 *	  Delayed items (doc/queues.md, "Delayed items").
 *
 *	  zk_enqueue(..., delay | not_before) publishes an item at COMMIT, as
 *	  any item, but under <queue>/delayed instead of entries, named
 *	  due-<Unix ms, 13 digits>-PPP-<seq> (queue_publish.c): kazoo and
 *	  zklock's claims look only at entries, so nobody can take it early,
 *	  and the listing of delayed says when each item is due without reading
 *	  any.  Once due, an item is moved into entries by one multi: delete
 *	  delayed/<name> (at the version read) and create
 *	  entries/entry-PPP-<seq> with the same data.  Atomic, so exactly once
 *	  whoever moves it and whenever: every worker that serves dequeues from
 *	  the queue moves due items, so no one cluster has to stay up, and a
 *	  second mover's multi (or a late one of an ended session) finds the
 *	  node gone and changes nothing.  The moved item is an ordinary item,
 *	  published at the move (its enqueued_at), behind the items of its
 *	  priority already there; the entries watch of the waiting consumers
 *	  wakes them, nobody polls ZooKeeper.
 *
 *	  The worker of a queue it serves (QState) lists delayed with a watch in
 *	  the round that reads the policy, and again whenever the watch fires
 *	  or its earliest item becomes due (zk_q_delay_tick, every usable turn
 *	  of the worker, whose wait ends when the earliest item falls due:
 *	  zk_worker_wake_by).  At most
 *	  ZKQ_DELAY_MOVES_MAX moves (a read and a multi each) are in flight per
 *	  queue; the rest go once they are done.
 *
 *	  Clocks: an item is due when the clock of the server that moves it
 *	  reaches the time computed by the server that enqueued it: a server
 *	  whose clock is ahead of the producer's by s moves items up to s early,
 *	  one behind up to s late.  zklock assumes the servers' clocks are kept
 *	  within a second or so (NTP), as leases do.
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"

#include "utils/memutils.h"

#define ZKQ_DELAY_MOVES_MAX		8	/* moves in flight per queue */
#define ZKQ_DELAY_RETRY_MS		5000	/* a failed listing or move: again */

static ZkLogLimit delay_log;

/* listings sent, by every QState: a QState made again never takes an old one's */
static uint32 delay_seq = 0;

/* the earliest time a QState's delayed items need looking at, or 0 */
static TimestampTz delay_next_at = 0;

typedef struct DelayCall
{
	char		name[ZKLOCK_QNAME_MAX + 1];
	uint32		seq;			/* QState.dseq when sent */
	uint64		session;
	char		node[ZKQ_NODE_MAX + 32];	/* a move: its delayed node */
	char		dpath[ZK_PATH_MAX];
	char		epath[ZK_PATH_MAX];
	char		created[ZK_PATH_MAX];
	char	   *data;
	int			dlen;
	zoo_op_t	ops[2];
	zoo_op_result_t res[2];
} DelayCall;

static void delay_list(QState *q, bool watch);

/* The due time (Unix ms) and priority of a child of delayed, or false */
static bool
delay_parse(const char *name, int64 *due, int *prio)
{
	int			i;

	/* due-<13 digits>-PPP-<seq> */
	if (strncmp(name, "due-", 4) != 0 || strlen(name) < 4 + 13 + 1 + 3 + 2 ||
		name[17] != '-' || name[21] != '-')
		return false;
	*due = 0;
	for (i = 4; i < 17; i++)
	{
		if (name[i] < '0' || name[i] > '9')
			return false;
		*due = *due * 10 + (name[i] - '0');
	}
	*prio = 0;
	for (i = 18; i < 21; i++)
	{
		if (name[i] < '0' || name[i] > '9')
			return false;
		*prio = *prio * 10 + (name[i] - '0');
	}
	return true;
}

/* now, as Unix milliseconds */
static int64
now_ms(void)
{
	TimestampTz now = GetCurrentTimestamp();

	return now / 1000 + ((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000);
}

/* Unix milliseconds as a TimestampTz */
static TimestampTz
ms_to_ts(int64 ms)
{
	return (TimestampTz) ms * 1000 -
		((TimestampTz) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
}

/* q wants its delayed items looked at again at ms (Unix ms) */
static void
delay_again_at(QState *q, int64 ms)
{
	TimestampTz at = ms_to_ts(ms);

	if (q->next_due_ms == 0 || ms < q->next_due_ms)
		q->next_due_ms = ms;
	if (delay_next_at == 0 || at < delay_next_at)
		delay_next_at = at;
}

static DelayCall *
delay_call(QState *q)
{
	DelayCall  *c = MemoryContextAllocZero(zk_q_context(), sizeof(DelayCall));

	strlcpy(c->name, q->name, sizeof(c->name));
	c->seq = q->dseq;
	c->session = zk_cur_session;
	return c;
}

/* A move is over (moved, or not): list again if asked meanwhile */
static void
delay_move_over(DelayCall *c)
{
	QState	   *q = zk_q_state(c->name, false);

	/* (a move of an ended session is not counted any more: zk_q_delay_reset) */
	if (q != NULL && q->dmoving > 0 && c->session == zk_cur_session)
	{
		q->dmoving--;
		if (q->dmoving == 0 && q->dstate == QDELAY_UNKNOWN && zk_session_usable())
			delay_list(q, QWATCH_IS_WANTED(q->dwatch));
		/*
		 * The moves a round's waiters may be waiting for (a try answers
		 * "empty" only once none is out) are over: a round lists again
		 */
		if (q->dmoving == 0 && q->dstate != QDELAY_LISTING && q->waiters != NIL &&
			q->list.pending == 0 && q->inflight == 0)
			zk_q_round_hooks.kick(q);
	}
	zk_call_free(c, c->data);
}

/* Completion of the zoo_amulti sent by delay_read_done() */
static void
delay_moved(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(DelayCall, c, data)
	{
		QState	   *q = zk_q_state(c->name, false);

		if (rc == ZOK)
		{
			if (q != NULL)
			{
				q->dmoved++;
				q->again = true;	/* a new item: list again */
				q->settled = false;
				q->rest_exact = false;
			}
		}
		else if (zk_rc_definite(rc) && c->res[0].err == ZNONODE)
			;					/* moved by someone else */
		else
		{
			/* not moved: looked at again later (the item stays delayed) */
			if (zk_rc_definite(rc) && zk_log_limited(&delay_log, "queue delayed move"))
				ereport(WARNING,
						(errmsg("zklock: cannot move delayed item \"%s\" of queue \"%s\" into the queue",
								c->node, zk_log_name(c->name)),
						 errdetail("ZooKeeper refused it (%s); zklock tries again in %d s.",
								   zerror(c->res[1].err != ZOK && c->res[1].err != ZRUNTIMEINCONSISTENCY ?
										  c->res[1].err : rc),
								   ZKQ_DELAY_RETRY_MS / 1000),
						 errhint("Check the ACL of the queue's nodes (zk_status().acl_problems, zklock.acl_repair).")));
			if (q != NULL)
				delay_again_at(q, now_ms() + ZKQ_DELAY_RETRY_MS);
		}
		delay_move_over(c);
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget sent by delay_move(): the multi that moves it */
static void
delay_read_done(int rc, const char *value, int value_len,
				const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(DelayCall, c, data)
	{
		QState	   *q = zk_q_state(c->name, false);
		int64		due;
		int			prio;

		if (rc != ZOK || stat == NULL || q == NULL || c->session != zk_cur_session ||
			!delay_parse(c->node, &due, &prio))
		{
			if (rc != ZOK && rc != ZNONODE && q != NULL)
				delay_again_at(q, now_ms() + ZKQ_DELAY_RETRY_MS);
			delay_move_over(c);
		}
		else
		{
			c->dlen = Max(value_len, 0);
			c->data = MemoryContextAlloc(zk_q_context(), Max(c->dlen, 1));
			if (c->dlen > 0)
				memcpy(c->data, value, c->dlen);
			snprintf(c->epath, sizeof(c->epath), "%s/entries/entry-%03d-", q->path, prio);
			zoo_delete_op_init(&c->ops[0], c->dpath, stat->version);
			zoo_create_op_init(&c->ops[1], c->epath, c->data, c->dlen,
							   zk_acl_path(c->epath), ZOO_PERSISTENT_SEQUENTIAL,
							   c->created, sizeof(c->created));
			if (zoo_amulti(zk_zh, 2, c->ops, c->res, delay_moved, c) != ZOK)
				delay_move_over(c);
		}
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/* Move the due item node (a child of q's delayed) into entries */
static void
delay_move(QState *q, const char *node)
{
	DelayCall  *c = delay_call(q);

	strlcpy(c->node, node, sizeof(c->node));
	snprintf(c->dpath, sizeof(c->dpath), "%s/delayed/%s", q->path, node);
	if (zoo_aget(zk_zh, c->dpath, 0, delay_read_done, c) != ZOK)
	{
		pfree(c);
		return;
	}
	q->dmoving++;
}

/* ---- holds (zk_retry_later: queue_claim.c, "Backoff") ---- */

/* The due time and item node of a hold's index hold-<13 digits>-<node> */
static bool
hold_parse(const char *name, int64 *due, const char **node)
{
	int			i;

	if (strncmp(name, "hold-", 5) != 0 || strlen(name) < 5 + 13 + 2 || name[18] != '-')
		return false;
	*due = 0;
	for (i = 5; i < 18; i++)
	{
		if (name[i] < '0' || name[i] > '9')
			return false;
		*due = *due * 10 + (name[i] - '0');
	}
	*node = name + 19;
	return strlen(*node) < ZKQ_NODE_MAX && strchr(*node, '/') == NULL;
}

/* Completion of the zoo_amulti or zoo_adelete sent by hold_read_done() */
static void
hold_ended(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(DelayCall, c, data)
	{
		QState	   *q = zk_q_state(c->name, false);

		if (q != NULL && rc == ZOK && c->dlen == 1)
		{
			/* the item is back: list again, and the waiters may take it */
			q->dmoved++;
			q->again = true;
			q->settled = false;
			q->rest_exact = false;
		}
		else if (q != NULL && rc != ZOK && rc != ZNONODE)
		{
			if (zk_rc_definite(rc) && zk_log_limited(&delay_log, "queue hold end"))
				ereport(WARNING,
						(errmsg("zklock: cannot end the hold \"%s\" of queue \"%s\"",
								c->node, zk_log_name(c->name)),
						 errdetail("ZooKeeper refused it (%s); zklock tries again in %d s.",
								   zerror(rc), ZKQ_DELAY_RETRY_MS / 1000),
						 errhint("Check the ACL of the queue's nodes (zk_status().acl_problems, zklock.acl_repair).")));
			delay_again_at(q, now_ms() + ZKQ_DELAY_RETRY_MS);
		}
		delay_move_over(c);
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/*
 * Completion of the zoo_aget sent by hold_end(): the claim the index
 * names.  Still the hold this index made: one multi deletes both (the
 * claim at the version read: a new claim of the item is not touched).
 * Gone, or not that hold (nothing else writes one; another client's node):
 * the index alone goes, which can lose nothing.
 */
static void
hold_read_done(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(DelayCall, c, data)
	{
		QState	   *q = zk_q_state(c->name, false);
		char		index[ZKQ_NODE_MAX + 32];
		char		flag[8];
		int			arc = ZOK;

		if (q == NULL || c->session != zk_cur_session || (rc != ZOK && rc != ZNONODE))
		{
			if (q != NULL && rc != ZOK && rc != ZNONODE)
				delay_again_at(q, now_ms() + ZKQ_DELAY_RETRY_MS);
			delay_move_over(c);
		}
		else
		{
			if (rc == ZOK && stat != NULL && value != NULL && value_len > 0 &&
				zk_json_field(value, value_len, "zklock_hold", flag, sizeof(flag)) &&
				strcmp(flag, "1") == 0 &&
				zk_json_field(value, value_len, "index", index, sizeof(index)) &&
				strcmp(index, c->node) == 0)
			{
				c->dlen = 1;	/* the item comes back */
				zoo_delete_op_init(&c->ops[0], c->dpath, -1);
				zoo_delete_op_init(&c->ops[1], c->epath, stat->version);
				arc = zoo_amulti(zk_zh, 2, c->ops, c->res, hold_ended, c);
			}
			else
				arc = zoo_adelete(zk_zh, c->dpath, -1, hold_ended, c);
			if (arc != ZOK)
				delay_move_over(c);
		}
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/* End the due hold whose index is name (a child of q's delayed) */
static void
hold_end(QState *q, const char *name, const char *node)
{
	DelayCall  *c = delay_call(q);

	strlcpy(c->node, name, sizeof(c->node));
	snprintf(c->dpath, sizeof(c->dpath), "%s/delayed/%s", q->path, name);
	snprintf(c->epath, sizeof(c->epath), "%s/taken/%s", q->path, node);
	if (zoo_aget(zk_zh, c->epath, 0, hold_read_done, c) != ZOK)
	{
		pfree(c);
		return;
	}
	q->dmoving++;
}

/* ------------------------------------------------------------------------
 * Message groups (doc/queues.md, "Message groups")
 *
 * zk_enqueue_grouped publishes an item at COMMIT under <queue>/delayed, as
 * grp-<group>~PPP-<seq> (queue_publish.c; the group encoded as a name, in
 * which '~' never appears): kazoo and zklock's claims look only at
 * entries.  The number is delayed's sequence counter, so the items of one
 * group are in the order they were published.  At most one item of a
 * group is in entries at a time; the group's state node gst-<group> (beside
 * them) names it: {"zklock_group":1,"inflight":"<its name in entries>"}.
 *
 * The worker of a queue it serves promotes groups in the round that lists
 * delayed.  For a group with waiting items: its state node is read (none:
 * nothing in flight); the item it names, when it names one, is looked at
 * in entries (a children read with a watch, which sets no watch when the
 * node is gone and fires when it goes); once it is gone (consumed,
 * dead-lettered, moved, purged), the group's first waiting item is read
 * and one multi moves it: set the state node at the version read (or create
 * it) to name the new item, delete the waiting node at the version read,
 * create entries/entry-PPP-<C>g<seq>, C entries' child version read just
 * before (so the item takes its place among the items published by then),
 * seq its number under delayed (no other item has it).  The name is fixed
 * before the multi, so a multi whose answer is lost is known by the state
 * node alone: whoever reads it next sees the name.  Two promoters of one
 * group conflict on the state node's version; a waiting node listed by a
 * stale listing is gone (the multi fails, nothing changes).  A state node
 * whose item is gone and whose group has nothing waiting is deleted at the
 * version read.  A state node that is not zklock's (another client's data)
 * stops its group: nothing of it is handed out, said in a WARNING.
 *
 * What this worker found in flight and watched is remembered (GroupSeen,
 * at most ZKQ_GROUP_SEEN_MAX), so a listing does not read every group
 * again: only groups whose item left (the watch fired) or that are new.
 * Promotions count among the queue's moves in flight (dmoving), at most
 * ZKQ_DELAY_MOVES_MAX.
 * ------------------------------------------------------------------------
 */
#define ZKQ_GROUP_SEEN_MAX		4096
#define ZKQ_GROUP_NODE_MAX		(4 + ZKQ_GROUP_ENC_MAX + 16 + 1)

typedef struct GroupSeen
{
	char		key[ZK_PATH_MAX];	/* <queue path>/gst-<group> */
	char		inflight[ZKQ_NODE_MAX];	/* its item in entries, watched */
} GroupSeen;

static HTAB *group_seen = NULL;

typedef struct GroupCall
{
	char		name[ZKLOCK_QNAME_MAX + 1];
	uint32		seq;
	uint64		session;
	char		group[ZKQ_GROUP_ENC_MAX + 1];
	char		head[ZKQ_GROUP_NODE_MAX];	/* its first waiting item, or "" */
	int			prio;
	int64		hseq;
	bool		has_state;
	int32		sversion;
	int32		hversion;
	char		inflight[ZKQ_NODE_MAX];
	char		entry[ZKQ_NODE_MAX];	/* the name it gets in entries */
	char		spath[ZK_PATH_MAX];
	char		hpath[ZK_PATH_MAX];
	char		epath[ZK_PATH_MAX];
	char		sdata[ZKQ_NODE_MAX + 64];
	char	   *data;
	int			dlen;
	zoo_op_t	ops[3];
	zoo_op_result_t res[3];
} GroupCall;

static ZkLogLimit group_log;

/* The group and the number of a waiting item grp-<group>~PPP-<seq> */
static bool
group_item_parse(const char *name, char *group, size_t glen, int *prio, int64 *seq)
{
	size_t		len = strlen(name);
	const char *t;
	int			i;

	/* ~PPP-<10 digits> at the end */
	if (strncmp(name, "grp-", 4) != 0 || len < 4 + 1 + 15 || len >= ZKQ_GROUP_NODE_MAX)
		return false;
	t = name + len - 15;
	if (t[0] != '~' || t[4] != '-' || memchr(name + 4, '~', t - (name + 4)) != NULL)
		return false;
	*prio = 0;
	for (i = 1; i < 4; i++)
	{
		if (t[i] < '0' || t[i] > '9')
			return false;
		*prio = *prio * 10 + (t[i] - '0');
	}
	*seq = 0;
	for (i = 5; i < 15; i++)
	{
		if (t[i] < '0' || t[i] > '9')
			return false;
		*seq = *seq * 10 + (t[i] - '0');
	}
	if ((size_t) (t - (name + 4)) >= glen || t - (name + 4) > ZKQ_GROUP_ENC_MAX)
		return false;
	memcpy(group, name + 4, t - (name + 4));
	group[t - (name + 4)] = '\0';
	return true;
}

/* The group of a state node gst-<group> */
static bool
group_state_parse(const char *name, char *group, size_t glen)
{
	size_t		len = strlen(name);

	if (strncmp(name, "gst-", 4) != 0 || len <= 4 || len - 4 >= glen ||
		len - 4 > ZKQ_GROUP_ENC_MAX || strchr(name + 4, '~') != NULL)
		return false;
	strlcpy(group, name + 4, glen);
	return true;
}

static GroupSeen *
group_seen_find(const char *qpath, const char *group, bool create)
{
	char		key[ZK_PATH_MAX];
	bool		found;

	if (group_seen == NULL)
	{
		HASHCTL		ctl;

		if (!create)
			return NULL;
		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = ZK_PATH_MAX;
		ctl.entrysize = sizeof(GroupSeen);
		ctl.hcxt = zk_q_context();
		group_seen = hash_create("zklock message groups in flight", 64, &ctl,
								 HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	memset(key, 0, sizeof(key));
	snprintf(key, sizeof(key), "%s/gst-%s", qpath, group);
	if (create && hash_get_num_entries(group_seen) >= ZKQ_GROUP_SEEN_MAX)
		create = false;
	return hash_search(group_seen, key, create ? HASH_ENTER : HASH_FIND, &found);
}

static void
group_seen_forget(const char *qpath, const char *group)
{
	char		key[ZK_PATH_MAX];

	if (group_seen == NULL)
		return;
	memset(key, 0, sizeof(key));
	snprintf(key, sizeof(key), "%s/gst-%s", qpath, group);
	(void) hash_search(group_seen, key, HASH_REMOVE, NULL);
}

static void group_over(GroupCall *c);
static void group_inflight_read(int rc, const struct String_vector *sv, const void *data);

/* The entry a group had in flight left (or changed): look at the queue again */
static void
group_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	char		qpath[ZK_PATH_MAX];
	char	   *slash;
	const char *node;
	HASH_SEQ_STATUS st;
	QState	   *q;
	GroupSeen  *g;
	bool		served = false;

	ZkEntry    *volatile none = NULL;

	if ((type != ZOO_CHILD_EVENT && type != ZOO_DELETED_EVENT) || path == NULL)
		return;
	strlcpy(qpath, path, sizeof(qpath));
	slash = strrchr(qpath, '/');
	if (slash == NULL)
		return;
	node = path + (slash - qpath) + 1;
	*slash = '\0';
	slash = strrchr(qpath, '/');
	if (slash == NULL || strcmp(slash, "/entries") != 0)
		return;
	*slash = '\0';
	COMPLETION_BEGIN
	{
		zk_count(ZKCNT_WATCH_EVENTS, 1);
		if (group_seen != NULL)
		{
			size_t		ql = strlen(qpath);

			hash_seq_init(&st, group_seen);
			while ((g = hash_seq_search(&st)) != NULL)
				if (strcmp(g->inflight, node) == 0 && strncmp(g->key, qpath, ql) == 0 &&
					g->key[ql] == '/')
					(void) hash_search(group_seen, g->key, HASH_REMOVE, NULL);
		}
		if (zk_qstates != NULL)
		{
			hash_seq_init(&st, zk_qstates);
			while ((q = hash_seq_search(&st)) != NULL)
			{
				if (strcmp(q->path, qpath) != 0)
					continue;
				served = true;
				q->gstirred = true;
				if (q->dstate != QDELAY_LISTING)
					q->dstate = QDELAY_UNKNOWN;
				if (q->dmoving == 0 && zk_session_usable())
					delay_list(q, QWATCH_IS_WANTED(q->dwatch));
			}
		}
		if (!served && zk_session_usable())
		{
			/*
			 * Nobody here serves the queue any more (its consumers went, or
			 * only kazoo's consume): serve it again for the group's next
			 * item, so that kazoo consumers alone keep its groups going
			 * (forgotten again once idle)
			 */
			char		prefix[ZK_PATH_MAX];
			char		qname[ZKLOCK_QNAME_MAX + 1];
			char		check[ZK_PATH_MAX];
			size_t		pl;

			snprintf(prefix, sizeof(prefix), "%s/queues/", zk_root);
			pl = strlen(prefix);
			if (strncmp(qpath, prefix, pl) == 0 && strchr(qpath + pl, '/') == NULL &&
				zk_decode_qname(qpath + pl, qname, sizeof(qname)) > 0)
			{
				zk_queue_path(qname, check, sizeof(check));
				if (strcmp(check, qpath) == 0 && (q = zk_q_state(qname, true)) != NULL)
				{
					q->gstirred = true;
					if (q->dstate != QDELAY_LISTING)
						q->dstate = QDELAY_UNKNOWN;
					if (q->dmoving == 0)
						delay_list(q, QWATCH_IS_WANTED(q->dwatch));
				}
			}
		}
	}
	NONE_COMPLETION_END;
}

/* A promotion is over (done, or not): as a delayed move's (delay_move_over) */
static void
group_over(GroupCall *c)
{
	DelayCall  *d = MemoryContextAllocZero(zk_q_context(), sizeof(DelayCall));

	strlcpy(d->name, c->name, sizeof(d->name));
	d->seq = c->seq;
	d->session = c->session;
	zk_call_free(c, c->data);
	delay_move_over(d);
}

/* c failed for a while: its queue is looked at again later */
static void
group_later(GroupCall *c)
{
	QState	   *q = zk_q_state(c->name, false);

	if (q != NULL && c->session == zk_cur_session)
		delay_again_at(q, now_ms() + ZKQ_DELAY_RETRY_MS);
}

/* Completion of the zoo_amulti sent by group_entries_read() */
static void
group_promoted(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(GroupCall, c, data)
	{
		QState	   *q = zk_q_state(c->name, false);

		if (rc == ZOK)
		{
			if (q != NULL)
			{
				q->dmoved++;
				q->again = true;
				q->settled = false;
				q->rest_exact = false;
				q->gstirred = true;
			}
			/*
			 * Watch the item let in at once (as a listing would): its going
			 * lets the next one in, also where this server no longer serves
			 * the queue by then (group_watcher), so kazoo consumers alone
			 * keep the group going.  Gone already: the state node, at the
			 * version the multi left, goes unless the group moved on.
			 */
			if (q != NULL && c->session == zk_cur_session && zk_session_usable())
			{
				strlcpy(c->inflight, c->entry, sizeof(c->inflight));
				c->sversion = c->has_state ? c->sversion + 1 : 0;
				c->has_state = true;
				c->head[0] = '\0';
				if (zoo_awget_children(zk_zh, c->epath, group_watcher, NULL,
									   group_inflight_read, c) == ZOK)
					c = NULL;	/* group_inflight_read goes on */
			}
		}
		else if (zk_rc_definite(rc) &&
				 (c->res[0].err == ZBADVERSION || c->res[0].err == ZNODEEXISTS ||
				  c->res[0].err == ZNONODE || c->res[1].err == ZNONODE ||
				  c->res[1].err == ZBADVERSION))
			;					/* another worker moved the group on first */
		else
		{
			if (zk_rc_definite(rc) && zk_log_limited(&group_log, "queue group promotion"))
				ereport(WARNING,
						(errmsg("zklock: cannot move the next item of group \"%s\" of queue \"%s\" into the queue",
								c->group, zk_log_name(c->name)),
						 errdetail("ZooKeeper refused it (%s); zklock tries again in %d s.",
								   zerror(rc), ZKQ_DELAY_RETRY_MS / 1000),
						 errhint("Check the ACL of the queue's nodes (zk_status().acl_problems, zklock.acl_repair).")));
			group_later(c);
		}
		if (c != NULL)
			group_over(c);
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aexists of entries sent by group_head_read() */
static void
group_entries_read(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(GroupCall, c, data)
	{
		QState	   *q = zk_q_state(c->name, false);
		int			n = 0;
		int			arc;

		if (rc != ZOK || stat == NULL || q == NULL || c->session != zk_cur_session)
		{
			if (rc != ZOK)
				group_later(c);
			group_over(c);
		}
		else
		{
			snprintf(c->entry, sizeof(c->entry), "entry-%03d-%010u" "g" "%010" PRId64,
					 c->prio, (uint32) stat->cversion, c->hseq);
			snprintf(c->epath, sizeof(c->epath), "%s/entries/%s", q->path, c->entry);
			snprintf(c->sdata, sizeof(c->sdata), "{\"zklock_group\":1,\"inflight\":\"%s\"}",
					 c->entry);
			if (c->has_state)
				zoo_set_op_init(&c->ops[n++], c->spath, c->sdata, (int) strlen(c->sdata),
								c->sversion, NULL);
			else
				zoo_create_op_init(&c->ops[n++], c->spath, c->sdata, (int) strlen(c->sdata),
								   zk_acl_path(c->spath), 0, NULL, 0);
			zoo_delete_op_init(&c->ops[n++], c->hpath, c->hversion);
			zoo_create_op_init(&c->ops[n++], c->epath, c->data, c->dlen,
							   zk_acl_path(c->epath), 0, NULL, 0);
			arc = zoo_amulti(zk_zh, n, c->ops, c->res, group_promoted, c);
			if (arc != ZOK)
				group_over(c);
		}
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget of the group's first waiting item */
static void
group_head_read(int rc, const char *value, int value_len,
				const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(GroupCall, c, data)
	{
		QState	   *q = zk_q_state(c->name, false);
		char		path[ZK_PATH_MAX];

		if (rc != ZOK || stat == NULL || q == NULL || c->session != zk_cur_session)
		{
			if (rc != ZOK && rc != ZNONODE)
				group_later(c);
			group_over(c);
		}
		else
		{
			c->hversion = stat->version;
			c->dlen = Max(value_len, 0);
			c->data = MemoryContextAlloc(zk_q_context(), Max(c->dlen, 1));
			if (c->dlen > 0)
				memcpy(c->data, value, c->dlen);
			snprintf(path, sizeof(path), "%s/entries", q->path);
			if (zoo_aexists(zk_zh, path, 0, group_entries_read, c) != ZOK)
				group_over(c);
		}
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_adelete of a state node with nothing left */
static void
group_state_deleted(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(GroupCall, c, data)
	{
		if (rc != ZOK && rc != ZNONODE && rc != ZBADVERSION && rc != ZNOTEMPTY)
			group_later(c);
		group_over(c);
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/* Nothing of the group is in entries: move its first item in, or clean up */
static void
group_next(GroupCall *c)
{
	int			arc;

	if (c->head[0] != '\0')
		arc = zoo_aget(zk_zh, c->hpath, 0, group_head_read, c);
	else if (c->has_state)
		arc = zoo_adelete(zk_zh, c->spath, c->sversion, group_state_deleted, c);
	else
	{
		group_over(c);
		return;
	}
	if (arc != ZOK)
		group_over(c);
}

/* Completion of the zoo_awget_children of the item a group has in flight */
static void
group_inflight_read(int rc, const struct String_vector *sv, const void *data)
{
	DATA_COMPLETION_BEGIN(GroupCall, c, data)
	{
		QState	   *q = zk_q_state(c->name, false);

		if (q == NULL || c->session != zk_cur_session)
			group_over(c);
		else if (rc == ZOK)
		{
			/* still there (watched): nothing to do until it goes */
			GroupSeen  *g = group_seen_find(q->path, c->group, true);

			if (g != NULL)
				strlcpy(g->inflight, c->inflight, sizeof(g->inflight));
			group_over(c);
		}
		else if (rc == ZNONODE)
			group_next(c);
		else
		{
			group_later(c);
			group_over(c);
		}
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget of a group's state node */
static void
group_state_read(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(GroupCall, c, data)
	{
		QState	   *q = zk_q_state(c->name, false);
		char		flag[8];
		char		inflight[ZKQ_NODE_MAX * 2];
		int			prio;

		if (q == NULL || c->session != zk_cur_session)
			group_over(c);
		else if (rc == ZNONODE)
		{
			c->has_state = false;
			group_next(c);
		}
		else if (rc != ZOK || stat == NULL)
		{
			group_later(c);
			group_over(c);
		}
		else if (value == NULL || value_len <= 0 || value_len > (int) sizeof(c->sdata) ||
				 !zk_json_field(value, value_len, "zklock_group", flag, sizeof(flag)) ||
				 strcmp(flag, "1") != 0 ||
				 (zk_json_field(value, value_len, "inflight", inflight, sizeof(inflight)) &&
				  (strlen(inflight) >= ZKQ_NODE_MAX ||
				   !zk_queue_node_priority(inflight, &prio))))
		{
			/* not zklock's: nothing of the group goes out */
			if (zk_log_limited(&group_log, "queue group state"))
				ereport(WARNING,
						(errmsg("zklock: the state node of group \"%s\" of queue \"%s\" is not zklock's; the group's items are not handed out",
								c->group, zk_log_name(c->name)),
						 errdetail("%s holds data zklock did not write.", c->spath),
						 errhint("Find out who wrote it; once it is deleted (and the group's item in the queue is consumed), zklock goes on with the group.")));
			group_later(c);
			group_over(c);
		}
		else
		{
			int			arc;

			c->has_state = true;
			c->sversion = stat->version;
			c->inflight[0] = '\0';
			if (zk_json_field(value, value_len, "inflight", inflight, sizeof(inflight)))
				strlcpy(c->inflight, inflight, sizeof(c->inflight));
			if (c->inflight[0] == '\0')
			{
				group_next(c);
				c = NULL;
			}
			else
			{
				snprintf(c->epath, sizeof(c->epath), "%s/entries/%s", q->path, c->inflight);
				arc = zoo_awget_children(zk_zh, c->epath, group_watcher, NULL,
										 group_inflight_read, c);
				if (arc != ZOK)
					group_over(c);
			}
		}
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/*
 * Look at group of q: head its first waiting item (a child of delayed) or
 * "", has_state whether the listing showed its state node
 */
static void
group_start(QState *q, const char *group, const char *head, int prio, int64 hseq,
			bool has_state)
{
	GroupCall  *c = MemoryContextAllocZero(zk_q_context(), sizeof(GroupCall));
	int			arc;

	strlcpy(c->name, q->name, sizeof(c->name));
	c->seq = q->dseq;
	c->session = zk_cur_session;
	strlcpy(c->group, group, sizeof(c->group));
	strlcpy(c->head, head, sizeof(c->head));
	c->prio = prio;
	c->hseq = hseq;
	c->has_state = has_state;
	snprintf(c->spath, sizeof(c->spath), "%s/delayed/gst-%s", q->path, group);
	snprintf(c->hpath, sizeof(c->hpath), "%s/delayed/%s", q->path, head);
	q->dmoving++;
	if (has_state)
		arc = zoo_aget(zk_zh, c->spath, 0, group_state_read, c);
	else
	{
		group_next(c);
		return;
	}
	if (arc != ZOK)
		group_over(c);
}

typedef struct GroupName
{
	const char *name;			/* the child of delayed */
	char		group[ZKQ_GROUP_ENC_MAX + 1];
	int			prio;
	int64		seq;			/* -1: the state node */
} GroupName;

static int
group_name_cmp(const void *a, const void *b)
{
	const GroupName *x = a;
	const GroupName *y = b;
	int			r = strcmp(x->group, y->group);

	if (r != 0)
		return r;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

/*
 * The groups of a listing of q's delayed (names, n of them): each group
 * that may move on is looked at (group_start), within q's moves in flight
 */
static void
group_listed(QState *q, char **names, int n)
{
	GroupName  *g = palloc(sizeof(GroupName) * Max(n, 1));
	int			k = 0;
	int			i;
	int			start;

	for (i = 0; i < n; i++)
	{
		if (group_item_parse(names[i], g[k].group, sizeof(g[k].group), &g[k].prio, &g[k].seq))
			g[k++].name = names[i];
		else if (group_state_parse(names[i], g[k].group, sizeof(g[k].group)))
		{
			g[k].seq = -1;
			g[k].prio = 0;
			g[k++].name = names[i];
		}
	}
	if (k == 0)
	{
		pfree(g);
		return;
	}
	/* by group, the state node first, then the waiting items in order */
	qsort(g, k, sizeof(GroupName), group_name_cmp);

	/*
	 * The groups from the one the last look stopped at (q->gresume) to the
	 * last.  Always from the first, a look stopped by the moves in flight
	 * would start the same groups again and again: groups that never become
	 * "seen" (another client's state node, a promotion refused, more groups
	 * in flight than ZKQ_GROUP_SEEN_MAX) would keep every group after them
	 * waiting for good, the listing going round and round.  A look that
	 * reaches the last group ends the round; once anything changed during a
	 * round of several looks (gstirred: a watch fired, a promotion landed),
	 * the groups before where its last look started may have moved on
	 * unseen, so another round follows at once.
	 */
	for (start = 0; start < k && strcmp(g[start].group, q->gresume) < 0; start++)
		;
	if (start == 0 || start == k)
	{
		start = 0;
		q->gstirred = false;	/* a round from the first */
	}
	for (i = start; i < k;)
	{
		int			j = i;
		bool		has_state = false;
		const GroupName *head = NULL;
		GroupSeen  *seen;

		while (j < k && strcmp(g[j].group, g[i].group) == 0)
		{
			if (g[j].seq < 0)
				has_state = true;
			else if (head == NULL)
				head = &g[j];
			j++;
		}
		seen = has_state ? group_seen_find(q->path, g[i].group, false) : NULL;
		if (seen != NULL && seen->inflight[0] != '\0')
			;					/* in flight and watched: its watch says when */
		else if (q->dmoving >= ZKQ_DELAY_MOVES_MAX)
		{
			/* the rest after these, from this group on */
			q->dstate = QDELAY_UNKNOWN;
			strlcpy(q->gresume, g[i].group, sizeof(q->gresume));
			break;
		}
		else
		{
			if (!has_state)
				group_seen_forget(q->path, g[i].group);
			group_start(q, g[i].group, head != NULL ? head->name : "",
						head != NULL ? head->prio : 0, head != NULL ? head->seq : 0,
						has_state);
		}
		i = j;
	}
	if (i >= k)
	{
		/* the round is over */
		q->gresume[0] = '\0';
		if (start > 0 && q->gstirred)
		{
			/* listed again once the moves are over, or at the next turn */
			q->dstate = QDELAY_UNKNOWN;
			if (q->dmoving == 0)
				delay_again_at(q, now_ms());
		}
	}
	pfree(g);
}

/* Completion of the zoo_awget_children sent by delay_list() */
static void
delay_listed(int rc, const struct String_vector *sv, const void *data)
{
	DATA_COMPLETION_BEGIN(DelayCall, c, data)
	{
		QState	   *q = zk_q_state(c->name, false);

		if (q != NULL && q->dstate == QDELAY_LISTING && q->dseq == c->seq &&
			c->session == zk_cur_session)
		{
			int64		now = now_ms();
			int			i;

			q->dstate = QDELAY_KNOWN;
			q->next_due_ms = 0;
			q->ndelayed = (rc == ZOK && sv != NULL) ? sv->count : 0;
			if (rc == ZNONODE)
			{
				/* no delayed node yet (no watch either): look again later */
				q->dwatch = qwatch_gone(q->dwatch);
				delay_again_at(q, now + ZKQ_DELAY_RETRY_MS);
			}
			else if (rc != ZOK || sv == NULL)
			{
				/* not set by a failed listing */
				q->dwatch = qwatch_gone(q->dwatch);
				q->dstate = QDELAY_UNKNOWN;
				delay_again_at(q, now + ZKQ_DELAY_RETRY_MS);
			}
			else
			{
				/*
				 * In name order (due time, priority, then the order they
				 * were published in): ZooKeeper lists children in no
				 * order, and the moves create the items in the order sent
				 */
				char	  **names = palloc(sizeof(char *) * Max(sv->count, 1));

				for (i = 0; i < sv->count; i++)
					names[i] = sv->data[i];
				qsort(names, sv->count, sizeof(char *), zk_q_cmp_names);
				for (i = 0; i < sv->count; i++)
				{
					int64		due;
					int			prio;
					const char *node = NULL;
					bool		hold = false;

					if (hold_parse(names[i], &due, &node))
						hold = true;
					else if (!delay_parse(names[i], &due, &prio))
						continue;	/* another client's: not ours */
					if (due > now)
						delay_again_at(q, due);
					else if (q->dmoving >= ZKQ_DELAY_MOVES_MAX)
						q->dstate = QDELAY_UNKNOWN;	/* the rest after these */
					else if (hold)
						hold_end(q, names[i], node);
					else
						delay_move(q, names[i]);
				}
				/* the message groups that may move on */
				group_listed(q, names, sv->count);
				pfree(names);
			}
			/* nothing to move: a try that waited for this listing goes on */
			if (q->dmoving == 0 && q->waiters != NIL && q->list.pending == 0 &&
				q->inflight == 0)
				zk_q_round_hooks.kick(q);
		}
		pfree(c);
		c = NULL;
	}
	NONE_COMPLETION_END;
}

/* The delayed node of some queue changed: list it again */
static void
delay_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	char		qpath[ZK_PATH_MAX];
	char	   *slash;
	HASH_SEQ_STATUS st;
	QState	   *q;

	ZkEntry    *volatile none = NULL;

	if ((type != ZOO_CHILD_EVENT && type != ZOO_DELETED_EVENT) || path == NULL ||
		zk_qstates == NULL)
		return;
	strlcpy(qpath, path, sizeof(qpath));
	slash = strrchr(qpath, '/');
	if (slash == NULL || strcmp(slash, "/delayed") != 0)
		return;
	*slash = '\0';
	COMPLETION_BEGIN
	{
		zk_count(ZKCNT_WATCH_EVENTS, 1);
		hash_seq_init(&st, zk_qstates);
		while ((q = hash_seq_search(&st)) != NULL)
		{
			if (strcmp(q->path, qpath) != 0)
				continue;
			q->dwatch = qwatch_gone(q->dwatch);
			q->gstirred = true;
			if (q->dstate != QDELAY_LISTING)
				q->dstate = QDELAY_UNKNOWN;
			if (q->dmoving == 0 && zk_session_usable())
				delay_list(q, QWATCH_IS_WANTED(q->dwatch));
		}
	}
	NONE_COMPLETION_END;
}

/* List q's delayed node; with watch, keep a watch on it (unless one is set) */
static void
delay_list(QState *q, bool watch)
{
	char		path[ZK_PATH_MAX];
	DelayCall  *c;
	int			rc;

	if (q->dstate == QDELAY_LISTING)
		return;
	q->dseq = ++delay_seq;
	c = delay_call(q);
	snprintf(path, sizeof(path), "%s/delayed", q->path);
	watch = watch && !QWATCH_IS_SET(q->dwatch);
	if (!watch)
		rc = zoo_aget_children(zk_zh, path, 0, delay_listed, c);
	else
		rc = zoo_awget_children(zk_zh, path, delay_watcher, NULL, delay_listed, c);
	if (rc != ZOK)
	{
		pfree(c);
		q->dstate = QDELAY_UNKNOWN;
		return;
	}
	if (watch)
	{
		Assert(q->dwatch == QWATCH_WANTED);
		q->dwatch = QWATCH_SET;
	}
	q->dstate = QDELAY_LISTING;
}

/*
 * A round of q starts (queue_consume.c): list its delayed items unless
 * they are known and watched (after the parents' creates and the policy's
 * read); with watch (someone waits for an item) a watch is set: the
 * rounds of a waiting consumer then list them only when they change
 */
void
zk_q_delay_round(QState *q, bool watch)
{
	q->dwatch = qwatch_want(q->dwatch, watch);
	/* known without a watch: as of the last listing only, so list again */
	if (!QWATCH_IS_SET(q->dwatch) && q->dstate == QDELAY_KNOWN)
		q->dstate = QDELAY_UNKNOWN;
	if (q->dstate == QDELAY_UNKNOWN && q->dmoving == 0)
		delay_list(q, watch);
}

/* Every usable turn: the queues whose earliest delayed item is due now */
void
zk_q_delay_tick(void)
{
	HASH_SEQ_STATUS st;
	QState	   *q;
	int64		now;

	if (delay_next_at != 0 && GetCurrentTimestamp() < delay_next_at)
	{
		/* the worker's wait ends when the earliest item falls due */
		zk_worker_wake_by(delay_next_at);
		return;
	}
	if (delay_next_at == 0 || zk_qstates == NULL)
		return;
	delay_next_at = 0;
	now = now_ms();
	hash_seq_init(&st, zk_qstates);
	while ((q = hash_seq_search(&st)) != NULL)
	{
		if (q->next_due_ms == 0)
			continue;
		if (q->next_due_ms > now)
		{
			TimestampTz at = ms_to_ts(q->next_due_ms);

			if (delay_next_at == 0 || at < delay_next_at)
				delay_next_at = at;
			continue;
		}
		q->next_due_ms = 0;
		if (q->dstate != QDELAY_LISTING)
			q->dstate = QDELAY_UNKNOWN;
		if (q->dmoving == 0)
			delay_list(q, QWATCH_IS_WANTED(q->dwatch));
	}
	zk_worker_wake_by(delay_next_at);
}

/* The session ended: every queue's delayed items are listed again */
void
zk_q_delay_reset(QState *q)
{
	q->dstate = QDELAY_UNKNOWN;
	q->dwatch = qwatch_gone(q->dwatch);
	q->dmoving = 0;
	q->dseq = ++delay_seq;
}

/*
 * The session ended: the watches on groups' items in flight went with it.
 * Whatever the queues (q_session_reset): a queue forgotten while idle
 * (zk_q_forget) left its groups here, and a group still "seen" in the next
 * session would be skipped for good, waiting for a watch that is no more.
 */
void
zk_q_groups_reset(void)
{
	if (group_seen != NULL)
	{
		hash_destroy(group_seen);
		group_seen = NULL;
	}
}
