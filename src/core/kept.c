/*-------------------------------------------------------------------------
 *
 * kept.c
 *	  What all of zklock.root keeps in ZooKeeper, against
 *	  zklock.max_kept_bytes and zklock.max_kept_nodes.
 *
 *	  ZooKeeper counts the nodes and data bytes of a subtree exactly once a
 *	  quota is set on it: the nodes /zookeeper/quota<root>/zookeeper_limits
 *	  and .../zookeeper_stats.  Creating the stats node makes the server
 *	  count the subtree as it is; from then on every create, delete and
 *	  setData under the root keeps the count exact (and a restart counts
 *	  again).  The worker sets this up once per session and after a reload:
 *	  it creates the quota nodes for the root (the limits node with
 *	  "count=-1,bytes=-1": no limit that the server would enforce, and that
 *	  only logs anyway), with zklock's own ACL, then reads their ACLs.  A
 *	  quota node that lets another identity write, delete, create or admin
 *	  (another client could rewrite the stats, or plant a quota deeper that
 *	  takes nodes out of ours) is not trusted: a WARNING with a hint
 *	  (rate-limited), counted in zk_status().acl_problems, and no bound.
 *	  Neither is there one when the connection string has a chroot
 *	  (/zookeeper/quota is out of reach) or both settings are 0.
 *
 *	  Enforced before anything is sent: a queue publication (pre-commit)
 *	  reads the stats node beside its zklock.max_kept_items checks, in the
 *	  same round trip (queue_publish.c), and is refused (53400) when what
 *	  is kept plus what the transaction adds passes a bound; a transaction
 *	  larger than a bound by itself fails at once (54000).  A lease write
 *	  checks the totals last read, which the worker refreshes every second
 *	  or so while the session is usable.  Locks, elections and semaphores
 *	  (ephemeral nodes, bounded by zklock.max_locks) are never refused, so
 *	  a full ZooKeeper never blocks locking.  Transactions checked at the
 *	  same time may each pass: the bounds are overshot by at most the
 *	  COMMITs in flight times zklock.max_transaction_size.
 *
 *	  zk_kept_totals() shows the totals against the bounds.  doc/limits.md,
 *	  "What all tenants keep in ZooKeeper".
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "trust.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* zk_ctl->kept_state */
typedef enum ZkKeptState
{
	ZKKEPT_OFF = 0,				/* both settings 0 */
	ZKKEPT_SETUP,				/* quota nodes being made or checked */
	ZKKEPT_OK,					/* counted: bounds enforced */
	ZKKEPT_UNTRUSTED,			/* a quota node open to others */
	ZKKEPT_CHROOT,				/* zklock.hosts has a chroot */
	ZKKEPT_UNAVAILABLE			/* ZooKeeper refused the quota nodes */
} ZkKeptState;

static const char *const kept_state_names[] = {
	"off", "setting up", "enforced", "untrusted", "chroot", "unavailable"
};

/* how often the worker reads the totals while the session is usable */
#define KEPT_REFRESH_MS		1000

#define QUOTA_ZNODE			"/zookeeper/quota"

static uint64 setup_session = 0;	/* the session set up (or being) */
static bool setup_needed = true;
static int	setup_pending = 0;	/* setup answers awaited */
static bool setup_failed = false;	/* one of them went wrong: again */
static bool read_inflight = false;
static TimestampTz read_sent_at = 0;
static MemoryContext kept_cxt = NULL;
static ZkLogLimit untrusted_log;
static ZkLogLimit unavailable_log;
static ZkLogLimit garbled_log;
static ZkLogLimit limits_log;
static bool stats_garbled = false;	/* the stats node's data is unreadable */

typedef struct KeptCall
{
	uint64		session;
	char		path[ZK_PATH_MAX];
} KeptCall;

/* The memory of the calls in flight */
static MemoryContext
kept_context(void)
{
	return ZK_LAZY_CONTEXT(kept_cxt, "zklock kept totals", ALLOCSET_SMALL_SIZES);
}

/* The quota directory of the root: /zookeeper/quota<root> */
static void
quota_dir(char *out, size_t len)
{
	snprintf(out, len, "%s%s", QUOTA_ZNODE, zk_root);
}

/* The stats node ZooKeeper keeps the root's totals in */
void
zk_kept_stats_path(char *out, size_t len)
{
	snprintf(out, len, "%s%s/zookeeper_stats", QUOTA_ZNODE, zk_root);
}

