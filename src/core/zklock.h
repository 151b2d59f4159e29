/*-------------------------------------------------------------------------
 *
 * zklock.h
 *	  The base every part of zklock shares, and no recipe's own: the
 *	  shared-memory control struct and the table of entries (shmem.c), the
 *	  settings (settings.c), names (names.c), requests and waits (backend.c),
 *	  argument helpers (sqlfuncs.c) and a recipe's backend half
 *	  (ZkRecipeBackend).  The worker's side of the seam is recipe.h; the
 *	  list of recipes recipelist.h; each recipe's own definitions are in its
 *	  header (lock.h, queue.h, barrier.h, lease.h, semaphore.h, election.h).
 *
 *	  Who may touch what: src/README, section 2; an entry's life cycle per
 *	  kind: section 3.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_H
#define ZKLOCK_H

#include "postgres.h"

#include "port/atomics.h"
#include "storage/dsm.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/dsa.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "compat.h"

/* Limits */
#define ZKLOCK_NAME_MAX			255 /* bytes of a lock name */
#define ZKLOCK_NS_MAX			127 /* bytes of a namespace, in UTF-8 */

/*
 * A name in a namespace, as entries and queue records carry it: the mark,
 * the namespace, the mark, the name (all UTF-8, where 0xFF never occurs);
 * a name of the root namespace is just the name.  See names.c.
 */
#define ZKLOCK_NS_MARK			'\xFF'
#define ZKLOCK_QNAME_MAX		(ZKLOCK_NAME_MAX + ZKLOCK_NS_MAX + 2)
/* encoded component: "<namespace>:<name>", each byte at most "%XX" */
#define ZKLOCK_ENAME_MAX		((ZKLOCK_NAME_MAX + ZKLOCK_NS_MAX) * 3 + 1)
#define ZKLOCK_ROOT_MAX			200 /* bytes of zklock.root */
#define ZKLOCK_PARENT_MAX		(ZKLOCK_ROOT_MAX + 32 + ZKLOCK_ENAME_MAX)
#define ZKLOCK_GUID_LEN			32
#define ZKLOCK_NODE_MAX			80	/* <guid>__rlock__<-10 digits>, or foreign */
#define ZKLOCK_DATA_MAX			512 /* identity written into a node */
#define ZKLOCK_ERRMSG_MAX		512
/* the detail of a refused upgrade (lock_worker.c), its hint (backend.c) */
#define ZKLOCK_UPGRADE_DEADLOCK_TAIL " holds this lock shared and waits for this session's shared hold to go"
#define ZKLOCK_UPGRADE_DEADLOCK "Another session" ZKLOCK_UPGRADE_DEADLOCK_TAIL
#define ZKLOCK_HOSTS_MAX		1024
#define ZKLOCK_ACL_MAX			16	/* entries of zklock.acl */
#define ZKLOCK_ACL_ID_MAX		256 /* bytes of one entry's id */
#define ZKLOCK_CRED_MAX			512 /* bytes of the auth file's line */
#define ZKLOCK_AUTH_FILE_MAX	4096	/* bytes of the auth file */

#define ZKLOCK_NO_ENTRY			((uint32) 0xFFFFFFFF)
#define ZK_OWN_EARLIER			15	/* earlier own runs remembered (history.c) */
#define ZK_LEFT_RUNS_MAX		512	/* zk_ctl->left_runs: about 14 run names */

/* Connection state of the worker's ZooKeeper session, as shown by zk_status */
typedef enum ZkConnState
{
	ZKC_STOPPED = 0,			/* no worker running */
	ZKC_NOT_CONFIGURED,			/* zklock.hosts is empty */
	ZKC_CONNECTING,				/* no session yet */
	ZKC_CONNECTED,				/* session usable */
	ZKC_SUSPENDED,				/* connection lost, session may be alive */
	ZKC_EXPIRED,				/* session expired, opening a new one */
	ZKC_AUTH_FAILED				/* zklock.auth_file refused, or ZooKeeper
								 * refused the credentials: no session */
} ZkConnState;

/* The worker's ZooKeeper credentials, as shown by zk_status().auth */
typedef enum ZkAuthState
{
	ZKA_NONE = 0,				/* zklock.auth_file is empty */
	ZKA_DIGEST,					/* the file's credentials are in use */
	ZKA_REFUSED,				/* the file was refused (mode, owner, content) */
	ZKA_FAILED					/* ZooKeeper refused the credentials */
} ZkAuthState;

