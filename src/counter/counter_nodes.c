/*-------------------------------------------------------------------------
 *
 * counter_nodes.c
 *	  A counter's node, for both halves of the recipe: its path and the
 *	  value its data holds, in kazoo's Counter format.
 *
 *	  kazoo writes repr(value).encode('ascii') and reads empty data as its
 *	  default, 0.  zklock reads exactly what it writes: an optional '-' and
 *	  1 to 19 digits, nothing else (no sign '+', no spaces, no '_'), at most
 *	  ZK_COUNTER_DATA_MAX bytes, within bigint's range.  Python reads more
 *	  (" 7", "1_000", integers of any size); such data is refused, never
 *	  guessed at, and left as it is.  Data longer than ZK_COUNTER_SCAN_MAX
 *	  is not even scanned.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "counter.h"

/* <root>/counters/<encoded name> of a name in its namespace (UTF-8) */
void
zk_counter_path(const char *qname, char *out, size_t outlen)
{
	char		ename[ZKLOCK_ENAME_MAX + 1];

	zk_encode_name(qname, strlen(qname), ename);
	snprintf(out, outlen, "%s/counters/%s", zk_root, ename);
}

/*
 * The value of a counter's data (len bytes, not terminated; len 0 is 0):
 * false, with *why (ZKCV_GARBAGE or ZKCV_RANGE), when it is not a decimal
 * integer zklock writes.  Never raises, whatever the data.
 */
bool
zk_counter_parse(const char *data, int len, int64 *value, ZkCounterVerdict *why)
{
	uint64		mag = 0;
	bool		neg = false;
	int			i = 0;
	int			digits;

	*value = 0;
	*why = ZKCV_GARBAGE;
	if (len <= 0)
		return true;			/* kazoo's ensure_path: no data yet, 0 */
	if (len > ZK_COUNTER_SCAN_MAX)
		return false;			/* not even looked at */
	if (data[0] == '-')
	{
		neg = true;
		i = 1;
	}
	digits = len - i;
	if (digits < 1)
		return false;
	for (; i < len; i++)
		if (data[i] < '0' || data[i] > '9')
			return false;
	/* a decimal integer: beyond bigint when it has too many digits */
	*why = ZKCV_RANGE;
	if (len > ZK_COUNTER_DATA_MAX)
		return false;
	for (i = neg ? 1 : 0; i < len; i++)
	{
		uint64		d = (uint64) (data[i] - '0');

		if (mag > (PG_UINT64_MAX - d) / 10)
			return false;
		mag = mag * 10 + d;
	}
	if (neg)
	{
		if (mag > (uint64) PG_INT64_MAX + 1)
			return false;
		*value = (mag == (uint64) PG_INT64_MAX + 1) ? PG_INT64_MIN : -(int64) mag;
	}
	else
	{
		if (mag > (uint64) PG_INT64_MAX)
			return false;
		*value = (int64) mag;
	}
	return true;
}
