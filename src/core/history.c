/*-------------------------------------------------------------------------
 *
 * history.c
 *	  The identity of this server's history in ZooKeeper (see history.h):
 *	  the registration of this run, the lineage file, the proof from WAL
 *	  that a node's transaction is in this server's history, and the
 *	  survey of runs that the settling pass consults before it acts on a
 *	  node of another run.
 *
 *	  The rules the settling pass follows (queue_settle.c) with what this
 *	  file answers are in src/README, section 5.
 *
 *	  Runs in the worker, lock held (completions take it themselves).
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"
#include "history.h"
#include "trust.h"

#include <unistd.h>

#include "access/rmgr.h"
#include "access/timeline.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "access/xlogutils.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "replication/message.h"
#include "storage/fd.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define HIST_FILE			"zklock.runs"
#define HIST_OWN_FILE		"pgsql_tmp_zklock.run"	/* this run, here (no copy
													 * carries a temporary file) */
#define HIST_FILE_TMP		"zklock.runs.tmp"
#define HIST_CHAIN_MAX		32	/* runs of this lineage remembered */
#define HIST_FORK_MAX		64	/* runs this server is a copy of */
#define HIST_RUNS_MAX		256 /* runs surveyed at once */

/* ---- the lineage file ---- */

typedef struct ChainRun
{
	uint64		run;
	uint32		tli;
	uint64		start;			/* insert position when the run began */
} ChainRun;

static ChainRun chain[HIST_CHAIN_MAX];
static int	nchain = 0;
static uint64 forks[HIST_FORK_MAX];
static int	nforks = 0;
static bool chain_loaded = false;
static bool chain_recorded = false;

/* ---- the registration of this run ---- */

static bool reg_node_ok = false;	/* <root>/runs/<sysid>-<run> exists */
static bool reg_live = false;	/* live created on this session */
static bool reg_checked = false;	/* ... and no heir found after it */
static bool reg_inflight = false;
static uint64 reg_session = 0;	/* the session the answers belong to */
static TimestampTz ready_at = 0;	/* first time this run was ready */
static TimestampTz connected_at = 0;	/* last (re)connection to ZooKeeper */

/* ---- the survey ---- */

typedef struct RunRec
{
	uint64		run;
	uint8		status;			/* ZkRunStatus */
	bool		want;			/* take it over (it is an ancestor) */
	bool		alive;			/* its live node is there */
	bool		logged;
	int32		version;		/* the run node's, when found dead */
	int64		mtime;			/* ... and its last change (ZooKeeper's ms) */
	int64		heir_ctime;		/* when it was taken over (ZooKeeper's ms) */
	int			left;			/* its nodes this pass left alone */
	bool		unproven;		/* ... taken over, but its WAL proves nothing
								 * of them (a copy's original) */
} RunRec;

#define HC_TAKE		0			/* take a dead run over */
#define HC_FORGET	1			/* forget a taken-over run with nothing left */
#define HC_FORGET_OLD 2			/* forget a long dead run with nothing left */
#define HIST_OLD_MS	(3600 * 1000)	/* "long dead": no change for an hour */

static RunRec *runs = NULL;
static int	nruns = 0;
static int	survey_out = 0;
static bool survey_failed = false;
static bool survey_postponed = false;
static bool survey_took = false;
static zk_history_cb survey_cb = NULL;
static void *survey_arg = NULL;

typedef struct HistCall
{
	int			idx;			/* into runs, or -1 */
	int			what;			/* zk_history_claim: HC_* */
	uint64		session;
	zoo_op_t	ops[2];
	zoo_op_result_t res[2];
	char		path[ZK_PATH_MAX];
	char		path2[ZK_PATH_MAX];
	char		data[512];
} HistCall;

/* Completion of the zoo_async sent by zk_history_survey() */
static void
ignore_string(int rc, const char *value, const void *data)
{
}

/* The memory context of calls and the survey, made on first use */
static MemoryContext
hist_context(void)
{
	static MemoryContext cxt = NULL;

	return ZK_LAZY_CONTEXT(cxt, "zklock history", ALLOCSET_SMALL_SIZES);
}

/* This run's id, made at the start of shared memory */
uint64
zk_history_run(void)
{
	return zk_ctl->run_id;
}

/* A run's name, as in its node: <system identifier>-<run in hex> */
void
zk_history_run_name(uint64 run, char *out, size_t outlen)
{
	snprintf(out, outlen, UINT64_FORMAT "-%016llx", GetSystemIdentifier(),
			 (unsigned long long) run);
}

/* The path of run's node, or of its child (live, heir) when child is set */
static void
run_path(uint64 run, const char *child, char *out, size_t outlen)
{
	char		name[64];

	zk_history_run_name(run, name, sizeof(name));
	snprintf(out, outlen, "%s/runs/%s%s%s", zk_root, name,
			 child ? "/" : "", child ? child : "");
}

/* ------------------------------------------------------------------------
 * The lineage file
 * ------------------------------------------------------------------------
 */


/* where this run is: a copy elsewhere (other host, other directory) differs */
static void
own_place(char *out, size_t outlen)
{
	char		host[256];

	if (gethostname(host, sizeof(host)) != 0)
		strlcpy(host, "unknown", sizeof(host));
	host[sizeof(host) - 1] = '\0';
	snprintf(out, outlen, UINT64_FORMAT " %d %s %s", GetSystemIdentifier(), PostPortNumber,
			 host, DataDir);
}

/*
 * The run this data directory had before this start, as HIST_OWN_FILE
 * names it: a temporary file that no base backup, pg_rewind or promoted
 * standby carries, checked against system identifier, port, host and data
 * directory.  That run is certainly this server's own and dead: it is
 * taken over as soon as its session is gone, with no grace, and never
 * counted as a copy's original.
 *
 * The file also names the runs before that one that the run it names
 * found there (its third line, latest first): a run that crashed before
 * it settled its predecessor's nodes passes the proof on, so that two
 * crashes in a row leave nothing to an unproven takeover (the fault run
 * saw a claim left for good so).
 */
