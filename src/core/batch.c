/*-------------------------------------------------------------------------
 *
 * batch.c
 *	  Group commit for ZooKeeper: the worker gathers the creates and
 *	  deletes (lock nodes, semaphore leases, barrier members) and multis
 *	  (queue publications, claims, consumes) of every backend into
 *	  multi-ops.
 *
 *	  PostgreSQL's group commit turns many commits into one WAL flush; the
 *	  worker, which sees every backend's requests, turns many backends'
 *	  writes into one ZooKeeper multi: one packet, one transaction in
 *	  ZooKeeper's log, one answer.  No ZooKeeper client library can do
 *	  that, since each serves one application process.
 *
 *	  When the writes go:
 *
 *	  - A write is appended to the pending list.  The list is sent at the
 *		end of the worker's turn (zk_batch_pump), so everything the turn
 *		served goes together, and a lone request on an idle cluster goes at
 *		once, on its own, exactly as before: nothing waits for company.
 *	  - While a send with creates that gathered several writes is
 *		unanswered, or zklock.batch_inflight sends (2) of one write each,
 *		what arrives is held until one is answered (the next group forms
 *		while the last one is being written), unless zklock.batch_max writes
 *		are already waiting.  What was held then goes, all of it, in as many
 *		sends as it takes.  A second lone write goes at once, not behind the
 *		first: ZooKeeper writes what reaches it during a log flush in the
 *		next flush, so it costs no wait of its own, while holding it costs
 *		the first's whole round trip -- with one producer and one consumer
 *		each one's COMMIT waited for the other's write before its own was
 *		sent (issue 40).  Many sessions still gather: a multi in flight holds
 *		what comes.  Sends of deletes alone do not hold anything back:
 *		nobody waits for them (a COMMIT does not wait for its lock's
 *		delete), so one session's next create follows its last delete at
 *		once, as before.
 *	  - A send is a multi of at most zklock.batch_max writes and
 *		BATCH_MAX_BYTES of paths and data (ZooKeeper refuses packets over
 *		its jute.maxbuffer, 1 MB by default); a send of one write is the
 *		plain request.  zklock.batch_max = 1 sends every write on its own.
 *
 *	  Order: ZooKeeper answers one session's requests in the order sent.
 *	  Writes keep their order (a multi's operations are applied in order).
 *	  A read that must see the writes before it (the lock's listing behind
 *	  its create, a claim's read of its item, a barrier member's watch on
 *	  "ready" behind its create) is put in the same list and sent right
 *	  behind the send that carries them; it then sees them, and possibly
 *	  writes queued after it, which is what it would have seen had it been
 *	  sent a moment later.
 *
 *	  The fencing token: a multi's creates answer with their path only
 *	  (the C client has no create2 in a multi), but every operation of a
 *	  multi is one ZooKeeper transaction, with one zxid, which is the czxid
 *	  of every node it creates.  A multi with creates therefore begins with
 *	  a setData of this cluster's stamp node, <root>/stamps/<sysid>, whose
 *	  answer's mzxid is that zxid.  A stamp node that is missing is made
 *	  again; one ZooKeeper refuses (an ACL) makes creates go on their own
 *	  for a minute, and is then tried again.
 *
 *	  A multi fails as a whole.  The operation that failed (ZooKeeper
 *	  answers it with its error, those before it with ZOK, those after with
 *	  ZRUNTIMEINCONSISTENCY) fails its own request; the other writes are
 *	  sent again, each on its own.  Their reads went out behind the failed
 *	  multi and saw none of it: the recipe must take a read that arrives
 *	  before its write's answer as no verdict (the lock does: the create's
 *	  answer decides, and lists again).  An answer that is not ZooKeeper's
 *	  own (connection lost, closing) goes to every request of the multi, as
 *	  the library would have given it to each.
 *
 *	  The session: writes held while the connection is down are sent once
 *	  it is usable again (the recipes think them in flight, and the library
 *	  would have queued them too); when the session ends, what is held is
 *	  answered ZCLOSING once the handle is closed, just after the library
 *	  answered what was in flight the same way (zk_batch_session_closed).
 *
 *	  Everything here runs in the worker with zk_ctl->lock held; the
 *	  completions take it themselves, and the requests' own completions are
 *	  called from them (each catches its own errors).
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "batch.h"
#include "trust.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "access/xlog.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* zklock.batch_max */
int			zk_batch_max = 64;
/* zklock.batch_inflight: waited-for sends in flight before gathering */
int			zk_batch_inflight = 2;


