/*-------------------------------------------------------------------------
 *
 * sem_worker.c
 *	  The semaphore recipe's worker half (ZKK_SEMLEASE): one lease of
 *	  kazoo's Semaphore, taken while the backend holds the semaphore's guard
 *	  (a ZKK_LOCK entry of family ZKF_SEMAPHORES on <name>-__lock__).
 *
 *	  <root>/semaphores/<name>			the pool; data: max_leases in ASCII
 *	  <root>/semaphores/<name>/<guid>	a lease: ephemeral, 32 hex digits
 *										(as kazoo's uuid4().hex), data: who;
 *										one per permit (lease_name)
 *
 *	  Steps (step.sem, ZkSemStep):
 *	  ZKSEM_ENSURE	create the pool with max_leases as data; when it exists,
 *					read its data: a different number is an error (kazoo
 *					raises "Inconsistent max leases"), no number is ignored
 *	  ZKSEM_LIST	list the pool with a watch: our lease there (a create
 *					whose reply was lost) is granted; fewer children than
 *					max_leases: ZKSEM_CREATE; else wait for the watch
 *	  ZKSEM_CREATE	create our lease node
 *	  held			(ZKE_HELD) until released: then delete it
 *	  ZKSEM_COUNT	alone, before a try takes the guard: read the pool's
 *					max_leases (a different number: 22023 at once, as for
 *					ZKSEM_ENSURE), list it once and answer whether a lease is
 *					free (takes nothing), so that a full pool, or a wrong
 *					max_leases, answers without waiting for the guard
 *
 *	  Only the guard's holder waits on the pool, so at most one entry of
 *	  this cluster watches a pool at a time (kazoo's herd-free design); the
 *	  watch count is kept with zk_watch_set/drop all the same.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "recipe.h"
#include "semaphore.h"
#include "batch.h"

#include <errno.h>

#include "miscadmin.h"
#include "utils/memutils.h"

static void sem_step(ZkEntry *e);

/* The pool's path: <root>/semaphores/<encoded name> */
static void
pool_path(ZkEntry *e, char *buf, size_t len)
{
	char		ename[ZKLOCK_ENAME_MAX + 1];

	zk_encode_name(e->name, strlen(e->name), ename);
	snprintf(buf, len, "%s/semaphores/%s", zk_root, ename);
}

/* how many leases e takes (ZkSemPart.permits; 0 is one) */
static int
permits_of(ZkEntry *e)
{
	int			k = ZKSEM(e)->permits;

	return (k < 1) ? 1 : Min(k, ZK_SEM_PERMITS_MAX);
}

/*
 * The name of e's lease i: its guid, as kazoo's uuid4().hex, for a single
 * permit; with several, the guid's last two hex digits replaced by i
 * (semaphore.h, ZkSemPart)
 */
static void
lease_name(ZkEntry *e, int i, char *out, size_t len)
{
	strlcpy(out, e->guid, len);
	if (permits_of(e) > 1 && strlen(out) >= 2)
		snprintf(out + strlen(out) - 2, 3, "%02x", i & 0xff);
}

/* The path of e's lease i: the pool and lease_name */
static void
lease_path(ZkEntry *e, int i, char *buf, size_t len)
{
	char		pool[ZK_PATH_MAX];
	char		name[ZKLOCK_GUID_LEN + 1];

	pool_path(e, pool, sizeof(pool));
	lease_name(e, i, name, sizeof(name));
	snprintf(buf, len, "%s/%s", pool, name);
}

/* a definite failure: ZNOAUTH about the pool is a refusal */
static void
fail_rc(ZkEntry *e, int rc)
{
	char		pool[ZK_PATH_MAX];

	pool_path(e, pool, sizeof(pool));
	zk_fail_rc(e, rc, pool, ERRCODE_CONNECTION_FAILURE, zerror(rc));
}

/* A request failed: again once usable after a connection loss, else failed */
static void
retry_or_fail(ZkEntry *e, int rc)
{
	if (!zk_rc_definite(rc))
		zk_retry_later(e);
	else
		fail_rc(e, rc);
}

/* e's lease nodes are there (their create answered, or found by listing): held */
static void
lease_landed(ZkEntry *e)
{
	lease_name(e, 0, e->node, sizeof(e->node));
	e->session = zk_cur_session;
	e->in_doubt = false;
	e->state = ZKE_HELD;
}


/* take back our watch on the pool (the server's too when we were the last) */
static void
unwatch(ZkEntry *e)
{
	char		pool[ZK_PATH_MAX];

	pool_path(e, pool, sizeof(pool));
	/* (sem never sets watched) one watcher per pool */
	zk_entry_unwatch(e, pool, ZWATCHTYPE_CHILD, NULL);
}

