/*-------------------------------------------------------------------------
 *
 * election.c
 *	  Leader election held by the worker (kazoo's Election layout, which is
 *	  its lock): for every name in zklock.elections the worker stands as a
 *	  candidate, a lock entry of family ZKF_ELECTIONS that it owns itself,
 *	  so the lock recipe (lock_worker.c) does the ZooKeeper part: the node
 *	  <root>/elections/<name>/<guid>__lock__<seq>, the watch on the
 *	  predecessor, a create whose reply was lost, the session's end.
 *
 *	  Once a turn (at most every ELECTION_TURN_MS) while the session is
 *	  usable, elections_turn() reconciles the entries with the setting:
 *	  a candidacy lost with the session, one for a name no longer listed,
 *	  one a previous worker left, and every one while the server is in
 *	  recovery is let go; a listed name without one gets a new one (never
 *	  in recovery: a standby does not stand).
 *
 *	  Backends read the entries: zk_is_leader(name) is true only while the
 *	  candidacy holds the lock and the session is connected and fresh (the
 *	  worker heard from ZooKeeper within 2/3 of the session timeout), so a
 *	  suspended connection ends leadership at once, not at expiry.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "zklock.h"
#include "recipe.h"
#include "trust.h"
#include "lock/lock.h"
#include "election.h"

#include "access/xlog.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/timestamp.h"

#define ELECTION_TURN_MS	200

static bool changed = true;
static char worker_tag[ZKLOCK_GUID_LEN / 2 + 1];

/*
 * The names of a zklock.elections value: comma separated, blanks around
 * them trimmed.  Returns the count, or -1 with *why set.
 */
static int
split_names(const char *value, char names[][ZKLOCK_NAME_MAX + 1], const char **why)
{
	int			n = 0;
	const char *p = value;

	while (*p)
	{
		const char *start;
		const char *end;
		int			len;
		int			i;

		while (*p == ' ' || *p == '\t')
			p++;
		start = p;
		while (*p && *p != ',')
			p++;
		end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		len = end - start;
		if (*p == ',')
			p++;
		if (len == 0 && *p == '\0' && end == p)
			break;				/* nothing more (blanks, a trailing comma) */
		if (len == 0)
		{
			*why = "An election name is empty.";
			return -1;
		}
		if (len > ZKLOCK_NAME_MAX)
		{
			*why = "An election name is longer than 255 bytes.";
			return -1;
		}
		if (n >= ELECTION_MAX)
		{
			*why = "More than 32 elections are listed.";
			return -1;
		}
		memcpy(names[n], start, len);
		names[n][len] = '\0';
		for (i = 0; i < n; i++)
			if (strcmp(names[i], names[n]) == 0)
				break;
		if (i == n)
			n++;
	}
	return n;
}

/* zklock.elections (define_election_settings) */
char	   *zk_elections = NULL;

/* GUC check hook of zklock.elections: at most ELECTION_MAX valid names */
static bool
check_elections(char **newval, void **extra, GucSource source)
{
	char		names[ELECTION_MAX][ZKLOCK_NAME_MAX + 1];
	const char *why = NULL;

	if (*newval == NULL || split_names(*newval, names, &why) >= 0)
		return true;
	GUC_check_errdetail("%s", why);
	GUC_check_errhint("List names of 1 to 255 bytes, separated by commas, at most 32.");
	return false;
}

/*
 * The number of names in this process's zklock.elections (the worker's
 * reserve of entries counts one per name, zk_election_backend).
 */
static int	listed = 0;

/* GUC assign hook of zklock.elections: remember how many are listed */
static void
assign_elections(const char *newval, void *extra)
{
	char		names[ELECTION_MAX][ZKLOCK_NAME_MAX + 1];
	const char *why = NULL;
	int			n = newval ? split_names(newval, names, &why) : 0;

	listed = Max(n, 0);
}

/* How many elections zklock.elections lists (for the worker's reserve) */
static int
elections_listed(void)
{
	return listed;
}

