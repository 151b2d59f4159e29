/*-------------------------------------------------------------------------
 *
 * lock_revoke.c
 *	  zk_lock_revoke: an operator takes a lock back from whoever holds it,
 *	  on any cluster of the ensemble (issue 39).  The worker's half.
 *
 *	  Ask (ZKK_REVOKE, one entry per holder): the revoker's backend lists
 *	  the lock (zk_lock_holders' read) and, for every holder whose node
 *	  carries zklock's identity, has its worker create an ephemeral request
 *	  <root>/revokes/<the holder's node name> (its data: who asks, led by
 *	  the entry's own guid), then read the holder's node with a watch until
 *	  it is gone: then the entry is answered and its request deleted.  The
 *	  revoker's timeout ends the wait; letting go of the entry deletes the
 *	  request too (also one whose create had no answer: it may have
 *	  landed), and a request lives no longer than the revoker's session in
 *	  any case.  Another revoker's request found there (ZNODEEXISTS) serves
 *	  while it lasts: it is read with a watch instead of the holder's node,
 *	  and once it goes, ours is made.
 *
 *	  Whose request: the path names the holder, not the revoker, so every
 *	  revoker of one holder creates the same path.  When a create of ours
 *	  had no answer (it may have landed) and a retry finds the node there,
 *	  or a delete of ours had none, the node is read back: it is ours only
 *	  when its ephemeral owner is our session and its data is ours to the
 *	  byte (our guid: two revokers of one cluster share the session), and
 *	  only then kept or deleted (with the version read).  Another's is never
 *	  deleted: it is watched, as above.
 *
 *	  Act: every worker, while its session is usable, lists <root>/revokes
 *	  with a child watch and hands each name to the lock's worker half
 *	  (ZkRevokeTake, lock_worker.c), which takes back the hold of that node
 *	  when it is one of this cluster's, the way a hold past its maximum is
 *	  taken back: lost for its owner (its next call and its COMMIT fail with
 *	  40001), its statement cancelled, its node deleted, so the next waiter
 *	  is granted with a larger token.  A hold whose owner is committing, or
 *	  a contender of ours not granted yet, is looked at again every
 *	  RV_AGAIN_MS while the request lasts.  Node names are never reused (a
 *	  random guid and a sequence number), so a request names one hold.
 *
 *	  Trust: <root>/revokes is made with zklock's ACL and its ACL checked
 *	  like the other directories (aclcheck.c): whoever may create a request
 *	  there may as well delete the holder's node itself.
 *
 *	  Bounds: a revoker asks for at most ZK_REVOKE_BATCH holders at once
 *	  (lock_backend.c); a worker lists <root>/revokes only after its stat
 *	  shows at most RV_LIST_MAX children (else it looks again every
 *	  second, with a WARNING), and hands on at most RV_TAKES_PER_TURN names
 *	  per turn.
 *
 *	  Cost: for the revoker, one listing of the lock and one read per
 *	  contender, then per holder one create, one or two reads and one
 *	  delete (one read more per create or delete without an answer); for
 *	  every worker on the ensemble, one exists and one listing
 *	  of <root>/revokes per change of it.
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "trust.h"
#include "lock.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#define RV_LIST_MAX			1024	/* requests listed at once, at most */
#define RV_TAKES_PER_TURN	32	/* names handed on per turn */
#define RV_AGAIN_MS			100 /* a request not settled, looked at again */
#define RV_RETRY_MS			1000	/* a listing refused or too large */

/* ---- every worker: the requests of <root>/revokes ---- */

static bool rv_wanted = true;	/* the requests must be listed (again) */
static bool rv_inflight = false;	/* an exists or a listing is out */
static uint64 rv_session = 0;	/* the session the listing is of */
static bool rv_dir_sent = false;	/* <root>/revokes' create sent (session) */
static TimestampTz rv_retry_at = 0; /* list again then (0: when wanted) */
static MemoryContext rv_cxt = NULL;
static char **rv_names = NULL;	/* the requests last listed */
static int	rv_n = 0;
static int	rv_next = 0;		/* the next to hand on */
static bool rv_pass_later = false;	/* this pass left one for later */
static TimestampTz rv_again_at = 0; /* the next pass (0: none) */
static ZkLogLimit rv_over_log;

static void
rv_dir(char *out, size_t len)
{
	snprintf(out, len, "%s/revokes", zk_root);
}

