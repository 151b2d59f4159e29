/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The zklock background worker: owns the cluster's only ZooKeeper
 *	  session and serves the backends' requests.
 *
 *	  One process, one thread.  A WaitEventSet holds the worker's latch,
 *	  postmaster death and the ZooKeeper socket with the events that
 *	  zookeeper_interest() asks for; zookeeper_process() then runs the
 *	  client library's completions and watchers right here.
 *
 *	  The worker never holds zk_ctl->lock across a call that can block:
 *	  zookeeper_interest() (it may resolve names and connect),
 *	  zookeeper_process(), zookeeper_init() and zookeeper_close() run
 *	  without it, and every completion and watcher takes it for itself
 *	  (zk_worker_enter/leave, re-entrant).  ProcessConfigFile runs without
 *	  it too.  So a worker frozen or slowed anywhere in the network code
 *	  blocks no backend.
 *
 *	  Signals: SIGTERM ends the worker (its session is closed, so its nodes
 *	  go at once); SIGINT -- pg_cancel_backend(), which scripts that cancel
 *	  "everything active" send -- is ignored: a cancel never stops it.
 *
 *	  Crash restart: the session's id and password are kept in
 *	  <data directory>/pgsql_tmp_zklock.session (a temporary file, left out
 *	  of base backups).  A worker that starts and finds it -- its
 *	  predecessor died without closing, as in a crash restart of the
 *	  cluster -- first reattaches to that session and closes it, so the
 *	  old session's locks go at once instead of after the session timeout.
 *
 *	  Session life: connect with zklock.hosts; on connection loss the client
 *	  library reconnects by itself (the session is "suspended"); on expiry
 *	  every entry of the old session is settled by its recipe (recipe.h) and a new
 *	  session is opened.  A new zklock.hosts closes the session and opens a
 *	  new one on the new servers.
 *
 *	  Credentials (auth.c): every zookeeper_init -- a new session, or an old
 *	  one reattached to close it -- is followed by zoo_add_auth with the
 *	  digest credentials of zklock.auth_file, before any request.  A file
 *	  that may not be used means no session at all (state "auth failed"),
 *	  tried again every AUTH_RETRY_MS and at each reload; a reload that
 *	  changes the credentials closes the session and opens a new one.
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "batch.h"
#include "trust.h"

#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/postmaster.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

static char open_hosts[ZKLOCK_HOSTS_MAX];	/* hosts the handle was opened on */
static bool reopen_needed = false;	/* session expired: close, open anew */

/* the earliest time a recipe wants a turn, this turn (0: none) */
static TimestampTz wake_at = 0;

/*
 * A recipe wants the worker's next turn no later than at (a delayed item
 * or a hold falling due): the wait of this turn ends then.  Said anew each
 * turn; without it the worker waits up to a sixth of the session timeout
 * (at most a second) when nothing happens.
 */
void
zk_worker_wake_by(TimestampTz at)
{
	if (at != 0 && (wake_at == 0 || at < wake_at))
		wake_at = at;
}
static uint64 last_session_id = 0;
static TimestampTz next_open_at = 0;

/*
 * The credentials in use (zklock.auth_file, auth.c) and what became of
 * them (ZkAuthState).  Never logged.  A session is opened only with them:
 * a refused file means no session at all, retried every few seconds and at
 * every reload.
 */
static char cred[ZKLOCK_CRED_MAX];
static int	cred_state = ZKA_NONE;
static bool auth_backoff = false;	/* ZooKeeper refused them: wait */

#define AUTH_RETRY_MS	5000

/*
 * The proof of life: a sync sent every quarter of the session timeout.
 * Its answer proves the session was alive when it was SENT, so that send
 * time (not the time data happened to be read, which after a freeze of
 * the worker may be stale data) becomes last_contact, which COMMIT checks.
 * A sync, not a read: the server the client talks to forwards it to the
 * leader, so only the quorum can answer it.  A read is answered by that
 * server alone, also while it is cut off from its quorum, whose leader
 * meanwhile expires the session and lets another server lead or hold.
 */
static bool probe_inflight = false;
static bool session_to_save = false;
static TimestampTz probe_sent_at = 0;

#define SESSION_FILE	"pgsql_tmp_zklock.session"

/* The wait set and what it was built for */
static WaitEventSet *wes = NULL;
static int	wes_fd = -1;
static bool wes_connected = false;
static int	wes_sock_pos = -1;
static uint32 wes_sock_events = 0;

/*
 * Register the worker (from _PG_init): connected to no database, started
 * at a consistent state (hot standbys too), restarted a second after it
 * exits.
 */
