/*-------------------------------------------------------------------------
 *
 * nsclaim.c
 *	  The registry of namespace claims (issue 35): which database of this
 *	  cluster a recorded namespace belongs to, kept in ZooKeeper where no
 *	  tenant can choose around it.  Worker half (the ZKK_NSCLAIM kind),
 *	  backend half (the check before a call uses the namespace) and the
 *	  superuser's SQL function zk_namespace_claim.
 *
 *	  A database's namespace recorded in zk_database_namespace (names.c)
 *	  is a name, and names can be chosen: a role with CREATEDB renames its
 *	  database and creates a new one with the old name, into which a
 *	  superuser installs zklock, which records the same name.  A check
 *	  inside one database cannot see the other databases' records; the
 *	  registry can.  Layout:
 *
 *		<root>/namespaces/<encoded namespace>@<system identifier>
 *			{"v":1,"datoids":"16384,16390","datname":"etl","mac":"<hex>"}
 *
 *	  One persistent node per namespace and cluster, created with zklock's
 *	  private ACL: "datoids" are the databases of this cluster (by OID)
 *	  that may use the namespace, "datname" the name of the database that
 *	  wrote it last (for people), "mac" the cluster key's MAC over path and
 *	  content (trust.c).  Other clusters' claims of the same namespace are
 *	  other nodes: same-named databases of different clusters share their
 *	  namespace by design.
 *
 *	  ZKN_CLAIM (a backend's first call that uses a recorded namespace)
 *		reads the node: absent, create it with this database alone;
 *		there and naming this database, the namespace is this database's
 *		(GRANTED); there without it, another database of this cluster has
 *		it (BUSY, token = that database's OID).
 *	  ZKN_JOIN (zk_set_database_namespace with a name: a superuser shares
 *		the namespace on purpose) adds this database to the node.
 *	  ZKN_TAKEOVER (zk_set_database_namespace(..., takeover => true))
 *		makes this database the only one, replacing a node it cannot
 *		trust (one multi: delete at the version read, create).
 *
 *	  A node is trusted only when its MAC verifies with this cluster's key
 *	  and neither it nor <root>/namespaces lets another identity write,
 *	  create, delete or change its ACL (the ACL zklock creates with is
 *	  ours: world:anyone without credentials).  An untrusted node is a
 *	  rate-limited WARNING and answers BUSY with token 0 (errmsg says why):
 *	  the call fails, nothing is trusted or overwritten but by a takeover.
 *
 *	  The answers are kept in a bounded table in shared memory (NSC_SLOTS
 *	  rows of database, namespace, verdict; round robin when full, emptied
 *	  when a worker starts or a session ends), so a backend's first call
 *	  costs a round trip only when the table does not know the answer yet,
 *	  and its later calls nothing (names.c remembers the verdict).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "recipe.h"
#include "trust.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#define NSC_SLOTS		128		/* verdicts remembered in shared memory */
#define NSC_OIDS_MAX	16		/* databases of one cluster in one namespace */
#define NSC_DATA_MAX	1024	/* bytes of a claim node we accept */
#define NSC_ROUNDS_MAX	5		/* reads of one request (races with others) */

/* the steps of a ZKK_NSCLAIM entry (ZkEntry.step.nsclaim) */
typedef enum ZkNsClaimOp
{
	ZKN_CLAIM = 0,
	ZKN_JOIN,
	ZKN_TAKEOVER
} ZkNsClaimOp;

typedef enum NscVerdict
{
	NSC_EMPTY = 0,
	NSC_OURS,
	NSC_FOREIGN
} NscVerdict;

typedef struct NscSlot
{
	Oid			dboid;
	Oid			owner;			/* NSC_FOREIGN: the database that has it */
	uint8		verdict;		/* NscVerdict */
	char		ns[ZKLOCK_NS_MAX + 1];
} NscSlot;

