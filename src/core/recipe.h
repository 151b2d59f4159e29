/*-------------------------------------------------------------------------
 *
 * recipe.h
 *	  The seam between the worker's common machinery (worker.c,
 *	  worker_base.c) and the recipes that run on it (lock_worker.c, ...).
 *
 *	  Every entry has a kind; every kind has one ZkKindOps, a small table of
 *	  operations the common code calls without knowing the recipe, the way
 *	  PostgreSQL's executor calls an index access method through its
 *	  IndexAmRoutine:
 *
 *	  drive			the entry needs a step: a new request taken off the
 *					queue, its owner let go of it ("released" is set), or it
 *					was on the retry list and the session is usable again
 *	  drive_failed	an error was caught while driving it or inside one of
 *					its completions; the recipe decides (retry, fail, give up)
 *	  session_lost	the session ended: its ephemeral nodes are gone and
 *					every request in flight is void
 *
 *	  Every recipe has one ZkRecipe, its hooks into the worker, each
 *	  optional:
 *
 *	  worker_start	a worker starts (forget what a previous worker counted)
 *	  reload		the configuration was reloaded (runs without the lock)
 *	  session_connected	the session is connected (new, or taken up again)
 *	  session_reset	forget recipe-private state kept per session; called
 *					when the session ends, and again once its handle is
 *					closed (its last answers, ZCLOSING, come in between):
 *					it must be idempotent
 *	  session_usable	called every turn of the worker while the session is
 *					usable
 *
 *	  Both are listed once, in recipelist.h.
 *
 *	  Everything here runs in the worker with zk_ctl->lock held (the
 *	  completions take it through COMPLETION_BEGIN/END), but reload.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_RECIPE_H
#define ZKLOCK_RECIPE_H

#include "zklock.h"

#include <zookeeper.h>

/* How the worker drives one kind of entry (ZK_KIND in recipelist.h) */
typedef struct ZkKindOps
{
	void		(*drive) (ZkEntry *e);
	void		(*drive_failed) (ZkEntry *e);
	void		(*session_lost) (ZkEntry *e, const char *why);

	/*
	 * Optional: the first turn a worker's session is usable, once for each
	 * entry of the kind that a previous worker left in shared memory (the
	 * entries survive it; those still on the request queue are driven from
	 * there instead).  Without it the entry waits for its next drive.
	 */
	void		(*adopt) (ZkEntry *e);

	/* Optional: every turn the session is usable, once for the kind */
	void		(*turn) (void);

	/*
	 * Optional: called by zk_entry_free (shmem.c), lock held, before the
	 * entry goes back on the free list: let go of what the kind keeps
	 * outside the entry that nobody else frees.
	 */
	void		(*entry_freed) (ZkEntry *e);

	/*
	 * Optional: the watch an entry set with zk_kind_watcher fired, and its
	 * owner still wants it (a completion; see zk_kind_watcher)
	 */
	void		(*watch_fired) (ZkEntry *e);

	/*
	 * Its writes go through batch.c, and its reads that must see them
	 * through batch.c's ordered reads.  For the other kinds, the writes
	 * batch.c holds are sent before the entry is driven, so that whatever
	 * it sends sees every write asked for before it.
	 */
	bool		batched;
} ZkKindOps;

/*
 * A ZkKindOps: its three required operations, then the optional members
 * (designated initializers), e.g.
 *	const ZkKindOps zk_x_ops = ZK_KIND_OPS(x_drive, x_failed, x_lost,
 *										   .adopt = x_adopt);
 */
#define ZK_KIND_OPS(drive_, drive_failed_, session_lost_, ...) \
	{ \
		.drive = (drive_), .drive_failed = (drive_failed_), \
		.session_lost = (session_lost_), __VA_ARGS__ \
	}

/*
 * A recipe's hooks into the worker (ZK_RECIPE in recipelist.h), each
 * optional, called in the list's order
 */
typedef struct ZkRecipe
{
	void		(*worker_start) (void);
	void		(*reload) (void);
	void		(*session_connected) (void);
	void		(*session_reset) (void);
	void		(*session_usable) (void);
} ZkRecipe;


/*
 * The longest path the worker builds: a lock's <root>/locks/<name>/<node>, or
 * an arrival's <root>/arrivals/<name>/<participant> (two encoded components).
 */
#define ZK_PATH_MAX		(ZKLOCK_PARENT_MAX + ZKLOCK_ENAME_MAX + ZKLOCK_NODE_MAX + 2)

/*
 * worker_base.c: the worker's hold on zk_ctl->lock, re-entrant (worker.c,
 * completions and watchers take it through these)
 */
