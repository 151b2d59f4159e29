/*-------------------------------------------------------------------------
 *
 * counter_worker.c
 *	  The counter recipe's worker half (ZKK_COUNTER): kazoo's Counter, read
 *	  and written with a version, the adds of this cluster's backends on
 *	  one counter combined into one write.
 *
 *	  Per counter the worker keeps a CState (its memory, never shared
 *	  memory): the requests waiting, the round in progress, what it last
 *	  knew of the node, and the write in flight.  A round:
 *
 *		IDLE --kick--> READING --answer--> plan (every round reads first:
 *			a node deleted and created again restarts at version 0, so
 *			what our last write left is no ground for the next one)
 *		plan: in arrival order, gets are answered with the value read;
 *			adds are summed (each one's result is the value plus the
 *			deltas up to its own; one past bigint's range fails with
 *			22003 and is not written) until a set or a drop, which goes
 *			alone; the rest waits for the next round.  One versioned
 *			write (set, or create when there is no node; a drop's delete)
 *			--> WRITING
 *		WRITING --ZOK--> answered, IDLE
 *		WRITING --ZBADVERSION, ZNODEEXISTS, ZNONODE: another client
 *			changed it--> IDLE, the same members read again (each counts
 *			the round: ZK_COUNTER_ROUNDS fail with 40001)
 *		WRITING --connection lost, session ended--> IDLE, in doubt
 *		any --session reset--> IDLE (a write in flight: in doubt)
 *
 *	  In doubt the round's members stay as they are and nobody joins: the
 *	  next read decides.  The node as the write would leave it (the
 *	  version one past the one written at, the data ours) means it landed
 *	  or that another client wrote the same value at that version: the
 *	  members fail with 08006 (no node for a drop: it landed); the node as
 *	  it was (same version) means it has not, and the same write is sent again -- with the same version, so at
 *	  most one of the two copies can land, and a late copy of an ended
 *	  session (DESIGN, "Fallible, old sessions") can never land once the
 *	  version moved; the next version with other data means another
 *	  client's write took the version ours was for, so ours can never
 *	  land, and the round is planned again from what was read.  Past that
 *	  version nobody can tell whether ours landed in between: the members
 *	  fail with 08006 ("may or may not have been applied"), nothing is
 *	  written again (it could count them twice).
 *
 *	  Members are named by entry and generation (ZkEntryRef): a member let
 *	  go while its write is in flight is answered (freed) when that write
 *	  is, any other at once.  Bounds: a round takes at most
 *	  COUNTER_ROUND_MAX requests; the data of a node is judged on at most
 *	  ZK_COUNTER_SCAN_MAX bytes; a counter idle for COUNTER_FORGET_MS is
 *	  forgotten.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "recipe.h"
#include "counter.h"

#include "common/int.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#define COUNTER_ROUND_MAX	1024	/* requests one round takes in */
#define COUNTER_FORGET_MS	10000	/* an idle counter's state is forgotten */

typedef enum CPhase
{
	CP_IDLE = 0,
	CP_READING,					/* a read of the node in flight */
	CP_WRITING					/* the round's write in flight */
} CPhase;

typedef enum CWrite
{
	CW_SET = 1,					/* setData at the version read */
	CW_CREATE,					/* create: there was no node */
	CW_DELETE					/* delete at the version read (a drop) */
} CWrite;

/* a request in a counter's lists */
typedef struct CMember
{
	ZkEntryRef	ref;
	int64		result;			/* an add's value once its round is written */
} CMember;

typedef struct CState
{
	char		name[ZKLOCK_QNAME_MAX + 1]; /* hash key: the qualified name */
	char		path[ZK_PATH_MAX];
	uint8		phase;			/* CPhase */
	uint64		call;			/* the call in flight (0: none); answers of
								 * any other are void */
	List	   *waiting;		/* CMember *, not in a round yet */
	List	   *round;			/* CMember *, the round's (after the plan:
								 * the write's members) */

	/* the node, as last read or written by us */
	bool		exists;
	int64		value;
	int32		version;

	/* the round's write: what it does and what it leaves */
	uint8		wop;			/* CWrite */
	bool		doubt;			/* sent, fate unknown */
	int32		sent_version;	/* written at (set, delete) */
	int64		target;			/* the value it writes */
	bool		parents;		/* send the parents before the create */
	bool		parents_tried;
	TimestampTz last_used;
	ZkProgress	progress;
} CState;