/* in shared memory, under zk_ctl->lock */
typedef struct NscCache
{
	int			next_victim;
	NscSlot		slots[NSC_SLOTS];
} NscCache;

static NscCache *nsc_cache = NULL;

/* a request in flight: the three reads, or a write */
typedef struct NscCall
{
	const void *ectx;			/* its entry (zk_ctx_of; zk_entry_of) */
	int			refs;			/* completions still to come */
	bool		parent_ok;		/* <root>/namespaces lets no one else in */
	bool		node_ok;		/* the node lets no one else write */
	char		why[ZKLOCK_ERRMSG_MAX];	/* what is not trusted */
	zoo_op_t	ops[2];
	zoo_op_result_t res[2];
	char		path[ZK_PATH_MAX];
	char		data[NSC_DATA_MAX];
} NscCall;

static MemoryContext nsc_cxt = NULL;
static ZkLogLimit untrusted_log;

/* ---- shared memory ---- */

/* The table's size (settings.c's shmem_request_hook) */
Size
zk_nsclaim_shmem_size(void)
{
	return MAXALIGN(sizeof(NscCache));
}

/* Attach to (and the first time empty) the table (shmem_startup_hook) */
void
zk_nsclaim_shmem_init(void)
{
	bool		found;

	nsc_cache = ShmemInitStruct("zklock namespace claims", sizeof(NscCache), &found);
	if (!found)
		memset(nsc_cache, 0, sizeof(NscCache));
}

/* The slot of (dboid, ns), or NULL; lock held */
static NscSlot *
cache_find(Oid dboid, const char *ns)
{
	int			i;

	if (nsc_cache == NULL)
		return NULL;
	for (i = 0; i < NSC_SLOTS; i++)
	{
		NscSlot    *s = &nsc_cache->slots[i];

		if (s->verdict != NSC_EMPTY && s->dboid == dboid && strcmp(s->ns, ns) == 0)
			return s;
	}
	return NULL;
}

/*
 * Remember a verdict (worker, lock held).  A database that now has the
 * namespace alone (a takeover) makes every other verdict about it stale:
 * they are forgotten and read again.
 */
static void
cache_put(Oid dboid, const char *ns, NscVerdict v, Oid owner, bool alone)
{
	NscSlot    *s;
	int			i;

	if (nsc_cache == NULL)
		return;
	if (alone)
		for (i = 0; i < NSC_SLOTS; i++)
			if (nsc_cache->slots[i].verdict != NSC_EMPTY &&
				strcmp(nsc_cache->slots[i].ns, ns) == 0)
				nsc_cache->slots[i].verdict = NSC_EMPTY;
	s = cache_find(dboid, ns);
	if (s == NULL)
	{
		for (i = 0; i < NSC_SLOTS && s == NULL; i++)
			if (nsc_cache->slots[i].verdict == NSC_EMPTY)
				s = &nsc_cache->slots[i];
		if (s == NULL)
		{
			s = &nsc_cache->slots[nsc_cache->next_victim];
			nsc_cache->next_victim = (nsc_cache->next_victim + 1) % NSC_SLOTS;
		}
	}
	s->dboid = dboid;
	s->owner = owner;
	strlcpy(s->ns, ns, sizeof(s->ns));
	s->verdict = v;
}

/* Forget every verdict (worker start, session end) */
static void
cache_clear(void)
{
	if (nsc_cache == NULL)
		return;
	zk_worker_enter();
	memset(nsc_cache, 0, sizeof(NscCache));
	zk_worker_leave();
}

/* ---- the node ---- */

/* <root>/namespaces/<encoded ns>@<sysid> */
static void
claim_path(const char *ns, char *out, size_t outlen)
{
	char		ename[ZKLOCK_ENAME_MAX + 1];

	zk_encode_name(ns, strlen(ns), ename);
	snprintf(out, outlen, "%s/namespaces/%s@" UINT64_FORMAT, zk_root, ename,
			 GetSystemIdentifier());
}