static void
own_load(void)
{
	FILE	   *f = AllocateFile(HIST_OWN_FILE, "r");
	char		line[MAXPGPATH + 512];
	char		place[MAXPGPATH + 512];
	unsigned long long run;

	if (f == NULL)
		return;
	own_place(place, sizeof(place));
	if (fgets(line, sizeof(line), f) != NULL && sscanf(line, "%llx", &run) == 1 &&
		fgets(line, sizeof(line), f) != NULL)
	{
		line[strcspn(line, "\n")] = '\0';
		if (strcmp(line, place) == 0 && run != 0 && run != zk_ctl->run_id)
		{
			int			n = 0;

			zk_ctl->own_predecessor = run;
			memset(zk_ctl->own_earlier, 0, sizeof(zk_ctl->own_earlier));
			if (fgets(line, sizeof(line), f) != NULL &&
				strncmp(line, "earlier", 7) == 0)
			{
				char	   *p = line + 7;
				char	   *end;

				while (n < ZK_OWN_EARLIER)
				{
					unsigned long long r = strtoull(p, &end, 16);

					if (end == p || r == 0)
						break;
					if (r != run && r != zk_ctl->run_id)
						zk_ctl->own_earlier[n++] = r;
					p = end;
				}
			}
		}
	}
	/* (a restarted worker finds its own run named there by now: zk_ctl keeps them) */
	FreeFile(f);
}

/*
 * Name this run in HIST_OWN_FILE, with where it runs and the runs before
 * it, for the next start to find (own_load).  A file that cannot be
 * written only costs that proof.
 */
static void
own_save(void)
{
	FILE	   *f = AllocateFile(HIST_OWN_FILE, PG_BINARY_W);
	char		place[MAXPGPATH + 512];
	int			i;

	if (f == NULL)
		return;
	own_place(place, sizeof(place));
	fprintf(f, "%016llx\n%s\nearlier", (unsigned long long) zk_ctl->run_id, place);
	if (zk_ctl->own_predecessor != 0)
	{
		fprintf(f, " %016llx", (unsigned long long) zk_ctl->own_predecessor);
		for (i = 0; i < ZK_OWN_EARLIER - 1 && zk_ctl->own_earlier[i] != 0; i++)
			fprintf(f, " %016llx", (unsigned long long) zk_ctl->own_earlier[i]);
	}
	fprintf(f, "\n");
	(void) FreeFile(f);
}

/* Is run one of this data directory's own earlier runs (own_load)? */
static bool
own_run(uint64 run)
{
	int			i;

	if (run == 0)
		return false;
	if (run == zk_ctl->own_predecessor)
		return true;
	for (i = 0; i < ZK_OWN_EARLIER && zk_ctl->own_earlier[i] != 0; i++)
		if (zk_ctl->own_earlier[i] == run)
			return true;
	return false;
}

/*
 * Read the lineage file into chain and forks (the oldest dropped beyond
 * their bounds), after HIST_OWN_FILE.  A missing file is an empty lineage.
 */
static void
chain_load(void)
{
	FILE	   *f;
	char		line[256];

	chain_loaded = true;
	own_load();
	nchain = 0;
	nforks = 0;
	f = AllocateFile(HIST_FILE, "r");
	if (f == NULL)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("zklock: could not read file \"%s\": %m", HIST_FILE)));
		return;
	}
	while (fgets(line, sizeof(line), f) != NULL)
	{
		unsigned long long run;
		unsigned long long start;
		unsigned int tli;

		if (sscanf(line, "run %llx %u %llx", &run, &tli, &start) == 3 && run != 0)
		{
			if (nchain == HIST_CHAIN_MAX)
			{
				memmove(chain, chain + 1, sizeof(ChainRun) * (HIST_CHAIN_MAX - 1));
				nchain--;
			}
			chain[nchain].run = run;
			chain[nchain].tli = tli;
			chain[nchain].start = start;
			nchain++;
		}
		else if (sscanf(line, "fork %llx", &run) == 1 && run != 0)
		{
			if (nforks == HIST_FORK_MAX)
			{
				memmove(forks, forks + 1, sizeof(uint64) * (HIST_FORK_MAX - 1));
				nforks--;
			}
			forks[nforks++] = run;
		}
	}
	FreeFile(f);
}

/*
 * Write chain and forks to the lineage file durably (a temporary file,
 * fsync, durable_rename).  False, logged, if it could not.
 */
static bool
chain_save(void)
{
	FILE	   *f;
	int			i;
	bool		ok = true;

	f = AllocateFile(HIST_FILE_TMP, PG_BINARY_W);
	if (f == NULL)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("zklock: could not write file \"%s\": %m", HIST_FILE_TMP)));
		return false;
	}
	fprintf(f, "# zklock: the runs of this data directory (do not edit; copies keep it)\n");
	for (i = 0; i < nchain; i++)
		fprintf(f, "run %016llx %u %llX\n", (unsigned long long) chain[i].run,
				chain[i].tli, (unsigned long long) chain[i].start);
	for (i = 0; i < nforks; i++)
		fprintf(f, "fork %016llx\n", (unsigned long long) forks[i]);
	if (fflush(f) != 0 || pg_fsync(fileno(f)) != 0)
		ok = false;
	if (FreeFile(f) != 0)
		ok = false;
	if (ok && durable_rename(HIST_FILE_TMP, HIST_FILE, LOG) != 0)
		ok = false;
	if (!ok)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("zklock: could not write file \"%s\": %m", HIST_FILE)));
	return ok;
}

/*
 * Is run an earlier run of this data directory?  Then *fork_lsn is the
 * insert position where the run after it began: its marks lie before it.
 * False for this run and for runs the lineage file does not list.
 */
bool
zk_history_lineage(uint64 run, uint64 *fork_lsn)
{
	int			i;

	for (i = 0; i < nchain; i++)
	{
		if (chain[i].run != run)
			continue;
		if (i + 1 < nchain)
		{
			*fork_lsn = chain[i + 1].start;
			return true;
		}
		return false;			/* the last one: this run */
	}
	return false;
}

/* Is run one this server found alive after it started (a copy's original)? */
static bool
denied(uint64 run)
{
	int			i;

	for (i = 0; i < nforks; i++)
		if (forks[i] == run)
			return true;
	return false;
}

/*
 * Remember run as a copy's original in the lineage file, never to be taken
 * over, and say so once with a WARNING.
 */
static void
deny(uint64 run)
{
	char		name[64];

	if (denied(run))
		return;
	if (nforks == HIST_FORK_MAX)
	{
		memmove(forks, forks + 1, sizeof(uint64) * (HIST_FORK_MAX - 1));
		nforks--;
	}
	forks[nforks++] = run;
	(void) chain_save();
	zk_history_run_name(run, name, sizeof(name));
	ereport(WARNING,
			(errmsg("zklock: run %s of this cluster is alive on another server; this server is a copy of it", name),
			 errdetail("A restored backup, a clone, or an old primary beside its promoted standby shares the system identifier. This server leaves that run's queue claims and transaction nodes alone."),
			 errhint("If that server is gone for good, release what it left with zk_queue_release_cluster('%s').",
					 name)));
}

/* ------------------------------------------------------------------------
 * The registration of this run
 * ------------------------------------------------------------------------
 */

/*
 * Another server took this run over (it found the run dead: this server
 * was cut off from ZooKeeper for longer than its session timeout) and
 * settles, or settled and forgot, its queue claims and transaction nodes.
 */
