/*-------------------------------------------------------------------------
 *
 * queue_move.c
 *	  zk_queue_move (ZKQI_MOVE): a queue's unclaimed items moved into
 *	  another queue, each exactly once.
 *
 * The worker gets the source queue's qualified name in e->name, the
 * destination's in e->data (NUL-terminated) and how many items at most in
 * ZKQ(e)->max_items; it answers with the count in e->token.  Like a drop
 * ("Dropping a queue", queue_read.c) it acts at once, not at COMMIT:
 *
 *	1. Three requests, pipelined: a node of its own under the source's
 *	   queue node (its guard, below) and the child counts of entries and
 *	   taken.  No queue node: nothing to move (0).  More items or claims
 *	   than zklock.max_children: refused with 54000, nothing moved (a
 *	   queue that large is not listed whole; zk_queue_length still counts
 *	   it, and dequeues or a purge take its items).
 *	2. The destination's parents are ensured (creates, answers ignored:
 *	   the session's order makes the moves see them), and the source's
 *	   entries and taken are listed.  The candidates are its items without
 *	   a claim, in queue order, at most max_items.
 *	3. Per candidate, windowed (at most ZKQ_INFO_WINDOW items in flight,
 *	   and at most ZKQ_MOVE_INFLIGHT_BYTES of payload judged by the largest
 *	   item read so far, as a peek): a read of the item, then one multi
 *
 *		check	<from>/<guard>				("Late moves")
 *		create	<from>/taken/<node>			a claim ...
 *		delete	<from>/taken/<node>			... let go at once
 *		delete	<from>/entries/<node>
 *		create	<to>/entries/entry-PPP-		sequential, the same priority
 *
 *	   The claim's create fails when anyone (a dequeue of any cluster,
 *	   kazoo) holds a claim on the item at that instant, the item's delete
 *	   when it is gone: the item is then skipped, not an error.  The multi
 *	   is atomic, so an item is moved at most once, never duplicated,
 *	   never lost; two moves of the same queue at once each move what the
 *	   other did not.  A dead letter (its data begins with the header,
 *	   queue_nodes.c) is moved without it: moving dead letters back gives
 *	   the original payloads.  A plain payload moves as it is, so no
 *	   payload grows.
 *	4. The destination's create refused with ZNONODE (its queue was
 *	   dropped meanwhile): its parents are ensured again and the item
 *	   tried once more.  ZNOAUTH anywhere fails the call with 42501 naming
 *	   the node; a lost answer (connection loss, the session's end) fails
 *	   it with 08006, saying that some items may have moved: each item is
 *	   in exactly one queue either way, and the call can be repeated.
 *	5. The guard is deleted; the count answers.
 *
 * The namespace census (queue_nskept.c, zklock.max_namespace_items): both
 * queues are the caller's, qualified with its namespace, so a move keeps
 * the namespace's count of items as it is: nothing to check or reserve.
 *
 * Late moves.  ZooKeeper applies a request already forwarded to its
 * leader even after the session that sent it ended (how-it-works.md,
 * "Requests of a session that ended"), and a queue dropped and made again
 * names its items from 0 again: a late multi would delete a new item of
 * the old one's name and create the old payload in its place.  So a move
 * first creates an ephemeral node under the source's queue node, named as
 * a purge's ("Late purges" in queue_read.c: purge-<session>-<n>, with n
 * from a range of its own), which each multi checks first.  It goes with
 * the move, the session, or the queue: zk_queue_drop deletes such nodes
 * with the queue, so a late multi fails there and moves nothing.
 *
 * Memory and the entry: a Move and its items live in zk_q_context() and
 * are named by their completions; the entry only by (idx, gen) through
 * zk_q_entry_of, each time, and only while e->outstanding is 1 (the
 * session's end sets it to 0 and answers the entry: zk_qinfo_session_lost).
 * The Move is freed by whoever brings its own count of requests in flight
 * to 0, once; the entry, when let go (released), then too, or by
 * zk_qinfo_drive once nothing is outstanding.
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"

#include "utils/memutils.h"

/* payload bytes in flight, as a peek's (queue_read.c) */
#define ZKQ_MOVE_INFLIGHT_BYTES	(4 * 1024 * 1024)
#define ZKQ_MOVE_FIRST_WINDOW	4

/*
 * The guard's name: a purge's ("Late purges"), which zk_queue_drop knows
 * and deletes with the queue; the numbers from ZKQ_MOVE_GUARD_FIRST on, far
 * above those purges count from 1, so the two never meet in one session.
 */