/* The signed data of a claim naming oids[0..n-1], written for datname */
static void
claim_data(const char *path, const Oid *oids, int n, const char *datname,
		   char *out, size_t outlen)
{
	char		body[NSC_DATA_MAX];
	char		name[NAMEDATALEN];
	int			len;
	int			i;

	/* the name is for people: printable ASCII, no quotes or backslashes */
	for (i = 0; datname[i] && i < NAMEDATALEN - 1; i++)
		name[i] = (datname[i] >= 0x20 && datname[i] < 0x7f &&
				   datname[i] != '"' && datname[i] != '\\') ? datname[i] : '?';
	name[i] = '\0';
	len = snprintf(body, sizeof(body), "{\"v\":1,\"datoids\":\"");
	for (i = 0; i < n; i++)
		len += snprintf(body + len, sizeof(body) - len, "%s%u", i ? "," : "", oids[i]);
	snprintf(body + len, sizeof(body) - len, "\",\"datname\":\"%s\"}", name);
	zk_claim_sign(path, body, out, outlen);
}

/*
 * The databases a claim's data names, into oids (at most NSC_OIDS_MAX);
 * -1 when it is not a claim of ours (after its MAC was checked)
 */
static int
claim_parse(const char *value, int len, Oid *oids)
{
	char		buf[NSC_OIDS_MAX * 11 + 1];
	char		v[8];
	char	   *p;
	int			n = 0;

	if (!zk_json_field(value, len, "v", v, sizeof(v)) || strcmp(v, "1") != 0 ||
		!zk_json_field(value, len, "datoids", buf, sizeof(buf)))
		return -1;
	p = buf;
	while (*p)
	{
		char	   *end;
		unsigned long o;

		if (n >= NSC_OIDS_MAX || !isdigit((unsigned char) *p))
			return -1;
		errno = 0;
		o = strtoul(p, &end, 10);
		if (errno != 0 || o == 0 || o > PG_UINT32_MAX || (*end != ',' && *end != '\0'))
			return -1;
		oids[n++] = (Oid) o;
		p = (*end == ',') ? end + 1 : end;
	}
	return n > 0 ? n : -1;
}

/* Does an ACL let an identity other than ours do any of perms? */
static bool
acl_lets_others(const struct ACL_vector *acl, int perms, char *why, size_t whylen,
				const char *what)
{
	int			i = zk_acl_first_foreign(acl, perms);

	if (i < 0)
		return false;
	snprintf(why, whylen, "the ACL of %s lets %.32s:%.64s change it", what,
			 acl->data[i].id.scheme, acl->data[i].id.id);
	return true;
}

/* ---- the worker half ---- */

/* The memory context of the requests in flight */
static MemoryContext
nsc_context(void)
{
	return ZK_LAZY_CONTEXT(nsc_cxt, "zklock namespace claims", ALLOCSET_SMALL_SIZES);
}

/* One completion of a call is done: free it after the last */
static void
call_unref(NscCall *c)
{
	if (--c->refs <= 0)
		pfree(c);
}

/* The namespace is this database's: remember it, answer GRANTED */
static void
answer_ours(ZkEntry *e, bool alone)
{
	cache_put(e->dbid, e->name, NSC_OURS, InvalidOid, alone);
	e->state = ZKE_DONE;
	zk_finish(e, ZKO_GRANTED, 0, NULL);
}

/* Another database of this cluster has it: remember, answer BUSY */
static void
answer_foreign(ZkEntry *e, Oid owner)
{
	cache_put(e->dbid, e->name, NSC_FOREIGN, owner, false);
	e->token = owner;
	e->state = ZKE_DONE;
	zk_finish(e, ZKO_BUSY, 0, NULL);
}

