/*-------------------------------------------------------------------------
 *
 * lease_sweep.c
 *	  The lease recipe's cleanup (issue 35): the worker removes the nodes of
 *	  leases that ended long ago, so that a name used once leaves nothing in
 *	  ZooKeeper, and what a role keeps in leases is its leases that run.
 *
 *	  Every zklock.lease_cleanup_interval, while the session is usable, one
 *	  pass:
 *
 *	  COUNTING	an exists of <root>/leases, which holds every namespace's
 *				leases: a listing larger than zklock.max_answer_bytes
 *				(zk_listing_over) and the pass stops (a WARNING,
 *				rate-limited).  Not zklock.max_children: one tenant's many
 *				names must not stop the cleanup of everybody's;
 *	  LISTING	its children (again at most zklock.max_answer_bytes);
 *	  SCANNING	(at most SWEEP_PASS_NAMES names a pass, each pass going
 *				on from where the last one stopped)
 *				each name's lease_holder read without the lock
 *				(ZK_READ_WINDOW at a time, zk_read_window), to find the
 *				candidates: a lease of kazoo's format 1 whose end is more
 *				than zklock.lease_cleanup_grace past, or a name without a
 *				holder node.  At most SWEEP_SLOTS candidates are handled at
 *				once, each in a slot:
 *
 *		LOCKING		the lease's lock, taken as every decision takes it: a
 *					ZKK_LOCK entry of the worker's own (ZKF_LEASES,
 *					try_only: a lock somebody holds means the lease is in
 *					use, and the name is left for the next pass);
 *		READING		under the lock: the holder's data and version, its ACL,
 *					and the stat of our lock node (its ctime is ZooKeeper's
 *					clock, now);
 *		DELETING	only if the holder is a lease of format 1, its ACL is
 *					the one zklock creates with (no other identity may
 *					write it), and its end plus the grace has passed by the
 *					worker's clock AND by ZooKeeper's: one multi that checks
 *					our lock node still exists and deletes the holder at
 *					the version read (a holder who renewed meanwhile wins);
 *		UNLOCKING	the lock let go; the slot waits until its entry is freed
 *					(the lock node's delete answered);
 *		DROPPING	the name's node, if it has no children, carries our ACL
 *					and was created more than the grace ago: deleted (ZooKeeper
 *					refuses a node with children, so a client that came
 *					meanwhile keeps it).
 *
 *	  Data that is not a lease, another format, a foreign ACL: left alone.
 *	  A session that ends abandons the pass (its lock entries are let go);
 *	  the next pass starts over.  Bounded: one listing of at most
 *	  zklock.max_answer_bytes, ZK_READ_WINDOW reads and SWEEP_SLOTS locks
 *	  in flight; the locks' entries come from no reserve, and are taken only
 *	  while more than SWEEP_FREE_MIN entries are free.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "recipe.h"
#include "trust.h"
#include "lock/lock.h"
#include "lease.h"

#include "access/xlog.h"
#include "datatype/timestamp.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define LEASE_HOLDER	"lease_holder"
#define SWEEP_PASS_NAMES	1000	/* names read in one pass at most */
#define SWEEP_FREE_MIN	4		/* free entries the cleanup leaves to others */

typedef enum SweepPhase
{
	SWP_IDLE = 0,				/* waiting for the next pass */
	SWP_COUNTING,				/* exists of <root>/leases in flight */
	SWP_LISTING,				/* its listing in flight */
	SWP_SCANNING				/* reads and slots */
} SweepPhase;

typedef enum SlotStep
{
	SL_FREE = 0,
	SL_LOCKING,
	SL_READING,
	SL_DELETING,
	SL_UNLOCKING,
	SL_DROPPING
} SlotStep;

typedef struct SweepSlot
{
	SlotStep	step;
	int			name;			/* index into the pass's names */
	bool		drop_name;		/* try the name's node once unlocked */
	uint32		idx;			/* the lock entry */
	uint32		gen;
	char		node[ZKLOCK_NODE_MAX + 1];	/* our lock node */
	int			pending;		/* reads out (READING) */
	int			hold_rc;
	int32		hold_version;
	char	   *hold_data;
	int			hold_len;
	int			acl_rc;
	bool		acl_ours;
	int			lock_rc;
	int64		lock_ctime;		/* ms since 1970, ZooKeeper's clock */
} SweepSlot;