/* The directory's child watch fired: list it again */
static void
rv_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	if (type == ZOO_SESSION_EVENT || type == ZOO_NOTWATCHING_EVENT)
		return;
	rv_wanted = true;
	zk_worker_wake_by(GetCurrentTimestamp());
}

/* Forget the names listed (a new listing, a new session) */
static void
rv_forget(void)
{
	if (rv_cxt != NULL)
		MemoryContextReset(rv_cxt);
	rv_names = NULL;
	rv_n = 0;
	rv_next = 0;
	rv_pass_later = false;
	rv_again_at = 0;
}

/* The listing is back: keep its names, to hand on a few per turn */
static void
rv_listed(int rc, const struct String_vector *kids, const void *data)
{
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		rv_inflight = false;
		if (rv_session != zk_cur_session)
			;					/* an answer of a session gone */
		else if (rc == ZOK)
		{
			int			i;

			rv_forget();
			rv_names = MemoryContextAlloc(ZK_LAZY_CONTEXT(rv_cxt, "zklock revokes",
														  ALLOCSET_SMALL_SIZES),
										  sizeof(char *) * Max(Min(kids->count, RV_LIST_MAX), 1));
			for (i = 0; i < kids->count && rv_n < RV_LIST_MAX; i++)
			{
				/* a name no contender can have is no request of ours */
				if (strlen(kids->data[i]) > ZKLOCK_NODE_MAX)
					continue;
				rv_names[rv_n++] = MemoryContextStrdup(rv_cxt, kids->data[i]);
			}
			zk_worker_wake_by(GetCurrentTimestamp());
		}
		else
		{
			/* gone since its stat was read, or no answer: again later */
			rv_wanted = true;
			rv_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RV_RETRY_MS);
			zk_worker_wake_by(rv_retry_at);
		}
	}
	NONE_COMPLETION_END;
}

/* The directory's stat: list it, make it, or wait */
static void
rv_counted(int rc, const struct Stat *stat, const void *data)
{
	ZkEntry    *volatile none = NULL;

	COMPLETION_BEGIN
	{
		char		dir[ZK_PATH_MAX];

		rv_inflight = false;
		rv_dir(dir, sizeof(dir));
		if (rv_session != zk_cur_session || !zk_session_usable())
			rv_wanted = true;
		else if (rc == ZNONODE && !rv_dir_sent)
		{
			/* made once per session, with zklock's ACL; then looked at again */
			rv_dir_sent = true;
			zk_create_parent(dir, 0);
			rv_wanted = true;
			zk_worker_wake_by(GetCurrentTimestamp());
		}
		else if (rc == ZOK && stat->numChildren > RV_LIST_MAX)
		{
			if (zk_log_limited(&rv_over_log, "too many revoke requests"))
				ereport(WARNING,
						(errmsg("zklock: %d requests under %s, more than the %d the worker lists",
								stat->numChildren, dir, RV_LIST_MAX),
						 errdetail("Revokes of this cluster's locks are not acted on until there are fewer."),
						 errhint("Remove the requests no zk_lock_revoke() is waiting for (their nodes are ephemeral: end the sessions that made them).")));
			rv_wanted = true;
			rv_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RV_RETRY_MS);
			zk_worker_wake_by(rv_retry_at);
		}
		else if (rc == ZOK)
		{
			/* the child watch is set by the listing */
			if (zoo_awget_children(zk_zh, dir, rv_watcher, NULL, rv_listed, NULL) == ZOK)
				rv_inflight = true;
			else
				rv_wanted = true;
		}
		else
		{
			rv_wanted = true;
			rv_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RV_RETRY_MS);
			zk_worker_wake_by(rv_retry_at);
		}
	}
	NONE_COMPLETION_END;
}

/*
 * Every turn the session is usable (lock_turn): list the requests when
 * they changed, and hand a few of them on to take.
 */
