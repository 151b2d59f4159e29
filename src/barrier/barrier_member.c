/*-------------------------------------------------------------------------
 *
 * barrier_member.c
 *	  ZKK_BMEMBER: a double barrier's member.  Entering creates its
 *	  ephemeral node, named by its guid, and waits on the barrier's watched
 *	  object (barrier_worker.c) until the members present reach its parties
 *	  or "ready" appears after it joined.  Leaving is herd-free (kazoo's
 *	  DoubleBarrier order): the member with the lowest name watches the
 *	  highest, the others delete their node and watch the lowest.
 *
 *	  Runs in the worker with zk_ctl->lock held.
 *
 *-------------------------------------------------------------------------
 */
#include "barrier_int.h"
#include "batch.h"

#include "trust.h"
#include "queue/queue.h"

#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

static void member_step(ZkEntry *e);
static void leave_list(ZkEntry *e);

/* ------------------------------------------------------------------------
 * ZKK_BMEMBER: a double barrier's member
 * ------------------------------------------------------------------------
 */

/* The path of child (a member's guid, or ready) in e's barrier */
static void
member_path(ZkEntry *e, const char *child, char *out, size_t outlen)
{
	char		dir[ZK_PATH_MAX];

	zk_barrier_path("barriers", e->name, dir, sizeof(dir));
	snprintf(out, outlen, "%s/%s", dir, child);
}

/* The member a leaving one watches changed (watch_fired op): list again */
static void
member_watch_fired(ZkEntry *e)
{
	if (e->step.barrier == ZKB_LEAVE)
		leave_list(e);
}

/*
 * Take off the exists watch a leaving member set (leave_watch): only ours,
 * locally, while other watchers here share the path or the session is not
 * usable; else the session's watch on the server too.
 */
static void
member_unwatch(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];

	member_path(e, e->watched, path, sizeof(path));
	zk_entry_unwatch(e, path, ZWATCHTYPE_DATA, zk_kind_watcher);
}

/*
 * e's member node is deleted, or given up (member_deleted): free e if it was
 * let go, else answer a member that has left
 */
static void
member_node_done(ZkEntry *e)
{
	e->node[0] = '\0';
	if (e->released)
		zk_entry_free(e);
	else if (e->step.barrier == ZKB_LEFT)
		zk_finish(e, ZKO_GRANTED, 0, NULL);
}

static ZkLogLimit member_delete_log;

/* Completion of the delete member_send_delete() handed to the batch */
static void
member_deleted(int rc, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->delete_inflight)
		{
			e->delete_inflight = false;
			if (rc == ZOK || rc == ZNONODE)
			{
				e->in_doubt = false;
				member_node_done(e);
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);
			else
			{
				if (zk_log_limited(&member_delete_log, "could not delete the member node of a barrier"))
					ereport(WARNING,
							(errmsg("zklock: could not delete the member node of barrier \"%s\": %s",
									zk_log_name(e->name), zerror(rc))));
				member_node_done(e);
			}
		}
	}
	COMPLETION_END(e);
}

/*
 * Send the delete of e's member node, gathered with other writes (batch.c):
 * the members of a barrier leave together, and their deletes go as one
 * multi.  A delete that cannot be sent is answered so, and retried.
 */
static void
member_send_delete(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];

	member_path(e, e->guid, path, sizeof(path));
	zk_batch_delete(path, -1, member_deleted, zk_ctx_of(e));
	e->delete_inflight = true;
}

static void member_create_answered(ZkEntry *e, int rc, const struct Stat *stat);
static void member_send_owner(ZkEntry *e);

/* Completion of the create member_send_create() handed to the batch */
static void
member_created(int rc, const char *value, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->create_inflight)
		{
			BObj	   *o = zk_b_obj_of(e);

			/*
			 * counted off first (an error below leaves no count behind),
			 * the watch looked at only after the member stepped on
			 */
			e->create_inflight = false;
			zk_b_obj_create_done(o);
			member_create_answered(e, rc, stat);
			zk_b_obj_unwatch_unused(o);
		}
	}
	COMPLETION_END(e);
}