void
zk_register_worker(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	/*
	 * The worker connects to no database; asking for a connection anyway
	 * makes it visible in pg_stat_activity.  Consistent state is the
	 * earliest such a worker may start, which includes hot standbys.
	 */
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "zklock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "zk_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "zklock worker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "zklock worker");
	worker.bgw_main_arg = (Datum) 0;
	worker.bgw_notify_pid = 0;
	RegisterBackgroundWorker(&worker);
}

/*
 * The client library's log lines go to the server log, at most a few per
 * ten seconds: while ZooKeeper is down it complains at every attempt.
 */
static void
zk_log_line(const char *message)
{
	static TimestampTz window_start = 0;
	static int	lines = 0;
	static int	dropped = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (now >= TimestampTzPlusMilliseconds(window_start, 10000))
	{
		if (dropped > 0)
			elog(LOG, "zklock: %d more zookeeper client messages were not logged",
				 dropped);
		window_start = now;
		lines = 0;
		dropped = 0;
	}
	if (lines++ < 5)
		elog(LOG, "zklock: zookeeper client: %s", message);
	else
		dropped++;
}

/* Publish the connection state zk_status() shows (ZkConnState); lock held */
static void
set_conn_state(int state)
{
	zk_ctl->conn_state = state;
}

/*
 * Session events: the global watcher.  Runs inside zookeeper_process()
 * or zookeeper_interest(), which run without the lock: it takes it itself.
 */
static void save_session(zhandle_t *h);
static void session_event(zhandle_t *h, int state);

/* The handle's global watcher: session events of the current handle only */
static void
session_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	volatile int depth;
	MemoryContext volatile cxt = CurrentMemoryContext;

	if (type != ZOO_SESSION_EVENT || h != zk_zh)
		return;
	zk_worker_enter();
	depth = zk_worker_lock_depth();
	PG_TRY();
	{
		session_event(h, state);
	}
	PG_CATCH();
	{
		zk_worker_recover(depth, cxt);
	}
	PG_END_TRY();
	zk_worker_leave();
}

static ZkLogLimit reconnect_log;

/*
 * A session event, lock held.  Also called when the worker notices the
 * client's state change without an event (the client library closes its
 * socket in some paths without telling the watcher).
 */
static void
session_event(zhandle_t *h, int state)
{
	if (state == ZOO_CONNECTED_STATE)
	{
		const clientid_t *cid = zoo_client_id(h);
		const char *server = zoo_get_current_server(h);
		uint64		sid = cid ? (uint64) cid->client_id : 0;

		if (sid != last_session_id)
		{
			zk_count(ZKCNT_SESSIONS, 1);
			session_to_save = true; /* written outside the lock */
			ereport(LOG,
					(errmsg("zklock: zookeeper session 0x%llx established with %s, timeout %d ms",
							(unsigned long long) sid, server ? server : "?",
							zoo_recv_timeout(h))));
		}
		else
		{
			zk_count(ZKCNT_RECONNECTS, 1);
			/* (a network that drops the connection can repeat it at will) */
			if (zk_log_limited(&reconnect_log, "reconnected zookeeper session"))
				ereport(LOG,
						(errmsg("zklock: reconnected zookeeper session 0x%llx to %s",
								(unsigned long long) sid, server ? server : "?")));
		}
		/*
		 * A new session was created by the quorum: proof of life.  A
		 * session taken up again is not: a server cut off from its quorum
		 * accepts it while the leader expires it.  The next answered sync
		 * (sent at once) proves it.
		 */
		if (sid != last_session_id)
			zk_ctl->last_contact = GetCurrentTimestamp();
		probe_sent_at = 0;
		last_session_id = sid;
		zk_ctl->session_id = sid;
		zk_ctl->session_timeout = zoo_recv_timeout(h);
		strlcpy(zk_ctl->current_server, server ? server : "",
				sizeof(zk_ctl->current_server));
		set_conn_state(ZKC_CONNECTED);
		zk_recipes_connected();
		zk_session_set(h, sid);
		zk_recipes_reconnected();
	}
	else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
		;						/* below */
	else
	{
		/* connecting, associating, not connected, or anything else */
		if (zk_ctl->conn_state == ZKC_CONNECTED)
			ereport(LOG,
					(errmsg("zklock: lost connection to zookeeper, session 0x%llx suspended",
							(unsigned long long) last_session_id)));
		if (zk_ctl->conn_state != ZKC_EXPIRED)
			set_conn_state(last_session_id ? ZKC_SUSPENDED : ZKC_CONNECTING);
	}
	if (state == ZOO_EXPIRED_SESSION_STATE)
	{
		ereport(LOG,
				(errmsg("zklock: zookeeper session 0x%llx expired",
						(unsigned long long) last_session_id)));
		set_conn_state(ZKC_EXPIRED);
		reopen_needed = true;
	}
	else if (state == ZOO_AUTH_FAILED_STATE)
	{
		/* not a connection problem: retried slowly, shown as such */
		ereport(LOG,
				(errmsg("zklock: zookeeper refused the credentials of zklock.auth_file (session 0x%llx)",
						(unsigned long long) last_session_id),
				 errhint("Check zklock.auth_file; the worker tries again every %d ms.",
						 AUTH_RETRY_MS)));
		set_conn_state(ZKC_AUTH_FAILED);
		zk_ctl->auth_state = ZKA_FAILED;
		auth_backoff = true;
		reopen_needed = true;
	}
}