/* A reload may have changed zklock.elections: the elections turn runs at once */
static void
elections_changed(void)
{
	changed = true;
}

/* who stands: this cluster and the worker, as zk_lock_holders shows it */
static void
candidate_data(char *out, size_t outlen)
{
	StringInfoData buf;
	char		host[256];

	if (gethostname(host, sizeof(host)) != 0)
		strlcpy(host, "unknown", sizeof(host));
	host[sizeof(host) - 1] = '\0';
	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"cluster\":\"" UINT64_FORMAT "\",\"host\":", GetSystemIdentifier());
	escape_json(&buf, host);
	appendStringInfo(&buf, ",\"port\":%d,\"database\":\"\",\"pid\":%d,\"user\":\"\","
					 "\"application\":\"zklock worker\",\"since\":",
					 PostPortNumber, MyProcPid);
	escape_json(&buf, timestamptz_to_str(GetCurrentTimestamp()));
	appendStringInfoChar(&buf, '}');
	strlcpy(out, buf.data, outlen);
	pfree(buf.data);
}

static ZkLogLimit stand_log;

/*
 * Stand in an election: a lock entry of the worker's own (ZKF_ELECTIONS),
 * unless none is free
 */
static ZkEntry *
stand(const char *name)
{
	ZkEntry    *e = zk_entry_alloc();

	if (e == NULL)
	{
		if (zk_log_limited(&stand_log, "no free entry to stand in an election"))
			ereport(WARNING,
					(errmsg("zklock: no free entry to stand in election \"%s\"", name),
					 errhint("Increase zklock.max_locks.")));
		return NULL;
	}
	if (worker_tag[0] == '\0')
	{
		uint8		buf[8];
		int			i;

		if (!pg_strong_random(buf, sizeof(buf)))
		{
			uint64		v = ((uint64) MyProcPid << 32) ^ (uint64) GetCurrentTimestamp();

			memcpy(buf, &v, sizeof(buf));
		}
		for (i = 0; i < 8; i++)
			snprintf(worker_tag + 2 * i, 3, "%02x", buf[i]);
	}
	zk_entry_request(e, ZKK_LOCK, InvalidOid, ZKM_EXCLUSIVE, ZKS_SESSION, false);
	e->family = ZKF_ELECTIONS;
	strlcpy(e->name, name, sizeof(e->name));
	memcpy(e->owner_tag, worker_tag, sizeof(e->owner_tag));
	candidate_data(e->data, sizeof(e->data));
	zk_enqueue(e);
	SetLatch(MyLatch);
	ereport(LOG, (errmsg("zklock: standing in election \"%s\"", name)));
	return e;
}

/* this worker's candidacies: entry and generation, by name */
typedef struct Candidacy
{
	char		name[ZKLOCK_NAME_MAX + 1];
	uint32		idx;
	uint32		gen;
} Candidacy;

static Candidacy mine[ELECTION_MAX];
static int	nmine = 0;

/* Stop standing: let go of the candidacy (the worker deletes its node) */
static void
let_go(ZkEntry *e)
{
	if (e->outcome == ZKO_GRANTED)
		ereport(LOG, (errmsg("zklock: no longer leading election \"%s\"", e->name)));
	zk_release_push(e);
	SetLatch(MyLatch);
}

/*
 * Called every turn of the worker while the session is usable, lock held.
 * The first time, the candidacies a previous worker left in shared memory
 * are let go (one scan of the entries); after that only this worker's own
 * entries are looked at.
 */