/* Set the state and why (worker; takes the lock) */
static void
set_state(ZkKeptState st, const char *why)
{
	zk_worker_enter();
	zk_ctl->kept_state = st;
	strlcpy(zk_ctl->kept_why, why ? why : "", sizeof(zk_ctl->kept_why));
	zk_worker_leave();
}

/* Ask for the quota nodes to be set up and checked again (reload) */
void
zk_kept_request(void)
{
	setup_needed = true;
}

/* Are the bounds enforced now (worker)? */
bool
zk_kept_enforced(void)
{
	return zk_ctl->kept_state == ZKKEPT_OK &&
		(zk_max_kept_bytes_kb > 0 || zk_max_kept_nodes > 0);
}

/*
 * Parse a stats node's data ("count=12,bytes=10000", maybe more pairs);
 * false unless both are there and sane
 */
bool
zk_kept_parse(const char *data, int len, int64 *nodes, int64 *bytes)
{
	char		buf[256];
	char	   *tok;
	char	   *save = NULL;
	bool		have_c = false;
	bool		have_b = false;

	if (data == NULL || len <= 0 || len >= (int) sizeof(buf))
		return false;
	memcpy(buf, data, len);
	buf[len] = '\0';
	for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
	{
		char	   *end;
		long long	v;

		while (*tok == ' ')
			tok++;
		/* past 2^50 (overflow in zk_kept_over) is not ZooKeeper's count */
		if (strncmp(tok, "count=", 6) == 0)
		{
			v = strtoll(tok + 6, &end, 10);
			if (end == tok + 6 || v < 0 || v > ((long long) 1 << 50))
				return false;
			*nodes = v;
			have_c = true;
		}
		else if (strncmp(tok, "bytes=", 6) == 0)
		{
			v = strtoll(tok + 6, &end, 10);
			if (end == tok + 6 || v < 0 || v > ((long long) 1 << 50))
				return false;
			*bytes = v;
			have_b = true;
		}
	}
	return have_c && have_b;
}

/* Keep totals just read (worker, lock held or not: re-entrant) */
void
zk_kept_store(int64 nodes, int64 bytes)
{
	zk_worker_enter();
	zk_ctl->kept_nodes = nodes;
	zk_ctl->kept_bytes = bytes;
	zk_ctl->kept_read_at = GetCurrentTimestamp();
	zk_worker_leave();
}

/*
 * Would keeping add_nodes more nodes and add_bytes more bytes pass a
 * bound, given nodes and bytes kept?  Writes why into msg.
 */
bool
zk_kept_over(int64 nodes, int64 bytes, int64 add_nodes, int64 add_bytes,
			 char *msg, size_t len)
{
	int64		maxb = (int64) zk_max_kept_bytes_kb * 1024;

	if ((maxb > 0 && bytes + add_bytes > maxb) ||
		(zk_max_kept_nodes > 0 && nodes + add_nodes > zk_max_kept_nodes))
	{
		/* short: it travels in an entry's errmsg (ZKLOCK_ERRMSG_MAX) */
		snprintf(msg, len,
				 INT64_FORMAT " nodes and " INT64_FORMAT " bytes kept, up to " INT64_FORMAT " nodes and " INT64_FORMAT " bytes more; zklock.max_kept_nodes is %d, zklock.max_kept_bytes " INT64_FORMAT,
				 nodes, bytes, add_nodes, add_bytes, zk_max_kept_nodes, maxb);
		return true;
	}
	return false;
}

/* A quota node is open to others: no bound, and say so (rate-limited) */
static void
report_untrusted(const char *path, const char *entry)
{
	char		why[128];

	snprintf(why, sizeof(why), "%s is open to others (%s)", path, entry);
	set_state(ZKKEPT_UNTRUSTED, why);
	zk_worker_enter();
	zk_ctl->acl_problems++;
	strlcpy(zk_ctl->acl_problem, path, sizeof(zk_ctl->acl_problem));
	zk_worker_leave();
	if (zk_log_limited(&untrusted_log, "zookeeper quota node open to others"))
		ereport(WARNING,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("zklock: zookeeper quota node \"%s\" lets other clients change it (ACL entry %s); zklock.max_kept_bytes and zklock.max_kept_nodes are not enforced",
						path, entry),
				 errdetail("Another client could rewrite the totals ZooKeeper keeps for %s, or delete them.", zk_root),
				 errhint("Delete %s%s and its children (zkCli.sh deleteall) so that zklock creates them with its own ACL, or give them zklock's ACL, then reload; see doc/limits.md, \"What all tenants keep in ZooKeeper\".",
						 QUOTA_ZNODE, zk_root)));
}

