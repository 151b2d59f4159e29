/*-------------------------------------------------------------------------
 *
 * quota.c
 *	  What one role may write into the shared ZooKeeper: a leaky bucket per
 *	  role in shared memory (zklock.max_write_rate, zklock.max_write_burst),
 *	  charged in the backend before anything is sent, and zk_role_usage(),
 *	  behind the view zk_quotas: each role's entries against
 *	  zklock.max_locks_per_role and its writes against its rate.
 *
 *	  The table has one slot per backend slot (shmem.c lays it out after
 *	  the per-slot counts), found by role with a linear scan under
 *	  zk_ctl->lock, exclusively.  A role's slot holds its "level": bytes
 *	  written that the rate has not yet paid for; it drains at the rate of
 *	  the session that charges it (ALTER ROLE ... SET gives a role its own
 *	  rate).  A charge that would lift the level above the burst waits until
 *	  it drains (it reserves its bytes first, so the role's sessions queue
 *	  up fairly), at most zklock.commit_timeout, else fails with 53400; one
 *	  larger than the burst by itself fails with 54000.  A slot whose level
 *	  drained to zero is as good as free and is reused for another role when
 *	  no slot is free (its totals are forgotten); a slot that still owes is
 *	  never reused (a role could shed its debt by making other roles write),
 *	  so when every slot owes, a role without one is refused (53400) until
 *	  one has drained.  Superusers are not charged.  doc/limits.md, "What one role may put into ZooKeeper".
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

typedef struct ZkRoleRate
{
	Oid			role;			/* InvalidOid: free */
	int32		rate_kb;		/* zklock.max_write_rate of the last charge */
	int32		burst_kb;		/* zklock.max_write_burst of the last charge */
	double		level;			/* bytes not yet paid for by the rate */
	TimestampTz at;				/* when level was last brought up to date */
	uint64		written;		/* bytes charged since the slot was taken */
	uint64		refused;		/* charges refused since then */
} ZkRoleRate;

/* Size of the table for "slots" backend slots (shmem.c) */
Size
zk_role_rates_size(int slots)
{
	return mul_size(slots, sizeof(ZkRoleRate));
}

/* The level of r at "now", drained at its rate since r->at */
static double
drained_level(const ZkRoleRate *r, TimestampTz now)
{
	double		secs;
	double		level;

	if (r->rate_kb <= 0 || now <= r->at)
		return r->level;
	secs = (double) (now - r->at) / 1000000.0;
	level = r->level - secs * r->rate_kb * 1024.0;
	return level > 0 ? level : 0;
}

/*
 * The slot of "role", taking a free one, else one whose level has drained
 * to zero, when it has none; NULL when every slot still owes (a slot that
 * owes is never taken: its role would start again with a full burst).
 * *soonest is then how long, in seconds, until the first of them has
 * drained.  Lock held exclusively.
 */
static ZkRoleRate *
role_slot(Oid role, TimestampTz now, double *soonest)
{
	ZkRoleRate *rates = zk_quota_rates_area();
	ZkRoleRate *best = NULL;
	int			i;

	*soonest = -1;
	for (i = 0; i < zk_ctl->quota_slots; i++)
		if (rates[i].role == role)
			return &rates[i];
	for (i = 0; i < zk_ctl->quota_slots; i++)
	{
		double		l;

		if (rates[i].role == InvalidOid)
		{
			best = &rates[i];
			break;
		}
		l = drained_level(&rates[i], now);
		if (l <= 0)
		{
			if (best == NULL)
				best = &rates[i];
		}
		else if (rates[i].rate_kb > 0)
		{
			double		s = l / (rates[i].rate_kb * 1024.0);

			if (*soonest < 0 || s < *soonest)
				*soonest = s;
		}
	}
	if (best == NULL)
		return NULL;
	best->role = role;
	best->rate_kb = best->burst_kb = 0;
	best->level = 0;
	best->at = now;
	best->written = best->refused = 0;
	return best;
}