/* paths and data in one multi, well under ZooKeeper's 1 MB packet */
#define BATCH_MAX_BYTES		(256 * 1024)

typedef enum BatchKind
{
	BI_CREATE,
	BI_DELETE,
	BI_MULTI,					/* a recipe's own multi, kept atomic */
	BI_LIST,					/* a read: sent behind the writes before it */
	BI_GET,						/* ... of a node's data */
	BI_WEXISTS					/* ... an exists that sets a watch */
} BatchKind;

#define BI_IS_READ(k)	((k) == BI_LIST || (k) == BI_GET || (k) == BI_WEXISTS)

/* A request handed to the batch, until it is sent */
typedef struct BatchItem
{
	struct BatchItem *next;
	BatchKind	kind;
	const void *ctx;			/* the request's own completion context */
	string_stat_completion_t create_done;
	void_completion_t delete_done;
	strings_completion_t list_done;
	data_completion_t get_done;
	stat_completion_t exists_done;
	watcher_fn	watcher;		/* an exists' watch and its context */
	void	   *watcher_ctx;
	void_completion_t multi_done;
	int			nops;			/* a multi's operations and results (the */
	zoo_op_t   *ops;			/* recipe's: they live until its answer) */
	zoo_op_result_t *res;
	int			first_op;		/* where its operations sit in a send */
	int			flags;			/* a create's mode */
	bool		sibling;		/* a create that may share a multi with
								 * creates under its parent */
	int			version;		/* a delete's expected version */
	int			datalen;		/* a create's data, -1 for none */
	char	   *data;
	char		created[ZK_PATH_MAX];	/* a multi's create answers here */
	char		path[FLEXIBLE_ARRAY_MEMBER];
} BatchItem;

/* One send in flight: a multi of n writes, or one write on its own */
typedef struct BatchSend
{
	int			n;
	bool		stamped;		/* ops[0] is the stamp's setData */
	bool		waited;			/* counted in inflight_waited */
	int			counted;		/* its writes, as inflight_waited_writes has them */
	BatchItem **items;
	zoo_op_t   *ops;
	zoo_op_result_t *res;
	struct Stat stamp;
} BatchSend;

/* The stamp node, as this session found it */
typedef enum StampState
{
	STAMP_UNKNOWN,				/* asked for at connect, assumed there */
	STAMP_REFUSED				/* ZooKeeper refused it: creates go alone for
								 * STAMP_RETRY_MS */
} StampState;

static MemoryContext batch_cxt = NULL;
static BatchItem *pending_head = NULL;
static BatchItem *pending_tail = NULL;
static int	pending_writes = 0;
static int	inflight = 0;		/* sends unanswered */
static int	inflight_waited = 0;	/* those a backend waits for */
static int	inflight_waited_writes = 0; /* the writes these carry */
static StampState stamp_state = STAMP_UNKNOWN;
static TimestampTz stamp_refused_at = 0;

/* a refused stamp is tried again after this long (an ACL may be fixed) */
#define STAMP_RETRY_MS		60000

static void send_items(BatchItem *first, int nwrites);
static void send_alone(BatchItem *it);

/* The batch's memory, made on first use */
static MemoryContext
batch_context(void)
{
	return ZK_LAZY_CONTEXT(batch_cxt, "zklock batch", ALLOCSET_SMALL_SIZES);
}

/* This cluster's stamp node: <root>/stamps/<system identifier> */
static void
stamp_path(char *buf, size_t len)
{
	snprintf(buf, len, "%s/stamps/" UINT64_FORMAT, zk_root, GetSystemIdentifier());
}

/* A new item for path, zeroed but for its path and kind */
static BatchItem *
item_new(BatchKind kind, const char *path, const void *ctx)
{
	size_t		plen = strlen(path);
	BatchItem  *it = MemoryContextAllocZero(batch_context(),
											offsetof(BatchItem, path) + plen + 1);

	memcpy(it->path, path, plen + 1);
	it->kind = kind;
	it->ctx = ctx;
	it->datalen = -1;
	return it;
}

