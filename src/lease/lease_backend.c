/*-------------------------------------------------------------------------
 *
 * lease_backend.c
 *	  The lease recipe's backend half: taking and reading leases for
 *	  zk_try_lease and zk_lease_holder (their SQL functions: lease_sql.c).
 *
 *	  The layout and the data are kazoo's NonBlockingLease, so that a SQL
 *	  step and a Python one can share a lease:
 *
 *		<root>/leases/<name>/lease_holder
 *			{"version": 1, "holder": "...", "end": "YYYY-MM-DDTHH:MM:SS"}
 *		<root>/leases/<name>/<guid>__lock__<seq>
 *			kazoo's lock, taken around every decision
 *
 *	  "end" is UTC, to the second, from the clock of whoever took the lease.
 *	  A caller obtains the lease when there is no holder node, when the
 *	  holder is the caller itself (the lease is renewed: a new end), or when
 *	  "end" has passed by the caller's clock; otherwise the answer is false.
 *	  A holder node of another version is left alone (false), as kazoo does.
 *
 *	  zk_try_lease: take the lock (a ZKK_LOCK entry of family ZKF_LEASES),
 *	  read the holder (ZKK_LEASE read), decide, write (ZKK_LEASE write: one
 *	  multi that also checks that our lock node still exists), let go of the
 *	  lock.  A write whose fate a connection loss hid is settled by reading
 *	  again: our exact data there means the lease is ours.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "lock/lock.h"
#include "lease.h"

#include "access/xlog.h"
#include "common/jsonapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/timestamp.h"

#define LEASE_FORMAT_VERSION	"1"
#define LEASE_ROUNDS			5
#define LEASE_LOCK_WAIT_MS		10000	/* without lock_timeout */

/* the entries this backend has with the worker, let go at exit (FATAL) */
static uint32 lock_idx = ZKLOCK_NO_ENTRY;
static uint32 lock_gen = 0;
static uint32 op_idx = ZKLOCK_NO_ENTRY;
static uint32 op_gen = 0;

/*
 * The lease's counters, in shared memory of its own (zk_lease_backend.shmem;
 * zero is a valid pg_atomic_uint64 where zklock builds), for zk_status()
 */
typedef struct LeaseShared
{
	pg_atomic_uint64 taken;		/* zk_try_lease: true */
	pg_atomic_uint64 refused;	/* zk_try_lease: false */
} LeaseShared;

static LeaseShared *lease_shared = NULL;

/* At exit: let go of the lease request and lock in progress */
static void
lease_at_exit(void)
{
	zk_let_go(&op_idx, op_gen);
	zk_let_go(&lock_idx, lock_gen);
}

/* zk_status(): the lease's counters */
static void
lease_status(ZkStatusCounts *c)
{
	c->leases_taken += pg_atomic_read_u64(&lease_shared->taken);
	c->leases_refused += pg_atomic_read_u64(&lease_shared->refused);
}

const ZkRecipeBackend zk_lease_backend = {
	.at_exit = lease_at_exit,
	ZK_PATH_HOOK("lease", zk_lock_kind_path, ZKF_LEASES),
	.status = lease_status,
	ZK_SHMEM_AREA("zklock leases", LeaseShared, lease_shared),
};

/* ---- the holder's data ---- */

/* the fields of kazoo's lease data, in ZkLeaseData's order */
static const char *const lease_fields[3] = {"version", "holder", "end"};

/*
 * kazoo's data, parsed: a version (its JSON token when a number, "?" when
 * another scalar), a holder and an end (strings); false when it is not
 * (never raises on bad data)
 */
bool
zk_lease_parse(const char *data, int len, ZkLeaseData *ld)
{
	char	   *v[3];
	JsonTokenType t[3];

	memset(ld, 0, sizeof(ZkLeaseData));
	if (!zk_json_top_fields(data, len, lease_fields, 3, false, v, t))
		return false;
	if (v[0] != NULL)
		ld->version = (t[0] == JSON_TOKEN_NUMBER) ? v[0] : pstrdup("?");
	if (v[1] != NULL && t[1] == JSON_TOKEN_STRING)
		ld->holder = v[1];
	if (v[2] != NULL && t[2] == JSON_TOKEN_STRING)
		ld->end = v[2];
	return ld->version != NULL && ld->holder != NULL && ld->end != NULL;
}