typedef struct CCall
{
	char		name[ZKLOCK_QNAME_MAX + 1];
	uint64		call;
	char		data[ZK_COUNTER_DATA_MAX + 1];
} CCall;

/* worker-private: the counters' states, by qualified name */
static MemoryContext counter_cxt = NULL;
static HTAB *counters = NULL;
static uint64 call_seq = 0;
static bool kicks_pending = false;
static uint64 parents_session = 0;
static TimestampTz last_forget = 0;

/* The memory context of the counters' states and calls */
static MemoryContext
counter_context(void)
{
	return ZK_LAZY_CONTEXT(counter_cxt, "zklock counters", ALLOCSET_SMALL_SIZES);
}

/* The state of the counter named qname; created when create */
static CState *
counter_state(const char *qname, bool create)
{
	CState	   *cs;
	bool		found;

	if (counters == NULL)
	{
		if (!create)
			return NULL;
		counters = zk_hash_create("zklock counters", 64, ZKLOCK_QNAME_MAX + 1,
								  sizeof(CState), true, counter_context());
	}
	cs = hash_search(counters, qname, create ? HASH_ENTER : HASH_FIND, &found);
	if (cs != NULL && !found)
	{
		char		name[ZKLOCK_QNAME_MAX + 1];

		strlcpy(name, qname, sizeof(name));
		memset(cs, 0, sizeof(CState));
		strlcpy(cs->name, name, sizeof(cs->name));
		zk_counter_path(cs->name, cs->path, sizeof(cs->path));
	}
	if (cs != NULL)
		cs->last_used = GetCurrentTimestamp();
	return cs;
}

/* The live entry m names, or NULL once it is gone (freed, reused) */
static ZkEntry *
member_entry(CMember *m)
{
	ZkEntry    *e = zk_entry(m->ref.idx);

	if (e->gen != m->ref.gen || e->state == ZKE_FREE || e->kind != ZKK_COUNTER)
		return NULL;
	return e;
}

/* l without e's member (not freed: the caller's); *found says it was there */
static List *
drop_member(List *l, ZkEntry *e, bool *found)
{
	ListCell   *lc;

	foreach(lc, l)
	{
		CMember    *m = lfirst(lc);

		if (m->ref.idx == zk_entry_index(e) && m->ref.gen == e->gen)
		{
			*found = true;
			return list_delete_cell(l, lc);
		}
	}
	return l;
}

/*
 * Answer m's request: outcome with verdict and result, its entry DONE; a
 * request let go is freed instead.  m is freed.
 */
static void
member_answer(CMember *m, ZkOutcome outcome, ZkCounterVerdict verdict, int64 result)
{
	ZkEntry    *e = member_entry(m);

	pfree(m);
	if (e == NULL)
		return;
	ZKCP(e)->listed = false;
	if (e->released)
	{
		zk_entry_free(e);
		return;
	}
	ZKCP(e)->verdict = verdict;
	ZKCP(e)->result = result;
	e->state = ZKE_DONE;
	zk_finish(e, outcome, 0, NULL);
}

/* Fail m's request with a ZooKeeper error rc about the counter; m is freed */
static void
member_fail(CState *cs, CMember *m, int rc)
{
	ZkEntry    *e = member_entry(m);
	char		msg[ZKLOCK_ERRMSG_MAX];

	pfree(m);
	if (e == NULL)
		return;
	ZKCP(e)->listed = false;
	if (e->released)
	{
		zk_entry_free(e);
		return;
	}
	snprintf(msg, sizeof(msg), "ZooKeeper answered %s for %s", zerror(rc), cs->path);
	e->state = ZKE_DONE;
	zk_fail_rc(e, rc, cs->path, ERRCODE_CONNECTION_FAILURE, msg);
}

/* Fail every request of the round with rc */
static void
round_fail(CState *cs, int rc)
{
	List	   *round = cs->round;
	ListCell   *lc;

	cs->round = NIL;
	foreach(lc, round)
		member_fail(cs, lfirst(lc), rc);
	list_free(round);
}

/*
 * ZooKeeper answered about the round: its owners' wait for an answer
 * starts again (zk_wait_outcome), since ZooKeeper is working on it
 */
static void
round_touch(CState *cs)
{
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	foreach(lc, cs->round)
	{
		ZkEntry    *e = member_entry(lfirst(lc));

		if (e != NULL)
			e->answered_at = now;
	}
}

