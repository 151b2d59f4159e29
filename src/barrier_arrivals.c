/*-------------------------------------------------------------------------
 *
 * barrier_arrivals.c
 *	  ZKK_BINFO: the one-off reads of arrivals: zk_arrivals lists an
 *	  arrivals node's children (bounded, copied into the answer) and
 *	  zk_arrivals_reset deletes them.
 *
 *	  Runs in the worker with zk_ctl->lock held.
 *
 *-------------------------------------------------------------------------
 */
#include "barrier_int.h"

#include "trust.h"
#include "queue.h"

#include "lib/stringinfo.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

/* ------------------------------------------------------------------------
 * ZKK_BINFO: list or reset arrivals
 * ------------------------------------------------------------------------
 */
typedef struct BInfo
{
	uint32		idx;
	uint32		gen;
	int			pending;
	int			count;
	bool		failed;
	StringInfoData rows;
	char		dir[ZK_PATH_MAX];
} BInfo;

/* The entry bi answers, or NULL if it was freed (and maybe reused) since */
static ZkEntry *
binfo_entry(BInfo *bi)
{
	ZkEntry    *e = zk_entry(bi->idx);

	return (e->gen == bi->gen && e->state != ZKE_FREE) ? e : NULL;
}

/*
 * All of bi's requests are answered: hand the rows to the owner in a dsa
 * answer, or start over if a read failed, or free the entry if it was let
 * go.  Frees bi.
 */
static void
binfo_finish(BInfo *bi)
{
	ZkEntry    *e = binfo_entry(bi);

	if (e != NULL)
	{
		e->list_inflight = false;
		if (e->released)
			zk_entry_free(e);
		else if (bi->failed)
			zk_retry_later(e);	/* all over again, when usable */
		else
		{
			dsa_area   *area = zk_dsa();
			Size		sz = sizeof(ZkAnswer) + bi->rows.len;
			dsa_pointer dp = dsa_allocate_extended(area, sz, DSA_ALLOC_NO_OOM);

			if (!DsaPointerIsValid(dp))
				zk_fail(e, ERRCODE_OUT_OF_MEMORY, "out of dynamic shared memory for the answer");
			else
			{
				ZkAnswer   *a = dsa_get_address(area, dp);

				a->count = bi->count;
				a->size = sz;
				memcpy((char *) a + sizeof(ZkAnswer), bi->rows.data, bi->rows.len);
				e->blob = dp;
				e->token = bi->count;
				e->state = ZKE_DONE;
				zk_finish(e, ZKO_GRANTED, 0, NULL);
			}
		}
	}
	pfree(bi->rows.data);
	pfree(bi);
}

/* One of bi's requests is answered; the last one finishes it */
static void
binfo_step_done(BInfo *bi)
{
	if (--bi->pending == 0)
		binfo_finish(bi);
}

typedef struct BInfoCall
{
	BInfo	   *bi;
	char		name[FLEXIBLE_ARRAY_MEMBER];	/* the child, as listed */
} BInfoCall;

