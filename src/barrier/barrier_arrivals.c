/*-------------------------------------------------------------------------
 *
 * barrier_arrivals.c
 *	  ZKK_BINFO: the one-off reads of arrivals: zk_arrivals lists an
 *	  arrivals node's children and reads them, a window at a time, within
 *	  zklock.max_children and zklock.max_answer_bytes, and
 *	  zk_arrivals_reset deletes them.
 *
 *	  Runs in the worker with zk_ctl->lock held.
 *
 *-------------------------------------------------------------------------
 */
#include "barrier_int.h"

#include "trust.h"
#include "queue/queue.h"

#include "lib/stringinfo.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

/* ------------------------------------------------------------------------
 * ZKK_BINFO: list or reset arrivals
 *
 * Bounded fan-out (issue 35; src/README, section 6, "Windows").  A role
 * that may arrive can leave tens of thousands of arrivals under one name,
 * and one read of every child sent at once made ZooKeeper queue every
 * answer (a 256 MB server ran out of memory at 60,000) and the worker hold
 * them all.  So a read or reset:
 *
 *	1. reads the arrivals node's stat (an exists): more children than
 *	   zklock.max_children fails with 54000 before anything is listed;
 *	2. lists the children (at most that many names, copied);
 *	3. reads (list) or deletes (reset) them ZK_READ_WINDOW at a time (a
 *	   list at most ZK_READ_INFLIGHT_BYTES of them, zk_read_window),
 *	   sending the next as answers come back; a list stops, and fails with
 *	   54000, once its rows would exceed the caller's
 *	   zklock.max_answer_bytes (answer_cap); a reset deletes the node
 *	   itself once every child's delete is answered.
 *
 * Everything a read holds lives in a memory context of its own, deleted
 * when its last request is answered, so the worker's memory comes back.
 * The entry is the read's only while e->outstanding is its number and
 * list_inflight is set: a lost session or a retry leaves the old read to
 * drain its answers and free itself.
 * ------------------------------------------------------------------------
 */
typedef struct BInfo
{
	MemoryContext cxt;			/* holds the BInfo and all it points to */
	uint32		idx;
	uint32		gen;
	int			seq;			/* e->outstanding while it is e's read */
	int			pending;		/* requests out (+1 while a step runs) */
	int			count;
	int			kids;			/* reset: arrivals whose delete is out */
	bool		reset;
	bool		failed;			/* a read failed: start over */
	bool		sending;		/* names left to send */
	bool		over;			/* 54000: msg says why */
	bool		blocked;		/* reset: an arrival kept a node under it */
	char		blocked_name[41];	/* (its name, cut to fit errmsg) */
	Size		cap;			/* zklock.max_answer_bytes of the caller */
	bool		answered;		/* a read has answered (zk_read_window) */
	Size		largest;		/* the largest data read so far */
	char	  **names;
	int			nnames;
	int			next;
	StringInfoData rows;
	char		msg[ZKLOCK_ERRMSG_MAX];
	char		dir[ZK_PATH_MAX];
} BInfo;

static int	binfo_seq = 0;

static void binfo_send_more(BInfo *bi);
static void reset_blocked(ZkEntry *e, BInfo *bi);
static void reset_wait_forget(ZkEntry *e);

/* The entry bi answers, or NULL if it was freed, retried or let go of it */
static ZkEntry *
binfo_entry(BInfo *bi)
{
	ZkEntry    *e = zk_entry(bi->idx);

	return (e->gen == bi->gen && e->state != ZKE_FREE && e->list_inflight &&
			e->outstanding == bi->seq) ? e : NULL;
}

/*
 * All of bi's requests are answered: hand the rows to the owner in a dsa
 * answer, fail it (54000, or a verdict), start over if a read failed, or
 * free the entry if it was let go.  Frees bi.
 */
