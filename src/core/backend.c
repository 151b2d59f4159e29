/*-------------------------------------------------------------------------
 *
 * backend.c
 *	  The backend side that every recipe shares: hand a request to the
 *	  worker, wait for its answer on our own latch, hand an entry back, and
 *	  call each recipe's backend half at the end of a transaction, at
 *	  ROLLBACK TO SAVEPOINT and at exit (ZkRecipeBackend in zklock.h).
 *	  Knows no recipe.
 *
 *	  Backends never talk to ZooKeeper.  A request is an entry in shared
 *	  memory put on the worker's queue; the worker sets our latch when it has
 *	  an answer.  While waiting we run CHECK_FOR_INTERRUPTS(), so cancel,
 *	  statement_timeout and pg_terminate_backend always work; whatever ends a
 *	  wait hands the entry back to the worker, which removes its node even if
 *	  the create completes later.
 *
 *	  Handing back never waits for anything: see shmem.c.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"

#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/postmaster.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* The recipes' backend halves (the registry, src/zklock.c) */
#define NBACKENDS (zk_registry->nrecipes)
#define BACKEND(i) (zk_registry->backends[i])

/*
 * Entries kept for the worker's own use (what the recipes' worker_entries
 * say: the election candidacies; and room to settle what backends left):
 * 8 plus those, but at most a quarter of zklock.max_locks, so that a small
 * table still leaves most of its entries to backends.
 */
static int
worker_reserve(void)
{
	int			n = 8;
	int			i;

	for (i = 0; i < NBACKENDS; i++)
		if (BACKEND(i)->worker_entries)
			n += BACKEND(i)->worker_entries();
	return Min(n, zk_ctl->max_entries / 4);
}

static bool initialized = false;
static char owner_tag[17];		/* first half of our nodes' guids */

static void xact_callback(XactEvent event, void *arg);
static void subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							 SubTransactionId parentSubid, void *arg);
static void backend_exit(int code, Datum arg);

/*
 * First zklock call in this backend: the guid half and the transaction and
 * exit callbacks
 */
void
zk_backend_init(void)
{
	uint8		buf[8];
	int			i;

	if (initialized)
		return;
	zk_wait_events_init();
	if (!pg_strong_random(buf, sizeof(buf)))
	{
		uint64		v = ((uint64) MyProcPid << 32) ^ (uint64) GetCurrentTimestamp();

		memcpy(buf, &v, sizeof(buf));
	}
	for (i = 0; i < (int) sizeof(buf); i++)
		snprintf(owner_tag + 2 * i, 3, "%02x", buf[i]);
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	before_shmem_exit(backend_exit, (Datum) 0);
	initialized = true;
}

/*
 * Hand a shared entry back to the worker.  Never takes the lock and never
 * waits (see shmem.c), so it is safe in abort and exit paths even when the
 * worker is frozen.  Returns true when the worker must be woken.
 */
bool
zk_release_entry(uint32 idx, uint32 gen)
{
	ZkEntry    *e;

	if (idx == ZKLOCK_NO_ENTRY || zk_ctl == NULL)
		return false;
	e = zk_entry(idx);
	/* ours until released: only the worker frees it, and only then */
	if (e->gen != gen)
		return false;
	zk_release_push(e);
	return true;
}

/*
 * Hand a new entry e to the worker (zk_new_entry: the lock is held on
 * entry, released here): remembered in *idx and *gen, queued, the worker
 * woken
 */
void
zk_submit_entry(ZkEntry *e, uint32 *idx, uint32 *gen)
{
	*idx = zk_entry_index(e);
	*gen = e->gen;
	zk_enqueue(e);
	LWLockRelease(zk_ctl->lock);
	zk_wake_worker();
}

/*
 * Let go of the entry *idx (of generation gen), if any: handed back
 * (zk_release_entry), forgotten (*idx becomes ZKLOCK_NO_ENTRY), and the
 * worker woken.  For a request in progress, also at exit.
 */
