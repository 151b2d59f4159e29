/*-------------------------------------------------------------------------
 *
 * queue_policy.c
 *	  A queue's dead-letter policy: kept as JSON in the data of the queue's
 *	  node, so that every cluster agrees; written by zk_queue_set_policy
 *	  (ZKQI_SET_POLICY), read by the worker for the queues it serves
 *	  dequeues from (queue_consume.c), applied at a claim
 *	  (queue_claim.c, "Dead letters").
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"

/* Start writing a policy (zk_qinfo_drive) */
void
zk_q_policy_set_start(ZkEntry *e)
{
	e->state = ZKE_DONE;
	zk_fail(e, ERRCODE_FEATURE_NOT_SUPPORTED, "zk_queue_set_policy is not built yet");
}