static void counter_kick(CState *cs);

/* A new call of cs's, palloc'd: the one whose answer counts */
static CCall *
new_call(CState *cs)
{
	CCall	   *c = MemoryContextAllocZero(counter_context(), sizeof(CCall));

	strlcpy(c->name, cs->name, sizeof(c->name));
	c->call = ++call_seq;
	cs->call = c->call;
	return c;
}

/* The state whose call c is, or NULL when that call is void */
static CState *
call_state(CCall *c)
{
	CState	   *cs = counter_state(c->name, false);

	if (cs == NULL || cs->call != c->call)
		return NULL;
	cs->call = 0;
	cs->phase = CP_IDLE;
	return cs;
}

/* A send that did not go: retried when the session is usable, or failed */
static void
send_failed(CState *cs, int rc)
{
	cs->call = 0;
	cs->phase = CP_IDLE;
	if (zk_rc_definite(rc) && rc != ZOK)
		round_fail(cs, rc);
	else
		kicks_pending = true;
}

static void read_done(int rc, const char *value, int value_len,
					  const struct Stat *stat, const void *data);
static void set_done(int rc, const struct Stat *stat, const void *data);
static void create_done(int rc, const char *value, const void *data);
static void delete_done(int rc, const void *data);

/* Send the round's write (cs->wop, cs->target, at cs->sent_version) */
static void
send_write(CState *cs)
{
	CCall	   *c = new_call(cs);
	int			rc;

	snprintf(c->data, sizeof(c->data), INT64_FORMAT, cs->target);
	cs->phase = CP_WRITING;
	if (cs->wop == CW_SET)
		rc = zoo_aset(zk_zh, cs->path, c->data, strlen(c->data), cs->sent_version,
					  set_done, c);
	else if (cs->wop == CW_DELETE)
		rc = zoo_adelete(zk_zh, cs->path, cs->sent_version, delete_done, c);
	else
	{
		if (parents_session != zk_cur_session || cs->parents)
		{
			char		p[ZK_PATH_MAX];
			char	   *s;

			strlcpy(p, cs->path, sizeof(p));
			for (s = p + 1; *s; s++)
				if (*s == '/')
				{
					*s = '\0';
					zk_create_parent(p, ZOO_PERSISTENT);
					*s = '/';
				}
			parents_session = zk_cur_session;
			cs->parents = false;
		}
		rc = zoo_acreate(zk_zh, cs->path, c->data, strlen(c->data),
						 zk_acl_path(cs->path), ZOO_PERSISTENT,
						 create_done, c);
	}
	if (rc != ZOK)
	{
		pfree(c);
		if (!zk_rc_definite(rc))
			cs->doubt = false;	/* not sent: nothing can land */
		send_failed(cs, rc);
	}
}

/* Send a read of the node */
static void
send_read(CState *cs)
{
	CCall	   *c = new_call(cs);
	int			rc;

	cs->phase = CP_READING;
	rc = zoo_aget(zk_zh, cs->path, 0, read_done, c);
	if (rc != ZOK)
	{
		pfree(c);
		send_failed(cs, rc);
	}
}

/*
 * Plan the round from the node as known (cs->exists, value, version):
 * answer the gets and what cannot be written, sum the adds, and send the
 * one write, if any.  The requests after a set or a drop wait.
 */
