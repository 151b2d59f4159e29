/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  Module load, the base's half: the settings, every recipe's own
 *	  settings, the shared-memory hooks and the worker's registration, and
 *	  the registry the module's entry (src/zklock.c) hands over.  Runs in
 *	  the postmaster (from shared_preload_libraries) and is inherited by
 *	  every child.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "batch.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/guc.h"

char	   *zk_hosts = NULL;
char	   *zk_root = NULL;
int			zk_session_timeout = 10000;
int			zk_connect_timeout = 5000;
int			zk_commit_timeout = 5000;
int			zk_max_locks = 1024;
int			zk_max_locks_per_backend = 256;
int			zk_max_locks_per_role = 512;
int			zk_max_lease_duration = 86400;
int			zk_max_hold = 0;
int			zk_lease_cleanup_interval = 60;
int			zk_lease_cleanup_grace = 300;
int			zk_max_answer_kb = 16384;
int			zk_max_children = 10000;
int			zk_max_payload_kb = 262144;
int			zk_max_write_rate_kb = 256;
int			zk_max_write_burst_kb = 1024;
int			zk_max_transaction_kb = 256;
int			zk_max_item_kb = 16;
int			zk_max_kept_items = 10000;
int			zk_max_namespace_items = 50000;
int			zk_max_kept_bytes_kb = 262144;
int			zk_max_kept_nodes = 500000;
char	   *zk_namespace = NULL;

/* pg_stat_activity.wait_event of each ZkWait, on PostgreSQL 17 and later */
const char *const zk_wait_names[ZKW_NUM] = {
	[ZKW_LOCK] = "ZkLock",
	[ZKW_DEQUEUE] = "ZkDequeue",
	[ZKW_BARRIER] = "ZkBarrier",
	[ZKW_SEMAPHORE] = "ZkSemaphore",
	[ZKW_ANSWER] = "ZkWorkerAnswer",
	[ZKW_SHMEM] = "ZkSharedMemory",
	[ZKW_WORKER_MAIN] = "ZkWorkerMain",
	[ZKW_WORKER_CLOSE] = "ZkWorkerCloseSession",
};

static uint32 zk_wait_ids[ZKW_NUM];

/*
 * Register every wait event name (compat.h), once per process: backends
 * do it in zk_backend_init, the worker when it starts, in an ordinary
 * context (it takes PostgreSQL's lock on the names, and raises if their
 * table is full), never with zk_ctl->lock held.
 */
void
zk_wait_events_init(void)
{
	int			w;

	for (w = 0; w < ZKW_NUM; w++)
		if (zk_wait_ids[w] == 0)
			zk_wait_ids[w] = zk_register_wait_event(zk_wait_names[w]);
}

/*
 * The wait event to pass to WaitLatch for w; "Extension" until this
 * process registered the names (never registers here: a wait may come in
 * an abort or exit path).
 */
uint32
zk_wait_event(ZkWait w)
{
	Assert(w >= 0 && w < ZKW_NUM);
	return zk_wait_ids[w] != 0 ? zk_wait_ids[w] : PG_WAIT_EXTENSION;
}

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* shmem_request_hook: the segment's size, two LWLocks (lock and dsa_lock) */
static void
zk_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(zk_shmem_size());
	RequestAddinShmemSpace(zk_nsclaim_shmem_size());
	for (int k = 0; k < zk_registry->nrecipes; k++)
		RequestAddinShmemSpace(MAXALIGN(zk_registry->backends[k]->shmem_bytes));
	RequestNamedLWLockTranche("zklock", 2);
}

/* shmem_startup_hook: lay out or attach the segment (shmem.c) */
static void
zk_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	zk_shmem_init();
}

/* GUC check hook of zklock.root: an absolute ZooKeeper path (zk_valid_root) */
static bool
check_root(char **newval, void **extra, GucSource source)
{
	const char *why = NULL;

	if (!zk_valid_root(*newval, &why))
	{
		GUC_check_errdetail("%s", why);
		GUC_check_errhint("Use an absolute ZooKeeper path such as \"/zklock\" or \"/apps/zklock\".");
		return false;
	}
	return true;
}

/* GUC check hook of zklock.hosts: it must fit in ZKLOCK_HOSTS_MAX */
static bool
check_hosts(char **newval, void **extra, GucSource source)
{
	if (*newval && strlen(*newval) >= ZKLOCK_HOSTS_MAX)
	{
		GUC_check_errdetail("The connect string is longer than %d bytes.",
							ZKLOCK_HOSTS_MAX - 1);
		return false;
	}
	return true;
}