/* Append it to the pending list */
static void
item_append(BatchItem *it)
{
	if (pending_tail)
		pending_tail->next = it;
	else
		pending_head = it;
	pending_tail = it;
	if (!BI_IS_READ(it->kind))
		pending_writes++;
}

/* Free an item and its data */
static void
item_free(BatchItem *it)
{
	zk_call_free(it, it->data);
}

/* The bytes the ACL adds to every create of a multi (zklock.acl) */
static size_t
acl_bytes(void)
{
	struct ACL_vector *acl = zk_acl_path(zk_root);	/* the larger one */
	size_t		n = 4;
	int			i;

	for (i = 0; acl != NULL && i < acl->count; i++)
		n += 12 + strlen(acl->data[i].id.scheme) + strlen(acl->data[i].id.id);
	return n;
}

/*
 * The bytes an item adds to a multi: its path and data, a create's ACL,
 * and some framing
 */
static size_t
item_bytes(BatchItem *it)
{
	size_t		n = strlen(it->path) + (it->datalen > 0 ? it->datalen : 0) + 64;
	int			i;

	if (it->kind == BI_CREATE)
		n += acl_bytes();

	for (i = 0; it->kind == BI_MULTI && i < it->nops; i++)
	{
		const zoo_op_t *op = &it->ops[i];

		switch (op->type)
		{
			case ZOO_CREATE_OP:
				n += strlen(op->create_op.path) + Max(op->create_op.datalen, 0) + 64 +
					acl_bytes();
				break;
			case ZOO_DELETE_OP:
				n += strlen(op->delete_op.path) + 64;
				break;
			case ZOO_SETDATA_OP:
				n += strlen(op->set_op.path) + Max(op->set_op.datalen, 0) + 64;
				break;
			default:
				n += strlen(op->check_op.path) + 64;
				break;
		}
	}
	return n;
}

/*
 * Queue a create of path (data, ZOO_* flags).  done is called once, as the
 * client library would call it.
 */
void
zk_batch_create(const char *path, const char *data, int datalen, int flags,
				string_stat_completion_t done, const void *ctx)
{
	BatchItem  *it = item_new(BI_CREATE, path, ctx);

	it->flags = flags;
	it->create_done = done;
	if (data != NULL && datalen >= 0)
	{
		it->data = MemoryContextAlloc(batch_context(), Max(datalen, 1));
		memcpy(it->data, data, datalen);
		it->datalen = datalen;
	}
	item_append(it);
}

/*
 * zk_batch_create for a node whose czxid may tie with its siblings': it may
 * share a multi with other creates under its parent (a barrier's members,
 * whose czxid orders them only against "ready", which is never batched).
 */
void
zk_batch_create_sibling(const char *path, const char *data, int datalen,
						int flags, string_stat_completion_t done,
						const void *ctx)
{
	zk_batch_create(path, data, datalen, flags, done, ctx);
	pending_tail->sibling = true;
}

/* Queue a delete of path (expected version, -1 for any) */
void
zk_batch_delete(const char *path, int version, void_completion_t done,
				const void *ctx)
{
	BatchItem  *it = item_new(BI_DELETE, path, ctx);

	it->version = version;
	it->delete_done = done;
	item_append(it);
}

/*
 * Queue a recipe's own multi of nops operations (ops and results are the
 * recipe's and must live until done is called): it stays atomic, and may
 * share a ZooKeeper multi with other writes.  done(rc, ctx) is called once,
 * with results as ZooKeeper would have given them to this multi alone.
 */
void
zk_batch_multi(int nops, zoo_op_t *ops, zoo_op_result_t *res,
			   void_completion_t done, const void *ctx)
{
	BatchItem  *it = item_new(BI_MULTI, "", ctx);

	it->nops = nops;
	it->ops = ops;
	it->res = res;
	it->multi_done = done;
	item_append(it);
}

/* A read queued behind the writes pending; NULL when none is (send it now) */
static BatchItem *
read_behind(BatchKind kind, const char *path, const void *ctx)
{
	BatchItem  *it;

	if (pending_head == NULL)
		return NULL;
	it = item_new(kind, path, ctx);
	item_append(it);
	return it;
}

