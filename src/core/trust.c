/*-------------------------------------------------------------------------
 *
 * trust.c
 *	  What the worker trusts of what it finds in ZooKeeper (see trust.h):
 *	  the cluster's key, the MACs of its durable nodes, and rate-limited
 *	  log lines about what it refused.
 *
 *	  Why a MAC, and what it does not protect: src/README, section 5.
 *
 *	  The key is read (or made) by the postmaster when it first creates
 *	  shared memory, and kept for its life: a crash and restart reuses it.
 *	  A key file that is not a regular file of the server's user, is not
 *	  exactly ZK_KEY_LEN bytes, or has group or world access in a data
 *	  directory the group may enter (0750) stops the start, as ssl_key_file
 *	  does; in a data directory of 0700 nobody else could reach it, and a
 *	  group or world bit (a copy by a tool that does not keep modes) is
 *	  taken away.  Nodes an older zklock wrote carry no MAC; they
 *	  are accepted only by the settling passes of the run that made the key,
 *	  until one completes (the data directory had none, so those there
 *	  before can only be that older version's; any written later are not).
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "trust.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hmac.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

/* the postmaster's copy, kept across a crash and restart */
static uint8 pm_key[ZK_KEY_LEN];
static bool pm_key_loaded = false;

/* Refuse the key file (FATAL: the server does not start): why, and a hint */
static void
key_refuse(const char *why, const char *hint)
{
	ereport(FATAL,
			(errcode(ERRCODE_CONFIG_FILE_ERROR),
			 errmsg("zklock: refusing the key file \"%s/%s\"", DataDir, ZK_KEY_FILE),
			 errdetail("%s The key proves to this cluster that the queue transaction nodes and claims it finds in ZooKeeper are its own; whoever reads it can forge them.",
					   why),
			 errhint("%s", hint)));
}

/*
 * Write a file of the data directory that is the server user's alone
 * (0600, whatever the umask and the directory's mode): len bytes of data
 * into a new file tmp (O_EXCL, after removing a leftover), made 0600 with
 * fchmod too, then renamed over path; with durable, the file is fsynced
 * before (the rename's own durability is the caller's: an fsync of the
 * directory).  False, with errno set, tmp removed and path as it was, when
 * it could not.
 */
bool
zk_write_private_file(const char *path, const char *tmp, const void *data,
					  int len, bool durable)
{
	int			fd;
	bool		ok;
	int			save;

	(void) unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | PG_BINARY, S_IRUSR | S_IWUSR);
	if (fd < 0)
		return false;
	ok = fchmod(fd, S_IRUSR | S_IWUSR) == 0 &&
		write(fd, data, len) == len &&
		(!durable || pg_fsync(fd) == 0);
	if (close(fd) != 0)
		ok = false;
	if (ok && rename(tmp, path) == 0)
		return true;
	save = errno;
	(void) unlink(tmp);
	errno = save;
	return false;
}

/* make a new key: a temporary file, 0600 whatever the umask, renamed */
static void
key_create(void)
{
	int			dfd;

	if (!pg_strong_random(pm_key, ZK_KEY_LEN))
		ereport(FATAL,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("zklock: could not generate a random key for \"%s\"", ZK_KEY_FILE)));
	if (!zk_write_private_file(ZK_KEY_FILE, ZK_KEY_FILE ".tmp", pm_key, ZK_KEY_LEN, true))
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("zklock: could not write file \"%s/%s\": %m", DataDir, ZK_KEY_FILE)));
	/* the rename itself, durable */
	dfd = open(".", O_RDONLY | PG_BINARY, 0);
	if (dfd < 0 || pg_fsync(dfd) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("zklock: could not fsync the data directory \"%s\": %m", DataDir)));
	close(dfd);
	ereport(LOG,
			(errmsg("zklock: made a new key in \"%s/%s\"", DataDir, ZK_KEY_FILE),
			 errdetail("It signs the queue transaction nodes and claims of this cluster; back it up with the data directory.")));
}