/* The watched pool changed (watch_fired op): a waiter lists it again */
static void
pool_changed(ZkEntry *e)
{
	if (e->state == ZKE_WAITING)
	{
		e->step.sem = ZKSEM_LIST;
		sem_step(e);
	}
}

/* ---- ZKSEM_ENSURE (and the read of ZKSEM_COUNT) ---- */

static void pool_counted(int rc, const struct Stat *stat, const void *ctx);

/* Completion of the zoo_aget sent by pool_created() and sem_step() */
static void
pool_read(int rc, const char *value, int value_len, const struct Stat *stat,
		  const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->list_inflight &&
			(e->step.sem == ZKSEM_ENSURE || e->step.sem == ZKSEM_COUNT ||
			 e->step.sem == ZKSEM_SETREAD))
		{
			ZkSemPart  *sp = ZKSEM(e);
			long		n = -1;

			e->list_inflight = false;
			if (rc == ZOK)
			{
				char		buf[32];
				char	   *end;
				int			len = Min(Max(value_len, 0), (int) sizeof(buf) - 1);

				memcpy(buf, value ? value : "", len);
				buf[len] = '\0';
				errno = 0;
				n = strtol(buf, &end, 10);
				if (len == 0 || errno != 0 || end == buf || *end != '\0' ||
					n < 1 || n > PG_INT32_MAX)
					n = -1;		/* no number: ignored, as kazoo does */
				if (stat)
				{
					sp->pool_version = stat->version;
					sp->version_known = true;
				}
			}
			if (e->released)
				sem_step(e);
			else if (e->step.sem == ZKSEM_SETREAD)
			{
				/* zk_semaphore_set_max's look: the number, -1 for none */
				e->state = ZKE_DONE;
				if (rc == ZOK || rc == ZNONODE)
				{
					e->token = (rc == ZOK) ? n : -2;	/* -2: no pool */
					zk_finish(e, ZKO_GRANTED, 0, NULL);
				}
				else if (!zk_rc_definite(rc))
				{
					e->state = ZKE_PENDING;
					zk_retry_later(e);
				}
				else
					fail_rc(e, rc);
			}
			else if (rc == ZNONODE && e->step.sem == ZKSEM_COUNT)
			{
				/* no pool yet: every lease is free (when some max is given) */
				e->state = ZKE_DONE;
				if (e->parties == 0)
					zk_finish(e, ZKO_BUSY, ERRCODE_UNDEFINED_OBJECT,
							  "The semaphore has no pool, so no max_leases yet");
				else
					zk_finish(e, ZKO_GRANTED, 0, NULL);
			}
			else if (rc == ZOK)
			{
				if (n > 0 && n != e->parties && (sp->adopt || e->parties == 0))
					e->parties = (int32) n; /* the pool's number, as agreed */
				if (n > 0 && n != e->parties)
				{
					char		msg[ZKLOCK_ERRMSG_MAX];

					snprintf(msg, sizeof(msg),
							 "The semaphore has %ld leases in ZooKeeper, not %d", n, e->parties);
					/* BUSY with 22023: the backend raises the error itself */
					e->state = ZKE_DONE;
					zk_finish(e, ZKO_BUSY, ERRCODE_INVALID_PARAMETER_VALUE, msg);
				}
				else if (e->parties == 0)
				{
					e->state = ZKE_DONE;
					zk_finish(e, ZKO_BUSY, ERRCODE_INVALID_PARAMETER_VALUE,
							  "The semaphore's pool holds no number of leases");
				}
				else if (permits_of(e) > e->parties)
				{
					char		msg[ZKLOCK_ERRMSG_MAX];

					snprintf(msg, sizeof(msg),
							 "The semaphore has %d leases, fewer than the %d permits asked for",
							 e->parties, permits_of(e));
					e->state = ZKE_DONE;
					zk_finish(e, ZKO_BUSY, ERRCODE_INVALID_PARAMETER_VALUE, msg);
				}
				else if (e->step.sem == ZKSEM_COUNT)
				{
					/* the right pool: count its leases */
					char		path[ZK_PATH_MAX];
					int			lrc;

					pool_path(e, path, sizeof(path));
					lrc = zoo_aexists(zk_zh, path, 0, pool_counted, zk_ctx_of(e));
					(void) zk_sent(e, lrc, &e->list_inflight, "semaphore count");
				}
				else
				{
					sp->adopt = false;
					e->step.sem = ZKSEM_LIST;
					sem_step(e);
				}
			}
			else if (rc == ZNONODE && e->parties == 0)
			{
				e->state = ZKE_DONE;
				zk_finish(e, ZKO_BUSY, ERRCODE_UNDEFINED_OBJECT,
						  "The semaphore has no pool, so no max_leases yet");
			}
			else if (rc == ZNONODE)
			{
				sp->adopt = false;
				sem_step(e);	/* deleted meanwhile: create it */
			}
			else
				retry_or_fail(e, rc);
		}
	}
	COMPLETION_END(e);
}

