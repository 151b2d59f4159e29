/*-------------------------------------------------------------------------
 *
 * lease.h
 *	  The lease recipe's definitions shared by its files (lease_worker.c,
 *	  lease_backend.c, lease_sql.c).
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
	ZKL_WRITE,					/* replace it, while holding the lease's lock */
	ZKL_DELETE					/* delete it (zk_lease_release), same lock */
} ZkLeaseOp;

/* A holder node's data, as kazoo writes it */
/*
 * A lease entry's own fields (ZKK_LEASE), laid over ZkEntry.part:
 * ZKLS(e)->version.  Zeroed at allocation.
 */
typedef struct ZkLeasePart
{
	int32		version;		/* a write: the holder's version, -1: none */
} ZkLeasePart;

ZK_ENTRY_PART_FITS(ZkLeasePart);
#define ZKLS(e)		ZK_ENTRY_PART(e, ZkLeasePart)

typedef struct ZkLeaseData
{
	char	   *version;		/* the JSON token, numbers only */
	char	   *holder;
	char	   *end;
} ZkLeaseData;

/* lease_backend.c: what the SQL functions (lease_sql.c) call */
extern bool zk_lease_try(const char *name, int len, const char *holder,
						 int64 duration_us);
extern bool zk_lease_read(const char *name, int len, char **data, int *datalen);
extern bool zk_lease_end(const char *name, int len, const char *holder);
extern bool zk_lease_parse(const char *data, int len, ZkLeaseData *ld);
extern bool zk_lease_parse_end(const char *s, TimestampTz *out);
extern char *zk_lease_default_holder(int *len);
ZK_NORETURN extern void zk_lease_unreadable(const char *uname, const char *why);

/* lease_sweep.c: the worker's cleanup of ended leases (its hooks) */
#define SWEEP_SLOTS		4		/* candidates handled at once, one lock each */
extern void zk_lease_sweep_turn(void);
extern void zk_lease_sweep_reset(void);
extern void zk_lease_sweep_reload(void);

#endif							/* ZKLOCK_LEASE_H */