/* read the key; false when there is no key file */
static bool
key_read(void)
{
	struct stat st;
	int			fd;
	char		why[128];

	fd = open(ZK_KEY_FILE, O_RDONLY | PG_BINARY, 0);
	if (fd < 0)
	{
		if (errno == ENOENT)
			return false;
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("zklock: could not open the key file \"%s/%s\": %m", DataDir, ZK_KEY_FILE)));
	}
	if (fstat(fd, &st) != 0)
		ereport(FATAL,
				(errcode_for_file_access(),
				 errmsg("zklock: could not stat the key file \"%s/%s\": %m", DataDir, ZK_KEY_FILE)));
	if (!S_ISREG(st.st_mode))
		key_refuse("It is not a regular file.",
				   "Remove it: a new key is made at the next start (nodes signed with the old one are then left alone).");
	if (st.st_uid != geteuid())
		key_refuse("It is not owned by the database server's user.",
				   "Make the server's user its owner (chown) and allow nobody else to read it (chmod 0600).");
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		struct stat dst;

		/*
		 * Others could read it if the data directory lets them in: with
		 * group access (data_directory_mode 0750) the group can.  A
		 * directory of 0700 (PostgreSQL allows no other mode) kept them
		 * out, and a copy made by a tool that does not keep modes (cp,
		 * File::Copy) is simply made 0600 again.
		 */
		if (stat(".", &dst) != 0 || (dst.st_mode & (S_IRWXG | S_IRWXO)) != 0 ||
			fchmod(fd, S_IRUSR | S_IWUSR) != 0)
		{
			snprintf(why, sizeof(why), "It has group or world access (mode %04o), in a data directory the group may enter.",
					 (unsigned int) (st.st_mode & 07777));
			key_refuse(why, "Allow only the server's user to read it (chmod 0600, as for ssl_key_file); if others may have read it, remove it: a new key is made at the next start, and nodes signed with the old one are then left alone.");
		}
		ereport(LOG,
				(errmsg("zklock: made the key file \"%s/%s\" readable by the server's user only (it was mode %04o)",
						DataDir, ZK_KEY_FILE, (unsigned int) (st.st_mode & 07777)),
				 errdetail("The data directory (mode 0700) kept everybody else out meanwhile.")));
	}
	if (st.st_size != ZK_KEY_LEN ||
		read(fd, pm_key, ZK_KEY_LEN) != ZK_KEY_LEN)
	{
		snprintf(why, sizeof(why), "It is not %d bytes long (%lld).", ZK_KEY_LEN,
				 (long long) st.st_size);
		key_refuse(why,
				   "Restore it from a backup of this data directory, or remove it: a new key is made at the next start (nodes signed with the old one are then left alone).");
	}
	close(fd);
	return true;
}

/*
 * Called by the postmaster when it creates shared memory (working
 * directory: the data directory).  Only the first time reads the file.
 */
void
zk_key_startup(void)
{
	bool		made = false;

	if (!pm_key_loaded)
	{
		if (!key_read())
		{
			key_create();
			made = true;
		}
		pm_key_loaded = true;
	}
	memcpy(zk_ctl->mac_key, pm_key, ZK_KEY_LEN);
	zk_ctl->mac_key_new = made;
}

/* nodes without a MAC: only an older version's, before the key existed */
bool
zk_mac_unsigned_ok(void)
{
	return zk_ctl->mac_key_new;
}

/*
 * The run that made the key has settled what it found (a settling pass
 * that neither failed, nor waited for a run, nor took one over): nodes
 * without a MAC are refused from now on.  Any written later are not an
 * older version's: this one signs all it writes.  Worker only.
 */
void
zk_mac_unsigned_done(void)
{
	if (!zk_ctl->mac_key_new)
		return;
	zk_ctl->mac_key_new = false;
	ereport(LOG,
			(errmsg("zklock: the nodes an older zklock left without a MAC are settled; nodes without a MAC are refused from now on")));
}

/* a node's path under the root (what its MAC binds) */
const char *
zk_mac_relpath(const char *path)
{
	size_t		rl = strlen(zk_root);

	if (strncmp(path, zk_root, rl) == 0 && path[rl] == '/')
		return path + rl + 1;
	return path;
}

