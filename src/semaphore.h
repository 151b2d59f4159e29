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

/* the steps of a ZKK_SEMLEASE entry (step.sem); sem_worker.c */
typedef enum ZkSemStep
{
	ZKSEM_ENSURE = 1,			/* the pool, with max_leases as its data */
	ZKSEM_LIST,					/* count the leases (and look for ours) */
	ZKSEM_CREATE,				/* create our lease */
	ZKSEM_COUNT					/* (a try's first look) any lease free?  GRANTED
								 * when so, BUSY when not; takes nothing */
} ZkSemStep;

/* names.c */
extern void zk_check_semaphore_name(const char *name, int len);

/* sem_backend.c: what the SQL functions (sem_sql.c) call */
extern bool zk_sem_acquire(const char *name, int len, int32 max, ZkScope scope,
						   bool try_only, volatile int64 timeout_ms);
extern bool zk_sem_release_session(const char *name, int len);

#endif							/* ZKLOCK_SEMAPHORE_H */
