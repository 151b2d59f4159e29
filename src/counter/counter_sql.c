/*-------------------------------------------------------------------------
 *
 * counter_sql.c
 *	  The counter recipe's SQL functions: zk_counter_add, zk_counter_get,
 *	  zk_counter_set and zk_counter_drop.  What they call is in
 *	  counter_backend.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "counter.h"

#include "fmgr.h"

PG_FUNCTION_INFO_V1(zk_counter_add);
PG_FUNCTION_INFO_V1(zk_counter_get);
PG_FUNCTION_INFO_V1(zk_counter_set);
PG_FUNCTION_INFO_V1(zk_counter_drop);

/* A bigint argument argno, named what: not NULL (22004) */
static int64
arg_bigint(FunctionCallInfo fcinfo, int argno, const char *what, const char *hint)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("zklock counter %s must not be null", what),
				 errhint("%s", hint)));
	return PG_GETARG_INT64(argno);
}

/* The counter's name, argument 0, ready for a request */
static char *
arg_counter(FunctionCallInfo fcinfo, int *len)
{
	char	   *name = zk_arg_text_name(fcinfo, 0, "counter name", len);

	zk_require_shmem();
	zk_backend_init();
	return name;
}

/* zk_counter_add(name, delta): the counter's new value */
Datum
zk_counter_add(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_counter(fcinfo, &len);
	int64		delta = arg_bigint(fcinfo, 1, "delta",
								   "Give the amount to add, negative to subtract.");
	int64		result;

	(void) zk_counter_request(name, len, ZKCN_ADD, delta, 0, &result);
	PG_RETURN_INT64(result);
}

/* zk_counter_get(name): the counter's value, 0 when there is no node */
Datum
zk_counter_get(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_counter(fcinfo, &len);
	int64		result;

	(void) zk_counter_request(name, len, ZKCN_GET, 0, 0, &result);
	PG_RETURN_INT64(result);
}

/* zk_counter_set(name, value, expected): true when it was expected and is now value */
Datum
zk_counter_set(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_counter(fcinfo, &len);
	int64		value = arg_bigint(fcinfo, 1, "value",
								   "Give the value to write.");
	int64		expected = arg_bigint(fcinfo, 2, "expected value",
									  "Give the value the counter must have for the write to happen (0 for a counter that does not exist yet).");
	int64		result;

	PG_RETURN_BOOL(zk_counter_request(name, len, ZKCN_SET, value, expected,
									  &result) == ZKCV_OK);
}

/* zk_counter_drop(name): true when its node was there and is deleted */
Datum
zk_counter_drop(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *name = arg_counter(fcinfo, &len);
	int64		result;

	PG_RETURN_BOOL(zk_counter_request(name, len, ZKCN_DROP, 0, 0,
									  &result) == ZKCV_OK);
}