/* "YYYY-MM-DDTHH:MM:SS" (UTC) to a timestamp; false when it is not one */
bool
zk_lease_parse_end(const char *s, TimestampTz *out)
{
	struct pg_tm tm;
	int			n = -1;

	memset(&tm, 0, sizeof(tm));
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
			   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6 || n != (int) strlen(s))
		return false;
	if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
		tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
		return false;
	return tm2timestamp(&tm, 0, NULL, out) == 0;
}

/* A lease's end as kazoo writes it */
static void
format_end(TimestampTz ts, char *out, size_t outlen)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("zklock lease end is out of range"),
				 errhint("Use a shorter duration.")));
	snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d",
			 tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* this cluster, as the default holder: host:port and system identifier */
char *
zk_lease_default_holder(int *len)
{
	char		host[256];
	char	   *h;

	if (gethostname(host, sizeof(host)) != 0)
		strlcpy(host, "unknown", sizeof(host));
	host[sizeof(host) - 1] = '\0';
	h = psprintf("%s:%d/" UINT64_FORMAT, host, PostPortNumber, GetSystemIdentifier());
	*len = strlen(h);
	if (*len > ZKLOCK_NAME_MAX)
	{
		h[ZKLOCK_NAME_MAX] = '\0';
		*len = ZKLOCK_NAME_MAX;
	}
	return h;
}

/* ---- one request to the worker ---- */

typedef struct LeaseAnswer
{
	bool		exists;
	bool		busy;			/* write: changed under us, or in doubt */
	bool		doubt;			/* write: in doubt (the connection was lost) */
	int32		version;
	char	   *data;
	int			len;
} LeaseAnswer;

/*
 * Read (ZKL_READ) or write (ZKL_WRITE) a lease's holder node through the
 * worker
 */
static void
lease_op(const char *name, int len, int op, const char *lock_node,
		 int32 version, const char *data, int dlen, LeaseAnswer *ans, const char *what)
{
	volatile dsa_pointer req = InvalidDsaPointer;	/* read in PG_CATCH */
	ZkEntry    *e;
	int			outcome;

	memset(ans, 0, sizeof(LeaseAnswer));
	if (op == ZKL_WRITE)
	{
		ZkAnswer   *a;

		/* all of the root's, as last read (kept.c) */
		zk_kept_check((int64) dlen, 1, true, "The lease's holder data");
		/* the role's zklock.max_write_rate, before anything is sent */
		zk_quota_charge_write(dlen, "The lease's holder data");

		req = dsa_allocate_extended(zk_dsa(), sizeof(ZkAnswer) + dlen, DSA_ALLOC_NO_OOM);
		if (!DsaPointerIsValid(req))
			zk_payload_memory_error(sizeof(ZkAnswer) + dlen, "The lease's data",
									"Retry once other sessions' queue transactions have ended.");
		a = dsa_get_address(zk_dsa(), req);
		a->count = 1;
		a->size = sizeof(ZkAnswer) + dlen;
		memcpy((char *) a + sizeof(ZkAnswer), data, dlen);
	}
	PG_TRY();
	{
		e = zk_new_entry(ZKK_LEASE, name, len, ZKM_EXCLUSIVE, ZKS_TRANSACTION, false);
	}
	PG_CATCH();
	{
		if (DsaPointerIsValid(req))
			dsa_free(zk_dsa(), req);
		PG_RE_THROW();
	}
	PG_END_TRY();
	e->step.lease = op;
	e->family = ZKF_LEASES;
	e->blob = req;
	ZKLS(e)->version = version;
	if (lock_node)
		strlcpy(e->node, lock_node, sizeof(e->node));
	zk_submit_entry(e, &op_idx, &op_gen);

	outcome = zk_wait_outcome(op_idx, -1, zk_connect_timeout, what);

	e = zk_entry(op_idx);
	if (op == ZKL_READ && DsaPointerIsValid(e->blob))
	{
		ZkAnswer   *a = dsa_get_address(zk_dsa(), e->blob);

		ans->exists = (a->count == 1);
		ans->len = (int) (a->size - sizeof(ZkAnswer));
		ans->data = palloc(ans->len + 1);
		memcpy(ans->data, (char *) a + sizeof(ZkAnswer), ans->len);
		ans->data[ans->len] = '\0';
		ans->version = ZKLS(e)->version;
	}
	ans->busy = (outcome == ZKO_BUSY);
	ans->doubt = ans->busy && e->in_doubt;
	zk_let_go(&op_idx, op_gen);
}