extern void zk_worker_enter(void);
extern void zk_worker_leave(void);
extern bool zk_worker_defer_wake(int procno);
extern void zk_worker_flush_wakes(void);
extern void zk_worker_reset(void);
extern int	zk_worker_lock_depth(void);
extern void zk_worker_recover(int depth, MemoryContext cxt);

/* worker_base.c: the session recipes use (worker.c sets it, zk_session_set) */
extern zhandle_t *zk_zh;
extern uint64 zk_cur_session;
extern uint64 zk_connects;		/* connections made (new or same session) */
extern bool zk_session_usable(void);

/* worker_base.c: completions */
extern const void *zk_ctx_of(ZkEntry *e);
extern ZkEntry *zk_entry_of(const void *ctx);
extern void zk_call_free(void *call, void *data);
extern void zk_completion_error(ZkEntry *e, int depth, MemoryContext cxt);

/*
 * Completions and watchers run inside the client library: they take the
 * lock, and catch every error themselves -- a longjmp through the client
 * library would corrupt it.  The entry variable must be declared
 * "ZkEntry *volatile".
 *
 * They may also run inside one another (batch.c answers each request of a
 * multi from the multi's completion), so an error caught here gives the
 * lock back at the depth it had when this one began, and the memory
 * context too: the caller goes on as if its callee had returned.
 */
#define COMPLETION_BEGIN \
	{ \
		volatile int zk_cb_depth_; \
		MemoryContext volatile zk_cb_cxt_; \
		zk_dispatch_begin(); \
		zk_worker_enter(); \
		zk_cb_depth_ = zk_worker_lock_depth(); \
		zk_cb_cxt_ = CurrentMemoryContext; \
		PG_TRY(); \
		{

#define COMPLETION_END(entry) \
		} \
		PG_CATCH(); \
		{ \
			zk_completion_error(entry, zk_cb_depth_, zk_cb_cxt_); \
		} \
		PG_END_TRY(); \
		zk_worker_leave(); \
	}

/*
 * The openings of a completion that serves no entry of its own (its entry is
 * "none"; NONE_COMPLETION_END closes it):
 *	DATA_COMPLETION_BEGIN(type, p, data): p is the record data points at;
 *	CALL_COMPLETION_BEGIN(ctype, c, otype, o, field, data): c is the call's
 *	record data points at, o the operation it belongs to (c->field).
 */
#define DATA_COMPLETION_BEGIN(type, p, data) \
	type	   *volatile p = (type *) (data); \
	ZkEntry    *volatile none = NULL; \
	\
	COMPLETION_BEGIN

#define CALL_COMPLETION_BEGIN(ctype, c, otype, o, field, data) \
	ctype	   *c = (ctype *) (data); \
	otype	   *volatile o = c->field; \
	ZkEntry    *volatile none = NULL; \
	\
	COMPLETION_BEGIN

#define NONE_COMPLETION_END		COMPLETION_END(none)

/*
 * The opening of a completion that serves entry e, the one ctx names
 * (zk_entry_of: NULL once it is gone or has been reused); COMPLETION_END(e)
 * closes it
 */
#define ENTRY_COMPLETION_BEGIN(e, ctx) \
	ZkEntry    *volatile e = NULL; \
	\
	COMPLETION_BEGIN \
	e = zk_entry_of(ctx);

/*
 * worker_base.c: the no-progress guard.  A recipe that can drive itself
 * again without a ZooKeeper request or an answer in between (a round
 * that ends with nothing sent and starts the next one) keeps a ZkProgress
 * in its object and calls zk_no_progress() at that point: true once it
 * has come round more than ZK_PROGRESS_MAX times within one dispatch (one
 * request served, one completion, one timer), which no legitimate round
 * does.  The recipe then fails the requests concerned with XX000 and
 * stops, so the worker goes back to its wait set (see src/README,
 * section 6).
 */
#define ZK_PROGRESS_MAX		1000

typedef struct ZkProgress
{
	uint64		dispatch;		/* zk_dispatch when steps was last reset */
	int			steps;			/* rounds within that dispatch */
} ZkProgress;

extern uint64 zk_dispatch;
extern void zk_dispatch_begin(void);
extern bool zk_no_progress(ZkProgress *p);
extern void zk_no_progress_report(const char *recipe, const char *name,
								  const char *state);

/* auth.c: the worker's credentials, and the ACL of every node it creates */
extern int	zk_auth_load(char *cred, size_t credlen);
extern void zk_acl_build(bool have_creds);
extern struct ACL_vector *zk_acl(void);
extern struct ACL_vector *zk_acl_path(const char *path);
extern bool zk_acl_id_foreign(const char *scheme, const char *id);
extern bool zk_acl_entry_foreign(const struct ACL *a, int perms);
extern int	zk_acl_first_foreign(const struct ACL_vector *acl, int perms);
extern bool zk_acl_have_own(void);

