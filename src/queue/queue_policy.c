/*-------------------------------------------------------------------------
 *
 * queue_policy.c
 *	  A queue's dead-letter policy (doc/queues.md, "Dead letters").
 *
 *	  Where it is kept.  In the data of the queue's own node,
 *	  <root>/queues/<name>, as a JSON object
 *
 *		{"zklock_policy": 1, "max_attempts": 5, "dead_letter": "jobs.dlq"}
 *
 *	  so that every cluster on the ZooKeeper ensemble applies the same
 *	  policy, and it lasts as long as the queue.  kazoo and Curator never
 *	  read or write that node's data (kazoo creates it empty); no policy is
 *	  empty data.  The dead-letter queue is named without its namespace: it
 *	  is in the queue's.
 *
 *	  Writing it (ZKQI_SET_POLICY, zk_queue_set_policy).  The queue's
 *	  parents and the dead-letter queue's are created first (as a dequeue
 *	  does), then the node is read and written at the version read: data
 *	  that is not a policy (another client's) is never overwritten, and a
 *	  concurrent change is read again, ZKQ_POLICY_TRIES times at most.  A
 *	  policy is always written into an existing node (setData), so its
 *	  version is 0 exactly when the node never had one.
 *
 *	  Reading it (zk_q_policy_read).  The worker reads the policy of a
 *	  queue it serves dequeues from in the round that creates the queue's
 *	  parents (queue_consume.c), once per session and whenever a claim
 *	  finds the version changed: every claim's multi checks the queue
 *	  node's version (queue_claim.c), so a claim is made under the policy
 *	  the worker knows, and a changed policy fails it and is read again.
 *	  A version counts again from 0 in a queue dropped and made again, so
 *	  the read also notes the czxid of the queue's entries, and a listing
 *	  that finds other entries (queue_consume.c) reads the policy again
 *	  before any claim.  A
 *	  policy in a node whose ACL lets another identity than zklock's write
 *	  it is not believed (a WARNING says so): anyone could have written it.
 *
 *-------------------------------------------------------------------------
 */
#include "queue_int.h"

#include "lib/stringinfo.h"
#include "utils/json.h"
#include "utils/memutils.h"

#define ZKQ_POLICY_TRIES	5

static ZkLogLimit untrusted_log;
static uint32 policy_seq = 0;	/* reads sent, by every QState (QState.policy_seq) */

/* the fields of a policy, in the order of policy_fields */
static const char *const policy_fields[] = {"zklock_policy", "max_attempts", "dead_letter"};

/*
 * What a queue node's data says: QPOLICY_NONE (empty), QPOLICY_SET
 * (*max_attempts and dlq, the dead-letter queue's name without its
 * namespace), or QPOLICY_FOREIGN (anything else: not ours).  Never raises
 * on bad data.
 */