void
zk_revoke_turn(ZkRevokeTake take)
{
	TimestampTz now = GetCurrentTimestamp();
	int			done = 0;

	if (rv_session != zk_cur_session)
	{
		rv_session = zk_cur_session;
		rv_wanted = true;
		rv_inflight = false;
		rv_dir_sent = false;
		rv_retry_at = 0;
		rv_forget();
	}
	if (rv_wanted && !rv_inflight && (rv_retry_at == 0 || now >= rv_retry_at))
	{
		char		dir[ZK_PATH_MAX];

		rv_dir(dir, sizeof(dir));
		rv_retry_at = 0;
		/* its ACL, once per session (aclcheck.c): never waited for */
		zk_acl_check_node(dir);
		if (zoo_aexists(zk_zh, dir, 0, rv_counted, NULL) == ZOK)
		{
			rv_wanted = false;
			rv_inflight = true;
		}
	}

	/* a pass over the names not settled yet, again */
	if (rv_next >= rv_n && rv_again_at != 0 && now >= rv_again_at)
	{
		rv_next = 0;
		rv_again_at = 0;
	}
	while (rv_next < rv_n && done < RV_TAKES_PER_TURN)
	{
		if (take(rv_names[rv_next++]) == ZK_RV_LATER)
			rv_pass_later = true;
		done++;
	}
	if (rv_next < rv_n)
		zk_worker_wake_by(TimestampTzPlusMilliseconds(now, 10));
	else if (rv_pass_later)
	{
		rv_pass_later = false;
		rv_again_at = TimestampTzPlusMilliseconds(now, RV_AGAIN_MS);
	}
	if (rv_again_at != 0)
		zk_worker_wake_by(rv_again_at);
}

/* The session ended: list again in the next one */
void
zk_revoke_session_reset(void)
{
	rv_session = 0;
	rv_inflight = false;
	rv_forget();
}


/* ---- the revoker's worker: ZKK_REVOKE entries ---- */

typedef enum RvStep
{
	RVS_CREATE = 0,				/* the request is to be made */
	RVS_CHECK,					/* the request is to be read back: ours? */
	RVS_WATCH,					/* the holder's node is to be read, watched */
	RVS_DELETE,					/* the request is to be deleted */
	RVS_DONE
} RvStep;

/*
 * A ZKK_REVOKE entry's own fields; e->node is the holder's node name.
 * e->guid (made at its first create) names the request: it is written into
 * the request's data (rv_request_data), so a node at the request's path is
 * ours only when its data is ours to the byte and its ephemeral owner our
 * session.  e->in_doubt: "made" may be so, but whether the node there is
 * ours is not known (a create or a delete without an answer): it is read
 * back (RVS_CHECK) before it is taken for ours or deleted.
 */
typedef struct ZkRevokePart
{
	uint8		step;			/* RvStep */
	bool		made;			/* our request exists (or may: in_doubt) */
	bool		dir_sent;		/* <root>/revokes' create sent for it */
	bool		watch_req;		/* watching another's request, not the holder */
	bool		check_inflight; /* the read back of the request is out */
	int32		version;		/* our request's data version, for its delete */
} ZkRevokePart;

ZK_ENTRY_PART_FITS(ZkRevokePart);
#define ZKRV(e)		ZK_ENTRY_PART(e, ZkRevokePart)

static void rv_drive(ZkEntry *e);
static void rv_end(ZkEntry *e);
static void rv_send_create(ZkEntry *e);
static void rv_send_get(ZkEntry *e);
static void rv_send_check(ZkEntry *e);

/*
 * A request's data: the revoker's identity (the backend's, e->data) with
 * the entry's guid first, {"request":"<guid>",...}.  The same bytes at
 * every create of the entry, so a create in doubt is recognized by them.
 */
#define RV_DATA_MAX		(ZKLOCK_DATA_MAX + ZKLOCK_GUID_LEN + 16)

static int
rv_request_data(ZkEntry *e, char *out, size_t len)
{
	StaticAssertStmt(RV_DATA_MAX >= ZKLOCK_DATA_MAX + ZKLOCK_GUID_LEN + 15,
					 "a request's data must fit RV_DATA_MAX");
	if (e->data[0] == '{' && e->data[1] != '\0' && e->data[1] != '}')
		snprintf(out, len, "{\"request\":\"%s\",%s", e->guid, e->data + 1);
	else
		snprintf(out, len, "{\"request\":\"%s\"}", e->guid);
	return (int) strlen(out);
}

static void
rv_request_path(ZkEntry *e, char *out, size_t len)
{
	snprintf(out, len, "%s/revokes/%s", zk_root, e->node);
}

static void
rv_holder_path(ZkEntry *e, char *out, size_t len)
{
	char		parent[ZKLOCK_PARENT_MAX + 1];

	zk_lock_parent(e->name, ZKF_LOCKS, parent, sizeof(parent));
	snprintf(out, len, "%s/%s", parent, e->node);
}