static struct
{
	SweepPhase	phase;
	uint64		gen;			/* a pass's number: older answers are ignored */
	uint64		session;
	bool		abandon;		/* the session ended: let go at the next turn */
	bool		swept;			/* entries of an earlier worker let go */
	TimestampTz next_pass;
	MemoryContext cxt;			/* the pass's names and data */
	char	  **names;
	int			n;
	int			next_read;
	int			reads_out;
	bool		answered;
	Size		largest;
	int		   *cand;			/* names to handle, in slots */
	bool	   *cand_holder;
	int			ncand;
	int			next_cand;
	uint64		offset;			/* where the next pass's window starts */
	int			removed;		/* holders deleted in this pass */
	int			dropped;		/* names' nodes deleted */
	SweepSlot	slot[SWEEP_SLOTS];
} sw;

/* One request in flight */
typedef struct SweepCall
{
	uint64		gen;
	int			slot;			/* -1: the pass's own */
	int			name;
	int			what;			/* which of a slot's reads */
	zoo_op_t	ops[2];
	zoo_op_result_t res[2];
	char		path[ZK_PATH_MAX];
	char		path2[ZK_PATH_MAX];
} SweepCall;

#define READ_HOLDER		0
#define READ_ACL		1
#define READ_LOCK		2

static ZkLogLimit over_log;
static ZkLogLimit done_log;

static void slot_decide(int s);
static void scan_send_more(void);
static void slot_unlock(int s, bool drop_name);

/* A new call of the current pass (malloc'd: freed by its completion) */
static SweepCall *
new_call(int slot, int name)
{
	SweepCall  *c = calloc(1, sizeof(SweepCall));

	if (c == NULL)
		return NULL;
	c->gen = sw.gen;
	c->slot = slot;
	c->name = name;
	return c;
}

/* Is this call of the pass running now? */
static bool
call_current(SweepCall *c)
{
	return c->gen == sw.gen && sw.phase != SWP_IDLE && !sw.abandon;
}

/* <root>/leases/<child>[/suffix] */
static void
name_path(int name, const char *suffix, char *out, size_t len)
{
	snprintf(out, len, "%s/leases/%s%s%s", zk_root, sw.names[name],
			 suffix ? "/" : "", suffix ? suffix : "");
}

/* ZooKeeper's time (ms since 1970) as a timestamp */
static TimestampTz
zk_time(int64 ms)
{
	return (TimestampTz) (ms - (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) *
						  SECS_PER_DAY * 1000) * 1000;
}

/* How long past its end a lease (or a name's creation) must be */
static int64
grace_us(void)
{
	return (int64) Max(zk_lease_cleanup_grace, 1) * USECS_PER_SEC;
}

/*
 * Is a node's ACL the one zklock creates with: nothing but read for any
 * other identity, and some entry ours?
 */
static bool
acl_ours(const struct ACL_vector *acl)
{
	bool		ours = false;
	int			i;

	if (acl == NULL || acl->count <= 0)
		return false;
	for (i = 0; i < acl->count; i++)
	{
		const struct ACL *a = &acl->data[i];
		bool		foreign;

		if (a->id.scheme == NULL || a->id.id == NULL)
			return false;
		foreign = zk_acl_id_foreign(a->id.scheme, a->id.id);
		if (!foreign)
			ours = true;
		else if ((a->perms & ~ZOO_PERM_READ) != 0)
			return false;
	}
	return ours;
}

/* A holder's data: a lease of format 1 whose end is long past by our clock? */
static bool
long_ended(const char *data, int len, TimestampTz *end)
{
	ZkLeaseData ld;
	MemoryContext old = MemoryContextSwitchTo(sw.cxt);
	bool		ok;

	ok = zk_lease_parse(data, len, &ld) && strcmp(ld.version, "1") == 0 &&
		zk_lease_parse_end(ld.end, end);
	MemoryContextSwitchTo(old);
	return ok && *end + grace_us() < GetCurrentTimestamp();
}

/* ---- the pass's listing and reads ---- */