/* A node we cannot trust: WARNING (rate-limited), answer BUSY, token 0 */
static void
answer_untrusted(ZkEntry *e, const char *path, const char *why)
{
	char		msg[ZKLOCK_ERRMSG_MAX];

	if (zk_log_limited(&untrusted_log, "untrusted namespace claims"))
		ereport(WARNING,
				(errmsg("zklock does not trust the namespace claim %s", path),
				 errdetail("%s.", why),
				 errhint("Another ZooKeeper client wrote it, or this cluster's key ($PGDATA/zklock.key) changed; "
						 "a superuser replaces it with zk_set_database_namespace(namespace, takeover => true), "
						 "or sets zklock.acl_repair for an ACL.")));
	snprintf(msg, sizeof(msg), "%s", why);
	e->token = 0;
	e->state = ZKE_DONE;
	zk_finish(e, ZKO_BUSY, 0, msg);
}

/* Read again (a race with another writer, a lost reply), a few times */
static void
read_again(ZkEntry *e)
{
	if (++e->outstanding > NSC_ROUNDS_MAX)
		zk_fail(e, ERRCODE_INTERNAL_ERROR,
				"the namespace claim kept changing while it was read");
	else
		zk_retry_later(e);
}

/* Completion of a create, set or multi: done, or read again */
static void
write_done(int rc, const void *data)
{
	NscCall    *c = (NscCall *) data;

	ENTRY_COMPLETION_BEGIN(e, c->ectx)
	{
		char		refused[ZKLOCK_PARENT_MAX + 1];

		if (e != NULL && e->create_inflight)
		{
			e->create_inflight = false;
			if (e->released)
				zk_entry_free(e);
			else if (rc == ZOK)
				answer_ours(e, e->step.nsclaim != ZKN_JOIN);
			else if (!zk_rc_definite(rc) || rc == ZNODEEXISTS || rc == ZBADVERSION ||
					 (rc == ZNONODE && !zk_parent_refused(c->path, refused, sizeof(refused))))
				read_again(e);	/* what is there now decides */
			else
				zk_fail_rc(e, rc, c->path, ERRCODE_CONNECTION_FAILURE, zerror(rc));
		}
		call_unref(c);
	}
	COMPLETION_END(e);
}

/*
 * The verdict of call c's read of an ACL (rc, acl), into *ok: refused when
 * it lets others than zklock do perms (c->why says so, naming it what), or
 * when zklock may not read it (c->why is noauth); else (absent: we create
 * it; errors: the get says) passed
 */
static void
acl_verdict(NscCall *c, bool *ok, int rc, struct ACL_vector *acl, int perms,
			const char *what, const char *noauth)
{
	if (rc == ZOK)
		*ok = !acl_lets_others(acl, perms, c->why, sizeof(c->why), what);
	else if (rc == ZNOAUTH)
	{
		*ok = false;
		snprintf(c->why, sizeof(c->why), "%s", noauth);
	}
	else
		*ok = true;
}

/* Completion of the ACL read of <root>/namespaces */
static void
parent_acl_done(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data)
{
	ZkEntry    *volatile none = NULL;
	NscCall    *c = (NscCall *) data;

	COMPLETION_BEGIN
	{
		acl_verdict(c, &c->parent_ok, rc, acl,
					ZOO_PERM_CREATE | ZOO_PERM_DELETE | ZOO_PERM_ADMIN,
					"the registry's node <root>/namespaces",
					"zklock may not read the ACL of <root>/namespaces: another identity made it");
		call_unref(c);
	}
	COMPLETION_END(none);
}

/* Completion of the claim node's ACL read */
static void
node_acl_done(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data)
{
	ZkEntry    *volatile none = NULL;
	NscCall    *c = (NscCall *) data;

	COMPLETION_BEGIN
	{
		acl_verdict(c, &c->node_ok, rc, acl, ZOO_PERM_WRITE | ZOO_PERM_ADMIN,
					"the node",
					"zklock may not read the node's ACL: another identity made it");
		call_unref(c);
	}
	COMPLETION_END(none);
}