/* ZooKeeper refused a quota node: no bound, and say so (rate-limited) */
static void
report_unavailable(const char *path, int rc)
{
	char		why[128];

	snprintf(why, sizeof(why), "%s: %s", path, zerror(rc));
	set_state(ZKKEPT_UNAVAILABLE, why);
	if (zk_log_limited(&unavailable_log, "zookeeper quota node refused"))
		ereport(WARNING,
				(errmsg("zklock: cannot count what zklock.root keeps in zookeeper: %s; zklock.max_kept_bytes and zklock.max_kept_nodes are not enforced",
						why),
				 errhint("Let zklock's ZooKeeper identity create nodes under %s (its ACL), then reload.",
						 QUOTA_ZNODE)));
}

/*
 * The stats node holds data zklock cannot read (negative, huge, garbage:
 * another client wrote it): no bound, and say so (rate-limited) rather than
 * go on calling stale totals enforced.  The worker keeps reading it every
 * second and enforces again once it reads well (worker).
 */
void
zk_kept_garbled(const char *value, int len)
{
	char		shown[41];
	char		why[128];
	char		path[ZK_PATH_MAX];
	int			i;
	int			n = 0;

	for (i = 0; value != NULL && i < len && n < (int) sizeof(shown) - 1; i++)
		shown[n++] = (value[i] >= 0x20 && value[i] < 0x7f && value[i] != '"') ? value[i] : '?';
	shown[n] = '\0';
	zk_kept_stats_path(path, sizeof(path));
	snprintf(why, sizeof(why), "%s holds \"%s\", not totals zklock can read", path, shown);
	stats_garbled = true;
	if (zk_ctl->kept_state == ZKKEPT_OK)
		set_state(ZKKEPT_UNTRUSTED, why);
	if (zk_log_limited(&garbled_log, "zookeeper quota stats unreadable"))
		ereport(WARNING,
				(errmsg("zklock: zookeeper quota stats node \"%s\" holds \"%s\", not totals zklock can read; zklock.max_kept_bytes and zklock.max_kept_nodes are not enforced",
						path, shown),
				 errdetail("Another client wrote it (one with zklock's credentials, or any client when zklock has none). ZooKeeper 3.8 and 3.9 stop, and cannot start again, at the next write under %s when they cannot parse it either.", zk_root),
				 errhint("Delete %s (zkCli.sh delete): the worker creates it again and ZooKeeper counts %s afresh; see doc/limits.md, \"What all tenants keep in ZooKeeper\".",
						 path, zk_root)));
}

/* One setup answer less; all in: enforce (or set up again next turn) */
static void
setup_answered(void)
{
	if (--setup_pending > 0)
		return;
	if (setup_failed)
	{
		setup_failed = false;
		setup_session = 0;		/* again next turn */
		return;
	}
	if (zk_ctl->kept_state == ZKKEPT_SETUP || zk_ctl->kept_state == ZKKEPT_OK)
	{
		set_state(ZKKEPT_OK, NULL);
		read_sent_at = 0;		/* read the totals at once */
	}
}

/* Completion of the quota nodes' creates */
static void
create_done(int rc, const char *value, const void *data)
{
	DATA_COMPLETION_BEGIN(KeptCall, c, data)
	{
		if (c->session == zk_cur_session && c->session == setup_session)
		{
			if (rc == ZNOAUTH)
				report_unavailable(c->path, rc);
			else if (rc != ZOK && rc != ZNODEEXISTS)
				setup_failed = true;
			setup_answered();
		}
		pfree(c);
	}
	NONE_COMPLETION_END;
}