void
zk_let_go(uint32 *idx, uint32 gen)
{
	if (*idx == ZKLOCK_NO_ENTRY || zk_ctl == NULL)
		return;
	(void) zk_release_entry(*idx, gen);
	*idx = ZKLOCK_NO_ENTRY;
	zk_wake_worker();
}

/* A name (UTF-8) as this database can show it in a message, without its namespace */
char *
zk_display_name(const char *name)
{
	const char *n = zk_name_part(name);

	return zk_utf8_to_server_noerror(n, strlen(n));
}

/* The next zk_new_entry's name is outside namespaces (an election's) */
bool		zk_next_entry_unqualified = false;

/*
 * Does this backend own an entry (a lock held or awaited, a claim, a
 * membership, a request in flight)?  Its names are in the namespace of
 * the moment, which must not change under them.
 */
bool
zk_backend_has_entries(void)
{
	bool		any = false;
	int			i;

	if (zk_ctl == NULL || MyProc == NULL)
		return false;
	LWLockAcquire(zk_ctl->lock, LW_SHARED);
	for (i = 0; i < zk_ctl->max_entries && !any; i++)
	{
		ZkEntry    *e = zk_entry(i);

		any = e->state != ZKE_FREE && e->pid == MyProcPid && !e->released;
	}
	LWLockRelease(zk_ctl->lock);
	return any;
}

/* ---- identity stored in the node ---- */

/*
 * This host's name, as written into nodes: asked of the system once per
 * process (a system call per lock otherwise), "unknown" if it has none.
 */
const char *
zk_host_name(void)
{
	static char host[256];

	if (host[0] == '\0')
	{
		if (gethostname(host, sizeof(host)) != 0 || host[0] == '\0')
			strlcpy(host, "unknown", sizeof(host));
		host[sizeof(host) - 1] = '\0';
	}
	return host;
}

/*
 * The identity written into a node: cluster, host, port, database, pid,
 * user, application, since when (JSON)
 */
void
zk_build_node_data(char *out, size_t outlen)
{
	StringInfoData buf;
	const char *host = zk_host_name();
	char	   *db;
	db = IsTransactionState() ? get_database_name(MyDatabaseId) : NULL;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"cluster\":\"" UINT64_FORMAT "\",\"host\":",
					 GetSystemIdentifier());
	escape_json(&buf, host);
	appendStringInfo(&buf, ",\"port\":%d,\"database\":", PostPortNumber);
	escape_json(&buf, db ? db : "");
	appendStringInfo(&buf, ",\"pid\":%d,\"user\":", MyProcPid);
	escape_json(&buf, GetUserNameFromId(GetUserId(), true) ?
				GetUserNameFromId(GetUserId(), true) : "");
	appendStringInfoString(&buf, ",\"application\":");
	escape_json(&buf, application_name ? application_name : "");
	appendStringInfoString(&buf, ",\"since\":");
	escape_json(&buf, timestamptz_to_str(GetCurrentTimestamp()));
	appendStringInfoChar(&buf, '}');

	/* node data is UTF-8, whatever the database's encoding */
	{
		char	   *u = pg_server_to_any(buf.data, buf.len, PG_UTF8);

		if (u != buf.data)
		{
			resetStringInfo(&buf);
			appendStringInfoString(&buf, u);
		}
	}
	if (buf.len >= (int) outlen)
	{
		/* too long (an extreme application_name): keep the essentials */
		resetStringInfo(&buf);
		appendStringInfo(&buf, "{\"cluster\":\"" UINT64_FORMAT "\",\"port\":%d,\"pid\":%d}",
						 GetSystemIdentifier(), PostPortNumber, MyProcPid);
	}
	strlcpy(out, buf.data, outlen);
	pfree(buf.data);
}

/* ---- waiting ---- */

/*
 * ZooKeeper refused the worker's request on path for want of permission
 * (ZNOAUTH): the node's ACL does not grant what this cluster's credentials
 * would need.  Not a connection problem: retrying cannot help.
 */