/* the session in which the pools' parents were last sent (send_ensure) */
static uint64 parents_session = 0;

/* Completion of the zoo_acreate sent by send_ensure() */
static void
pool_created(int rc, const char *name, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->create_inflight && e->step.sem == ZKSEM_ENSURE)
		{
			e->create_inflight = false;
			if (e->released)
				sem_step(e);
			else if (rc == ZOK)
			{
				/* ours, with our number: its first version */
				ZKSEM(e)->pool_version = 0;
				ZKSEM(e)->version_known = true;
				e->step.sem = ZKSEM_LIST;
				sem_step(e);
			}
			else if (rc == ZNODEEXISTS)
			{
				char		pool[ZK_PATH_MAX];

				pool_path(e, pool, sizeof(pool));
				if (zoo_aget(zk_zh, pool, 0, pool_read, zk_ctx_of(e)) == ZOK)
					e->list_inflight = true;
				else
					zk_retry_later(e);
			}
			else if (rc == ZNONODE && !e->parents_tried)
			{
				/* a parent went since this session sent them: again */
				e->parents_tried = true;
				sem_step(e);
			}
			else
				retry_or_fail(e, rc);
		}
	}
	COMPLETION_END(e);
}

/*
 * ZKSEM_ENSURE: create the pool with max_leases as its data (its parents
 * first, without waiting); pool_created reads an existing pool's number.
 */
static void
send_ensure(ZkEntry *e)
{
	char		pool[ZK_PATH_MAX];
	char		max[16];
	char	   *p;
	int			rc;

	pool_path(e, pool, sizeof(pool));
	/*
	 * No number of our own (max_leases NULL), or the pool's changed while
	 * we waited: read it, never create it
	 */
	if (e->parties == 0 || ZKSEM(e)->adopt)
	{
		rc = zoo_aget(zk_zh, pool, 0, pool_read, zk_ctx_of(e));
		(void) zk_sent(e, rc, &e->list_inflight, "semaphore read");
		return;
	}
	/* once per session; again after a NONODE (pool_created) */
	if (parents_session != zk_cur_session || e->parents_tried)
	{
		for (p = pool + 1; *p; p++)
			if (*p == '/')
			{
				*p = '\0';
				/* the parents exist, or the pool's create says why not */
				zk_create_parent(pool, ZOO_PERSISTENT);
				*p = '/';
			}
		parents_session = zk_cur_session;
	}
	snprintf(max, sizeof(max), "%d", e->parties);
	rc = zoo_acreate(zk_zh, pool, max, strlen(max), zk_acl_path(pool),
					 ZOO_PERSISTENT, pool_created, zk_ctx_of(e));
	(void) zk_sent(e, rc, &e->create_inflight, "semaphore create");
}

/* ---- ZKSEM_LIST, ZKSEM_CREATE ---- */

/* Completion of the zoo_acreate2 sent by sem_step() */
static void
lease_created(int rc, const char *name, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->create_inflight && e->step.sem == ZKSEM_CREATE)
		{
			e->create_inflight = false;
			if (rc == ZOK || rc == ZNODEEXISTS)
			{
				e->token = (rc == ZOK && stat) ? stat->czxid : e->token;
				lease_landed(e);
				if (e->released)
					sem_step(e);	/* delete it */
				else
					zk_finish(e, ZKO_GRANTED, 0, NULL);
			}
			else if (rc == ZNONODE)
			{
				e->step.sem = ZKSEM_ENSURE;	/* the pool went: again from the top */
				sem_step(e);
			}
			else if (!zk_rc_definite(rc))
			{
				e->in_doubt = true;		/* look for it when usable again */
				e->step.sem = ZKSEM_LIST;
				zk_retry_later(e);
			}
			else
				fail_rc(e, rc);
		}
	}
	COMPLETION_END(e);
}