/* End the pass: forget its names, say what it removed, plan the next */
static void
pass_end(void)
{
	if ((sw.removed > 0 || sw.dropped > 0) && zk_log_limited(&done_log, "lease cleanup"))
		ereport(LOG,
				(errmsg("zklock: removed %d ended leases and %d lease names from zookeeper",
						sw.removed, sw.dropped)));
	if (sw.cxt != NULL)
		MemoryContextDelete(sw.cxt);
	sw.cxt = NULL;
	sw.names = NULL;
	sw.n = 0;
	sw.phase = SWP_IDLE;
	sw.gen++;
	sw.next_pass = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											   (int64) Max(zk_lease_cleanup_interval, 1) * 1000);
}

/* Completion of a name's lease_holder read without the lock */
static void
scan_read_done(int rc, const char *value, int value_len, const struct Stat *stat,
			   const void *data)
{
	DATA_COMPLETION_BEGIN(SweepCall, c, data)
	{
		if (call_current(c))
		{
			TimestampTz end;
			bool		want = false;
			bool		holder = false;

			sw.reads_out--;
			sw.answered = true;
			if (rc == ZOK && value_len > 0)
				sw.largest = Max(sw.largest, (Size) value_len);
			if (rc == ZNONODE)
				want = true;	/* a name without a holder: its node may go */
			else if (rc == ZOK && value != NULL && value_len > 0 &&
					 long_ended(value, value_len, &end))
				want = holder = true;
			if (want)
			{
				sw.cand_holder[sw.ncand] = holder;
				sw.cand[sw.ncand++] = c->name;
			}
			scan_send_more();
		}
	}
	NONE_COMPLETION_END;
	free(c);
}

/* Send the next reads of the names, up to the window */
static void
scan_send_more(void)
{
	while (sw.next_read < sw.n &&
		   sw.reads_out < zk_read_window(sw.answered, sw.largest))
	{
		SweepCall  *c = new_call(-1, sw.next_read);

		if (c == NULL)
			return;
		name_path(c->name, LEASE_HOLDER, c->path, sizeof(c->path));
		if (zoo_aget(zk_zh, c->path, 0, scan_read_done, c) != ZOK)
		{
			free(c);
			sw.abandon = true;	/* the session is going: start over */
			return;
		}
		sw.next_read++;
		sw.reads_out++;
	}
}

/* The bytes a listing may take: the worker's zklock.max_answer_bytes */
static Size
listing_cap(void)
{
	return (Size) zk_max_answer_kb * 1024;
}

/* The listing is too large: say so (rate-limited), stop the pass */
static void
pass_over(const char *msg)
{
	if (zk_log_limited(&over_log, "lease cleanup over max_answer_bytes"))
		ereport(WARNING,
				(errmsg("zklock: ended leases are not removed from zookeeper"),
				 errdetail("%s.", msg),
				 errhint("Raise zklock.max_answer_bytes in postgresql.conf (and reload) so that the worker may list them.")));
	pass_end();
}

/* Completion of the listing of <root>/leases */
static void
list_done(int rc, const struct String_vector *kids, const void *data)
{
	DATA_COMPLETION_BEGIN(SweepCall, c, data)
	{
		if (call_current(c) && sw.phase == SWP_LISTING)
		{
			Size		bytes = 0;
			int			i;

			for (i = 0; kids != NULL && i < kids->count; i++)
				bytes += ZK_LIST_NAME_MIN + (kids->data[i] ? strlen(kids->data[i]) : 0);
			if (rc != ZOK || kids == NULL || kids->count == 0)
				pass_end();		/* none, or gone */
			else if (bytes > listing_cap())
			{
				char		msg[256];

				snprintf(msg, sizeof(msg),
						 "Listing the leases took %zu kB, more than zklock.max_answer_bytes (%zu kB)",
						 (bytes + 1023) / 1024, listing_cap() / 1024);
				pass_over(msg);
			}
			else
			{

				int			take = Min(kids->count, SWEEP_PASS_NAMES);
				int			first = (int) (sw.offset % (uint64) kids->count);

				/*
				 * At most SWEEP_PASS_NAMES names a pass, from where the last
				 * pass stopped: every cluster's worker sweeps, so a root of
				 * many leases is read a window a pass, not all of it a minute
				 */
				sw.names = MemoryContextAlloc(sw.cxt, sizeof(char *) * take);
				sw.cand = MemoryContextAlloc(sw.cxt, sizeof(int) * take);
				sw.cand_holder = MemoryContextAlloc(sw.cxt, sizeof(bool) * take);
				for (i = 0; i < take; i++)
				{
					const char *kid = kids->data[(first + i) % kids->count];

					if (kid != NULL && strlen(kid) <= ZKLOCK_ENAME_MAX)
						sw.names[sw.n++] = MemoryContextStrdup(sw.cxt, kid);
				}
				sw.offset = take < kids->count ? (uint64) first + take : 0;
				sw.phase = SWP_SCANNING;
				scan_send_more();
			}
		}
	}
	NONE_COMPLETION_END;
	free(c);
}