/*
 * HMAC-SHA256(key, relpath NUL part1 part2).  pg_hmac_* remembers its
 * context in CurrentResourceOwner, which the worker has none of: it gets
 * one of its own for the call.
 */
static void
mac_rel_parts(const char *rel, const void *p1, size_t l1, const void *p2, size_t l2,
			  uint8 *out)
{
	static ResourceOwner mac_owner = NULL;
	ResourceOwner save = CurrentResourceOwner;
	pg_hmac_ctx *ctx;
	bool		ok;

	if (save == NULL)
	{
		if (mac_owner == NULL)
			mac_owner = ResourceOwnerCreate(NULL, "zklock mac");
		CurrentResourceOwner = mac_owner;
	}
	PG_TRY();
	{
		ctx = pg_hmac_create(PG_SHA256);
		ok = ctx != NULL &&
			pg_hmac_init(ctx, zk_ctl->mac_key, ZK_KEY_LEN) == 0 &&
			pg_hmac_update(ctx, (const uint8 *) rel, strlen(rel) + 1) == 0 &&
			(l1 == 0 || pg_hmac_update(ctx, p1, l1) == 0) &&
			(l2 == 0 || pg_hmac_update(ctx, p2, l2) == 0) &&
			pg_hmac_final(ctx, out, ZK_MAC_LEN) == 0;
		if (!ok)
		{
			char		why[128];

			strlcpy(why, ctx != NULL ? pg_hmac_error(ctx) : "out of memory",
					sizeof(why));
			pg_hmac_free(ctx);	/* before the error: it owns no memory of ours */
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("zklock: could not compute a MAC: %s", why)));
		}
		pg_hmac_free(ctx);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = save;
	}
	PG_END_TRY();
}

/*
 * The same for a node's path (a function of its own: gcc 14 takes "path"
 * for clobbered by PG_TRY's longjmp when it is an argument of the function
 * with the PG_TRY)
 */
void
zk_mac_parts(const char *path, const void *p1, size_t l1, const void *p2, size_t l2,
		  uint8 *out)
{
	mac_rel_parts(zk_mac_relpath(path), p1, l1, p2, l2, out);
}

/* The MAC of the data a node at path holds (path taken under the root) */
void
zk_mac(const char *path, const void *data, size_t len, uint8 *out)
{
	zk_mac_parts(path, data, len, NULL, 0, out);
}