#define ZKQ_MOVE_GUARD_PREFIX	"purge-"
#define ZKQ_MOVE_GUARD_FIRST	UINT64CONST(3000000000)
#define ZKQ_MOVE_GUARD_LAST		UINT64CONST(4294967295)

static uint64 move_guard_seq = 0;

/* what a move is doing: its requests in flight are of this step */
typedef enum MoveStep
{
	MOVE_COUNT = 0,				/* the guard's create, the two counts */
	MOVE_LIST,					/* the listing */
	MOVE_ITEMS,					/* reads and multis */
	MOVE_UNGUARD				/* the guard's delete */
} MoveStep;

typedef struct Move
{
	uint32		idx;
	uint32		gen;
	MoveStep	step;
	int			inflight;		/* requests of this move out */
	int			items_out;		/* ... of which items (a read or a multi) */
	bool		sending;		/* candidates still to send */
	bool		failed;			/* the first failure: */
	int			fail_sqlstate;
	char		fail_msg[ZKLOCK_ERRMSG_MAX];
	bool		empty;			/* no queue node, or the queue went */
	int64		moved;
	int			max_items;
	char		from[ZK_PATH_MAX];	/* the queue nodes */
	char		to[ZK_PATH_MAX];
	char		guard[ZK_PATH_MAX]; /* created: its path */
	int32		stat_entries;
	int32		stat_taken;
	Listing		list;
	char	  **cand;			/* the candidates (the listing's names) */
	int			ncand;
	int			next;
	Size		largest;		/* the largest item read so far */
	int			ensures;		/* the destination's parents sent again */
} Move;

/* one request of a move: a count, the guard's create or delete, an item */
typedef struct MoveCall
{
	Move	   *mv;
	int			which;			/* counts: 1 entries, 2 taken */
	bool		retried;		/* item: sent again after a ZNONODE */
	int			ensures;		/* ... mv->ensures when its multi went */
	char		node[ZKQ_NODE_MAX];
	char	   *payload;		/* item: what the destination gets */
	Size		plen;
	char		paths[5][ZK_PATH_MAX];
	char		created[ZK_PATH_MAX];
	zoo_op_t	ops[5];
	zoo_op_result_t res[5];
} MoveCall;

#define MOVE_OPS	5

static void move_progress(Move *mv);

/* The move's entry, while the move is still its request; or NULL */
static ZkEntry *
move_entry(Move *mv)
{
	return zk_q_request_of(mv->idx, mv->gen);
}

/* A move fails (the first failure is kept): sqlstate and message */
static void
move_fail(Move *mv, int sqlstate, const char *fmt,...) pg_attribute_printf(3, 4);

static void
move_fail(Move *mv, int sqlstate, const char *fmt,...)
{
	va_list		ap;

	mv->sending = false;
	if (mv->failed)
		return;
	mv->failed = true;
	mv->fail_sqlstate = sqlstate;
	va_start(ap, fmt);
	vsnprintf(mv->fail_msg, sizeof(mv->fail_msg), fmt, ap);
	va_end(ap);
}

/*
 * A request of the move failed with rc, about path: a refusal for want of
 * permission is 42501 naming the node (zk_fail_noauth); an answer lost,
 * 08006 saying what may have happened; a definite refusal, 55000 with
 * what ZooKeeper said.
 */
static void
move_fail_rc(Move *mv, int rc, const char *path, const char *what)
{
	if (rc == ZNOAUTH)
	{
		move_fail(mv, ERRCODE_INSUFFICIENT_PRIVILEGE, "%s", path);
		return;
	}
	if (!zk_rc_definite(rc))
	{
		if (mv->step == MOVE_ITEMS)
			move_fail(mv, ERRCODE_CONNECTION_FAILURE,
					  "ZooKeeper's answer %s was lost (%s) after %lld %s moved: some items may have moved without being counted; each item is in exactly one of the queues either way, so the call can be repeated",
					  what, zerror(rc), (long long) mv->moved,
					  mv->moved == 1 ? "item was" : "items were");
		else
			move_fail(mv, ERRCODE_CONNECTION_FAILURE,
					  "ZooKeeper's answer %s was lost (%s); nothing was moved", what,
					  zerror(rc));
		return;
	}
	/* a definite refusal: ZooKeeper is up, the nodes are not as they must be */
	move_fail(mv, ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
			  "ZooKeeper refused %s (%s) after %lld %s moved", what, zerror(rc),
			  (long long) mv->moved, mv->moved == 1 ? "item was" : "items were");
}