/* Completion of the exists of <root>/leases: list it unless too many */
static void
count_done(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(SweepCall, c, data)
	{
		if (call_current(c) && sw.phase == SWP_COUNTING)
		{
			char		msg[256];

			if (rc != ZOK || stat == NULL || stat->numChildren == 0)
				pass_end();
			else if (zk_listing_over(stat, listing_cap(), "leases", msg, sizeof(msg)))
				pass_over(msg);
			else
			{
				SweepCall  *l = new_call(-1, -1);

				snprintf(c->path, sizeof(c->path), "%s/leases", zk_root);
				if (l == NULL ||
					zoo_aget_children(zk_zh, c->path, 0, list_done, l) != ZOK)
				{
					free(l);
					pass_end();
				}
				else
					sw.phase = SWP_LISTING;
			}
		}
	}
	NONE_COMPLETION_END;
	free(c);
}

/* ---- a slot: one candidate under its lock ---- */

/* The slot's lock entry, or NULL once it is freed */
static ZkEntry *
slot_entry(SweepSlot *sl)
{
	ZkEntry    *e = zk_entry(sl->idx);

	return (e->gen == sl->gen && e->state != ZKE_FREE) ? e : NULL;
}

/* Completion of a name node's delete: counted when it went */
static void
drop_done(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(SweepCall, c, data)
	{
		/* ZNOTEMPTY: a client came meanwhile, and keeps it */
		if (rc == ZOK && c->gen == sw.gen)
			sw.dropped++;
	}
	NONE_COMPLETION_END;
	free(c);
}

/* Completion of a name node's ACL read: delete it if it may go */
static void
drop_acl_done(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(SweepCall, c, data)
	{
		if (call_current(c))
		{
			SweepSlot  *sl = &sw.slot[c->slot];
			SweepCall  *d;

			sl->step = SL_FREE;
			if (rc == ZOK && stat != NULL && stat->numChildren == 0 && acl_ours(acl) &&
				zk_time(stat->ctime) + grace_us() < GetCurrentTimestamp() &&
				(d = new_call(-1, c->name)) != NULL)
			{
				strlcpy(d->path, c->path, sizeof(d->path));
				/* refused if a client created under it meanwhile */
				if (zoo_adelete(zk_zh, d->path, stat->version, drop_done, d) != ZOK)
					free(d);
			}
		}
	}
	NONE_COMPLETION_END;
	free(c);
}

/* The slot's lock is gone: read the name's node, or free the slot */
static void
slot_drop(int s)
{
	SweepSlot  *sl = &sw.slot[s];
	SweepCall  *c;

	if (!sl->drop_name || (c = new_call(s, sl->name)) == NULL)
	{
		sl->step = SL_FREE;
		return;
	}
	name_path(sl->name, NULL, c->path, sizeof(c->path));
	sl->step = SL_DROPPING;
	if (zoo_aget_acl(zk_zh, c->path, drop_acl_done, c) != ZOK)
	{
		free(c);
		sl->step = SL_FREE;
	}
}

/* Let go of the slot's lock; the name's node may go once it is freed */
static void
slot_unlock(int s, bool drop_name)
{
	SweepSlot  *sl = &sw.slot[s];
	ZkEntry    *e = slot_entry(sl);

	sl->drop_name = drop_name;
	sl->step = SL_UNLOCKING;
	if (e != NULL)
	{
		zk_release_push(e);
		SetLatch(MyLatch);
	}
}