static void
fence(const char *how)
{
	char		name[64];

	if (zk_ctl->run_fenced)
		return;
	zk_ctl->run_fenced = true;
	zk_history_run_name(zk_ctl->run_id, name, sizeof(name));
	ereport(WARNING,
			(errmsg("zklock: another server took over this server's run %s", name),
			 errdetail("It found the run dead (this server was cut off from ZooKeeper for longer than its session timeout) and %s its queue claims and transaction nodes.",
					   how),
			 errhint("Restart PostgreSQL: a new run registers, and queues work again.")));
}

/* the run's node was refused (ZNOAUTH): not again before reg_retry_at */
static TimestampTz reg_retry_at = 0;
static bool reg_refusal_logged = false;
/* ... and which node, in which session, until one is created */
static char reg_refused_path[ZKLOCK_PARENT_MAX + 1] = "";
static uint64 reg_refused_session = 0;

static ZkLogLimit reregistered_log;

/* Completion of the zoo_acreate sent by zk_history_turn() */
static void
reg_node_done(int rc, const char *value, const void *data)
{
	DATA_COMPLETION_BEGIN(HistCall, c, data)
	{
		if (c->session == reg_session)
		{
			reg_inflight = false;
			if (rc == ZOK && zk_ctl->run_registered &&
				zk_log_limited(&reregistered_log, "registered this server's run again"))
				ereport(LOG,
						(errmsg("zklock: registered this server's run again: its node was gone from ZooKeeper"),
						 errdetail("A server that takes a run over keeps its node for an hour; a node gone sooner means ZooKeeper lost its data or someone deleted it.")));
			if (rc == ZOK || rc == ZNODEEXISTS)
			{
				reg_node_ok = true;
				zk_ctl->run_registered = true;
				reg_refused_path[0] = '\0';
			}
			else
			{
				char		refused[ZKLOCK_PARENT_MAX + 1];

				strlcpy(refused, c->path, sizeof(refused));
				if (rc == ZNOAUTH ||
					(rc == ZNONODE && zk_parent_refused(c->path, refused, sizeof(refused))))
				{
					/* the same credentials would be refused again at once */
					reg_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 5000);
					strlcpy(reg_refused_path, refused, sizeof(reg_refused_path));
					reg_refused_session = zk_cur_session;
					if (!reg_refusal_logged)
						ereport(WARNING,
								(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
								 errmsg("zklock: zookeeper refused access to \"%s\" when registering this server's run",
										refused),
								 errdetail("Queue and barrier work that needs the run's node waits; it is tried again every 5 s."),
								 errhint("Check zklock.auth_file, zklock.acl and the ACL of the nodes under zklock.root.")));
					reg_refusal_logged = true;
				}
			}
		}
		pfree(c);
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aexists sent by zk_history_turn() */
static void
reg_heir_checked(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(HistCall, c, data)
	{
		if (c->session == reg_session)
		{
			reg_inflight = false;
			if (rc == ZNONODE)
			{
				reg_checked = true;
				if (ready_at == 0)
					ready_at = GetCurrentTimestamp();
			}
			else if (rc == ZOK)
				fence("settles");
		}
		pfree(c);
	}
	NONE_COMPLETION_END;
}

static void reg_live_owner(int rc, const struct Stat *stat, const void *data);
static ZkLogLimit live_wait_log;

/* Completion of the zoo_amulti sent by zk_history_turn() */
static void
reg_live_done(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(HistCall, c, data)
	{
		if (c->session == reg_session)
		{
			reg_inflight = false;
			if (rc == ZOK)
				reg_live = true;
			else if (rc == ZNONODE || c->res[1].err == ZNONODE)
			{
				/*
				 * The run node is gone.  A server that took the run over
				 * keeps it (with its heir) for an hour, so this is a
				 * ZooKeeper that lost its data, or an operator: register
				 * again (the heir check follows).
				 */
				reg_node_ok = false;
			}
			else if (c->res[0].err == ZNODEEXISTS)
			{
				/*
				 * "live" is there: ours, if the multi's reply was lost on
				 * this session (then its write of the run node landed
				 * too), else an earlier session's of this run, which may
				 * still land requests (below): ask whose.
				 */
				HistCall   *c2 = MemoryContextAllocZero(hist_context(), sizeof(HistCall));

				c2->idx = -1;
				c2->session = c->session;
				strlcpy(c2->path, c->path, sizeof(c2->path));
				if (zoo_aexists(zk_zh, c2->path, 0, reg_live_owner, c2) == ZOK)
					reg_inflight = true;
				else
					pfree(c2);
			}
		}
		pfree(c);
	}
	NONE_COMPLETION_END;
}

/*
 * Completion of the zoo_aexists sent by reg_live_done(): whose is "live"?
 *
 * An earlier session of this run (closed by a change of zklock.hosts or by
 * the worker's exit without its close being answered, or given up after a
 * connection loss) may still have requests on their way to ZooKeeper's
 * leader: ZooKeeper applies a request already forwarded to the leader even
 * after the client closed or gave up its session.  Its "live" goes only
 * with the session itself (its close or its expiry), ordered after every
 * request of that session.  So this session creates "live" -- and
 * zk_history_ready() lets in doubt claims, releases, consumes and
 * publications be settled -- only once the earlier session's "live" is
 * gone: what this session reads after that includes every write the old
 * one will ever land.  Deleting the old node instead (as zklock did) ended
 * nothing: the old session's late release could then delete a claim made
 * since by another consumer, and its late claim strand an item.
 */
static void
reg_live_owner(int rc, const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(HistCall, c, data)
	{
		if (c->session == reg_session)
		{
			reg_inflight = false;
			if (rc == ZOK && stat != NULL &&
				(uint64) stat->ephemeralOwner == zk_cur_session && zk_cur_session != 0)
				reg_live = true;	/* ours: the multi's reply was lost */
			else if (rc == ZOK || rc == ZNONODE)
			{
				/* an earlier session's, or gone now: try again shortly */
				if (rc == ZOK && zk_log_limited(&live_wait_log, "waited for an earlier session"))
					ereport(LOG,
							(errmsg("zklock: waiting for the earlier zookeeper session 0x%llx of this run to end before settling what it left in doubt",
									(unsigned long long) stat->ephemeralOwner),
							 errdetail("A request that session sent may still be applied until ZooKeeper has closed or expired it (at most the session timeout).")));
				reg_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 200);
			}
		}
		pfree(c);
	}
	NONE_COMPLETION_END;
}

