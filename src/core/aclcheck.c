/*-------------------------------------------------------------------------
 *
 * aclcheck.c
 *	  The ACLs of the nodes zklock finds already there.
 *
 *	  ZooKeeper checks the permission to create or delete a node on its
 *	  parent: a parent whose ACL lets another identity create or delete
 *	  (world:anyone:cdrwa, left by a client without credentials that came
 *	  first) lets that client delete a lock holder's node or a queue's item
 *	  whatever their own ACL says.  zklock creates its parents with its own
 *	  ACL, but reuses those it finds.  So the worker reads the ACL
 *	  (zoo_aget_acl) of:
 *
 *	  - the root and the kinds' directories under it (locks, queues, ...:
 *	    a fixed list), when a session becomes usable and after a reload;
 *	  - a name's parent (<root>/locks/<name>, a queue's node, entries and
 *	    taken) the first time this session uses it: once per parent per
 *	    session, remembered in a bounded set of path hashes (emptied when
 *	    full), never a round trip of the request itself.
 *
 *	  An entry that grants create, delete or admin to an identity that is
 *	  not in the ACL zklock creates with (auth: the worker's own digest id),
 *	  or an ACL the worker may not even read (ZNOAUTH: not its own node),
 *	  is a WARNING with a hint (rate-limited), counted in
 *	  zk_status().acl_problems; with zklock.acl_repair the worker sets the
 *	  node's ACL to the one it would have created it with (zoo_aset_acl,
 *	  at the version read) and logs that instead.
 *
 *	  Worker only; the completions take the lock (COMPLETION_BEGIN/END).
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "trust.h"

#include "common/hashfn.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

bool		zk_acl_repair = false;

/* ACL reads in flight, at most */
#define ACLC_INFLIGHT_MAX	64
/* parents remembered as checked in this session, at most */
#define ACLC_SEEN_MAX		4096

/* the directories under the root, checked with the root */
static const char *const check_dirs[] = {
	"locks", "queues", "barriers", "gates", "arrivals", "semaphores",
	"leases", "elections", "txns", "runs", "stamps", "namespaces",
	"waits", "revokes", "counters"
};

static bool check_needed = true;
static uint64 checked_session = 0;
static int	inflight = 0;
static HTAB *seen = NULL;
static MemoryContext aclc_cxt = NULL;
static ZkLogLimit open_log;
static ZkLogLimit repair_log;

typedef struct AclCall
{
	uint64		session;
	bool		repairing;
	char		path[ZK_PATH_MAX];
} AclCall;

static void acl_read_done(int rc, struct ACL_vector *acl, struct Stat *stat,
						  const void *data);

/* The memory of the calls in flight and of the set of parents seen */
static MemoryContext
aclc_context(void)
{
	return ZK_LAZY_CONTEXT(aclc_cxt, "zklock acl checks", ALLOCSET_SMALL_SIZES);
}

/* Forget the parents seen (a new session, a reload, or the set is full) */
static void
seen_reset(void)
{
	if (seen != NULL)
		hash_destroy(seen);
	seen = NULL;
}

/* Was path checked in this session?  Marks it (mark) if not */
static bool
seen_test(const char *path, bool mark)
{
	uint64		key = hash_bytes_extended((const unsigned char *) path,
										  (int) strlen(path), 0x5a);
	bool		found;

	if (seen == NULL)
	{
		if (!mark)
			return false;
		seen = zk_hash_create("zklock acl checks", 256, sizeof(uint64),
							  sizeof(uint64), false, aclc_context());
	}
	if (!mark)
	{
		(void) hash_search(seen, &key, HASH_FIND, &found);
		return found;
	}
	if (hash_get_num_entries(seen) >= ACLC_SEEN_MAX)
	{
		seen_reset();
		return seen_test(path, true);
	}
	(void) hash_search(seen, &key, HASH_ENTER, &found);
	return found;
}

/* Forget that path was checked (it was not there: look again next time) */
static void
seen_forget(const char *path)
{
	uint64		key = hash_bytes_extended((const unsigned char *) path,
										  (int) strlen(path), 0x5a);

	if (seen != NULL)
		(void) hash_search(seen, &key, HASH_REMOVE, NULL);
}

/* Send the ACL read of path; false when the window is full or not sent */
static bool
send_read(const char *path)
{
	AclCall    *c;

	if (inflight >= ACLC_INFLIGHT_MAX || zk_zh == NULL)
		return false;
	c = MemoryContextAllocZero(aclc_context(), sizeof(AclCall));
	c->session = zk_cur_session;
	strlcpy(c->path, path, sizeof(c->path));
	if (zoo_aget_acl(zk_zh, c->path, acl_read_done, c) != ZOK)
	{
		pfree(c);
		return false;
	}
	inflight++;
	return true;
}

/* Ask for a new check of the root and the directories (reload, new ACL) */
void
zk_acl_check_request(void)
{
	check_needed = true;
}

/*
 * Once per usable session and after each reload: read the ACLs of the root
 * and of the kinds' directories (bounded: a fixed list)
 */
void
zk_acl_check_turn(void)
{
	char		path[ZK_PATH_MAX];
	int			i;

	if (!check_needed && checked_session == zk_cur_session)
		return;
	if (!zk_session_usable() || inflight + 1 + (int) lengthof(check_dirs) > ACLC_INFLIGHT_MAX)
		return;
	check_needed = false;
	checked_session = zk_cur_session;
	seen_reset();
	zk_worker_enter();
	zk_ctl->acl_problems = 0;
	zk_ctl->acl_problem[0] = '\0';
	zk_worker_leave();
	(void) seen_test(zk_root, true);
	(void) send_read(zk_root);
	for (i = 0; i < (int) lengthof(check_dirs); i++)
	{
		snprintf(path, sizeof(path), "%s/%s", zk_root, check_dirs[i]);
		(void) seen_test(path, true);
		(void) send_read(path);
	}
}