static void
round_plan(CState *cs)
{
	MemoryContext old = MemoryContextSwitchTo(counter_context());
	List	   *writers = NIL;
	List	   *rest = NIL;
	List	   *round = cs->round;
	ListCell   *lc;
	int64		sum = cs->exists ? cs->value : 0;
	uint8		special = 0;

	cs->round = NIL;
	foreach(lc, round)
	{
		CMember    *m = lfirst(lc);
		ZkEntry    *e = member_entry(m);
		int64		next;

		if (e == NULL || e->released)
		{
			member_answer(m, ZKO_BUSY, ZKCV_OK, 0);	/* frees a let-go one */
			continue;
		}
		if (special != 0 ||
			(writers != NIL && (e->step.counter == ZKCN_SET ||
								e->step.counter == ZKCN_DROP)))
		{
			rest = lappend(rest, m);
			continue;
		}
		switch (e->step.counter)
		{
			case ZKCN_GET:
				member_answer(m, ZKO_GRANTED, ZKCV_OK, cs->exists ? cs->value : 0);
				break;
			case ZKCN_ADD:
				if (pg_add_s64_overflow(sum, ZKCP(e)->arg, &next))
					member_answer(m, ZKO_BUSY, ZKCV_OVERFLOW, sum);
				else
				{
					sum = next;
					m->result = sum;
					writers = lappend(writers, m);
				}
				break;
			case ZKCN_SET:
				if ((cs->exists ? cs->value : 0) != ZKCP(e)->expected)
					member_answer(m, ZKO_BUSY, ZKCV_MISMATCH,
								  cs->exists ? cs->value : 0);
				else
				{
					special = CW_SET;
					sum = ZKCP(e)->arg;
					m->result = sum;
					writers = lappend(writers, m);
				}
				break;
			case ZKCN_DROP:
				if (!cs->exists)
					member_answer(m, ZKO_BUSY, ZKCV_MISMATCH, 0);
				else
				{
					special = CW_DELETE;
					writers = lappend(writers, m);
				}
				break;
			default:
				member_answer(m, ZKO_BUSY, ZKCV_GARBAGE, 0);
				break;
		}
	}
	list_free(round);
	cs->round = writers;
	cs->waiting = list_concat(rest, cs->waiting);
	MemoryContextSwitchTo(old);

	if (writers == NIL)
	{
		counter_kick(cs);
		return;
	}
	cs->target = sum;
	cs->sent_version = cs->version;
	cs->wop = special == CW_DELETE ? CW_DELETE : cs->exists ? CW_SET : CW_CREATE;
	send_write(cs);
}

/*
 * Start cs's next round if it has requests and nothing is in flight: its
 * read (a write in doubt: the read that decides it)
 */
static void
counter_kick(CState *cs)
{
	ListCell   *lc;

	if (cs->phase != CP_IDLE || (cs->waiting == NIL && cs->round == NIL))
		return;
	if (!zk_session_usable())
	{
		kicks_pending = true;
		return;
	}
	if (zk_no_progress(&cs->progress))
	{
		List	   *all = list_concat(cs->round, cs->waiting);

		zk_no_progress_report("counter", zk_log_name(cs->name), "round");
		cs->round = all;
		cs->waiting = NIL;
		foreach(lc, all)
		{
			CMember    *m = lfirst(lc);
			ZkEntry    *e = member_entry(m);

			pfree(m);
			if (e == NULL)
				continue;
			ZKCP(e)->listed = false;
			if (e->released)
				zk_entry_free(e);
			else
			{
				e->state = ZKE_DONE;
				zk_fail(e, ERRCODE_INTERNAL_ERROR, "the zklock worker made no progress on the counter");
			}
		}
		list_free(all);
		cs->round = NIL;
		cs->doubt = false;
		return;
	}
	if (cs->doubt)
	{
		send_read(cs);			/* did it land? the read decides */
		return;
	}
	/* those waiting join the round (a round in progress keeps its members) */
	while (cs->waiting != NIL && list_length(cs->round) < COUNTER_ROUND_MAX)
	{
		MemoryContext old = MemoryContextSwitchTo(counter_context());

		cs->round = lappend(cs->round, linitial(cs->waiting));
		cs->waiting = list_delete_first(cs->waiting);
		MemoryContextSwitchTo(old);
	}
	/*
	 * Every round reads first, also adds alone on a node our last write left:
	 * a version says nothing of a node deleted and created again (by a drop
	 * anywhere, or kazoo), which starts again at version 0, so a write at
	 * the version we knew could land on the new node and lose what was
	 * written there.  The read's version is a round trip old at most.
	 */
	send_read(cs);
}

/* Did the write in doubt land (the node, as read, is what it would leave)? */
static bool
doubt_landed(CState *cs, bool exists, int64 value, bool parsed,
			 const struct Stat *stat)
{
	if (cs->wop == CW_DELETE)
		return !exists;
	return exists && parsed && value == cs->target &&
		stat->version == (cs->wop == CW_CREATE ? 0 : cs->sent_version + 1);
}

/* Is the node as the write in doubt found it (so it may still land)? */
static bool
doubt_unchanged(CState *cs, bool exists, const struct Stat *stat)
{
	if (cs->wop == CW_CREATE)
		return !exists;
	return exists && stat->version == cs->sent_version;
}