/*
 * The answer to e's create (member_created), the create no longer in
 * flight.  A ZNONODE: the barrier's node (a container) or its parents are
 * gone.  ZNODEEXISTS: ours, by name, from a try whose reply was lost, or
 * an earlier session's (member_owner_read).
 */
static void
member_create_answered(ZkEntry *e, int rc, const struct Stat *stat)
{
	if (rc == ZNODEEXISTS)
	{
		/* ours, or an earlier session's: ask (member_owner_read) */
		member_send_owner(e);
		return;
	}
	if (rc == ZOK)
	{
		e->in_doubt = false;
		strlcpy(e->node, e->guid, sizeof(e->node));
		zk_b_obj_of(e)->node_session = zk_cur_session;
		if (rc == ZOK && stat && e->token == 0)
			e->token = stat->czxid;
		member_step(e);
	}
	else if (rc == ZNONODE && e->errors < 5)
	{
		e->errors++;
		e->parents_tried = true;
		zk_b_obj_of(e)->node_session = 0;
		member_step(e);
	}
	else if (!zk_rc_definite(rc))
	{
		e->in_doubt = true;
		zk_retry_later(e);
	}
	else
	{
		char		msg[ZKLOCK_ERRMSG_MAX];

		snprintf(msg, sizeof(msg), "ZooKeeper refused the member node: %s", zerror(rc));
		if (e->released)
			zk_entry_free(e);
		else
		{
			char		mpath[ZK_PATH_MAX];

			member_path(e, e->guid, mpath, sizeof(mpath));
			e->step.barrier = ZKB_LEFT;
			e->state = ZKE_DONE;
			zk_fail_rc(e, rc, mpath, ERRCODE_CONNECTION_FAILURE, msg);
		}
	}
}

/*
 * Completion of the delete member_owner_read() sent: the node of an earlier
 * session is gone (or was already): create ours again.
 */
static void
member_stale_deleted(int rc, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->delete_inflight)
		{
			e->delete_inflight = false;
			if (rc == ZOK || rc == ZNONODE || rc == ZBADVERSION)
				e->node[0] = '\0';
			member_step(e);
		}
	}
	COMPLETION_END(e);
}

/*
 * Completion of the exists member_send_owner() sent: whose is the member
 * node a create found there?  This session's (a try whose reply was lost):
 * ours.  An earlier session's (closed by a change of zklock.hosts or a
 * worker exit, or given up, while ZooKeeper had not ended it yet): that node
 * goes with that session, and the member would stop counting, unseen, while
 * its backend still is one; so it is deleted (at the version read) and ours
 * created.  Gone meanwhile: created again.
 */
static void
member_owner_read(int rc, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->list_inflight)
		{
			e->list_inflight = false;
			if (rc == ZOK && stat != NULL && zk_cur_session != 0 &&
				(uint64) stat->ephemeralOwner == zk_cur_session)
				member_create_answered(e, ZOK, NULL);	/* ours */
			else if (rc == ZOK && stat != NULL && zk_session_usable())
			{
				char		path[ZK_PATH_MAX];

				member_path(e, e->guid, path, sizeof(path));
				if (zoo_adelete(zk_zh, path, stat->version, member_stale_deleted,
								zk_ctx_of(e)) == ZOK)
					e->delete_inflight = true;
				else
					zk_retry_later(e);
			}
			else if (rc == ZNONODE)
				member_step(e); /* node[0] still empty: created again */
			else
				zk_retry_later(e);
		}
	}
	COMPLETION_END(e);
}

/* Ask whose the member node is that e's create found there */
static void
member_send_owner(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];

	member_path(e, e->guid, path, sizeof(path));
	if (zoo_aexists(zk_zh, path, 0, member_owner_read, zk_ctx_of(e)) == ZOK)
		e->list_inflight = true;
	else
		zk_retry_later(e);
}

/* our member's czxid, when the create's reply did not tell it */
static void
member_stat(int rc, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->list_inflight)
		{
			e->list_inflight = false;
			if (rc == ZOK && stat)
			{
				e->token = stat->czxid;
				member_step(e);
			}
			else if (rc == ZNONODE)
			{
				e->node[0] = '\0';
				member_step(e);
			}
			else
				zk_retry_later(e);
		}
	}
	COMPLETION_END(e);
}