/* Completion of the zoo_aget sent by binfo_listed() */
static void
binfo_got(int rc, const char *value, int value_len, const struct Stat *stat,
		  const void *data)
{
	ZkEntry    *volatile none = NULL;
	BInfoCall  *c = (BInfoCall *) data;

	COMPLETION_BEGIN
	{
		BInfo	   *bi = c->bi;

		if (rc == ZOK && stat)
		{
			ZkArrivalRec r;
			int			nl = strlen(c->name);
			int			dl = value ? Min(value_len, ZKLOCK_DATA_MAX * 2) : 0;

			r.ctime_ms = stat->ctime;
			r.namelen = nl;
			r.datalen = Max(dl, 0);
			appendBinaryStringInfo(&bi->rows, (char *) &r, sizeof(r));
			appendBinaryStringInfo(&bi->rows, c->name, nl);
			if (r.datalen > 0)
				appendBinaryStringInfo(&bi->rows, value, r.datalen);
			while (bi->rows.len % MAXIMUM_ALIGNOF)
				appendStringInfoChar(&bi->rows, '\0');
			bi->count++;
		}
		else if (rc != ZNONODE)
			bi->failed = true;
		pfree(c);
		binfo_step_done(bi);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_adelete sent by binfo_listed() */
static void
binfo_deleted(int rc, const void *data)
{
	ZkEntry    *volatile none = NULL;
	BInfoCall  *c = (BInfoCall *) data;

	COMPLETION_BEGIN
	{
		BInfo	   *bi = c->bi;

		if (rc == ZOK && c->name[0] != '\0')
			bi->count++;
		else if (rc != ZOK && rc != ZNONODE && c->name[0] != '\0')
			bi->failed = true;
		pfree(c);
		binfo_step_done(bi);
	}
	COMPLETION_END(none);
}

/* Completion of the zoo_aget_children sent by binfo_drive() */
static void
binfo_listed(int rc, const struct String_vector *sv, const void *data)
{
	ZkEntry    *volatile none = NULL;
	BInfo	   *bi = (BInfo *) data;

	COMPLETION_BEGIN
	{
		ZkEntry    *e = binfo_entry(bi);

		if ((rc == ZOK || rc == ZNONODE) && e != NULL && zk_session_usable())
		{
			int			i;
			bool		reset = (e->step.barrier == ZKB_RESET);

			bi->pending = 1;
			for (i = 0; rc == ZOK && sv && i < sv->count; i++)
			{
				size_t		nlen = strlen(sv->data[i]);
				BInfoCall  *c;
				char		path[ZK_PATH_MAX];
				int			src;

				/*
				 * Not a participant anyone arrived as through zklock (at
				 * most ZKLOCK_ENAME_MAX bytes): another client's node,
				 * whose path would not even fit.  Not ours to show or
				 * delete.
				 */
				if (nlen > ZKLOCK_ENAME_MAX)
					continue;
				c = MemoryContextAllocZero(zk_b_context(), offsetof(BInfoCall, name) + nlen + 1);

				c->bi = bi;
				memcpy(c->name, sv->data[i], nlen + 1);
				snprintf(path, sizeof(path), "%s/%s", bi->dir, sv->data[i]);
				if (reset)
					src = zoo_adelete(zk_zh, path, -1, binfo_deleted, c);
				else
					src = zoo_aget(zk_zh, path, 0, binfo_got, c);
				if (src == ZOK)
					bi->pending++;
				else
				{
					bi->failed = true;
					pfree(c);
				}
			}
			if (reset && rc == ZOK)
			{
				/* the node itself, once empty (not counted) */
				BInfoCall  *c = MemoryContextAllocZero(zk_b_context(), offsetof(BInfoCall, name) + 1);

				c->bi = bi;
				c->name[0] = '\0';
				if (zoo_adelete(zk_zh, bi->dir, -1, binfo_deleted, c) == ZOK)
					bi->pending++;
				else
					pfree(c);
			}
			binfo_step_done(bi);
		}
		else
		{
			bi->failed = !(e == NULL || zk_rc_definite(rc));
			if (e != NULL && !bi->failed)
			{
				/* a verdict: fail the request */
				e->list_inflight = false;
				if (e->released)
					zk_entry_free(e);
				else
					zk_fail(e, ERRCODE_CONNECTION_FAILURE, zerror(rc));
				e = NULL;
				pfree(bi->rows.data);
				pfree(bi);
			}
			else
				binfo_finish(bi);
		}
	}
	COMPLETION_END(none);
}

/*
 * A list reads every arrival; a reset deletes them one by one and then the
 * node itself (not counted; it fails harmlessly if one arrived meanwhile).
 */
static void
binfo_drive(ZkEntry *e)
{
	BInfo	   *bi;
	int			rc;

	if (e->list_inflight)
		return;
	if (e->released)
	{
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
	bi = MemoryContextAllocZero(zk_b_context(), sizeof(BInfo));
	bi->idx = zk_entry_index(e);
	bi->gen = e->gen;
	{
		MemoryContext old = MemoryContextSwitchTo(zk_b_context());

		initStringInfo(&bi->rows);
		MemoryContextSwitchTo(old);
	}
	zk_barrier_path("arrivals", e->name, bi->dir, sizeof(bi->dir));
	rc = zoo_aget_children(zk_zh, bi->dir, 0, binfo_listed, bi);
	if (rc == ZOK)
		e->list_inflight = true;
	else
	{
		pfree(bi->rows.data);
		pfree(bi);
		zk_retry_later(e);
	}
}

/* A drive of the read threw: fail it, or free it if it was let go */
static void
binfo_drive_failed(ZkEntry *e)
{
	e->list_inflight = false;
	if (e->released)
		zk_entry_free(e);
	else
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "the zklock worker failed while reading the arrivals");
}

/* The session ended: the read starts over when usable, unless answered */
void
zk_b_binfo_session_lost(ZkEntry *e, const char *why)
{
	/* its reads are void: their completions find list_inflight cleared */
	e->list_inflight = false;
	if (e->released)
		zk_entry_free(e);
	else if (e->outcome == ZKO_NONE)
		zk_retry_later(e);
}

const ZkKindOps zk_binfo_ops = {
	.drive = binfo_drive,
	.drive_failed = binfo_drive_failed,
	.session_lost = zk_b_binfo_session_lost,
};