/* Completion of the quota nodes' ACL reads */
static void
acl_done(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(KeptCall, c, data)
	{
		if (c->session == zk_cur_session && c->session == setup_session)
		{
			if (rc == ZNOAUTH)
				report_untrusted(c->path, "(unreadable)");
			else if (rc == ZOK && acl != NULL)
			{
				int			i;

				for (i = 0; i < acl->count; i++)
				{
					char		entry[ZKLOCK_ACL_ID_MAX + 80];

					if (!zk_acl_entry_foreign(&acl->data[i],
											  ZOO_PERM_CREATE | ZOO_PERM_DELETE |
											  ZOO_PERM_WRITE | ZOO_PERM_ADMIN))
						continue;
					snprintf(entry, sizeof(entry), "%.*s:%.*s:%s%s%s%s",
							 64, acl->data[i].id.scheme,
							 ZKLOCK_ACL_ID_MAX, acl->data[i].id.id,
							 (acl->data[i].perms & ZOO_PERM_CREATE) ? "c" : "",
							 (acl->data[i].perms & ZOO_PERM_DELETE) ? "d" : "",
							 (acl->data[i].perms & ZOO_PERM_WRITE) ? "w" : "",
							 (acl->data[i].perms & ZOO_PERM_ADMIN) ? "a" : "");
					report_untrusted(c->path, entry);
					break;
				}
			}
			else
				setup_failed = true;
			setup_answered();
		}
		pfree(c);
	}
	NONE_COMPLETION_END;
}

/* Completion of the worker's read of the totals */
static void
read_done(int rc, const char *value, int value_len, const struct Stat *stat,
		  const void *data)
{
	DATA_COMPLETION_BEGIN(KeptCall, c, data)
	{
		read_inflight = false;
		if (c->session == zk_cur_session)
		{
			int64		nodes;
			int64		bytes;

			if (rc == ZOK && zk_kept_parse(value, value_len, &nodes, &bytes))
			{
				zk_kept_store(nodes, bytes);
				if (stats_garbled)
				{
					stats_garbled = false;
					if (zk_ctl->kept_state == ZKKEPT_UNTRUSTED)
						set_state(ZKKEPT_OK, NULL);
				}
			}
			else if (rc == ZOK)
				zk_kept_garbled(value, value_len);
			else if (rc == ZNONODE)
				setup_session = 0;	/* gone: set up again */
		}
		pfree(c);
	}
	NONE_COMPLETION_END;
}

/* Completion of the delete of the stats node (limits_done): nothing to do */
static void
stats_deleted(int rc, const void *data)
{
}

/*
 * Completion of the worker's check that the limits node is there.  Without
 * it ZooKeeper no longer counts the root (it forgets the quota, and the
 * stats node keeps the totals of that moment), so the bound would be
 * enforced on frozen totals.  Delete the stats node and set the quota up
 * again: creating the stats node makes ZooKeeper count the root afresh
 * (the delete is answered before the setup's creates, sent next turn).
 */
static void
limits_done(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(KeptCall, c, data)
	{
		if (c->session == zk_cur_session && rc == ZNONODE &&
			zk_ctl->kept_state == ZKKEPT_OK)
		{
			char		stats[ZK_PATH_MAX];

			if (zk_log_limited(&limits_log, "zookeeper quota limits gone"))
				ereport(WARNING,
						(errmsg("zklock: zookeeper quota node \"%s\" is gone, so zookeeper stopped counting what %s keeps; zklock makes the quota again",
								c->path, zk_root),
						 errdetail("Another client deleted it (one with zklock's credentials, or any client when zklock has none); ZooKeeper counts the root afresh once the quota is made again."),
						 errhint("Do not delete ZooKeeper's quota on zklock.root; set zklock.max_kept_bytes and zklock.max_kept_nodes to 0 to turn the bound off.")));
			zk_kept_stats_path(stats, sizeof(stats));
			(void) zoo_adelete(zk_zh, stats, -1, stats_deleted, NULL);
			setup_session = 0;	/* set up again next turn */
		}
		pfree(c);
	}
	NONE_COMPLETION_END;
}

/* Send a create of path with data (setup); counted in setup_pending */
static void
send_create(const char *path, const char *data)
{
	KeptCall   *c = MemoryContextAllocZero(kept_context(), sizeof(KeptCall));

	c->session = zk_cur_session;
	strlcpy(c->path, path, sizeof(c->path));
	if (zoo_acreate(zk_zh, c->path, data, data ? (int) strlen(data) : -1,
					zk_acl(), ZOO_PERSISTENT, create_done, c) == ZOK)
		setup_pending++;
	else
	{
		pfree(c);
		setup_failed = true;
	}
}

