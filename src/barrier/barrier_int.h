/*-------------------------------------------------------------------------
 *
 * barrier_int.h
 *	  The barrier recipes' worker half: what barrier_worker.c (watched
 *	  objects, ZKK_BWAIT), barrier_member.c (ZKK_BMEMBER) and
 *	  barrier_arrivals.c (ZKK_BINFO) share.  Worker only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_BARRIER_INT_H
#define ZKLOCK_BARRIER_INT_H

#include "recipe.h"
#include "barrier.h"

#include "utils/hsearch.h"

/* A watched object: a gate, an arrivals node or a barrier (barrier_worker.c) */
/*
 * Where an object's probe (the read that answers its waiters) is:
 *
 *	 IDLE  --zk_b_obj_kick, waiters, session usable: obj_probe-->  OUT
 *	 IDLE  --zk_b_obj_kick, waiters, no usable session-->		  RETRY
 *	 OUT   --zk_b_obj_kick (something changed meanwhile)-->		  AGAIN
 *	 OUT, AGAIN --an answer (obj_probe_end)-->					  IDLE, and
 *				  from AGAIN a kick (probe again) when anyone waits
 *	 OUT, AGAIN --no answer (obj_probe_failed, not definite)-->	  RETRY
 *	 AGAIN --an answer that settles it for good-->				  OUT
 *	 RETRY --the session is usable (b_session_usable)-->		  IDLE, kick
 *	 any   --the session ends (b_session_reset)-->				  RETRY with
 *				  waiters, else IDLE (or RETRY if it was)
 */
typedef enum BObjProbe
{
	BPROBE_IDLE = 0,
	BPROBE_OUT,					/* a probe is in flight */
	BPROBE_AGAIN,				/* ... and probes again when it returns */
	BPROBE_RETRY				/* probes once the session is usable */
} BObjProbe;

#define BOBJ_PROBING(o) ((o)->probe == BPROBE_OUT || (o)->probe == BPROBE_AGAIN)

typedef struct BObj
{
	char		path[ZK_PATH_MAX];	/* hash key */
	uint8		op;				/* ZKB_GATE, ZKB_ARRIVALS or ZKB_ENTER */
	int			nw;				/* waiters */
	int			cap;
	uint32	   *widx;
	uint32	   *wgen;
	uint8		probe;			/* BObjProbe */
	bool		watching;		/* a watch of ours may be set on path */
	/* the last probe of a barrier */
	int			members;
	char	   *rmembers;		/* up to ZKB_READY_CHECKS of its members'
								 * names, NUL-separated (in zk_b_context):
								 * the create of ready checks they are all
								 * still there (barrier_evaluate) */
	int			nrmembers;
	int64		ready_czxid;	/* 0: no ready */
	int32		ready_version;
	bool		rwatching;		/* an exists watch of ours may be set on
								 * ready (see barrier_ready_event) */
	int			rinflight;		/* exists requests on ready not answered */
	bool		rclosing;		/* a leaving member's delete of ready is
								 * unanswered (zk_b_close_ready) */
	int			creating;		/* members' creates unanswered: the watch
								 * on ready sent behind each stays until
								 * they are (zk_b_obj_create_sent) */
	uint64		node_session;	/* a member was created in the barrier's
								 * node in this session (zk_cur_session):
								 * the node is there, no need to make it */
	bool		recheck;		/* on idle_checks */
	TimestampTz idle_since;
	uint32		id;				/* names it to ZooKeeper (obj_ctx) */
	TimestampTz last_used;		/* last looked up for an entry */
} BObj;

/* barrier_worker.c */
extern MemoryContext zk_b_context(void);
extern void zk_barrier_path(const char *what, const char *name, char *out,
							size_t outlen);
extern void zk_b_obj_add(BObj *o, ZkEntry *e);
extern void zk_b_obj_remove_entry(BObj *o, ZkEntry *e);
extern void zk_b_entry_free(ZkEntry *e);
extern BObj *zk_b_obj_of(ZkEntry *e);
extern void zk_b_obj_kick(BObj *o);
extern void zk_b_obj_wait(BObj *o, ZkEntry *e);
extern int zk_b_barrier_watch_ready(BObj *o, bool behind);
extern void zk_b_close_ready(BObj *o);
extern void zk_b_obj_create_sent(BObj *o);
extern void zk_b_obj_create_done(BObj *o);
extern void zk_b_obj_unwatch_unused(BObj *o);

#endif							/* ZKLOCK_BARRIER_INT_H */