/* Completion of the multi that deletes a holder under the lock */
static void
delete_done(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(SweepCall, c, data)
	{
		if (call_current(c) && sw.slot[c->slot].step == SL_DELETING)
		{
			if (rc == ZOK)
				sw.removed++;
			/* else renewed meanwhile, or our lock lost: it stays */
			slot_unlock(c->slot, rc == ZOK);
		}
	}
	NONE_COMPLETION_END;
	free(c);
}

/*
 * All three reads under the lock are in: delete the holder if it is
 * certainly ended for everybody, else let go
 */
static void
slot_decide(int s)
{
	SweepSlot  *sl = &sw.slot[s];
	TimestampTz end;
	SweepCall  *c;

	if (sl->hold_rc == ZNONODE && sl->lock_rc == ZOK)
	{
		slot_unlock(s, true);	/* gone meanwhile: its name may go */
		return;
	}
	if (sl->hold_rc != ZOK || sl->acl_rc != ZOK || !sl->acl_ours ||
		sl->lock_rc != ZOK || sl->hold_data == NULL ||
		!long_ended(sl->hold_data, sl->hold_len, &end) ||
		end + grace_us() >= zk_time(sl->lock_ctime) ||
		(c = new_call(s, sl->name)) == NULL)
	{
		slot_unlock(s, false);
		return;
	}
	name_path(sl->name, sl->node, c->path, sizeof(c->path));
	name_path(sl->name, LEASE_HOLDER, c->path2, sizeof(c->path2));
	zoo_check_op_init(&c->ops[0], c->path, -1);
	zoo_delete_op_init(&c->ops[1], c->path2, sl->hold_version);
	sl->step = SL_DELETING;
	if (zoo_amulti(zk_zh, 2, c->ops, c->res, delete_done, c) != ZOK)
	{
		free(c);
		slot_unlock(s, false);
	}
}

/* One read under the lock answered; decide once all are */
static void
slot_read_answered(SweepCall *c)
{
	SweepSlot  *sl = &sw.slot[c->slot];

	if (--sl->pending == 0)
		slot_decide(c->slot);
}

/* Completion of the holder's read under the lock */
static void
hold_read_done(int rc, const char *value, int value_len, const struct Stat *stat,
			   const void *data)
{
	DATA_COMPLETION_BEGIN(SweepCall, c, data)
	{
		if (call_current(c) && sw.slot[c->slot].step == SL_READING)
		{
			SweepSlot  *sl = &sw.slot[c->slot];

			sl->hold_rc = rc;
			if (rc == ZOK && stat != NULL && value != NULL && value_len > 0)
			{
				sl->hold_version = stat->version;
				sl->hold_data = MemoryContextAlloc(sw.cxt, value_len);
				memcpy(sl->hold_data, value, value_len);
				sl->hold_len = value_len;
			}
			else if (rc == ZOK)
				sl->hold_rc = ZBADARGUMENTS;	/* empty: not a lease */
			slot_read_answered(c);
		}
	}
	NONE_COMPLETION_END;
	free(c);
}

/* Completion of the holder's ACL read under the lock */
static void
hold_acl_done(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(SweepCall, c, data)
	{
		if (call_current(c) && sw.slot[c->slot].step == SL_READING)
		{
			SweepSlot  *sl = &sw.slot[c->slot];

			sl->acl_rc = rc;
			sl->acl_ours = (rc == ZOK && acl_ours(acl));
			slot_read_answered(c);
		}
	}
	NONE_COMPLETION_END;
	free(c);
}

/* Completion of the exists of our lock node: ZooKeeper's clock */
static void
lock_stat_done(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(SweepCall, c, data)
	{
		if (call_current(c) && sw.slot[c->slot].step == SL_READING)
		{
			SweepSlot  *sl = &sw.slot[c->slot];

			sl->lock_rc = (rc == ZOK && stat == NULL) ? ZNONODE : rc;
			if (rc == ZOK && stat != NULL)
				sl->lock_ctime = stat->ctime;
			slot_read_answered(c);
		}
	}
	NONE_COMPLETION_END;
	free(c);
}

