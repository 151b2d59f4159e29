/*-------------------------------------------------------------------------
 *
 * lock_names.c
 *	  The lock's nodes, at the bottom of its stack (README): the parent of
 *	  a lock, a semaphore, a lease or an election (by family), reading a
 *	  contender's name, and ordering contenders.  Pure functions, run by
 *	  backends and the worker; the semaphore, the lease and the election
 *	  use them too.
 *
 *	  Ordering contenders: a node's sequence suffix is its parent's cversion,
 *	  a signed 32-bit number that wraps after 2^31 children (ZooKeeper then
 *	  writes negative suffixes, or repeats one).  The worker orders by the
 *	  suffix while that is unambiguous and by each node's czxid otherwise;
 *	  zk_lock_blocker() decides from that order.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "lock.h"

#include <ctype.h>

/*
 * The path hook (zk_path) of a recipe whose objects are the locks of one
 * family (its path_arg): the lock parent of name, qualified as zk_path does
 */
void
zk_lock_kind_path(const char *kind, int family, const char *name, int len,
				  char *out, size_t outlen)
{
	zk_lock_parent(zk_path_qname(name, len, &len), family, out, outlen);
}

/* <root>/locks/<encoded name> for a UTF-8 name (leases, elections: their own dirs) */
void
zk_lock_parent(const char *name, int family, char *out, size_t outlen)
{
	char		ename[ZKLOCK_ENAME_MAX + 1];

	zk_encode_name(name, strlen(name), ename);
	if (family == ZKF_SEMAPHORES)
		snprintf(out, outlen, "%s/semaphores/%s-__lock__", zk_root, ename);
	else if (family == ZKF_SEMPOOL)
		snprintf(out, outlen, "%s/semaphores/%s", zk_root, ename);
	else if (family == ZKF_LEASEDIR)
		snprintf(out, outlen, "%s/leases", zk_root);	/* the name is not used */
	else
		snprintf(out, outlen, "%s/%s/%s", zk_root,
				 family == ZKF_LEASES ? "leases" :
				 family == ZKF_ELECTIONS ? "elections" : "locks", ename);
}

/*
 * The suffix of a contender: everything after the last "__lock__" or
 * "__rlock__": digits, possibly signed (after the wrap ZooKeeper writes
 * e.g. "-2147483648").  Returns false when there is none.
 */
static const char *
contender_suffix(const char *child, bool *shared)
{
	const char *p = NULL;
	const char *q;

	for (q = strstr(child, "__"); q != NULL; q = strstr(q + 1, "__"))
	{
		if (strncmp(q, "__lock__", 8) == 0)
		{
			p = q + 8;
			*shared = false;
		}
		else if (strncmp(q, "__rlock__", 9) == 0)
		{
			p = q + 9;
			*shared = true;
		}
	}
	return p;
}

/*
 * Parse a contender's sequence suffix.  ZooKeeper writes "%010d" of a
 * signed 32-bit counter: ten digits, or a minus and ten digits (or fewer
 * digits after the minus, zero padded to width ten).
 */
bool
zk_node_seq(const char *child, int64 *seq)
{
	bool		shared;
	const char *p = contender_suffix(child, &shared);
	const char *d;
	int64		v = 0;
	int			ndig = 0;

	if (p == NULL)
		return false;
	d = (*p == '-') ? p + 1 : p;
	for (; *d; d++)
	{
		if (!isdigit((unsigned char) *d) || ++ndig > 10)
			return false;
		v = v * 10 + (*d - '0');
	}
	if (ndig == 0 || (*p != '-' && ndig != 10) ||
		(*p == '-' && strlen(p) < 10))
		return false;
	if (*p == '-')
		v = -v;
	if (v > PG_INT32_MAX || v < PG_INT32_MIN)
		return false;
	*seq = v;
	return true;
}

/*
 * Is a child of a lock node a contender, kazoo's way: "...__lock__<seq>"
 * (exclusive) or "...__rlock__<seq>" (shared), the sequence as ZooKeeper
 * writes it, negative after the wrap included?
 */
bool
zk_node_is_contender(const char *child, bool *shared)
{
	int64		seq;

	if (contender_suffix(child, shared) == NULL)
		return false;
	return zk_node_seq(child, &seq);
}