/* ---- the session file (crash restart) ---- */

/*
 * Remember the session's id and password, so that a worker started after
 * a crash can end it at once.  Written to a temporary name, then renamed.
 */
static void
save_session(zhandle_t *h)
{
	const clientid_t *cid = zoo_client_id(h);
	char		host[256];
	char		buf[MAXPGPATH + 512];
	int			len;
	int			i;
	bool		ok;

	if (cid == NULL || cid->client_id == 0)
		return;
	if (gethostname(host, sizeof(host)) != 0)
		strlcpy(host, "unknown", sizeof(host));
	host[sizeof(host) - 1] = '\0';
	len = snprintf(buf, sizeof(buf), "%llx " UINT64_FORMAT " %d ",
				   (unsigned long long) cid->client_id,
				   GetSystemIdentifier(), PostPortNumber);
	for (i = 0; i < (int) sizeof(cid->passwd); i++)
		len += snprintf(buf + len, sizeof(buf) - len, "%02x",
						(unsigned char) cid->passwd[i]);
	/* where it belongs: a copy of the data directory elsewhere must not use it */
	len += snprintf(buf + len, sizeof(buf) - len, "\n%s\n%s\n", host, DataDir);
	if (len >= (int) sizeof(buf))
		return;

	/*
	 * The session's password lets anyone end it (and so free this server's
	 * locks): the file is the server user's alone (zk_write_private_file).
	 */
	ok = zk_write_private_file(SESSION_FILE, SESSION_FILE ".new", buf, len, false);
	explicit_bzero(buf, sizeof(buf));
	if (!ok)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("zklock: could not write \"%s\": %m", SESSION_FILE)));
}

/* Read one line into buf without its newline; false at EOF */
static bool
read_line(FILE *f, char *buf, int len)
{
	if (fgets(buf, len, f) == NULL)
		return false;
	buf[strcspn(buf, "\n")] = '\0';
	return true;
}

/* Remove the session file: its session is closed, gone, or not ours */
static void
forget_session(void)
{
	(void) unlink(SESSION_FILE);
}

/* The watcher of the handle close_old_session opens: no event matters */
static void
old_session_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
}

/*
 * A predecessor left a session behind (it crashed): reattach to it and
 * close it, so that its ephemeral nodes -- locks other servers wait for --
 * go now rather than after the session timeout.  Bounded by a few
 * seconds; if ZooKeeper cannot be reached, the session simply expires.
 * Runs without the lock.
 */