/*
 * Several permits: their leases in one multi of the batch, all or none.
 * The multi's operations point into a SemMulti of the worker's own, freed
 * with its answer (every request is answered, ZCLOSING when the session
 * is closed); its answer is the one lease_created gives a single lease
 * (ZNONODE: the pool went; ZNODEEXISTS: an earlier multi landed).
 */
typedef struct SemMulti
{
	const void *ectx;			/* the entry, as zk_ctx_of() gives it */
	zoo_op_t	ops[ZK_SEM_PERMITS_MAX];
	zoo_op_result_t res[ZK_SEM_PERMITS_MAX];
	char		data[ZKLOCK_DATA_MAX];
	char		paths[ZK_SEM_PERMITS_MAX][ZK_PATH_MAX];
} SemMulti;

static MemoryContext multi_cxt = NULL;

/* Completion of the multi sent by send_leases() */
static void
leases_created(int rc, const void *data)
{
	SemMulti   *m = (SemMulti *) data;
	const void *ectx = m->ectx;

	pfree(m);
	lease_created(rc, NULL, NULL, ectx);
}

static void
send_leases(ZkEntry *e)
{
	SemMulti   *m;
	int			k = permits_of(e);
	int			i;

	(void) ZK_LAZY_CONTEXT(multi_cxt, "zklock semaphore multis", ALLOCSET_SMALL_SIZES);
	m = MemoryContextAllocZero(multi_cxt, sizeof(SemMulti));
	m->ectx = zk_ctx_of(e);
	strlcpy(m->data, e->data, sizeof(m->data));
	for (i = 0; i < k; i++)
	{
		lease_path(e, i, m->paths[i], sizeof(m->paths[i]));
		zoo_create_op_init(&m->ops[i], m->paths[i], m->data, (int) strlen(m->data),
						   zk_acl_path(m->paths[i]), ZOO_EPHEMERAL, NULL, 0);
	}
	zk_batch_multi(k, m->ops, m->res, leases_created, m);
}

/*
 * zk_semaphore_set_max's write (ZKSEM_SETWRITE): the pool's data, at the
 * version it read (pool_version), so that a change in between is not
 * lost; when raising, a child made and deleted in the same multi, which
 * fires the child watch of whoever waits on the pool (a zklock waiter then
 * sees the version move and reads the new number; kazoo's lists again).
 * Its answer: GRANTED; BUSY when the pool changed or went meanwhile (the
 * backend reads again).
 */
typedef struct SemSet
{
	const void *ectx;
	zoo_op_t	ops[3];
	zoo_op_result_t res[3];
	char		value[16];
	char		pool[ZK_PATH_MAX];
	char		poke[ZK_PATH_MAX];
} SemSet;

static void
max_set(int rc, const void *data)
{
	SemSet	   *m = (SemSet *) data;
	const void *ectx = m->ectx;

	pfree(m);
	{
		ENTRY_COMPLETION_BEGIN(e, ectx)
		{
			if (e != NULL && e->create_inflight && e->step.sem == ZKSEM_SETWRITE)
			{
				e->create_inflight = false;
				if (e->released)
					sem_step(e);
				else if (rc == ZOK)
				{
					e->state = ZKE_DONE;
					zk_finish(e, ZKO_GRANTED, 0, NULL);
				}
				else if (rc == ZBADVERSION || rc == ZNONODE)
				{
					e->state = ZKE_DONE;
					zk_finish(e, ZKO_BUSY, 0, "The semaphore's pool changed meanwhile");
				}
				else if (!zk_rc_definite(rc))
				{
					/* it may have landed: the backend reads again */
					e->state = ZKE_DONE;
					zk_finish(e, ZKO_BUSY, 0, "The answer was lost");
				}
				else
					fail_rc(e, rc);
			}
		}
		COMPLETION_END(e);
	}
}

static void
send_set_max(ZkEntry *e)
{
	SemSet	   *m;
	int			n = 1;

	(void) ZK_LAZY_CONTEXT(multi_cxt, "zklock semaphore multis", ALLOCSET_SMALL_SIZES);
	m = MemoryContextAllocZero(multi_cxt, sizeof(SemSet));
	m->ectx = zk_ctx_of(e);
	pool_path(e, m->pool, sizeof(m->pool));
	snprintf(m->value, sizeof(m->value), "%d", e->parties);
	zoo_set_op_init(&m->ops[0], m->pool, m->value, (int) strlen(m->value),
					ZKSEM(e)->pool_version, NULL);
	if (ZKSEM(e)->raise)
	{
		snprintf(m->poke, sizeof(m->poke), "%s/max-leases-changed", m->pool);
		zoo_create_op_init(&m->ops[1], m->poke, NULL, -1, zk_acl_path(m->poke),
						   ZOO_PERSISTENT, NULL, 0);
		zoo_delete_op_init(&m->ops[2], m->poke, -1);
		n = 3;
	}
	zk_batch_multi(n, m->ops, m->res, max_set, m);
}

