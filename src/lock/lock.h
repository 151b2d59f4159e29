/*-------------------------------------------------------------------------
 *
 * lock.h
 *	  The lock recipe's definitions shared by its files and by the recipes
 *	  that stand on locks (lease, semaphore, election): where a lock entry's
 *	  lock lives (its family), the order of contenders (lock_names.c), the
 *	  answer of a holders' read, and lock_backend.c's and lock_sql.c's
 *	  calls.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_LOCK_H
#define ZKLOCK_LOCK_H

#include "zklock.h"

/* where a ZKK_LOCK entry's lock lives: <root>/<dir>/<encoded name> */
typedef enum ZkLockFamily
{
	ZKF_LOCKS = 0,				/* zk_lock and friends */
	ZKF_LEASES,					/* the lock that guards a lease (kazoo's layout) */
	ZKF_ELECTIONS,				/* the worker's candidacy (kazoo's Election) */
	ZKF_SEMAPHORES,				/* a semaphore's guard: <root>/semaphores/<name>-__lock__ */
	ZKF_SEMPOOL,				/* (listing only) a semaphore's leases: <root>/semaphores/<name> */
	ZKF_LEASEDIR				/* (listing only) every lease: <root>/leases, each
								 * child's lease_holder read */
} ZkLockFamily;

/* lock_names.c: the lock's paths and the order of its contenders */
extern void zk_lock_parent(const char *name, int family, char *out, size_t outlen);
extern void zk_lock_kind_path(const char *kind, int family,
							  const char *name, int len, char *out, size_t outlen);
extern bool zk_node_is_contender(const char *child, bool *shared);
extern bool zk_node_seq(const char *child, int64 *seq);
extern void zk_check_semaphore_name(const char *name, int len);

/*
 * One contender of a lock, as the recipe orders them (lock_names.c): key
 * is the creation order (sequence number, or czxid once the sequence has
 * wrapped).
 */
/*
 * A lock entry's own fields (ZKK_LOCK, ZKK_HOLDERS), laid over ZkEntry.part:
 * ZKLK(e)->base.  Zeroed at allocation.
 */
typedef struct ZkLockPart
{
	int64		base_token;		/* upgrade: token of our held shared node */
	char		base[ZKLOCK_NODE_MAX + 1];	/* upgrade: our held shared node */
	char		writer_ok[ZKLOCK_NODE_MAX + 1]; /* upgrade: a writer behind base
												 * read as zklock's (it waits
												 * for base) */
	bool		checking_writer;	/* upgrade: that read is out */
	bool		rival_reading;	/* upgrade deadlock: the other upgrader's
								 * node is being read, to name it */
	bool		query_failed;	/* ZKK_HOLDERS: a read failed */
	/* deadlock detection (lock_deadlock.c) */
	int32		dl_timeout_ms;	/* the backend's deadlock_timeout; 0: none */
	uint8		dl_round;		/* checks made of this wait */
	bool		dl_scheduled;	/* on the heap of waits due for a check */
	bool		dl_checking;	/* a check of it is under way */
	bool		dl_published;	/* its wait record was written (or is being) */
	bool		dl_listed;		/* a hold its backend's wait record lists */
	/* a maximum hold (lock_worker.c, "Holds past their maximum") */
	bool		hold_scheduled; /* on the heap of holds due to end */
	bool		committing;		/* its owner passed the check before COMMIT:
								 * not ended by its maximum until the
								 * transaction is over (the owner's byte) */
	int64		max_hold_ms;	/* the longest the owner may hold it; 0: no
								 * bound */
	TimestampTz hold_due;		/* when it ends, while hold_scheduled */
} ZkLockPart;

ZK_ENTRY_PART_FITS(ZkLockPart);
#define ZKLK(e)		ZK_ENTRY_PART(e, ZkLockPart)

/*
 * The lock's counters, in shared memory of its own (zk_lock_backend.shmem;
 * zero is a valid pg_atomic_uint64 where zklock builds), for zk_status()
 */
typedef struct ZkLockShared
{
	pg_atomic_uint64 deadlocks; /* waits refused as deadlocks */
	pg_atomic_uint64 leaderships;	/* candidacies of the cluster's
									 * (election.c) that began to lead */
} ZkLockShared;

extern ZkLockShared *zk_lock_counts;	/* lock_worker.c */

typedef struct ZkContender
{
	const char *name;
	int64		key;
	bool		shared;
} ZkContender;

#define ZKLOCK_HELD			(-1)
#define ZKLOCK_DEADLOCK		(-2)
extern bool zk_same_owner(const ZkContender *a, const ZkContender *b);
extern int	zk_lock_blocker(ZkContender *c, int n, int me, const char *base,
							bool guess_base);
extern int	zk_lock_upgrade_rival(ZkContender *c, int n, int me, const char *base);
extern void zk_sort_contenders(ZkContender *c, int n);
extern int	zk_lock_blockers(ZkContender *c, int n, int me, const char *base,
							 int *out, int max);

/*
 * The answer to a ZKK_HOLDERS query, in a segment the backend creates: a
 * header, then one ZkHolderRec per contender, each followed by its node
 * name and data.  When the segment is too small, the worker stops writing
 * and sets "needed".
 */