/*
 * Refuse a write (53400) because every slot of the table of rates holds a
 * role that still owes: lock held, released here.
 */
static void
refuse_no_slot(const char *what, Size bytes, double soonest)
{
	int			slots = zk_ctl->quota_slots;

	LWLockRelease(zk_ctl->lock);
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("too many roles write into zookeeper at once for zklock to account for another"),
			 errdetail("%s would write %zu bytes into ZooKeeper; all %d slots of zklock's table of write rates hold roles whose writes zklock.max_write_rate has not paid for yet (the first drains in %.1f s).",
					   what, bytes, slots, soonest < 0 ? 0.0 : soonest),
			 errhint("Retry in a few seconds; the table has one slot per backend slot (max_connections and worker processes), and a superuser can raise zklock.max_write_rate for the roles that write (ALTER ROLE ... SET) so their writes drain sooner.")));
}

/*
 * Charge "bytes" that this session is about to write into ZooKeeper to its
 * role (zklock.max_write_rate); "what" names the write for the errors.
 * Waits, interruptibly, while the role is over its burst, at most
 * zklock.commit_timeout; refuses (53400) when that would not do, or
 * (54000) when the bytes alone are more than zklock.max_write_burst.
 * Nothing has been sent when it fails.
 */
void
zk_quota_charge_write(Size bytes, const char *what)
{
	double		rate;
	double		burst;
	double		level;
	double		wait_s;
	TimestampTz now;
	TimestampTz until;
	ZkRoleRate *r;
	Oid			role;

	if (zk_max_write_rate_kb <= 0 || bytes == 0 || zk_session_user_is_superuser())
		return;
	zk_require_shmem();
	rate = zk_max_write_rate_kb * 1024.0;
	burst = zk_max_write_burst_kb * 1024.0;
	role = GetSessionUserId();
	if ((double) bytes > burst)
	{
		zk_backend_lock(LW_EXCLUSIVE);
		r = role_slot(role, GetCurrentTimestamp(), &wait_s);
		if (r != NULL)
			r->refused++;
		LWLockRelease(zk_ctl->lock);
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("zklock write of %zu bytes is larger than this role may write at once", bytes),
				 errdetail("%s would write %zu bytes into ZooKeeper; zklock.max_write_burst is %d kB.",
						   what, bytes, zk_max_write_burst_kb),
				 errhint("Write less in one transaction, or ask a superuser to raise zklock.max_write_burst for the role (ALTER ROLE ... SET).")));
	}

	zk_backend_lock(LW_EXCLUSIVE);
	now = GetCurrentTimestamp();
	r = role_slot(role, now, &wait_s);
	if (r == NULL)
		refuse_no_slot(what, bytes, wait_s);
	level = drained_level(r, now);
	r->level = level;
	r->at = now;
	r->rate_kb = zk_max_write_rate_kb;
	r->burst_kb = zk_max_write_burst_kb;
	wait_s = (level + bytes - burst) / rate;
	if (wait_s > zk_commit_timeout / 1000.0)
	{
		r->refused++;
		LWLockRelease(zk_ctl->lock);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("role writes into zookeeper faster than zklock.max_write_rate"),
				 errdetail("%s would write %zu bytes into ZooKeeper; the role's sessions wrote %.0f bytes more than zklock.max_write_rate (%d kB per second) has paid for, and the write would have to wait %.1f s (zklock.commit_timeout is %d ms).",
						   what, bytes, level, zk_max_write_rate_kb, wait_s, zk_commit_timeout),
				 errhint("Retry later or write less; a superuser can raise zklock.max_write_rate or zklock.max_write_burst for the role (ALTER ROLE ... SET).")));
	}
	/* reserved now: the role's other sessions wait behind it */
	r->level = level + bytes;
	r->written += bytes;
	LWLockRelease(zk_ctl->lock);

	if (wait_s <= 0)
		return;
	until = TimestampTzPlusMilliseconds(now, (int64) (wait_s * 1000.0) + 1);
	for (;;)
	{
		long		ms;

		CHECK_FOR_INTERRUPTS();
		now = GetCurrentTimestamp();
		if (now >= until)
			break;
		ms = (long) ((until - now) / 1000) + 1;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 ms, zk_wait_event(ZKW_ANSWER));
		ResetLatch(MyLatch);
	}
}