/*
 * The node e reads with a watch: the holder's, while the request is ours;
 * else the request another revoker made, which serves only as long as it
 * lasts (when it goes, its revoker let go: we make our own)
 */
static void
rv_watch_path(ZkEntry *e, char *out, size_t len)
{
	if (ZKRV(e)->watch_req)
		rv_request_path(e, out, len);
	else
		rv_holder_path(e, out, len);
}

/* Answered, or let go: settled once no request of its own is out */
static void
rv_settle(ZkEntry *e)
{
	ZKRV(e)->step = RVS_DONE;
	if (e->released)
		zk_entry_free(e);
	else
		e->state = ZKE_DONE;
}

/* Completion of the request's delete */
static void
rv_deleted(int rc, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL)
		{
			e->delete_inflight = false;
			if (!zk_rc_definite(rc))
			{
				/*
				 * maybe not deleted: again once usable (else with the
				 * session), read back first -- if it went, the node there
				 * may be another revoker's request by then
				 */
				ZKRV(e)->step = RVS_DELETE;
				e->in_doubt = true;
				zk_retry_later(e);
			}
			else
			{
				/* deleted, or gone: ZNONODE, ZBADVERSION (not ours) */
				ZKRV(e)->made = false;
				e->in_doubt = false;
				rv_settle(e);
			}
		}
	}
	COMPLETION_END(e);
}

/*
 * The wait is over (the holder's node is gone, the owner let go, or it
 * failed): the watch taken back, the request deleted, then settled
 */
static void
rv_end(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];

	if (e->watch == ZKEW_SET)
	{
		rv_watch_path(e, path, sizeof(path));
		zk_entry_unwatch(e, path, ZWATCHTYPE_DATA, zk_kind_watcher);
	}
	if (e->watch == ZKEW_PENDING || e->create_inflight || e->delete_inflight ||
		ZKRV(e)->check_inflight)
		return;					/* its completion comes back here */
	if (!ZKRV(e)->made)
	{
		rv_settle(e);
		return;
	}
	e->state = ZKE_DELETING;
	if (e->in_doubt)
	{
		/* whose is the node there?  Deleted only if ours (rv_checked) */
		rv_send_check(e);
		return;
	}
	ZKRV(e)->step = RVS_DELETE;
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	rv_request_path(e, path, sizeof(path));
	if (zoo_adelete(zk_zh, path, ZKRV(e)->version, rv_deleted, zk_ctx_of(e)) == ZOK)
		e->delete_inflight = true;
	else
		zk_retry_later(e);
}

/*
 * Completion of the read back of the request: is the node at its path
 * ours (our session's, our data to the byte: our guid)?
 */
static void
rv_checked(int rc, const char *value, int value_len, const struct Stat *stat,
		   const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && ZKRV(e)->check_inflight)
		{
			char		path[ZK_PATH_MAX];
			bool		later = false;

			ZKRV(e)->check_inflight = false;
			rv_request_path(e, path, sizeof(path));
			if (rc == ZOK)
			{
				char		mine[RV_DATA_MAX];
				int			len = rv_request_data(e, mine, sizeof(mine));

				e->in_doubt = false;
				ZKRV(e)->made = stat != NULL && value != NULL &&
					(uint64) stat->ephemeralOwner == zk_cur_session &&
					value_len == len && memcmp(value, mine, len) == 0;
				if (ZKRV(e)->made)
					ZKRV(e)->version = stat->version;
			}
			else if (rc == ZNONODE)
			{
				/* not there: ours never landed, or went */
				e->in_doubt = false;
				ZKRV(e)->made = false;
			}
			else if (!zk_rc_definite(rc))
			{
				/* no answer: read again once usable (else with the session) */
				ZKRV(e)->step = RVS_CHECK;
				zk_retry_later(e);
				later = true;
			}
			else
			{
				/*
				 * refused: whose it is cannot be known, so it is not
				 * deleted (it is ephemeral: it goes with the session)
				 */
				e->in_doubt = false;
				ZKRV(e)->made = false;
				zk_fail_rc(e, rc, path, ERRCODE_CONNECTION_FAILURE, zerror(rc));
			}

			if (later)
				;
			else if (e->released || e->outcome != ZKO_NONE)
				rv_end(e);		/* deletes it if ours, else settles */
			else if (rc == ZNONODE)
				rv_send_create(e);	/* nobody's: make ours */
			else
				rv_send_get(e); /* ours: the holder's node; else the other's
								 * request */
		}
	}
	COMPLETION_END(e);
}