void
zk_raise_noauth(const char *path, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("zookeeper refused access to \"%s\"", path),
			 errdetail("The zklock worker's ZooKeeper session lacks a permission the node's ACL requires (NOAUTH), so it could not %s.",
					   what),
			 errhint("Check zklock.auth_file, zklock.acl and the ACL of the nodes under zklock.root (kazoo's get_acls shows it): clusters that share names must use the same credentials or list each other in zklock.acl.")));
}

/*
 * No session because of the credentials (ZkConnState ZKC_AUTH_FAILED): not
 * a connection problem either, so a request fails at once with 42501.
 */
static void
raise_auth_failed(const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("the zklock worker has no zookeeper session: its credentials were refused"),
			 errdetail("The request to %s cannot be sent; the worker refuses to connect without the credentials of zklock.auth_file, which it could not use (or ZooKeeper refused them).",
					   what),
			 errhint("Check zklock.auth_file (a file owned by the server's user, mode 0600, holding one line user:password) and the server log, then reload the configuration.")));
}

/* The hint of a request that found no usable session */
static int
conn_hint(int conn)
{
	if (conn == ZKC_AUTH_FAILED)
		return errhint("The worker has no ZooKeeper session because its credentials were refused: check zklock.auth_file and the server log.");
	return errhint("Check that ZooKeeper is running and that zklock.hosts is right (see zk_status()), then retry.");
}

/*
 * The hint of a 54000 the worker reported with msg: what to do about the
 * bound it names (zklock.max_children or zklock.max_answer_bytes).
 */
const char *
zk_limit_hint(const char *msg)
{
	if (strstr(msg, "zklock.max_children") != NULL)
		return "Delete some of them, or have a superuser raise zklock.max_children (reload) for as long as reading them takes.";
	/* a listing of a directory every namespace shares (zk_own_children) */
	if (strstr(msg, "names of every namespace") != NULL)
		return "Every namespace's names are in that listing: have a superuser raise zklock.max_answer_bytes for this session, or drop names no longer used.";
	return "Ask for fewer items, or raise zklock.max_answer_bytes for this session.";
}

/*
 * Raise the error the worker reported for a request (its SQLSTATE and
 * message)
 */
static void
raise_failure(int sqlstate, const char *msg, const char *uname)
{
	char	   *name = zk_display_name(uname);

	if (sqlstate == ERRCODE_INSUFFICIENT_PRIVILEGE)
	{
		char		what[ZKLOCK_NAME_MAX * 4 + 64];

		snprintf(what, sizeof(what), "acquire zookeeper lock \"%s\"", name);
		zk_raise_noauth(msg, what);
	}
	if (sqlstate == ERRCODE_PROGRAM_LIMIT_EXCEEDED)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("too many nodes to read for \"%s\"", name),
				 errdetail("%s.", msg),
				 errhint("%s", zk_limit_hint(msg))));
	if (sqlstate == ERRCODE_T_R_DEADLOCK_DETECTED)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("deadlock detected while waiting for zookeeper lock \"%s\"", name),
				 errdetail("%s.", msg),
				 strstr(msg, ZKLOCK_UPGRADE_DEADLOCK_TAIL) != NULL ?
				 errhint("Two sessions that hold a lock shared cannot both upgrade it; retry the transaction.") :
				 errhint("Retry the transaction; sessions that take their locks in one order, or all at once with zk_lock(text[]), do not deadlock.")));
	if (sqlstate == ERRCODE_T_R_SERIALIZATION_FAILURE)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("zookeeper lock \"%s\" was lost", name),
				 errdetail("%s.", msg),
				 errhint("Retry the transaction.")));
	ereport(ERROR,
			(errcode(sqlstate ? sqlstate : ERRCODE_CONNECTION_FAILURE),
			 errmsg("could not acquire zookeeper lock \"%s\"", name),
			 errdetail("%s.", msg),
			 errhint("Check zk_status() and the server log; retry when ZooKeeper is reachable.")));
}

/*
 * The wait event of a backend waiting on its entry of kind "kind" in state
 * "state": what ZooKeeper has it wait for (ZKE_WAITING), as the registry's
 * kinds say (recipelist.h), else the worker's answer.
 */