QPolicyData
zk_q_policy_parse(const char *data, int len, int *max_attempts, char *dlq, size_t dlqlen)
{
	MemoryContext cxt;
	MemoryContext old;
	char	   *v[3];
	JsonTokenType t[3];
	QPolicyData r = QPOLICY_FOREIGN;

	*max_attempts = 0;
	dlq[0] = '\0';
	if (data == NULL || len <= 0)
		return QPOLICY_NONE;
	if (len > ZKQ_POLICY_DATA_MAX)
		return QPOLICY_FOREIGN;
	cxt = AllocSetContextCreate(CurrentMemoryContext, "zklock queue policy",
								ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(cxt);
	if (zk_json_top_fields(data, len, policy_fields, 3, false, v, t) &&
		v[0] != NULL && t[0] == JSON_TOKEN_NUMBER && strcmp(v[0], "1") == 0 &&
		v[1] != NULL && t[1] == JSON_TOKEN_NUMBER &&
		v[2] != NULL && t[2] == JSON_TOKEN_STRING &&
		strlen(v[2]) >= 1 && strlen(v[2]) <= ZKLOCK_NAME_MAX && strlen(v[2]) < dlqlen &&
		strchr(v[2], ZKLOCK_NS_MARK) == NULL)
	{
		char	   *end;
		long		n;

		errno = 0;
		n = strtol(v[1], &end, 10);
		if (errno == 0 && *end == '\0' && n >= 1 && n <= ZKQ_POLICY_MAX_ATTEMPTS)
		{
			*max_attempts = (int) n;
			strlcpy(dlq, v[2], dlqlen);
			r = QPOLICY_SET;
		}
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	return r;
}

/* The dead-letter queue's qualified name: dlq in the namespace of qname */
void
zk_q_policy_dlq_qname(const char *qname, const char *dlq, char *out, size_t outlen)
{
	char		ns[ZKLOCK_NS_MAX + 1];

	zk_qname_namespace(qname, ns, sizeof(ns));
	if (ns[0] == '\0')
		strlcpy(out, dlq, outlen);
	else
		snprintf(out, outlen, "%c%s%c%s", ZKLOCK_NS_MARK, ns, ZKLOCK_NS_MARK, dlq);
}

/* ---- the worker's read of a queue's policy (QState) ---- */

typedef struct PolicyRead
{
	char		name[ZKLOCK_QNAME_MAX + 1];
	uint64		session;
	uint32		seq;			/* QState.policy_seq when sent */
	int			pending;		/* answers still to come */
	int			rc_data;
	int			rc_acl;
	int64		ent_czxid;		/* entries' czxid (0: none), read after the data */
	bool		open;			/* a foreign identity may write the node */
	int32		version;
	QPolicyData what;
	int			max_attempts;
	char		dlq[ZKLOCK_NAME_MAX + 1];
} PolicyRead;

/* Both answers are in: what the queue's QState believes from now on */
static void
policy_read_finish(PolicyRead *r)
{
	QState	   *q = zk_q_state(r->name, false);

	if (q == NULL || q->policy != QPOL_READING || r->seq != q->policy_seq ||
		r->session != zk_cur_session)
		return;					/* forgotten, or read again since */
	q->policy_czxid = r->ent_czxid;
	if (r->rc_data == ZNONODE)
	{
		/* no queue node yet: made empty by the round's creates */
		q->policy = QPOL_KNOWN;
		q->policy_version = 0;
		q->max_attempts = 0;
		return;
	}
	if (r->rc_data == ZNOAUTH)
	{
		/*
		 * Another identity's node that zklock may not read: no policy it
		 * could believe; claims check only that the node is there
		 */
		q->policy = QPOL_KNOWN;
		q->policy_version = -1;
		q->max_attempts = 0;
		return;
	}
	if (r->rc_data != ZOK || (r->rc_acl != ZOK && r->rc_acl != ZNOAUTH))
	{
		q->policy = QPOL_UNKNOWN;	/* the next round reads it again */
		return;
	}
	q->policy = QPOL_KNOWN;
	q->policy_version = r->version;
	q->max_attempts = 0;
	q->dlq_path[0] = '\0';
	q->dl_blocked_until = 0;
	if (r->what != QPOLICY_SET)
		return;
	if (r->open || r->rc_acl == ZNOAUTH)
	{
		if (zk_log_limited(&untrusted_log, "queue policy not trusted"))
			ereport(WARNING,
					(errmsg("zklock: ignoring the dead-letter policy of queue \"%s\"",
							zk_log_name(r->name)),
					 errdetail("The ACL of \"%s\" lets another ZooKeeper identity than zklock's write the node, so anyone could have written the policy.",
							   q->path),
					 errhint("Give the queue's node zklock's ACL (zklock.acl_repair, or zkCli.sh setAcl), then set the policy again with zk_queue_set_policy.")));
		return;
	}
	{
		char		dq[ZKLOCK_QNAME_MAX + 1];

		zk_q_policy_dlq_qname(r->name, r->dlq, dq, sizeof(dq));
		zk_queue_path(dq, q->dlq_path, sizeof(q->dlq_path));
	}
	q->max_attempts = r->max_attempts;
	/* the dead-letter queue's nodes, once per session, before any move */
	zk_q_send_ensure_queue(q->dlq_path);
}

/* One answer of r is in: after the last, apply it and free r (true) */
static bool
policy_read_answered(PolicyRead *r)
{
	if (--r->pending > 0)
		return false;
	policy_read_finish(r);
	pfree(r);
	return true;
}

/* Completion of the zoo_aget sent by zk_q_policy_read() */
static void
policy_data_done(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(PolicyRead, r, data)
	{
		r->rc_data = rc;
		if (rc == ZOK && stat != NULL)
		{
			r->version = stat->version;
			r->what = zk_q_policy_parse(value, value_len, &r->max_attempts,
										r->dlq, sizeof(r->dlq));
		}
		else if (rc == ZOK)
			r->rc_data = ZSYSTEMERROR;
		if (policy_read_answered(r))
			r = NULL;
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget_acl sent by zk_q_policy_read() */
static void
policy_acl_done(int rc, struct ACL_vector *acl, struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(PolicyRead, r, data)
	{
		r->rc_acl = rc;
		if (rc == ZOK && zk_acl_first_foreign(acl, ZOO_PERM_WRITE | ZOO_PERM_ADMIN) >= 0)
			r->open = true;
		if (policy_read_answered(r))
			r = NULL;
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aexists of entries sent by zk_q_policy_read() */
static void
policy_entries_done(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(PolicyRead, r, data)
	{
		r->ent_czxid = (rc == ZOK && stat != NULL) ? stat->czxid : 0;
		if (policy_read_answered(r))
			r = NULL;
	}
	NONE_COMPLETION_END;
}

/*
 * Read queue q's policy: its node's data and ACL, pipelined (their answers
 * come before those of anything sent after them).  q->policy is
 * QPOL_READING until both are in, then QPOL_KNOWN (or QPOL_UNKNOWN again:
 * read in the next round).
 */
void
zk_q_policy_read(QState *q)
{
	PolicyRead *r = MemoryContextAllocZero(zk_q_context(), sizeof(PolicyRead));

	strlcpy(r->name, q->name, sizeof(r->name));
	r->session = zk_cur_session;
	r->seq = q->policy_seq = ++policy_seq;
	q->policy = QPOL_READING;
	if (zoo_aget(zk_zh, q->path, 0, policy_data_done, r) != ZOK)
	{
		pfree(r);
		q->policy = QPOL_UNKNOWN;
		return;
	}
	r->pending = 1;
	if (zoo_aget_acl(zk_zh, q->path, policy_acl_done, r) == ZOK)
		r->pending++;
	else
		r->rc_acl = ZCONNECTIONLOSS;
	/* which incarnation of the queue this policy is of (queue_consume.c) */
	{
		char		epath[ZK_PATH_MAX];

		snprintf(epath, sizeof(epath), "%s/entries", q->path);
		if (zoo_aexists(zk_zh, epath, 0, policy_entries_done, r) == ZOK)
			r->pending++;
	}
}

/* ---- zk_queue_set_policy (ZKQI_SET_POLICY) ---- */

typedef struct PolicySet
{
	uint32		idx;
	uint32		gen;
	int			tries;
	char		qpath[ZK_PATH_MAX];
	StringInfoData json;		/* the data to write ("" removes it) */
} PolicySet;

static void policy_set_read(PolicySet *p);

/* The write is over: answer the backend (token) and free p */
static void
policy_set_answer(PolicySet *p, ZkEntry *e, int64 token, const char *why)
{
	if (e != NULL)
	{
		e->outstanding = 0;
		if (!e->released)
		{
			e->token = token;
			e->state = ZKE_HELD;
			zk_finish(e, ZKO_GRANTED, 0, why);
		}
		else
			zk_kind_drive(e);	/* frees it */
	}
	pfree(p->json.data);
	pfree(p);
}

/* The write failed for want of ZooKeeper (rc): fail the backend's call */
static void
policy_set_fail(PolicySet *p, ZkEntry *e, int rc, const char *path)
{
	if (e != NULL)
	{
		e->outstanding = 0;
		e->state = ZKE_DONE;
		if (e->released)
			zk_kind_drive(e);
		else if (rc == ZNOAUTH)
			zk_fail_noauth(e, path);
		else
		{
			char		msg[ZKLOCK_ERRMSG_MAX];

			/*
			 * A definite refusal (the node gone again and again, say: the
			 * queue dropped meanwhile) wrote nothing; a lost answer may
			 * have
			 */
			if (zk_rc_definite(rc))
				snprintf(msg, sizeof(msg),
						 "zookeeper refused the policy of \"%s\" (%s); nothing was written: set it again",
						 path, zerror(rc));
			else
				snprintf(msg, sizeof(msg),
						 "zookeeper did not take the policy of \"%s\" (%s); it may or may not be written: set it again",
						 path, zerror(rc));
			zk_fail(e, zk_rc_definite(rc) ? ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE :
					ERRCODE_CONNECTION_FAILURE, msg);
		}
	}
	pfree(p->json.data);
	pfree(p);
}

/* Completion of the zoo_aset sent by policy_set_get_done() */
static void
policy_set_done(int rc, const struct Stat *stat, const void *data)
{
	PolicySet  *p = (PolicySet *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_q_entry_of(p->idx, p->gen);
		if (rc == ZOK)
		{
			/* this worker's dequeues read it at their next claim */
			if (e != NULL)
			{
				QState	   *q = zk_q_state(e->name, false);

				if (q != NULL && q->policy == QPOL_KNOWN)
					q->policy = QPOL_UNKNOWN;
			}
			policy_set_answer(p, e, 1, NULL);
		}
		else if (rc == ZBADVERSION && e != NULL && !e->released &&
				 ++p->tries < ZKQ_POLICY_TRIES)
			policy_set_read(p);
		else if (rc == ZBADVERSION || rc == ZNONODE)
			policy_set_answer(p, e, ZKQ_POLICY_CHANGING,
							  "The queue's node changed under every try");
		else
			policy_set_fail(p, e, rc, p->qpath);
	}
	COMPLETION_END(e);
}

/* Completion of the zoo_aget sent by policy_set_read() */
static void
policy_set_get_done(int rc, const char *value, int value_len,
					const struct Stat *stat, const void *data)
{
	PolicySet  *p = (PolicySet *) data;
	ZkEntry    *volatile e = NULL;

	COMPLETION_BEGIN
	{
		e = zk_q_entry_of(p->idx, p->gen);
		if (e == NULL || e->released)
			policy_set_answer(p, e, 0, NULL);
		else if (rc == ZNONODE && ++p->tries < ZKQ_POLICY_TRIES)
			policy_set_read(p);
		else if (rc != ZOK || stat == NULL)
			policy_set_fail(p, e, rc == ZOK ? ZSYSTEMERROR : rc, p->qpath);
		else
		{
			int			n;
			char		dlq[ZKLOCK_NAME_MAX + 1];

			if (zk_q_policy_parse(value, value_len, &n, dlq, sizeof(dlq)) == QPOLICY_FOREIGN)
			{
				char		why[ZKLOCK_ERRMSG_MAX];

				snprintf(why, sizeof(why),
						 "The data of \"%s\" (%d bytes) is not a zklock policy",
						 p->qpath, value_len);
				policy_set_answer(p, e, ZKQ_POLICY_FOREIGN, why);
			}
			else if (zoo_aset(zk_zh, p->qpath, p->json.data, p->json.len, stat->version,
							  policy_set_done, p) != ZOK)
				policy_set_fail(p, e, ZCONNECTIONLOSS, p->qpath);
		}
	}
	COMPLETION_END(e);
}

/* Read the queue's node (after its parents' creates, in session order) */
static void
policy_set_read(PolicySet *p)
{
	ZkEntry    *e = zk_q_entry_of(p->idx, p->gen);

	zk_q_send_ensure_queue(p->qpath);
	if (zoo_aget(zk_zh, p->qpath, 0, policy_set_get_done, p) != ZOK)
		policy_set_fail(p, e, ZCONNECTIONLOSS, p->qpath);
}

/*
 * Start writing a policy (zk_qinfo_drive): e->name the queue, e->data the
 * dead-letter queue's qualified name and ZKQ(e)->max_items the attempts,
 * or max_items 0 to remove it
 */
void
zk_q_policy_set_start(ZkEntry *e)
{
	MemoryContext old = MemoryContextSwitchTo(zk_q_context());
	PolicySet  *p = palloc0(sizeof(PolicySet));

	initStringInfo(&p->json);
	MemoryContextSwitchTo(old);
	p->idx = zk_entry_index(e);
	p->gen = e->gen;
	zk_queue_path(e->name, p->qpath, sizeof(p->qpath));
	if (ZKQ(e)->max_items > 0)
	{
		char		dpath[ZK_PATH_MAX];

		old = MemoryContextSwitchTo(zk_q_context());
		appendStringInfo(&p->json, "{\"zklock_policy\": 1, \"max_attempts\": %d, \"dead_letter\": ",
						 ZKQ(e)->max_items);
		escape_json(&p->json, zk_name_part(e->data));
		appendStringInfoChar(&p->json, '}');
		MemoryContextSwitchTo(old);
		/* the dead-letter queue exists before any item moves there */
		zk_queue_path(e->data, dpath, sizeof(dpath));
		zk_q_send_ensure_queue(dpath);
	}
	e->state = ZKE_CREATING;
	e->outstanding = 1;			/* until answered */
	policy_set_read(p);
}