static void
close_old_session(void)
{
	FILE	   *f;
	unsigned long long sid = 0;
	unsigned long long sysid = 0;
	int			port = 0;
	char		pw[64];
	char		line[256];
	char		myhost[256];
	char		fhost[256];
	char		fdir[MAXPGPATH];
	clientid_t	cid;
	zhandle_t  *oh;
	TimestampTz deadline;
	int			i;
	bool		attached = false;
	const char *outcome = "could not reach, so did not close,";

	f = fopen(SESSION_FILE, "r");
	if (f == NULL)
		return;
	memset(pw, 0, sizeof(pw));
	if (gethostname(myhost, sizeof(myhost)) != 0)
		strlcpy(myhost, "unknown", sizeof(myhost));
	myhost[sizeof(myhost) - 1] = '\0';
	if (!read_line(f, line, sizeof(line)) ||
		sscanf(line, "%llx %llu %d %40s", &sid, &sysid, &port, pw) != 4 ||
		!read_line(f, fhost, sizeof(fhost)) ||
		!read_line(f, fdir, sizeof(fdir)) ||
		strcmp(fhost, myhost) != 0 || strcmp(fdir, DataDir) != 0 ||
		sysid != (unsigned long long) GetSystemIdentifier() ||
		port != PostPortNumber || strlen(pw) != 2 * sizeof(cid.passwd) ||
		sid == 0 || zk_hosts[0] == '\0')
	{
		fclose(f);
		forget_session();
		return;
	}
	fclose(f);

	memset(&cid, 0, sizeof(cid));
	cid.client_id = (int64_t) sid;
	for (i = 0; i < (int) sizeof(cid.passwd); i++)
	{
		unsigned int b;

		if (sscanf(pw + 2 * i, "%2x", &b) != 1)
		{
			forget_session();
			return;
		}
		cid.passwd[i] = (char) b;
	}

	/* with the credentials, as every session (none: not without them) */
	cred_state = zk_auth_load(cred, sizeof(cred));
	if (cred_state == ZKA_REFUSED)
	{
		forget_session();
		return;
	}
	oh = zookeeper_init2(zk_hosts, old_session_watcher, zk_session_timeout,
						 &cid, NULL, 0, zk_log_line);
	if (oh == NULL)
	{
		forget_session();
		return;
	}
	if (cred_state == ZKA_DIGEST &&
		zoo_add_auth(oh, "digest", cred, (int) strlen(cred), NULL, NULL) != ZOK)
	{
		zookeeper_close(oh);
		forget_session();
		return;
	}
	zoo_set_servers_resolution_delay(oh, 60000);
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   Min(zk_session_timeout, 5000));
	while (GetCurrentTimestamp() < deadline)
	{
		int			fd = -1;
		int			interest = 0;
		struct timeval tv = {0, 100000};
		WaitEventSet *set;
		WaitEvent	ev;
		int			rc;
		int			st = zoo_state(oh);

		if (st == ZOO_CONNECTED_STATE)
		{
			attached = true;
			break;
		}
		if (st == ZOO_EXPIRED_SESSION_STATE || st == ZOO_AUTH_FAILED_STATE)
		{
			outcome = (st == ZOO_EXPIRED_SESSION_STATE) ?
				"found already expired" : "was refused (credentials) and did not close";
			break;
		}
		rc = zookeeper_interest(oh, &fd, &interest, &tv);
		if (rc != ZOK && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT)
			break;
		set = zk_create_wait_event_set(CurrentMemoryContext, 3);
		AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		if (fd >= 0 && interest != 0)
			AddWaitEventToSet(set,
							  ((interest & ZOOKEEPER_READ) ? WL_SOCKET_READABLE : 0) |
							  ((interest & ZOOKEEPER_WRITE) ? WL_SOCKET_WRITEABLE : 0),
							  fd, NULL, NULL);
		rc = WaitEventSetWait(set, Min(100L, tv.tv_sec * 1000L + tv.tv_usec / 1000 + 1),
							  &ev, 1, zk_wait_event(ZKW_WORKER_CLOSE));
		FreeWaitEventSet(set);
		if (rc > 0 && (ev.events & WL_LATCH_SET))
			ResetLatch(MyLatch);
		if (rc > 0 && (ev.events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE)))
			zookeeper_process(oh, ((ev.events & WL_SOCKET_READABLE) ? ZOOKEEPER_READ : 0) |
							  ((ev.events & WL_SOCKET_WRITEABLE) ? ZOOKEEPER_WRITE : 0));
		CHECK_FOR_INTERRUPTS();
	}
	zookeeper_close(oh);
	forget_session();
	ereport(LOG,
			(errmsg("zklock: %s the zookeeper session 0x%llx left by a previous worker",
					attached ? "closed" : outcome, sid)));
}

/*
 * Open a session on zklock.hosts.  Runs without the lock (resolving the
 * servers' names may block); takes it to publish the new state.
 */
static void
session_open(void)
{
	zhandle_t  *h = NULL;

	int			conn;

	strlcpy(open_hosts, zk_hosts, sizeof(open_hosts));
	last_session_id = 0;
	cred_state = ZKA_NONE;
	if (zk_hosts[0] != '\0')
		cred_state = zk_auth_load(cred, sizeof(cred));
	if (zk_hosts[0] != '\0')
		zk_acl_build(cred_state == ZKA_DIGEST);
	if (zk_hosts[0] != '\0' && cred_state == ZKA_REFUSED)
	{
		/* never without the credentials it was told to use */
		next_open_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   AUTH_RETRY_MS);
	}
	else if (zk_hosts[0] != '\0')
	{
		zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
		h = zookeeper_init2(zk_hosts, session_watcher, zk_session_timeout,
							NULL, NULL, 0, zk_log_line);

		/*
		 * The credentials go with the handshake of every connection of the
		 * session, ahead of any request (the library queues them first).
		 */
		if (h != NULL && cred_state == ZKA_DIGEST &&
			zoo_add_auth(h, "digest", cred, (int) strlen(cred), NULL, NULL) != ZOK)
		{
			ereport(WARNING,
					(errmsg("zklock: could not give the zookeeper client the credentials of zklock.auth_file")));
			zookeeper_close(h);
			h = NULL;
			errno = 0;
		}
		if (h == NULL)
		{
			ereport(WARNING,
					(errmsg("zklock: could not open a zookeeper session on \"%s\": %m",
							zk_hosts),
					 errhint("Check zklock.hosts; it must be a list of host:port pairs.")));
			next_open_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
		}
		else
		{
			/*
			 * By default the client resolves the connect string at every
			 * zookeeper_interest(), which costs several system calls per
			 * wake.  Resolving once a minute, and after every connection
			 * loss, is enough.
			 */
			zoo_set_servers_resolution_delay(h, 60000);
		}
	}

	if (zk_hosts[0] == '\0')
		conn = ZKC_NOT_CONFIGURED;
	else if (cred_state == ZKA_REFUSED)
		conn = ZKC_AUTH_FAILED;
	else
		conn = ZKC_CONNECTING;
	zk_worker_enter();
	zk_session_set(h, 0);
	zk_ctl->session_id = 0;
	zk_ctl->session_timeout = 0;
	zk_ctl->current_server[0] = '\0';
	zk_ctl->auth_state = cred_state;
	strlcpy(zk_ctl->servers, zk_hosts, sizeof(zk_ctl->servers));
	set_conn_state(conn);
	zk_worker_leave();
}