/*
 * Completion of the zoo_aget_children2 sent by sem_step(); the
 * zoo_awget_children2 sent by sem_step()
 */
static void
pool_listed(int rc, const struct String_vector *kids, const struct Stat *stat,
			const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->list_inflight && e->step.sem == ZKSEM_LIST)
		{
			char		pool[ZK_PATH_MAX];

			e->list_inflight = false;
			pool_path(e, pool, sizeof(pool));
			if (e->watch == ZKEW_PENDING)
			{
				e->watch = ZKEW_NONE;
				if (rc == ZOK)
					e->watch = ZKEW_SET;
				else
					(void) zk_watch_drop(pool);
			}
			if (e->released)
				sem_step(e);
			else if (rc == ZOK && stat && ZKSEM(e)->version_known &&
					 stat->version != ZKSEM(e)->pool_version)
			{
				/*
				 * max_leases changed (zk_semaphore_set_max) since it was
				 * read: read it again, and go by it (a waiter in line keeps
				 * its place; raising it lets it in at once).  A create of
				 * ours in doubt is looked for in the listing after that.
				 */
				unwatch(e);
				ZKSEM(e)->adopt = true;
				e->step.sem = ZKSEM_ENSURE;
				sem_step(e);
			}
			else if (rc == ZOK)
			{
				int			i;
				bool		ours = false;
				char		first[ZKLOCK_GUID_LEN + 1];

				/* the leases are created all at once: the first stands for all */
				lease_name(e, 0, first, sizeof(first));
				for (i = 0; kids && i < kids->count; i++)
					if (strcmp(kids->data[i], first) == 0)
						ours = true;
				if (ours)
				{
					/* an earlier create landed */
					unwatch(e);
					lease_landed(e);
					zk_finish(e, ZKO_GRANTED, 0, NULL);
				}
				else if ((kids ? kids->count : 0) + permits_of(e) <= e->parties)
				{
					unwatch(e);
					e->step.sem = ZKSEM_CREATE;
					sem_step(e);
				}
				else
				{
					/* until the watch fires; a try's owner stops waiting now */
					e->state = ZKE_WAITING;
					zk_wake_owner(e);
				}
			}
			else if (rc == ZNONODE)
			{
				e->step.sem = ZKSEM_ENSURE;
				sem_step(e);
			}
			else
				retry_or_fail(e, rc);
		}
	}
	COMPLETION_END(e);
}

/*
 * Completion of the zoo_aexists sent by pool_read(): a try counts the
 * pool's leases from its stat, without listing them (issue 35)
 */
static void
pool_counted(int rc, const struct Stat *stat, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->list_inflight && e->step.sem == ZKSEM_COUNT)
		{
			e->list_inflight = false;
			if (e->released)
				sem_step(e);
			else if (rc == ZOK || rc == ZNONODE)	/* no pool yet: all free */
			{
				e->state = ZKE_DONE;
				if (rc == ZOK && stat &&
					stat->numChildren + permits_of(e) > e->parties)
					zk_finish(e, ZKO_BUSY, 0, "Too few leases are free");
				else
					zk_finish(e, ZKO_GRANTED, 0, NULL);
			}
			else
				retry_or_fail(e, rc);
		}
	}
	COMPLETION_END(e);
}

/* ------------------------------------------------------------------------
 * Empty pools go, once quiet (issue 35)
 *
 * A pool is one node per name used, for ever, unless somebody deletes it;
 * kazoo never does.  But kazoo's Semaphore creates the pool once, at the
 * start of an acquisition, then takes the guard (<pool>-__lock__) and only
 * then lists the pool: a pool deleted in between fails that acquisition
 * with NoNodeError (the model saw it: a kazoo taker waiting on the guard
 * while zklock released the last lease and deleted the pool at once).  So
 * the pool is not deleted with the last lease but POOL_QUIET_MS later, and
 * only if nobody came meanwhile:
 *
 *	1. the last lease's delete answered: read the pool's stat; empty, its
 *	   pzxid (the zxid of that delete, or of a later change) is noted;
 *	2. POOL_QUIET_MS later: read the guard's stat: gone (its container was
 *	   reaped), or empty and its pzxid not past the pool's (no taker,
 *	   zklock's or kazoo's, queued on it since: a taker's first node on the
 *	   guard would raise its pzxid past the pool's; equal is the release's
 *	   own guard delete, which may share the multi of the lease's delete);
 *	3. read the pool's stat again: still empty, pzxid unchanged (no lease
 *	   came and went);
 *	4. delete it (ZooKeeper refuses if a lease came after all).
 *
 * A kazoo taker that made sure of the pool and has not yet put its node on
 * the guard at the very moment of 4 (a few milliseconds after a quiet
 * period) can still find the pool gone: doc/semaphores.md says so.  Every
 * step that finds somebody stops; the pool stays until the next zklock
 * release of it.  Worker-private; at most POOL_QUIET_MAX pools wait, at
 * most POOL_QUIET_INFLIGHT are being checked.
 * ------------------------------------------------------------------------
 */
