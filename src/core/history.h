/*-------------------------------------------------------------------------
 *
 * history.h
 *	  The identity of this server's history in ZooKeeper (history.c).
 *
 *	  A restored base backup, a clone, or an old primary beside its promoted
 *	  standby share the system identifier and reuse transaction ids, so the
 *	  system identifier alone cannot say whose a claim or a transaction
 *	  node is.  Every start of PostgreSQL's shared memory is a "run" with a
 *	  random 64-bit id; every durable node names its run, and the WAL
 *	  record it names (ZkHistMark) carries the run and the transaction, so
 *	  a server can prove from its own WAL that the transaction is in its
 *	  history before it settles the node.  ZooKeeper layout:
 *
 *		<root>/runs/<sysid>-<run>			persistent, data: who, since when
 *		<root>/runs/<sysid>-<run>/live		ephemeral: the run is alive
 *		<root>/runs/<sysid>-<run>/heir		persistent: the run that took a
 *											dead run over (settles its nodes)
 *
 *	  $PGDATA/zklock.runs lists the runs this data directory had (its
 *	  lineage) and the runs it found alive after it started (it is a copy
 *	  of them and never takes them over).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_HISTORY_H
#define ZKLOCK_HISTORY_H

#include "zklock.h"

/* the content of the "zklock" WAL message a durable node names */
typedef struct ZkHistMark
{
	uint64		run;
	uint64		fxid;
} ZkHistMark;

#define ZK_HIST_PREFIX		"zklock"

/* what this server's WAL says about a node's record */
typedef enum ZkHistCheck
{
	ZKH_VERIFIED,				/* the record is there: the transaction is
								 * in this server's history */
	ZKH_MISMATCH,				/* another record is there, or the timeline is
								 * not ours: it is not */
	ZKH_BEYOND,					/* past the end of this server's WAL */
	ZKH_UNREADABLE				/* the WAL is gone (recycled) */
} ZkHistCheck;

typedef enum ZkRunStatus
{
	ZKR_UNKNOWN = 0,			/* not registered (or not surveyed): left alone */
	ZKR_CURRENT,				/* this server's run */
	ZKR_HEIR,					/* a dead run this server took over */
	ZKR_OTHER,					/* a dead run another server took over */
	ZKR_LIVE,					/* another server runs it now */
	ZKR_DEAD,					/* dead, nobody took it over yet */
	ZKR_DENIED					/* alive after this server started: this
								 * server is a copy of it; never taken over */
} ZkRunStatus;

typedef void (*zk_history_cb) (bool ok, void *arg);

/* worker */
extern void zk_history_session_reset(void);
extern void zk_history_turn(void);
extern bool zk_history_ready(void);
extern bool zk_history_fenced(void);
extern bool zk_history_refused(char *path, size_t len);
extern uint64 zk_history_run(void);
extern ZkHistCheck zk_history_verify(uint32 tli, uint64 rec, uint64 run, uint64 fxid);
extern bool zk_history_lineage(uint64 run, uint64 *fork_lsn);
extern bool zk_history_survey(zk_history_cb done, void *arg);
extern ZkRunStatus zk_history_status(uint64 run);
extern bool zk_history_alive(uint64 run);
extern bool zk_history_proven(uint64 run);
extern void zk_history_connected(void);
extern bool zk_history_postponed(void);
extern void zk_history_want(uint64 run);
extern void zk_history_left(uint64 run);
extern void zk_history_left_unproven(uint64 run);
extern void zk_history_left_publish(void);
extern void zk_history_left_forget(uint64 run);
extern bool zk_history_take(uint64 run, zk_history_cb done, void *arg);
extern bool zk_history_take_refused(void);
extern bool zk_history_claim(bool gc, zk_history_cb done, void *arg);
extern bool zk_history_took(void);
extern void zk_history_run_name(uint64 run, char *out, size_t outlen);

#endif							/* ZKLOCK_HISTORY_H */