static uint32
entry_wait_event(int kind, int state)
{
	if (state != ZKE_WAITING || kind < 0 || kind >= ZKK_NUM)
		return zk_wait_event(ZKW_ANSWER);
	return zk_wait_event(zk_registry->kinds[kind].wait);
}

/*
 * While entry idx waits (ZooKeeper answered) with the connection in state
 * conn at now: when to look again, or an error once the connection has
 * been down (since *down_since, kept here) for longer than
 * zklock.connect_timeout.  The error says for what it waited: for lock
 * "what" (a lock), or to do what.
 */
static TimestampTz
waiting_wake_at(int conn, TimestampTz now, TimestampTz *down_since,
				bool lock, const char *what)
{
	if (conn == ZKC_CONNECTED)
	{
		*down_since = 0;
		return TimestampTzPlusMilliseconds(now, 1000);
	}
	if (*down_since == 0)
		*down_since = now;
	if (now >= TimestampTzPlusMilliseconds(*down_since, zk_connect_timeout))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 lock ?
				 errmsg("lost the zookeeper connection while waiting for lock \"%s\"", what) :
				 errmsg("lost the zookeeper connection while waiting to %s", what),
				 errdetail("The connection has been down for longer than zklock.connect_timeout (%d ms).",
						   zk_connect_timeout),
				 errhint("Check that ZooKeeper is running and reachable from this server, then retry.")));
	return TimestampTzPlusMilliseconds(*down_since, zk_connect_timeout);
}

/*
 * Sleep, as a wait for entry idx in state, from now until wake_at (at most
 * a second) or until woken (the worker sets our latch); then interrupts
 */
static void
wait_sleep(uint32 idx, int state, TimestampTz now, TimestampTz wake_at)
{
	long		wait_ms;

	wait_ms = (long) TimestampDifferenceMilliseconds(now, wake_at) + 1;
	wait_ms = Min(Max(wait_ms, 1), 1000);
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 wait_ms, entry_wait_event(zk_entry(idx)->kind, state));
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * A wait's look at entry idx under the lock: its outcome, state, sqlstate
 * and message (msg, ZKLOCK_ERRMSG_MAX bytes), the connection's state
 * (conn), and unless NULL its token and when it was last answered.  False,
 * with nothing read, when the lock is not had within 20 ms (the worker
 * sits on it: frozen?).
 */
static bool
wait_read(uint32 idx, int *outcome, int *state, int *sqlstate, char *msg,
		  int *conn, int64 *token, TimestampTz *answered_at)
{
	ZkEntry    *e;

	if (!zk_backend_lock_timed(LW_SHARED, 20))
		return false;
	e = zk_entry(idx);
	*outcome = e->outcome;
	*state = e->state;
	*sqlstate = e->sqlstate;
	strlcpy(msg, e->errmsg, ZKLOCK_ERRMSG_MAX);
	if (token)
		*token = e->token;
	if (answered_at)
		*answered_at = e->answered_at;
	*conn = zk_ctl->conn_state;
	LWLockRelease(zk_ctl->lock);
	return true;
}

/*
 * Wait for the worker's answer about entry idx.  Returns true when granted
 * (or, for a query, answered), false when a try-lock found the lock taken.
 * Raises errors on timeout, cancel and failures; the caller then hands the
 * entry back.  timeout_ms < 0 waits behind other holders without limit.
 */
