/*-------------------------------------------------------------------------
 *
 * election.h
 *	  The election recipe's own definitions, shared by its files: its
 *	  setting, zklock.elections, and the most names it lists.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_ELECTION_H
#define ZKLOCK_ELECTION_H

#include "zklock.h"

#define ELECTION_MAX		32	/* names in zklock.elections */

/* election.c: the worker's candidacies */
extern char *zk_elections;

/* leader_wait.c: a wait for a change of a campaign's leader */
extern bool zk_leader_wait_change(const char *name, int len, const char *node,
								  int64 timeout_ms);

#endif							/* ZKLOCK_ELECTION_H */