/*
 * Did another client take the version the write in doubt was for (so that
 * ours never landed and never will)?  The write after the version written
 * at is unique: if it is not ours (doubt_landed said so), ours did not
 * land.  Past it, ours may be anywhere in between.
 */
static bool
doubt_other(CState *cs, bool exists, const struct Stat *stat)
{
	if (cs->wop == CW_CREATE)
		return exists && stat->version == 0;
	if (cs->wop == CW_SET)
		return exists && stat->version == cs->sent_version + 1;
	return false;				/* a delete: a node there again is anyone's */
}

/*
 * The write in doubt may have landed, and the counter has moved on since:
 * its members are told so (ZKCV_DOUBT), nothing is written again (which
 * could count them twice)
 */
static void
round_doubtful(CState *cs)
{
	List	   *round = cs->round;
	ListCell   *lc;

	cs->round = NIL;
	cs->doubt = false;
	foreach(lc, round)
		member_answer(lfirst(lc), ZKO_BUSY, ZKCV_DOUBT, 0);
	list_free(round);
}

/* The write landed: answer its members, know the node */
static void
round_written(CState *cs, int32 version)
{
	List	   *round = cs->round;
	ListCell   *lc;

	cs->round = NIL;
	cs->doubt = false;
	cs->exists = (cs->wop != CW_DELETE);
	cs->value = cs->exists ? cs->target : 0;
	cs->version = cs->exists ? version : -1;
	foreach(lc, round)
	{
		CMember    *m = lfirst(lc);

		member_answer(m, ZKO_GRANTED, ZKCV_OK, m->result);
	}
	list_free(round);
}

/*
 * The node's data is not a value: every request of the round fails with
 * why (the drops excepted: they may delete it), nothing written
 */
static void
round_refuse(CState *cs, ZkCounterVerdict why, const char *value, int len)
{
	MemoryContext old = MemoryContextSwitchTo(counter_context());
	List	   *round = cs->round;
	List	   *keep = NIL;
	ListCell   *lc;

	cs->round = NIL;
	foreach(lc, round)
	{
		CMember    *m = lfirst(lc);
		ZkEntry    *e = member_entry(m);

		if (e != NULL && !e->released && e->step.counter == ZKCN_DROP)
		{
			keep = lappend(keep, m);
			continue;
		}
		if (e != NULL && !e->released)
		{
			int			n = Min(len, ZK_COUNTER_BAD_MAX);

			memcpy(ZKCP(e)->bad, value, n);
			ZKCP(e)->badlen = n;
			ZKCP(e)->datalen = len;
		}
		member_answer(m, ZKO_BUSY, why, 0);
	}
	list_free(round);
	cs->round = keep;
	MemoryContextSwitchTo(old);
}

/* the answer of a read: the node's data and version (no node: 0) */
static void
read_done(int rc, const char *value, int value_len, const struct Stat *stat,
		  const void *data)
{
	DATA_COMPLETION_BEGIN(CCall, c, data)
	{
		CState	   *cs = call_state(c);

		if (cs != NULL)
		{
			bool		exists = (rc == ZOK && stat != NULL);
			int			len = (exists && value != NULL) ? Max(value_len, 0) : 0;
			int64		v = 0;
			ZkCounterVerdict why = ZKCV_OK;
			bool		parsed = exists ? zk_counter_parse(value, len, &v, &why) : true;

			round_touch(cs);
			if (exists)
				zk_acl_check_node(cs->path);	/* a node found there: whose? */
			if (!zk_rc_definite(rc))
			{
				kicks_pending = true;	/* read again once usable */
			}
			else if (rc != ZOK && rc != ZNONODE)
			{
				cs->doubt = false;
				round_fail(cs, rc);
				counter_kick(cs);
			}
			else if (cs->doubt && cs->wop == CW_DELETE &&
					 doubt_landed(cs, exists, v, parsed, stat))
			{
				round_written(cs, -1);
				counter_kick(cs);
			}
			else if (cs->doubt && doubt_landed(cs, exists, v, parsed, stat))
			{
				/*
				 * The node holds what our write would leave, but another
				 * client (another cluster's worker, adding as much from the
				 * same version) may have written exactly that: a value handed
				 * out twice.  Nobody can tell, so the members hear that their
				 * adds may or may not have been applied; a counter may skip
				 * values, never repeat one (a fault run found two clusters'
				 * adds answered with one value, issue 40).
				 */
				round_doubtful(cs);
				counter_kick(cs);
			}
			else if (cs->doubt && doubt_unchanged(cs, exists, stat))
				send_write(cs); /* not landed yet: the same write again */
			else if (cs->doubt && !doubt_other(cs, exists, stat))
			{
				/* it may have landed before others wrote: nobody can tell */
				round_doubtful(cs);
				counter_kick(cs);
			}
			else
			{
				/* nothing in doubt, or it can no longer land: plan again */
				cs->doubt = false;
				cs->exists = exists;
				cs->version = exists ? stat->version : -1;
				cs->value = v;
				if (!parsed)
					round_refuse(cs, why, value, len);
				round_plan(cs);
			}
		}
		pfree(c);
	}
	NONE_COMPLETION_END;
}

