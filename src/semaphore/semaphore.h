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
 *	 LIST --(fewer leases than max_leases)--> CREATE
 *	 LIST --(full)--> WAITING on the pool's watch --(fired)--> LIST
 *	 LIST, CREATE --(pool gone: NONODE)--> ENSURE
 *	 CREATE --(created)--> HELD --(released)--> its lease deleted, FREE
 *	 CREATE --(answer lost)--> in doubt, LIST when usable again
 *	 (a try, before the guard) COUNT --(read, listed once)--> DONE:
 *		GRANTED when a lease is free, BUSY when not or 22023; takes nothing
 *
 * Any step --(a definite ZooKeeper error)--> DONE, failed (NOAUTH: 42501).
 */
typedef enum ZkSemStep
{
	ZKSEM_ENSURE = 1,			/* the pool, with max_leases as its data */
	ZKSEM_LIST,					/* count the leases (and look for ours) */
	ZKSEM_CREATE,				/* create our lease */
	ZKSEM_COUNT					/* (a try's first look) any lease free?  GRANTED
								 * when so, BUSY when not; takes nothing */
} ZkSemStep;

/* sem_backend.c: what the SQL functions (sem_sql.c) call */
extern bool zk_sem_acquire(const char *name, int len, int32 max, ZkScope scope,
						   bool try_only, volatile int64 timeout_ms);
extern bool zk_sem_release_session(const char *name, int len);

#endif							/* ZKLOCK_SEMAPHORE_H */