/*
 * List path's children, after every write handed to the batch before.
 * With nothing pending it is sent at once; returns the client library's
 * code then, else ZOK.
 */
int
zk_batch_get_children(const char *path, strings_completion_t done,
					  const void *ctx)
{
	BatchItem  *it = read_behind(BI_LIST, path, ctx);

	if (it == NULL)
		return zoo_aget_children(zk_zh, path, 0, done, ctx);
	it->list_done = done;
	return ZOK;
}

/*
 * A read of path's data behind the writes handed to the batch before it
 * (a claim's item behind the claim: queue_claim.c).  Its answer may come
 * before theirs when a multi they went in failed and they are sent again.
 */
int
zk_batch_get(const char *path, data_completion_t done, const void *ctx)
{
	BatchItem  *it = read_behind(BI_GET, path, ctx);

	if (it == NULL)
		return zoo_aget(zk_zh, path, 0, done, ctx);
	it->get_done = done;
	return ZOK;
}

/*
 * An exists of path that sets a watch (watcher, wctx), behind the writes
 * handed to the batch before it: a barrier member's watch on "ready" right
 * behind its create (barrier_member.c), as had the create been sent alone.
 */
int
zk_batch_wexists(const char *path, watcher_fn watcher, void *wctx,
				 stat_completion_t done, const void *ctx)
{
	BatchItem  *it = read_behind(BI_WEXISTS, path, ctx);

	if (it == NULL)
		return zoo_awexists(zk_zh, path, watcher, wctx, done, ctx);
	it->watcher = watcher;
	it->watcher_ctx = wctx;
	it->exists_done = done;
	return ZOK;
}

/* ---- answers ---- */

/* Give an item's own completion the answer rc (no path, no stat) */
static void
answer_item(BatchItem *it, int rc, const char *created, const struct Stat *stat)
{
	switch (it->kind)
	{
		case BI_CREATE:
			it->create_done(rc, created, stat, it->ctx);
			break;
		case BI_DELETE:
			it->delete_done(rc, it->ctx);
			break;
		case BI_MULTI:
			it->multi_done(rc, it->ctx);
			break;
		case BI_LIST:
			it->list_done(rc, NULL, it->ctx);
			break;
		case BI_GET:
			it->get_done(rc, NULL, -1, NULL, it->ctx);
			break;
		case BI_WEXISTS:
			it->exists_done(rc, NULL, it->ctx);
			break;
	}
}

/* A send is answered: forget it, and send what it held back */
static void
send_finished(BatchSend *s)
{
	int			i;

	inflight--;
	if (s->waited)
	{
		inflight_waited--;
		inflight_waited_writes -= s->counted;
	}
	for (i = 0; i < s->n; i++)
		item_free(s->items[i]);
	pfree(s->items);
	if (s->ops)
		pfree(s->ops);
	if (s->res)
		pfree(s->res);
	pfree(s);
	zk_batch_pump();
}

/* Completion of the zoo_acreate2 sent by send_alone() */
static void
alone_create_done(int rc, const char *name, const struct Stat *stat,
				  const void *data)
{
	BatchSend  *s = (BatchSend *) data;

	COMPLETION_BEGIN
	{
		s->items[0]->create_done(rc, name, stat, s->items[0]->ctx);
		send_finished(s);
	}
	COMPLETION_END(NULL);
}

/* Completion of the zoo_adelete or zoo_amulti sent by send_alone() */
static void
alone_void_done(int rc, const void *data)
{
	BatchSend  *s = (BatchSend *) data;

	COMPLETION_BEGIN
	{
		answer_item(s->items[0], rc, NULL, NULL);
		send_finished(s);
	}
	COMPLETION_END(NULL);
}

static ZkLogLimit stamp_log;

/*
 * The stamp's setData failed the multi: make the node again (ZNONODE), or
 * send creates on their own for the rest of the session (a refusal).
 */