/* The lock is ours: send the three reads back to back */
static void
slot_read(int s)
{
	SweepSlot  *sl = &sw.slot[s];
	SweepCall  *c[3];
	int			rc[3];
	int			i;

	for (i = 0; i < 3; i++)
	{
		c[i] = new_call(s, sl->name);
		if (c[i] == NULL)
		{
			while (--i >= 0)
				free(c[i]);
			slot_unlock(s, false);
			return;
		}
		c[i]->what = i;
	}
	name_path(sl->name, LEASE_HOLDER, c[0]->path, sizeof(c[0]->path));
	name_path(sl->name, LEASE_HOLDER, c[1]->path, sizeof(c[1]->path));
	name_path(sl->name, sl->node, c[2]->path, sizeof(c[2]->path));
	sl->step = SL_READING;
	sl->pending = 3;
	sl->hold_rc = sl->acl_rc = sl->lock_rc = ZSYSTEMERROR;
	sl->hold_data = NULL;
	sl->acl_ours = false;
	rc[0] = zoo_aget(zk_zh, c[0]->path, 0, hold_read_done, c[0]);
	rc[1] = rc[0] == ZOK ? zoo_aget_acl(zk_zh, c[1]->path, hold_acl_done, c[1]) : ZSYSTEMERROR;
	rc[2] = rc[1] == ZOK ? zoo_aexists(zk_zh, c[2]->path, 0, lock_stat_done, c[2]) : ZSYSTEMERROR;
	for (i = 0; i < 3; i++)
		if (rc[i] != ZOK)
		{
			free(c[i]);
			sl->pending--;
		}
	if (rc[0] != ZOK || rc[1] != ZOK || rc[2] != ZOK)
	{
		/* the answers sent still come: they find the slot no longer reading */
		sw.abandon = true;
	}
}

/* Start a slot on a candidate: its lock, or straight to its name's node */
static bool
slot_start(int s, int name, bool holder)
{
	SweepSlot  *sl = &sw.slot[s];
	char		qname[ZKLOCK_QNAME_MAX + 2];
	char		ename[ZKLOCK_ENAME_MAX + 1];
	ZkEntry    *e;
	int			len;

	memset(sl, 0, sizeof(SweepSlot));
	sl->name = name;
	len = zk_decode_qname(sw.names[name], qname, sizeof(qname));
	if (len <= 0 || len > ZKLOCK_QNAME_MAX || (int) strlen(qname) != len)
		return true;			/* not a name zklock makes: leave it */
	zk_encode_name(qname, len, ename);
	if (strcmp(ename, sw.names[name]) != 0)
		return true;
	if (!holder)
	{
		sl->drop_name = true;
		slot_drop(s);
		return true;
	}
	/* counted in no reserve: never the last SWEEP_FREE_MIN free entries */
	if (zk_ctl->max_entries - zk_ctl->used <= SWEEP_FREE_MIN ||
		(e = zk_entry_alloc()) == NULL)
		return false;			/* again next turn */
	zk_entry_request(e, ZKK_LOCK, InvalidOid, ZKM_EXCLUSIVE, ZKS_SESSION, true);
	e->family = ZKF_LEASES;
	strlcpy(e->name, qname, sizeof(e->name));
	snprintf(e->data, sizeof(e->data),
			 "{\"cluster\":\"" UINT64_FORMAT "\",\"port\":%d,\"pid\":%d,"
			 "\"application\":\"zklock worker (lease cleanup)\"}",
			 GetSystemIdentifier(), PostPortNumber, MyProcPid);
	sl->idx = zk_entry_index(e);
	sl->gen = e->gen;
	sl->step = SL_LOCKING;
	zk_enqueue(e);
	SetLatch(MyLatch);
	return true;
}

/* Move a slot on by what its lock entry says (LOCKING, UNLOCKING) */
static void
slot_poll(int s)
{
	SweepSlot  *sl = &sw.slot[s];
	ZkEntry    *e = slot_entry(sl);

	if (sl->step == SL_UNLOCKING)
	{
		if (e == NULL)
			slot_drop(s);		/* its node's delete answered */
		return;
	}
	if (sl->step != SL_LOCKING)
		return;
	if (e == NULL)
	{
		sl->step = SL_FREE;
		return;
	}
	if (e->outcome == ZKO_NONE)
		return;
	if (e->outcome == ZKO_GRANTED && e->state == ZKE_HELD && e->node[0] != '\0')
	{
		strlcpy(sl->node, e->node, sizeof(sl->node));
		slot_read(s);
	}
	else
		slot_unlock(s, false);	/* in use (BUSY), or failed: next pass */
}

