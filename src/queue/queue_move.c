/*-------------------------------------------------------------------------
 *
 * queue_move.c
 *	  zk_queue_move (ZKQI_MOVE): a queue's unclaimed items moved into
 *	  another queue, each exactly once.
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"

/* Start a move (zk_qinfo_drive) */
void
zk_q_move_start(ZkEntry *e)
{
	e->state = ZKE_DONE;
	zk_fail(e, ERRCODE_FEATURE_NOT_SUPPORTED, "zk_queue_move is not built yet");
}