/*
 * Create e's ephemeral member node, named by its guid, in the barrier's
 * container node (after a ZNONODE the root and the barriers directory
 * first).  An entering member's exists watch on ready goes right behind.
 */
static void
member_send_create(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];

	if (e->parents_tried)
	{
		char		dir[ZK_PATH_MAX];

		snprintf(dir, sizeof(dir), "%s/barriers", zk_root);
		zk_create_parent(zk_root, 0);
		zk_create_parent(dir, 0);
	}

	/*
	 * The barrier's own node is a container, gone when its last member is
	 * (once ZooKeeper's container check comes by).  It is made unless a
	 * member was created in it in this session: a barrier used round
	 * after round keeps it, and a ZNONODE makes it again.
	 */
	if (e->parents_tried || zk_b_obj_of(e)->node_session != zk_cur_session)
	{
		char		dir[ZK_PATH_MAX];

		zk_barrier_path("barriers", e->name, dir, sizeof(dir));
		zk_create_parent(dir, ZOO_CONTAINER);
	}
	member_path(e, e->guid, path, sizeof(path));
	e->state = ZKE_CREATING;

	/*
	 * Gathered with other writes (batch.c): members entering together are
	 * created by one multi, and share its zxid as their czxid (the token;
	 * "ready" is never created in a batch, so it never ties with one).
	 */
	zk_batch_create_sibling(path, e->data, (int) strlen(e->data),
							ZOO_EPHEMERAL, member_created, zk_ctx_of(e));
	e->create_inflight = true;
	e->session = zk_cur_session;
	zk_b_obj_create_sent(zk_b_obj_of(e));

	/*
	 * The watch on "ready" goes right behind the create, not after its
	 * answer: ZooKeeper sets it next to the create, before another member
	 * can count this one and open the barrier.  Set after the answer, a
	 * worker that stalls meanwhile (or an answer held up) would find
	 * "ready" created and deleted again by members that entered and left
	 * at once, and miss the opening (barrier_ready_event).  If the multi
	 * the create went in fails for another write, the create is sent again
	 * behind this watch, whose answer then comes before the create's: the
	 * watch stays until the create is answered (zk_b_obj_create_sent), and
	 * is taken off then if nobody waits.
	 */
	if (e->step.barrier == ZKB_ENTER)
		(void) zk_b_barrier_watch_ready(zk_b_obj_of(e), true);
}

/* ---- leaving ---- */

/* qsort comparator of C strings */
static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/* Completion of the zoo_awexists sent by leave_watch() */
static void
leave_exists(int rc, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->watch == ZKEW_PENDING)
		{
			char		path[ZK_PATH_MAX];

			e->watch = ZKEW_NONE;
			member_path(e, e->watched, path, sizeof(path));
			if (rc == ZOK)
			{
				e->watch = ZKEW_SET;
				if (e->released || e->step.barrier != ZKB_LEAVE)
					member_unwatch(e);
			}
			else if (rc == ZNONODE)
			{
				/*
				 * Gone already.  ZooKeeper keeps an exists watch on the absent
				 * node (for its creation): take it off, then look again.
				 */
				e->watch = ZKEW_SET;
				member_unwatch(e);
				if (!e->released && e->step.barrier == ZKB_LEAVE)
					leave_list(e);
			}
			else
			{
				(void) zk_watch_drop(path);
				e->watched[0] = '\0';
				if (!e->released && e->step.barrier == ZKB_LEAVE)
					zk_retry_later(e);
			}
		}
	}
	COMPLETION_END(e);
}

/* Watch the member child of e's barrier (an exists) until it leaves */
static void
leave_watch(ZkEntry *e, const char *child)
{
	char		path[ZK_PATH_MAX];
	int			rc;

	strlcpy(e->watched, child, sizeof(e->watched));
	member_path(e, child, path, sizeof(path));
	rc = zoo_awexists(zk_zh, path, zk_kind_watcher, (void *) zk_ctx_of(e),
					  leave_exists, zk_ctx_of(e));
	if (rc == ZOK)
	{
		zk_watch_set(path);
		e->watch = ZKEW_PENDING;
	}
	else
		zk_retry_later(e);
}