/* ---- the worker's hooks ---- */

/* Let go of everything the pass holds (a new session, or a turn after one) */
static void
pass_abandon(void)
{
	int			s;

	for (s = 0; s < SWEEP_SLOTS; s++)
	{
		SweepSlot  *sl = &sw.slot[s];
		ZkEntry    *e;

		if (sl->step != SL_FREE && sl->step != SL_DROPPING &&
			(e = slot_entry(sl)) != NULL)
		{
			zk_release_push(e);
			SetLatch(MyLatch);
		}
		sl->step = SL_FREE;
	}
	sw.abandon = false;
	pass_end();
}

/*
 * Let go of lease-cleanup locks an earlier worker left in shared memory
 * (a crash restart keeps it): theirs have the worker's marks, no database
 */
static void
sweep_left_entries(void)
{
	int			i;

	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		if (e->state != ZKE_FREE && e->kind == ZKK_LOCK && e->family == ZKF_LEASES &&
			e->dbid == InvalidOid && e->pid != MyProcPid && !e->released &&
			pg_atomic_read_u32(&e->release_req) == 0)
			zk_release_push(e);
	}
	SetLatch(MyLatch);
}

/*
 * Every turn of the worker while the session is usable, lock held: start a
 * pass when it is time, move the slots on, send the next reads
 */
void
zk_lease_sweep_turn(void)
{
	TimestampTz now;
	int			s;
	bool		busy = false;

	if (!sw.swept)
	{
		sweep_left_entries();
		sw.swept = true;
	}
	if (sw.abandon || (sw.phase != SWP_IDLE && sw.session != zk_cur_session))
	{
		pass_abandon();
		return;
	}
	if (sw.phase == SWP_IDLE)
	{
		SweepCall  *c;

		if (zk_lease_cleanup_interval <= 0)
			return;
		now = GetCurrentTimestamp();
		if (sw.next_pass == 0)
			sw.next_pass = TimestampTzPlusMilliseconds(now, 1000);
		if (now < sw.next_pass)
			return;
		sw.gen++;
		sw.session = zk_cur_session;
		sw.cxt = AllocSetContextCreate(TopMemoryContext, "zklock lease cleanup",
									   ALLOCSET_DEFAULT_SIZES);
		sw.n = sw.next_read = sw.reads_out = sw.ncand = sw.next_cand = 0;
		sw.answered = false;
		sw.largest = 0;
		sw.removed = sw.dropped = 0;
		memset(sw.slot, 0, sizeof(sw.slot));
		sw.phase = SWP_COUNTING;
		c = new_call(-1, -1);
		if (c != NULL)
			snprintf(c->path, sizeof(c->path), "%s/leases", zk_root);
		if (c == NULL || zoo_aexists(zk_zh, c->path, 0, count_done, c) != ZOK)
		{
			free(c);
			pass_end();
		}
		return;
	}
	if (sw.phase != SWP_SCANNING)
		return;

	scan_send_more();
	for (s = 0; s < SWEEP_SLOTS; s++)
		slot_poll(s);
	for (s = 0; s < SWEEP_SLOTS && sw.next_cand < sw.ncand; s++)
		if (sw.slot[s].step == SL_FREE)
		{
			if (!slot_start(s, sw.cand[sw.next_cand], sw.cand_holder[sw.next_cand]))
				break;
			sw.next_cand++;
		}
	for (s = 0; s < SWEEP_SLOTS; s++)
		if (sw.slot[s].step != SL_FREE)
			busy = true;
	if (!busy && sw.next_read >= sw.n && sw.reads_out == 0 && sw.next_cand >= sw.ncand)
		pass_end();
}

/* The session ended: the pass is let go at the next usable turn */
void
zk_lease_sweep_reset(void)
{
	if (sw.phase != SWP_IDLE)
		sw.abandon = true;
}

/* A reload may have changed the interval: the next pass is planned anew */
void
zk_lease_sweep_reload(void)
{
	if (sw.phase == SWP_IDLE)
		sw.next_pass = 0;
}