static void
binfo_finish(BInfo *bi)
{
	ZkEntry    *e = binfo_entry(bi);

	if (e != NULL)
	{
		e->list_inflight = false;
		e->outstanding = 0;
		/* a reset's count is of every round (a round starts over at 0) */
		if (bi->reset && !e->released)
			e->token += bi->count;
		if (!bi->failed || bi->over || e->released || !bi->blocked)
			reset_wait_forget(e);
		if (e->released)
			zk_entry_free(e);
		else if (bi->over)
			zk_fail(e, ERRCODE_PROGRAM_LIMIT_EXCEEDED, bi->msg);
		else if (bi->failed && bi->reset && bi->blocked)
			reset_blocked(e, bi);	/* again after a pause, or give up */
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
				if (!bi->reset)
					e->token = bi->count;
				e->state = ZKE_DONE;
				zk_finish(e, ZKO_GRANTED, 0, NULL);
			}
		}
	}
	MemoryContextDelete(bi->cxt);
}

/* How many reads (or deletes, which carry nothing back) bi may have out */
static int
binfo_window(BInfo *bi)
{
	return bi->reset ? ZK_READ_WINDOW : zk_read_window(bi->answered, bi->largest);
}

/* One of bi's requests is answered: send more, or finish with the last */
static void
binfo_step_done(BInfo *bi)
{
	ZkEntry    *e = binfo_entry(bi);

	/* a long read: each answer tells the waiting backend it goes on */
	if (e != NULL)
		e->answered_at = GetCurrentTimestamp();
	bi->pending--;
	if (bi->sending && bi->pending < binfo_window(bi))
		binfo_send_more(bi);
	if (bi->pending == 0)
		binfo_finish(bi);
}

/* Stop sending; the answers out still come back */
static void
binfo_stop(BInfo *bi, bool failed)
{
	bi->sending = false;
	if (failed)
		bi->failed = true;
}

typedef struct BInfoCall
{
	BInfo	   *bi;
	/* a reset's: its node under the arrival, and the multi */
	char		path[ZK_PATH_MAX];
	char		guard[ZK_PATH_MAX];
	zoo_op_t	ops[2];
	zoo_op_result_t res[2];
	char		name[FLEXIBLE_ARRAY_MEMBER];	/* the child, as listed */
} BInfoCall;

/*
 * c, one of a BInfo's requests, is answered: free it, and step its BInfo
 * on (binfo_step_done)
 */
static void
binfo_call_done(BInfoCall *c)
{
	BInfo	   *bi = c->bi;

	pfree(c);
	binfo_step_done(bi);
}

/* ------------------------------------------------------------------------
 * Late deletes of arrivals (issue 36)
 *
 * ZooKeeper applies a request that a follower has already forwarded to its
 * leader even after the client closed or gave up its session (a change of
 * zklock.hosts, the worker's exit, a session given up; how-it-works.md,
 * "Requests of a session that ended").  An arrival is the same path every
 * time its participant arrives: a plain delete of it that lands late, after
 * the reset ran again in the next session and the participant arrived
 * anew, would remove that new arrival.  So a reset deletes an arrival in
 * two steps: it creates a node of its own under it, ephemeral and named
 * after the session and a number never used again (reset-<session>-<n>),
 * and once that create is answered, one multi deletes that node and the
 * arrival.  A new arrival has no such node, so a late multi fails on it and
 * deletes nothing.  A create that lands late leaves an ephemeral node of
 * the old session under the new arrival, gone with that session's close
 * (its multi was never sent); meanwhile a reset's multi finds the arrival
 * not empty and the reset runs again (as it does when another client keeps
 * a node there), deleting its own node first.
 * ------------------------------------------------------------------------
 */
static uint32 reset_guard_seq = 0;

/* Completion of a zoo_adelete whose answer nobody needs */
static void
binfo_ignore(int rc, const void *data)
{
}

