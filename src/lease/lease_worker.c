/*-------------------------------------------------------------------------
 *
 * lease_worker.c
 *	  The lease recipe's worker half (ZKK_LEASE): the two ZooKeeper steps
 *	  of kazoo's NonBlockingLease, taken while the backend holds the lease's
 *	  lock (a ZKK_LOCK entry of family ZKF_LEASES, driven by lock_worker.c).
 *
 *	  ZKL_READ	reads <root>/leases/<name>/lease_holder: its data go back
 *				in a ZkAnswer blob, its version in ZKLS(e)->version (-1 when
 *				there is none).
 *	  ZKL_WRITE	one multi: check that our lock node still exists, delete
 *				the holder node at the version read (unless there was
 *				none), create it with the backend's data (the blob).  The
 *				check makes a write of a lock lost with the session fail
 *				instead of overwriting a lease somebody else was given.
 *	  ZKL_DELETE	the same multi without the create (zk_lease_release).
 *
 *	  The backend decides (it parses the data and compares the times); the
 *	  worker only answers: GRANTED when done, BUSY when the holder changed
 *	  under us (a writer that does not take the lock) or the write's fate is
 *	  unknown after a connection loss (in_doubt set): the backend reads
 *	  again and decides again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "recipe.h"
#include "queue/queue.h"
#include "lock/lock.h"
#include "lease.h"

#include "utils/memutils.h"

#define LEASE_HOLDER	"lease_holder"

typedef struct LeaseCall
{
	const void *ectx;			/* its entry (zk_ctx_of; zk_entry_of) */
	zoo_op_t	ops[3];
	zoo_op_result_t res[3];
	int			nops;
	char		lock[ZK_PATH_MAX];
	char		holder[ZK_PATH_MAX];
	char	   *data;
	int			dlen;
} LeaseCall;

static MemoryContext lease_cxt = NULL;

/* The memory context of the lease requests in flight */
static MemoryContext
lease_context(void)
{
	return ZK_LAZY_CONTEXT(lease_cxt, "zklock leases", ALLOCSET_SMALL_SIZES);
}

/* Answer e's owner with outcome: the read or write is done */
static void
lease_answer(ZkEntry *e, ZkOutcome outcome)
{
	e->state = ZKE_DONE;
	zk_finish(e, outcome, 0, NULL);
}

/* Free a lease request's context */
static void
free_call(LeaseCall *c)
{
	zk_call_free(c, c->data);
}

/*
 * A completion's entry e (NULL once freed) waits for this answer: its read,
 * or its write when write, was in flight.  That flag is cleared; an entry
 * let go meanwhile is freed and waits for nothing.
 */
static bool
call_answered(ZkEntry *e, bool write)
{
	bool	   *inflight;

	if (e == NULL)
		return false;
	inflight = write ? &e->create_inflight : &e->list_inflight;
	if (!*inflight)
		return false;
	*inflight = false;
	if (e->released)
	{
		zk_entry_free(e);
		return false;
	}
	return true;
}

/* the answer of a read: the holder's data (none when it does not exist) */
static void
read_done(int rc, const char *value, int value_len, const struct Stat *stat,
		  const void *data)
{
	LeaseCall  *c = (LeaseCall *) data;

	ENTRY_COMPLETION_BEGIN(e, c->ectx)
	{
		if (call_answered(e, false))
		{
			if (rc == ZNONODE || (rc == ZOK && stat))
			{
				int			dl = (rc == ZOK && value) ? Max(value_len, 0) : 0;
				dsa_area   *area = zk_dsa();
				Size		sz = sizeof(ZkAnswer) + dl;
				dsa_pointer dp = dsa_allocate_extended(area, sz, DSA_ALLOC_NO_OOM);

				if (!DsaPointerIsValid(dp))
					zk_fail(e, ERRCODE_OUT_OF_MEMORY,
							"out of dynamic shared memory for the lease's data");
				else
				{
					ZkAnswer   *a = dsa_get_address(area, dp);

					a->count = (rc == ZOK) ? 1 : 0;
					a->size = sz;
					if (dl > 0)
						memcpy((char *) a + sizeof(ZkAnswer), value, dl);
					if (DsaPointerIsValid(e->blob))
						dsa_free(area, e->blob);
					e->blob = dp;
					ZKLS(e)->version = (rc == ZOK) ? stat->version : -1;
					e->token = (rc == ZOK) ? stat->czxid : 0;
					lease_answer(e, ZKO_GRANTED);
				}
			}
			else if (!zk_rc_definite(rc))
				zk_retry_later(e);	/* a read: simply again */
			else
				zk_fail_rc(e, rc, c->holder, ERRCODE_CONNECTION_FAILURE, zerror(rc));
		}
		free_call(c);
	}
	COMPLETION_END(e);
}

/* Completion of the zoo_amulti sent by lease_drive() */
static void
write_done(int rc, const void *data)
{
	LeaseCall  *c = (LeaseCall *) data;

	ENTRY_COMPLETION_BEGIN(e, c->ectx)
	{
		if (call_answered(e, true))
		{
			if (rc == ZOK)
			{
				lease_answer(e, ZKO_GRANTED);
			}
			else if (!zk_rc_definite(rc))
			{
				/* landed or not: the backend reads and compares */
				e->in_doubt = true;
				lease_answer(e, ZKO_BUSY);
			}
			else if (c->res[0].err != ZOK)
				zk_fail(e, ERRCODE_T_R_SERIALIZATION_FAILURE,
						"the lock that guards the lease was lost (its node is gone)");
			else if (rc == ZNONODE || rc == ZBADVERSION || rc == ZNODEEXISTS)
			{
				/* somebody changed the holder without the lock: decide again */
				lease_answer(e, ZKO_BUSY);
			}
			else
				zk_fail_rc(e, rc, c->holder, ERRCODE_CONNECTION_FAILURE, zerror(rc));
		}
		free_call(c);
	}
	COMPLETION_END(e);
}