static void
elections_turn(void)
{
	static TimestampTz next_turn = 0;
	static bool swept = false;
	char		names[ELECTION_MAX][ZKLOCK_NAME_MAX + 1];
	bool		standing[ELECTION_MAX];
	const char *why;
	TimestampTz now = GetCurrentTimestamp();
	bool		in_recovery;
	int			n;
	int			i;
	int			kept = 0;

	if (!swept)
	{
		for (i = 0; i < zk_ctl->max_entries; i++)
		{
			ZkEntry    *e = zk_entry(i);

			/*
			 * only the worker's own (no database): a backend's campaign
			 * (zk_campaign) is its owner's to let go of, and only the
			 * owner pushes an entry on the release stack
			 */
			if (e->state != ZKE_FREE && e->kind == ZKK_LOCK && e->family == ZKF_ELECTIONS &&
				!OidIsValid(e->dbid) &&
				!e->released && pg_atomic_read_u32(&e->release_req) == 0 &&
				e->pid != MyProcPid)
				let_go(e);
		}
		swept = true;
	}
	if (!changed && now < next_turn)
		return;
	if (nmine == 0 && (zk_elections == NULL || zk_elections[0] == '\0'))
		return;					/* nothing configured, nothing to let go */
	changed = false;
	next_turn = TimestampTzPlusMilliseconds(now, ELECTION_TURN_MS);
	n = zk_elections ? split_names(zk_elections, names, &why) : 0;
	if (n < 0)
		n = 0;					/* the check hook refuses such values */
	memset(standing, 0, sizeof(standing));
	in_recovery = RecoveryInProgress();

	for (i = 0; i < nmine; i++)
	{
		ZkEntry    *e = zk_entry(mine[i].idx);
		int			k;

		if (e->gen != mine[i].gen || e->state == ZKE_FREE || e->released ||
			pg_atomic_read_u32(&e->release_req) != 0)
			continue;			/* gone: forget it */
		for (k = 0; k < n; k++)
			if (strcmp(names[k], mine[i].name) == 0)
				break;
		if (k == n || in_recovery || standing[k] ||
			e->outcome == ZKO_LOST || e->outcome == ZKO_FAILED)
		{
			let_go(e);
			continue;
		}
		standing[k] = true;
		mine[kept++] = mine[i];
	}
	nmine = kept;
	if (in_recovery)
		return;
	for (i = 0; i < n && nmine < ELECTION_MAX; i++)
		if (!standing[i])
		{
			ZkEntry    *e = stand(names[i]);

			if (e != NULL)
			{
				strlcpy(mine[nmine].name, names[i], sizeof(mine[nmine].name));
				mine[nmine].idx = zk_entry_index(e);
				mine[nmine].gen = e->gen;
				nmine++;
			}
		}
}

/*
 * The recipe's hooks into the worker (recipelist.h); it has no kind of
 * entry of its own (candidacies are ZKK_LOCK entries), and its SQL
 * functions (election_sql.c) only read the entries.
 */
const ZkRecipe zk_election_recipe = {
	.reload = elections_changed,
	.session_usable = elections_turn,
};

/*
 * zk_path('election', name): <root>/elections/<encoded name>.  Elections
 * are the cluster's (zklock.elections): the name is not qualified.
 * zk_path('campaign', name): the path of a session's campaign
 * (zk_campaign), the name qualified with the session's namespace as a
 * lock's is.
 */
static void
election_path(const char *kind, int arg, const char *name, int len,
			  char *out, size_t outlen)
{
	if (strcmp(kind, "campaign") == 0)
		zk_lock_kind_path(kind, ZKF_ELECTIONS, name, len, out, outlen);
	else
		zk_lock_parent(name, ZKF_ELECTIONS, out, outlen);	/* not qualified */
}

/* zklock.elections: the names this cluster stands in (at module load) */
static void
define_election_settings(void)
{
	DefineCustomStringVariable("zklock.elections",
							   "Elections this cluster stands in (names, comma separated).",
							   "The worker campaigns for each while the server is a primary; "
							   "zk_is_leader(name) tells whether this cluster leads.",
							   &zk_elections,
							   "",
							   PGC_SIGHUP,
							   0,
							   check_elections, assign_elections, NULL);
}

/*
 * Its backend half does nothing at the ends of transactions; it keeps one
 * entry per name listed in the worker's reserve (backend.c) and defines
 * zklock.elections
 */
const ZkRecipeBackend zk_election_backend = {
	.worker_entries = elections_listed,
	.define_settings = define_election_settings,
	ZK_PATH_HOOK("election, campaign", election_path, 0),
};
