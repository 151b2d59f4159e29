/*
 * zkbench.c - direct ZooKeeper exclusive-lock benchmark for zklock
 *
 * Runs the same lock recipe as the zklock extension, straight against
 * ZooKeeper, from N forked client processes (one ZooKeeper session each):
 *
 *   acquire: create <root>/locks/<name>/<guid>__lock__ EPHEMERAL|SEQUENTIAL
 *            get_children(<root>/locks/<name>)
 *            lowest sequence number -> held; otherwise set a data watch on
 *            the immediate predecessor only (zoo_awget), wait for it to go
 *            away, and list again
 *   release: delete the node
 *
 * Modes:
 *   default  synchronous: every request waits for its reply before the next
 *            one is sent (3 round trips per uncontended cycle)
 *   -p       pipelined acquire: create and get_children are sent back to
 *            back, then both replies are awaited (1 round trip to acquire,
 *            1 to release; the acquire recipe zklock claims)
 *   -a       asynchronous release: the delete is sent but its reply is not
 *            awaited; it travels ahead of the next cycle's create on the same
 *            session (ZooKeeper answers a session's requests in order).  With
 *            -p this is the pattern of a zklock backend whose COMMIT does not
 *            wait for the delete.
 *
 * Single-threaded: uses libzookeeper_st (asynchronous API only) driven by
 * zookeeper_interest()/zookeeper_process() and poll().
 *
 * Output: one line of key=value pairs on stdout, e.g.
 *   mode=sync clients=1 shared=0 cycles=1234 seconds=10.001 cycles_per_sec=123.4 ...
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zookeeper.h>

#define LOCK_MARKER "__lock__"
#define LAT_BUCKET_US 10            /* latency histogram resolution */
#define LAT_BUCKETS 20000           /* 10 us * 20000 = 200 ms; beyond: overflow */
#define MAX_CLIENTS 1024

/* ------------------------------------------------------------------ */
/* options */

static const char *opt_hosts = "127.0.0.1:2181";
static const char *opt_root = "/zklock-bench";
static const char *opt_prefix = "bench-";
static int opt_clients = 1;
static double opt_seconds = 10.0;
static int opt_shared = 0;
static int opt_pipeline = 0;
static int opt_async_release = 0;
static int opt_timeout_ms = 10000;
static int opt_verbose = 0;
static int opt_resolve_delay = 0;	/* 0: library default */

/* ------------------------------------------------------------------ */
/* per-client results, in a MAP_SHARED region written by the children */

struct client_result
{
	int			ok;				/* 1 when the child finished cleanly */
	int			ready;
	uint64_t	cycles;
	uint64_t	requests;		/* requests sent during the timed loop */
	uint64_t	contended;		/* cycles that had to wait for a predecessor */
	uint64_t	watches;		/* predecessor watches set */
	double		elapsed;		/* seconds from start signal to last cycle end */
	uint64_t	lat_sum_us;
	uint64_t	lat_max_us;
	uint64_t	lat_overflow;
	uint32_t	hist[LAT_BUCKETS];
	char		errmsg[256];
};

static struct client_result *results;
static pid_t parent_pid;

/* ------------------------------------------------------------------ */
/* per-process ZooKeeper state (each child has its own copy) */

static zhandle_t *zh;
static int	client_no;
static int	connected;
static int	session_dead;
static int	connecting;		/* tolerate errors while the session is set up */
static uint64_t cur_requests;	/* requests sent during the timed loop */

/* one outstanding-request slot per kind of request in flight */
struct pending
{
	int			done;
	int			rc;
	char		path[512];		/* create: created path */
	struct String_vector children;	/* get_children: copy of the list */
};

static void
die(const char *fmt, ...)
{
	va_list		ap;
	char		buf[256];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (results && client_no >= 0)
	{
		struct client_result *r = &results[client_no];

		snprintf(r->errmsg, sizeof(r->errmsg), "%s", buf);
	}
	fprintf(stderr, "zkbench[client %d, pid %d]: %s\n", client_no, (int) getpid(), buf);
	_exit(1);
}