/* Free a move's own memory (never its entry) */
static void
move_free(Move *mv)
{
	zk_q_listing_free(&mv->list);
	if (mv->cand)
		pfree(mv->cand);
	pfree(mv);
}

/* A new request of mv, in zk_q_context() (NULL: out of memory) */
static MoveCall *
move_call(Move *mv, const char *node)
{
	MoveCall   *c = MemoryContextAllocExtended(zk_q_context(), sizeof(MoveCall),
											   MCXT_ALLOC_ZERO | MCXT_ALLOC_NO_OOM);

	if (c == NULL)
	{
		move_fail(mv, ERRCODE_OUT_OF_MEMORY, "out of memory in the zklock worker");
		return NULL;
	}
	c->mv = mv;
	if (node)
		strlcpy(c->node, node, sizeof(c->node));
	return c;
}

/* Free a move's call and the payload it carries */
static void
move_call_free(MoveCall *c)
{
	zk_call_free(c, c->payload);
}

/* How many items may be in flight (a peek's rule) */
static int
move_window(Move *mv)
{
	if (mv->largest == 0)
		return ZKQ_MOVE_FIRST_WINDOW;
	return (int) Max(1, Min(ZKQ_INFO_WINDOW,
							ZKQ_MOVE_INFLIGHT_BYTES / Max(mv->largest, 1024)));
}

/* Answer the move, or free its entry when let go; then free the move */
static void
move_finish(Move *mv)
{
	ZkEntry    *e = move_entry(mv);

	if (e != NULL)
	{
		e->outstanding = 0;
		if (e->released)
			zk_q_free_entry(e);
		else if (mv->failed)
		{
			e->state = ZKE_DONE;
			if (mv->fail_sqlstate == ERRCODE_INSUFFICIENT_PRIVILEGE)
				zk_fail_noauth(e, mv->fail_msg);
			else
				zk_fail(e, mv->fail_sqlstate, mv->fail_msg);
		}
		else
		{
			e->token = mv->moved;
			e->state = ZKE_HELD;
			zk_finish(e, ZKO_GRANTED, 0, NULL);
		}
	}
	move_free(mv);
}

/* One request of mv answered: the next ones, or the next step */
static void
move_answered(Move *mv)
{
	ZkEntry    *e = move_entry(mv);

	/* a long request: each answer tells the waiting backend it goes on */
	if (e != NULL)
		e->answered_at = GetCurrentTimestamp();
	mv->inflight--;
	move_progress(mv);
}

/* ---- step 3: the items ---- */

/* The item of c is done with (moved, skipped or failed): c goes, mv goes on */
static void
move_item_done(MoveCall *c)
{
	Move	   *mv = c->mv;

	move_call_free(c);
	mv->items_out--;
	move_answered(mv);
}

static void move_send_multi(MoveCall *c);

/* Completion of the zoo_amulti sent by move_send_multi() */
static void
move_multi_done(int rc, const void *data)
{
	CALL_COMPLETION_BEGIN(MoveCall, c, Move, mv, mv, data)
	{
		int			bad = -1;
		int			i;
		bool		again = false;	/* c sent once more: still in flight */

		if (rc == ZOK)
			mv->moved++;
		else
		{
			/* the op that failed: those before it say ZOK, after it ZRUNTIMEINCONSISTENCY */
			for (i = 0; i < MOVE_OPS; i++)
				if (c->res[i].err != ZOK && c->res[i].err != ZRUNTIMEINCONSISTENCY)
				{
					bad = i;
					break;
				}
		}
		if (rc == ZOK)
			;
		else if (!zk_rc_definite(rc))
			move_fail_rc(mv, rc, c->paths[3], "to a move's multi");
		else if (bad >= 0 && c->res[bad].err == ZNOAUTH)
			move_fail_rc(mv, ZNOAUTH, c->paths[bad], "");
		else if (bad == 0 && c->res[0].err == ZNONODE)
		{
			/* the guard went: the source was dropped (or the session ended) */
			mv->empty = true;
			mv->sending = false;
		}
		else if ((bad == 1 && (c->res[1].err == ZNODEEXISTS || c->res[1].err == ZNONODE)) ||
				 (bad == 3 && c->res[3].err == ZNONODE))
			;					/* claimed, or gone: someone else took it */
		else if (bad == 4 && c->res[4].err == ZNONODE && !c->retried)
		{
			ZkEntry    *e = move_entry(mv);

			/* the destination went meanwhile: its parents, then once more */
			if (e != NULL && !e->released && !mv->failed && zk_session_usable())
			{
				c->retried = true;
				if (c->ensures == mv->ensures)
				{
					zk_q_send_ensure_queue(mv->to);
					mv->ensures++;
				}
				again = true;
				move_send_multi(c); /* in flight, or freed and counted */
			}
		}
		else if (bad == 4 && c->res[4].err == ZNONODE)
		{
			char		refused[ZKLOCK_PARENT_MAX + 1];

			if (zk_parent_refused(c->paths[4], refused, sizeof(refused)))
				move_fail_rc(mv, ZNOAUTH, refused, "");
			else
				move_fail(mv, ERRCODE_OBJECT_IN_USE,
						  "the destination queue %s kept disappearing after %lld %s moved",
						  mv->to, (long long) mv->moved, mv->moved == 1 ? "item was" : "items were");
		}
		else
			move_fail_rc(mv, rc, bad >= 0 ? c->paths[bad] : c->paths[3],
						 "the move of an item");
		if (!again)
			move_item_done(c);
	}
	NONE_COMPLETION_END;
}