/* Lifecycle of an entry; written by the worker only (except FREE->PENDING) */
typedef enum ZkEntryState
{
	ZKE_FREE = 0,
	ZKE_PENDING,				/* filled in by a backend, nothing sent yet */
	ZKE_CREATING,				/* create sent, or in doubt after a connection
								 * loss */
	ZKE_WAITING,				/* node exists, predecessor watched */
	ZKE_HELD,					/* node exists and holds the lock */
	ZKE_DELETING,				/* delete sent */
	ZKE_DONE					/* no node in ZooKeeper; owner must let go */
} ZkEntryState;

/* What the owning backend reads to learn the result of its request */
typedef enum ZkOutcome
{
	ZKO_NONE = 0,				/* no answer yet */
	ZKO_GRANTED,				/* lock held */
	ZKO_BUSY,					/* try-lock found it taken */
	ZKO_FAILED,					/* error, see errcode/errmsg */
	ZKO_LOST					/* was granted, then lost with the session */
} ZkOutcome;

typedef enum ZkMode
{
	ZKM_EXCLUSIVE = 0,
	ZKM_SHARED
} ZkMode;

/* The kinds of entry, one per ZK_KIND of recipelist.h, in its order */
#define ZK_RECIPE(id)
#define ZK_KIND(kind, ops, label, wait, node, holder_data) kind,
typedef enum ZkKind
{
#include "recipelist.h"
	ZKK_NUM
} ZkKind;
#undef ZK_RECIPE
#undef ZK_KIND

typedef enum ZkScope
{
	ZKS_TRANSACTION = 0,
	ZKS_SESSION
} ZkScope;

/*
 * The watch an entry sets on the node "watched" names (or its kind's own
 * node), for the recipes whose entries wait on one (ZkEntry.watch, worker
 * only).  It is set by a read that leaves a watch (a get, an exists, a
 * listing), and counted (zk_watch_set) from the moment that read is sent:
 *
 *	 ZKEW_NONE	  --a read with a watch sent-->					ZKEW_PENDING
 *	 ZKEW_PENDING --its answer: ZOK (also ZNONODE for an exists,
 *					which watches the absent node)-->				ZKEW_SET
 *	 ZKEW_PENDING --any other answer, or the read forgotten (a
 *					drive that threw, the session lost)-->			ZKEW_NONE
 *	 ZKEW_SET	  --it fires (zk_kind_watcher), is taken back
 *					(zk_entry_unwatch), the session is lost-->		ZKEW_NONE
 *
 * A recipe sends no read with a watch while one is set, so the read in
 * flight and the watch set never hold together; an event that finds no
 * watch set (its read still out, or taken back) is dropped.
 */
typedef enum ZkEntryWatch
{
	ZKEW_NONE = 0,
	ZKEW_PENDING,				/* the read that sets it is in flight */
	ZKEW_SET					/* set: its event is awaited */
} ZkEntryWatch;

/*
 * One lock held or awaited by one backend.  See src/README, sections 2
 * and 3, for the rules and the life cycle.
 */
/*
 * An entry's per-kind area (ZkEntry.part).  A recipe declares the struct its
 * kinds keep there and reaches it with ZK_ENTRY_PART(e, type), after a
 * StaticAssertDecl that the struct fits (ZK_ENTRY_PART_FITS).
 */
#define ZK_ENTRY_PART_SIZE		208

typedef union ZkEntryPart
{
	char		bytes[ZK_ENTRY_PART_SIZE];
	int64		align_int;		/* for the structs laid over it */
	double		align_double;
} ZkEntryPart;