/* Send the nops writes of c (a fresh call for entry e) in one multi */
static void
send_write(ZkEntry *e, NscCall *c, int nops)
{
	int			rc;

	c->refs = 1;
	rc = zoo_amulti(zk_zh, nops, c->ops, c->res, write_done, c);
	if (rc == ZOK)
		e->create_inflight = true;
	else
	{
		pfree(c);
		(void) zk_send_failed(e, rc, "namespace claim");
	}
}

/* A new call for entry e at path */
static NscCall *
new_call(ZkEntry *e, const char *path)
{
	NscCall    *c = MemoryContextAllocZero(nsc_context(), sizeof(NscCall));

	c->ectx = zk_ctx_of(e);
	strlcpy(c->path, path, sizeof(c->path));
	return c;
}

/*
 * Completion of the claim node's read (after both ACL reads): decide, and
 * send the write if one is needed
 */
static void
read_done(int rc, const char *value, int value_len, const struct Stat *stat,
		  const void *data)
{
	NscCall    *c = (NscCall *) data;

	ENTRY_COMPLETION_BEGIN(e, c->ectx)
	{
		if (e != NULL && e->list_inflight)
		{
			int			op = e->step.nsclaim;
			Oid			oids[NSC_OIDS_MAX + 1];
			int			n = -1;
			bool		trusted = c->parent_ok;
			char		datname[NAMEDATALEN];

			e->list_inflight = false;
			strlcpy(datname, e->data, sizeof(datname));
			if (rc == ZOK && trusted)
			{
				trusted = c->node_ok;
				if (trusted && (value == NULL || value_len <= 0 || value_len > NSC_DATA_MAX ||
								zk_claim_verify(c->path, value, value_len) != ZKM_VERIFIED))
				{
					trusted = false;
					snprintf(c->why, sizeof(c->why),
							 "its data do not carry this cluster's MAC: zklock did not write it");
				}
				if (trusted && (n = claim_parse(value, value_len, oids)) < 0)
				{
					trusted = false;
					snprintf(c->why, sizeof(c->why), "its data are not a namespace claim of zklock's");
				}
			}

			if (e->released)
				zk_entry_free(e);
			else if (rc != ZOK && rc != ZNONODE)
			{
				if (!zk_rc_definite(rc))
					zk_retry_later(e);
				else
					zk_fail_rc(e, rc, c->path, ERRCODE_CONNECTION_FAILURE, zerror(rc));
			}
			else if (!trusted && op != ZKN_TAKEOVER)
				answer_untrusted(e, c->path, c->why);
			else if (rc == ZNONODE)
			{
				/* nobody has it: this database, alone */
				NscCall    *w = new_call(e, c->path);
				char		parent[ZK_PATH_MAX];

				claim_data(c->path, &e->dbid, 1, datname, w->data, sizeof(w->data));
				snprintf(parent, sizeof(parent), "%s/namespaces", zk_root);
				zk_create_parent(zk_root, 0);
				zk_create_parent(parent, 0);
				zoo_create_op_init(&w->ops[0], w->path, w->data, (int) strlen(w->data),
								   zk_acl(), 0, NULL, 0);
				send_write(e, w, 1);
			}
			else if (!trusted)
			{
				/* a takeover replaces what it cannot trust, ACL included */
				NscCall    *w = new_call(e, c->path);

				claim_data(c->path, &e->dbid, 1, datname, w->data, sizeof(w->data));
				zoo_delete_op_init(&w->ops[0], w->path, stat->version);
				zoo_create_op_init(&w->ops[1], w->path, w->data, (int) strlen(w->data),
								   zk_acl(), 0, NULL, 0);
				send_write(e, w, 2);
			}
			else
			{
				bool		in = false;
				int			i;

				for (i = 0; i < n; i++)
					if (oids[i] == e->dbid)
						in = true;
				if (in && (op != ZKN_TAKEOVER || n == 1))
					answer_ours(e, op == ZKN_TAKEOVER);
				else if (op == ZKN_CLAIM)
					answer_foreign(e, oids[0]);
				else if (op == ZKN_JOIN && n >= NSC_OIDS_MAX)
					zk_fail(e, ERRCODE_PROGRAM_LIMIT_EXCEEDED,
							"at most 16 databases of one cluster share a recorded namespace");
				else
				{
					NscCall    *w = new_call(e, c->path);

					if (op == ZKN_JOIN)
						oids[n++] = e->dbid;
					else
					{
						oids[0] = e->dbid;
						n = 1;
					}
					claim_data(c->path, oids, n, datname, w->data, sizeof(w->data));
					zoo_set_op_init(&w->ops[0], w->path, w->data, (int) strlen(w->data),
									stat->version, NULL);
					send_write(e, w, 1);
				}
			}
		}
		call_unref(c);
	}
	COMPLETION_END(e);
}