/* Completion of the zoo_aget sent by binfo_send_more() */
static void
binfo_got(int rc, const char *value, int value_len, const struct Stat *stat,
		  const void *data)
{
	CALL_COMPLETION_BEGIN(BInfoCall, c, BInfo, bi, bi, data)
	{
		bi->answered = true;
		if (rc == ZOK && value_len > 0)
			bi->largest = Max(bi->largest, (Size) value_len);
		if (rc == ZOK && stat && !bi->over && !bi->failed)
		{
			ZkArrivalRec r;
			int			nl = strlen(c->name);
			int			dl = value ? Min(value_len, ZKLOCK_DATA_MAX * 2) : 0;
			Size		need = MAXALIGN(sizeof(r) + nl + Max(dl, 0));

			if (bi->cap > 0 && sizeof(ZkAnswer) + bi->rows.len + need > bi->cap)
			{
				/* no more: the answer would be larger than the caller allows */
				snprintf(bi->msg, sizeof(bi->msg),
						 "The arrivals would take more than zklock.max_answer_bytes (%zu kB) after %d of them",
						 bi->cap / 1024, bi->count);
				bi->over = true;
				binfo_stop(bi, false);
			}
			else
			{
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
		}
		else if (rc != ZOK && rc != ZNONODE)
			binfo_stop(bi, true);
		binfo_call_done(c);
	}
	NONE_COMPLETION_END;
}

/*
 * Completion of the zoo_amulti sent by reset_guard_made() (an arrival and
 * the reset's node under it) and of the zoo_adelete of the arrivals node
 * sent by binfo_send_more() (name empty)
 */
static void
binfo_deleted(int rc, const void *data)
{
	CALL_COMPLETION_BEGIN(BInfoCall, c, BInfo, bi, bi, data)
	{
		if (c->name[0] != '\0')
			bi->kids--;
		if (rc == ZOK && c->name[0] != '\0')
			bi->count++;
		else if (rc == ZNOTEMPTY && c->name[0] != '\0')
		{
			/* another node under it (a late create, another client's) */
			if (zk_session_usable())
				(void) zoo_adelete(zk_zh, c->guard, -1, binfo_ignore, NULL);
			if (!bi->blocked)
				strlcpy(bi->blocked_name, c->name, sizeof(bi->blocked_name));
			bi->blocked = true;
			binfo_stop(bi, true);
		}
		else if (rc != ZOK && rc != ZNONODE && c->name[0] != '\0')
			binfo_stop(bi, true);
		binfo_call_done(c);
	}
	NONE_COMPLETION_END;
}

/*
 * Completion of the zoo_acreate sent by binfo_send_more(): the reset's
 * node is under the arrival; delete both in one multi ("Late deletes of
 * arrivals").  No arrival (ZNONODE): gone already, not counted.
 */
static void
reset_guard_made(int rc, const char *value, const void *data)
{
	CALL_COMPLETION_BEGIN(BInfoCall, c, BInfo, bi, bi, data)
	{
		bool		sent = false;

		if (rc == ZOK && binfo_entry(bi) != NULL && zk_session_usable())
		{
			zoo_delete_op_init(&c->ops[0], c->guard, -1);
			zoo_delete_op_init(&c->ops[1], c->path, -1);
			sent = (zoo_amulti(zk_zh, 2, c->ops, c->res, binfo_deleted, c) == ZOK);
		}
		else if (rc == ZNOAUTH && binfo_entry(bi) != NULL && zk_session_usable())
		{
			/*
			 * Another client's arrival that zklock may not create under:
			 * deleted by name, as before (its parent lets zklock delete)
			 */
			sent = (zoo_adelete(zk_zh, c->path, -1, binfo_deleted, c) == ZOK);
		}
		if (!sent)
		{
			if (rc == ZOK)
			{
				/* let go of, or not sent: its node goes now */
				if (zk_session_usable())
					(void) zoo_adelete(zk_zh, c->guard, -1, binfo_ignore, NULL);
				binfo_stop(bi, true);
			}
			else if (rc != ZNONODE)
				binfo_stop(bi, true);
			bi->kids--;
			binfo_call_done(c);
		}
	}
	NONE_COMPLETION_END;
}

/*
 * Send the next reads or deletes of the listed arrivals, until
 * ZK_READ_WINDOW are out; a reset sends the node's own delete (not
 * counted; it fails harmlessly if one arrived meanwhile) after the last.
 * Stops when the entry was let go or the session is not usable.
 */
static void
binfo_send_more(BInfo *bi)
{
	ZkEntry    *e = binfo_entry(bi);

	if (e == NULL || e->released || !zk_session_usable())
	{
		binfo_stop(bi, true);
		return;
	}
	while (bi->sending && bi->pending < binfo_window(bi))
	{
		BInfoCall  *c;
		const char *name;
		char		path[ZK_PATH_MAX];
		int			rc;

		if (bi->next >= bi->nnames)
		{
			if (bi->reset && bi->kids > 0)
				break;			/* the node's delete waits for theirs */
			bi->sending = false;
			if (!bi->reset)
				break;
			/* the node itself, once empty (not counted) */
			c = MemoryContextAllocZero(bi->cxt, offsetof(BInfoCall, name) + 1);
			c->bi = bi;
			if (zoo_adelete(zk_zh, bi->dir, -1, binfo_deleted, c) == ZOK)
				bi->pending++;
			else
				pfree(c);
			break;
		}
		name = bi->names[bi->next++];
		c = MemoryContextAllocZero(bi->cxt, offsetof(BInfoCall, name) + strlen(name) + 1);
		c->bi = bi;
		strcpy(c->name, name);
		snprintf(path, sizeof(path), "%s/%s", bi->dir, name);
		if (bi->reset)
		{
			/* its node first ("Late deletes of arrivals") */
			if (++reset_guard_seq == 0)
				reset_guard_seq = 1;
			strlcpy(c->path, path, sizeof(c->path));
			snprintf(c->guard, sizeof(c->guard), "%s/reset-%016llx-%u", path,
					 (unsigned long long) zk_cur_session, reset_guard_seq);
			rc = zoo_acreate(zk_zh, c->guard, NULL, -1, zk_acl_path(c->guard),
							 ZOO_EPHEMERAL, reset_guard_made, c);
			if (rc == ZOK)
				bi->kids++;
		}
		else
			rc = zoo_aget(zk_zh, path, 0, binfo_got, c);
		if (rc != ZOK)
		{
			pfree(c);
			binfo_stop(bi, true);
			break;
		}
		bi->pending++;
	}
}

/*
 * A verdict on the arrivals node (not a connection problem): fail the
 * read with it, or free the entry if it was let go.  Frees bi.
 */
static void
binfo_verdict(BInfo *bi, ZkEntry *e, int rc)
{
	e->list_inflight = false;
	e->outstanding = 0;
	if (e->released)
		zk_entry_free(e);
	else
		zk_fail_rc(e, rc, bi->dir, ERRCODE_CONNECTION_FAILURE, zerror(rc));
	MemoryContextDelete(bi->cxt);
}

/* Completion of the zoo_aget_children sent by binfo_counted() */
static void
binfo_listed(int rc, const struct String_vector *sv, const void *data)
{
	DATA_COMPLETION_BEGIN(BInfo, bi, data)
	{
		ZkEntry    *e = binfo_entry(bi);

		if ((rc == ZOK || rc == ZNONODE) && e != NULL && zk_session_usable())
		{
			int			i;
			int			n = (rc == ZOK && sv) ? sv->count : 0;

			/* it grew past the bound since its stat was read */
			if (n > zk_max_children)
			{
				struct Stat st;

				memset(&st, 0, sizeof(st));
				st.numChildren = n;
				(void) zk_children_over(&st, "The arrivals", bi->msg, sizeof(bi->msg));
				bi->over = true;
				n = 0;
			}
			bi->names = n > 0 ? MemoryContextAlloc(bi->cxt, sizeof(char *) * n) : NULL;
			for (i = 0; i < n; i++)
			{
				/*
				 * Not a participant anyone arrived as through zklock (at
				 * most ZKLOCK_ENAME_MAX bytes): another client's node,
				 * whose path would not even fit.  Not ours to show or
				 * delete.
				 */
				if (strlen(sv->data[i]) > ZKLOCK_ENAME_MAX)
					continue;
				bi->names[bi->nnames++] = MemoryContextStrdup(bi->cxt, sv->data[i]);
			}
			/* a node already gone: nothing to read or delete, not even it */
			bi->sending = (rc == ZOK && !bi->over);
			binfo_send_more(bi);
			binfo_step_done(bi);
		}
		else if (e != NULL && zk_rc_definite(rc) && rc != ZOK)
			binfo_verdict(bi, e, rc);
		else
		{
			bi->failed = true;
			binfo_step_done(bi);
		}
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aexists sent by binfo_drive() */
static void
binfo_counted(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(BInfo, bi, data)
	{
		ZkEntry    *e = binfo_entry(bi);

		if (e == NULL || e->released || !zk_session_usable())
		{
			bi->failed = true;
			binfo_step_done(bi);
		}
		else if (rc == ZNONODE)
			binfo_step_done(bi);	/* nobody arrived: no rows, nothing deleted */
		else if (rc == ZOK && zk_children_over(stat, "The arrivals", bi->msg, sizeof(bi->msg)))
		{
			bi->over = true;
			binfo_step_done(bi);
		}
		else if (rc == ZOK)
		{
			if (zoo_aget_children(zk_zh, bi->dir, 0, binfo_listed, bi) != ZOK)
			{
				bi->failed = true;
				binfo_step_done(bi);
			}
			/* else the listing's answer takes this step's place */
		}
		else if (zk_rc_definite(rc))
			binfo_verdict(bi, e, rc);
		else
		{
			bi->failed = true;
			binfo_step_done(bi);
		}
	}
	NONE_COMPLETION_END;
}

/*
 * A reset that found an arrival with a node under it that is not its own
 * runs again, but not at once: a late create of an ended session's node
 * goes only with that session (up to its timeout), and another client's
 * node stays until somebody deletes it, so running again every turn would
 * write to ZooKeeper as fast as it answers.  The entry waits
 * RESET_PAUSE_MS (the next turn after that) between rounds, and once
 * rounds have been blocked for twice the session timeout (at least
 * RESET_GIVE_UP_MIN_MS) the reset fails with 55006, naming the arrival;
 * the arrivals it deleted stay deleted (its count is lost with the
 * error).  Worker-private; an entry freed or reused meanwhile is dropped
 * (its generation).
 */
#define RESET_PAUSE_MS			250
#define RESET_GIVE_UP_MIN_MS	5000

typedef struct ResetWait
{
	ZkEntryRef	ref;			/* the reset's entry (first) */
	TimestampTz since;			/* the first blocked round */
	TimestampTz due;			/* 0: running, else when to run again */
} ResetWait;

static List *reset_waits = NIL;

static ResetWait *
reset_wait_find(ZkEntry *e)
{
	return (ResetWait *) zk_entry_ref_find(reset_waits, e);
}

static void
reset_wait_forget(ZkEntry *e)
{
	ResetWait  *w = reset_wait_find(e);

	if (w != NULL)
	{
		reset_waits = list_delete_ptr(reset_waits, w);
		pfree(w);
	}
}

static void
reset_blocked(ZkEntry *e, BInfo *bi)
{
	TimestampTz now = GetCurrentTimestamp();
	ResetWait  *w = reset_wait_find(e);
	long		give_up_ms = Max(2L * zk_ctl->session_timeout, RESET_GIVE_UP_MIN_MS);

	if (w == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(zk_b_context());

		w = palloc0(sizeof(ResetWait));
		zk_entry_ref_set(&w->ref, e);
		w->since = now;
		reset_waits = lappend(reset_waits, w);
		MemoryContextSwitchTo(old);
	}
	if (now >= TimestampTzPlusMilliseconds(w->since, give_up_ms))
	{
		char		msg[ZKLOCK_ERRMSG_MAX];

		snprintf(msg, sizeof(msg),
				 "Arrival \"%s\" kept a node under it that the reset did not make for %ld s; the other arrivals were deleted",
				 bi->blocked_name, give_up_ms / 1000);
		reset_wait_forget(e);
		elog(LOG, "zklock: zk_arrivals_reset of %s gave up: %s", bi->dir, msg);
		zk_fail(e, ERRCODE_OBJECT_IN_USE, msg);
		return;
	}
	w->due = TimestampTzPlusMilliseconds(now, RESET_PAUSE_MS);
}

/* Every turn the session is usable: run the paused resets that are due */
static void
b_binfo_turn(void)
{
	ListCell   *lc;
	TimestampTz now;

	if (reset_waits == NIL)
		return;
	now = GetCurrentTimestamp();
	foreach(lc, reset_waits)
	{
		ResetWait  *w = lfirst(lc);
		ZkEntry    *e = zk_entry(w->ref.idx);

		if (e->gen != w->ref.gen || e->state == ZKE_FREE)
		{
			reset_waits = foreach_delete_current(reset_waits, lc);
			pfree(w);
			continue;
		}
		if (w->due != 0 && now >= w->due)
		{
			w->due = 0;
			if (e->outcome == ZKO_NONE && !e->list_inflight)
				zk_retry_later(e);
		}
	}
}

/*
 * A list reads every arrival, a reset deletes them: first the node's stat,
 * then its listing, then the reads or deletes, a window at a time.
 */
static void
binfo_drive(ZkEntry *e)
{
	BInfo	   *bi;
	MemoryContext cxt;

	if (!zk_drive_opening(e, e->list_inflight))
		return;
	cxt = AllocSetContextCreate(zk_b_context(), "zklock arrivals read",
								ALLOCSET_DEFAULT_SIZES);
	bi = MemoryContextAllocZero(cxt, sizeof(BInfo));
	bi->cxt = cxt;
	bi->idx = zk_entry_index(e);
	bi->gen = e->gen;
	bi->reset = (e->step.barrier == ZKB_RESET);
	bi->cap = (Size) e->answer_cap;
	if (++binfo_seq <= 0)
		binfo_seq = 1;
	bi->seq = binfo_seq;
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);

		initStringInfo(&bi->rows);
		MemoryContextSwitchTo(old);
	}
	zk_barrier_path("arrivals", e->name, bi->dir, sizeof(bi->dir));
	bi->pending = 1;			/* the stat, then the listing */
	if (zoo_aexists(zk_zh, bi->dir, 0, binfo_counted, bi) == ZOK)
	{
		e->list_inflight = true;
		e->outstanding = bi->seq;
	}
	else
	{
		MemoryContextDelete(cxt);
		zk_retry_later(e);
	}
}

/* A drive of the read threw: fail it, or free it if it was let go */
static void
binfo_drive_failed(ZkEntry *e)
{
	e->list_inflight = false;
	e->outstanding = 0;
	if (e->released)
		zk_entry_free(e);
	else
		zk_fail(e, ERRCODE_INTERNAL_ERROR, "the zklock worker failed while reading the arrivals");
}

/* The session ended: the read starts over when usable, unless answered */
static void
b_binfo_session_lost(ZkEntry *e, const char *why)
{
	/* its reads are void: their completions find list_inflight cleared */
	e->list_inflight = false;
	e->outstanding = 0;
	if (e->released)
		zk_entry_free(e);
	else if (e->outcome == ZKO_NONE)
		zk_retry_later(e);
}

/*
 * A read of arrivals (a previous worker's read or reset: as if its session
 * had ended); its turn resets the reads paused
 */
const ZkKindOps zk_binfo_ops =
	ZK_KIND_OPS(binfo_drive, binfo_drive_failed, b_binfo_session_lost,
				.adopt = zk_adopt_as_lost,
				.turn = b_binfo_turn);