/*
 * The answer of the round's write (version: the node's after a setData,
 * 0 after a create)
 */
static void
write_done(CCall *c, int rc, int32 version)
{
	CState	   *cs = call_state(c);
	ListCell   *lc;

	pfree(c);
	if (cs == NULL)
		return;
	round_touch(cs);
	if (rc == ZOK)
		round_written(cs, version);
	else if (!zk_rc_definite(rc))
	{
		/* landed or not: the next read decides */
		cs->doubt = true;
		kicks_pending = true;
		return;
	}
	else if (rc == ZNONODE && cs->wop == CW_CREATE && cs->parents_tried)
	{
		/* a parent refused (42501) or gone again */
		cs->doubt = false;
		round_fail(cs, rc);
	}
	else if (rc == ZNONODE && cs->wop == CW_CREATE)
	{
		/* a parent is gone: made again before the create */
		cs->parents = true;
		cs->parents_tried = true;
	}
	else if (rc == ZBADVERSION || rc == ZNODEEXISTS || rc == ZNONODE)
	{
		/* another client changed it (or our copy in doubt landed): again */
		List	   *round = cs->round;
		List	   *keep = NIL;
		MemoryContext old = MemoryContextSwitchTo(counter_context());

		cs->round = NIL;
		foreach(lc, round)
		{
			CMember    *m = lfirst(lc);
			ZkEntry    *e = member_entry(m);

			if (e != NULL && !e->released && !cs->doubt &&
				++ZKCP(e)->rounds >= ZK_COUNTER_ROUNDS)
				member_answer(m, ZKO_BUSY, ZKCV_CONTENDED, 0);
			else
				keep = lappend(keep, m);
		}
		list_free(round);
		cs->round = keep;
		MemoryContextSwitchTo(old);
	}
	else
	{
		cs->doubt = false;
		round_fail(cs, rc);
	}
	if (rc == ZOK)
		cs->parents_tried = false;
	counter_kick(cs);
}

/* Completions of the three writes */
static void
set_done(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(CCall, c, data)
	{
		write_done(c, rc, (rc == ZOK && stat) ? stat->version : -1);
	}
	NONE_COMPLETION_END;
}

static void
create_done(int rc, const char *value, const void *data)
{
	DATA_COMPLETION_BEGIN(CCall, c, data)
	{
		write_done(c, rc, 0);
	}
	NONE_COMPLETION_END;
}

static void
delete_done(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(CCall, c, data)
	{
		write_done(c, rc, -1);
	}
	NONE_COMPLETION_END;
}

/*
 * Drive a counter entry: a new request joins its counter's next round; one
 * let go leaves it, unless a write carrying it is in flight (it is freed
 * when that write is answered)
 */
static void
counter_drive(ZkEntry *e)
{
	CState	   *cs;
	CMember    *m;
	bool		found = false;

	if (ZKCP(e)->listed)
	{
		cs = counter_state(e->name, false);
		if (cs == NULL)
			ZKCP(e)->listed = false;	/* cannot happen */
		else if (e->released)
		{
			if ((cs->phase == CP_WRITING || cs->doubt) &&
				zk_entry_ref_find(cs->round, e) != NULL)
				return;
			cs->waiting = drop_member(cs->waiting, e, &found);
			if (!found && cs->phase != CP_WRITING && !cs->doubt)
				cs->round = drop_member(cs->round, e, &found);
			ZKCP(e)->listed = false;
		}
		else
		{
			counter_kick(cs);
			return;
		}
	}
	if (e->released)
	{
		zk_entry_free(e);
		return;
	}
	if (e->outcome != ZKO_NONE)
		return;
	cs = counter_state(e->name, true);
	m = MemoryContextAllocZero(counter_context(), sizeof(CMember));
	zk_entry_ref_set(&m->ref, e);
	{
		MemoryContext old = MemoryContextSwitchTo(counter_context());

		cs->waiting = lappend(cs->waiting, m);
		MemoryContextSwitchTo(old);
	}
	ZKCP(e)->listed = true;
	e->state = ZKE_CREATING;
	counter_kick(cs);
}