/* One role's row of zk_role_usage, copied under the lock */
typedef struct RoleRow
{
	Oid			role;
	int			entries;
	int			max_entries;
	bool		rated;
	int32		rate_kb;
	int32		burst_kb;
	double		level;
	uint64		written;
	uint64		refused;
} RoleRow;

/* The row of "role" among rows[0..*n), added if absent */
static RoleRow *
row_of(RoleRow *rows, int *n, Oid role)
{
	int			i;

	for (i = 0; i < *n; i++)
		if (rows[i].role == role)
			return &rows[i];
	memset(&rows[*n], 0, sizeof(RoleRow));
	rows[*n].role = role;
	return &rows[(*n)++];
}

PG_FUNCTION_INFO_V1(zk_role_usage);

/*
 * SQL: zk_role_usage(), behind the view zk_quotas: per role, the entries
 * its sessions hold or await against the zklock.max_locks_per_role they
 * run with, and what it wrote into ZooKeeper against its
 * zklock.max_write_rate.  Copied under the shared lock (a few thousand
 * slots at most), emitted after.
 */
Datum
zk_role_usage(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RoleRow    *rows;
	int			n = 0;
	int			slots;
	int			i;
	TimestampTz now;

	InitMaterializedSRF(fcinfo, 0);
	zk_require_shmem();
	slots = zk_ctl->quota_slots;
	rows = palloc(sizeof(RoleRow) * 2 * slots);
	zk_backend_lock(LW_SHARED);
	now = GetCurrentTimestamp();
	{
		int		   *counts = zk_quota_counts();
		Oid		   *roles = zk_quota_roles();
		int		   *limits = zk_quota_limits();
		ZkRoleRate *rates = zk_quota_rates_area();

		for (i = 0; i < slots; i++)
			if (counts[i] > 0 && roles[i] != InvalidOid)
			{
				RoleRow    *r = row_of(rows, &n, roles[i]);

				r->entries += counts[i];
				if (limits[i] > r->max_entries)
					r->max_entries = limits[i];
			}
		for (i = 0; i < slots; i++)
			if (rates[i].role != InvalidOid)
			{
				RoleRow    *r = row_of(rows, &n, rates[i].role);

				r->rated = true;
				r->rate_kb = rates[i].rate_kb;
				r->burst_kb = rates[i].burst_kb;
				r->level = drained_level(&rates[i], now);
				r->written = rates[i].written;
				r->refused = rates[i].refused;
			}
	}
	LWLockRelease(zk_ctl->lock);

	for (i = 0; i < n; i++)
	{
		RoleRow    *r = &rows[i];
		Datum		values[8];
		bool		nulls[8];
		char	   *rname = GetUserNameFromId(r->role, true);

		memset(nulls, false, sizeof(nulls));
		if (rname)
			values[0] = CStringGetTextDatum(rname);
		else
			nulls[0] = true;	/* dropped since */
		values[1] = Int32GetDatum(r->entries);
		if (r->max_entries > 0)
			values[2] = Int32GetDatum(r->max_entries);
		else
			nulls[2] = true;	/* no limit (superuser, or 0) */
		values[3] = Int64GetDatum((int64) r->written);
		values[4] = Int64GetDatum((int64) r->level);
		if (r->rated)
		{
			values[5] = Int64GetDatum((int64) r->rate_kb * 1024);
			values[6] = Int64GetDatum((int64) r->burst_kb * 1024);
		}
		else
			nulls[5] = nulls[6] = true;
		values[7] = Int64GetDatum((int64) r->refused);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