#define POOL_QUIET_MS		2000
#define POOL_QUIET_MAX		10000
#define POOL_QUIET_INFLIGHT	64

typedef struct QuietPool
{
	char		pool[ZK_PATH_MAX];
	int64		pzxid;			/* the pool's, when it was found empty */
	TimestampTz due;
	uint64		session;		/* asked in this session */
} QuietPool;

static MemoryContext quiet_cxt = NULL;
static List *quiet_pools = NIL;	/* QuietPool *, waiting for their due time */
static int	quiet_inflight = 0;

/* Completion of the zoo_adelete of step 4: nothing to do (see above) */
static void
pool_deleted(int rc, const void *ctx)
{
}

/* a checked pool is done with (its check stopped, or its delete sent) */
static void
quiet_done(QuietPool *q)
{
	quiet_inflight--;
	pfree(q);
}

/* step 3's answer: still empty and unchanged: delete it (step 4) */
static void
quiet_pool_again(int rc, const struct Stat *stat, const void *ctx)
{
	DATA_COMPLETION_BEGIN(QuietPool, q, ctx)
	{
		if (rc == ZOK && stat && stat->numChildren == 0 && stat->pzxid == q->pzxid &&
			q->session == zk_cur_session && zk_session_usable())
			(void) zoo_adelete(zk_zh, q->pool, -1, pool_deleted, NULL);
		quiet_done(q);
	}
	NONE_COMPLETION_END;
}

/* step 2's answer: nobody on the guard since: read the pool again */
static void
quiet_guard_read(int rc, const struct Stat *stat, const void *ctx)
{
	DATA_COMPLETION_BEGIN(QuietPool, q, ctx)
	{
		bool		quiet = (rc == ZNONODE ||
							 (rc == ZOK && stat && stat->numChildren == 0 &&
							  stat->pzxid <= q->pzxid));

		if (quiet && q->session == zk_cur_session && zk_session_usable() &&
			zoo_aexists(zk_zh, q->pool, 0, quiet_pool_again, q) == ZOK)
			q = NULL;
		if (q != NULL)
			quiet_done(q);
	}
	NONE_COMPLETION_END;
}

/* step 1's answer: an empty pool waits POOL_QUIET_MS */
static void
quiet_pool_first(int rc, const struct Stat *stat, const void *ctx)
{
	DATA_COMPLETION_BEGIN(QuietPool, q, ctx)
	{
		quiet_inflight--;
		if (rc == ZOK && stat && stat->numChildren == 0 &&
			list_length(quiet_pools) < POOL_QUIET_MAX)
		{
			MemoryContext old = MemoryContextSwitchTo(quiet_cxt);

			q->pzxid = stat->pzxid;
			q->due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), POOL_QUIET_MS);
			quiet_pools = lappend(quiet_pools, q);
			MemoryContextSwitchTo(old);
		}
		else
			pfree(q);
	}
	NONE_COMPLETION_END;
}

/* The last lease of pool was deleted: step 1 */
static void
pool_maybe_quiet(const char *pool)
{
	QuietPool  *q;

	(void) ZK_LAZY_CONTEXT(quiet_cxt, "zklock semaphore pools", ALLOCSET_SMALL_SIZES);
	if (!zk_session_usable() || quiet_inflight >= POOL_QUIET_INFLIGHT ||
		list_length(quiet_pools) >= POOL_QUIET_MAX)
		return;					/* the pool stays; the next release tries */
	q = MemoryContextAllocZero(quiet_cxt, sizeof(QuietPool));
	strlcpy(q->pool, pool, sizeof(q->pool));
	q->session = zk_cur_session;
	if (zoo_aexists(zk_zh, q->pool, 0, quiet_pool_first, q) == ZOK)
		quiet_inflight++;
	else
		pfree(q);
}