/*
 * Before zookeeper_close(): read and drop what the server is still sending.
 *
 * zookeeper_close() of the single-threaded library sends the close request
 * and closes the socket at once.  If answers to requests still in flight
 * sit unread in the socket then, the kernel resets the connection instead
 * of closing it, and the server may drop the close request it had not read
 * yet: the session then lives on until it expires (zklock.session_timeout),
 * and the next session of this run must wait that long before it settles
 * what was left in doubt (history.c), dequeues included.  The answers
 * dropped here are the ones zookeeper_close() would answer ZCLOSING anyway:
 * the recipes already forgot the session.  Bounded: at most
 * CLOSE_DRAIN_MAX_MS, done once the socket stays quiet CLOSE_DRAIN_QUIET_MS.
 */
#define CLOSE_DRAIN_QUIET_MS	20
#define CLOSE_DRAIN_MAX_MS		500

static void
drain_before_close(zhandle_t *h)
{
	int			fd = -1;
	int			interest = 0;
	struct timeval tv = {0, 0};
	TimestampTz deadline;
	char		buf[8192];

	if (zoo_state(h) != ZOO_CONNECTED_STATE ||
		zookeeper_interest(h, &fd, &interest, &tv) != ZOK || fd < 0)
		return;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), CLOSE_DRAIN_MAX_MS);
	while (GetCurrentTimestamp() < deadline)
	{
		struct pollfd pfd;
		ssize_t		n;

		pfd.fd = fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, 1, CLOSE_DRAIN_QUIET_MS) <= 0 || !(pfd.revents & POLLIN))
			break;				/* quiet (or gone): the close can go */
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n <= 0)
			break;
	}
}

/*
 * Close the session: its ephemeral nodes go with it.  Every entry that
 * depended on it is settled.  zookeeper_close() may wait for the server,
 * so it runs without the lock.
 */
static void
session_close(const char *why)
{
	zhandle_t  *h = zk_zh;

	/*
	 * Every entry of the session is lost before the close reaches
	 * ZooKeeper: once it does, its ephemeral nodes are gone and another
	 * server may be granted a lock this one holds, so a COMMIT here must
	 * already see the loss.
	 */
	zk_worker_enter();
	zk_session_set(NULL, 0);
	probe_inflight = false;
	zk_recipes_session_lost(why);
	zk_ctl->session_id = 0;
	zk_ctl->session_timeout = 0;
	zk_ctl->current_server[0] = '\0';
	set_conn_state(ZKC_CONNECTING);
	last_session_id = 0;
	zk_worker_leave();
	if (h != NULL)
	{
		drain_before_close(h);
		zookeeper_close(h);
		forget_session();
		zk_worker_enter();
		zk_recipes_session_closed();
		zk_worker_leave();
	}
}

/*
 * Settle every entry at worker exit: the session is closed, so no node of
 * ours remains; owners are told.
 */
static void
worker_exit(int code, Datum arg)
{
	LWLockReleaseAll();
	zk_worker_reset();
	session_close("The zklock worker exited");
	zk_worker_enter();
	zk_ctl->worker_latch = NULL;
	zk_ctl->worker_pid = 0;
	set_conn_state(ZKC_STOPPED);
	zk_worker_leave();
}

/*
 * Rebuild the wait set when the socket changed or the session just became
 * usable (a reconnect may reuse a descriptor number for a new socket).
 */