/* Drive a claim entry: send its reads, or free it once let go */
static void
nsc_drive(ZkEntry *e)
{
	NscCall    *c;
	char		path[ZK_PATH_MAX];
	char		parent[ZK_PATH_MAX];
	int			rc;

	if (!zk_drive_opening(e, e->list_inflight || e->create_inflight))
		return;
	claim_path(e->name, path, sizeof(path));
	snprintf(parent, sizeof(parent), "%s/namespaces", zk_root);
	c = new_call(e, path);
	c->refs = 3;
	c->parent_ok = true;
	c->node_ok = true;
	/* answered in order: both ACLs are known when the data arrive */
	rc = zoo_aget_acl(zk_zh, parent, parent_acl_done, c);
	if (rc == ZOK)
		rc = zoo_aget_acl(zk_zh, path, node_acl_done, c);
	else
		c->refs--;
	if (rc == ZOK)
		rc = zoo_aget(zk_zh, path, 0, read_done, c);
	else
		c->refs--;
	if (rc == ZOK)
		e->list_inflight = true;
	else
	{
		if (--c->refs <= 0)
			pfree(c);
		(void) zk_send_failed(e, rc, "namespace claim read");
	}
}

/* An error while driving: fail the request, or free it once let go */
static void
nsc_drive_failed(ZkEntry *e)
{
	e->list_inflight = false;
	e->create_inflight = false;
	if (e->released)
		zk_entry_free(e);
	else if (e->outcome == ZKO_NONE)
		zk_fail(e, ERRCODE_INTERNAL_ERROR,
				"the zklock worker failed while checking a namespace claim");
}

/* The session ended: what was in flight is read again in the next one */
static void
nsc_session_lost(ZkEntry *e, const char *why)
{
	e->list_inflight = false;
	e->create_inflight = false;
	if (e->released)
		zk_entry_free(e);
	else if (e->outcome == ZKO_NONE)
		zk_retry_later(e);
}

/* worker start, session end: verdicts are read again */
static void
nsc_forget(void)
{
	cache_clear();
}

const ZkRecipe zk_nsclaim_recipe = {
	.worker_start = nsc_forget,
	.session_reset = nsc_forget,
};

const ZkKindOps zk_nsclaim_ops =
	ZK_KIND_OPS(nsc_drive, nsc_drive_failed, nsc_session_lost);

/* ---- the backend half ---- */

static uint32 req_idx = ZKLOCK_NO_ENTRY;
static uint32 req_gen = 0;

/* Let go of the request in progress */
static void
let_go(void)
{
	zk_let_go(&req_idx, req_gen);
}

/* at exit: the request in progress */
static void
nsc_at_exit(void)
{
	let_go();
}

const ZkRecipeBackend zk_nsclaim_backend = {
	.at_exit = nsc_at_exit,
};

/*
 * Ask the worker: op for namespace ns (UTF-8) and this database.  Returns
 * the outcome (GRANTED or BUSY) with *owner (BUSY: the database that has
 * it, 0 for a node not trusted, why in *why).
 */
