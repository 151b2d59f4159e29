/*-------------------------------------------------------------------------
 *
 * election.h
 *	  The election recipe's calls from elsewhere: its setting's hooks
 *	  (zklock.c), a candidacy granted (lock_worker.c); the most names
 *	  zklock.elections lists (election_sql.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_ELECTION_H
#define ZKLOCK_ELECTION_H

#include "zklock.h"

#define ELECTION_MAX		32	/* names in zklock.elections */

/* election.c: the worker's candidacies */
extern void zk_election_won(ZkEntry *e);
extern void zk_assign_elections(const char *newval, void *extra);
extern bool zk_check_elections(char **newval, void **extra, GucSource source);

#endif							/* ZKLOCK_ELECTION_H */