#define ZK_ENTRY_PART(e, type)	((type *) (e)->part.bytes)
#define ZK_ENTRY_PART_FITS(type) \
	StaticAssertDecl(sizeof(type) <= ZK_ENTRY_PART_SIZE, \
					 #type " does not fit ZkEntry.part (ZK_ENTRY_PART_SIZE)")

typedef struct ZkEntry
{
	/* set by the allocating backend under the lock */
	int			procno;			/* owner's PGPROC number */
	int			pid;			/* owner's pid */
	Oid			dbid;			/* owner's database */
	uint32		gen;			/* bumped at every allocation */
	uint8		kind;			/* ZkKind */
	uint8		mode;			/* ZkMode */
	uint8		scope;			/* ZkScope (the owner updates it, no lock) */
	bool		try_only;		/* give up instead of waiting */
	bool		queued;			/* on the request queue */

	/*
	 * The owner lets go by setting release_req (atomically, no lock) and
	 * pushing the entry on the release stack; the worker then sets
	 * "released" under the lock.
	 */
	pg_atomic_uint32 release_req;
	uint32		rel_next;		/* release stack link */
	bool		released;		/* worker saw the release; frees it */

	/* written by the worker under the lock */
	uint8		state;			/* ZkEntryState */
	uint8		outcome;		/* ZkOutcome */
	int			sqlstate;		/* with ZKO_FAILED */
	int64		token;			/* czxid of the node, once known */
	uint64		session;		/* session the node belongs to */
	TimestampTz requested_at;
	TimestampTz granted_at;
	TimestampTz answered_at;	/* a long request's latest answer: the
								 * backend's wait for an answer restarts */
	char		errmsg[ZKLOCK_ERRMSG_MAX];

	/*
	 * worker-private bookkeeping (no lock needed, only the worker reads).
	 * The flags are independent, not one state: a lock's create and its
	 * listing go out together (pipelined), a dequeue's end may be in flight
	 * while in doubt; in_doubt outlives a create sent again (a publication)
	 * and also stands for a lease's write and a dequeue's end (and
	 * backends read it: zk_locks, the lease's answer); on_retry (the retry
	 * list) and parents_tried (the parents made again once) hold alongside
	 * any of them.  zk_sent() sets any of the three *_inflight through a
	 * pointer.
	 */
	bool		create_inflight;	/* a create awaits its reply */
	bool		list_inflight;	/* a listing awaits its reply */
	bool		delete_inflight;	/* a delete awaits its reply */
	bool		in_doubt;		/* create's fate unknown after conn loss */
	bool		on_retry;		/* on the worker's retry list */
	bool		parents_tried;	/* already recreated the parents once */
	uint8		watch;			/* ZkEntryWatch: on "watched" */
	int			outstanding;	/* ZKK_HOLDERS / czxid reads in flight;
								 * QPUB: kept-items checks in flight */
	uint32		retry_prev;		/* retry list links */
	uint32		retry_next;
	uint8		errors;			/* errors while driving it (gives up at 3) */

	uint64		answer_cap;		/* the owner's zklock.max_answer_bytes, set
								 * before it submits */

	uint32		next;			/* free list / queue link */

	char		name[ZKLOCK_QNAME_MAX + 1];	/* UTF-8, as the user wrote it,
											 * in its namespace (names.c) */
	char		owner_tag[ZKLOCK_GUID_LEN / 2 + 1];	/* the owner's half of
														 * guid */
	char		guid[ZKLOCK_GUID_LEN + 1];
	char		node[ZKLOCK_NODE_MAX + 1];	/* our child's name, once known */
	char		watched[ZKLOCK_NODE_MAX + 1];	/* predecessor we watch */
	char		data[ZKLOCK_DATA_MAX];	/* identity stored in the node */
	dsm_handle	dsm;			/* ZKK_HOLDERS: where the answer goes */

	dsa_pointer blob;			/* the kind's variable-size data in zk_dsa():
								 * items, an answer, a lease (freed with
								 * the entry) */

	/*
	 * The kind's own fields: its recipe lays a struct of its own over this
	 * area (ZK_ENTRY_PART), the way a recipe's kinds share one layout (the
	 * queue's ZkQueuePart, the lock's ZkLockPart, ...).  Zeroed at
	 * allocation; the base reads none of it.
	 */
	ZkEntryPart part;

	/*
	 * Where the entry's kind is in its own steps, one enum per recipe; zeroed
	 * at allocation
	 */
	union
	{
		uint8		barrier;	/* ZKK_BWAIT, ZKK_BMEMBER, ZKK_BINFO:
								 * ZkBarrierOp (barrier.h) */
		uint8		lease;		/* ZKK_LEASE: ZkLeaseOp */
		uint8		sem;		/* ZKK_SEMLEASE: ZkSemStep */
		uint8		nsclaim;	/* ZKK_NSCLAIM: ZkNsClaimOp (nsclaim.c) */
		uint8		counter;	/* ZKK_COUNTER: ZkCounterOp (counter.h) */
	}			step;

	/* the barrier recipes (barrier.h); zeroed at allocation */
	int32		parties;		/* BWAIT arrivals, BMEMBER: members wanted */

	/* locks guarding other recipes, and the lease recipe; zeroed too */
	uint8		family;			/* ZKK_LOCK, ZKK_LEASE: ZkLockFamily */

	/*
	 * The backend slot (PGPROC number) whose quota this entry counts
	 * against (zklock.max_locks_per_backend), -1 for none (the worker's own
	 * entries).  Set under the lock at allocation; zk_entry_free gives the
	 * count back.
	 */
	int32		quota_procno;
} ZkEntry;

/*
 * The base's counters shown by zk_status(); a recipe keeps its own in its
 * shared memory (ZkRecipeBackend.shmem_size) and adds them to
 * ZkStatusCounts
 */
typedef enum ZkCounter
{
	ZKCNT_REQUESTS = 0,
	ZKCNT_GRANTS,
	ZKCNT_RELEASES,
	ZKCNT_TIMEOUTS,
	ZKCNT_ABANDONED,
	ZKCNT_LOST,
	ZKCNT_WATCH_EVENTS,
	ZKCNT_RECONNECTS,
	ZKCNT_SESSIONS,
	ZKCNT_ZK_ERRORS,
	ZKCNT_NOAUTH,				/* requests ZooKeeper refused for want of
								 * permission (NOAUTH) */
	ZKCNT_NUM
} ZkCounter;

typedef struct ZkControl
{
	LWLock	   *lock;			/* protects everything below but counters */

	/* the worker */
	Latch	   *worker_latch;
	int			worker_pid;
	uint64		worker_generation;	/* bumped at each worker start */

	/* the session */
	int			conn_state;		/* ZkConnState */
	uint64		session_id;
	int			session_timeout;	/* negotiated, ms */
	TimestampTz last_contact;	/* last time ZooKeeper sent us anything */
	char		servers[ZKLOCK_HOSTS_MAX];	/* connect string in use */
	char		current_server[64];
	int			auth_state;		/* ZkAuthState */

	/* entries */
	int			max_entries;
	int			used;
	int			quota_slots;	/* backend slots counted (entries per slot
								 * follow the table: zk_quota_counts()) */
	uint32		free_head;
	uint32		queue_head;		/* FIFO of entries with pending work */
	uint32		queue_tail;
	pg_atomic_uint32 release_head;	/* lock-free stack of released entries */

	pg_atomic_uint64 counters[ZKCNT_NUM];

	uint64		run_id;			/* this start of shared memory's run: names
								 * its durable nodes (history.h) */
	bool		run_registered; /* its run node was there once */
	bool		run_fenced;		/* another server took the run over: no
								 * new claims, publications or commits of
								 * claims (kept across worker restarts) */
	uint64		own_predecessor;	/* the run this data directory had
									 * before this start (history.c), 0 if
									 * not proven */
	uint64		own_earlier[ZK_OWN_EARLIER];	/* ... and the ones before
												 * it, latest first, 0 after
												 * the last */
	char		left_runs[ZK_LEFT_RUNS_MAX];	/* dead runs of this cluster
												 * whose queue nodes the last
												 * settling pass left alone,
												 * "<sysid>-<run>", comma
												 * separated (history.c) */
	int			acl_problems;	/* nodes found open to others since the
								 * last full check (aclcheck.c) */
	char		acl_problem[ZKLOCK_PARENT_MAX + 1];	/* the last of them */
	uint8		mac_key[32];	/* $PGDATA/zklock.key (trust.h) */
	bool		mac_key_new;	/* this run made it: nodes without a MAC
								 * are an older version's, accepted until
								 * a settling pass completes */

	/* what all of zklock.root keeps in ZooKeeper (kept.c) */
	int			kept_state;		/* ZkKeptState (kept.c) */
	int64		kept_nodes;		/* as last read from ZooKeeper ... */
	int64		kept_bytes;
	TimestampTz kept_read_at;	/* ... then; 0: never */
	uint64		kept_refused;	/* writes refused for them */
	char		kept_why[128];	/* why they are not enforced */

	/* dynamic shared memory for variable-size data (zk_dsa()) */
	LWLock	   *dsa_lock;
	dsa_handle	dsa;
	int			dsa_tranche;

	ZkEntry		entries[FLEXIBLE_ARRAY_MEMBER];
} ZkControl;

/* settings.c: settings */
extern char *zk_hosts;
extern char *zk_root;
extern int	zk_session_timeout;
extern int	zk_connect_timeout;
extern int	zk_commit_timeout;
extern int	zk_max_locks;
extern int	zk_max_locks_per_backend;
extern int	zk_max_locks_per_role;
extern int	zk_max_lease_duration;
extern int	zk_max_hold;
extern int	zk_lease_cleanup_interval;
extern int	zk_lease_cleanup_grace;
extern int	zk_max_answer_kb;
extern int	zk_max_children;
extern int	zk_max_payload_kb;
extern int	zk_max_write_rate_kb;
extern int	zk_max_write_burst_kb;
extern int	zk_max_transaction_kb;
extern int	zk_max_item_kb;
extern int	zk_max_kept_items;
extern int	zk_max_kept_bytes_kb;
extern int	zk_max_kept_nodes;
extern int	zk_max_namespace_items;
#define ZKQ_TXN_MAX_KB			976 /* zklock.max_transaction_size's top:
									 * ZKQ_TXN_MAX (queue.h) in kB */
extern char *zk_namespace;
extern char *zk_auth_file;
extern char *zk_acl_setting;
extern char *zk_acl_world_read;
extern bool zk_acl_repair;

/* auth.c: the settings' hooks (the worker's half is in recipe.h) */
extern bool zk_check_acl(char **newval, void **extra, GucSource source);
extern void zk_assign_acl(const char *newval, void *extra);
extern bool zk_check_auth_file(char **newval, void **extra, GucSource source);
extern bool zk_check_acl_world_read(char **newval, void **extra, GucSource source);
extern void zk_assign_acl_world_read(const char *newval, void *extra);
extern const char *zk_auth_state_name(int state);

/* shmem.c */
extern ZkControl *zk_ctl;
extern Size zk_shmem_size(void);
extern void zk_shmem_init(void);
extern void zk_require_shmem(void);
extern ZkEntry *zk_entry(uint32 idx);
extern uint32 zk_entry_index(ZkEntry *e);

/*
 * An entry named so that its reuse shows: its slot and generation.  The
 * first member of a record the worker keeps of an entry in a List, which
 * zk_entry_ref_find looks up.
 */
typedef struct ZkEntryRef
{
	uint32		idx;
	uint32		gen;
} ZkEntryRef;

struct List;
extern void zk_entry_ref_set(ZkEntryRef *r, ZkEntry *e);
extern void *zk_entry_ref_find(struct List *list, ZkEntry *e);
extern ZkEntry *zk_entry_alloc(void);

/* why zk_entry_alloc_backend refused an entry */
typedef enum ZkAllocRefusal
{
	ZKR_NONE = 0,
	ZKR_QUOTA,					/* the backend's zklock.max_locks_per_backend */
	ZKR_ROLE_QUOTA,				/* the role's zklock.max_locks_per_role */
	ZKR_RESERVE,				/* only the worker's reserve is left */
	ZKR_FULL					/* no entry at all */
} ZkAllocRefusal;
extern ZkEntry *zk_entry_alloc_backend(int procno, int quota, Oid role,
									   int role_quota, int reserve,
									   ZkAllocRefusal *why, int *held);
extern void zk_entry_free(ZkEntry *e);
extern int *zk_quota_counts(void);
extern Oid *zk_quota_roles(void);
extern int *zk_quota_limits(void);
extern void *zk_quota_rates_area(void);

/* quota.c: what one role writes into ZooKeeper (zklock.max_write_rate) */
extern Size zk_role_rates_size(int slots);
extern void zk_quota_charge_write(Size bytes, const char *what);

/* kept.c: what all of zklock.root keeps in ZooKeeper */
extern void zk_kept_turn(void);
extern void zk_kept_request(void);
extern bool zk_kept_enforced(void);
extern void zk_kept_stats_path(char *out, size_t len);
extern bool zk_kept_parse(const char *data, int len, int64 *nodes, int64 *bytes);
extern void zk_kept_store(int64 nodes, int64 bytes);
extern void zk_kept_garbled(const char *value, int len);
extern bool zk_kept_over(int64 nodes, int64 bytes, int64 add_nodes,
						 int64 add_bytes, char *msg, size_t len);
extern void zk_kept_check(int64 bytes, int64 nodes, bool cached, const char *what);
ZK_NORETURN extern void zk_kept_error(const char *msg);
/*
 * What one node zklock creates for a session (a lock's contender, a
 * semaphore's lease or pool, a barrier's member) is charged to the role's
 * write rate: its create and its delete, in ZooKeeper's log, about 128 bytes
 * each.  At the defaults a role creates 4,096 at once, then 1,024 a second.
 */
#define ZK_NODE_CHARGE	256
extern void zk_enqueue(ZkEntry *e);
extern uint32 zk_dequeue(void);
extern void zk_release_push(ZkEntry *e);
extern void zk_retry_forget_marks(void);
extern uint32 zk_release_take_all(void);
extern void zk_retry_add(ZkEntry *e);
extern void zk_retry_remove(ZkEntry *e);
extern uint32 zk_retry_take_all(void);
extern int	zk_retry_length(void);
extern uint32 zk_retry_pop(void);
extern void zk_backend_lock(LWLockMode mode);
extern bool zk_backend_lock_timed(LWLockMode mode, long timeout_ms);
extern void zk_wake_worker(void);
extern void zk_worker_wake_by(TimestampTz at);
extern void zk_wake_owner(ZkEntry *e);
extern void zk_count(ZkCounter c, uint64 n);
extern const char *zk_conn_state_name(int state);
extern int	zk_fresh_conn_state(void);
extern void zk_commit_wait_session(TimestampTz *deadline, int conn, const char *what);
extern dsa_area *zk_dsa(void);
extern void zk_dsa_apply_limit(void);
ZK_NORETURN extern void zk_payload_memory_error(Size need, const char *what, const char *todo);

/* names.c */
extern char *zk_name_to_utf8(const char *name, int len, int *outlen);
extern char *zk_utf8_to_server_noerror(const char *utf8, int len);
extern void zk_check_name(const char *what, int len);
extern void zk_encode_name(const char *name, int len, char *out);
extern bool zk_valid_root(const char *root, const char **why);
extern int	zk_decode_name(const char *enc, char *out, int outlen);
extern int	zk_decode_qname(const char *enc, char *out, int outlen);
extern const char *zk_name_part(const char *qname);
extern const char *zk_log_name(const char *qname);
extern bool zk_name_in_namespace(const char *qname, const char *ns);
extern void zk_qname_namespace(const char *qname, char *out, size_t outlen);
extern bool zk_child_in_namespace(const char *enc, const char *ns);
extern const char *zk_current_namespace(void);
extern Oid	zk_extension_schema(char **version);
extern const char *zk_current_namespace_unchecked(void);
extern char *zk_qualify_name(const char *name, int len, int *qlen);
extern char *zk_qualify_name_ext(const char *name, int len, int *qlen, bool check);
extern void zk_namespace_changed(void);
/*
 * The top-level scalar fields "names" of a JSON object another client may
 * have written (zk_json_top_fields): values[i] and types[i] for names[i],
 * NULL when absent (or null, with skip_null); false when the data is not a
 * UTF-8 JSON object.  Never raises, whatever the data.
 */
extern bool zk_json_top_fields(const char *data, int len, const char *const *names,
							   int n, bool skip_null, char **values,
							   JsonTokenType *types);
extern char *zk_path_qname(const char *name, int len, int *qlen);
extern bool zk_json_field(const char *data, int len, const char *key, char *out,
						  size_t outlen);

/* nsclaim.c: the registry of namespace claims (issue 35) */
extern Size zk_nsclaim_shmem_size(void);
extern void zk_nsclaim_shmem_init(void);
extern void zk_namespace_verify(const char *ns);
extern void zk_namespace_join_configured(const char *ns);

/* worker.c */
extern PGDLLEXPORT void zk_worker_main(Datum arg);
extern void zk_register_worker(void);

/*
 * An answer blob the worker writes for a one-off read (a queue's, a
 * lease's): a count, then records, each MAXALIGNed
 */
typedef struct ZkAnswer
{
	uint32		count;
	uint32		size;
} ZkAnswer;

/*
 * zk_status()'s columns that the recipes fill: from their entries
 * (ZkRecipeBackend.status_entry) and their own shared memory (status)
 */
typedef struct ZkStatusCounts
{
	int64		deadlocks;		/* waits refused as deadlocks */
	int64		leases_taken;	/* zk_try_lease: true */
	int64		leases_refused; /* zk_try_lease: false */
	int64		leaderships;	/* times this cluster began to lead an
								 * election */
	int64		sem_taken;		/* semaphore leases taken in ZooKeeper */
	int64		sem_refused;	/* semaphore tries that found none free,
								 * waits timed out */
	int			queues_tracked; /* per-queue states the worker keeps */
	int			pubs_blocked;	/* committed transactions whose items
								 * ZooKeeper refuses */
	int			ends_blocked;	/* dequeues let go whose consume or release
								 * ZooKeeper refuses */
} ZkStatusCounts;

/*
 * A recipe's backend half: called by backend.c at the end of every
 * transaction and subtransaction and at exit, for every recipe.
 */
typedef struct ZkRecipeBackend
{
	void		(*pre_commit) (void);
	void		(*pre_prepare) (void);
	void		(*xact_end) (bool commit);
	void		(*subxact_end) (bool commit, SubTransactionId mySubid,
								SubTransactionId parentSubid);
	void		(*at_exit) (void);
	int			(*worker_entries) (void);	/* entries the worker keeps for
											 * its own use on the recipe's
											 * behalf (backend.c's reserve) */
	void		(*define_settings) (void);	/* its own settings, at module
											 * load (settings.c) */

	/*
	 * zk_path(kind, name) for a kind of its own (path_kinds, comma
	 * separated): the ZooKeeper path of the recipe's node for "name" (len
	 * bytes, as given: the hook qualifies it by the session's namespace if
	 * its nodes have one, with zk_path_qname), given path_arg too.
	 */
	const char *path_kinds;
	void		(*path) (const char *kind, int arg, const char *name, int len,
						 char *out, size_t outlen);
	int			path_arg;

	/* zk_status's columns that count entries: add what entry e adds */
	void		(*status_entry) (const ZkEntry *e, ZkStatusCounts *c);
	/* zk_status's columns the recipe counts itself (the lock held shared) */
	void		(*status) (ZkStatusCounts *c);

	/*
	 * Shared memory of the recipe's own (its counters, its tables):
	 * shmem_bytes under shmem_name, requested at load; *shmem points at
	 * them in every process (shmem.c), zeroed at the first start, then
	 * shmem_init (optional) sets what zero does not.
	 */
	const char *shmem_name;
	Size		shmem_bytes;
	void	  **shmem;
	void		(*shmem_init) (void *area);
} ZkRecipeBackend;

/*
 * The members of a ZkRecipeBackend that go together, for its initializer:
 *	ZK_XACT_HOOKS: a recipe whose requests are tied to the transaction;
 *	ZK_PATH_HOOK: the kinds zk_path() knows it by, the hook, its argument;
 *	ZK_SHMEM_AREA: its own shared memory, a struct of type that var
 *	points at in every process.
 */
#define ZK_XACT_HOOKS(pre_commit_, pre_prepare_, xact_end_, subxact_end_) \
	.pre_commit = (pre_commit_), .pre_prepare = (pre_prepare_), \
	.xact_end = (xact_end_), .subxact_end = (subxact_end_)
#define ZK_PATH_HOOK(kinds, hook, arg) \
	.path_kinds = (kinds), .path = (hook), .path_arg = (arg)
#define ZK_SHMEM_AREA(name, type, var) \
	.shmem_name = (name), .shmem_bytes = sizeof(type), .shmem = (void **) &(var)

/*
 * What a process of zklock waits for, as pg_stat_activity.wait_event names
 * it on PostgreSQL 17 and later (on 15: "Extension" for all).  The names
 * are in settings.c (zk_wait_names); doc/troubleshooting.md documents them.
 */
typedef enum ZkWait
{
	ZKW_LOCK = 0,				/* a backend: a zookeeper lock (zk_lock...) */
	ZKW_DEQUEUE,				/* a backend: an item to dequeue */
	ZKW_BARRIER,				/* a backend: a gate, arrivals, a barrier */
	ZKW_SEMAPHORE,				/* a backend: a semaphore's permit */
	ZKW_ANSWER,					/* a backend: the worker's answer (any other
								 * request, the session before commit) */
	ZKW_SHMEM,					/* a backend: zklock's shared-memory lock */
	ZKW_WORKER_MAIN,			/* the worker: ZooKeeper or a request */
	ZKW_WORKER_CLOSE,			/* the worker: closing a previous worker's
								 * session at start */
	ZKW_NUM
} ZkWait;
extern void zk_wait_events_init(void);
extern uint32 zk_wait_event(ZkWait w);
extern const char *const zk_wait_names[ZKW_NUM];

/*
 * The registry: every kind of entry and every recipe, as the module's entry
 * (src/zklock.c) makes it from recipelist.h and hands it to
 * zk_module_init at load.  The base reaches the recipes only through it
 * (src/README, "Layers"); every process has the same one (it is made at
 * load, before the postmaster forks).
 */
struct ZkKindOps;
struct ZkRecipe;
typedef struct ZkKindInfo
{
	const struct ZkKindOps *ops;	/* how the worker drives it (recipe.h) */
	const char *label;			/* its name in zk_entries */
	ZkWait		wait;			/* what its owner waits for while ZKE_WAITING */
	const char *node;			/* the node it creates for the session, as
								 * the write-rate error names it, or NULL */
	bool		holder_data;	/* that node holds zk_build_node_data() */
} ZkKindInfo;

typedef struct ZkRegistry
{
	const ZkKindInfo *kinds;	/* by ZkKind, ZKK_NUM of them */
	const struct ZkRecipe *const *recipes;	/* worker halves (recipe.h) */
	const ZkRecipeBackend *const *backends; /* backend halves, same order */
	int			nrecipes;
} ZkRegistry;

/* settings.c: module load, and the registry it keeps */
extern void zk_module_init(const ZkRegistry *registry);
extern const ZkRegistry *zk_registry;
extern const char *zk_kind_label(int kind);

/* backend.c: requests and waits, for every recipe */
extern void zk_backend_init(void);
extern ZkEntry *zk_new_entry(ZkKind kind, const char *name, int len, ZkMode mode,
							 ZkScope scope, bool try_only);
extern bool zk_wait_for_answer(uint32 idx, const char *uname, int64 timeout_ms,
							   int64 *token);
#define ZK_ANSWER_AT_COMMIT (-1)
extern int	zk_wait_outcome(uint32 idx, int64 timeout_ms, int answer, const char *what);
extern bool zk_release_entry(uint32 idx, uint32 gen);
extern void zk_entry_request(ZkEntry *e, ZkKind kind, Oid dbid, ZkMode mode,
							 ZkScope scope, bool try_only);
extern void zk_let_go(uint32 *idx, uint32 gen);
extern void zk_submit_entry(ZkEntry *e, uint32 *idx, uint32 *gen);
extern char *zk_display_name(const char *name);
extern bool zk_backend_has_entries(void);
extern bool zk_next_entry_unqualified;
ZK_NORETURN extern void zk_raise_noauth(const char *path, const char *what);
extern const char *zk_limit_hint(const char *msg);
extern const char *zk_host_name(void);
extern void zk_build_node_data(char *out, size_t outlen);

/*
 * A memory context under TopMemoryContext, made on first use: cxt (a
 * static variable) once it is made; name is a string constant, sizes
 * ALLOCSET_SMALL_SIZES or ALLOCSET_DEFAULT_SIZES.  The file that uses it
 * includes utils/memutils.h.
 */
#define ZK_LAZY_CONTEXT(cxt, name, sizes) \
	((cxt) != NULL ? (cxt) : \
	 ((cxt) = AllocSetContextCreate(TopMemoryContext, name, sizes)))

/* shmem.c: a process-local hash table (dynahash) */
struct HTAB;
extern struct HTAB *zk_hash_create(const char *name, long nelem, Size keysize,
								   Size entrysize, bool strings,
								   MemoryContext cxt);

/* sqlfuncs.c: argument helpers */
struct FunctionCallInfoBaseData;
extern int64 zk_arg_timeout_ms(struct FunctionCallInfoBaseData *fcinfo, int argno);
extern int64 zk_arg_wait_ms(struct FunctionCallInfoBaseData *fcinfo, int argno);
extern char *zk_arg_name(struct FunctionCallInfoBaseData *fcinfo, bool key, int *len);
extern char *zk_arg_text_name(struct FunctionCallInfoBaseData *fcinfo, int argno,
							  const char *what, int *len);
extern int32 zk_arg_count(struct FunctionCallInfoBaseData *fcinfo, int argno,
						  const char *what, const char *hint);

/*
 * An SQL function fn (version-1 calling convention, fmgr.h) whose result is
 * the expression body, fcinfo in scope: a family of one-line entry points
 * over one common function of a recipe's SQL file
 */
#define ZK_SQL_FUNC(fn, body) \
	PG_FUNCTION_INFO_V1(fn); \
	Datum fn(PG_FUNCTION_ARGS) { return body; }

/*
 * An SQL function fn whose work is the statement stmt, fcinfo in scope, and
 * whose result is none: a function returning void, or a set-returning one
 * that materialises its rows in fcinfo's resultinfo (InitMaterializedSRF)
 */
#define ZK_SQL_PROC(fn, stmt) \
	PG_FUNCTION_INFO_V1(fn); \
	Datum fn(PG_FUNCTION_ARGS) { stmt; return (Datum) 0; }

struct TupleDescData;
extern struct TupleDescData *zk_status_row_type(struct FunctionCallInfoBaseData *fcinfo);

#endif							/* ZKLOCK_H */