/*
 * zklock.namespace: at most ZKLOCK_NS_MAX bytes, and not changed by SET
 * under names this session holds in the old one (its locks, claims and
 * memberships would be looked for in the new one).
 */
static bool
check_namespace(char **newval, void **extra, GucSource source)
{
	if (*newval && strlen(*newval) > ZKLOCK_NS_MAX)
	{
		GUC_check_errdetail("A namespace has at most %d bytes.", ZKLOCK_NS_MAX);
		return false;
	}
	if (source == PGC_S_SESSION && IsNormalProcessingMode() &&
		zk_backend_has_entries())
	{
		GUC_check_errcode(ERRCODE_OBJECT_IN_USE);
		GUC_check_errdetail("This session holds or awaits zklock locks, claims or memberships in the current namespace.");
		GUC_check_errhint("Release them first (or change the namespace at the start of the session).");
		return false;
	}
	return true;
}

/* GUC assign hook of zklock.namespace: names are qualified anew */
static void
assign_namespace(const char *newval, void *extra)
{
	zk_namespace_changed();
}

/* zklock.hosts, root and the timeouts */
static void
define_connection_settings(void)
{
	DefineCustomStringVariable("zklock.hosts",
							   "ZooKeeper connect string (host:port pairs, comma separated).",
							   "Empty means zklock does not connect. A new value reconnects.",
							   &zk_hosts,
							   "",
							   PGC_SIGHUP,
							   0,
							   check_hosts, NULL, NULL);

	DefineCustomStringVariable("zklock.root",
							   "ZooKeeper path under which zklock keeps its nodes.",
							   NULL,
							   &zk_root,
							   "/zklock",
							   PGC_POSTMASTER,
							   0,
							   check_root, NULL, NULL);

	DefineCustomIntVariable("zklock.session_timeout",
							"ZooKeeper session timeout asked for by the worker.",
							"The server may negotiate it into its own bounds. Used for new sessions.",
							&zk_session_timeout,
							10000, 1000, 600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.connect_timeout",
							"How long a request waits for a usable ZooKeeper session before it fails.",
							NULL,
							&zk_connect_timeout,
							5000, 100, 3600000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.batch_max",
							"Writes the worker gathers into one ZooKeeper multi-op.",
							"Creates and deletes that arrive while the worker's last writes are on their way "
							"go together in one multi; a lone write goes at once, on its own. 1 sends every "
							"write on its own.",
							&zk_batch_max,
							64, 1, 1000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.batch_inflight",
							"Sends of one waited-for write each the worker may have in flight before it gathers.",
							"While a send that gathered several writes, or this many sends, are unanswered, "
							"what backends ask for is held and goes together once one is answered.",
							&zk_batch_inflight,
							2, 1, 16,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.commit_timeout",
							"How long COMMIT waits for a suspended ZooKeeper connection to come back.",
							"A transaction that holds zookeeper locks cannot commit while they are in doubt.",
							&zk_commit_timeout,
							5000, 0, 3600000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* zklock.max_*: the bounds of what one cluster, backend or role uses */
static void
define_limit_settings(void)
{
	DefineCustomIntVariable("zklock.max_locks",
							"Number of lock entries (held or awaited) in shared memory.",
							NULL,
							&zk_max_locks,
							1024, 16, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	/*
	 * The default is a quarter of zklock.max_locks, whose value (from
	 * postgresql.conf or the command line) is known by now.
	 */
	DefineCustomIntVariable("zklock.max_locks_per_backend",
							"Entries (locks held or awaited, queue and barrier requests) one backend may use at once.",
							"The default is a quarter of zklock.max_locks. Entries a backend let go of count "
							"until the worker has freed them.",
							&zk_max_locks_per_backend,
							Max(zk_max_locks / 4, 1), 1, 1000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	/*
	 * A quarter of zklock.max_locks by default: two roles together cannot
	 * starve a third (issue 35)
	 */
	DefineCustomIntVariable("zklock.max_locks_per_role",
							"Entries the sessions of one role (not a superuser) may use together at once.",
							"The default is a quarter of zklock.max_locks; 0 means no limit. Counted per session "
							"user; superusers are not bound by it.",
							&zk_max_locks_per_role,
							Max(zk_max_locks / 4, 1), 0, 1000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.max_lease_duration",
							"Longest duration zk_try_lease accepts.",
							"0 means no limit other than 100 years.",
							&zk_max_lease_duration,
							86400, 0, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	/* the longest a zk lock may be held (lock_worker.c, "Holds past their maximum") */
	DefineCustomIntVariable("zklock.max_hold",
							"Longest time a zk lock may be held before the zklock worker takes it back.",
							"0 means no limit. A call's max_hold can only shorten it. The holder's statement "
							"is cancelled and its COMMIT fails.",
							&zk_max_hold,
							0, 0, INT_MAX,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/* ended leases' nodes removed by the worker (lease_sweep.c) */
	DefineCustomIntVariable("zklock.lease_cleanup_interval",
							"How often the zklock worker removes the nodes of leases that ended long ago.",
							"0 turns the cleanup off (another cluster on the same root may do it).",
							&zk_lease_cleanup_interval,
							60, 0, 86400,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.lease_cleanup_grace",
							"How long past its end a lease's node stays in ZooKeeper.",
							"Counted by the worker's clock and by ZooKeeper's; at least the clock skew "
							"between the servers that share leases.",
							&zk_lease_cleanup_grace,
							300, 1, 86400 * 7,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.max_answer_bytes",
							"Largest answer the zklock worker assembles for one zk_queue_peek or zk_queues call, "
							"and the most payload one zk_dequeue takes.",
							"A peek or listing that would be larger fails with 54000; the worker stops reading "
							"for it once it has read this much. A dequeue stops claiming there and returns "
							"fewer items (at least one).",
							&zk_max_answer_kb,
							16384, 2048, 1048576,
							PGC_SUSET,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	/*
	 * Bounded fan-out (issue 35): a node with more children than this is
	 * not listed for a call (54000), so that one tenant's thousands of
	 * arrivals cannot make ZooKeeper or the worker send or hold their all.
	 */
	DefineCustomIntVariable("zklock.max_children",
							"Most children of one node the zklock worker lists for a call "
							"(zk_arrivals, zk_await, zk_lock_holders, zk_queue_peek, ...).",
							"A call that would list a node with more children fails with 54000; "
							"the worker reads the node's child count before listing it.",
							&zk_max_children,
							10000, 10, 1000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	/*
	 * The dsa's size limit: any process may set it (dsa_set_size_limit), so
	 * the worker applies a new value at reload, and the process that creates
	 * the area applies it at creation (shmem.c).
	 */
	DefineCustomIntVariable("zklock.max_payload_memory",
							"Largest size of the shared memory zklock keeps queue payloads and answers in.",
							"An enqueue's COMMIT, a dequeue or an answer that finds no room fails with 53200 "
							"(a dequeue that already holds items returns them and gives the rest back).",
							&zk_max_payload_kb,
							262144, 4096, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_KB,
							NULL, NULL, NULL);
}

/*
 * zklock.max_write_rate, max_write_burst, max_transaction_size,
 * max_item_size, max_kept_items: what one role may write into the shared
 * ZooKeeper and keep there (quota.c; doc/limits.md, "Sizing ZooKeeper")
 */
static void
define_write_quota_settings(void)
{
	DefineCustomIntVariable("zklock.max_write_rate",
							"Bytes per second the sessions of one role (not a superuser) may write into ZooKeeper, in kB.",
							"Queue items, arrivals, gate changes and lease data, counted at COMMIT (a queue "
							"transaction's bytes twice: its transaction node, then its items). A COMMIT over "
							"the rate waits up to zklock.commit_timeout, else fails with 53400. 0 means no limit.",
							&zk_max_write_rate_kb,
							256, 0, 1048576,
							PGC_SUSET,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.max_write_burst",
							"Bytes the sessions of one role may write into ZooKeeper at once, above zklock.max_write_rate.",
							"A single COMMIT that writes more fails with 54000.",
							&zk_max_write_burst_kb,
							1024, 64, 1048576,
							PGC_SUSET,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.max_transaction_size",
							"Bytes one transaction may publish into ZooKeeper (queue items, arrivals, gate changes).",
							"ZooKeeper keeps its last 500 writes in memory: this bounds what they take. "
							"At most 976 kB (jute.maxbuffer's 1 MB, less headers).",
							&zk_max_transaction_kb,
							256, 1, ZKQ_TXN_MAX_KB,
							PGC_SUSET,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.max_item_size",
							"Largest payload of one queue item.",
							"With zklock.max_kept_items, bounds the bytes one queue keeps in ZooKeeper.",
							&zk_max_item_kb,
							16, 1, ZKQ_TXN_MAX_KB,
							PGC_SUSET,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.max_kept_items",
							"Items one queue, or arrivals one arrivals object, may keep in ZooKeeper.",
							"Counted from ZooKeeper when a transaction publishes: a COMMIT that would pass it "
							"fails with 53400, nothing written. 0 means no limit.",
							&zk_max_kept_items,
							10000, 0, 1000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	/* one namespace's share, counted by the worker (queue_nskept.c) */
	DefineCustomIntVariable("zklock.max_namespace_items",
							"Queue items and arrivals all of one namespace may keep in ZooKeeper.",
							"Counted by the worker from ZooKeeper about once a second while the namespace "
							"publishes: a COMMIT that would pass it fails with 53400, nothing written. "
							"0 means no limit.",
							&zk_max_namespace_items,
							50000, 0, 100000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	/* everything under zklock.root, as ZooKeeper counts it (kept.c) */
	DefineCustomIntVariable("zklock.max_kept_bytes",
							"Bytes of data all of zklock.root may keep in ZooKeeper (every tenant of every cluster on that root).",
							"Counted by ZooKeeper (a quota node on the root, no server-side limit): a COMMIT "
							"that publishes queue items or arrivals, or a lease write, past it fails with 53400. "
							"0 means no limit.",
							&zk_max_kept_bytes_kb,
							262144, 0, 67108864,
							PGC_SIGHUP,
							GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("zklock.max_kept_nodes",
							"Nodes all of zklock.root may keep in ZooKeeper (every tenant of every cluster on that root).",
							"Counted by ZooKeeper like zklock.max_kept_bytes. 0 means no limit.",
							&zk_max_kept_nodes,
							500000, 0, 100000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
}

/* zklock.namespace, auth_file, acl */
static void
define_access_settings(void)
{
	DefineCustomStringVariable("zklock.namespace",
							   "Namespace of this session's zklock names.",
							   "Sessions meet on a name only within one namespace. \"$database\" is the "
							   "database's name when a superuser created the extension in it (a rename "
							   "does not change it); empty is the namespace shared by everyone.",
							   &zk_namespace,
							   "$database",
							   PGC_SUSET,
							   0,
							   check_namespace, assign_namespace, NULL);

	DefineCustomStringVariable("zklock.auth_file",
							   "File holding the ZooKeeper credentials (one line user:password, digest scheme).",
							   "Absolute or relative to the data directory; it must be owned by the server's user "
							   "and not readable by group or others. Empty means no authentication. "
							   "A reload that changes the credentials opens a new session.",
							   &zk_auth_file,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   zk_check_auth_file, NULL, NULL);

	DefineCustomStringVariable("zklock.acl",
							   "ZooKeeper ACL of the nodes zklock creates (scheme:id:perms, comma separated).",
							   "Schemes world, auth, digest, ip; perms letters of cdrwa. Empty means "
							   "auth::cdrwa,world:anyone:r with zklock.auth_file, world:anyone:cdrwa without.",
							   &zk_acl_setting,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   zk_check_acl, zk_assign_acl, NULL);

	DefineCustomStringVariable("zklock.acl_world_read",
							   "Kinds of zklock nodes that anyone may read (with zklock.auth_file and an empty zklock.acl).",
							   "Comma-separated: locks, elections, semaphores, leases, queues, barriers, gates, arrivals, counters; "
							   "empty for none. The others are private to zklock's ZooKeeper identity.",
							   &zk_acl_world_read,
							   "locks,elections",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   zk_check_acl_world_read, zk_assign_acl_world_read, NULL);

	DefineCustomBoolVariable("zklock.acl_repair",
							 "Give nodes found open to other ZooKeeper clients the ACL zklock creates nodes with.",
							 "The worker reads the ACLs of the root, its directories and the parents it uses; "
							 "without this it only warns (zk_status().acl_problems).",
							 &zk_acl_repair,
							 false,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);
}

const ZkRegistry *zk_registry = NULL;

/* The name of a kind of entry in zk_entries (recipelist.h), or "?" */
const char *
zk_kind_label(int kind)
{
	return kind >= 0 && kind < ZKK_NUM ? zk_registry->kinds[kind].label : "?";
}

/*
 * Module load, in the postmaster only (shared_preload_libraries), from
 * _PG_init with the registry: keep it, define the settings (the base's,
 * then each recipe's), chain the shared memory hooks, register the worker.
 */
void
zk_module_init(const ZkRegistry *registry)
{
	int			i;

	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock must be loaded via shared_preload_libraries"),
				 errdetail("zklock runs a background worker and needs shared memory reserved at server start."),
				 errhint("Add zklock to shared_preload_libraries in postgresql.conf and restart the server.")));

	zk_registry = registry;

	define_connection_settings();
	define_limit_settings();
	define_write_quota_settings();
	define_access_settings();
	for (i = 0; i < registry->nrecipes; i++)
		if (registry->backends[i]->define_settings)
			registry->backends[i]->define_settings();

	MarkGUCPrefixReserved("zklock");

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = zk_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = zk_shmem_startup;

	zk_register_worker();
}