/* Send the ACL read of path (setup); counted in setup_pending */
static void
send_acl_read(const char *path)
{
	KeptCall   *c = MemoryContextAllocZero(kept_context(), sizeof(KeptCall));

	c->session = zk_cur_session;
	strlcpy(c->path, path, sizeof(c->path));
	if (zoo_aget_acl(zk_zh, c->path, acl_done, c) == ZOK)
		setup_pending++;
	else
	{
		pfree(c);
		setup_failed = true;
	}
}

/*
 * Set up the root's quota nodes: create each level under /zookeeper/quota,
 * the limits node, the stats node, then read the ACLs of the root's quota
 * directory and of both nodes.  All sent at once: ZooKeeper answers a
 * session's requests in order.
 */
static void
send_setup(void)
{
	char		dir[ZK_PATH_MAX];
	char		path[ZK_PATH_MAX];
	char	   *p;

	quota_dir(dir, sizeof(dir));
	/* each level below /zookeeper/quota, then the directory itself */
	for (p = strchr(dir + strlen(QUOTA_ZNODE) + 1, '/'); p != NULL; p = strchr(p + 1, '/'))
	{
		memcpy(path, dir, p - dir);
		path[p - dir] = '\0';
		send_create(path, NULL);
	}
	send_create(dir, NULL);
	snprintf(path, sizeof(path), "%s/zookeeper_limits", dir);
	send_create(path, "count=-1,bytes=-1");
	snprintf(path, sizeof(path), "%s/zookeeper_stats", dir);
	send_create(path, "count=0,bytes=0");
	send_acl_read(dir);
	snprintf(path, sizeof(path), "%s/zookeeper_limits", dir);
	send_acl_read(path);
	snprintf(path, sizeof(path), "%s/zookeeper_stats", dir);
	send_acl_read(path);
}

/*
 * Every turn the session is usable: set the quota nodes up once per
 * session (and after a reload), then read the totals about once a second.
 * At most a few requests per turn.
 */
void
zk_kept_turn(void)
{
	TimestampTz now;

	if (!zk_session_usable() || zk_zh == NULL)
		return;
	if (zk_max_kept_bytes_kb <= 0 && zk_max_kept_nodes <= 0)
	{
		if (zk_ctl->kept_state != ZKKEPT_OFF)
			set_state(ZKKEPT_OFF, NULL);
		setup_session = 0;
		return;
	}
	if (zk_hosts != NULL && strchr(zk_hosts, '/') != NULL)
	{
		if (zk_ctl->kept_state != ZKKEPT_CHROOT)
			set_state(ZKKEPT_CHROOT,
					  "zklock.hosts has a chroot: /zookeeper/quota is out of reach");
		return;
	}
	if (setup_pending > 0)
		return;					/* answers awaited */
	if (setup_needed || setup_session != zk_cur_session)
	{
		setup_needed = false;
		setup_failed = false;
		stats_garbled = false;	/* the read after the setup says again */
		setup_session = zk_cur_session;
		/* bounds enforced before stay so until the check says otherwise */
		if (zk_ctl->kept_state != ZKKEPT_OK)
			set_state(ZKKEPT_SETUP, NULL);
		send_setup();
		if (setup_pending == 0)
			setup_session = 0;	/* nothing sent: again next turn */
		return;
	}
	if ((zk_ctl->kept_state != ZKKEPT_OK && !stats_garbled) || read_inflight)
		return;
	now = GetCurrentTimestamp();
	if (read_sent_at != 0 &&
		!TimestampDifferenceExceeds(read_sent_at, now, KEPT_REFRESH_MS))
		return;
	{
		KeptCall   *c = MemoryContextAllocZero(kept_context(), sizeof(KeptCall));

		c->session = zk_cur_session;
		zk_kept_stats_path(c->path, sizeof(c->path));
		if (zoo_aget(zk_zh, c->path, 0, read_done, c) == ZOK)
		{
			read_inflight = true;
			read_sent_at = now;
		}
		else
			pfree(c);
	}
	{
		/* and that ZooKeeper still counts: the limits node is there */
		KeptCall   *c = MemoryContextAllocZero(kept_context(), sizeof(KeptCall));

		c->session = zk_cur_session;
		snprintf(c->path, sizeof(c->path), "%s%s/zookeeper_limits", QUOTA_ZNODE, zk_root);
		if (zoo_aexists(zk_zh, c->path, 0, limits_done, c) != ZOK)
			pfree(c);
	}
}