/* An error while driving e: it leaves its counter and fails */
static void
counter_drive_failed(ZkEntry *e)
{
	CState	   *cs = counter_state(e->name, false);
	bool		found = false;

	if (cs != NULL && ZKCP(e)->listed)
	{
		if ((cs->phase == CP_WRITING || cs->doubt) &&
			zk_entry_ref_find(cs->round, e) != NULL)
			return;				/* answered with its write */
		cs->waiting = drop_member(cs->waiting, e, &found);
		cs->round = drop_member(cs->round, e, &found);
	}
	ZKCP(e)->listed = false;
	if (e->released)
	{
		zk_entry_free(e);
		return;
	}
	e->state = ZKE_DONE;
	zk_fail(e, ERRCODE_INTERNAL_ERROR, "the zklock worker failed while handling a counter");
}

/*
 * The session ended: the counters' calls are void (the recipe's
 * session_reset); their entries stay in line and go on once a session is
 * usable (counter_turn)
 */
static void
counter_session_lost(ZkEntry *e, const char *why)
{
	kicks_pending = true;
}

/*
 * An entry a previous worker left: its counter's state died with that
 * worker.  A get is asked again; an add, set or drop may have landed, so
 * its owner is told so.
 */
static void
counter_adopt(ZkEntry *e)
{
	ZKCP(e)->listed = false;
	if (e->released)
	{
		zk_entry_free(e);
		return;
	}
	if (e->outcome != ZKO_NONE)
		return;
	if (e->step.counter == ZKCN_GET)
	{
		counter_drive(e);
		return;
	}
	ZKCP(e)->verdict = ZKCV_DOUBT;
	e->state = ZKE_DONE;
	zk_finish(e, ZKO_BUSY, 0, NULL);
}

/*
 * Every usable turn: the counters that wait for a usable session start
 * their rounds; once a second, idle counters not used for
 * COUNTER_FORGET_MS are forgotten
 */
static void
counter_turn(void)
{
	HASH_SEQ_STATUS seq;
	CState	   *cs;
	TimestampTz now;
	bool		forget;

	if (counters == NULL)
		return;
	now = GetCurrentTimestamp();
	forget = TimestampDifferenceExceeds(last_forget, now, 1000);
	if (!kicks_pending && !forget)
		return;
	kicks_pending = false;
	if (forget)
		last_forget = now;
	hash_seq_init(&seq, counters);
	while ((cs = hash_seq_search(&seq)) != NULL)
	{
		if (cs->phase == CP_IDLE && cs->waiting == NIL && cs->round == NIL &&
			!cs->doubt && forget &&
			TimestampDifferenceExceeds(cs->last_used, now, COUNTER_FORGET_MS))
		{
			(void) hash_search(counters, cs->name, HASH_REMOVE, NULL);
			continue;
		}
		counter_kick(cs);
	}
}

/*
 * The session ended (and again once its handle is closed): every call in
 * flight is void; a write among them is in doubt; nothing is known
 */
static void
counter_session_reset(void)
{
	HASH_SEQ_STATUS seq;
	CState	   *cs;

	parents_session = 0;
	if (counters == NULL)
		return;
	hash_seq_init(&seq, counters);
	while ((cs = hash_seq_search(&seq)) != NULL)
	{
		if (cs->phase == CP_WRITING)
			cs->doubt = true;
		cs->phase = CP_IDLE;
		cs->call = 0;
		if (cs->waiting != NIL || cs->round != NIL)
			kicks_pending = true;
	}
}

/* The recipe's hooks into the worker; its one kind (recipelist.h) */
const ZkRecipe zk_counter_recipe = {
	.session_reset = counter_session_reset,
};

const ZkKindOps zk_counter_ops =
	ZK_KIND_OPS(counter_drive, counter_drive_failed, counter_session_lost,
				.adopt = counter_adopt, .turn = counter_turn);