static void
stamp_failed(int err)
{
	char		path[ZK_PATH_MAX];

	if (err == ZNONODE)
	{
		snprintf(path, sizeof(path), "%s/stamps", zk_root);
		zk_create_parent(zk_root, ZOO_PERSISTENT);
		zk_create_parent(path, ZOO_PERSISTENT);
		stamp_path(path, sizeof(path));
		zk_create_parent(path, ZOO_PERSISTENT);
		return;
	}
	stamp_state = STAMP_REFUSED;
	stamp_refused_at = GetCurrentTimestamp();
	stamp_path(path, sizeof(path));
	if (zk_log_limited(&stamp_log, "could not write the stamp node"))
		ereport(WARNING,
				(errmsg("zklock: could not write the node %s: %s", path, zerror(err)),
				 errdetail("Creates are sent one by one, not gathered into multi-ops, for a minute; then it is tried again."),
				 errhint("Let zklock's ZooKeeper identity create and write %s/stamps.", zk_root)));
}

/* How many of a send's operations an item has */
static int
item_nops(BatchItem *it)
{
	return it->kind == BI_MULTI ? it->nops : 1;
}

/*
 * A multi is answered (multi_done): every write gets its answer, or is
 * sent again on its own when another one failed the multi.  A recipe's own
 * multi gets its slice of the results, which is what ZooKeeper would have
 * answered it alone.
 */
static void
multi_answered(BatchSend *s, int rc)
{
	int			culprit = -1;
	int			i;
	int			k;

	if (rc != ZOK && zk_rc_definite(rc))
	{
		int			nops = s->stamped ? 1 : 0;
		int			same = 0;

		for (i = 0; i < s->n; i++)
			nops += item_nops(s->items[i]);
		for (i = 0; i < nops; i++)
			if (s->res[i].err == rc)
				same++;
		for (i = 0; i < nops; i++)
			if (s->res[i].err != ZOK && s->res[i].err != ZRUNTIMEINCONSISTENCY)
			{
				culprit = i;
				break;
			}

		/*
		 * Every operation answered with the multi's own error: the request
		 * as a whole was refused (ZooKeeper throttling it, say), and the
		 * library gave each operation that error.  Nobody's write is at
		 * fault; each request hears it as it would have alone.
		 */
		if (nops > 1 && same == nops)
		{
			for (i = 0; i < s->n; i++)
			{
				if (s->items[i]->kind == BI_MULTI)
					memcpy(s->items[i]->res, &s->res[s->items[i]->first_op],
						   sizeof(zoo_op_result_t) * s->items[i]->nops);
				answer_item(s->items[i], rc, NULL, NULL);
			}
			return;
		}
		if (culprit < 0)
			rc = ZRUNTIMEINCONSISTENCY;	/* no verdict to give: in doubt */
	}

	if (rc == ZOK)
	{
		struct Stat st;

		/* one transaction: its zxid is every created node's czxid */
		memset(&st, 0, sizeof(st));
		if (s->stamped)
			st.czxid = s->stamp.mzxid;
		for (i = 0; i < s->n; i++)
		{
			BatchItem  *it = s->items[i];

			if (it->kind == BI_MULTI)
				memcpy(it->res, &s->res[it->first_op], sizeof(zoo_op_result_t) * it->nops);
			answer_item(it, ZOK, it->created, &st);
		}
		return;
	}
	if (culprit < 0)
	{
		/* not ZooKeeper's verdict: each request is in doubt, as alone */
		for (i = 0; i < s->n; i++)
			answer_item(s->items[i], rc, NULL, NULL);
		return;
	}
	if (s->stamped && culprit == 0)
		stamp_failed(s->res[0].err);
	for (i = 0, k = 0; i < s->n; i++)
	{
		BatchItem  *it = s->items[i];

		if (culprit >= it->first_op && culprit < it->first_op + item_nops(it))
		{
			if (it->kind == BI_MULTI)
				memcpy(it->res, &s->res[it->first_op], sizeof(zoo_op_result_t) * it->nops);
			answer_item(it, s->res[culprit].err, NULL, NULL);
			s->items[k++] = it;
		}
		else
			send_alone(it);		/* rolled back: the item moves over */
	}
	s->n = k;
}

/* Completion of a multi sent by send_items() */
static void
multi_done(int rc, const void *data)
{
	BatchSend  *s = (BatchSend *) data;

	COMPLETION_BEGIN
	{
		multi_answered(s, rc);
		send_finished(s);
	}
	COMPLETION_END(NULL);
}

/* ---- sending ---- */