/*
 * Send c's multi (its payload read); a send that fails fails the move.  In
 * flight as an item either way until its completion or here.
 */
static void
move_send_multi(MoveCall *c)
{
	Move	   *mv = c->mv;
	char		prefix[11];
	int			rc;

	/* entry-PPP-: the same priority */
	memcpy(prefix, c->node, 10);
	prefix[10] = '\0';
	snprintf(c->paths[0], ZK_PATH_MAX, "%s", mv->guard);
	snprintf(c->paths[1], ZK_PATH_MAX, "%s/taken/%s", mv->from, c->node);
	snprintf(c->paths[2], ZK_PATH_MAX, "%s/taken/%s", mv->from, c->node);
	snprintf(c->paths[3], ZK_PATH_MAX, "%s/entries/%s", mv->from, c->node);
	snprintf(c->paths[4], ZK_PATH_MAX, "%s/entries/%s", mv->to, prefix);
	zoo_check_op_init(&c->ops[0], c->paths[0], -1);
	zoo_create_op_init(&c->ops[1], c->paths[1], "{}", 2, zk_acl_path(c->paths[1]),
					   0, NULL, 0);
	zoo_delete_op_init(&c->ops[2], c->paths[2], -1);
	zoo_delete_op_init(&c->ops[3], c->paths[3], -1);
	zoo_create_op_init(&c->ops[4], c->paths[4], c->payload, (int) c->plen,
					   zk_acl_path(c->paths[4]), ZOO_SEQUENCE,
					   c->created, sizeof(c->created));
	c->ensures = mv->ensures;
	memset(c->res, 0, sizeof(c->res));
	rc = zoo_amulti(zk_zh, MOVE_OPS, c->ops, c->res, move_multi_done, c);
	if (rc != ZOK)
	{
		move_fail_rc(mv, rc, c->paths[3], "to a move's multi");
		move_item_done(c);
	}
}

/* Completion of the zoo_aget sent by move_send_more(): the item's data */
static void
move_read_done(int rc, const char *value, int value_len,
			   const struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(MoveCall, c, Move, mv, mv, data)
	{
		ZkEntry    *e = move_entry(mv);
		bool		go = false;

		if (rc == ZOK && e != NULL && !e->released && !mv->failed && !mv->empty &&
			zk_session_usable())
		{
			const char *p = value;
			Size		len = value_len > 0 ? (Size) value_len : 0;
			ZkDeadLetter dl;

			mv->largest = Max(mv->largest, len);
			/* a dead letter goes back without its header */
			if (p != NULL && zk_q_dl_unwrap(p, len, &dl))
			{
				p = dl.payload;
				len = dl.plen;
			}
			c->plen = len;
			if (len > 0)
			{
				c->payload = MemoryContextAllocExtended(zk_q_context(), len,
														MCXT_ALLOC_NO_OOM);
				if (c->payload == NULL)
					move_fail(mv, ERRCODE_OUT_OF_MEMORY, "out of memory in the zklock worker");
				else
				{
					memcpy(c->payload, p, len);
					go = true;
				}
			}
			else
				go = true;
		}
		else if (rc == ZNONODE)
			;					/* gone since the listing: someone took it */
		else if (rc != ZOK)
			move_fail_rc(mv, rc, c->node, "to the read of an item");
		if (go)
			move_send_multi(c);
		else
			move_item_done(c);
	}
	NONE_COMPLETION_END;
}