static int
ask_worker(const char *ns, ZkNsClaimOp op, Oid *owner, char *why, size_t whylen)
{
	ZkEntry    *e;
	int			outcome;
	char	   *dbname = get_database_name(MyDatabaseId);
	char	   *what = psprintf(op == ZKN_CLAIM ? "check the claim of namespace \"%s\"" :
							op == ZKN_JOIN ? "add this database to the claim of namespace \"%s\"" :
							"take namespace \"%s\" over for this database", ns);

	let_go();
	zk_next_entry_unqualified = true;
	e = zk_new_entry(ZKK_NSCLAIM, ns, strlen(ns), ZKM_EXCLUSIVE, ZKS_TRANSACTION, false);
	e->step.nsclaim = op;
	strlcpy(e->data, dbname ? dbname : "?", sizeof(e->data));
	zk_submit_entry(e, &req_idx, &req_gen);

	PG_TRY();
	{
		outcome = zk_wait_outcome(req_idx, -1, zk_connect_timeout, what);
	}
	PG_CATCH();
	{
		let_go();
		PG_RE_THROW();
	}
	PG_END_TRY();
	zk_backend_lock(LW_SHARED);
	e = zk_entry(req_idx);
	*owner = (Oid) e->token;
	strlcpy(why, e->errmsg, whylen);
	LWLockRelease(zk_ctl->lock);
	let_go();
	return outcome;
}

/* SELECT <schema>.zk_set_database_namespace, with zklock's schema */
static char *
set_call(void)
{
	Oid			nsp = zk_extension_schema(NULL);
	char	   *schema = OidIsValid(nsp) ? get_namespace_name(nsp) : NULL;

	return psprintf("%s%szk_set_database_namespace",
					schema ? quote_identifier(schema) : "", schema ? "." : "");
}

/* Raise the refusal: another database has ns (owner), or it is untrusted */
static void
refuse(const char *ns, Oid owner, const char *why)
{
	char	   *shown = zk_utf8_to_server_noerror(ns, strlen(ns));
	char	   *fn = set_call();
	char		path[ZK_PATH_MAX];

	claim_path(ns, path, sizeof(path));
	if (owner == InvalidOid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock does not trust the claim of namespace \"%s\" in zookeeper", shown),
				 errdetail("The node %s: %s.", path, why),
				 errhint("A superuser looks into who wrote it, then replaces it with SELECT %s('%s', takeover => true) "
						 "(or chooses another namespace with SELECT %s('name')).", fn, shown, fn)));
	else
	{
		char	   *owner_name = get_database_name(owner);
		char	   *mine = get_database_name(MyDatabaseId);

		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("namespace \"%s\" belongs to another database of this cluster", shown),
				 owner_name ?
				 errdetail("zklock's registry (%s) gives namespace \"%s\" to the database with OID %u (now named \"%s\"); "
						   "this database (\"%s\", OID %u) only recorded the same name.",
						   path, shown, owner, owner_name, mine ? mine : "?", MyDatabaseId) :
				 errdetail("zklock's registry (%s) gives namespace \"%s\" to the database with OID %u, which no longer exists (dropped); "
						   "this database (\"%s\", OID %u) only recorded the same name.",
						   path, shown, owner, mine ? mine : "?", MyDatabaseId),
				 errhint("A superuser chooses another namespace for this database with SELECT %s('name'), "
						 "shares this one on purpose with SELECT %s('%s'), "
						 "or takes it over (a dropped database's) with SELECT %s('%s', takeover => true).",
						 fn, fn, shown, fn, shown)));
	}
}

/* What the table in shared memory says of ns for this database (and who has it) */
static int
cached_verdict(const char *ns, Oid *owner)
{
	NscSlot    *s;
	int			verdict = NSC_EMPTY;

	zk_backend_lock(LW_SHARED);
	s = cache_find(MyDatabaseId, ns);
	if (s != NULL)
	{
		verdict = s->verdict;
		*owner = s->owner;
	}
	LWLockRelease(zk_ctl->lock);
	return verdict;
}

