/*-------------------------------------------------------------------------
 *
 * leader_wait.c
 *	  zk_leader_wait's wait for a change of leader (issue 41): a
 *	  ZKK_LEADERWAIT entry, one per waiting session, that the worker
 *	  answers once the leader the backend saw is gone, or, when it saw
 *	  nobody lead, once a candidate stands.  The backend half
 *	  (zk_leader_wait_change) asks and waits; the reading of the election
 *	  and of who leads is zk_campaign_candidates' (lock_sql.c).
 *
 *	  Leader seen (e->node: its node's name): an exists with a watch on
 *	  that node only, so that a thousand watchers of one election are not
 *	  woken by every candidate that comes or goes (no herd): only by the
 *	  leader's node going.  ZNONODE: gone already, answered at once.
 *
 *	  Nobody seen (e->node empty): the election's children, listed with a
 *	  watch, until one of them is a candidate (a lock contender's name:
 *	  another client's other nodes do not count, so they cannot make the
 *	  backend read again and again); an election not made yet is watched
 *	  with an exists until it is.
 *
 *	  Nothing is created: the entry is charged nothing (recipelist.h).  The
 *	  backend's timeout ends the wait (zk_wait_outcome); letting go of the
 *	  entry takes its watch back.  The session lost: the watch went with
 *	  it, and the entry sets it again in the next session (a leader that
 *	  went meanwhile is then found gone at once).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "recipe.h"
#include "lock/lock.h"
#include "election.h"

#include "miscadmin.h"

typedef enum LwStep
{
	LWS_NODE = 0,				/* the leader's node: exists, watched */
	LWS_KIDS,					/* the election's children, watched */
	LWS_PARENT,					/* the election (absent): exists, watched */
	LWS_DONE
} LwStep;

/* A ZKK_LEADERWAIT entry's own fields; e->node is the leader's node name */
typedef struct ZkLwPart
{
	uint8		step;			/* LwStep */
} ZkLwPart;

ZK_ENTRY_PART_FITS(ZkLwPart);
#define ZKLW(e)		ZK_ENTRY_PART(e, ZkLwPart)

static void lw_send(ZkEntry *e);

/* The node e's step reads: the leader's node, or the election itself */
static void
lw_path(ZkEntry *e, char *out, size_t len)
{
	char		parent[ZKLOCK_PARENT_MAX + 1];

	zk_lock_parent(e->name, ZKF_ELECTIONS, parent, sizeof(parent));
	if (ZKLW(e)->step == LWS_NODE)
		snprintf(out, len, "%s/%s", parent, e->node);
	else
		strlcpy(out, parent, len);
}

/* Take back the watch e set, if it is set */
static void
lw_unwatch(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];

	if (e->watch != ZKEW_SET)
		return;
	lw_path(e, path, sizeof(path));
	zk_entry_unwatch(e, path,
					 ZKLW(e)->step == LWS_KIDS ? ZWATCHTYPE_CHILD : ZWATCHTYPE_DATA,
					 zk_kind_watcher);
}

/*
 * The wait is over (answered, failed, or let go): its watch taken back;
 * freed once let go, else done until its owner lets go
 */
static void
lw_end(ZkEntry *e)
{
	lw_unwatch(e);
	if (e->watch == ZKEW_PENDING)
		return;					/* its completion comes back here */
	ZKLW(e)->step = LWS_DONE;
	if (e->released)
		zk_entry_free(e);
	else
		e->state = ZKE_DONE;
}

/* The watch is set and nothing has changed yet: the owner waits */
static void
lw_armed(ZkEntry *e)
{
	if (e->state != ZKE_WAITING)
	{
		e->state = ZKE_WAITING;
		zk_wake_owner(e);
	}
}

/* A read's answer other than the ones its step expects */
static void
lw_other(ZkEntry *e, int rc)
{
	char		path[ZK_PATH_MAX];

	if (!zk_rc_definite(rc))
	{
		zk_retry_later(e);		/* again once usable */
		return;
	}
	lw_path(e, path, sizeof(path));
	zk_fail_rc(e, rc, path, ERRCODE_CONNECTION_FAILURE, zerror(rc));
	lw_end(e);
}

/*
 * Completion of an exists with a watch: on the leader's node (LWS_NODE) or
 * on the election not made yet (LWS_PARENT).  ZNONODE leaves a watch on
 * the absent node too.
 */
static void
lw_exists_done(int rc, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->watch == ZKEW_PENDING)
		{
			char		path[ZK_PATH_MAX];

			e->watch = ZKEW_NONE;
			lw_path(e, path, sizeof(path));
			if (rc == ZOK || rc == ZNONODE)
				e->watch = ZKEW_SET;
			else
			{
				(void) zk_watch_drop(path);
				e->watched[0] = '\0';
			}

			if (e->released || e->outcome != ZKO_NONE)
				lw_end(e);
			else if (ZKLW(e)->step == LWS_NODE && rc == ZNONODE)
			{
				/* the leader seen is gone */
				zk_finish(e, ZKO_GRANTED, 0, NULL);
				lw_end(e);
			}
			else if (ZKLW(e)->step == LWS_PARENT && rc == ZOK)
			{
				/* made meanwhile: list it */
				lw_unwatch(e);
				ZKLW(e)->step = LWS_KIDS;
				lw_send(e);
			}
			else if (rc == ZOK || rc == ZNONODE)
				lw_armed(e);	/* leader still there, or election not made */
			else
				lw_other(e, rc);
		}
	}
	COMPLETION_END(e);
}