static void
prepare_wait_set(int fd, int interest, bool connected)
{
	uint32		events = 0;

	if (interest & ZOOKEEPER_READ)
		events |= WL_SOCKET_READABLE;
	if (interest & ZOOKEEPER_WRITE)
		events |= WL_SOCKET_WRITEABLE;

	if (wes == NULL || fd != wes_fd || !connected || !wes_connected ||
		(fd >= 0 && events == 0))
	{
		if (wes)
			FreeWaitEventSet(wes);
		wes = zk_create_wait_event_set(TopMemoryContext, 3);
		AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		wes_sock_pos = -1;
		if (fd >= 0 && events != 0)
			wes_sock_pos = AddWaitEventToSet(wes, events, fd, NULL, NULL);
		wes_fd = (wes_sock_pos >= 0) ? fd : -1;
		wes_connected = connected;
		wes_sock_events = events;
	}
	else if (wes_sock_pos >= 0 && events != wes_sock_events)
	{
		ModifyWaitEvent(wes, wes_sock_pos, events, NULL);
		wes_sock_events = events;
	}
}

/*
 * Apply a reloaded configuration (no lock held).  zklock.root is
 * restart-only: a root changed under held locks would let a second holder
 * in through the new path.
 */
static void
apply_settings(void)
{
	if (strcmp(open_hosts, zk_hosts) != 0 ||
		(zk_zh == NULL && zk_ctl->conn_state == ZKC_NOT_CONFIGURED && zk_hosts[0] != '\0'))
	{
		ereport(LOG,
				(errmsg("zklock: zklock.hosts changed to \"%s\", opening a new session",
						zk_hosts)));
		session_close("The zklock.hosts setting changed");
		next_open_at = 0;
		if (zk_hosts[0] == '\0')
		{
			strlcpy(open_hosts, "", sizeof(open_hosts));
			zk_worker_enter();
			strlcpy(zk_ctl->servers, "", sizeof(zk_ctl->servers));
			set_conn_state(ZKC_NOT_CONFIGURED);
			zk_worker_leave();
		}
		return;
	}
	if (zk_hosts[0] != '\0')
	{
		char		newcred[ZKLOCK_CRED_MAX];
		int			newstate = zk_auth_load(newcred, sizeof(newcred));
		bool		changed = (newstate != cred_state ||
							   strcmp(newcred, cred) != 0);

		explicit_bzero(newcred, sizeof(newcred));
		if (changed && zk_zh != NULL)
		{
			ereport(LOG,
					(errmsg("zklock: the zookeeper credentials (zklock.auth_file) changed, opening a new session")));
			session_close("The ZooKeeper credentials changed");
			next_open_at = 0;
			auth_backoff = false;
		}
		else if (changed || (zk_zh == NULL && cred_state == ZKA_REFUSED))
		{
			next_open_at = 0;	/* no session yet: try now */
			auth_backoff = false;
		}
	}
	/* a new zklock.acl applies to the nodes created from now on */
	if (zk_hosts[0] != '\0')
		zk_acl_build(cred_state == ZKA_DIGEST);
}

/*
 * Follow the client's real state: the library sometimes drops its socket
 * (a failed non-blocking send) without a session event, and must not be
 * shown, nor trusted, as connected then.  Lock held.
 */
static void
sync_conn_state(void)
{
	int			st;

	if (zk_zh == NULL)
		return;
	st = zoo_state(zk_zh);
	if (st == ZOO_EXPIRED_SESSION_STATE || st == ZOO_AUTH_FAILED_STATE)
	{
		if (zk_ctl->conn_state != ZKC_EXPIRED &&
			zk_ctl->conn_state != ZKC_AUTH_FAILED)
			session_event(zk_zh, st);
	}
	else if (st != ZOO_CONNECTED_STATE && zk_ctl->conn_state == ZKC_CONNECTED)
		session_event(zk_zh, st);
	else if (st != ZOO_CONNECTED_STATE && zk_ctl->conn_state == ZKC_SUSPENDED &&
			 !reopen_needed && zk_ctl->session_timeout > 0 &&
			 GetCurrentTimestamp() >
			 TimestampTzPlusMilliseconds(zk_ctl->last_contact,
										 2 * zk_ctl->session_timeout))
	{
		/*
		 * Suspended for twice the session timeout.  A live ensemble has
		 * expired the session long ago, and one that refuses it -- replaced
		 * by an empty ensemble or restored from an older snapshot, whose
		 * last zxid is below what this client has seen -- would refuse it
		 * forever: the client library retries without end and never
		 * reports the session expired.  Give it up as if it had expired;
		 * the new session starts from zxid 0, which every server accepts.
		 */
		ereport(LOG,
				(errmsg("zklock: giving up zookeeper session 0x%llx: no contact for %d ms, twice its timeout",
						(unsigned long long) last_session_id,
						(int) ((GetCurrentTimestamp() - zk_ctl->last_contact) / 1000))));
		set_conn_state(ZKC_EXPIRED);
		reopen_needed = true;
	}
}

