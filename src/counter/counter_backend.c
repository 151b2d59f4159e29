/*-------------------------------------------------------------------------
 *
 * counter_backend.c
 *	  The counter recipe's backend half: one request to the worker per call
 *	  of zk_counter_add, zk_counter_get, zk_counter_set and zk_counter_drop
 *	  (their SQL functions: counter_sql.c), and the errors their answers
 *	  raise.
 *
 *	  A counter belongs to no transaction: like nextval, an add (a set, a
 *	  drop) is in ZooKeeper once the call returns, and a ROLLBACK does not
 *	  undo it.  A call cancelled or timed out after its request reached the
 *	  worker may still be applied.
 *
 *	  Before an add or a set is sent, the role's write rate is charged
 *	  (quota.c) and what the root keeps is checked (kept.c): the counter's
 *	  node may be created.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "counter.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"

/*
 * What one write of a counter costs the role's write rate: the setData (or
 * create) of about 20 bytes and its path, in ZooKeeper's log
 */
#define COUNTER_WRITE_CHARGE	128

/* the request this backend has with the worker, let go at exit (FATAL) */
static uint32 op_idx = ZKLOCK_NO_ENTRY;
static uint32 op_gen = 0;

/* At exit: let go of the request in progress */
static void
counter_at_exit(void)
{
	zk_let_go(&op_idx, op_gen);
}

/* zk_path('counter', name): the counter's node in this session's namespace */
static void
counter_kind_path(const char *kind, int arg, const char *name, int len,
				  char *out, size_t outlen)
{
	zk_counter_path(zk_path_qname(name, len, &len), out, outlen);
}

const ZkRecipeBackend zk_counter_backend = {
	.at_exit = counter_at_exit,
	ZK_PATH_HOOK("counter", counter_kind_path, 0),
};

/* what each operation is, in "could not %s" */
static const char *
op_what(ZkCounterOp op)
{
	switch (op)
	{
		case ZKCN_ADD:
			return "add to the counter";
		case ZKCN_GET:
			return "read the counter";
		case ZKCN_SET:
			return "set the counter";
		case ZKCN_DROP:
			return "drop the counter";
	}
	return "use the counter";
}

/* The node's data, as the detail of an error shows it (printable ASCII) */
static char *
bad_data(const ZkCounterPart *p)
{
	StringInfoData buf;
	int			i;

	initStringInfo(&buf);
	for (i = 0; i < p->badlen; i++)
	{
		unsigned char ch = (unsigned char) p->bad[i];

		if (ch >= 0x20 && ch < 0x7F && ch != '\\')
			appendStringInfoChar(&buf, ch);
		else
			appendStringInfo(&buf, "\\x%02x", ch);
	}
	if (p->datalen > p->badlen)
		appendStringInfoString(&buf, "...");
	return buf.data;
}

/* Raise the error a verdict names (not ZKCV_OK nor ZKCV_MISMATCH) */
static void
raise_verdict(const char *uname, ZkCounterOp op, const ZkCounterPart *p)
{
	switch ((ZkCounterVerdict) p->verdict)
	{
		case ZKCV_OVERFLOW:
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("zookeeper counter \"%s\" would go out of range", uname),
					 errdetail("Its value is " INT64_FORMAT "; adding " INT64_FORMAT " leaves bigint's range. Nothing was written.",
							   p->result, p->arg),
					 errhint("Add a smaller delta, or start again from a value with zk_counter_set().")));
			break;
		case ZKCV_GARBAGE:
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("zookeeper counter \"%s\" holds data that is not a decimal integer", uname),
					 errdetail("Its node holds %d bytes: \"%s\". Nothing was changed.",
							   p->datalen, bad_data(p)),
					 errhint("Another client wrote it: write a decimal integer into the node (zk_path('counter', name)) with a ZooKeeper client, or delete the counter with zk_counter_drop().")));
			break;
		case ZKCV_RANGE:
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("zookeeper counter \"%s\" holds a value out of bigint's range", uname),
					 errdetail("Its node holds \"%s\". Nothing was changed.", bad_data(p)),
					 errhint("Another client wrote it: write a value within bigint's range into the node (zk_path('counter', name)), or delete the counter with zk_counter_drop().")));
			break;
		case ZKCV_CONTENDED:
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not %s \"%s\": other clients kept changing it", op_what(op), uname),
					 errdetail("%d versioned writes in a row found the counter changed by a client outside this PostgreSQL cluster. Nothing was written.",
							   p->rounds),
					 errhint("Retry; check which clients write the counter.")));
			break;
		case ZKCV_DOUBT:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not %s \"%s\": its outcome is unknown", op_what(op), uname),
					 errdetail("The answer to its write was lost (the connection to ZooKeeper, or the zklock worker restarted) and the counter changed since; it may or may not have been applied."),
					 errhint("Read the counter with zk_counter_get() before trying again.")));
			break;
		default:
			elog(ERROR, "unexpected verdict %d of zklock counter \"%s\"", p->verdict, uname);
	}
}

/*
 * Ask the worker for op on the counter name (len bytes of UTF-8): arg is
 * an add's delta or a set's value, expected a set's condition.  Returns
 * ZKCV_OK (*result: the new value, the value read) or ZKCV_MISMATCH (a
 * set: the value was not expected, *result is it; a drop: no node);
 * raises every other verdict.
 */
ZkCounterVerdict
zk_counter_request(const char *name, int len, ZkCounterOp op, int64 arg,
				   int64 expected, int64 *result)
{
	char	   *uname = zk_display_name(name);
	ZkEntry    *e;
	ZkCounterPart part;
	char	   *what = psprintf("%s \"%s\"", op_what(op), uname);

	if (op_idx != ZKLOCK_NO_ENTRY)
		counter_at_exit();		/* left by an error we did not see (cannot happen) */

	if (op == ZKCN_ADD || op == ZKCN_SET)
	{
		/* all of the root's, as last read (kept.c): the node may be made */
		zk_kept_check(ZK_COUNTER_DATA_MAX, 1, true, "The counter's node");
		/* the role's zklock.max_write_rate, before anything is sent */
		zk_quota_charge_write(COUNTER_WRITE_CHARGE, "The counter's value");
	}
	else if (op == ZKCN_DROP)
		zk_quota_charge_write(COUNTER_WRITE_CHARGE, "The counter's delete");

	e = zk_new_entry(ZKK_COUNTER, name, len, ZKM_EXCLUSIVE, ZKS_TRANSACTION, false);
	e->step.counter = op;
	ZKCP(e)->arg = arg;
	ZKCP(e)->expected = expected;
	zk_submit_entry(e, &op_idx, &op_gen);

	PG_TRY();
	{
		(void) zk_wait_outcome(op_idx, -1, zk_connect_timeout, what);
	}
	PG_CATCH();
	{
		zk_let_go(&op_idx, op_gen);
		PG_RE_THROW();
	}
	PG_END_TRY();

	zk_backend_lock(LW_SHARED);
	memcpy(&part, ZKCP(zk_entry(op_idx)), sizeof(part));
	LWLockRelease(zk_ctl->lock);
	zk_let_go(&op_idx, op_gen);

	if (part.verdict != ZKCV_OK && part.verdict != ZKCV_MISMATCH)
	{
		part.arg = arg;
		raise_verdict(uname, op, &part);
	}
	*result = part.result;
	return (ZkCounterVerdict) part.verdict;
}