/*
 * The round a leaving member leaves: the members its first listing of the
 * leave showed (its own node still there, so none of them had finished
 * leaving, and nobody had come back for the next round).  Later listings
 * count only those: a member of this round that finished leaving may enter
 * the next round at once, and its new node, seen by a member still on its
 * way out (its listing sent late, after an exists that found the lowest
 * gone), would make that member wait for the next round, which waits for
 * it (TAP 016 b13 holds the notice back to show it).
 *
 * Kept here, in the worker, for the members that are leaving; a set whose
 * entry has moved on is dropped at the next lookup.
 */
typedef struct LeaveRound
{
	uint32		idx;
	uint32		gen;
	int			n;				/* -1: too many to keep, all count */
	uint64	   *names;			/* hashes of the names, sorted */
} LeaveRound;

/*
 * Members kept per leaving member: past that, every listed member counts
 * (a round that large on one barrier is left as before).  With the hashes
 * this bounds the memory to 8 kB per leaving member.
 */
#define LEAVE_ROUND_MAX		1024

static List *leave_rounds = NIL;
static MemoryContext leave_cxt = NULL;

static uint64
leave_name_hash(const char *name)
{
	return hash_bytes_extended((const unsigned char *) name, (int) strlen(name), 0);
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64		x = *(const uint64 *) a;
	uint64		y = *(const uint64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

static void
leave_round_free(LeaveRound *r)
{
	if (r->names)
		pfree(r->names);
	pfree(r);
}

/*
 * e's round, made from the listing m[0..n-1] (ready left out) if e has
 * none yet; the sets of members that moved on are dropped
 */
static LeaveRound *
leave_round(ZkEntry *e, char **m, int n)
{
	LeaveRound *found = NULL;
	ListCell   *lc;
	MemoryContext old;
	int			i;

	(void) ZK_LAZY_CONTEXT(leave_cxt, "zklock barrier rounds", ALLOCSET_SMALL_SIZES);
	foreach(lc, leave_rounds)
	{
		LeaveRound *r = (LeaveRound *) lfirst(lc);
		ZkEntry    *o = zk_entry(r->idx);

		if (o->gen != r->gen || o->state == ZKE_FREE || o->kind != ZKK_BMEMBER ||
			o->step.barrier != ZKB_LEAVE)
		{
			leave_rounds = foreach_delete_current(leave_rounds, lc);
			leave_round_free(r);
		}
		else if (o == e)
			found = r;
	}
	if (found != NULL)
		return found;
	old = MemoryContextSwitchTo(leave_cxt);
	found = palloc0(sizeof(LeaveRound));
	found->idx = zk_entry_index(e);
	found->gen = e->gen;
	if (n > LEAVE_ROUND_MAX)
		found->n = -1;
	else
	{
		found->n = n;
		found->names = n > 0 ? palloc(sizeof(uint64) * n) : NULL;
		for (i = 0; i < n; i++)
			found->names[i] = leave_name_hash(m[i]);
		if (n > 1)
			qsort(found->names, n, sizeof(uint64), cmp_u64);
	}
	leave_rounds = lappend(leave_rounds, found);
	MemoryContextSwitchTo(old);
	return found;
}

/* Is name one of the round's members? */
static bool
leave_round_has(LeaveRound *r, const char *name)
{
	uint64		h;

	if (r->n < 0)
		return true;
	if (r->n == 0)
		return false;
	h = leave_name_hash(name);
	return bsearch(&h, r->names, r->n, sizeof(uint64), cmp_u64) != NULL;
}

/* Completion of the zoo_aget_children sent by leave_list() */
static void
leave_listed(int rc, const struct String_vector *sv, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->list_inflight)
		{
			e->list_inflight = false;
			if (e->released || e->step.barrier != ZKB_LEAVE)
				member_step(e);
			else if (rc == ZOK || rc == ZNONODE)
			{
				char	  **m = NULL;
				int			n = 0;
				int			i;
				bool		mine = false;

				if (rc == ZOK && sv && sv->count > 0)
				{
					LeaveRound *r;
					int			k = 0;

					m = palloc(sizeof(char *) * sv->count);
					for (i = 0; i < sv->count; i++)
						if (strcmp(sv->data[i], ZKB_READY) != 0)
							m[n++] = sv->data[i];
					qsort(m, n, sizeof(char *), cmp_str);
					/* only this round's members (LeaveRound) */
					r = leave_round(e, m, n);
					for (i = 0; i < n; i++)
						if (leave_round_has(r, m[i]))
						{
							m[k++] = m[i];
							if (e->node[0] && strcmp(m[i], e->node) == 0)
								mine = true;
						}
					n = k;
				}
				if (!mine)
					e->node[0] = '\0';
				if (n == 0 || (n == 1 && mine))
				{
					/*
					 * everyone else has left.  A delete of ours still on
					 * its way (sent before the watch that brought us here,
					 * maybe held in the batch, which this listing passed)
					 * finishes us when it is answered (member_deleted): a
					 * second one would fail the multi it went in.
					 */
					e->step.barrier = ZKB_LEFT;
					if (e->delete_inflight)
						;
					else if (mine)
						member_send_delete(e);
					else
						zk_finish(e, ZKO_GRANTED, 0, NULL);
				}
				else if (e->try_only)
				{
					/*
					 * '0': others are still in, and that is the answer; the
					 * owner lets the entry go, which deletes our node
					 */
					zk_finish(e, ZKO_BUSY, 0, NULL);
				}
				else if (mine && strcmp(m[0], e->node) == 0)
					leave_watch(e, m[n - 1]);	/* lowest: wait for the highest */
				else
				{
					if (mine && !e->delete_inflight)
						member_send_delete(e);
					leave_watch(e, m[0]);	/* the others: wait for the lowest */
				}
				if (m)
					pfree(m);
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);
			else
			{
				e->step.barrier = ZKB_LEFT;
				zk_fail(e, ERRCODE_CONNECTION_FAILURE, zerror(rc));
			}
		}
	}
	COMPLETION_END(e);
}