static double
now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000u + ts.tv_nsec / 1000;
}

/* ------------------------------------------------------------------ */
/* callbacks */

static void
session_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	(void) h;
	(void) path;
	(void) ctx;
	if (type != ZOO_SESSION_EVENT)
		return;
	if (state == ZOO_CONNECTED_STATE)
		connected = 1;
	else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
		session_dead = 1;
	else
		connected = 0;
}

static void
create_done(int rc, const char *value, const struct Stat *stat, const void *data)
{
	struct pending *p = (struct pending *) data;

	(void) stat;
	p->rc = rc;
	if (rc == ZOK && value)
		snprintf(p->path, sizeof(p->path), "%s", value);
	p->done = 1;
}

static void
void_done(int rc, const void *data)
{
	struct pending *p = (struct pending *) data;

	p->rc = rc;
	p->done = 1;
}

/* completion for releases that nobody waits for (-a) */
static uint64_t async_deletes_outstanding;
static uint64_t async_delete_errors;
static int	async_deletes_drained = 1;

static void
async_delete_done(int rc, const void *data)
{
	(void) data;
	if (--async_deletes_outstanding == 0)
		async_deletes_drained = 1;
	if (rc != ZOK)
		async_delete_errors++;
}

static void
free_strings(struct String_vector *sv)
{
	int			i;

	if (sv->data)
	{
		for (i = 0; i < sv->count; i++)
			free(sv->data[i]);
		free(sv->data);
	}
	sv->data = NULL;
	sv->count = 0;
}

static void
children_done(int rc, const struct String_vector *strings, const void *data)
{
	struct pending *p = (struct pending *) data;
	int			i;

	p->rc = rc;
	free_strings(&p->children);
	if (rc == ZOK && strings && strings->count > 0)
	{
		p->children.data = calloc(strings->count, sizeof(char *));
		if (!p->children.data)
			die("out of memory");
		for (i = 0; i < strings->count; i++)
		{
			p->children.data[i] = strdup(strings->data[i]);
			if (!p->children.data[i])
				die("out of memory");
		}
		p->children.count = strings->count;
	}
	p->done = 1;
}

static void
get_done(int rc, const char *value, int len, const struct Stat *stat, const void *data)
{
	struct pending *p = (struct pending *) data;

	(void) value;
	(void) len;
	(void) stat;
	p->rc = rc;
	p->done = 1;
}

/* watch on the predecessor: any event means "look again" */
static void
pred_watcher(zhandle_t *h, int type, int state, const char *path, void *ctx)
{
	int		   *fired = (int *) ctx;

	(void) h;
	(void) state;
	(void) path;
	if (type == ZOO_SESSION_EVENT)
		return;					/* still registered; not a change */
	*fired = 1;
}

/* ------------------------------------------------------------------ */
/* event loop */

/*
 * Drive the ZooKeeper handle until *flag becomes nonzero (or, if flag is
 * NULL, until extra_fd is readable).  Returns 1 when extra_fd became
 * readable, 0 otherwise.
 */
