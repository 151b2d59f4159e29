/*-------------------------------------------------------------------------
 *
 * lease_sql.c
 *	  The lease recipe's SQL functions: zk_try_lease, zk_lease_holder and
 *	  the zk_leases view.  What they call is in lease_backend.c; the layout
 *	  and the data (kazoo's NonBlockingLease) are described there.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "lock/lock.h"
#include "lease.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(zk_try_lease);
PG_FUNCTION_INFO_V1(zk_lease_holder);
PG_FUNCTION_INFO_V1(zk_leases_internal);
PG_FUNCTION_INFO_V1(zk_lease_release);

/*
 * The duration in microseconds: 1 second to 100 years, and at most
 * zklock.max_lease_duration (0: no limit)
 */
static int64
arg_duration(FunctionCallInfo fcinfo, int argno)
{
	Interval   *iv;
	int64		usecs;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock lease duration must not be null"),
				 errhint("Give how long the lease lasts, for example '50 seconds'.")));
	iv = PG_GETARG_INTERVAL_P(argno);
	usecs = iv->time + (int64) iv->day * USECS_PER_DAY;
	if (iv->month > 1200 || iv->month < -1200)
		usecs = iv->month < 0 ? -1 : PG_INT64_MAX;
	else
		usecs += (int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
	if (usecs < USECS_PER_SEC || usecs > (int64) 36500 * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock lease duration must be between 1 second and 100 years"),
				 errdetail("The duration was %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(iv)))),
				 errhint("The lease's end is stored to the second: give at least '1 second'.")));
	if (zk_max_lease_duration > 0 &&
		usecs > (int64) zk_max_lease_duration * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock lease duration exceeds zklock.max_lease_duration"),
				 errdetail("The duration was %s; zklock.max_lease_duration is %d seconds.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(iv))),
						   zk_max_lease_duration),
				 errhint("Take a shorter lease and renew it before it ends (zk_try_lease with the same holder), or ask a superuser to raise zklock.max_lease_duration.")));
	return usecs;
}

/*
 * The holder argument argno: as given, or this server's default holder
 * (zk_lease_default_holder) when it is absent or NULL
 */
static char *
arg_holder(FunctionCallInfo fcinfo, int argno)
{
	int			hlen;

	if (PG_NARGS() > argno && !PG_ARGISNULL(argno))
		return zk_arg_text_name(fcinfo, argno, "lease holder", &hlen);
	return zk_lease_default_holder(&hlen);
}

/*
 * zk_try_lease(name text, duration interval, holder text DEFAULT NULL)
 */
Datum
zk_try_lease(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "lease name", &len);
	int64		duration_us = arg_duration(fcinfo, 1);
	char	   *holder = arg_holder(fcinfo, 2);

	zk_require_shmem();
	zk_backend_init();
	PG_RETURN_BOOL(zk_lease_try(name, len, holder, duration_us));
}

/*
 * zk_lease_holder(name text) -> (holder text, ends_at timestamptz,
 * this_cluster boolean, expired boolean): the lease as ZooKeeper has it;
 * no row when nobody ever took it.
 */
Datum
zk_lease_holder(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "lease name", &len);
	char	   *data;
	int			datalen;
	ZkLeaseData	ld;
	TimestampTz end;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	int			dlen;
	char	   *mine = zk_lease_default_holder(&dlen);
	char	   *h;

	InitMaterializedSRF(fcinfo, 0);
	zk_require_shmem();
	zk_backend_init();
	if (!zk_lease_read(name, len, &data, &datalen))
		PG_RETURN_VOID();
	if (!zk_lease_parse(data, datalen, &ld))
		zk_lease_unreadable(zk_display_name(name), "It is not a JSON object with a version, a holder and an end.");
	h = zk_utf8_to_server_noerror(ld.holder, strlen(ld.holder));
	if (h != NULL)
		values[0] = CStringGetTextDatum(h);
	else
		nulls[0] = true;
	if (zk_lease_parse_end(ld.end, &end))
	{
		values[1] = TimestampTzGetDatum(end);
		values[3] = BoolGetDatum(GetCurrentTimestamp() >= end);
	}
	else
		nulls[1] = nulls[3] = true;
	values[2] = BoolGetDatum(strcmp(ld.holder, mine) == 0);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	PG_RETURN_VOID();
}

/*
 * zk_leases_internal() -> (name, holder, ends_at, this_server, expired):
 * every lease under <zklock.root>/leases, read in one pipelined batch (a
 * ZKK_HOLDERS listing of the leases' directory that reads each name's
 * lease_holder).  Names without a lease_holder node have no row; data
 * that is not a lease shows NULL holder and end.
 */
Datum
zk_leases_internal(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	dsm_segment *seg;
	ZkHoldersBuf *buf;
	char	   *p;
	int			n;
	int			i;
	int			dlen;
	char	   *mine = zk_lease_default_holder(&dlen);
	TimestampTz now = GetCurrentTimestamp();

	InitMaterializedSRF(fcinfo, 0);
	(void) zk_current_namespace();	/* the namespace is ours (nsclaim.c) */
	seg = zk_query_holders("leases", 6, ZKF_LEASEDIR);
	buf = dsm_segment_address(seg);
	n = buf->count;
	p = (char *) buf + MAXALIGN(sizeof(ZkHoldersBuf));
	for (i = 0; i < n; i++)
	{
		ZkHolderRec *rec = (ZkHolderRec *) p;
		char	   *enc = pnstrdup(p + sizeof(ZkHolderRec), rec->namelen);
		char	   *data = pnstrdup(p + sizeof(ZkHolderRec) + rec->namelen, rec->datalen);
		char	   *name = palloc(rec->namelen + 2);
		char	   *conv;
		ZkLeaseData	ld;
		TimestampTz end;
		Datum		values[5];
		bool		nulls[5] = {false, true, true, false, true};

		p += MAXALIGN(sizeof(ZkHolderRec) + rec->namelen + rec->datalen);
		zk_decode_qname(enc, name, rec->namelen + 2);
		/* the leases of this session's namespace only */
		if (!zk_name_in_namespace(name, zk_current_namespace()))
			continue;
		conv = zk_display_name(name);
		values[0] = CStringGetTextDatum(conv ? conv : enc);
		values[3] = BoolGetDatum(false);
		if (zk_lease_parse(data, rec->datalen, &ld))
		{
			char	   *h = zk_utf8_to_server_noerror(ld.holder, strlen(ld.holder));

			if (h != NULL)
			{
				values[1] = CStringGetTextDatum(h);
				nulls[1] = false;
			}
			if (zk_lease_parse_end(ld.end, &end))
			{
				values[2] = TimestampTzGetDatum(end);
				values[4] = BoolGetDatum(now >= end);
				nulls[2] = nulls[4] = false;
			}
			values[3] = BoolGetDatum(strcmp(ld.holder, mine) == 0);
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	dsm_detach(seg);
	PG_RETURN_VOID();
}

/*
 * zk_lease_release(name text, holder text DEFAULT NULL) -> boolean: end
 * holder's lease now and delete its node (lease_backend.c, zk_lease_end)
 */
Datum
zk_lease_release(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = zk_arg_text_name(fcinfo, 0, "lease name", &len);
	char	   *holder = arg_holder(fcinfo, 1);

	zk_require_shmem();
	zk_backend_init();
	PG_RETURN_BOOL(zk_lease_end(name, len, holder));
}
