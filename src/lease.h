/*-------------------------------------------------------------------------
 *
 * lease.h
 *	  The lease recipe's definitions shared by its backend and worker halves
 *	  (lease_backend.c, lease_worker.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_LEASE_H
#define ZKLOCK_LEASE_H

#include "zklock.h"

/* what a ZKK_LEASE entry asks (step.lease) */
typedef enum ZkLeaseOp
{
	ZKL_READ = 1,				/* read the holder node */
	ZKL_WRITE					/* replace it, while holding the lease's lock */
} ZkLeaseOp;

#endif							/* ZKLOCK_LEASE_H */