/* A new send for n writes */
static BatchSend *
send_new(int n, int nops)
{
	MemoryContext old = MemoryContextSwitchTo(batch_context());
	BatchSend  *s = palloc0(sizeof(BatchSend));

	s->items = palloc0(sizeof(BatchItem *) * Max(n, 1));
	if (nops > 0)
	{
		s->ops = palloc0(sizeof(zoo_op_t) * nops);
		s->res = palloc0(sizeof(zoo_op_result_t) * nops);
	}
	MemoryContextSwitchTo(old);
	return s;
}

/*
 * Send one write on its own, the plain request (a lone write, or one
 * rolled back with a failed multi).  Its answer goes to its completion.
 */
static void
send_alone(BatchItem *it)
{
	BatchSend  *s = send_new(1, 0);
	int			rc;

	s->n = 1;
	s->items[0] = it;
	if (it->kind == BI_CREATE)
		rc = zoo_acreate2(zk_zh, it->path, it->data, it->datalen, zk_acl_path(it->path),
						  it->flags, alone_create_done, s);
	else if (it->kind == BI_MULTI)
		rc = zoo_amulti(zk_zh, it->nops, it->ops, it->res, alone_void_done, s);
	else
		rc = zoo_adelete(zk_zh, it->path, it->version, alone_void_done, s);
	if (rc == ZOK)
	{
		inflight++;
		s->waited = (it->kind != BI_DELETE);
		if (s->waited)
		{
			inflight_waited++;
			s->counted = s->n;
			inflight_waited_writes += s->counted;
		}
		return;
	}
	/* not sent: the request hears it as it would from the library */
	pfree(s->items);
	pfree(s);
	answer_item(it, rc, NULL, NULL);
	item_free(it);
}

/* Send a read that was waiting behind writes */
static void
send_read(BatchItem *it)
{
	int			rc;

	if (it->kind == BI_GET)
		rc = zoo_aget(zk_zh, it->path, 0, it->get_done, it->ctx);
	else if (it->kind == BI_WEXISTS)
		rc = zoo_awexists(zk_zh, it->path, it->watcher, it->watcher_ctx,
						  it->exists_done, it->ctx);
	else
		rc = zoo_aget_children(zk_zh, it->path, 0, it->list_done, it->ctx);
	if (rc != ZOK)
		answer_item(it, rc, NULL, NULL);
	item_free(it);
}

/*
 * Send the nwrites writes from first on (the pending list's head, already
 * taken off it): one multi, or the plain request for one.  The reads among
 * them go right behind.
 */
static void
send_items(BatchItem *first, int nwrites)
{
	BatchItem  *it;
	BatchItem  *next;
	BatchItem  *reads = NULL;
	BatchItem **reads_tail = &reads;
	BatchSend  *s;
	bool		creates = false;
	bool		waited = false;
	char		stamp[ZK_PATH_MAX];
	int			nops = 0;
	int			k;
	int			rc;

	if (nwrites <= 1)
	{
		for (it = first; it != NULL; it = next)
		{
			next = it->next;
			it->next = NULL;
			if (BI_IS_READ(it->kind))
				send_read(it);
			else
				send_alone(it);
		}
		return;
	}

	for (it = first; it != NULL; it = it->next)
	{
		if (it->kind == BI_CREATE)
			creates = true;
		if (it->kind != BI_DELETE && !BI_IS_READ(it->kind))
			waited = true;
		if (!BI_IS_READ(it->kind))
			nops += (it->kind == BI_MULTI) ? it->nops : 1;
	}
	s = send_new(nwrites, nops + (creates ? 1 : 0));
	k = 0;
	if (creates)
	{
		stamp_path(stamp, sizeof(stamp));
		s->stamped = true;
		zoo_set_op_init(&s->ops[k++], stamp, NULL, -1, -1, &s->stamp);
	}
	for (it = first; it != NULL; it = next)
	{
		next = it->next;
		it->next = NULL;
		if (BI_IS_READ(it->kind))
		{
			*reads_tail = it;
			reads_tail = &it->next;
			continue;
		}
		s->items[s->n++] = it;
		it->first_op = k;
		if (it->kind == BI_CREATE)
			zoo_create_op_init(&s->ops[k++], it->path, it->data, it->datalen,
							   zk_acl_path(it->path), it->flags, it->created, sizeof(it->created));
		else if (it->kind == BI_MULTI)
		{
			memcpy(&s->ops[k], it->ops, sizeof(zoo_op_t) * it->nops);
			k += it->nops;
		}
		else
			zoo_delete_op_init(&s->ops[k++], it->path, it->version);
	}
	rc = zoo_amulti(zk_zh, k, s->ops, s->res, multi_done, s);
	if (rc == ZOK)
	{
		inflight++;
		s->waited = waited;
		if (waited)
		{
			inflight_waited++;
			s->counted = s->n;
			inflight_waited_writes += s->counted;
		}
	}
	else
	{
		/* not sent: every request hears it as it would from the library */
		int			i;

		for (i = 0; i < s->n; i++)
		{
			answer_item(s->items[i], rc, NULL, NULL);
			item_free(s->items[i]);
		}
		pfree(s->items);
		pfree(s->ops);
		pfree(s->res);
		pfree(s);
	}
	for (it = reads; it != NULL; it = next)
	{
		next = it->next;
		it->next = NULL;
		send_read(it);
	}
}