/* Send the next candidates' reads, within the window */
static void
move_send_more(Move *mv)
{
	while (mv->sending && mv->items_out < move_window(mv))
	{
		MoveCall   *c;
		char		path[ZK_PATH_MAX];
		int			rc;

		if (mv->next >= mv->ncand)
		{
			mv->sending = false;
			return;
		}
		c = move_call(mv, mv->cand[mv->next++]);
		if (c == NULL)
			return;
		snprintf(path, sizeof(path), "%s/entries/%s", mv->from, c->node);
		rc = zoo_aget(zk_zh, path, 0, move_read_done, c);
		if (rc != ZOK)
		{
			pfree(c);
			move_fail_rc(mv, rc, path, "to the read of an item");
			return;
		}
		mv->inflight++;
		mv->items_out++;
	}
}

/* ---- step 2: the listing ---- */

/* The source's listing answered (Listing.done) */
static void
move_listed(Listing *l)
{
	Move	   *mv = (Move *) l->owner;
	int			rc = ZOK;

	if (l->rc_entries != ZOK && l->rc_entries != ZNONODE)
		rc = l->rc_entries;
	else if (l->rc_taken != ZOK && l->rc_taken != ZNONODE)
		rc = l->rc_taken;
	if (rc != ZOK)
		move_fail_rc(mv, rc, mv->from, "to the listing of the queue");
	else if (l->rc_entries == ZNONODE)
		mv->empty = true;
	else
	{
		int			n = zk_q_listing_unclaimed(l, NULL);

		if (n > 0)
		{
			mv->cand = MemoryContextAllocExtended(zk_q_context(), sizeof(char *) * n,
												  MCXT_ALLOC_NO_OOM);
			if (mv->cand == NULL)
				move_fail(mv, ERRCODE_OUT_OF_MEMORY, "out of memory in the zklock worker");
			else
				mv->ncand = Min(zk_q_listing_unclaimed(l, mv->cand), mv->max_items);
		}
	}
	move_answered(mv);
}

/* ---- step 1: the guard and the counts ---- */