/* A MAC as ZK_MAC_HEX lowercase hex digits and a NUL */
void
zk_mac_hex(const uint8 *mac, char *out)
{
	int			i;

	for (i = 0; i < ZK_MAC_LEN; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

/* in constant time */
bool
zk_mac_equal(const uint8 *a, const uint8 *b)
{
	uint8		d = 0;
	int			i;

	for (i = 0; i < ZK_MAC_LEN; i++)
		d |= a[i] ^ b[i];
	return d == 0;
}

/* Does hex spell mac (in constant time)?  hex needs ZK_MAC_HEX characters */
static bool
mac_hex_equal(const uint8 *mac, const char *hex)
{
	char		mine[ZK_MAC_HEX + 1];
	uint8		d = 0;
	int			i;

	zk_mac_hex(mac, mine);
	for (i = 0; i < ZK_MAC_HEX; i++)
		d |= (uint8) (mine[i] ^ hex[i]);
	return d == 0;
}

/* ---- claims: {...,"mac":"<hex>"}, the MAC over the data without it ---- */

/*
 * Sign a claim's JSON body for its node at path: the same object with a
 * last field "mac", the MAC of the body as it was.
 */
void
zk_claim_sign(const char *path, const char *body, char *out, size_t outlen)
{
	uint8		mac[ZK_MAC_LEN];
	char		hex[ZK_MAC_HEX + 1];
	size_t		bl = strlen(body);

	Assert(bl > 0 && body[bl - 1] == '}');
	zk_mac(path, body, bl, mac);
	zk_mac_hex(mac, hex);
	snprintf(out, outlen, "%.*s%s%s\"}", (int) bl - 1, body, ZK_CLAIM_MAC_KEY, hex);
}

/*
 * Check a claim node's data read at path: verified, forged (a wrong MAC, or
 * a "mac" field anywhere but last), or unsigned (accepted or not, as
 * zk_mac_unsigned_ok says).
 */
ZkMacCheck
zk_claim_verify(const char *path, const char *value, int value_len)
{
	const char *tail;
	char	   *body;
	int			bl;
	uint8		mac[ZK_MAC_LEN];
	bool		ok;

	if (value == NULL || value_len < (int) ZK_CLAIM_MAC_TAIL + 2 ||
		memcmp(value + value_len - 2, "\"}", 2) != 0 ||
		memcmp(value + value_len - ZK_CLAIM_MAC_TAIL, ZK_CLAIM_MAC_KEY,
			   sizeof(ZK_CLAIM_MAC_KEY) - 1) != 0)
	{
		char		f[8];

		/* no MAC at its end: unsigned only if no "mac" field at all */
		if (value != NULL && zk_json_field(value, value_len, "mac", f, sizeof(f)))
			return ZKM_FORGED;
		return zk_mac_unsigned_ok() ? ZKM_UNSIGNED_OK : ZKM_UNSIGNED;
	}
	tail = value + value_len - ZK_CLAIM_MAC_TAIL;
	bl = (int) (tail - value) + 1;
	body = palloc(bl + 1);
	memcpy(body, value, bl - 1);
	body[bl - 1] = '}';
	body[bl] = '\0';
	zk_mac(path, body, bl, mac);
	pfree(body);
	ok = mac_hex_equal(mac, tail + sizeof(ZK_CLAIM_MAC_KEY) - 1);
	return ok ? ZKM_VERIFIED : ZKM_FORGED;
}

/* ---- heirs: "<run>:<hex>" ---- */

/* The data of an heir node at path naming run: "<run>:<MAC>" */
void
zk_heir_sign(const char *path, const char *run, char *out, size_t outlen)
{
	uint8		mac[ZK_MAC_LEN];
	char		hex[ZK_MAC_HEX + 1];

	zk_mac(path, run, strlen(run), mac);
	zk_mac_hex(mac, hex);
	snprintf(out, outlen, "%s:%s", run, hex);
}

/* Does an heir node's data name run, signed with this cluster's key? */
bool
zk_heir_verify(const char *path, const char *run, const char *value, int value_len)
{
	size_t		rl = strlen(run);
	uint8		mac[ZK_MAC_LEN];

	if (value == NULL || value_len != (int) (rl + 1 + ZK_MAC_HEX) ||
		memcmp(value, run, rl) != 0 || value[rl] != ':')
		return false;
	zk_mac(path, run, rl, mac);
	return mac_hex_equal(mac, value + rl + 1);
}

/* ------------------------------------------------------------------------
 * Rate-limited log lines
 * ------------------------------------------------------------------------
 */

/*
 * May a line be logged at this call site (one static ZkLogLimit each)?
 * At most ZK_LOG_LIMIT_LINES a minute; the first line after a minute in
 * which some were suppressed says how many, naming them by what.  For the
 * lines that data or traffic of other clients can make the worker repeat.
 */
bool
zk_log_limited(ZkLogLimit *l, const char *what)
{
	TimestampTz now = GetCurrentTimestamp();

	if (l->window_start == 0 ||
		TimestampDifferenceExceeds(l->window_start, now, ZK_LOG_LIMIT_WINDOW_MS))
	{
		if (l->suppressed > 0)
			ereport(LOG,
					(errmsg("zklock: %d more log lines like \"%s\" were suppressed in the last minute",
							l->suppressed, what)));
		l->window_start = now;
		l->lines = 0;
		l->suppressed = 0;
	}
	if (l->lines < ZK_LOG_LIMIT_LINES)
	{
		l->lines++;
		return true;
	}
	l->suppressed++;
	return false;
}