bool
zk_wait_for_answer(uint32 idx, const char *uname, int64 timeout_ms, int64 *token)
{
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz answer_deadline = TimestampTzPlusMilliseconds(start, zk_connect_timeout);
	TimestampTz lock_deadline = (timeout_ms >= 0) ?
		TimestampTzPlusMilliseconds(start, timeout_ms) : 0;
	TimestampTz disconnected_since = 0;
	char	   *name = NULL;
	int			last_state = ZKE_PENDING;
	int			last_conn = ZKC_CONNECTING;

	for (;;)
	{
		int			outcome;
		int			state;
		int			conn;
		int			sqlstate;
		char		msg[ZKLOCK_ERRMSG_MAX];
		TimestampTz now;
		TimestampTz wake_at;

		if (wait_read(idx, &outcome, &state, &sqlstate, msg, &conn, token, NULL))
		{
			last_state = state;
			last_conn = conn;
		}
		else
		{
			/* the worker sits on the lock (frozen?): no news, deadlines run */
			outcome = ZKO_NONE;
			state = last_state;
			conn = last_conn;
			sqlstate = 0;
			msg[0] = '\0';
		}

		switch ((ZkOutcome) outcome)
		{
			case ZKO_GRANTED:
				return true;
			case ZKO_BUSY:
				return false;
			case ZKO_FAILED:
			case ZKO_LOST:
				raise_failure(sqlstate, msg, uname);
				break;
			case ZKO_NONE:
				break;
		}
		if (name == NULL)
			name = zk_display_name(uname);

		now = GetCurrentTimestamp();
		if (state == ZKE_WAITING)
		{
			/* ZooKeeper answered: we are queued behind someone */
			wake_at = waiting_wake_at(conn, now, &disconnected_since, true, name);

			if (lock_deadline != 0 && now >= lock_deadline)
			{
				zk_count(ZKCNT_TIMEOUTS, 1);
				ereport(ERROR,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("timed out waiting for zookeeper lock \"%s\"", name),
						 errdetail("Waited " INT64_FORMAT " ms; the lock is held by another session.",
								   timeout_ms),
						 errhint("Raise the timeout (or lock_timeout), or retry later; zk_lock_holders() shows who holds it.")));
			}
			if (lock_deadline != 0 && lock_deadline < wake_at)
				wake_at = lock_deadline;
		}
		else
		{
			if (conn == ZKC_AUTH_FAILED)
			{
				char		what[ZKLOCK_NAME_MAX * 4 + 64];

				snprintf(what, sizeof(what), "acquire zookeeper lock \"%s\"", name);
				raise_auth_failed(what);
			}
			if (now >= answer_deadline)
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("zookeeper did not answer the request for lock \"%s\"", name),
						 conn == ZKC_CONNECTED ?
						 errdetail("ZooKeeper did not reply within zklock.connect_timeout (%d ms).",
								   zk_connect_timeout) :
						 errdetail("No usable ZooKeeper session within zklock.connect_timeout (%d ms); the connection is \"%s\".",
								   zk_connect_timeout, zk_conn_state_name(conn)),
						 conn_hint(conn)));
			wake_at = answer_deadline;
		}

		/* sleep until woken (the worker sets our latch), or the deadline */
		wait_sleep(idx, state, now, wake_at);
	}
}

/*
 * Before COMMIT, with something held whose session is in doubt ("conn" is
 * not connected): wait a little for the session to answer, up to
 * zklock.commit_timeout from the first call (*deadline, 0 at first), then
 * fail the commit with 40001 naming "what" (e.g. 'zookeeper lock "x"').
 * The caller loops, checking its holds again after each call.
 */