/* Completion of the zoo_async sent by maybe_probe() */
static void
probe_done(int rc, const char *value, const void *ctx)
{
	TimestampTz sent = (TimestampTz) (uintptr_t) ctx;

	zk_worker_enter();
	probe_inflight = false;
	if (rc == ZOK && sent > zk_ctl->last_contact)
		zk_ctl->last_contact = sent;
	zk_worker_leave();
}

/* Send the proof of life when due.  Lock held. */
static void
maybe_probe(void)
{
	TimestampTz now;
	int			every;

	if (zk_zh == NULL || probe_inflight || zoo_state(zk_zh) != ZOO_CONNECTED_STATE ||
		zk_ctl->conn_state != ZKC_CONNECTED)
		return;
	every = Max(zk_ctl->session_timeout / 4, 100);
	now = GetCurrentTimestamp();
	if (now < TimestampTzPlusMilliseconds(probe_sent_at, every))
		return;
	if (zoo_async(zk_zh, "/", probe_done, (const void *) (uintptr_t) now) == ZOK)
	{
		probe_inflight = true;
		probe_sent_at = now;
	}
}

/*
 * Serve the queue: every entry a backend filled in or let go since the
 * last turn, and the retry list once the session is usable.  Lock held.
 */
static void
serve_queue(void)
{
	uint32		idx;

	/* let go by their owners (lock-free stack, see shmem.c) */
	idx = zk_release_take_all();
	while (idx != ZKLOCK_NO_ENTRY)
	{
		ZkEntry    *e = zk_entry(idx);

		idx = e->rel_next;
		e->rel_next = ZKLOCK_NO_ENTRY;
		if (e->state == ZKE_FREE || e->released)
			continue;
		if (e->outcome == ZKO_NONE)
			zk_count(ZKCNT_ABANDONED, 1);
		e->released = true;
		if (!e->queued)
			zk_recipe_drive(e);
		/* else served below, when taken off the queue */
	}

	while ((idx = zk_dequeue()) != ZKLOCK_NO_ENTRY)
		zk_recipe_drive(zk_entry(idx));

	if (zk_zh != NULL && zoo_state(zk_zh) == ZOO_CONNECTED_STATE &&
		zk_ctl->conn_state == ZKC_CONNECTED)
		zk_recipes_reconnected();

	/* what the turn gathered goes now, in as few multis as it takes */
	if (zk_zh != NULL)
		zk_batch_pump();
}

/*
 * The start of a turn of the worker's loop: nothing held, a reload, a
 * session to close or open, the session's id to save.
 */
static void
worker_turn_start(void)
{
	/*
	 * Nothing is held at the top of the loop.  Were the lock (or any
	 * other) still held here, interrupts would stay held off with it:
	 * the worker would go on serving but never see SIGTERM, and
	 * PostgreSQL could not shut down.  Say so and let go.
	 */
	if (zk_worker_lock_depth() != 0 || InterruptHoldoffCount != 0)
	{
		ereport(WARNING,
				(errmsg("zklock: the worker still held its lock at the top of its loop (depth %d, interrupts held off %u)",
						zk_worker_lock_depth(), InterruptHoldoffCount),
				 errdetail("This is a bug in zklock; the worker releases it and goes on.")));
		LWLockReleaseAll();
		zk_worker_reset();
		zk_worker_flush_wakes();
		InterruptHoldoffCount = 0;
	}
	CHECK_FOR_INTERRUPTS();

	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
		apply_settings();
		zk_dsa_apply_limit();
		zk_recipes_reload();
		zk_kept_request();		/* the quota nodes checked again (kept.c) */
	}
	if (reopen_needed)
	{
		reopen_needed = false;
		session_close(auth_backoff ? "ZooKeeper refused the credentials" :
					  "The ZooKeeper session expired");
		next_open_at = auth_backoff ?
			TimestampTzPlusMilliseconds(GetCurrentTimestamp(), AUTH_RETRY_MS) : 0;
		if (auth_backoff)
		{
			zk_worker_enter();
			set_conn_state(ZKC_AUTH_FAILED);
			zk_worker_leave();
		}
		auth_backoff = false;
	}
	if (zk_zh == NULL && zk_hosts[0] != '\0' &&
		GetCurrentTimestamp() >= next_open_at)
		session_open();

	if (session_to_save && zk_zh != NULL)
	{
		session_to_save = false;
		save_session(zk_zh);
	}
}

/*
 * What the wait reported (nev events): the latch, ZooKeeper's socket.
 * The wait asks for every event at once, so a socket that was readable
 * when the latch woke the worker is reported with it; only when the latch
 * was already set as the wait began (the wait then returns it alone,
 * without looking at the socket) is the socket polled here -- one system
 * call less per wake by a backend (issue 40).
 */