/*
 * Completion of the zoo_aexists sent by leave_list(): the barrier's stat
 * counts its children before they are listed (zklock.max_children, issue
 * 35).  Past the bound the member fails with 54000 (its node goes when the
 * owner lets the entry go); else the children are listed (leave_listed).
 */
static void
leave_counted(int rc, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		char		msg[ZKLOCK_ERRMSG_MAX];
		char		dir[ZK_PATH_MAX];

		if (e != NULL && e->list_inflight)
		{
			if (e->released || e->step.barrier != ZKB_LEAVE)
			{
				e->list_inflight = false;
				member_step(e);
			}
			else if (rc == ZOK &&
					 zk_children_over(stat, "The barrier", msg, sizeof(msg)))
			{
				e->list_inflight = false;
				e->step.barrier = ZKB_LEFT;
				zk_fail(e, ERRCODE_PROGRAM_LIMIT_EXCEEDED, msg);
			}
			else if (rc == ZOK || rc == ZNONODE || zk_rc_definite(rc))
			{
				/* leave_listed answers a missing node, or the error */
				zk_barrier_path("barriers", e->name, dir, sizeof(dir));
				if (!zk_session_usable() ||
					zoo_aget_children(zk_zh, dir, 0, leave_listed, zk_ctx_of(e)) != ZOK)
				{
					e->list_inflight = false;
					zk_retry_later(e);
				}
			}
			else
			{
				e->list_inflight = false;
				zk_retry_later(e);
			}
		}
	}
	COMPLETION_END(e);
}

/*
 * Count, then list e's barrier to decide how the leaving member waits
 * (leave_counted, leave_listed)
 */
static void
leave_list(ZkEntry *e)
{
	char		dir[ZK_PATH_MAX];
	int			rc;

	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	zk_barrier_path("barriers", e->name, dir, sizeof(dir));
	rc = zoo_aexists(zk_zh, dir, 0, leave_counted, zk_ctx_of(e));
	if (rc == ZOK)
		e->list_inflight = true;
	else
		zk_retry_later(e);
}