void
zk_commit_wait_session(TimestampTz *deadline, int conn, const char *what)
{
	if (*deadline == 0)
		*deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												zk_commit_timeout);
	if (GetCurrentTimestamp() >= *deadline)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not confirm %s before commit", what),
				 errdetail("The ZooKeeper connection is \"%s\" and did not come back within zklock.commit_timeout (%d ms).",
						   zk_conn_state_name(conn), zk_commit_timeout),
				 errhint("Retry the transaction when ZooKeeper is reachable.")));
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 50, zk_wait_event(ZKW_ANSWER));
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * The connection state as a holder may trust it, with zk_ctl->lock held:
 * "connected" is only as fresh as the worker's last word from ZooKeeper,
 * and a worker that heard nothing for 2/3 of the session timeout (the
 * client's own limit) may hold an expired session, so that is "suspended".
 */
int
zk_fresh_conn_state(void)
{
	int			conn = zk_ctl->conn_state;

	if (conn == ZKC_CONNECTED && zk_ctl->session_timeout > 0 &&
		GetCurrentTimestamp() >
		TimestampTzPlusMilliseconds(zk_ctl->last_contact,
									zk_ctl->session_timeout * 2 / 3))
		conn = ZKC_SUSPENDED;
	return conn;
}

/*
 * Wait for the worker's answer.  Returns the outcome; ZKO_NONE when
 * timeout_ms passed while ZooKeeper had us waiting.  Raises errors on
 * failures and when ZooKeeper does not answer within "answer" ms
 * (zklock.connect_timeout), or ZK_ANSWER_AT_COMMIT (zklock.commit_timeout).
 */
int
zk_wait_outcome(uint32 idx, int64 timeout_ms, int answer, const char *what)
{
	/* ZK_ANSWER_AT_COMMIT: zklock.commit_timeout bounds the wait for an answer */
	int			answer_ms = answer == ZK_ANSWER_AT_COMMIT ? zk_commit_timeout : answer;
	const char *setting = answer == ZK_ANSWER_AT_COMMIT ?
		"zklock.commit_timeout" : "zklock.connect_timeout";
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz answer_deadline = TimestampTzPlusMilliseconds(start, answer_ms);
	TimestampTz deadline = timeout_ms >= 0 ?
		TimestampTzPlusMilliseconds(start, timeout_ms) : 0;
	TimestampTz down_since = 0;
	TimestampTz answered = 0;
	int			last_state = ZKE_PENDING;
	int			last_conn = ZKC_CONNECTING;

	for (;;)
	{
		int			outcome = ZKO_NONE;
		int			state = last_state;
		int			conn = last_conn;
		int			sqlstate = 0;
		char		msg[ZKLOCK_ERRMSG_MAX];
		TimestampTz answered_at;
		TimestampTz now;
		TimestampTz wake_at;

		msg[0] = '\0';
		if (wait_read(idx, &outcome, &state, &sqlstate, msg, &conn, NULL, &answered_at))
		{
			if (answered_at > answered)
			{
				/* an answer to a long request: ZooKeeper is working on it */
				answered = answered_at;
				answer_deadline = TimestampTzPlusMilliseconds(answered, answer_ms);
			}
			last_state = state;
			last_conn = conn;
		}
		if (outcome == ZKO_GRANTED || outcome == ZKO_BUSY)
			return outcome;
		if (outcome == ZKO_FAILED && sqlstate == ERRCODE_INSUFFICIENT_PRIVILEGE)
			zk_raise_noauth(msg, what);
		if (outcome == ZKO_FAILED && sqlstate == ERRCODE_PROGRAM_LIMIT_EXCEEDED)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("could not %s: the answer is too large", what),
					 errdetail("%s.", msg),
					 errhint("%s", zk_limit_hint(msg))));
		if (outcome == ZKO_FAILED && sqlstate == ERRCODE_OUT_OF_MEMORY)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of zklock payload memory"),
					 errdetail("Could not %s: %s.", what, msg),
					 errhint("Retry when other sessions' queue work has ended, or move less at once (fewer items, a lower zklock.max_answer_bytes); a superuser can raise zklock.max_payload_memory (reload).")));
		if (outcome == ZKO_FAILED && sqlstate == ERRCODE_OBJECT_IN_USE)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("could not %s", what),
					 errdetail("%s.", msg),
					 errhint("Delete the node another client put there with a ZooKeeper client, or wait until the ZooKeeper session that made it has ended, then retry.")));
		if (outcome == ZKO_FAILED || outcome == ZKO_LOST)
			ereport(ERROR,
					(errcode(sqlstate ? sqlstate : ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not %s", what),
					 errdetail("%s.", msg),
					 errhint("Check zk_status() and the server log; retry when ZooKeeper is reachable.")));

		now = GetCurrentTimestamp();
		if (deadline != 0 && now >= deadline && state == ZKE_WAITING)
			return ZKO_NONE;
		if (state == ZKE_WAITING)
		{
			wake_at = waiting_wake_at(conn, now, &down_since, false, what);
			if (deadline != 0 && deadline < wake_at)
				wake_at = deadline;
			/* an answer after we started waiting resets its clock */
			answer_deadline = TimestampTzPlusMilliseconds(now, answer_ms);
		}
		else
		{
			if (conn == ZKC_AUTH_FAILED)
				raise_auth_failed(what);
			if (now >= answer_deadline)
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("zookeeper did not answer the request to %s", what),
						 conn == ZKC_CONNECTED ?
						 errdetail("ZooKeeper did not reply within %s (%d ms).",
								   setting, answer_ms) :
						 errdetail("No usable ZooKeeper session within %s (%d ms); the connection is \"%s\".",
								   setting, answer_ms, zk_conn_state_name(conn)),
						 conn_hint(conn)));
			wake_at = answer_deadline;
			if (deadline != 0 && deadline < wake_at && state == ZKE_WAITING)
				wake_at = deadline;
		}
		wait_sleep(idx, state, now, wake_at);
	}
}