/* qsort comparator of contenders: by key (creation order), then by name */
static int
contender_cmp(const void *a, const void *b)
{
	const ZkContender *x = a;
	const ZkContender *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Sort contenders into creation order, as zk_lock_blocker wants them */
void
zk_sort_contenders(ZkContender *c, int n)
{
	if (n > 1)
		qsort(c, n, sizeof(ZkContender), contender_cmp);
}

/* Do two contenders belong to one backend?  (first half of their guid) */
bool
zk_same_owner(const ZkContender *a, const ZkContender *b)
{
	if (strlen(a->name) < ZKLOCK_GUID_LEN / 2 || strlen(b->name) < ZKLOCK_GUID_LEN / 2)
		return false;
	return strncmp(a->name, b->name, ZKLOCK_GUID_LEN / 2) == 0;
}

/*
 * An upgrade's bounds, for contender c[me]: the index of base, the shared
 * node its backend holds (with guess_base and no base: the backend's oldest
 * node), -1 for none; and in *behind_from the first index after it that is
 * another owner's exclusive contender (n for none): from there on, nothing
 * can be granted before base goes.
 */
static int
upgrade_bounds(ZkContender *c, int n, int me, const char *base, bool guess_base,
			   int *behind_from)
{
	int			own_oldest = -1;
	int			i;

	*behind_from = n;
	for (i = 0; i < me && (base != NULL || guess_base); i++)
	{
		if (!zk_same_owner(&c[i], &c[me]))
			continue;
		if (base == NULL || strcmp(c[i].name, base) == 0)
		{
			own_oldest = i;
			break;
		}
	}
	if (own_oldest >= 0 && !c[me].shared)
	{
		for (i = own_oldest + 1; i < me; i++)
		{
			if (!c[i].shared && !zk_same_owner(&c[i], &c[me]))
			{
				*behind_from = i;
				break;
			}
		}
	}
	return own_oldest;
}

/*
 * The recipe, for contender c[me] of a lock whose contenders c[0..n-1] are
 * sorted by creation order.  Returns ZKLOCK_HELD when it holds the lock,
 * the index of the contender it must wait for (the youngest that blocks
 * it), or ZKLOCK_DEADLOCK when waiting could never end.
 *
 * - A shared contender is blocked by older exclusive ones; an exclusive
 *   one by every older contender.
 * - A backend's own nodes never block each other (they are the same
 *   backend: a node it let go is on its way out and held by nobody).
 * - Upgrade: "base" names the node of the shared lock this backend HOLDS
 *   (NULL when it holds none).  Asking for the exclusive lock, it is not
 *   blocked by the contenders that cannot be granted before base goes: an
 *   exclusive one younger than base, and everything younger than that.
 *   The backend keeps base until its exclusive hold ends, so they stay
 *   blocked.  Shared contenders between base and the first such exclusive
 *   one may hold the lock now, and are waited for.  Only a node the
 *   backend really holds may serve as base: a node it has let go (its
 *   delete still on the way) must not let it jump the queue.
 * - If a contender we wait for belongs to a backend that has an exclusive
 *   node behind base, that backend waits for our base while we wait for
 *   it: a deadlock.
 *
 * The view of zk_lock_holders cannot know which node a backend holds; with
 * guess_base, the oldest node of the same backend stands for it there.
 * The worker never guesses.
 */
static int
lock_blocker(ZkContender *c, int n, int me, const char *base,
			 bool guess_base, int *rival)
{
	int			behind_from;	/* first index that is behind our base */
	int			own_oldest = upgrade_bounds(c, n, me, base, guess_base, &behind_from);
	int			pred = ZKLOCK_HELD;
	int			i;

	for (i = 0; i < me; i++)
	{
		if (zk_same_owner(&c[i], &c[me]))
			continue;
		if (i >= behind_from)
			break;
		if (c[me].shared && c[i].shared)
			continue;
		pred = i;
	}

	if (pred >= 0 && own_oldest >= 0 && behind_from < n)
	{
		/* does the owner of any blocker wait behind our base? */
		for (i = 0; i < behind_from; i++)
		{
			int			j;

			if (zk_same_owner(&c[i], &c[me]))
				continue;
			if (c[me].shared && c[i].shared)
				continue;
			for (j = behind_from; j < me; j++)
			{
				if (!c[j].shared && zk_same_owner(&c[j], &c[i]))
				{
					*rival = i;
					return ZKLOCK_DEADLOCK;
				}
			}
		}
	}
	return pred;
}

int
zk_lock_blocker(ZkContender *c, int n, int me, const char *base,
				bool guess_base)
{
	int			rival;

	return lock_blocker(c, n, me, base, guess_base, &rival);
}

/*
 * When zk_lock_blocker() says ZKLOCK_DEADLOCK: the contender of the other
 * backend that upgrades, the one c[me] would wait for (-1: none)
 */
int
zk_lock_upgrade_rival(ZkContender *c, int n, int me, const char *base)
{
	int			rival = -1;

	if (lock_blocker(c, n, me, base, false, &rival) != ZKLOCK_DEADLOCK)
		return -1;
	return rival;
}

/*
 * Every contender c[me] waits for, by zk_lock_blocker's rules (not only the
 * youngest): the indexes of other owners' contenders older than it that
 * conflict with it, and for an upgrade (base: the shared node this backend
 * holds) only those not behind base.  Writes at most max of them into out;
 * returns how many there are (more than max: the caller knows it saw only
 * some).  For deadlock detection (lock_deadlock.c).
 */
int
zk_lock_blockers(ZkContender *c, int n, int me, const char *base, int *out, int max)
{
	int			behind_from;
	int			count = 0;
	int			i;

	(void) upgrade_bounds(c, n, me, (base != NULL && base[0] != '\0') ? base : NULL,
						  false, &behind_from);
	for (i = 0; i < me && i < behind_from; i++)
	{
		if (zk_same_owner(&c[i], &c[me]))
			continue;
		if (c[me].shared && c[i].shared)
			continue;
		if (count < max)
			out[count] = i;
		count++;
	}
	return count;
}

/*
 * Refuse semaphore names that land on another semaphore's internal node.
 * kazoo's layout puts the guard lock of semaphore "x" beside its pool, at
 * semaphores/x-__lock__: the pool of a semaphore named "x-__lock__" would
 * be that guard, its leases the guard's lock nodes.  The suffix is plain
 * (never %-encoded), so comparing the UTF-8 name is exact.  ("-__lock__"
 * alone is the guard of no semaphore: names are never empty.)  No other
 * recipe shares a directory between a name and internal nodes.
 */
void
zk_check_semaphore_name(const char *name, int len)
{
	static const char suffix[] = "-__lock__";
	int			slen = sizeof(suffix) - 1;

	if (len > slen && memcmp(name + len - slen, suffix, slen) == 0)
	{
		char	   *shown = zk_display_name(pnstrdup(name, len));
		char	   *owner = zk_display_name(pnstrdup(name, len - slen));

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock semaphore name \"%s\" ends in \"%s\"", shown, suffix),
				 errdetail("Its node would be the guard lock of semaphore \"%s\" (kazoo's layout).",
						   owner),
				 errhint("Choose a name that does not end in \"%s\".", suffix)));
	}
}