/*
 * Does a create under the same parent as it come before it in the list
 * from first?  Two such creates must not share a multi: both nodes would
 * have the one zxid as czxid, and the lock's fencing token must grow with
 * every grant of the lock.  Siblings (zk_batch_create_sibling) may.
 */
static bool
same_parent_before(BatchItem *first, BatchItem *it)
{
	const char *slash = strrchr(it->path, '/');
	size_t		plen = slash ? (size_t) (slash - it->path) : 0;
	BatchItem  *o;

	if (it->sibling)
		return false;
	for (o = first; o != it; o = o->next)
		if (o->kind == BI_CREATE && !o->sibling &&
			strncmp(o->path, it->path, plen) == 0 &&
			o->path[plen] == '/' && strchr(o->path + plen + 1, '/') == NULL)
			return true;
	return false;
}

/*
 * Take the next send off the pending list: up to zklock.batch_max writes
 * and BATCH_MAX_BYTES, the reads among them, and the reads right behind
 * the last.  A second create under one parent starts the next send;
 * creates go alone while the stamp is refused.
 */
static void
send_next(void)
{
	BatchItem  *first = pending_head;
	BatchItem  *last = NULL;
	BatchItem  *it;
	int			nwrites = 0;
	size_t		bytes = 0;

	if (stamp_state == STAMP_REFUSED &&
		GetCurrentTimestamp() >= TimestampTzPlusMilliseconds(stamp_refused_at, STAMP_RETRY_MS))
		stamp_state = STAMP_UNKNOWN;

	for (it = pending_head; it != NULL; it = it->next)
	{
		if (!BI_IS_READ(it->kind))
		{
			bool		alone = (it->kind == BI_CREATE && stamp_state == STAMP_REFUSED);

			if (nwrites > 0 &&
				(nwrites >= zk_batch_max || alone ||
				 bytes + item_bytes(it) > BATCH_MAX_BYTES ||
				 (it->kind == BI_CREATE && same_parent_before(first, it))))
				break;
			nwrites++;
			bytes += item_bytes(it);
			if (alone)
			{
				last = it;
				/* with its reads, but nothing more */
				while (last->next && BI_IS_READ(last->next->kind))
					last = last->next;
				break;
			}
		}
		last = it;
	}
	pending_head = last->next;
	if (pending_head == NULL)
		pending_tail = NULL;
	last->next = NULL;
	pending_writes -= nwrites;
	send_items(first, nwrites);
}

/*
 * The session's socket as the worker last heard it from zookeeper_interest
 * (worker.c; -1: none), and whether this file corked it.
 *
 * The client library writes every request as two send()s, its length and
 * its body, and the socket has TCP_NODELAY: a lock's create and the
 * listing behind it left as four TCP segments, each one a trip through
 * the loopback's stack in the worker and a read in ZooKeeper (issue 40).
 * When a pump sends more than one request, the socket is corked around it
 * and uncorked at its end, which pushes everything at once.  Uncorking
 * never waits; zk_batch_uncork() also runs before the worker's wait, so a
 * pump cut short by an error cannot leave data held (Linux would push it
 * after 200 ms anyway).
 */