/* Read the request back, to tell whether the node there is ours */
static void
rv_send_check(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];
	int			rc;

	ZKRV(e)->step = RVS_CHECK;
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	rv_request_path(e, path, sizeof(path));
	rc = zoo_aget(zk_zh, path, 0, rv_checked, zk_ctx_of(e));
	if (rc == ZOK)
		ZKRV(e)->check_inflight = true;
	else if (!zk_rc_definite(rc))
		zk_retry_later(e);
	else
	{
		/* refused at once: whose it is cannot be known, it is not deleted */
		e->in_doubt = false;
		ZKRV(e)->made = false;
		(void) zk_send_failed(e, rc, "get");
		rv_end(e);
	}
}

/* Completion of the read of the holder's node (with a watch) */
static void
rv_got(int rc, const char *value, int value_len, const struct Stat *stat,
	   const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->watch == ZKEW_PENDING)
		{
			char		path[ZK_PATH_MAX];

			rv_watch_path(e, path, sizeof(path));
			e->watch = ZKEW_NONE;
			if (rc == ZOK)
				e->watch = ZKEW_SET;
			else
			{
				(void) zk_watch_drop(path);
				e->watched[0] = '\0';
			}
			if (e->released || e->outcome != ZKO_NONE)
				rv_end(e);
			else if (rc == ZOK)
			{
				/* still held: wait for the watch (the caller's timeout runs) */
				if (e->state != ZKE_WAITING)
				{
					e->state = ZKE_WAITING;
					zk_wake_owner(e);
				}
			}
			else if (rc == ZNONODE && ZKRV(e)->watch_req)
			{
				/*
				 * another revoker's request is gone (it let go, its timeout
				 * over): ours is needed now, else nobody asks any more
				 */
				rv_send_create(e);
			}
			else if (rc == ZNONODE)
			{
				/* gone: its holder let go, or its worker took it back */
				zk_finish(e, ZKO_GRANTED, 0, NULL);
				rv_end(e);
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);	/* read again once usable */
			else
			{
				zk_fail_rc(e, rc, path, ERRCODE_CONNECTION_FAILURE, zerror(rc));
				rv_end(e);
			}
		}
	}
	COMPLETION_END(e);
}

/* Read the holder's node with a watch */
static void
rv_send_get(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];
	int			rc;

	ZKRV(e)->step = RVS_WATCH;
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	ZKRV(e)->watch_req = !ZKRV(e)->made;
	rv_watch_path(e, path, sizeof(path));
	strlcpy(e->watched, e->node, sizeof(e->watched));
	rc = zoo_awget(zk_zh, path, zk_kind_watcher, (void *) zk_ctx_of(e),
				   rv_got, zk_ctx_of(e));
	if (rc == ZOK)
	{
		zk_watch_set(path);
		e->watch = ZKEW_PENDING;
	}
	else if (!zk_send_failed(e, rc, "get"))
		rv_end(e);
}

/* Completion of the request's create */
static void
rv_created(int rc, const char *value, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL)
		{
			char		path[ZK_PATH_MAX];
			bool		checking = false;

			e->create_inflight = false;
			rv_request_path(e, path, sizeof(path));
			if (rc == ZOK)
			{
				/* ours, just made: its version is 0 */
				ZKRV(e)->made = true;
				ZKRV(e)->version = 0;
				e->in_doubt = false;
			}
			else if (rc == ZNODEEXISTS && e->in_doubt)
			{
				/*
				 * an earlier try of ours may have landed -- or the node is
				 * another revoker's request: read it back, ours only if its
				 * data and session are (made and in_doubt stay until then)
				 */
				rv_send_check(e);
				checking = true;
			}
			else if (!zk_rc_definite(rc))
			{
				/*
				 * no answer: it may have landed, and must be deleted even
				 * if its owner lets go before a retry tells (an ephemeral
				 * of the worker's long session would stay for good)
				 */
				ZKRV(e)->made = true;
				e->in_doubt = true;
			}
			if (checking)
				;				/* rv_checked goes on (or a retry) */
			else if (e->released)
				rv_end(e);
			else if (rc == ZOK || rc == ZNODEEXISTS)
				rv_send_get(e); /* ours: the holder's node; else the other's request */
			else if (rc == ZNONODE && !ZKRV(e)->dir_sent)
			{
				char		dir[ZK_PATH_MAX];

				ZKRV(e)->dir_sent = true;
				rv_dir(dir, sizeof(dir));
				zk_create_parent(dir, 0);
				rv_drive(e);
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);
			else
			{
				zk_fail_rc(e, rc, path, ERRCODE_CONNECTION_FAILURE, zerror(rc));
				rv_end(e);
			}
		}
	}
	COMPLETION_END(e);
}

