/*-------------------------------------------------------------------------
 *
 * sem_sql.c
 *	  The semaphore recipe's SQL functions: the zk_semaphore families, its
 *	  release and the zk_semaphores view.  What they call is in
 *	  sem_backend.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "lock/lock.h"
#include "semaphore.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(zk_semaphore_release);
PG_FUNCTION_INFO_V1(zk_semaphore_set_max);

/*
 * The max_leases argument argno: at least 1 (22023); NULL (when
 * null_ok): the pool's own number, 0 here
 */
static int32
arg_max(FunctionCallInfo fcinfo, int argno, bool null_ok)
{
	if (null_ok && PG_ARGISNULL(argno))
		return 0;
	return zk_arg_count(fcinfo, argno, "max_leases",
						"Give how many may hold the semaphore at once, 1 or more.");
}

/*
 * The permits argument argno (absent in an older SQL definition: 1): not
 * NULL, from 1 to ZK_SEM_PERMITS_MAX and at most max (22004, 22023)
 */
static int32
arg_permits(FunctionCallInfo fcinfo, int argno, int32 max)
{
	int32		n;

	if (PG_NARGS() <= argno)
		return 1;
	n = zk_arg_count(fcinfo, argno, "permits",
					 "Give how many leases to take at once, 1 or more.");
	if (n > ZK_SEM_PERMITS_MAX || (max > 0 && n > max))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock permits must be at most %d",
						max > 0 ? Min(max, ZK_SEM_PERMITS_MAX) : ZK_SEM_PERMITS_MAX),
				 max > 0 ?
				 errdetail("permits was %d; the semaphore has %d leases, and one call takes at most %d.",
						   n, max, ZK_SEM_PERMITS_MAX) :
				 errdetail("permits was %d; one call takes at most %d.", n, ZK_SEM_PERMITS_MAX),
				 errhint("Ask for fewer permits, or raise max_leases.")));
	return n;
}

/*
 * The zk_semaphore families: take permits (leases, all or none) on the
 * named semaphore of max_leases for the transaction or the session; a try
 * answers whether it got them, without waiting for the pool.
 */
static Datum
sem_common(FunctionCallInfo fcinfo, ZkScope scope, bool try_only)
{
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "semaphore name", &len);
	int32		max = arg_max(fcinfo, 1, true);
	int64		timeout_ms = try_only ? 0 : zk_arg_timeout_ms(fcinfo, 2);
	int32		permits = arg_permits(fcinfo, try_only ? 2 : 3, max);
	bool		ok;

	zk_require_shmem();
	zk_check_semaphore_name(name, len);
	zk_backend_init();
	ok = zk_sem_acquire(name, len, max, permits, scope, try_only, timeout_ms);
	if (try_only)
		PG_RETURN_BOOL(ok);
	PG_RETURN_VOID();
}

/* SQL: zk_semaphore, zk_session_semaphore, and their zk_try_* forms */
ZK_SQL_FUNC(zk_semaphore, sem_common(fcinfo, ZKS_TRANSACTION, false))
ZK_SQL_FUNC(zk_try_semaphore, sem_common(fcinfo, ZKS_TRANSACTION, true))
ZK_SQL_FUNC(zk_session_semaphore, sem_common(fcinfo, ZKS_SESSION, false))
ZK_SQL_FUNC(zk_try_session_semaphore, sem_common(fcinfo, ZKS_SESSION, true))

/*
 * zk_semaphore_set_max(name, max_leases, timeout): the pool's number of
 * leases, for every taker of every cluster; returns the number it had
 * (NULL when it held none)
 */
Datum
zk_semaphore_set_max(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "semaphore name", &len);
	int32		max = arg_max(fcinfo, 1, false);
	int64		timeout_ms = zk_arg_timeout_ms(fcinfo, 2);
	int32		had;

	zk_require_shmem();
	zk_check_semaphore_name(name, len);
	zk_backend_init();
	had = zk_sem_set_max(name, len, max, timeout_ms);
	if (had < 1)
		PG_RETURN_NULL();
	PG_RETURN_INT32(had);
}

/* zk_semaphore_release(name): one session hold; false + WARNING when none */
Datum
zk_semaphore_release(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "semaphore name", &len);

	PG_RETURN_BOOL(zk_sem_release_session(name, len));
}

/* ---- zk_semaphores: this cluster's leases and waiters ---- */

/* zk_snapshot_begin's filter of zk_semaphores: leases, and waiters for one */
static bool
want_sem(ZkEntry *e)
{
	if (!zk_entry_live(e))
		return false;
	if (e->kind == ZKK_SEMLEASE)
		return true;
	/* in line for the guard: waiting for a lease (a granted guard is followed by its lease entry) */
	return e->kind == ZKK_LOCK && e->family == ZKF_SEMAPHORES && e->outcome == ZKO_NONE;
}

/* One row of zk_semaphores (zk_snapshot_rows) */
static void
sem_row(ReturnSetInfo *rsinfo, ZkLockRow *r)
{
	Datum		values[10];
	bool		nulls[10];
	bool		lease = (r->kind == ZKK_SEMLEASE);

	zk_entry_row(r, lease && (r->outcome == ZKO_GRANTED || r->outcome == ZKO_LOST),
				 ZKF_SEMPOOL, values, nulls);
	values[3] = Int32GetDatum(r->parties);
	/* in line for the guard: no scope yet, and its node is the guard's */
	if (!lease)
		nulls[4] = nulls[7] = true;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* SQL: zk_semaphores_internal() */
ZK_SQL_PROC(zk_semaphores_internal, zk_snapshot_rows(fcinfo, want_sem, sem_row))