/* take the lease's lock; returns our node's name */
static char *
take_lock(const char *name, int len, const char *uname)
{
	ZkEntry    *e;
	int64		wait_ms = LockTimeout > 0 ? LockTimeout : LEASE_LOCK_WAIT_MS;
	int			outcome;
	char	   *node;
	char	   *what = psprintf("take the lock of lease \"%s\"", uname);

	e = zk_new_entry(ZKK_LOCK, name, len, ZKM_EXCLUSIVE, ZKS_SESSION, false);
	e->family = ZKF_LEASES;
	zk_submit_entry(e, &lock_idx, &lock_gen);

	outcome = zk_wait_outcome(lock_idx, wait_ms, zk_connect_timeout, what);
	if (outcome != ZKO_GRANTED)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("timed out waiting for the lock of zookeeper lease \"%s\"", uname),
				 errdetail("Another client held the lock that guards the lease for " INT64_FORMAT " ms.",
						   wait_ms),
				 errhint("Retry later; a client that dies holding it lets go when its ZooKeeper session expires.")));
	zk_backend_lock(LW_SHARED);
	node = pstrdup(zk_entry(lock_idx)->node);
	LWLockRelease(zk_ctl->lock);
	return node;
}

/* Raise the error for a lease_holder node zklock cannot read */
void
zk_lease_unreadable(const char *uname, const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("zookeeper lease \"%s\" holds data zklock cannot read", uname),
			 errdetail("%s", why),
			 errhint("Its lease_holder node is not in kazoo's NonBlockingLease format: delete it once no client relies on the lease, or use another name.")));
}

/* the decision, with the lock held: true when the lease is ours */
static bool
decide(const char *name, int len, const char *uname, const char *holder,
	   int64 duration_us, const char *lock_node)
{
	char	   *written = NULL;
	int			wlen = 0;
	int			round;
	bool		doubt = false;	/* the last write's answer was lost */
	LeaseAnswer last;

	for (round = 0; round < LEASE_ROUNDS; round++)
	{
		LeaseAnswer cur;
		LeaseAnswer w;
		TimestampTz now;
		char		end[32];
		StringInfoData buf;

		lease_op(name, len, ZKL_READ, NULL, 0, NULL, 0, &cur, "read the lease");
		if (written != NULL && cur.exists && cur.len == wlen &&
			memcmp(cur.data, written, wlen) == 0)
			return true;		/* our write landed after all */
		now = GetCurrentTimestamp();
		if (cur.exists)
		{
			ZkLeaseData	ld;
			TimestampTz cur_end;

			if (!zk_lease_parse(cur.data, cur.len, &ld))
				zk_lease_unreadable(uname, "It is not a JSON object with a version, a holder and an end.");
			if (strcmp(ld.version, LEASE_FORMAT_VERSION) != 0)
				return false;	/* another format: kazoo leaves it alone too */
			if (!zk_lease_parse_end(ld.end, &cur_end))
				zk_lease_unreadable(uname, psprintf("Its end \"%s\" is not a time like 2026-01-31T23:59:59.", ld.end));
			if (strcmp(ld.holder, holder) != 0 && now < cur_end)
				return false;
		}
		format_end(now + duration_us, end, sizeof(end));
		initStringInfo(&buf);
		appendStringInfoString(&buf, "{\"version\": " LEASE_FORMAT_VERSION ", \"holder\": ");
		escape_json(&buf, holder);
		appendStringInfo(&buf, ", \"end\": \"%s\"}", end);
		written = buf.data;
		wlen = buf.len;
		lease_op(name, len, ZKL_WRITE, lock_node, cur.exists ? cur.version : -1,
				 buf.data, buf.len, &w, "write the lease");
		if (!w.busy)
			return true;
		doubt = w.doubt;
		CHECK_FOR_INTERRUPTS();
	}
	if (doubt)
	{
		/*
		 * Every answer lost on the way (not a writer racing us): did the last
		 * write land?  Otherwise the connection, not a client, is at fault.
		 */
		lease_op(name, len, ZKL_READ, NULL, 0, NULL, 0, &last, "read the lease");
		if (last.exists && last.len == wlen && memcmp(last.data, written, wlen) == 0)
			return true;
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not write zookeeper lease \"%s\"", uname),
				 errdetail("The connection to ZooKeeper was lost before the answer to each of %d writes; none of them landed, the lease is not taken.",
						   LEASE_ROUNDS),
				 errhint("Check the network between PostgreSQL and ZooKeeper (zk_status()), then retry.")));
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not settle zookeeper lease \"%s\"", uname),
			 errdetail("Its holder node changed under %d attempts; a client is writing it without taking its lock.",
					   LEASE_ROUNDS),
			 errhint("Retry; check which clients write the lease.")));
	return false;
}

