/*-------------------------------------------------------------------------
 *
 * recipelist.h
 *	  The list of recipes and of their kinds of entry: the one place a new
 *	  recipe is added (src/README, section 7), like PostgreSQL's rmgrlist.h.
 *
 *	  ZK_RECIPE(id)
 *		a recipe.  Its worker half's hooks are "const ZkRecipe
 *		zk_<id>_recipe" (recipe.h), its backend half "const ZkRecipeBackend
 *		zk_<id>_backend" (zklock.h); either may leave every member NULL.
 *	  ZK_KIND(kind, ops, label)
 *		a kind of entry of the recipe above it: the ZkKind value, the
 *		"const ZkKindOps" the worker drives it through (recipe.h), and its
 *		name in the zk_entries view.
 *
 *	  From it are made: ZkKind (zklock.h), the externs of the tables
 *	  (zklock.h, recipe.h), the worker's tables of kinds and recipes
 *	  (worker_base.c), the backend halves (backend.c) and the kinds' names
 *	  (lock_sql.c).  The order is the order of ZkKind and the order in which
 *	  the hooks are called; entries of a kind are kept in shared memory
 *	  only, so the values may change between versions.
 *
 *	  No include guard: included several times, with different macros.
 *
 *-------------------------------------------------------------------------
 */

/* the lock: locks, their holders' reads (lock_worker.c, lock_backend.c) */
ZK_RECIPE(lock)
ZK_KIND(ZKK_LOCK, zk_lock_ops, "lock")	/* a lock held or awaited */
ZK_KIND(ZKK_HOLDERS, zk_holders_ops, "holders")	/* a one-off read of a
												 * lock's contenders */

/* the worker's candidacies: lock entries (election.c) */
ZK_RECIPE(election)

/* the queue (queue_worker.c and its parts, queue_backend.c) */
ZK_RECIPE(queue)
ZK_KIND(ZKK_QPUB, zk_qpub_ops, "publication")	/* a transaction's items,
												 * published at commit */
ZK_KIND(ZKK_QCLAIM, zk_qclaim_ops, "claim")	/* a dequeue: waiting, then its
											 * claims */
ZK_KIND(ZKK_QINFO, zk_qinfo_ops, "queue read")	/* a one-off queue read
												 * (length, peek...) */

/* barriers: gates, arrivals, double barriers (barrier_worker.c and its parts, barrier_backend.c) */
ZK_RECIPE(barrier)
ZK_KIND(ZKK_BWAIT, zk_bwait_ops, "barrier wait")	/* a wait for a gate or
													 * for arrivals */
ZK_KIND(ZKK_BMEMBER, zk_bmember_ops, "barrier member")	/* a double
														 * barrier's member */
ZK_KIND(ZKK_BINFO, zk_binfo_ops, "arrivals read")	/* a one-off arrivals
													 * read or reset */

/* the lease (lease_worker.c, lease_backend.c) */
ZK_RECIPE(lease)
ZK_KIND(ZKK_LEASE, zk_lease_ops, "lease")	/* a lease's read or write */

/* the semaphore (sem_worker.c, sem_backend.c) */
ZK_RECIPE(sem)
ZK_KIND(ZKK_SEMLEASE, zk_semlease_ops, "semaphore lease")	/* a semaphore's
															 * lease */

/* the registry of namespace claims: whose a recorded namespace is (nsclaim.c) */
ZK_RECIPE(nsclaim)
ZK_KIND(ZKK_NSCLAIM, zk_nsclaim_ops, "namespace claim")	/* a check or write
														 * of a claim */