/* Every turn the session is usable: check the pools that are due (step 2) */
static void
sem_pools_turn(void)
{
	ListCell   *lc;
	TimestampTz now;

	if (quiet_pools == NIL)
		return;
	now = GetCurrentTimestamp();
	foreach(lc, quiet_pools)
	{
		QuietPool  *q = (QuietPool *) lfirst(lc);
		char		guard[ZK_PATH_MAX];

		if (quiet_inflight >= POOL_QUIET_INFLIGHT)
			break;
		if (q->due > now)
			continue;
		quiet_pools = foreach_delete_current(quiet_pools, lc);
		snprintf(guard, sizeof(guard), "%s-__lock__", q->pool);
		if (q->session == zk_cur_session &&
			zoo_aexists(zk_zh, guard, 0, quiet_guard_read, q) == ZOK)
			quiet_inflight++;
		else
			pfree(q);
	}
}

/* The session ended: the pools waiting stay (their stats were this session's) */
static void
sem_pools_reset(void)
{
	list_free_deep(quiet_pools);
	quiet_pools = NIL;
	/* the checks in flight end with their session's answers (quiet_done) */
}

/*
 * Completion of the zoo_adelete sent by sem_step(), one per permit: the
 * last answer settles the release (a connection loss on any: all of them
 * again, ZNONODE being as good as ZOK)
 */
static void
lease_deleted(int rc, const void *ctx)
{
	ENTRY_COMPLETION_BEGIN(e, ctx)
	{
		if (e != NULL && e->delete_inflight)
		{
			ZkSemPart  *sp = ZKSEM(e);

			if (rc != ZOK && rc != ZNONODE)
				sp->delete_retry = true;
			if (sp->deletes_left > 0)
				sp->deletes_left--;
			if (sp->deletes_left == 0)
			{
				e->delete_inflight = false;
				if (!sp->delete_retry)
				{
					char		pool[ZK_PATH_MAX];

					/*
					 * The pool goes once quiet after its last lease ("Empty
					 * pools go, once quiet"); a zklock taker that finds it
					 * gone (ZNONODE) creates it again (lease_created,
					 * pool_listed).
					 */
					pool_path(e, pool, sizeof(pool));
					pool_maybe_quiet(pool);
					zk_count(ZKCNT_RELEASES, 1);
					zk_node_gone(e);
				}
				else
				{
					sp->delete_retry = false;
					zk_retry_later(e);	/* connection loss: delete again */
				}
			}
		}
	}
	COMPLETION_END(e);
}

/*
 * Drive a lease one step (also the kind's drive): a lease let go is
 * deleted if it is or may be there, else freed; otherwise the step in
 * step.sem is sent, once the session is usable.
 */
static void
sem_step(ZkEntry *e)
{
	char		path[ZK_PATH_MAX];
	int			rc;
	int			i;

	if (e->create_inflight || e->list_inflight || e->delete_inflight)
		return;					/* its completion steps on */
	if (e->released)
	{
		unwatch(e);
		/* ZKE_DELETING: a delete whose reply was lost may not have landed */
		if (e->state == ZKE_HELD || e->state == ZKE_DELETING || e->in_doubt)
		{
			if (!zk_session_usable())
			{
				zk_retry_later(e);
				return;
			}
			/* gathered with other writes (batch.c): nobody waits for them */
			ZKSEM(e)->deletes_left = permits_of(e);
			ZKSEM(e)->delete_retry = false;
			e->delete_inflight = true;
			e->state = ZKE_DELETING;
			for (i = 0; i < permits_of(e); i++)
			{
				lease_path(e, i, path, sizeof(path));
				zk_batch_delete(path, -1, lease_deleted, zk_ctx_of(e));
			}
			return;
		}
		zk_entry_free(e);
		return;
	}
	if (e->outcome != ZKO_NONE)
		return;
	if (!zk_session_usable())
	{
		zk_retry_later(e);
		return;
	}
	if (e->guid[0] == '\0')
		zk_make_guid(e, false);
	if (e->step.sem == 0)
		e->step.sem = ZKSEM_ENSURE;
	switch (e->step.sem)
	{
		case ZKSEM_ENSURE:
			e->state = ZKE_CREATING;
			send_ensure(e);
			break;
		case ZKSEM_LIST:
			pool_path(e, path, sizeof(path));
			if (e->watch != ZKEW_SET)
			{
				rc = zoo_awget_children2(zk_zh, path, zk_kind_watcher, (void *) zk_ctx_of(e),
										 pool_listed, zk_ctx_of(e));
				if (rc == ZOK)
				{
					zk_watch_set(path);
					e->watch = ZKEW_PENDING;
				}
			}
			else
				rc = zoo_aget_children2(zk_zh, path, 0, pool_listed, zk_ctx_of(e));
			(void) zk_sent(e, rc, &e->list_inflight, "semaphore list");
			break;
		case ZKSEM_COUNT:
			/* the pool's max_leases first (a wrong one is 22023 at once) */
			pool_path(e, path, sizeof(path));
			e->state = ZKE_CREATING;
			rc = zoo_aget(zk_zh, path, 0, pool_read, zk_ctx_of(e));
			(void) zk_sent(e, rc, &e->list_inflight, "semaphore count");
			break;
		case ZKSEM_SETREAD:
			pool_path(e, path, sizeof(path));
			e->state = ZKE_CREATING;
			rc = zoo_aget(zk_zh, path, 0, pool_read, zk_ctx_of(e));
			(void) zk_sent(e, rc, &e->list_inflight, "semaphore read");
			break;
		case ZKSEM_SETWRITE:
			e->state = ZKE_CREATING;
			send_set_max(e);
			e->create_inflight = true;
			break;
		case ZKSEM_CREATE:
			e->state = ZKE_CREATING;
			/*
			 * gathered with other writes (batch.c); a single lease's token
			 * is its czxid, and two leases of one pool never share a multi
			 * of the batch.  Only the guard's holder lists the pool, and
			 * the guard's delete follows this create in the batch, so no
			 * listing misses it.  Several permits: one multi of their
			 * leases, all or none (send_leases).
			 */
			if (permits_of(e) > 1)
				send_leases(e);
			else
			{
				lease_path(e, 0, path, sizeof(path));
				zk_batch_create(path, e->data, (int) strlen(e->data),
								ZOO_EPHEMERAL, lease_created, zk_ctx_of(e));
			}
			e->create_inflight = true;
			break;
	}
}