static int
run_until(volatile int *flag, int extra_fd, double deadline)
{
	while (!(flag && *flag))
	{
		int			fd = -1;
		int			interest = 0;
		struct timeval tv = {1, 0};
		struct pollfd pfd[2];
		int			nfds = 0;
		int			zidx = -1;
		int			timeout_ms;
		int			rc;

		if (session_dead)
			die("ZooKeeper session expired");
		rc = zookeeper_interest(zh, &fd, &interest, &tv);
		if (rc != ZOK && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT &&
			!connecting)
			die("zookeeper_interest: %s", zerror(rc));
		if (fd >= 0)
		{
			pfd[nfds].fd = fd;
			pfd[nfds].events = ((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
				((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0);
			pfd[nfds].revents = 0;
			zidx = nfds++;
		}
		if (extra_fd >= 0)
		{
			pfd[nfds].fd = extra_fd;
			pfd[nfds].events = POLLIN;
			pfd[nfds].revents = 0;
			nfds++;
		}
		timeout_ms = (int) (tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
		if (deadline > 0)
		{
			double		left = deadline - now_sec();

			if (left <= 0)
				die("timed out waiting for ZooKeeper at %s", opt_hosts);
			if (timeout_ms > left * 1000)
				timeout_ms = (int) (left * 1000) + 1;
		}
		rc = poll(pfd, nfds, timeout_ms);
		if (rc < 0)
		{
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		{
			int			events = 0;

			if (zidx >= 0)
			{
				if (pfd[zidx].revents & (POLLIN | POLLHUP | POLLERR))
					events |= ZOOKEEPER_READ;
				if (pfd[zidx].revents & POLLOUT)
					events |= ZOOKEEPER_WRITE;
			}
			rc = zookeeper_process(zh, events);
			if (rc != ZOK && rc != ZNOTHING && rc != ZCONNECTIONLOSS &&
				rc != ZOPERATIONTIMEOUT && !connecting)
				die("zookeeper_process: %s", zerror(rc));
		}
		if (extra_fd >= 0 && pfd[nfds - 1].revents)
			return 1;
	}
	return 0;
}

static void
wait_for(struct pending *p)
{
	run_until(&p->done, -1, 0);
}

/* ------------------------------------------------------------------ */
/* setup: the parent chain */

static void
create_persistent(const char *path, int mode)
{
	struct pending p;
	int			rc;

	memset(&p, 0, sizeof(p));
	rc = zoo_acreate2(zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE, mode, create_done, &p);
	if (rc != ZOK)
		die("zoo_acreate2(%s): %s", path, zerror(rc));
	cur_requests++;				/* counts when a container is re-created */
	wait_for(&p);
	if (p.rc != ZOK && p.rc != ZNODEEXISTS)
		die("create %s: %s", path, zerror(p.rc));
}

/* root and root/locks persistent, root/locks/<name> a container */
static void
ensure_parents(const char *parent)
{
	char		buf[512];
	char	   *s;
	size_t		plen = strlen(opt_root);

	/* every prefix of the root itself (may be nested, e.g. /a/b) */
	if (plen > 1)
	{
		snprintf(buf, sizeof(buf), "%s", opt_root);
		for (s = buf + 1; (s = strchr(s, '/')) != NULL; s++)
		{
			*s = '\0';
			create_persistent(buf, ZOO_PERSISTENT);
			*s = '/';
		}
		create_persistent(opt_root, ZOO_PERSISTENT);
	}
	snprintf(buf, sizeof(buf), "%s/locks", plen == 1 ? "" : opt_root);
	create_persistent(buf, ZOO_PERSISTENT);
	create_persistent(parent, ZOO_CONTAINER);
}

/* ------------------------------------------------------------------ */
/* the recipe */

static long long
seq_of(const char *child)
{
	const char *m = strstr(child, LOCK_MARKER);
	const char *last = NULL;

	/* the sequence follows the last marker */
	while (m)
	{
		last = m;
		m = strstr(m + 1, LOCK_MARKER);
	}
	if (!last)
		return -1;
	last += strlen(LOCK_MARKER);
	if (*last == '\0')
		return -1;
	return strtoll(last, NULL, 10);
}

/* one full lock/unlock cycle; returns 1 if it had to wait */
static int
lock_cycle(const char *parent, const char *node_prefix, uint64_t *watches)
{
	struct pending cp;
	struct pending lp;
	const char *mine;
	long long	myseq;
	int			waited = 0;
	int			rc;

	memset(&cp, 0, sizeof(cp));
	memset(&lp, 0, sizeof(lp));

	for (;;)
	{
		rc = zoo_acreate2(zh, node_prefix, "", 0, &ZOO_OPEN_ACL_UNSAFE,
						  ZOO_EPHEMERAL_SEQUENTIAL, create_done, &cp);
		if (rc != ZOK)
			die("zoo_acreate2: %s", zerror(rc));
		cur_requests++;
		if (opt_pipeline)
		{
			rc = zoo_aget_children(zh, parent, 0, children_done, &lp);
			if (rc != ZOK)
				die("zoo_aget_children: %s", zerror(rc));
			cur_requests++;
			wait_for(&cp);
			wait_for(&lp);
		}
		else
			wait_for(&cp);
		if (cp.rc == ZNONODE)
		{
			/* the container went away (or never existed): recreate */
			ensure_parents(parent);
			memset(&cp, 0, sizeof(cp));
			free_strings(&lp.children);
			memset(&lp, 0, sizeof(lp));
			continue;
		}
		if (cp.rc != ZOK)
			die("create %s: %s", node_prefix, zerror(cp.rc));
		break;
	}
	mine = strrchr(cp.path, '/');
	mine = mine ? mine + 1 : cp.path;
	myseq = seq_of(mine);

	for (;;)
	{
		long long	best_pred = -1;
		const char *pred = NULL;
		int			found_self = 0;
		int			i;

		if (!opt_pipeline || lp.done == 0 || waited)
		{
			lp.done = 0;
			rc = zoo_aget_children(zh, parent, 0, children_done, &lp);
			if (rc != ZOK)
				die("zoo_aget_children: %s", zerror(rc));
			cur_requests++;
			wait_for(&lp);
		}
		if (lp.rc != ZOK)
			die("get_children %s: %s", parent, zerror(lp.rc));

		for (i = 0; i < lp.children.count; i++)
		{
			const char *c = lp.children.data[i];
			long long	s;

			if (strcmp(c, mine) == 0)
			{
				found_self = 1;
				continue;
			}
			s = seq_of(c);
			if (s < 0)
				continue;
			if (s < myseq && s > best_pred)
			{
				best_pred = s;
				pred = c;
			}
		}
		if (!found_self)
			die("own node %s missing from %s", mine, parent);
		if (!pred)
			break;				/* lowest: we hold the lock */

		/* watch only the immediate predecessor */
		{
			char		ppath[1024];
			struct pending gp;
			int			fired = 0;

			snprintf(ppath, sizeof(ppath), "%s/%s", parent, pred);
			memset(&gp, 0, sizeof(gp));
			rc = zoo_awget(zh, ppath, pred_watcher, &fired, get_done, &gp);
			if (rc != ZOK)
				die("zoo_awget: %s", zerror(rc));
			cur_requests++;
			(*watches)++;
			wait_for(&gp);
			if (gp.rc == ZOK)
				run_until(&fired, -1, 0);	/* wait until it changes/goes */
			else if (gp.rc != ZNONODE)
				die("get %s: %s", ppath, zerror(gp.rc));
			waited = 1;
		}
	}
	free_strings(&lp.children);

	/* release */
	if (opt_async_release)
	{
		rc = zoo_adelete(zh, cp.path, -1, async_delete_done, NULL);
		if (rc != ZOK)
			die("zoo_adelete: %s", zerror(rc));
		async_deletes_outstanding++;
		async_deletes_drained = 0;
		cur_requests++;
	}
	else
	{
		struct pending dp;

		memset(&dp, 0, sizeof(dp));
		rc = zoo_adelete(zh, cp.path, -1, void_done, &dp);
		if (rc != ZOK)
			die("zoo_adelete: %s", zerror(rc));
		cur_requests++;
		wait_for(&dp);
		if (dp.rc != ZOK)
			die("delete %s: %s", cp.path, zerror(dp.rc));
	}
	return waited;
}

/* ------------------------------------------------------------------ */
/* child process */

static void
make_guid(char *out, size_t outlen)
{
	unsigned char b[16];
	int			fd = open("/dev/urandom", O_RDONLY);
	size_t		got = 0;

	if (fd >= 0)
	{
		ssize_t		n = read(fd, b, sizeof(b));

		if (n > 0)
			got = (size_t) n;
		close(fd);
	}
	if (got < sizeof(b))
	{
		uint64_t	x = now_us() ^ ((uint64_t) getpid() << 32);
		size_t		i;

		for (i = got; i < sizeof(b); i++)
		{
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			b[i] = (unsigned char) (x >> 56);
		}
	}
	b[6] = (b[6] & 0x0f) | 0x40;
	b[8] = (b[8] & 0x3f) | 0x80;
	snprintf(out, outlen,
			 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
			 b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static void
child_main(int idx, int ready_fd, int go_fd)
{
	struct client_result *r = &results[idx];
	char		parent[512];
	char		node_prefix[600];
	char		guid[40];
	double		start;
	double		deadline;
	double		end;
	char		c;

	client_no = idx;
	if (opt_shared)
		snprintf(parent, sizeof(parent), "%s/locks/%sshared",
				 strcmp(opt_root, "/") == 0 ? "" : opt_root, opt_prefix);
	else
		snprintf(parent, sizeof(parent), "%s/locks/%s%d",
				 strcmp(opt_root, "/") == 0 ? "" : opt_root, opt_prefix, idx);
	make_guid(guid, sizeof(guid));
	snprintf(node_prefix, sizeof(node_prefix), "%s/%s" LOCK_MARKER, parent, guid);

	zh = zookeeper_init(opt_hosts, session_watcher, opt_timeout_ms, NULL, NULL, 0);
	if (!zh)
		die("zookeeper_init(%s): %s", opt_hosts, strerror(errno));
	if (opt_resolve_delay != 0 &&
		zoo_set_servers_resolution_delay(zh, opt_resolve_delay) != ZOK)
		die("zoo_set_servers_resolution_delay(%d) failed", opt_resolve_delay);
	connecting = 1;
	run_until(&connected, -1, now_sec() + 15.0);
	connecting = 0;
	ensure_parents(parent);

	/* report ready, then wait for the start signal while keeping the
	 * session serviced */
	r->ready = 1;
	c = 'r';
	if (write(ready_fd, &c, 1) != 1)
		die("write(ready): %s", strerror(errno));
	close(ready_fd);
	while (!run_until(NULL, go_fd, 0))
		;
	close(go_fd);

	start = now_sec();
	deadline = start + opt_seconds;
	cur_requests = 0;
	end = start;
	while (end < deadline)
	{
		uint64_t	t0 = now_us();
		uint64_t	lat;

		if (lock_cycle(parent, node_prefix, &r->watches))
			r->contended++;
		lat = now_us() - t0;
		r->cycles++;
		r->lat_sum_us += lat;
		if (lat > r->lat_max_us)
			r->lat_max_us = lat;
		if (lat / LAT_BUCKET_US < LAT_BUCKETS)
			r->hist[lat / LAT_BUCKET_US]++;
		else
			r->lat_overflow++;
		end = now_sec();
	}
	/* drain releases still in flight (-a) */
	if (opt_async_release)
	{
		if (async_deletes_outstanding > 0)
			run_until(&async_deletes_drained, -1, now_sec() + 30.0);
		end = now_sec();
		if (async_delete_errors)
			die("%" PRIu64 " asynchronous deletes failed", async_delete_errors);
	}
	r->elapsed = end - start;
	r->requests = cur_requests;
	zookeeper_close(zh);
	r->ok = 1;
	_exit(0);
}

/* ------------------------------------------------------------------ */
/* parent */

static void
usage(const char *prog)
{
	fprintf(stderr,
			"usage: %s [-h hosts] [-c clients] [-T seconds] [-r root] [-s] [-p] [-a]\n"
			"          [-n name-prefix] [-t session-timeout-ms] [-R ms] [-v]\n"
			"  -h hosts     ZooKeeper connect string (default %s)\n"
			"  -c clients   client processes, one ZooKeeper session each (default 1)\n"
			"  -T seconds   duration of the timed run (default 10)\n"
			"  -r root      root znode (default %s); nodes go to <root>/locks/<name>/\n"
			"  -s           all clients lock one shared name (<prefix>shared) instead\n"
			"               of one name each (<prefix>0 .. <prefix>N-1, as pgbench's\n"
			"               :client_id)\n"
			"  -p           pipelined acquire: create + get_children in one round trip\n"
			"  -a           asynchronous release: do not wait for the delete's reply\n"
			"  -n prefix    lock name prefix (default %s)\n"
			"  -t ms        session timeout (default %d)\n"
			"  -R ms        zoo_set_servers_resolution_delay(): by default (0) the\n"
			"               client library resolves the host list at every\n"
			"               zookeeper_interest() call; -1 = only on connection loss\n"
			"  -v           also print per-client results on stderr\n",
			prog, opt_hosts, opt_root, opt_prefix, opt_timeout_ms);
	exit(2);
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/* latency percentile from the merged histogram, in microseconds */
static double
percentile(const uint64_t *hist, uint64_t overflow, uint64_t total,
		   uint64_t max_us, double q)
{
	uint64_t	want;
	uint64_t	acc = 0;
	int			i;

	if (total == 0)
		return 0;
	want = (uint64_t) (q * total + 0.5);
	if (want < 1)
		want = 1;
	for (i = 0; i < LAT_BUCKETS; i++)
	{
		acc += hist[i];
		if (acc >= want)
			return (i + 0.5) * LAT_BUCKET_US;
	}
	(void) overflow;
	return (double) max_us;
}

int
main(int argc, char **argv)
{
	int			opt;
	int			ready_pipe[2];
	int			go_pipe[2];
	pid_t	   *pids;
	int			i;
	int			nready = 0;
	int			failed = 0;
	size_t		map_len;
	uint64_t	cycles = 0, requests = 0, contended = 0, watches = 0;
	uint64_t	lat_sum = 0, lat_max = 0, overflow = 0;
	uint64_t   *hist;
	double		elapsed = 0;
	double	   *rates;
	char	   *end;

	client_no = -1;
	while ((opt = getopt(argc, argv, "h:c:T:r:n:t:R:spav")) != -1)
	{
		switch (opt)
		{
			case 'h':
				opt_hosts = optarg;
				break;
			case 'c':
				opt_clients = (int) strtol(optarg, &end, 10);
				if (*end || opt_clients < 1 || opt_clients > MAX_CLIENTS)
					usage(argv[0]);
				break;
			case 'T':
				opt_seconds = strtod(optarg, &end);
				if (*end || opt_seconds <= 0)
					usage(argv[0]);
				break;
			case 'r':
				opt_root = optarg;
				break;
			case 'n':
				opt_prefix = optarg;
				break;
			case 't':
				opt_timeout_ms = (int) strtol(optarg, &end, 10);
				if (*end || opt_timeout_ms < 100)
					usage(argv[0]);
				break;
			case 'R':
				opt_resolve_delay = (int) strtol(optarg, &end, 10);
				if (*end || opt_resolve_delay < -1)
					usage(argv[0]);
				break;
			case 's':
				opt_shared = 1;
				break;
			case 'p':
				opt_pipeline = 1;
				break;
			case 'a':
				opt_async_release = 1;
				break;
			case 'v':
				opt_verbose = 1;
				break;
			default:
				usage(argv[0]);
		}
	}
	if (optind != argc)
		usage(argv[0]);
	if (opt_root[0] != '/' || (strlen(opt_root) > 1 && opt_root[strlen(opt_root) - 1] == '/'))
	{
		fprintf(stderr, "zkbench: root must be an absolute znode path without trailing '/'\n");
		return 2;
	}
	if (strchr(opt_prefix, '/'))
	{
		fprintf(stderr, "zkbench: name prefix must not contain '/'\n");
		return 2;
	}

	zoo_set_debug_level(opt_verbose ? ZOO_LOG_LEVEL_WARN : ZOO_LOG_LEVEL_ERROR);
	signal(SIGPIPE, SIG_IGN);
	parent_pid = getpid();

	map_len = sizeof(struct client_result) * (size_t) opt_clients;
	results = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (results == MAP_FAILED)
	{
		perror("zkbench: mmap");
		return 1;
	}
	memset(results, 0, map_len);
	if (pipe(ready_pipe) != 0 || pipe(go_pipe) != 0)
	{
		perror("zkbench: pipe");
		return 1;
	}
	pids = calloc(opt_clients, sizeof(pid_t));
	rates = calloc(opt_clients, sizeof(double));
	hist = calloc(LAT_BUCKETS, sizeof(uint64_t));
	if (!pids || !rates || !hist)
	{
		fprintf(stderr, "zkbench: out of memory\n");
		return 1;
	}
	fflush(stdout);
	fflush(stderr);
	for (i = 0; i < opt_clients; i++)
	{
		pid_t		pid = fork();

		if (pid < 0)
		{
			perror("zkbench: fork");
			failed = 1;
			break;
		}
		if (pid == 0)
		{
			/* do not outlive the parent (e.g. when the runner is stopped) */
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			if (getppid() != parent_pid)
				_exit(1);
			close(ready_pipe[0]);
			close(go_pipe[1]);
			child_main(i, ready_pipe[1], go_pipe[0]);
		}
		pids[i] = pid;
	}
	close(ready_pipe[1]);
	close(go_pipe[0]);

	/* wait until every child is connected and set up (EOF = a child died) */
	while (!failed && nready < opt_clients)
	{
		char		c;
		ssize_t		n = read(ready_pipe[0], &c, 1);

		if (n == 1)
			nready++;
		else if (n < 0 && errno == EINTR)
			continue;
		else
			failed = 1;
	}
	close(ready_pipe[0]);
	if (failed)
	{
		/* a client could not connect or set up: stop the others */
		for (i = 0; i < opt_clients; i++)
			if (pids[i] > 0)
				kill(pids[i], SIGTERM);
	}
	/* start signal: every child sees EOF on the go pipe */
	close(go_pipe[1]);

	for (i = 0; i < opt_clients; i++)
	{
		int			status;

		if (pids[i] <= 0)
			continue;
		while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !results[i].ok)
			failed = 1;
	}
	if (failed)
	{
		for (i = 0; i < opt_clients; i++)
			if (!results[i].ok && results[i].errmsg[0])
				fprintf(stderr, "zkbench: client %d failed: %s\n", i, results[i].errmsg);
		fprintf(stderr, "zkbench: failed\n");
		return 1;
	}

	for (i = 0; i < opt_clients; i++)
	{
		struct client_result *r = &results[i];
		int			b;

		cycles += r->cycles;
		requests += r->requests;
		contended += r->contended;
		watches += r->watches;
		lat_sum += r->lat_sum_us;
		overflow += r->lat_overflow;
		if (r->lat_max_us > lat_max)
			lat_max = r->lat_max_us;
		if (r->elapsed > elapsed)
			elapsed = r->elapsed;
		rates[i] = r->elapsed > 0 ? r->cycles / r->elapsed : 0;
		for (b = 0; b < LAT_BUCKETS; b++)
			hist[b] += r->hist[b];
		if (opt_verbose)
			fprintf(stderr, "client %d: cycles=%" PRIu64 " seconds=%.3f requests=%" PRIu64
					" contended=%" PRIu64 "\n", i, r->cycles, r->elapsed,
					r->requests, r->contended);
	}
	qsort(rates, opt_clients, sizeof(double), cmp_double);

	printf("mode=%s release=%s clients=%d shared=%d cycles=%" PRIu64
		   " seconds=%.3f cycles_per_sec=%.1f requests=%" PRIu64
		   " requests_per_cycle=%.3f contended=%" PRIu64 " watches=%" PRIu64
		   " lat_avg_us=%.0f lat_p50_us=%.0f lat_p99_us=%.0f lat_max_us=%" PRIu64
		   " client_rate_min=%.1f client_rate_max=%.1f\n",
		   opt_pipeline ? "pipelined" : "sync",
		   opt_async_release ? "async" : "sync",
		   opt_clients, opt_shared, cycles, elapsed,
		   elapsed > 0 ? cycles / elapsed : 0.0,
		   requests, cycles ? (double) requests / cycles : 0.0,
		   contended, watches,
		   cycles ? (double) lat_sum / cycles : 0.0,
		   percentile(hist, overflow, cycles, lat_max, 0.50),
		   percentile(hist, overflow, cycles, lat_max, 0.99),
		   lat_max, rates[0], rates[opt_clients - 1]);
	return 0;
}