int			zk_sock_fd = -1;
static int	corked_fd = -1;

static void
batch_cork(void)
{
	int			on = 1;

	if (corked_fd >= 0 || zk_sock_fd < 0 || pending_head == NULL ||
		pending_head->next == NULL || zoo_state(zk_zh) != ZOO_CONNECTED_STATE)
		return;
	if (setsockopt(zk_sock_fd, IPPROTO_TCP, TCP_CORK, &on, sizeof(on)) == 0)
		corked_fd = zk_sock_fd;
}

/* Push what a pump sent (see above); nothing when nothing is corked */
void
zk_batch_uncork(void)
{
	int			off = 0;
	int			fd = corked_fd;

	if (fd < 0)
		return;
	corked_fd = -1;
	(void) setsockopt(fd, IPPROTO_TCP, TCP_CORK, &off, sizeof(off));
}

/*
 * Send what is pending, as far as the sends in flight allow: called at
 * the end of every turn of the worker and whenever a send is answered.
 */
void
zk_batch_pump(void)
{
	int			guard = 0;

	if (pending_head == NULL || !zk_session_usable())
		return;
	if (inflight_waited > 0 && pending_writes > 0 && pending_writes < zk_batch_max &&
		(inflight_waited >= zk_batch_inflight ||
		 inflight_waited_writes > inflight_waited))
		return;					/* gathering while the last ones are written */
	/* all of it, in as many sends as it takes (bounded work per turn) */
	batch_cork();
	while (pending_head != NULL && guard++ < 1000)
		send_next();
	zk_batch_uncork();
}

/*
 * Send everything pending now, held or not: a request that does not go
 * through the batch is about to be sent, and must see every write asked
 * for before it.
 */
void
zk_batch_flush(void)
{
	BatchItem  *it;
	int			n = 0;

	/*
	 * All of it, however long the list: each send takes at least the
	 * first item, and what completions of sends that fail at once add
	 * comes after the last counted (bounded by the entries anyway)
	 */
	for (it = pending_head; it != NULL; it = it->next)
		n++;
	if (zk_session_usable())
		batch_cork();
	while (pending_head != NULL && zk_session_usable() && n-- > 0)
		send_next();
	zk_batch_uncork();
}

/* ---- the session ---- */

/* A session is connected: make sure the stamp node exists */
static void
batch_session_connected(void)
{
	char		path[ZK_PATH_MAX];

	stamp_state = STAMP_UNKNOWN;
	if (zk_zh == NULL)
		return;
	snprintf(path, sizeof(path), "%s/stamps", zk_root);
	zk_create_parent(zk_root, ZOO_PERSISTENT);
	zk_create_parent(path, ZOO_PERSISTENT);
	stamp_path(path, sizeof(path));
	zk_create_parent(path, ZOO_PERSISTENT);
}

/*
 * The session's handle is closed (zk_recipes_session_closed, before the
 * recipes forget their per-session state once more).  What is held was
 * never sent: each request hears ZCLOSING, as those in flight just heard
 * from zookeeper_close(), so that every recipe frees what it keeps for
 * its answer and counts it down the same way.
 */
void
zk_batch_session_closed(void)
{
	BatchItem  *it;

	while ((it = pending_head) != NULL)
	{
		pending_head = it->next;
		if (pending_head == NULL)
			pending_tail = NULL;
		if (!BI_IS_READ(it->kind))
			pending_writes--;
		it->next = NULL;
		answer_item(it, ZCLOSING, NULL, NULL);
		item_free(it);
	}
	pending_writes = 0;
	stamp_state = STAMP_UNKNOWN;
}

/* A new worker: nothing held, nothing in flight */
static void
batch_worker_start(void)
{
	BatchItem  *it;
	BatchItem  *next;

	for (it = pending_head; it != NULL; it = next)
	{
		next = it->next;
		item_free(it);
	}
	pending_head = pending_tail = NULL;
	pending_writes = 0;
	stamp_state = STAMP_UNKNOWN;
	inflight = 0;
	inflight_waited = 0;
	inflight_waited_writes = 0;
}

/* the batch's hooks into the worker (worker_base.c) */
const ZkRecipe zk_batch_recipe = {
	.worker_start = batch_worker_start,
	.session_connected = batch_session_connected,
};
