/*-------------------------------------------------------------------------
 *
 * semaphore.h
 *	  The semaphore recipe's definitions shared by its files (sem_worker.c,
 *	  sem_backend.c, sem_sql.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_SEMAPHORE_H
#define ZKLOCK_SEMAPHORE_H

#include "zklock.h"

/*
 * The steps of a ZKK_SEMLEASE entry (step.sem); sem_worker.c says what each
 * sends.  Transitions:
 *
 *	 (new) --> ENSURE --(pool there, its max_leases)--> LIST
 *	 ENSURE --(other max_leases)--> DONE, 22023
 *	 LIST --(our lease listed: a lost create landed)--> HELD
 *	 LIST --(room for the permits asked for)--> CREATE
 *	 LIST --(full)--> WAITING on the pool's watch --(fired)--> LIST
 *	 LIST, CREATE --(pool gone: NONODE)--> ENSURE
 *	 CREATE --(created: every permit's lease, in one multi)--> HELD
 *	 HELD --(released)--> its leases deleted, FREE
 *	 CREATE --(answer lost)--> in doubt, LIST when usable again
 *	 (a try, before the guard) COUNT --(read, listed once)--> DONE:
 *		GRANTED when the permits asked for are free, BUSY when not or
 *		22023; takes nothing
 *
 *	 LIST --(the pool's data version moved: its max_leases changed)-->
 *		ENSURE, which reads it and adopts it
 *	 (zk_semaphore_set_max) SETREAD --(read)--> DONE; SETWRITE --(the
 *		versioned write, with a child made and deleted in the same multi
 *		when raising, so that a waiter's watch on the pool fires)--> DONE
 *
 * Any step --(a definite ZooKeeper error)--> DONE, failed (NOAUTH: 42501).
 */
typedef enum ZkSemStep
{
	ZKSEM_ENSURE = 1,			/* the pool, with max_leases as its data */
	ZKSEM_LIST,					/* count the leases (and look for ours) */
	ZKSEM_CREATE,				/* create our lease */
	ZKSEM_COUNT,				/* (a try's first look) any lease free?  GRANTED
								 * when so, BUSY when not; takes nothing */
	ZKSEM_SETREAD,				/* (zk_semaphore_set_max) read max_leases and
								 * its version: token, pool_version */
	ZKSEM_SETWRITE				/* (zk_semaphore_set_max) write parties at
								 * pool_version: GRANTED, or BUSY when the
								 * pool changed or went */
} ZkSemStep;

/*
 * A ZKK_SEMLEASE entry's own fields (ZkEntry.part).  A holder of several
 * permits has as many lease nodes, created in one multi (all or none):
 * lease i is named by the entry's guid with its last two hex digits
 * replaced by i (sem_worker.c, lease_name), so that they stay 32 hex
 * digits as kazoo's, and that finding lease 0 finds them all.
 */
typedef struct ZkSemPart
{
	int32		permits;		/* leases taken at once (0 is read as 1) */
	int32		deletes_left;	/* a release's deletes not yet answered */
	bool		delete_retry;	/* one of them must be sent again */
	bool		version_known;	/* pool_version was read */
	bool		adopt;			/* take the pool's max_leases, whatever it is
								 * (it changed while this entry waited) */
	bool		raise;			/* ZKSEM_SETWRITE: wake the pool's waiters */
	int32		pool_version;	/* the pool's data version, as last read */
} ZkSemPart;

ZK_ENTRY_PART_FITS(ZkSemPart);
#define ZKSEM(e)	ZK_ENTRY_PART(e, ZkSemPart)

/* the most permits one call takes (lease names keep two hex digits for it) */
#define ZK_SEM_PERMITS_MAX	64

/* sem_backend.c: what the SQL functions (sem_sql.c) call */
extern bool zk_sem_acquire(const char *name, int len, int32 max, int32 permits,
						   ZkScope scope, bool try_only,
						   volatile int64 timeout_ms);
extern bool zk_sem_release_session(const char *name, int len);
extern int32 zk_sem_set_max(const char *name, int len, int32 max,
							volatile int64 timeout_ms);

#endif							/* ZKLOCK_SEMAPHORE_H */
