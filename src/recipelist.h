/*-------------------------------------------------------------------------
 *
 * recipelist.h
 *	  The list of recipes and of their kinds of entry: the one place a new
 *	  recipe is added (src/README, section 7), like PostgreSQL's rmgrlist.h.
 *	  It sits above every folder (src/README, "Layers"): the module's entry
 *	  (src/zklock.c) makes from it the tables it hands the base at load, so
 *	  the base (src/core) never names a recipe.
 *
 *	  ZK_RECIPE(id)
 *		a recipe.  Its worker half's hooks are "const ZkRecipe
 *		zk_<id>_recipe" (recipe.h), its backend half "const ZkRecipeBackend
 *		zk_<id>_backend" (zklock.h); either may leave every member NULL.
 *	  ZK_KIND(kind, ops, label, wait, node, holder_data)
 *		a kind of entry of the recipe above it: the ZkKind value, the
 *		"const ZkKindOps" the worker drives it through (recipe.h), its
 *		name in the zk_entries view, the wait event (ZkWait) of a
 *		backend whose entry of this kind waits for ZooKeeper (ZKE_WAITING),
 *		what the node it creates for its session is called (NULL: none),
 *		charged to the role's write rate when it is asked for (quota.c),
 *		and whether that node holds the holder's data (zk_build_node_data).
 *
 *	  From it are made: ZkKind (zklock.h) and the registry (src/zklock.c).
 *	  The order is the order of ZkKind and the order in which the hooks are
 *	  called; entries of a kind are kept in shared memory only, so the values
 *	  may change between versions.
 *
 *	  No include guard: included several times, with different macros.
 *
 *-------------------------------------------------------------------------
 */

/* the lock (src/lock): locks held or awaited; one-off reads of a lock's contenders */
ZK_RECIPE(lock)
ZK_KIND(ZKK_LOCK, zk_lock_ops, "lock", ZKW_LOCK,
		"A lock's node", true)
ZK_KIND(ZKK_HOLDERS, zk_holders_ops, "holders", ZKW_ANSWER,
		NULL, false)
ZK_KIND(ZKK_REVOKE, zk_revoke_ops, "revoke", ZKW_ANSWER,
		"A revoke request's node", true)

/*
 * the worker's candidacies and sessions' campaigns (src/election): lock
 * entries; a session's wait for a change of a campaign's leader
 */
ZK_RECIPE(election)
ZK_KIND(ZKK_LEADERWAIT, zk_leaderwait_ops, "leader wait", ZKW_LOCK,
		NULL, false)

/*
 * the queue (src/queue): a transaction's items, published at commit; a
 * dequeue, waiting and then its claims; a one-off read (length, peek...)
 */
ZK_RECIPE(queue)
ZK_KIND(ZKK_QPUB, zk_qpub_ops, "publication", ZKW_ANSWER,
		NULL, false)
ZK_KIND(ZKK_QCLAIM, zk_qclaim_ops, "claim", ZKW_DEQUEUE,
		NULL, false)
ZK_KIND(ZKK_QINFO, zk_qinfo_ops, "queue read", ZKW_ANSWER,
		NULL, false)

/*
 * barriers (src/barrier): a wait for a gate or for arrivals; a double
 * barrier's member; a one-off arrivals read or reset
 */
ZK_RECIPE(barrier)
ZK_KIND(ZKK_BWAIT, zk_bwait_ops, "barrier wait", ZKW_BARRIER,
		NULL, false)
ZK_KIND(ZKK_BMEMBER, zk_bmember_ops, "barrier member", ZKW_BARRIER,
		"A barrier member's node", false)
ZK_KIND(ZKK_BINFO, zk_binfo_ops, "arrivals read", ZKW_ANSWER,
		NULL, false)

/* the lease (src/lease): a lease's read or write */
ZK_RECIPE(lease)
ZK_KIND(ZKK_LEASE, zk_lease_ops, "lease", ZKW_ANSWER,
		NULL, false)

/* the semaphore (src/semaphore): a semaphore's lease */
ZK_RECIPE(sem)
ZK_KIND(ZKK_SEMLEASE, zk_semlease_ops, "semaphore lease", ZKW_SEMAPHORE,
		NULL, false)

/* the counter (src/counter): an add, read, set or drop of kazoo's Counter */
ZK_RECIPE(counter)
ZK_KIND(ZKK_COUNTER, zk_counter_ops, "counter", ZKW_ANSWER,
		NULL, false)

/*
 * not a recipe: the base's registry of namespace claims (core/nsclaim.c),
 * whose a recorded namespace is; a check or write of a claim
 */
ZK_RECIPE(nsclaim)
ZK_KIND(ZKK_NSCLAIM, zk_nsclaim_ops, "namespace claim", ZKW_ANSWER,
		NULL, false)