/* One step of a member, whatever it waits for */
static void
member_step(ZkEntry *e)
{
	if (e->create_inflight || e->delete_inflight || e->list_inflight ||
		e->watch == ZKEW_PENDING)
		return;					/* its completion steps it on */
	if (e->released)
	{
		zk_b_obj_remove_entry(zk_b_obj_of(e), e);
		member_unwatch(e);
		if ((e->node[0] || e->in_doubt) && zk_zh != NULL)
		{
			if (!zk_session_usable())
			{
				zk_retry_later(e);
				return;
			}
			member_send_delete(e);
		}
		else
			zk_entry_free(e);
		return;
	}
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	switch (e->step.barrier)
	{
		case ZKB_ENTER:
		case ZKB_MEMBER:
			if (e->node[0] == '\0')
			{
				member_send_create(e);
				return;
			}
			if (e->token == 0)
			{
				char		path[ZK_PATH_MAX];

				member_path(e, e->node, path, sizeof(path));
				if (zoo_aexists(zk_zh, path, 0, member_stat, zk_ctx_of(e)) == ZOK)
					e->list_inflight = true;
				else
					zk_retry_later(e);
				return;
			}
			if (e->step.barrier == ZKB_ENTER)
				zk_b_obj_wait(zk_b_obj_of(e), e);
			else
				e->state = ZKE_HELD;
			return;
		case ZKB_LEAVE:
			{
				zk_b_obj_remove_entry(zk_b_obj_of(e), e);
				if (e->state != ZKE_WAITING)
				{
					/* first step: the barrier closes behind us */
					zk_b_close_ready(zk_b_obj_of(e));
					e->state = ZKE_WAITING;
					zk_wake_owner(e);
				}
				if (e->watch != ZKEW_SET)
					leave_list(e);
				return;
			}
		default:
			return;
	}
}

/*
 * Forget e's requests in flight: their completions find the flags cleared.
 * A create out will never be answered (zk_b_obj_create_done): the watch on
 * ready goes if nobody waits.
 */
static void
member_forget_requests(ZkEntry *e)
{
	if (e->create_inflight)
	{
		zk_b_obj_create_done(zk_b_obj_of(e));
		zk_b_obj_unwatch_unused(zk_b_obj_of(e));
	}
	e->create_inflight = e->delete_inflight = e->list_inflight = false;
	if (e->watch == ZKEW_PENDING)
		e->watch = ZKEW_NONE;
}

/*
 * A drive of the member threw: forget what was in flight.  A member let go
 * still deletes its node (retried); any other is retried three times, then
 * fails.
 */
static void
member_drive_failed(ZkEntry *e)
{
	member_forget_requests(e);
	if (e->released)
	{
		if (e->node[0] || e->in_doubt)
			zk_retry_later(e);
		else
			zk_b_entry_free(e);
		return;
	}
	if (e->errors++ < 3)
		zk_retry_later(e);
	else
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "the zklock worker failed while serving the barrier");
}

/*
 * The session ended and took our member node with it: a member that has
 * not left gets a new node in the next session (same name), so that it
 * still counts and is still waited for.
 */
static void
b_member_session_lost(ZkEntry *e, const char *why)
{
	member_forget_requests(e);
	e->watch = ZKEW_NONE;
	e->watched[0] = '\0';
	e->in_doubt = false;
	e->node[0] = '\0';
	if (e->released)
	{
		zk_b_entry_free(e);
		return;
	}
	zk_retry_later(e);
}

/*
 * A barrier's member (a previous worker's: as if its session had ended):
 * batched, for its creates and deletes go through batch.c, the watch on
 * ready right behind the create; its other reads need to see no write held
 * there.
 */
const ZkKindOps zk_bmember_ops =
	ZK_KIND_OPS(member_step, member_drive_failed, b_member_session_lost,
				.adopt = zk_adopt_as_lost,
				.watch_fired = member_watch_fired,
				.batched = true);
