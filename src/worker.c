/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The zklock background worker: owns the cluster's only ZooKeeper
 *	  session and serves the backends' requests.
 *
 *	  One process, one thread.  A WaitEventSet holds the worker's latch,
 *	  postmaster death and the ZooKeeper socket with the events that
 *	  zookeeper_interest() asks for; zookeeper_process() then runs the
 *	  client library's completions and watchers right here.  The worker
 *	  holds zk_ctl->lock whenever it calls into the client library, so every
 *	  completion may update shared entries directly.
 *
 *	  Session life: connect with zklock.hosts; on connection loss the client
 *	  library reconnects by itself (the session is "suspended"); on expiry
 *	  every entry of the old session is settled (recipe_lock.c) and a new
 *	  session is opened.  A new zklock.hosts closes the session and opens a
 *	  new one on the new servers.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"

#include <zookeeper.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"

static zhandle_t *zh = NULL;
static char open_hosts[ZKLOCK_HOSTS_MAX];	/* hosts the handle was opened on */
static bool reopen_needed = false;	/* session expired: close, open anew */
static uint64 last_session_id = 0;
static TimestampTz next_open_at = 0;

/* The wait set and what it was built for */
static WaitEventSet *wes = NULL;
static int	wes_fd = -1;
static bool wes_connected = false;
static int	wes_sock_pos = -1;
static uint32 wes_sock_events = 0;

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
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "zklock_worker_main");
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

static void
set_conn_state(int state)
{
	zk_ctl->conn_state = state;
}

/*
 * Session events: the global watcher.  Runs inside zookeeper_process()
 * or zookeeper_interest(), so the lock is held.
 */
static void
session_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	if (type != ZOO_SESSION_EVENT)
		return;

	if (state == ZOO_CONNECTED_STATE)
	{
		const clientid_t *cid = zoo_client_id(h);
		const char *server = zoo_get_current_server(h);
		uint64		sid = cid ? (uint64) cid->client_id : 0;

		if (sid != last_session_id)
		{
			zk_count(ZKCNT_SESSIONS, 1);
			ereport(LOG,
					(errmsg("zklock: zookeeper session 0x%llx established with %s, timeout %d ms",
							(unsigned long long) sid, server ? server : "?",
							zoo_recv_timeout(h))));
		}
		else
		{
			zk_count(ZKCNT_RECONNECTS, 1);
			ereport(LOG,
					(errmsg("zklock: reconnected zookeeper session 0x%llx to %s",
							(unsigned long long) sid, server ? server : "?")));
		}
		last_session_id = sid;
		zk_ctl->session_id = sid;
		zk_ctl->session_timeout = zoo_recv_timeout(h);
		zk_ctl->last_contact = GetCurrentTimestamp();
		strlcpy(zk_ctl->current_server, server ? server : "",
				sizeof(zk_ctl->current_server));
		set_conn_state(ZKC_CONNECTED);
		zk_lock_set_handle(h, sid);
		zk_lock_reconnected(h);
	}
	else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE)
	{
		if (zk_ctl->conn_state == ZKC_CONNECTED)
			ereport(LOG,
					(errmsg("zklock: lost connection to zookeeper, session 0x%llx suspended",
							(unsigned long long) last_session_id)));
		set_conn_state(last_session_id ? ZKC_SUSPENDED : ZKC_CONNECTING);
	}
	else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
	{
		ereport(LOG,
				(errmsg("zklock: zookeeper session 0x%llx %s",
						(unsigned long long) last_session_id,
						state == ZOO_EXPIRED_SESSION_STATE ? "expired" : "failed authentication")));
		set_conn_state(ZKC_EXPIRED);
		reopen_needed = true;
	}
}

/*
 * Open a session on zklock.hosts.  Lock held by the caller.
 */
static void
session_open(void)
{
	zk_ctl->session_id = 0;
	zk_ctl->session_timeout = 0;
	zk_ctl->current_server[0] = '\0';
	strlcpy(open_hosts, zklock_hosts, sizeof(open_hosts));
	strlcpy(zk_ctl->servers, zklock_hosts, sizeof(zk_ctl->servers));
	last_session_id = 0;

	if (zklock_hosts[0] == '\0')
	{
		set_conn_state(ZKC_NOT_CONFIGURED);
		return;
	}

	zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
	zh = zookeeper_init2(zklock_hosts, session_watcher, zklock_session_timeout,
						 NULL, NULL, 0, zk_log_line);
	if (zh == NULL)
	{
		ereport(WARNING,
				(errmsg("zklock: could not open a zookeeper session on \"%s\": %m",
						zklock_hosts),
				 errhint("Check zklock.hosts; it must be a list of host:port pairs.")));
		set_conn_state(ZKC_CONNECTING);
		next_open_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
		return;
	}
	/*
	 * By default the client resolves the connect string at every
	 * zookeeper_interest(), which costs several system calls per wake.
	 * Resolving once a minute, and after every connection loss, is enough.
	 */
	zoo_set_servers_resolution_delay(zh, 60000);
	set_conn_state(ZKC_CONNECTING);
	zk_lock_set_handle(zh, 0);
}