/*
 * The request fields every new entry has, filled in by the process that
 * allocated it (this one: a backend, or the worker for an entry of its
 * own, with no database): its kind, owner, database, mode, scope, whether
 * it only tries, and when it was asked for.  The name and the rest are the
 * caller's.
 */
void
zk_entry_request(ZkEntry *e, ZkKind kind, Oid dbid, ZkMode mode, ZkScope scope,
				 bool try_only)
{
	e->kind = kind;
	e->procno = zk_my_procno();
	e->pid = MyProcPid;
	e->dbid = dbid;
	e->mode = mode;
	e->scope = scope;
	e->try_only = try_only;
	e->requested_at = GetCurrentTimestamp();
}

/*
 * Take a free entry and fill it in for this backend.  Lock not held on
 * entry; returns with it held exclusively: the caller queues the entry
 * (zk_enqueue) and releases the lock.
 */
ZkEntry *
zk_new_entry(ZkKind kind, const char *name, int len, ZkMode mode, ZkScope scope,
		  bool try_only)
{
	ZkEntry    *e;
	char		data[ZKLOCK_DATA_MAX];
	ZkAllocRefusal why = ZKR_NONE;
	int			held = 0;
	Oid			role;
	int			role_quota;

	/* the node it creates, charged before anything is sent (quota.c) */
	Assert(kind < ZKK_NUM);
	if (zk_registry->kinds[kind].node)
		zk_quota_charge_write(ZK_NODE_CHARGE, zk_registry->kinds[kind].node);

	if (zk_registry->kinds[kind].holder_data)
		zk_build_node_data(data, sizeof(data));
	else
		data[0] = '\0';
	/*
	 * Every name an entry carries is in this backend's namespace, but the
	 * cluster's elections' (zk_next_entry_unqualified, taken once)
	 */
	if (zk_next_entry_unqualified)
		zk_next_entry_unqualified = false;
	else
		name = zk_qualify_name(name, len, &len);
	Assert(len <= ZKLOCK_QNAME_MAX);

	/* a superuser's sessions are not bound by the role's quota */
	role = GetSessionUserId();
	role_quota = zk_session_user_is_superuser() ? 0 : zk_max_locks_per_role;

	zk_backend_lock(LW_EXCLUSIVE);
	e = zk_entry_alloc_backend(zk_my_procno(), zk_max_locks_per_backend,
							   role, role_quota, worker_reserve(), &why, &held);
	if (e == NULL)
	{
		/*
		 * Entries let go but not yet taken back by the worker still count:
		 * give it a moment to free them before refusing.
		 */
		TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 200);

		while (e == NULL && GetCurrentTimestamp() < until)
		{
			LWLockRelease(zk_ctl->lock);
			zk_wake_worker();
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 2, zk_wait_event(ZKW_ANSWER));
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			zk_backend_lock(LW_EXCLUSIVE);
			e = zk_entry_alloc_backend(zk_my_procno(), zk_max_locks_per_backend,
									   role, role_quota, worker_reserve(),
									   &why, &held);
		}
	}
	if (e == NULL)
	{
		int			max = zk_ctl->max_entries;
		int			used = zk_ctl->used;
		int			reserve = worker_reserve();

		LWLockRelease(zk_ctl->lock);
		if (why == ZKR_ROLE_QUOTA)
		{
			char	   *rname = GetUserNameFromId(role, true);

			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("role \"%s\" uses too many zklock entries", rname ? rname : "?"),
					 errdetail("The role's sessions hold or await %d entries together; zklock.max_locks_per_role is %d.",
							   held, role_quota),
					 errhint("Release locks in the role's other sessions, or ask a superuser to raise zklock.max_locks_per_role for the role.")));
		}
		if (why == ZKR_QUOTA)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("this session uses too many zklock entries"),
					 errdetail("The session holds or awaits %d entries (locks, semaphores, queue and barrier requests, and those it let go of that the worker has not freed yet); zklock.max_locks_per_backend is %d.",
							   held, zk_max_locks_per_backend),
					 errhint("Release locks (zk_unlock, zk_unlock_all, or end the transaction) before taking more, or ask a superuser to raise zklock.max_locks_per_backend.")));
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of zklock lock entries"),
				 why == ZKR_RESERVE ?
				 errdetail("%d of the %d entries of zklock.max_locks are in use; the last %d are kept for the zklock worker.",
						   used, max, reserve) :
				 errdetail("All %d entries of zklock.max_locks are held or awaited.", max),
				 errhint("Release locks, or increase zklock.max_locks and restart the server.")));
	}
	zk_entry_request(e, kind, MyDatabaseId, mode, scope, try_only);
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	memcpy(e->owner_tag, owner_tag, sizeof(e->owner_tag));
	strlcpy(e->data, data, sizeof(e->data));
	return e;
}