/*
 * Before a call uses namespace ns (UTF-8), recorded for this database in
 * zk_database_namespace: is it this database's?  The table in shared
 * memory answers, else the worker (one round trip).  Raises 55000 when
 * another database of this cluster has it or its claim cannot be trusted;
 * returns when it is this database's (names.c then remembers it).
 */
void
zk_namespace_verify(const char *ns)
{
	int			verdict;
	Oid			owner = InvalidOid;
	char		why[ZKLOCK_ERRMSG_MAX];

	if (zk_ctl == NULL || nsc_cache == NULL)
		return;					/* not preloaded: the call itself fails */
	verdict = cached_verdict(ns, &owner);
	if (verdict == NSC_OURS)
		return;
	if (verdict == NSC_FOREIGN)
		refuse(ns, owner, "");
	if (ask_worker(ns, ZKN_CLAIM, &owner, why, sizeof(why)) == ZKO_GRANTED)
		return;
	refuse(ns, owner, why);
}

/*
 * Before a call uses namespace ns (UTF-8), set for this database by ALTER
 * DATABASE ... SET zklock.namespace: this database joins its claim (the
 * table in shared memory answers once it has), so that a database whose
 * recorded namespace ("$database") is the same name is refused with 55000
 * (zk_namespace_verify).  Two databases set to one namespace share it.  A
 * claim that cannot be trusted is a WARNING: the superuser's setting
 * stands, but the registry does not protect it until a takeover.
 */
void
zk_namespace_join_configured(const char *ns)
{
	Oid			owner = InvalidOid;
	char		why[ZKLOCK_ERRMSG_MAX];

	if (zk_ctl == NULL || nsc_cache == NULL)
		return;					/* not preloaded: the call itself fails */
	if (cached_verdict(ns, &owner) == NSC_OURS)
		return;
	if (ask_worker(ns, ZKN_JOIN, &owner, why, sizeof(why)) != ZKO_GRANTED)
	{
		char	   *shown = zk_utf8_to_server_noerror(ns, strlen(ns));
		char		path[ZK_PATH_MAX];

		claim_path(ns, path, sizeof(path));
		ereport(WARNING,
				(errmsg("zklock could not enter namespace \"%s\" in its registry of claims for this database", shown),
				 errdetail("The node %s: %s.", path, why),
				 errhint("A superuser looks into who wrote it, then replaces it with SELECT %s('%s', takeover => true).",
						 set_call(), shown)));
	}
}

PG_FUNCTION_INFO_V1(zk_namespace_claim);

/*
 * zk_namespace_claim(namespace text, takeover boolean) RETURNS void:
 * zk_set_database_namespace's write into the registry (superusers only).
 * Without takeover this database joins the namespace's claim (a superuser
 * shares the namespace on purpose); with it, it becomes the only one.
 */
Datum
zk_namespace_claim(PG_FUNCTION_ARGS)
{
	char	   *ns = text_to_cstring(PG_GETARG_TEXT_PP(0));
	bool		takeover = PG_GETARG_BOOL(1);
	char	   *u;
	Oid			owner = InvalidOid;
	char		why[ZKLOCK_ERRMSG_MAX];

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to claim a zklock namespace"),
				 errhint("Run it as a superuser.")));
	zk_require_shmem();
	u = pg_server_to_any(ns, strlen(ns), PG_UTF8);
	if (u[0] == '\0' || strlen(u) > ZKLOCK_NS_MAX || strchr(u, ZKLOCK_NS_MARK) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock namespace \"%s\" cannot be claimed", ns),
				 errhint("Give a name of 1 to %d bytes in UTF-8.", ZKLOCK_NS_MAX)));
	if (ask_worker(u, takeover ? ZKN_TAKEOVER : ZKN_JOIN, &owner, why, sizeof(why)) != ZKO_GRANTED)
		refuse(u, owner, why);
	PG_RETURN_VOID();
}
