/*-------------------------------------------------------------------------
 *
 * barrier.h
 *	  The barrier recipes' shared formats: double barriers, gates and
 *	  durable arrivals.
 *
 *	  ZooKeeper layout:
 *		<root>/barriers/<name>/<32 hex>		a member (ephemeral), kazoo
 *											DoubleBarrier; data = who
 *		<root>/barriers/<name>/ready		created when the barrier opens
 *		<root>/gates/<name>					exists while the gate is closed
 *											(kazoo Barrier)
 *		<root>/arrivals/<name>/<participant> one arrival (persistent)
 *
 *	  Gate changes and arrivals are written at COMMIT, with the queue's
 *	  transaction node (see queue.h, ZKQ_OP_*).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_BARRIER_H
#define ZKLOCK_BARRIER_H

#include "zklock.h"

typedef enum ZkBarrierOp
{
	ZKB_NONE = 0,
	/* ZKK_BWAIT */
	ZKB_GATE,					/* until the gate node is absent */
	ZKB_ARRIVALS,				/* until "parties" participants arrived */
	/* ZKK_BMEMBER */
	ZKB_ENTER,					/* member node, waiting for the others */
	ZKB_MEMBER,					/* entered; the node stays */
	ZKB_LEAVE,					/* leaving: waiting for the others to leave */
	ZKB_LEFT,					/* left: no node */
	/* ZKK_BINFO */
	ZKB_LIST,					/* the arrivals, as ZkArrivalRec rows */
	ZKB_RESET					/* delete every arrival */
} ZkBarrierOp;

/* One arrival in a ZKB_LIST answer (a ZkAnswer of MAXALIGNed records) */
typedef struct ZkArrivalRec
{
	int64		ctime_ms;
	uint32		namelen;		/* the node's name, as stored (encoded) */
	uint32		datalen;
	/* followed by name and data */
} ZkArrivalRec;

#define ZKB_READY			"ready"
#define ZKB_READY_CHECKS	32	/* members a create of ready checks */

/* barrier_backend.c: what the SQL functions (barrier_sql.c) call */
extern bool zk_barrier_enter_member(const char *name, int len, int32 parties,
									int64 timeout_ms);
extern bool zk_barrier_leave_member(const char *name, int len, int64 timeout_ms);
extern bool zk_barrier_wait(int bop, const char *name, int len, int32 parties,
							int64 timeout_ms, const char *what);
struct ZkAnswer;
extern struct ZkAnswer *zk_barrier_read_arrivals(const char *name, int len);
extern int64 zk_barrier_reset_arrivals(const char *name, int len);

/* paths: <root>/barriers/<enc>, <root>/gates/<enc>, <root>/arrivals/<enc> */
extern void zk_barrier_path(const char *what, const char *name, char *out, size_t outlen);

#endif							/* ZKLOCK_BARRIER_H */