/*
 * A parent this session is about to use (a lock's, a queue's): read its
 * ACL unless it was read in this session already.  Costs a hash lookup;
 * the read goes out beside the request, which never waits for it.
 */
void
zk_acl_check_node(const char *path)
{
	zk_acl_check_turn();		/* the full check comes first */
	if (checked_session != zk_cur_session || !zk_session_usable() ||
		inflight >= ACLC_INFLIGHT_MAX)
		return;
	if (seen_test(path, true))
		return;
	if (!send_read(path))
		seen_forget(path);
}

/* Describe an ACL entry's permissions as cdrwa letters */
static void
perms_text(int perms, char *out)
{
	char	   *p = out;

	if (perms & ZOO_PERM_CREATE)
		*p++ = 'c';
	if (perms & ZOO_PERM_DELETE)
		*p++ = 'd';
	if (perms & ZOO_PERM_READ)
		*p++ = 'r';
	if (perms & ZOO_PERM_WRITE)
		*p++ = 'w';
	if (perms & ZOO_PERM_ADMIN)
		*p++ = 'a';
	*p = '\0';
}

/* A node stays open to others: count it and say so (rate-limited) */
static void
report_open(const char *path, const char *entry, const char *why)
{
	zk_ctl->acl_problems++;
	strlcpy(zk_ctl->acl_problem, path, sizeof(zk_ctl->acl_problem));
	if (zk_log_limited(&open_log, "zookeeper node open to others"))
		ereport(WARNING,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("zklock: zookeeper node \"%s\" lets other clients create or delete under it (ACL entry %s)",
						path, entry),
				 errdetail("%s", why),
				 errhint("Set zklock.acl_repair = on (and reload) to give it the ACL zklock creates nodes with, or set it yourself (kazoo's set_acls, zkCli.sh setAcl); see doc/security.md, \"Nodes found already there\".")));
}

/* Completion of the zoo_aset_acl sent by acl_read_done() */
static void
acl_repair_done(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(AclCall, c, data)
	{
		inflight--;
		if (c->session == zk_cur_session)
		{
			if (rc == ZOK)
			{
				if (zk_log_limited(&repair_log, "zookeeper node acl repaired"))
					ereport(LOG,
							(errmsg("zklock: repaired the ACL of zookeeper node \"%s\", which let other clients create or delete under it",
									c->path),
							 errdetail("zklock.acl_repair is on: the node now has the ACL zklock creates nodes with.")));
			}
			else if (rc == ZBADVERSION)
			{
				/* changed meanwhile: read it again */
				seen_forget(c->path);
				zk_acl_check_node(c->path);
			}
			else if (zk_rc_definite(rc) && rc != ZNONODE)
			{
				char		why[256];

				snprintf(why, sizeof(why),
						 "zklock.acl_repair is on, but ZooKeeper refused to set its ACL: %s.",
						 zerror(rc));
				report_open(c->path, "(not repaired)", why);
			}
		}
		pfree(c);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget_acl sent by send_read() */
static void
acl_read_done(int rc, struct ACL_vector *acl, struct Stat *stat,
			  const void *data)
{
	DATA_COMPLETION_BEGIN(AclCall, c, data)
	{
		char		entry[ZKLOCK_ACL_ID_MAX * 2 + 32];
		bool		open = false;
		int			i;

		inflight--;
		if (c->session != zk_cur_session)
			;					/* an earlier session's: checked again */
		else if (rc == ZNONODE)
			seen_forget(c->path);	/* created with our ACL, or looked at next time */
		else if (rc == ZNOAUTH)
		{
			/* ours would let us read it: another identity's, hiding its ACL */
			report_open(c->path, "(unreadable)",
						"zklock's ZooKeeper identity may not even read the node's ACL, so another identity made it and may create or delete under it; zklock cannot repair it either.");
		}
		else if (rc == ZOK && acl != NULL)
		{
			i = zk_acl_first_foreign(acl, ZOO_PERM_CREATE | ZOO_PERM_DELETE |
									 ZOO_PERM_ADMIN);
			if (i >= 0)
			{
				char		perms[8];

				perms_text(acl->data[i].perms, perms);
				snprintf(entry, sizeof(entry), "%.*s:%.*s:%s",
						 64, acl->data[i].id.scheme,
						 ZKLOCK_ACL_ID_MAX, acl->data[i].id.id, perms);
				open = true;
			}
			if (open && zk_acl_repair && zk_acl_have_own() && stat != NULL)
			{
				struct ACL_vector *want = zk_acl_path(c->path);

				c->repairing = true;
				if (zoo_aset_acl(zk_zh, c->path, stat->aversion, want,
								 acl_repair_done, c) == ZOK)
				{
					inflight++;
					c = NULL;	/* its completion frees it */
				}
				else
					report_open(c->path, entry,
								"zklock.acl_repair is on, but the repair could not be sent.");
			}
			else if (open)
				report_open(c->path, entry,
							zk_acl_repair ?
							"zklock.acl_repair is on, but the worker has no ZooKeeper identity to give the node (zklock.auth_file and zklock.acl are empty)." :
							"Whoever holds that permission can delete a lock holder's node or a queue's item under it, or create nodes that others take for zklock's.");
		}
		if (c != NULL)
			pfree(c);
	}
	NONE_COMPLETION_END;
}