/*
 * Send c's multi (a delete or a write, under the lease's lock).  Not sent:
 * nothing can have landed, so it is tried again when the session is usable
 * (zk_send_failed), or fails for a bad request.
 */
static void
send_write(ZkEntry *e, LeaseCall *c, const char *what)
{
	int			rc = zoo_amulti(zk_zh, c->nops, c->ops, c->res, write_done, c);

	if (rc == ZOK)
		e->create_inflight = true;
	else
	{
		free_call(c);
		(void) zk_send_failed(e, rc, what);
	}
}

/* Drive a lease entry: send its read or write, or free it once let go */
static void
lease_drive(ZkEntry *e)
{
	LeaseCall  *c;
	char		parent[ZK_PATH_MAX];
	int			rc;

	if (!zk_drive_opening(e, e->list_inflight || e->create_inflight))
		return;
	c = MemoryContextAllocZero(lease_context(), sizeof(LeaseCall));
	c->ectx = zk_ctx_of(e);
	zk_lock_parent(e->name, ZKF_LEASES, parent, sizeof(parent));
	snprintf(c->holder, sizeof(c->holder), "%s/%s", parent, LEASE_HOLDER);
	if (e->step.lease == ZKL_READ)
	{
		rc = zoo_aget(zk_zh, c->holder, 0, read_done, c);
		if (rc == ZOK)
			e->list_inflight = true;
		else
		{
			free_call(c);
			(void) zk_send_failed(e, rc, "lease read");
		}
		return;
	}

	/* ZKL_DELETE: check our lock, delete the holder at the version read */
	if (e->step.lease == ZKL_DELETE)
	{
		if (e->node[0] == '\0' || ZKLS(e)->version < 0)
		{
			free_call(c);
			zk_fail(e, ERRCODE_INTERNAL_ERROR, "a lease delete without lock or version");
			return;
		}
		snprintf(c->lock, sizeof(c->lock), "%s/%s", parent, e->node);
		zoo_check_op_init(&c->ops[c->nops++], c->lock, -1);
		zoo_delete_op_init(&c->ops[c->nops++], c->holder, ZKLS(e)->version);
		send_write(e, c, "lease delete");
		return;
	}

	/* ZKL_WRITE: the data from the backend's blob */
	if (!DsaPointerIsValid(e->blob) || e->node[0] == '\0')
	{
		free_call(c);
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "a lease write without data or lock");
		return;
	}
	{
		ZkAnswer   *a = dsa_get_address(zk_dsa(), e->blob);

		c->dlen = (int) (a->size - sizeof(ZkAnswer));
		c->data = MemoryContextAlloc(lease_context(), Max(c->dlen, 1));
		memcpy(c->data, (char *) a + sizeof(ZkAnswer), c->dlen);
	}
	snprintf(c->lock, sizeof(c->lock), "%s/%s", parent, e->node);
	zoo_check_op_init(&c->ops[c->nops++], c->lock, -1);
	if (ZKLS(e)->version >= 0)
		zoo_delete_op_init(&c->ops[c->nops++], c->holder, ZKLS(e)->version);
	zoo_create_op_init(&c->ops[c->nops++], c->holder, c->data, c->dlen,
					   zk_acl_path(c->holder), ZOO_PERSISTENT, NULL, 0);
	send_write(e, c, "lease write");
}

/*
 * e's requests in flight are void: their completions find the flags
 * cleared.  *was_writing: a write was among them.  True when e still waits
 * for an answer; an entry let go is freed.
 */
static bool
calls_void(ZkEntry *e, bool *was_writing)
{
	*was_writing = e->create_inflight;
	e->list_inflight = false;
	e->create_inflight = false;
	if (e->released)
	{
		zk_entry_free(e);
		return false;
	}
	return e->outcome == ZKO_NONE;
}

/*
 * An error while driving a lease entry: fail the request, or free it once
 * let go
 */
static void
lease_drive_failed(ZkEntry *e)
{
	bool		was_writing;

	if (!calls_void(e, &was_writing))
		return;
	if (was_writing)
		e->in_doubt = true;
	zk_fail(e, ERRCODE_INTERNAL_ERROR, "the zklock worker failed while handling a lease");
}

/*
 * The session ended: a read in flight is sent again; a write in flight is
 * in doubt and answered BUSY
 */
static void
lease_session_lost(ZkEntry *e, const char *why)
{
	bool		was_writing;

	if (!calls_void(e, &was_writing))
		return;
	if (was_writing)
	{
		e->in_doubt = true;
		lease_answer(e, ZKO_BUSY);
	}
	else
		zk_retry_later(e);
}

/*
 * The recipe's hooks into the worker: the cleanup of ended leases
 * (lease_sweep.c); its one kind (recipelist.h)
 */
const ZkRecipe zk_lease_recipe = {
	.reload = zk_lease_sweep_reload,
	.session_reset = zk_lease_sweep_reset,
	.session_usable = zk_lease_sweep_turn,
};

const ZkKindOps zk_lease_ops =
	ZK_KIND_OPS(lease_drive, lease_drive_failed, lease_session_lost);