/* ---- end of transaction, savepoints, exit: each recipe's backend half ---- */

/*
 * Call every recipe's backend half at pre-commit, pre-prepare, commit and
 * abort
 */
static void
xact_callback(XactEvent event, void *arg)
{
	int			i;

	for (i = 0; i < NBACKENDS; i++)
	{
		const ZkRecipeBackend *rb = BACKEND(i);

		switch (event)
		{
			case XACT_EVENT_PRE_COMMIT:
			case XACT_EVENT_PARALLEL_PRE_COMMIT:
				if (rb->pre_commit)
					rb->pre_commit();
				break;
			case XACT_EVENT_PRE_PREPARE:
				if (rb->pre_prepare)
					rb->pre_prepare();
				break;
			case XACT_EVENT_COMMIT:
			case XACT_EVENT_PARALLEL_COMMIT:
			case XACT_EVENT_PREPARE:
				if (rb->xact_end)
					rb->xact_end(true);
				break;
			case XACT_EVENT_ABORT:
			case XACT_EVENT_PARALLEL_ABORT:
				if (rb->xact_end)
					rb->xact_end(false);
				break;
			default:
				break;
		}
	}
}

/* Call every recipe's backend half at the end of a subtransaction */
static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	int			i;

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	for (i = 0; i < NBACKENDS; i++)
		if (BACKEND(i)->subxact_end)
			BACKEND(i)->subxact_end(event == SUBXACT_EVENT_COMMIT_SUB,
											 mySubid, parentSubid);
}

/*
 * A backend that exits lets go of everything at once, whatever it was
 * doing (FATAL skips PG_CATCH, so every recipe gives back here what it
 * has in flight).
 */
static void
backend_exit(int code, Datum arg)
{
	int			i;

	if (zk_ctl == NULL)
		return;
	for (i = 0; i < NBACKENDS; i++)
		if (BACKEND(i)->at_exit)
			BACKEND(i)->at_exit();
	zk_wake_worker();
}

/*
 * The dsa has no room for "need" bytes more (zklock.max_payload_memory):
 * 53200, "what" saying for what, "todo" what to do.
 */
void
zk_payload_memory_error(Size need, const char *what, const char *todo)
{
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("out of zklock payload memory"),
			 errdetail("%s needs %zu bytes of the shared memory zklock keeps payloads in, which is full (zklock.max_payload_memory is %d kB).",
					   what, need, zk_max_payload_kb),
			 errhint("%s A superuser can raise zklock.max_payload_memory (reload).", todo)));
}