/* The run node's content: cluster, run, timeline, start, port, pid, time */
static void
reg_data(char *out, size_t outlen)
{
	char		host[128];

	if (gethostname(host, sizeof(host)) != 0)
		strlcpy(host, "unknown", sizeof(host));
	host[sizeof(host) - 1] = '\0';
	host[64] = '\0';
	snprintf(out, outlen,
			 "{\"cluster\":\"" UINT64_FORMAT "\",\"run\":\"%016llx\",\"tli\":%u,\"start\":\"%llX\",\"port\":%d,\"pid\":%d,\"since\":\"%s\"}",
			 GetSystemIdentifier(), (unsigned long long) zk_ctl->run_id,
			 nchain > 0 ? chain[nchain - 1].tli : 0,
			 (unsigned long long) (nchain > 0 ? chain[nchain - 1].start : 0),
			 PostPortNumber, MyProcPid, timestamptz_to_str(GetCurrentTimestamp()));
}

/*
 * Called every turn while the session is usable: record this run in the
 * lineage file once it is a primary, register it, and keep it live on each
 * session (at most one request in flight).
 */
void
zk_history_turn(void)
{
	HistCall   *c;
	char		data[512];
	int			rc;

	if (!chain_loaded)
		chain_load();
	if (RecoveryInProgress() || !zk_session_usable() || reg_inflight ||
		zk_ctl->run_fenced || GetCurrentTimestamp() < reg_retry_at)
		return;
	if (!chain_recorded)
	{
		if (nchain == 0 || chain[nchain - 1].run != zk_ctl->run_id)
		{
			if (nchain == HIST_CHAIN_MAX)
			{
				memmove(chain, chain + 1, sizeof(ChainRun) * (HIST_CHAIN_MAX - 1));
				nchain--;
			}
			chain[nchain].run = zk_ctl->run_id;
			chain[nchain].tli = GetWALInsertionTimeLine();
			chain[nchain].start = GetXLogInsertRecPtr();
			nchain++;
			if (!chain_save())
			{
				nchain--;
				return;			/* again on the next turn */
			}
		}
		own_save();
		chain_recorded = true;
	}
	if (reg_live && reg_checked)
		return;
	reg_session = zk_cur_session;
	c = MemoryContextAllocZero(hist_context(), sizeof(HistCall));
	c->idx = -1;
	c->session = reg_session;
	if (!reg_node_ok)
	{
		char		parent[ZK_PATH_MAX];

		zk_create_parent(zk_root, 0);
		snprintf(parent, sizeof(parent), "%s/runs", zk_root);
		zk_create_parent(parent, 0);
		run_path(zk_ctl->run_id, NULL, c->path, sizeof(c->path));
		reg_data(data, sizeof(data));
		rc = zoo_acreate(zk_zh, c->path, data, (int) strlen(data),
						 zk_acl(), 0, reg_node_done, c);
	}
	else if (!reg_live)
	{
		/*
		 * live, and a new version of the run node: a server that found the
		 * run dead takes it over only with the version it saw
		 */
		run_path(zk_ctl->run_id, "live", c->path, sizeof(c->path));
		run_path(zk_ctl->run_id, NULL, c->path2, sizeof(c->path2));
		zoo_create_op_init(&c->ops[0], c->path, NULL, -1, zk_acl(),
						   ZOO_EPHEMERAL, NULL, 0);
		reg_data(c->data, sizeof(c->data));
		zoo_set_op_init(&c->ops[1], c->path2, c->data, (int) strlen(c->data), -1, NULL);
		rc = zoo_amulti(zk_zh, 2, c->ops, c->res, reg_live_done, c);
	}
	else
	{
		run_path(zk_ctl->run_id, "heir", c->path, sizeof(c->path));
		rc = zoo_aexists(zk_zh, c->path, 0, reg_heir_checked, c);
	}
	if (rc == ZOK)
		reg_inflight = true;
	else
		pfree(c);
}

/*
 * The session ended (the queue's session_reset): "live" and the heir check
 * must be done again on the next one; answers to the old one are ignored.
 */
void
zk_history_session_reset(void)
{
	reg_live = false;
	reg_checked = false;
	reg_inflight = false;
	reg_session = 0;
}

/*
 * May new claims and publications go ahead?  Only once this run is live
 * and found not taken over, on a primary that is not fenced.
 */
bool
zk_history_ready(void)
{
	return reg_live && reg_checked && !zk_ctl->run_fenced && !RecoveryInProgress();
}

/*
 * Was this run's registration refused for want of permission (ZNOAUTH) in
 * this session, and not since created?  Copies the node refused: work
 * that waits for the registration fails at once with 42501 instead of
 * waiting for an answer that cannot come.
 */
bool
zk_history_refused(char *path, size_t len)
{
	if (reg_refused_path[0] == '\0' || reg_refused_session != zk_cur_session ||
		zk_history_ready())
		return false;
	strlcpy(path, reg_refused_path, len);
	return true;
}

/* Did another server take this run over (until the next restart)? */
bool
zk_history_fenced(void)
{
	return zk_ctl->run_fenced;
}

/* ------------------------------------------------------------------------
 * The proof from WAL
 * ------------------------------------------------------------------------
 */

/*
 * Is the record xr just read the "zklock" logical message of transaction
 * fxid with run's ZkHistMark (transactional, nothing else in it)?
 */
static bool
mark_matches(XLogReaderState *xr, uint64 run, uint64 fxid)
{
	const xl_logical_message *m;
	ZkHistMark	mark;
	Size		len = XLogRecGetDataLen(xr);
	Size		plen = sizeof(ZK_HIST_PREFIX);

	if (XLogRecGetRmid(xr) != RM_LOGICALMSG_ID ||
		(XLogRecGetInfo(xr) & ~XLR_INFO_MASK) != XLOG_LOGICAL_MESSAGE)
		return false;
	if (XLogRecGetXid(xr) != (TransactionId) (fxid & 0xFFFFFFFF))
		return false;
	if (len != SizeOfLogicalMessage + plen + sizeof(ZkHistMark))
		return false;
	m = (const xl_logical_message *) XLogRecGetData(xr);
	if (!m->transactional || m->prefix_size != plen ||
		m->message_size != sizeof(ZkHistMark) ||
		memcmp(m->message, ZK_HIST_PREFIX, plen) != 0)
		return false;
	memcpy(&mark, m->message + plen, sizeof(mark));
	return mark.run == run && mark.fxid == fxid;
}

/*
 * Is the record a node names (its start rec, on timeline tli) this run's
 * mark of that transaction, in this server's WAL?
 */