/* Completion of the zoo_acreate sent by move_start() */
static void
move_guard_made(int rc, const char *value, const void *data)
{
	CALL_COMPLETION_BEGIN(MoveCall, c, Move, mv, mv, data)
	{
		if (rc == ZOK)
			strlcpy(mv->guard, c->paths[0], sizeof(mv->guard));
		else if (rc == ZNONODE)
			mv->empty = true;	/* no queue node: nothing to move */
		else
			move_fail_rc(mv, rc, c->paths[0], "to the create of the move's node");
		move_call_free(c);
		move_answered(mv);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aexists sent by move_start(): a child count */
static void
move_counted(int rc, const struct Stat *stat, const void *data)
{
	CALL_COMPLETION_BEGIN(MoveCall, c, Move, mv, mv, data)
	{
		if (rc == ZOK && stat != NULL)
		{
			char		msg[ZKLOCK_ERRMSG_MAX];

			if (c->which == 1)
				mv->stat_entries = stat->numChildren;
			else
				mv->stat_taken = stat->numChildren;
			/* not listed whole past the bound (issue 35): 54000 */
			if (zk_children_over(stat, c->which == 1 ? "The queue's items" : "The queue's claims",
								 msg, sizeof(msg)))
				move_fail(mv, ERRCODE_PROGRAM_LIMIT_EXCEEDED, "%s", msg);
		}
		else if (rc != ZOK && rc != ZNONODE)
			move_fail_rc(mv, rc, c->paths[0], "to the count of the queue's nodes");
		move_call_free(c);
		move_answered(mv);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_adelete sent by move_progress(): the guard went */
static void
move_guard_gone(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(Move, mv, data)
	{
		/* any answer: ephemeral, it goes with the session at the latest */
		move_answered(mv);
	}
	NONE_COMPLETION_END;
}

/*
 * Everything in flight is accounted for: send more, go to the next step,
 * or end (the guard's delete, then the answer).  Called after each answer.
 */
static void
move_progress(Move *mv)
{
	ZkEntry    *e = move_entry(mv);

	/*
	 * Let go, answered already (the session ended), or no session: stop.
	 * (Once the guard's delete is out, everything was moved or skipped:
	 * its answer decides nothing.)
	 */
	if (e == NULL || e->released || !zk_session_usable())
	{
		mv->sending = false;
		if (e != NULL && !e->released && !mv->failed && mv->step != MOVE_UNGUARD)
			move_fail_rc(mv, ZCONNECTIONLOSS, mv->from, "to a request of the move");
	}
	if (mv->sending)
		move_send_more(mv);
	if (mv->inflight > 0)
		return;
	if (mv->step == MOVE_COUNT && !mv->failed && !mv->empty && e != NULL && !e->released)
	{
		char		taken[ZK_PATH_MAX];

		/*
		 * step 2: the destination's parents, the source's taken (another
		 * client's queue may lack it: its items could not be claimed), then
		 * the source's listing
		 */
		mv->step = MOVE_LIST;
		zk_q_send_ensure_queue(mv->to);
		snprintf(taken, sizeof(taken), "%s/taken", mv->from);
		zk_create_parent(taken, 0);
		mv->list.done = move_listed;
		mv->list.owner = mv;
		if (zk_q_listing_send(&mv->list, mv->from, NULL, NULL, false, false, true) != 0)
		{
			mv->inflight++;
			return;
		}
		move_fail_rc(mv, ZCONNECTIONLOSS, mv->from, "to the listing of the queue");
	}
	if (mv->step == MOVE_LIST && !mv->failed && !mv->empty && e != NULL && !e->released)
	{
		/* step 3 */
		mv->step = MOVE_ITEMS;
		mv->next = 0;
		mv->sending = true;
		move_send_more(mv);
		if (mv->inflight > 0)
			return;
	}
	if (mv->guard[0] != '\0')
	{
		/* step 5: the guard goes first, so nothing is left once answered */
		mv->step = MOVE_UNGUARD;
		if (zk_session_usable() &&
			zoo_adelete(zk_zh, mv->guard, -1, move_guard_gone, mv) == ZOK)
		{
			mv->guard[0] = '\0';
			mv->inflight++;
			return;
		}
		mv->guard[0] = '\0';
	}
	move_finish(mv);
}

/* Start a move (zk_qinfo_drive) */
void
zk_q_move_start(ZkEntry *e)
{
	Move	   *mv;
	MoveCall   *c;
	int			which;

	mv = MemoryContextAllocZero(zk_q_context(), sizeof(Move));
	mv->idx = zk_entry_index(e);
	mv->gen = e->gen;
	mv->max_items = ZKQ(e)->max_items;
	zk_queue_path(e->name, mv->from, sizeof(mv->from));
	zk_queue_path(e->data, mv->to, sizeof(mv->to));
	mv->step = MOVE_COUNT;
	e->state = ZKE_CREATING;
	e->outstanding = 1;			/* until move_finish */
	mv->inflight = 1;			/* until everything is sent */

	/* the guard ("Late moves") */
	if (move_guard_seq < ZKQ_MOVE_GUARD_FIRST || move_guard_seq >= ZKQ_MOVE_GUARD_LAST)
		move_guard_seq = ZKQ_MOVE_GUARD_FIRST;
	else
		move_guard_seq++;
	c = move_call(mv, NULL);
	if (c != NULL)
	{
		snprintf(c->paths[0], ZK_PATH_MAX, "%s/" ZKQ_MOVE_GUARD_PREFIX "%016llx-%llu",
				 mv->from, (unsigned long long) zk_cur_session,
				 (unsigned long long) move_guard_seq);
		if (zoo_acreate(zk_zh, c->paths[0], NULL, -1, zk_acl_path(c->paths[0]),
						ZOO_EPHEMERAL, move_guard_made, c) == ZOK)
			mv->inflight++;
		else
		{
			move_call_free(c);
			move_fail_rc(mv, ZCONNECTIONLOSS, mv->from, "to the create of the move's node");
		}
	}
	/* the counts of entries and taken (issue 35) */
	for (which = 1; which <= 2 && !mv->failed; which++)
	{
		c = move_call(mv, NULL);
		if (c == NULL)
			break;
		c->which = which;
		snprintf(c->paths[0], ZK_PATH_MAX, "%s/%s", mv->from, which == 1 ? "entries" : "taken");
		if (zoo_aexists(zk_zh, c->paths[0], 0, move_counted, c) == ZOK)
			mv->inflight++;
		else
		{
			move_call_free(c);
			move_fail_rc(mv, ZCONNECTIONLOSS, mv->from, "to the count of the queue's nodes");
		}
	}
	move_answered(mv);
}