#define ZKLOCK_HOLDER_DATA_MAX	1024
typedef struct ZkHoldersBuf
{
	Size		size;			/* of the segment */
	Size		used;			/* bytes written after the header */
	Size		needed;			/* bytes the full answer needs */
	int			count;			/* records written */
} ZkHoldersBuf;

typedef struct ZkHolderRec
{
	int64		czxid;
	uint8		shared;
	uint16		namelen;
	uint16		datalen;
	/* followed by name and data, no terminators */
} ZkHolderRec;

/* lock_deadlock.c: deadlock detection across servers */
typedef void (*ZkDlVerdict) (ZkEntry *e, const char *detail);
extern void zk_dl_waiting(ZkEntry *e);
extern void zk_dl_wait_over(ZkEntry *e);
extern void zk_dl_node_going(ZkEntry *e);
extern void zk_dl_turn(ZkDlVerdict verdict);
extern void zk_dl_session_reset(void);

/*
 * lock_revoke.c: zk_lock_revoke's requests, <root>/revokes/<holder's node>.
 * Every worker hands each request's name to a ZkRevokeTake (lock_worker.c):
 * ZK_RV_TAKEN, the hold was this cluster's and is taken back; ZK_RV_LATER,
 * a contender of ours that may still have to be (not granted yet, or its
 * owner committing); ZK_RV_NONE, nothing of ours.
 */
typedef enum ZkRevokeResult
{
	ZK_RV_NONE = 0,
	ZK_RV_TAKEN,
	ZK_RV_LATER
} ZkRevokeResult;
typedef ZkRevokeResult (*ZkRevokeTake) (const char *node);
extern void zk_revoke_turn(ZkRevokeTake take);
extern void zk_revoke_session_reset(void);

/* holders a zk_lock_revoke call asks about at once (lock_backend.c) */
#define ZK_REVOKE_BATCH		32

/* lock_backend.c: the lock recipe's backend half */
extern int64 zk_lock_call_max_hold_ms;
extern int64 zk_acquire(const char *name, int len, ZkMode mode, ZkScope scope,
						bool try_only, int64 timeout_ms, bool *acquired);
extern bool zk_release(const char *name, int len, ZkMode mode);
extern int64 zk_acquire_in(int family, const char *name, int len, ZkMode mode,
						   ZkScope scope, bool try_only, int64 timeout_ms,
						   bool *acquired);
extern bool zk_campaign_resign(const char *name, int len);
extern int64 zk_campaign_leading(const char *name, int len, bool *leads);
extern bool zk_acquire_all(char **names, int *lens, int n, ZkMode mode,
						   ZkScope scope, bool try_only, int64 timeout_ms,
						   int64 *tokens);
extern bool zk_release_all_of(char **names, int *lens, int n, ZkMode mode);
extern void zk_release_all_session(void);
extern int64 zk_held_token(const char *name, int len, bool *held);
extern dsm_segment *zk_query_holders(const char *name, int len, int family);
extern dsm_segment *zk_query_holders_in(const char *name, int len, int family,
										bool qualified);
extern void zk_revoke_holders(const char *name, int len, char **nodes, int n,
							  int64 timeout_ms, bool *gone);

/* lock_sql.c: who leads a campaign's election (zk_leader_wait) */
extern bool zk_campaign_leader(const char *name, int len, int64 *token,
							   char *node, size_t nodelen);

/* One row of zk_locks, copied from an entry under the lock */
typedef struct ZkLockRow
{
	int			idx;			/* the entry's number */
	uint8		state;
	bool		released;		/* let go of (release asked or seen) */
	bool		queued;
	bool		on_retry;
	bool		in_doubt;
	int			outstanding;
	int			pid;
	Oid			dbid;
	uint8		kind;
	uint8		family;
	uint8		mode;
	uint8		scope;
	uint8		outcome;
	int32		parties;		/* a semaphore's max_leases */
	int64		token;
	TimestampTz requested_at;
	TimestampTz granted_at;
	char		name[ZKLOCK_QNAME_MAX + 1];
	char		node[ZKLOCK_NODE_MAX + 1];
} ZkLockRow;
extern bool zk_entry_live(ZkEntry *e);

/* Copies of the table's entries, a chunk at a time (zk_snapshot_next) */
#define ZK_SNAPSHOT_CHUNK	256
typedef struct ZkSnapshot
{
	bool		(*want) (ZkEntry *e);
	int			next;			/* the next slot of the table to read */
	ZkLockRow	rows[ZK_SNAPSHOT_CHUNK];
} ZkSnapshot;
extern ZkSnapshot *zk_snapshot_begin(bool (*want) (ZkEntry *e));
extern ZkLockRow *zk_snapshot_next(ZkSnapshot *s, int *n);
struct ReturnSetInfo;
extern void zk_snapshot_rows(FunctionCallInfo fcinfo, bool (*want) (ZkEntry *e),
							 void (*row) (struct ReturnSetInfo *rsinfo, ZkLockRow *r));
extern void zk_entry_row(ZkLockRow *r, bool held, int family, Datum *values, bool *nulls);

#endif							/* ZKLOCK_LOCK_H */
