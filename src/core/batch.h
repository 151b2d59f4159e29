/*-------------------------------------------------------------------------
 *
 * batch.h
 *	  Group commit for ZooKeeper: the worker's writes gathered into
 *	  multi-ops (batch.c).
 *
 *	  A recipe hands a create, a delete or a multi of its own to
 *	  zk_batch_create(), zk_batch_delete() or zk_batch_multi() instead of
 *	  calling the client library, with the completion it would have given
 *	  the library.  The completion is called exactly as the library would
 *	  call it: once, with the create's path and a Stat whose czxid is the
 *	  node's (the other fields are zero when the create went in a multi), or
 *	  with the multi's own results.  A listing that must see those writes
 *	  goes through zk_batch_get_children(): it is sent right behind them.
 *
 *	  Everything runs in the worker with zk_ctl->lock held.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_BATCH_H
#define ZKLOCK_BATCH_H

#include <zookeeper.h>

/* zklock.batch_max: writes per multi; 1 sends every write on its own */
extern int	zk_batch_max;
extern int	zk_batch_inflight;

extern void zk_batch_create(const char *path, const char *data, int datalen,
							int flags, string_stat_completion_t done,
							const void *ctx);
extern void zk_batch_create_sibling(const char *path, const char *data,
									int datalen, int flags,
									string_stat_completion_t done,
									const void *ctx);
extern void zk_batch_delete(const char *path, int version,
							void_completion_t done, const void *ctx);
extern void zk_batch_multi(int nops, zoo_op_t *ops, zoo_op_result_t *res,
						   void_completion_t done, const void *ctx);
extern int	zk_batch_get_children(const char *path, strings_completion_t done,
								  const void *ctx);
extern int	zk_batch_get(const char *path, data_completion_t done,
						 const void *ctx);
extern int	zk_batch_wexists(const char *path, watcher_fn watcher, void *wctx,
							 stat_completion_t done, const void *ctx);
extern void zk_batch_pump(void);
extern void zk_batch_uncork(void);
extern int	zk_sock_fd;
extern void zk_batch_flush(void);
extern void zk_batch_session_closed(void);

/* its hooks into the worker, called before the recipes' (worker_base.c) */
struct ZkRecipe;
extern const struct ZkRecipe zk_batch_recipe;

#endif							/* ZKLOCK_BATCH_H */