/* Make the request: an ephemeral node named after the holder's */
static void
rv_send_create(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];
	char		data[RV_DATA_MAX];
	int			len;
	int			rc;

	ZKRV(e)->step = RVS_CREATE;
	e->state = ZKE_CREATING;
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	/* the request's name: one guid for every create of the entry */
	if (e->guid[0] == '\0')
		zk_make_guid(e, true);
	rv_request_path(e, path, sizeof(path));
	len = rv_request_data(e, data, sizeof(data));
	rc = zoo_acreate(zk_zh, path, data, len,
					 zk_acl_path(path), ZOO_EPHEMERAL, rv_created, zk_ctx_of(e));
	if (zk_sent(e, rc, &e->create_inflight, "create") == false && e->outcome != ZKO_NONE)
		rv_end(e);
}

/* drive: the next step, or the end once its owner let go */
static void
rv_drive(ZkEntry *e)
{
	if (e->create_inflight || e->delete_inflight || ZKRV(e)->check_inflight ||
		e->watch == ZKEW_PENDING)
		return;					/* its completion drives it on */
	if (e->released)
	{
		rv_end(e);
		return;
	}
	switch ((RvStep) ZKRV(e)->step)
	{
		case RVS_CREATE:
			if (e->node[0] == '\0')
			{
				zk_fail(e, ERRCODE_INTERNAL_ERROR, "A revoke request names no node");
				rv_settle(e);
			}
			else
				rv_send_create(e);
			break;
		case RVS_CHECK:
			rv_send_check(e);
			break;
		case RVS_WATCH:
			rv_send_get(e);
			break;
		case RVS_DELETE:
			rv_end(e);
			break;
		case RVS_DONE:
			break;
	}
}

/* drive_failed: an error while driving it fails it, and it ends */
static void
rv_drive_failed(ZkEntry *e)
{
	if (e->create_inflight || e->delete_inflight)
	{
		/* it may land: read back at the end, deleted if ours */
		ZKRV(e)->made = true;
		e->in_doubt = true;
	}
	e->create_inflight = false;
	e->delete_inflight = false;
	ZKRV(e)->check_inflight = false;
	if (e->watch == ZKEW_PENDING)
		e->watch = ZKEW_NONE;
	zk_fail(e, ERRCODE_INTERNAL_ERROR, "The zklock worker failed on this revoke request");
	rv_end(e);
}

/*
 * watch_fired: the holder's node changed or went, read it again; or the
 * other revoker's request did, make ours
 */
static void
rv_fired(ZkEntry *e)
{
	if (ZKRV(e)->step == RVS_WATCH && e->outcome == ZKO_NONE)
	{
		if (ZKRV(e)->watch_req)
			rv_send_create(e);
		else
			rv_send_get(e);
	}
}

/*
 * session_lost: the request (ephemeral) and the watch went with the
 * session; one not answered yet is asked again in the next session
 */
static void
rv_session_lost(ZkEntry *e, const char *why)
{
	e->create_inflight = false;
	e->delete_inflight = false;
	e->watch = ZKEW_NONE;
	e->watched[0] = '\0';
	e->in_doubt = false;
	ZKRV(e)->made = false;
	ZKRV(e)->dir_sent = false;
	ZKRV(e)->watch_req = false;
	ZKRV(e)->check_inflight = false;
	ZKRV(e)->version = 0;
	if (e->released || e->outcome != ZKO_NONE)
		rv_settle(e);
	else
	{
		ZKRV(e)->step = RVS_CREATE;
		e->state = ZKE_PENDING;
		zk_retry_later(e);
	}
}

const ZkKindOps zk_revoke_ops =
	ZK_KIND_OPS(rv_drive, rv_drive_failed, rv_session_lost,
				.watch_fired = rv_fired);
