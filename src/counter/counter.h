/*-------------------------------------------------------------------------
 *
 * counter.h
 *	  The counter recipe's definitions shared by its files (counter_worker.c,
 *	  counter_backend.c, counter_sql.c): the operations a ZKK_COUNTER entry
 *	  asks for, the fields it keeps over ZkEntry.part, the verdicts the
 *	  worker answers with, and the bounds of a counter's data.
 *
 *	  A counter is kazoo's Counter: one persistent node,
 *	  <root>/counters/<encoded name>, whose data is the value in ASCII
 *	  decimal (Python's repr(int)); empty data is 0.  See src/counter/README.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_COUNTER_H
#define ZKLOCK_COUNTER_H

#include "zklock.h"

/* what a ZKK_COUNTER entry asks (step.counter) */
typedef enum ZkCounterOp
{
	ZKCN_ADD = 1,				/* add arg; answer the new value */
	ZKCN_GET,					/* read the value */
	ZKCN_SET,					/* write arg if the value is "expected" */
	ZKCN_DROP					/* delete the node */
} ZkCounterOp;

/*
 * What the worker answers in ZKCP(e)->verdict, with outcome GRANTED (done)
 * or BUSY (not done: the backend raises the error the verdict names, or
 * answers false)
 */
typedef enum ZkCounterVerdict
{
	ZKCV_OK = 0,				/* done; result is the value */
	ZKCV_MISMATCH,				/* set: the value was not "expected"
								 * (result is it); drop: no node */
	ZKCV_OVERFLOW,				/* add: out of bigint's range, not written */
	ZKCV_GARBAGE,				/* the node's data is not a decimal integer
								 * (bad holds its first bytes) */
	ZKCV_RANGE,					/* a decimal integer beyond bigint's range */
	ZKCV_CONTENDED,				/* changed by other clients ZK_COUNTER_ROUNDS
								 * times in a row */
	ZKCV_DOUBT					/* its write's answer was lost (or the
								 * worker restarted) and the counter moved
								 * on: it may have landed */
} ZkCounterVerdict;

/*
 * The longest data zklock reads as a value: "-9223372036854775808" has 20
 * bytes.  Longer data is refused without being parsed.
 */
#define ZK_COUNTER_DATA_MAX		20

/* longer data is refused as garbage without a look at its bytes */
#define ZK_COUNTER_SCAN_MAX		64

/* bytes of a refused node's data shown in the error's detail */
#define ZK_COUNTER_BAD_MAX		32

/*
 * How many versioned writes of one request may find the counter changed by
 * another client (ZBADVERSION) before it fails (40001): a counter others
 * keep changing costs the worker one read and one write per round, and
 * wedges nobody.
 */
#define ZK_COUNTER_ROUNDS		100

/*
 * A counter entry's own fields (ZKK_COUNTER), laid over ZkEntry.part:
 * ZKCP(e)->arg.  Zeroed at allocation.  The backend writes arg and
 * expected before it submits; the worker the rest.
 */
typedef struct ZkCounterPart
{
	int64		arg;			/* add: delta; set: the new value */
	int64		expected;		/* set: the value it must find */
	int64		result;			/* the answer: the new value (add), the
								 * value (get, a set refused) */
	int32		rounds;			/* writes that found the counter changed */
	uint8		verdict;		/* ZkCounterVerdict */
	bool		listed;			/* worker-private: in its counter's lists */
	uint8		badlen;			/* bytes in bad */
	char		bad[ZK_COUNTER_BAD_MAX];	/* garbage: the data's first bytes */
	int32		datalen;		/* garbage, range: the data's length */
} ZkCounterPart;

ZK_ENTRY_PART_FITS(ZkCounterPart);
#define ZKCP(e)		ZK_ENTRY_PART(e, ZkCounterPart)

/*
 * counter_backend.c: the node's path (the worker's too), a value's text,
 * and what the SQL functions (counter_sql.c) call
 */
extern void zk_counter_path(const char *qname, char *out, size_t outlen);
extern bool zk_counter_parse(const char *data, int len, int64 *value,
							 ZkCounterVerdict *why);
extern ZkCounterVerdict zk_counter_request(const char *name, int len,
										   ZkCounterOp op, int64 arg,
										   int64 expected, int64 *result);

#endif							/* ZKLOCK_COUNTER_H */