/* ---- what the SQL functions (lease_sql.c) call ---- */

/*
 * zk_try_lease's work, once its arguments are checked: take the lease's
 * lock, decide, let go of the lock.  True when the lease is ours.
 */
bool
zk_lease_try(const char *name, int len, const char *holder, int64 duration_us)
{
	char	   *uname = zk_display_name(name);
	char	   *node;
	bool		ours = false;

	if (lock_idx != ZKLOCK_NO_ENTRY || op_idx != ZKLOCK_NO_ENTRY)
		lease_at_exit();		/* left by an error we did not see (cannot happen) */

	PG_TRY();
	{
		node = take_lock(name, len, uname);
		ours = decide(name, len, uname, holder, duration_us, node);
	}
	PG_CATCH();
	{
		lease_at_exit();
		PG_RE_THROW();
	}
	PG_END_TRY();
	lease_at_exit();
	pg_atomic_fetch_add_u64(ours ? &lease_shared->taken : &lease_shared->refused, 1);
	return ours;
}

/*
 * Read a lease's holder node: false when there is none, else its data
 * (*data, *datalen; not parsed)
 */
bool
zk_lease_read(const char *name, int len, char **data, int *datalen)
{
	LeaseAnswer cur;

	PG_TRY();
	{
		lease_op(name, len, ZKL_READ, NULL, 0, NULL, 0, &cur, "read the lease");
	}
	PG_CATCH();
	{
		zk_let_go(&op_idx, op_gen);
		PG_RE_THROW();
	}
	PG_END_TRY();
	*data = cur.data;
	*datalen = cur.len;
	return cur.exists;
}

/*
 * zk_lease_release's work: under the lease's lock, delete the holder node
 * if holder holds the lease (ended or not).  True when it was holder's and
 * is gone; false when there is none, or another holder's, or another
 * format's.  The name's node is left to the worker's cleanup (and to
 * ZooKeeper, for a container).
 */
bool
zk_lease_end(const char *name, int len, const char *holder)
{
	char	   *uname = zk_display_name(name);
	volatile bool ended = false;

	if (lock_idx != ZKLOCK_NO_ENTRY || op_idx != ZKLOCK_NO_ENTRY)
		lease_at_exit();		/* left by an error we did not see (cannot happen) */

	PG_TRY();
	{
		char	   *node = take_lock(name, len, uname);
		bool		doubt = false;
		int			round;

		for (round = 0; round < LEASE_ROUNDS; round++)
		{
			LeaseAnswer cur;
			LeaseAnswer w;
			ZkLeaseData ld;

			lease_op(name, len, ZKL_READ, NULL, 0, NULL, 0, &cur, "read the lease");
			if (!cur.exists)
			{
				ended = doubt;	/* our delete landed after all */
				break;
			}
			if (!zk_lease_parse(cur.data, cur.len, &ld))
				zk_lease_unreadable(uname, "It is not a JSON object with a version, a holder and an end.");
			if (strcmp(ld.version, LEASE_FORMAT_VERSION) != 0 || strcmp(ld.holder, holder) != 0)
				break;			/* not ours to end */
			lease_op(name, len, ZKL_DELETE, node, cur.version, NULL, 0, &w, "delete the lease");
			if (!w.busy)
			{
				ended = true;
				break;
			}
			doubt = w.doubt;
			CHECK_FOR_INTERRUPTS();
		}
		if (round == LEASE_ROUNDS)
			ereport(ERROR,
					(errcode(doubt ? ERRCODE_CONNECTION_FAILURE : ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not release zookeeper lease \"%s\"", uname),
					 errdetail("Its holder node changed, or the answer was lost, in each of %d attempts.",
							   LEASE_ROUNDS),
					 errhint("Retry; check the network to ZooKeeper (zk_status()) and which clients write the lease.")));
	}
	PG_CATCH();
	{
		lease_at_exit();
		PG_RE_THROW();
	}
	PG_END_TRY();
	lease_at_exit();
	return ended;
}