/* Completion of the listing of the election, with a watch (LWS_KIDS) */
static void
lw_kids_done(int rc, const struct String_vector *kids, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->watch == ZKEW_PENDING)
		{
			char		path[ZK_PATH_MAX];
			bool		stands = false;

			e->watch = ZKEW_NONE;
			lw_path(e, path, sizeof(path));
			if (rc == ZOK)
			{
				int			i;

				e->watch = ZKEW_SET;
				for (i = 0; kids != NULL && i < kids->count && !stands; i++)
				{
					bool		shared;

					stands = zk_node_is_contender(kids->data[i], &shared);
				}
			}
			else
			{
				(void) zk_watch_drop(path);
				e->watched[0] = '\0';
			}

			if (e->released || e->outcome != ZKO_NONE)
				lw_end(e);
			else if (rc == ZOK && stands)
			{
				/* a candidate stands: the backend reads who leads */
				zk_finish(e, ZKO_GRANTED, 0, NULL);
				lw_end(e);
			}
			else if (rc == ZOK)
				lw_armed(e);
			else if (rc == ZNONODE)
			{
				/* no election yet: wait for it to be made */
				ZKLW(e)->step = LWS_PARENT;
				lw_send(e);
			}
			else
				lw_other(e, rc);
		}
	}
	COMPLETION_END(e);
}

/* Send e's step's read, with a watch */
static void
lw_send(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];
	int			rc;

	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	lw_path(e, path, sizeof(path));
	strlcpy(e->watched, ZKLW(e)->step == LWS_NODE ? e->node : "", sizeof(e->watched));
	if (ZKLW(e)->step == LWS_KIDS)
		rc = zoo_awget_children(zk_zh, path, zk_kind_watcher, (void *) zk_ctx_of(e),
								lw_kids_done, zk_ctx_of(e));
	else
		rc = zoo_awexists(zk_zh, path, zk_kind_watcher, (void *) zk_ctx_of(e),
						  lw_exists_done, zk_ctx_of(e));
	if (rc == ZOK)
	{
		zk_watch_set(path);
		e->watch = ZKEW_PENDING;
	}
	else if (!zk_send_failed(e, rc, ZKLW(e)->step == LWS_KIDS ? "get_children" : "exists"))
		lw_end(e);
}

/* drive: the first read, a retry, or the end once its owner let go */
static void
lw_drive(ZkEntry *e)
{
	if (e->watch == ZKEW_PENDING)
		return;					/* its completion drives it on */
	if (e->released || e->outcome != ZKO_NONE)
	{
		lw_end(e);
		return;
	}
	if (ZKLW(e)->step == LWS_DONE)
		return;
	if (e->watch == ZKEW_SET)
		return;					/* armed: the watch drives it on */
	lw_send(e);
}

/* drive_failed: an error while driving it fails it, and it ends */
static void
lw_drive_failed(ZkEntry *e)
{
	if (e->watch == ZKEW_PENDING)
		e->watch = ZKEW_NONE;
	zk_fail(e, ERRCODE_INTERNAL_ERROR, "The zklock worker failed on this leader wait");
	lw_end(e);
}

/* watch_fired: the leader's node, or the election, changed: look again */
static void
lw_fired(ZkEntry *e)
{
	if (e->outcome != ZKO_NONE || ZKLW(e)->step == LWS_DONE)
		return;
	if (ZKLW(e)->step == LWS_PARENT)
		ZKLW(e)->step = LWS_KIDS;	/* made: list it */
	lw_send(e);
}

/* session_lost: the watch went with it; set again in the next session */
static void
lw_session_lost(ZkEntry *e, const char *why)
{
	e->watch = ZKEW_NONE;
	e->watched[0] = '\0';
	if (e->released || e->outcome != ZKO_NONE || ZKLW(e)->step == LWS_DONE)
	{
		lw_end(e);
		return;
	}
	ZKLW(e)->step = e->node[0] != '\0' ? LWS_NODE : LWS_KIDS;
	zk_retry_later(e);
}

const ZkKindOps zk_leaderwait_ops =
	ZK_KIND_OPS(lw_drive, lw_drive_failed, lw_session_lost,
				.watch_fired = lw_fired);


/* ---- the backend's half ---- */

/*
 * Wait up to timeout_ms (< 0: without limit) for a change of who leads the
 * campaign's election "name" (UTF-8, len bytes, qualified with the
 * session's namespace as a campaign's is): the leader whose node is
 * "node" gone, or with node NULL (nobody led) a candidate standing.  True
 * when it changed, false when the timeout passed first.
 */
bool
zk_leader_wait_change(const char *name, int len, const char *node,
					  int64 timeout_ms)
{
	ZkEntry    *e;
	uint32		idx;
	uint32		gen;
	int			outcome = ZKO_NONE;
	char		what[ZKLOCK_NAME_MAX * 4 + 64];

	zk_require_shmem();
	zk_check_name("election name", len);
	zk_backend_init();
	snprintf(what, sizeof(what), "wait for the leader of zookeeper election \"%s\"",
			 zk_display_name(pnstrdup(name, len)));
	e = zk_new_entry(ZKK_LEADERWAIT, name, len, ZKM_EXCLUSIVE, ZKS_TRANSACTION, false);
	e->family = ZKF_ELECTIONS;
	if (node != NULL)
		strlcpy(e->node, node, sizeof(e->node));
	ZKLW(e)->step = node != NULL ? LWS_NODE : LWS_KIDS;
	idx = zk_entry_index(e);
	gen = e->gen;
	zk_enqueue(e);
	LWLockRelease(zk_ctl->lock);
	zk_wake_worker();
	PG_TRY();
	{
		outcome = zk_wait_outcome(idx, timeout_ms, zk_connect_timeout, what);
	}
	PG_CATCH();
	{
		if (zk_release_entry(idx, gen))
			zk_wake_worker();
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (zk_release_entry(idx, gen))
		zk_wake_worker();
	return outcome == ZKO_GRANTED;
}