static void
worker_handle_wait(int nev, WaitEvent *ev, int fd, int interest,
				   bool latch_was_set)
{
	bool		latch = false;
	bool		sock_seen = false;
	int			zevents = 0;
	int			i;

	for (i = 0; i < nev; i++)
	{
		if (ev[i].events & WL_LATCH_SET)
			latch = true;
		if (ev[i].pos == wes_sock_pos &&
			(ev[i].events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE)))
		{
			sock_seen = true;
			if (ev[i].events & WL_SOCKET_READABLE)
				zevents |= ZOOKEEPER_READ;
			if (ev[i].events & WL_SOCKET_WRITEABLE)
				zevents |= ZOOKEEPER_WRITE;
		}
	}
	if (latch)
		ResetLatch(MyLatch);

	if (zevents != 0 && zk_zh != NULL)
	{
		zookeeper_process(zk_zh, zevents);
		zk_worker_enter();
		sync_conn_state();
		zk_worker_leave();
	}
	else if (latch && latch_was_set && !sock_seen && zk_zh != NULL &&
			 fd >= 0 && (interest & ZOOKEEPER_READ))
	{
		/*
		 * Woken by a request: what ZooKeeper has already sent (a watch
		 * that fired, say) is read first, so that the request is served
		 * on what the worker could know.
		 */
		struct pollfd pfd;

		pfd.fd = fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		if (poll(&pfd, 1, 0) > 0 && pfd.revents != 0)
		{
			zookeeper_process(zk_zh, ZOOKEEPER_READ);
			zk_worker_enter();
			sync_conn_state();
			zk_worker_leave();
		}
	}
}

/*
 * The worker's entry point (bgw_function_name): signals, its place in the
 * control struct, a predecessor's session closed and a new one opened, then
 * the loop whose turn src/README, section 6 bounds.  Never returns (SIGTERM
 * exits through die(), worker_exit closes the session).
 */
void
zk_worker_main(Datum arg)
{
#ifdef __GLIBC__

	/*
	 * Payloads up to ZooKeeper's 1 MB pass through the worker; glibc raises
	 * its mmap threshold after freeing such a block, so the next ones would
	 * come from the heap and stay mapped after a storm of large answers.
	 * A fixed threshold gives every large block back when it is freed.
	 */
	(void) mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	pqsignal(SIGINT, SIG_IGN);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("zklock worker");
	zk_wait_events_init();

	before_shmem_exit(worker_exit, (Datum) 0);

	zk_worker_enter();
	zk_ctl->worker_latch = MyLatch;
	zk_ctl->worker_pid = MyProcPid;
	zk_ctl->worker_generation++;
	zk_recipes_worker_start();
	zk_retry_take_over();
	set_conn_state(zk_hosts[0] == '\0' ? ZKC_NOT_CONFIGURED : ZKC_CONNECTING);
	zk_worker_leave();

	zk_dsa_apply_limit();
	close_old_session();
	session_open();

	for (;;)
	{
		int			fd = -1;
		int			interest = 0;
		struct timeval tv = {1, 0};
		long		timeout_ms = 1000;
		long		max_wait = 1000;
		WaitEvent	ev[3];
		int			nev;
		bool		connected = false;
		bool		latch_was_set;

		worker_turn_start();
		wake_at = 0;

		zk_worker_enter();
		serve_queue();
		zk_worker_leave();

		if (zk_zh != NULL)
		{
			int			rc = zookeeper_interest(zk_zh, &fd, &interest, &tv);

			if (rc != ZOK && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT)
			{
				if (rc == ZINVALIDSTATE || rc == ZSESSIONEXPIRED)
					reopen_needed = true;
				fd = -1;
			}
			zk_worker_enter();
			sync_conn_state();
			connected = (zoo_state(zk_zh) == ZOO_CONNECTED_STATE);
			zk_sock_fd = connected ? fd : -1;	/* batch.c corks it */
			serve_queue();		/* completions may have queued retries */
			maybe_probe();
			if (zk_ctl->session_timeout > 0)
				max_wait = Max(zk_ctl->session_timeout / 6, 50);
			zk_worker_leave();
			timeout_ms = tv.tv_sec * 1000L + (tv.tv_usec + 999) / 1000;
			if (timeout_ms < 0 || reopen_needed)
				timeout_ms = 0;
			if (timeout_ms > max_wait)
				timeout_ms = max_wait;
		}
		if (wake_at != 0)
		{
			long		until = (long) ((wake_at - GetCurrentTimestamp() + 999) / 1000);

			timeout_ms = Min(timeout_ms, Max(until, 0));
		}

		zk_batch_uncork();
		prepare_wait_set(fd, interest, connected);
		latch_was_set = MyLatch->is_set;
		nev = WaitEventSetWait(wes, timeout_ms, ev, lengthof(ev),
							   zk_wait_event(ZKW_WORKER_MAIN));

		worker_handle_wait(nev, ev, fd, interest, latch_was_set);
	}
}