/*
 * Backend: may a write of "bytes" in "nodes" nodes be kept at all?  One
 * larger than a bound by itself fails (54000); with "cached", also one that
 * would pass a bound on top of the totals last read (53400).  Nothing has
 * been sent when it fails.
 */
void
zk_kept_check(int64 bytes, int64 nodes, bool cached, const char *what)
{
	int64		maxb = (int64) zk_max_kept_bytes_kb * 1024;
	int			state;
	int64		kn;
	int64		kb;
	char		msg[ZKLOCK_ERRMSG_MAX];

	if ((maxb > 0 && bytes > maxb) ||
		(zk_max_kept_nodes > 0 && nodes > zk_max_kept_nodes))
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("zklock write is larger than all of zklock.root may keep in zookeeper"),
				 errdetail("%s would keep up to " INT64_FORMAT " bytes in " INT64_FORMAT " nodes; zklock.max_kept_bytes is " INT64_FORMAT " bytes and zklock.max_kept_nodes is %d.",
						   what, bytes, nodes, maxb, zk_max_kept_nodes),
				 errhint("Write less in one transaction, or ask a superuser to raise zklock.max_kept_bytes or zklock.max_kept_nodes.")));
	if (!cached)
		return;
	zk_require_shmem();
	zk_backend_lock(LW_SHARED);
	state = zk_ctl->kept_state;
	kn = zk_ctl->kept_nodes;
	kb = zk_ctl->kept_bytes;
	LWLockRelease(zk_ctl->lock);
	if (state != ZKKEPT_OK || !zk_kept_over(kn, kb, nodes, bytes, msg, sizeof(msg)))
		return;
	zk_backend_lock(LW_EXCLUSIVE);
	zk_ctl->kept_refused++;
	LWLockRelease(zk_ctl->lock);
	zk_kept_error(msg);
}

/* Backend: the error of a write refused for the totals (53400) */
void
zk_kept_error(const char *msg)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("zookeeper keeps as much zklock data as zklock.max_kept_bytes and zklock.max_kept_nodes allow"),
			 errdetail("ZooKeeper counts under %s (zklock.root): %s; nothing of this write was sent.",
					   zk_root, msg),
			 errhint("Consume or drop queue items (zk_dequeue, zk_queue_purge, zk_queue_drop) or reset arrivals to make room, or ask a superuser to raise zklock.max_kept_bytes or zklock.max_kept_nodes (doc/limits.md).")));
}

PG_FUNCTION_INFO_V1(zk_kept_totals);

/*
 * SQL: zk_kept_totals(): what all of zklock.root keeps in ZooKeeper, as it
 * was last read, against the bounds, and whether they are enforced.
 */
Datum
zk_kept_totals(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[8];
	bool		nulls[8];
	int			state;
	int64		kn;
	int64		kb;
	TimestampTz at;
	uint64		refused;
	char		why[sizeof(zk_ctl->kept_why)];

	tupdesc = zk_status_row_type(fcinfo);
	zk_backend_lock(LW_SHARED);
	state = zk_ctl->kept_state;
	kn = zk_ctl->kept_nodes;
	kb = zk_ctl->kept_bytes;
	at = zk_ctl->kept_read_at;
	refused = zk_ctl->kept_refused;
	strlcpy(why, zk_ctl->kept_why, sizeof(why));
	LWLockRelease(zk_ctl->lock);

	memset(nulls, 0, sizeof(nulls));
	if (state < 0 || state >= (int) lengthof(kept_state_names))
		state = ZKKEPT_UNAVAILABLE;
	values[0] = CStringGetTextDatum(kept_state_names[state]);
	values[1] = Int64GetDatum(kn);
	values[2] = Int64GetDatum(kb);
	nulls[1] = nulls[2] = (at == 0);
	values[3] = Int64GetDatum((int64) zk_max_kept_nodes);
	nulls[3] = (zk_max_kept_nodes <= 0);
	values[4] = Int64GetDatum((int64) zk_max_kept_bytes_kb * 1024);
	nulls[4] = (zk_max_kept_bytes_kb <= 0);
	values[5] = TimestampTzGetDatum(at);
	nulls[5] = (at == 0);
	values[6] = Int64GetDatum((int64) refused);
	values[7] = CStringGetTextDatum(why);
	nulls[7] = (why[0] == '\0');
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