/* aclcheck.c: the ACLs of the nodes found already there */
extern void zk_acl_check_request(void);
extern void zk_acl_check_turn(void);
extern void zk_acl_check_node(const char *path);

/*
 * worker_base.c: refusals for want of permission (ZNOAUTH).  A parent
 * node's create refused is remembered, so that the create it was for,
 * which then fails with ZNONODE, is reported as the refusal it is.
 */
extern void zk_fail_noauth(ZkEntry *e, const char *path);
extern void zk_fail_rc(ZkEntry *e, int rc, const char *path, int sqlstate,
					   const char *msg);
extern void zk_create_parent(const char *path, int flags);
extern bool zk_parent_refused(const char *path, char *refused, size_t len);

/* worker_base.c: answering the owner, retrying */
extern void zk_finish(ZkEntry *e, ZkOutcome outcome, int sqlstate, const char *msg);
extern void zk_fail(ZkEntry *e, int sqlstate, const char *msg);
extern void zk_node_gone(ZkEntry *e);
extern void zk_retry_later(ZkEntry *e);
extern void zk_kind_watcher(zhandle_t *h, int type, int state,
							const char *path, void *ctx);
extern bool zk_drive_opening(ZkEntry *e, bool inflight);
extern bool zk_rc_definite(int rc);
extern bool zk_send_failed(ZkEntry *e, int rc, const char *what);
extern bool zk_sent(ZkEntry *e, int rc, bool *inflight, const char *what);

/* worker_base.c: how many local watchers each node has */
extern void zk_watch_set(const char *path);
extern int	zk_watch_refs(const char *path);
extern int	zk_watch_drop(const char *path);
extern void zk_watch_forget_all(void);
extern void zk_unwatch_done(int rc, const void *ctx);
extern void zk_unwatch(ZkEntry *e, const char *path, int type, watcher_fn own);
extern void zk_entry_unwatch(ZkEntry *e, const char *path, int type,
							 watcher_fn own);

/* worker_base.c: the common code's calls into the recipes */
extern void zk_recipe_drive(ZkEntry *e);
extern void zk_kind_drive(ZkEntry *e);
extern void zk_adopt_as_lost(ZkEntry *e);
extern void zk_session_set(zhandle_t *h, uint64 session_id);
extern void zk_recipes_reconnected(void);
extern void zk_recipes_session_lost(const char *why);
extern void zk_recipes_session_closed(void);
extern void zk_recipes_worker_start(void);
extern void zk_retry_take_over(void);
extern void zk_recipes_reload(void);
extern void zk_recipes_connected(void);

extern void zk_make_guid(ZkEntry *e, bool owner_half);

/*
 * worker_base.c: bounded fan-out (issue 35; src/README, section 6,
 * "Windows").  A call that reads the children of a node one request each
 * keeps at most ZK_READ_WINDOW of them in flight, sending the next as
 * answers come back; before it lists a node that anyone can fill, it reads
 * the node's stat and refuses (54000) one with more than zklock.max_children
 * children: zk_children_over says so, and writes the refusal into msg.
 */
#define ZK_READ_WINDOW		64

/*
 * A node's data is up to ZooKeeper's 1 MB, whoever wrote it: such reads
 * keep at most ZK_READ_INFLIGHT_BYTES in flight, judged by the largest
 * answer so far (4 reads until one has answered): zk_read_window.
 */
#define ZK_READ_INFLIGHT_BYTES	(4 * 1024 * 1024)

extern int	zk_read_window(bool answered, Size largest);
extern bool zk_children_over(const struct Stat *stat, const char *what,
							 char *msg, size_t len);

/*
 * worker_base.c: listings of a directory every namespace shares (issue 35:
 * <root>/queues, <root>/leases).  zklock.max_children bounds the caller's
 * own names in them, zklock.max_answer_bytes the listing's bytes; a child's
 * name takes at least ZK_LIST_NAME_MIN bytes of it (its length, a byte).
 */
#define ZK_LIST_NAME_MIN	5

extern bool zk_listing_over(const struct Stat *stat, Size cap, const char *what,
							char *msg, size_t len);
extern char **zk_own_children(const struct String_vector *kids, const char *qname,
							  Size cap, const char *what, MemoryContext cxt,
							  int *n, char *msg, size_t len);

#endif							/* ZKLOCK_RECIPE_H */