ZkHistCheck
zk_history_verify(uint32 tli, uint64 rec, uint64 run, uint64 fxid)
{
	TimeLineID	cur;
	XLogRecPtr	end;
	XLogReaderState *volatile xr = NULL;
	ReadLocalXLogPageNoWaitPrivate priv;
	volatile ZkHistCheck result = ZKH_UNREADABLE;
	MemoryContext cxt = CurrentMemoryContext;
	uint32		holdoff;
	uint32		cancel_holdoff;

	if (RecoveryInProgress() || rec == 0 || tli == 0)
		return ZKH_UNREADABLE;
	if (!XRecOffIsValid(rec))
		return ZKH_MISMATCH;
	cur = GetWALInsertionTimeLine();
	if (tli > cur)
		return ZKH_MISMATCH;	/* a timeline this server never had */
	if (tli < cur)
	{
		List	   *hist = readTimeLineHistory(cur);

		if (!tliInHistory(tli, hist))
			return ZKH_MISMATCH;
		end = tliSwitchPoint(tli, hist, NULL);
	}
	else
		end = GetFlushRecPtr(NULL);
	if (rec >= end)
		return ZKH_BEYOND;

	memset(&priv, 0, sizeof(priv));

	/*
	 * An ERROR sets InterruptHoldoffCount to zero although the worker still
	 * holds its lock (which holds interrupts off): restored below, or the
	 * release of the lock would take it below zero, where interrupts stay
	 * held off for good and the worker never sees SIGTERM.
	 */
	holdoff = InterruptHoldoffCount;
	cancel_holdoff = QueryCancelHoldoffCount;
	PG_TRY();
	{
		XLogRecord *r;
		char	   *errormsg = NULL;

		xr = XLogReaderAllocate(wal_segment_size, NULL,
								XL_ROUTINE(.page_read = &read_local_xlog_page_no_wait,
										   .segment_open = &wal_segment_open,
										   .segment_close = &wal_segment_close),
								&priv);
		if (xr != NULL)
		{
			XLogBeginRead(xr, rec);
			r = XLogReadRecord(xr, &errormsg);
			if (r == NULL)
				result = priv.end_of_wal ? ZKH_BEYOND : ZKH_MISMATCH;
			else
				result = mark_matches(xr, run, fxid) ? ZKH_VERIFIED : ZKH_MISMATCH;
		}
	}
	PG_CATCH();
	{
		/* a removed segment: the WAL is gone */
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		InterruptHoldoffCount = holdoff;
		QueryCancelHoldoffCount = cancel_holdoff;
		result = ZKH_UNREADABLE;
	}
	PG_END_TRY();
	if (xr != NULL)
		XLogReaderFree(xr);
	return result;
}

/* ------------------------------------------------------------------------
 * The survey of runs
 * ------------------------------------------------------------------------
 */

/* How long a run must stay alive, seen from here, to be a copy's original */
static int
hist_window_ms(void)
{
	return Max(zk_session_timeout, zk_ctl->session_timeout) * 3 / 2 + 5000;
}

/* One request of a survey or claim is answered; the last calls back */
static void
survey_one_done(void)
{
	if (--survey_out == 0 && survey_cb != NULL)
	{
		zk_history_cb cb = survey_cb;

		survey_cb = NULL;
		cb(!survey_failed, survey_arg);
	}
}

/*
 * A run found without "live" counts as dead only once it has stayed so for
 * twice the session timeout and 10 s: a live server whose session expired
 * registers again on its new session within that, and must not be taken
 * over meanwhile, even when its worker stalls or its reconnection is slow
 * (the fault run saw a copy take over its original after 10 s without
 * "live", the original's session expired and then its worker frozen, when
 * this was a session timeout and 3 s).  This data directory's own earlier
 * runs are certainly dead and need no grace; the runs that wait for it
 * are those of a promoted standby's old primary and of a restored
 * backup's original.
 */
#define DEAD_SEEN_MAX 64
static uint64 dead_run[DEAD_SEEN_MAX];
static TimestampTz dead_since[DEAD_SEEN_MAX];
static int	ndead = 0;

/* run was found alive: its dead spell, if any, ends */
static void
forget_dead(uint64 run)
{
	int			i;

	for (i = 0; i < ndead; i++)
		if (dead_run[i] == run)
		{
			dead_run[i] = dead_run[ndead - 1];
			dead_since[i] = dead_since[ndead - 1];
			ndead--;
			return;
		}
}

/*
 * Has run been without "live" for the grace, counted while this server was
 * in touch with the quorum?  Starts its spell if new (and postpones the
 * pass).  This data directory's own previous run needs no grace.
 */
static bool
dead_long_enough(uint64 run)
{
	TimestampTz now = GetCurrentTimestamp();
	int			grace = 2 * Max(zk_session_timeout, zk_ctl->session_timeout) + 10000;
	bool		fresh = zk_fresh_conn_state() == ZKC_CONNECTED;
	int			i;

	if (own_run(run))
		return true;

	/*
	 * Only time this server spent in touch with the quorum counts: while
	 * the ensemble has no quorum (or this server cannot reach it) the other
	 * server cannot register again either, and a cut-off follower's view is
	 * stale.
	 */
	for (i = 0; i < ndead; i++)
		if (dead_run[i] == run)
		{
			if (!fresh)
				dead_since[i] = now;
			else if (TimestampDifferenceExceeds(dead_since[i], now, grace))
				return true;
			survey_postponed = true;
			return false;
		}
	if (ndead == DEAD_SEEN_MAX)
	{
		memmove(dead_run, dead_run + 1, sizeof(uint64) * (DEAD_SEEN_MAX - 1));
		memmove(dead_since, dead_since + 1, sizeof(TimestampTz) * (DEAD_SEEN_MAX - 1));
		ndead--;
	}
	dead_run[ndead] = run;
	dead_since[ndead] = now;
	ndead++;
	survey_postponed = true;
	return false;
}

/*
 * The run is alive.  It is a copy's original only if it stayed alive for
 * the window while this server was connected all along: a ZooKeeper that
 * restarts gives every session it restores (a crashed predecessor's too) a
 * fresh timeout, and a server cut off sees nothing expire meanwhile, so the
 * window counts from this run's registration or its last reconnection,
 * whichever is later.
 */
static void
run_live(RunRec *r)
{
	TimestampTz since = Max(ready_at, connected_at);

	forget_dead(r->run);
	if (ready_at != 0 && !own_run(r->run) &&
		TimestampDifferenceExceeds(since, GetCurrentTimestamp(), hist_window_ms()))
	{
		r->status = ZKR_DENIED;
		deny(r->run);
	}
	else
	{
		r->status = ZKR_LIVE;
		survey_postponed = true;
	}
}