/*
 * A drive or completion threw: a lease let go is looked at again when the
 * session is usable (deleted if there), one not yet answered fails.
 */
static void
sem_drive_failed(ZkEntry *e)
{
	/* a create out may have landed: its node (named by the guid) is deleted */
	if (e->create_inflight && e->step.sem == ZKSEM_CREATE)
		e->in_doubt = true;
	e->create_inflight = e->list_inflight = e->delete_inflight = false;
	ZKSEM(e)->deletes_left = 0;
	if (e->released)
		zk_retry_later(e);		/* delete what may be there, when usable */
	else if (e->outcome == ZKO_NONE)
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "the zklock worker failed while taking a semaphore lease");
}

/*
 * The session ended and its ephemeral leases with it: a granted lease is
 * LOST (40001), one let go is freed, and a request not yet answered fails
 * (the guard went too: the backend starts over from it).
 */
static void
sem_session_lost(ZkEntry *e, const char *why)
{
	bool		creating = e->create_inflight && e->step.sem == ZKSEM_CREATE;

	e->create_inflight = e->list_inflight = e->delete_inflight = false;
	ZKSEM(e)->deletes_left = 0;
	e->watch = ZKEW_NONE;
	if (e->state == ZKE_HELD || e->state == ZKE_DELETING || creating || e->in_doubt)
	{
		/* an ephemeral lease goes with its session */
		e->node[0] = '\0';
		e->in_doubt = false;
		if (e->released)
		{
			zk_entry_free(e);
			return;
		}
		if (e->outcome == ZKO_GRANTED)
		{
			zk_count(ZKCNT_LOST, 1);
			e->state = ZKE_DONE;
			zk_finish(e, ZKO_LOST, ERRCODE_T_R_SERIALIZATION_FAILURE, why);
			return;
		}
	}
	if (e->released)
	{
		zk_entry_free(e);
		return;
	}
	if (e->outcome == ZKO_NONE)
	{
		/*
		 * The guard the backend holds went with the session too: counting
		 * and creating without it could exceed max_leases.  The backend
		 * fails the call; taking a lease starts over from the guard.
		 */
		e->state = ZKE_DONE;
		zk_fail(e, ERRCODE_CONNECTION_FAILURE,
				"The ZooKeeper session ended while the lease was being taken");
	}
}

/* the recipe's hooks into the worker: empty pools; its one kind (recipelist.h) */
const ZkRecipe zk_sem_recipe = {
	.session_reset = sem_pools_reset,
	.session_usable = sem_pools_turn,
};

const ZkKindOps zk_semlease_ops =
	ZK_KIND_OPS(sem_step, sem_drive_failed, sem_session_lost,
				.watch_fired = pool_changed);