/*
 * Close the session: its ephemeral nodes go with it.  Every entry that
 * depended on it is settled.  Lock held by the caller.
 */
static void
session_close(const char *why)
{
	if (zh != NULL)
	{
		zookeeper_close(zh);
		zh = NULL;
	}
	zk_lock_set_handle(NULL, 0);
	zk_lock_session_lost(why);
	zk_ctl->session_id = 0;
	zk_ctl->session_timeout = 0;
	zk_ctl->current_server[0] = '\0';
	set_conn_state(ZKC_CONNECTING);
	last_session_id = 0;
}

/*
 * Settle every entry at worker exit: the session is closed, so no node of
 * ours remains; owners are told.
 */
static void
worker_exit(int code, Datum arg)
{
	LWLockReleaseAll();
	LWLockAcquire(zk_ctl->lock, LW_EXCLUSIVE);
	session_close("The zklock worker exited");
	zk_ctl->worker_latch = NULL;
	zk_ctl->worker_pid = 0;
	set_conn_state(ZKC_STOPPED);
	LWLockRelease(zk_ctl->lock);
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
		wes = CreateWaitEventSet(TopMemoryContext, 3);
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
 * Apply a reloaded configuration.  Lock held by the caller.
 */
static void
apply_settings(void)
{
	if (strcmp(open_hosts, zklock_hosts) != 0 ||
		(zh == NULL && zk_ctl->conn_state == ZKC_NOT_CONFIGURED))
	{
		ereport(LOG,
				(errmsg("zklock: zklock.hosts changed to \"%s\", opening a new session",
						zklock_hosts)));
		session_close("The zklock.hosts setting changed");
		next_open_at = 0;
		if (zklock_hosts[0] == '\0')
		{
			strlcpy(open_hosts, "", sizeof(open_hosts));
			strlcpy(zk_ctl->servers, "", sizeof(zk_ctl->servers));
			set_conn_state(ZKC_NOT_CONFIGURED);
		}
	}
}

/*
 * Serve the queue: every entry a backend filled in or let go since the
 * last turn.  Lock held by the caller.
 */
static void
serve_queue(void)
{
	uint32		idx;

	while ((idx = zk_dequeue()) != ZKLOCK_NO_ENTRY)
		zk_lock_drive(zh, zk_entry(idx));
}

void
zklock_worker_main(Datum arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("zklock worker");

	before_shmem_exit(worker_exit, (Datum) 0);

	LWLockAcquire(zk_ctl->lock, LW_EXCLUSIVE);
	zk_ctl->worker_latch = MyLatch;
	zk_ctl->worker_pid = MyProcPid;
	zk_ctl->worker_generation++;
	session_open();
	LWLockRelease(zk_ctl->lock);

	for (;;)
	{
		int			fd = -1;
		int			interest = 0;
		struct timeval tv = {1, 0};
		long		timeout_ms = -1;
		WaitEvent	ev;
		int			nev;
		bool		connected = false;

		CHECK_FOR_INTERRUPTS();

		LWLockAcquire(zk_ctl->lock, LW_EXCLUSIVE);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			apply_settings();
		}
		if (reopen_needed)
		{
			reopen_needed = false;
			session_close("The ZooKeeper session expired");
			next_open_at = 0;
		}
		if (zh == NULL && zklock_hosts[0] != '\0')
		{
			if (GetCurrentTimestamp() >= next_open_at)
				session_open();
			else
				timeout_ms = 1000;
		}

		serve_queue();

		if (zh != NULL)
		{
			int			rc = zookeeper_interest(zh, &fd, &interest, &tv);

			if (rc != ZOK && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT)
			{
				if (rc == ZINVALIDSTATE || rc == ZSESSIONEXPIRED)
					reopen_needed = true;
				fd = -1;
			}
			connected = (zoo_state(zh) == ZOO_CONNECTED_STATE);
			timeout_ms = tv.tv_sec * 1000L + (tv.tv_usec + 999) / 1000;
			if (timeout_ms < 0 || reopen_needed)
				timeout_ms = 0;
		}
		LWLockRelease(zk_ctl->lock);

		prepare_wait_set(fd, interest, connected);
		nev = WaitEventSetWait(wes, timeout_ms, &ev, 1, PG_WAIT_EXTENSION);

		if (nev > 0 && (ev.events & WL_LATCH_SET))
			ResetLatch(MyLatch);

		if (nev > 0 && ev.pos == wes_sock_pos && zh != NULL &&
			(ev.events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE)))
		{
			int			zevents = 0;

			if (ev.events & WL_SOCKET_READABLE)
				zevents |= ZOOKEEPER_READ;
			if (ev.events & WL_SOCKET_WRITEABLE)
				zevents |= ZOOKEEPER_WRITE;
			LWLockAcquire(zk_ctl->lock, LW_EXCLUSIVE);
			zookeeper_process(zh, zevents);
			if ((zevents & ZOOKEEPER_READ) && zoo_state(zh) == ZOO_CONNECTED_STATE)
				zk_ctl->last_contact = GetCurrentTimestamp();
			LWLockRelease(zk_ctl->lock);
		}
	}
}