/* Completion of the zoo_aget sent by survey_run_listed() */
static void
survey_heir_read(int rc, const char *value, int value_len,
				 const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(HistCall, c, data)
	{
		if (c->idx < nruns && runs != NULL)
		{
			RunRec	   *r = &runs[c->idx];
			char		mine[32];

			snprintf(mine, sizeof(mine), "%016llx", (unsigned long long) zk_ctl->run_id);
			if (rc == ZOK && stat != NULL)
				r->heir_ctime = stat->ctime;
			/* this run, signed with this cluster's key for this very node */
			if (rc == ZOK && zk_heir_verify(c->path, mine, value, value_len))
				r->status = ZKR_HEIR;
			else if (rc == ZOK)
			{
				static ZkLogLimit heir_log;

				r->status = ZKR_OTHER;
				if (value != NULL && value_len >= (int) strlen(mine) &&
					memcmp(value, mine, strlen(mine)) == 0 &&
					zk_log_limited(&heir_log, "a node naming this run heir does not verify"))
					ereport(LOG,
							(errmsg("zklock: the node %s names this server's run heir, but its MAC does not verify; left that run alone",
									c->path),
							 errhint("Check who may write under zklock.root (zklock.acl).")));
			}
			else if (rc == ZNONODE)
				r->status = ZKR_UNKNOWN;	/* going away: next time */
			else
				survey_failed = true;
		}
		pfree(c);
		survey_one_done();
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget_children2 sent by survey_listed() */
static void
survey_run_listed(int rc, const struct String_vector *sv,
				  const struct Stat *stat, const void *data)
{
	DATA_COMPLETION_BEGIN(HistCall, c, data)
	{
		bool		counted = false;

		if (c->idx < nruns && runs != NULL)
		{
			RunRec	   *r = &runs[c->idx];
			bool		live = false;
			bool		heir = false;
			int			i;

			if (rc == ZOK)
			{
				for (i = 0; sv && i < sv->count; i++)
				{
					if (strcmp(sv->data[i], "live") == 0)
						live = true;
					else if (strcmp(sv->data[i], "heir") == 0)
						heir = true;
				}
				r->alive = live;
				/* a release may take any dead run over (zk_history_take) */
				r->version = stat ? stat->version : -1;
				r->mtime = stat ? stat->mtime : 0;
				if (r->status == ZKR_DENIED)
					;			/* a copy's original: only whether it lives */
				else if (heir && zk_session_usable())
				{
					run_path(r->run, "heir", c->path, sizeof(c->path));
					if (zoo_aget(zk_zh, c->path, 0, survey_heir_read, c) == ZOK)
						counted = true;
					else
						survey_failed = true;
				}
				else if (live)
					run_live(r);
				else if (!heir)
				{
					r->status = dead_long_enough(r->run) ? ZKR_DEAD : ZKR_LIVE;
					r->version = stat ? stat->version : -1;
					r->mtime = stat ? stat->mtime : 0;
				}
			}
			else if (rc != ZNONODE)
				survey_failed = true;
		}
		if (!counted)
		{
			pfree(c);
			survey_one_done();
		}
	}
	NONE_COMPLETION_END;
}

/* Completion of the zoo_aget_children sent by zk_history_survey() */
static void
survey_listed(int rc, const struct String_vector *sv, const void *data)
{
	DATA_COMPLETION_BEGIN(HistCall, c, data)
	{
		char		prefix[32];
		int			i;

		snprintf(prefix, sizeof(prefix), UINT64_FORMAT "-", GetSystemIdentifier());
		if (rc == ZOK && zk_session_usable())
		{
			for (i = 0; sv && i < sv->count && nruns < HIST_RUNS_MAX; i++)
			{
				const char *n = sv->data[i];
				char	   *end;
				uint64		run;
				HistCall   *d;
				RunRec	   *r;

				if (strncmp(n, prefix, strlen(prefix)) != 0)
					continue;
				n += strlen(prefix);
				if (strlen(n) != 16)
					continue;
				errno = 0;
				run = strtoull(n, &end, 16);
				if (errno != 0 || *end != '\0' || run == 0 || run == zk_ctl->run_id)
					continue;
				r = &runs[nruns++];
				memset(r, 0, sizeof(*r));
				r->run = run;
				/* a copy's original is surveyed only for whether it lives */
				if (denied(run))
					r->status = ZKR_DENIED;
				d = MemoryContextAllocZero(hist_context(), sizeof(HistCall));
				d->idx = nruns - 1;
				run_path(run, NULL, d->path, sizeof(d->path));
				if (zoo_aget_children2(zk_zh, d->path, 0, survey_run_listed, d) != ZOK)
				{
					pfree(d);
					survey_failed = true;
					break;
				}
				survey_out++;
			}
			if (sv && i < sv->count)
				survey_postponed = true;	/* more than HIST_RUNS_MAX: later */
		}
		else if (rc != ZNONODE)
			survey_failed = true;
		pfree(c);
		survey_one_done();
	}
	NONE_COMPLETION_END;
}

/*
 * Find the runs of this cluster and what they are (done(ok, arg) once all
 * answered).  False when nothing could be sent.
 */
bool
zk_history_survey(zk_history_cb done, void *arg)
{
	HistCall   *c;
	char		path[ZK_PATH_MAX];

	if (runs == NULL)
		runs = MemoryContextAllocZero(hist_context(), sizeof(RunRec) * (HIST_RUNS_MAX + 1));
	nruns = 0;
	/* this run first */
	runs[nruns].run = zk_ctl->run_id;
	runs[nruns].status = ZKR_CURRENT;
	nruns++;
	survey_failed = false;
	survey_postponed = false;
	survey_took = false;
	survey_cb = done;
	survey_arg = arg;
	c = MemoryContextAllocZero(hist_context(), sizeof(HistCall));
	c->idx = -1;
	snprintf(path, sizeof(path), "%s/runs", zk_root);
	/* a sync first: the listing then shows what the quorum has */
	(void) zoo_async(zk_zh, path, ignore_string, NULL);
	if (zoo_aget_children(zk_zh, path, 0, survey_listed, c) != ZOK)
	{
		pfree(c);
		survey_cb = NULL;
		return false;
	}
	survey_out = 1;
	return true;
}

/* The survey's record of run, or NULL */
static RunRec *
find_run(uint64 run)
{
	int			i;

	for (i = 0; i < nruns; i++)
		if (runs[i].run == run)
			return &runs[i];
	return NULL;
}

/*
 * What the last survey found run to be; a run it did not list is denied if
 * the lineage file says so, else unknown.
 */
ZkRunStatus
zk_history_status(uint64 run)
{
	RunRec	   *r;

	if (run == zk_ctl->run_id)
		return ZKR_CURRENT;
	r = find_run(run);
	if (r == NULL)
	{
		if (denied(run))
			return ZKR_DENIED;
		return ZKR_UNKNOWN;
	}
	return (ZkRunStatus) r->status;
}

/*
 * Is run certainly this data directory's own previous run (named by the
 * temporary file no copy carries)?  Only then does a position past this
 * server's WAL, or another record there, prove that its transaction never
 * committed: a copy's WAL (a base backup, a clone, a promoted standby) may
 * simply end before its original's commit.
 */
bool
zk_history_proven(uint64 run)
{
	return own_run(run);
}

/* was the run's live node there when surveyed (whatever its status)? */
bool
zk_history_alive(uint64 run)
{
	RunRec	   *r = find_run(run);

	return run == zk_ctl->run_id || (r != NULL && r->alive);
}

/* the session was (re)connected: a window of liveness starts again */
void
zk_history_connected(void)
{
	connected_at = GetCurrentTimestamp();
}

/*
 * Must the settling pass come back later?  A run was alive or not yet dead
 * long enough, or there were more runs than one survey reads.
 */
bool
zk_history_postponed(void)
{
	return survey_postponed;
}

/* The settling pass found run is an ancestor: take it over, if it is dead */
void
zk_history_want(uint64 run)
{
	RunRec	   *r = find_run(run);

	if (r != NULL && r->status == ZKR_DEAD)
		r->want = true;
}

static ZkLogLimit run_left_log;

/*
 * The settling pass left a node of run alone: counted (a run with nodes
 * left is not forgotten), and logged once why, unless it is only waited for.
 */
void
zk_history_left(uint64 run)
{
	RunRec	   *r = find_run(run);

	if (r != NULL)
	{
		r->left++;
		/* (a live run is waited for: said once it is denied) */
		if (!r->logged && r->status != ZKR_CURRENT &&
			(r->status != ZKR_HEIR || r->unproven) &&
			r->status != ZKR_DEAD && r->status != ZKR_LIVE)
		{
			char		name[64];

			r->logged = true;
			zk_history_run_name(run, name, sizeof(name));
			if (zk_log_limited(&run_left_log, "left the queue claims and transaction nodes of a run alone"))
				ereport(LOG,
						(errmsg("zklock: left the queue claims and transaction nodes of run %s alone: %s",
								name,
								r->status == ZKR_OTHER ? "another server took it over" :
								r->status == ZKR_DENIED ? "this server is a copy of it" :
								r->status == ZKR_HEIR ? "this server took it over, but its WAL does not show whether their transactions committed (it is a restored backup or a copy of that run's server)" :
								"it is not registered"),
						 errdetail("zk_queue_release_cluster('%s') returns that run's claimed items to their queues and discards its transaction nodes, as if its unfinished transactions had rolled back; zk_queue_release_cluster('" UINT64_FORMAT "') lists the runs left alone.",
								   name, GetSystemIdentifier()),
						 errhint("If that server is gone for good, release them with zk_queue_release_cluster('%s').",
								 name)));
		}
	}
}

/*
 * The settling pass left a node of run, which this server took over,
 * alone because its WAL cannot show what the run's transaction did (a
 * copy's WAL may end before its original's commit): logged with the call
 * that releases it (zk_history_left).
 */
void
zk_history_left_unproven(uint64 run)
{
	RunRec	   *r = find_run(run);

	if (r != NULL && r->status == ZKR_HEIR)
		r->unproven = true;
	zk_history_left(run);
}

/*
 * The end of a settling pass: the runs whose nodes it left alone and that
 * are not alive, for zk_queue_release_cluster's hint
 * (zk_ctl->left_runs).  Lock held.
 */
void
zk_history_left_publish(void)
{
	char		buf[ZK_LEFT_RUNS_MAX];
	int			i;

	buf[0] = '\0';
	for (i = 0; runs != NULL && i < nruns; i++)
	{
		RunRec	   *r = &runs[i];
		char		name[64];

		if (r->left == 0 || r->status == ZKR_CURRENT || r->alive)
			continue;
		zk_history_run_name(r->run, name, sizeof(name));
		if (strlen(buf) + strlen(name) + 3 >= sizeof(buf))
		{
			strlcat(buf, ", ...", sizeof(buf));
			break;
		}
		if (buf[0] != '\0')
			strlcat(buf, ", ", sizeof(buf));
		strlcat(buf, name, sizeof(buf));
	}
	strlcpy(zk_ctl->left_runs, buf, sizeof(zk_ctl->left_runs));
}

/* run was released (zk_queue_release_cluster): no longer listed as left */
void
zk_history_left_forget(uint64 run)
{
	char		name[64];
	char	   *p;
	size_t		len;

	zk_history_run_name(run, name, sizeof(name));
	len = strlen(name);
	p = strstr(zk_ctl->left_runs, name);
	if (p == NULL)
		return;
	/* the name and the ", " after it, or the ", " before it if last */
	if (p[len] == ',')
		len += 2;
	else if (p > zk_ctl->left_runs)
	{
		p -= 2;
		len += 2;
	}
	memmove(p, p + len, strlen(p + len) + 1);
}

/* ------------------------------------------------------------------------
 * The takeover of one run at the operator's request
 * ------------------------------------------------------------------------
 */

/* the last zk_history_take found the run registered again */
static bool take_refused = false;

/*
 * The run a take or claim (c) is about, with its name in name (64 bytes
 * are enough); NULL if the table of runs no longer has it
 */
static RunRec *
call_run(HistCall *c, char *name, size_t len)
{
	RunRec	   *r;

	if (c->idx < 0 || c->idx >= nruns || runs == NULL)
		return NULL;
	r = &runs[c->idx];
	zk_history_run_name(r->run, name, len);
	return r;
}

/* Completion of the zoo_amulti sent by zk_history_take() */
static void
take_done(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(HistCall, c, data)
	{
		char		name[64];
		RunRec	   *r = call_run(c, name, sizeof(name));

		if (r != NULL)
		{
			if (rc == ZOK)
			{
				r->status = ZKR_HEIR;
				ereport(LOG,
						(errmsg("zklock: took over run %s of this cluster for zk_queue_release_cluster: its server is gone",
								name),
						 errdetail("A server of that run that comes back finds it taken over and stops using queues until it is restarted.")));
			}
			else if (!zk_rc_definite(rc))
				survey_failed = true;	/* no answer */
			else if (c->res[1].err != ZNODEEXISTS && c->res[0].err != ZNONODE)
			{
				survey_failed = true;	/* it registered again */
				take_refused = true;
			}
			/* (taken over by another server, or forgotten: released all the same) */
		}
		pfree(c);
		survey_one_done();
	}
	NONE_COMPLETION_END;
}

/*
 * zk_queue_release_cluster('<sysid>-<run>'), after a survey found run
 * without its "live": take it over at once (its heir node names this run,
 * conditional on the run node not changing since the survey), with no
 * grace, so that a server of that run cut off from ZooKeeper, not gone,
 * finds it taken when it comes back (fence()) instead of committing claims
 * the release hands to others.  done(false) if the run registered again
 * meanwhile or the request failed.  False when there is nothing to take
 * (already taken over, not registered, or this run): go on at once.
 */
bool
zk_history_take(uint64 run, zk_history_cb done, void *arg)
{
	RunRec	   *r = find_run(run);
	HistCall   *c;
	char		mine[32];

	if (r == NULL || run == zk_ctl->run_id || r->alive ||
		(r->status != ZKR_DEAD && r->status != ZKR_LIVE && r->status != ZKR_DENIED) ||
		r->version < 0 || !zk_session_usable())
		return false;
	snprintf(mine, sizeof(mine), "%016llx", (unsigned long long) zk_ctl->run_id);
	c = MemoryContextAllocZero(hist_context(), sizeof(HistCall));
	c->idx = (int) (r - runs);
	c->what = HC_TAKE;
	run_path(run, NULL, c->path, sizeof(c->path));
	run_path(run, "heir", c->path2, sizeof(c->path2));
	zk_heir_sign(c->path2, mine, c->data, sizeof(c->data));
	zoo_check_op_init(&c->ops[0], c->path, r->version);
	zoo_create_op_init(&c->ops[1], c->path2, c->data, (int) strlen(c->data),
					   zk_acl(), 0, NULL, 0);
	survey_failed = false;
	take_refused = false;
	survey_cb = done;
	survey_arg = arg;
	if (zoo_amulti(zk_zh, 2, c->ops, c->res, take_done, c) != ZOK)
	{
		pfree(c);
		survey_cb = NULL;
		return false;
	}
	survey_out = 1;
	return true;
}

/* Did the last zk_history_take find its run registered again? */
bool
zk_history_take_refused(void)
{
	return take_refused;
}

/* (another client can make many run nodes that look long dead) */
static ZkLogLimit forgot_log;

/* Completion of the zoo_amulti sent by zk_history_claim() */
static void
claim_done(int rc, const void *data)
{
	DATA_COMPLETION_BEGIN(HistCall, c, data)
	{
		char		name[64];
		RunRec	   *r = call_run(c, name, sizeof(name));

		if (r != NULL)
		{
			if (c->what == HC_FORGET_OLD)
			{
				if (rc == ZOK && zk_log_limited(&forgot_log, "forgot a run of this cluster"))
					ereport(LOG,
							(errmsg("zklock: forgot run %s of this cluster: dead for over an hour, nothing of it is left",
									name)));
			}
			else if (r->status == ZKR_DEAD && rc == ZOK)
			{
				r->status = ZKR_HEIR;
				survey_took = true;
				ereport(LOG,
						(errmsg("zklock: took over run %s of this cluster: its server is gone and this server descends from it",
								name)));
			}
			else if (r->status == ZKR_DEAD)
				r->status = ZKR_UNKNOWN;	/* it came back, or was taken */
			else if (rc == ZOK && zk_log_limited(&forgot_log, "forgot a run of this cluster"))
				ereport(LOG,
						(errmsg("zklock: forgot run %s of this cluster: nothing of it is left", name)));
		}
		pfree(c);
		survey_one_done();
	}
	NONE_COMPLETION_END;
}

/*
 * Take over the dead runs the settling pass found this server descends
 * from, and (gc) forget taken-over runs with nothing left.  done(true) when
 * a run was taken over (settle again); false when nothing was sent.
 */
bool
zk_history_claim(bool gc, zk_history_cb done, void *arg)
{
	int			i;
	char		mine[32];
	uint64		fork;

	snprintf(mine, sizeof(mine), "%016llx", (unsigned long long) zk_ctl->run_id);
	survey_out = 1;
	survey_cb = done;
	survey_arg = arg;
	survey_failed = false;
	survey_took = false;
	for (i = 0; i < nruns && zk_session_usable(); i++)
	{
		RunRec	   *r = &runs[i];
		HistCall   *c;
		int			rc;
		bool		old;
		int64		now_ms;

		/* this data directory's own earlier runs are taken over even empty */
		if (r->status == ZKR_DEAD &&
			(own_run(r->run) || zk_history_lineage(r->run, &fork)))
			r->want = true;
		/* ZooKeeper's times are Unix ms; a TimestampTz counts us from 2000 */
		now_ms = GetCurrentTimestamp() / 1000 + INT64CONST(946684800000);
		old = gc && r->status == ZKR_DEAD && !r->want && r->left == 0 && r->mtime > 0 &&
			now_ms - r->mtime > HIST_OLD_MS;

		/*
		 * A run taken over is forgotten (heir and node deleted) an hour
		 * after: until then its server, if it was only cut off, finds the
		 * heir when it comes back and stops.
		 */
		if (!(r->want && r->status == ZKR_DEAD) &&
			!(gc && r->status == ZKR_HEIR && r->left == 0 && r->heir_ctime > 0 &&
			  now_ms - r->heir_ctime > HIST_OLD_MS) && !old)
			continue;
		c = MemoryContextAllocZero(hist_context(), sizeof(HistCall));
		c->idx = i;
		run_path(r->run, NULL, c->path, sizeof(c->path));
		run_path(r->run, "heir", c->path2, sizeof(c->path2));
		if (old)
		{
			/* a copy's run, gone for long, nothing left anywhere: forget it */
			c->what = HC_FORGET_OLD;
			zoo_check_op_init(&c->ops[0], c->path, r->version);
			zoo_delete_op_init(&c->ops[1], c->path, r->version);
		}
		else if (r->status == ZKR_DEAD)
		{
			c->what = HC_TAKE;
			zk_heir_sign(c->path2, mine, c->data, sizeof(c->data));
			zoo_check_op_init(&c->ops[0], c->path, r->version);
			zoo_create_op_init(&c->ops[1], c->path2, c->data, (int) strlen(c->data),
							   zk_acl(), 0, NULL, 0);
		}
		else
		{
			c->what = HC_FORGET;
			zoo_delete_op_init(&c->ops[0], c->path2, -1);
			zoo_delete_op_init(&c->ops[1], c->path, -1);
		}
		rc = zoo_amulti(zk_zh, 2, c->ops, c->res, claim_done, c);
		if (rc != ZOK)
		{
			pfree(c);
			break;
		}
		survey_out++;
	}
	/* stopped early (a send failed, the session went): not every run done */
	if (i < nruns)
		survey_failed = true;
	if (survey_out == 1)
	{
		survey_out = 0;
		survey_cb = NULL;
		return false;
	}
	survey_one_done();			/* the count of the start itself */
	return true;
}

/* did the last zk_history_claim take a run over? */
bool
zk_history_took(void)
{
	return survey_took;
}
