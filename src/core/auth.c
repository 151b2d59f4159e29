/*-------------------------------------------------------------------------
 *
 * auth.c
 *	  ZooKeeper credentials and ACLs.
 *
 *	  zklock.auth_file names a file holding one line "user:password" for
 *	  ZooKeeper's digest scheme (the only one Debian's C client offers: it
 *	  has neither TLS nor SASL, so the credentials cross the network in
 *	  clear).  Like ssl_key_file, the file must be a regular file owned by
 *	  the server's user with no group or world access; otherwise the worker
 *	  refuses it and opens no session at all rather than one without
 *	  credentials.  Its content is never logged nor shown.
 *
 *	  zklock.acl is the ACL of every node the worker creates: entries
 *	  scheme:id:perms, comma separated.  Empty means auth::cdrwa with
 *	  credentials (the authenticated identity may do everything, nobody
 *	  else anything), plus world:anyone:r on the kinds of nodes
 *	  zklock.acl_world_read names (lock contenders and election candidates
 *	  by default, which kazoo and monitoring read), and world:anyone:cdrwa
 *	  without credentials.  The worker builds the vectors once per session
 *	  or reload (zk_acl_build); a create under <root>/<kind> uses
 *	  zk_acl_path(), one that names no kind the private zk_acl().
 *
 *	  The worker also knows its own identity (the digest id of its
 *	  credentials), so that aclcheck.c can tell the ACL entries of nodes
 *	  found already there that let others create or delete.
 *
 *-------------------------------------------------------------------------
 */
#include "recipe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cryptohash.h"
#include "miscadmin.h"
#include "utils/resowner.h"

char	   *zk_auth_file = NULL;
char	   *zk_acl_setting = NULL;
char	   *zk_acl_world_read = NULL;

/*
 * The kinds of nodes zklock.acl_world_read may name: the directories under
 * the root whose nodes may be world-readable (bit i of world_read_mask is
 * zk_acl_kinds[i])
 */
static const char *const zk_acl_kinds[] = {
	"locks", "elections", "semaphores", "leases", "queues", "barriers",
	"gates", "arrivals", "counters"
};

static int	world_read_mask = 0x3;	/* locks, elections */

/* the digest id of the worker's credentials ("user:base64"), "" without */
static char own_digest[ZKLOCK_CRED_MAX + 32] = "";

/* zklock.acl, parsed by its check hook (malloc'd, owned by guc.c) */
typedef struct AclSetting
{
	int			n;
	struct
	{
		char		scheme[8];
		char		id[ZKLOCK_ACL_ID_MAX];
		char		perms[8];	/* letters of cdrwa */
	}			e[ZKLOCK_ACL_MAX];
} AclSetting;

static AclSetting *acl_setting = NULL;

/* The worker's vector, copied from the setting (which a reload frees) */
static char acl_schemes[ZKLOCK_ACL_MAX][8];
static char acl_ids[ZKLOCK_ACL_MAX][ZKLOCK_ACL_ID_MAX];
static char acl_perms[ZKLOCK_ACL_MAX][8];
static struct ACL acl_entries[ZKLOCK_ACL_MAX];
static struct ACL_vector acl_vec = {0, NULL};
static struct ACL acl_pub_entries[ZKLOCK_ACL_MAX + 1];
static struct ACL_vector acl_pub_vec = {0, NULL};	/* plus world read */
static bool acl_built = false;
static char acl_logged[ZKLOCK_ACL_MAX * (ZKLOCK_ACL_ID_MAX + 16) + 8];

/* The name zk_status().auth shows for a ZkAuthState */
const char *
zk_auth_state_name(int state)
{
	switch (state)
	{
		case ZKA_NONE:
			return "none";
		case ZKA_DIGEST:
			return "digest";
		case ZKA_REFUSED:
			return "digest (file refused)";
		case ZKA_FAILED:
			return "digest (refused by zookeeper)";
	}
	return "unknown";
}

/* ---- zklock.acl ---- */

/* Are these ACL permission letters (one or more of cdrwa)? */
static bool
valid_perms(const char *p)
{
	if (*p == '\0')
		return false;
	for (; *p; p++)
		if (strchr("cdrwa", *p) == NULL)
			return false;
	return true;
}

/* Parse one entry (trimmed, NUL-terminated) into *out; why on failure */
static bool
parse_acl_entry(char *entry, AclSetting *set, const char **why)
{
	char	   *first = strchr(entry, ':');
	char	   *last = strrchr(entry, ':');
	char	   *id;
	char	   *c;
	int			k = set->n;

	if (first == NULL || first == last)
	{
		*why = "it is not scheme:id:perms";
		return false;
	}
	*first = '\0';
	*last = '\0';
	id = first + 1;
	if (!valid_perms(last + 1) || strlen(last + 1) > 5)
	{
		*why = "its permissions must be letters of cdrwa (create, delete, read, write, admin)";
		return false;
	}
	if (strlen(id) >= ZKLOCK_ACL_ID_MAX)
	{
		*why = "its id is too long";
		return false;
	}
	if (strcmp(entry, "world") == 0)
	{
		if (strcmp(id, "anyone") != 0)
		{
			*why = "the scheme world has the one id anyone";
			return false;
		}
	}
	else if (strcmp(entry, "auth") == 0)
	{
		if (*id != '\0')
		{
			*why = "the scheme auth takes an empty id (auth::perms): ZooKeeper puts the session's authenticated identity there";
			return false;
		}
	}
	else if (strcmp(entry, "digest") == 0)
	{
		c = strchr(id, ':');
		if (c == NULL || c == id || c[1] == '\0')
		{
			*why = "a digest id is user:base64 digest, as ZooKeeper's DigestAuthenticationProvider computes it";
			return false;
		}
	}
	else if (strcmp(entry, "ip") == 0)
	{
		if (*id == '\0' || strspn(id, "0123456789abcdefABCDEF.:/") != strlen(id))
		{
			*why = "an ip id is an address or address/bits";
			return false;
		}
	}
	else
	{
		*why = "its scheme is not one of world, auth, digest, ip";
		return false;
	}
	strlcpy(set->e[k].scheme, entry, sizeof(set->e[k].scheme));
	strlcpy(set->e[k].id, id, sizeof(set->e[k].id));
	strlcpy(set->e[k].perms, last + 1, sizeof(set->e[k].perms));
	set->n++;
	return true;
}

/* A token of a list setting without its leading and trailing blanks (in place) */
static char *
trim_blanks(char *tok)
{
	char	   *end;

	while (*tok == ' ' || *tok == '\t')
		tok++;
	end = tok + strlen(tok);
	while (end > tok && (end[-1] == ' ' || end[-1] == '\t'))
		*--end = '\0';
	return tok;
}

/*
 * The body of a GUC check hook of a comma-separated list setting: *newval
 * (NULL passes), at most maxlen bytes (else refused with the detail
 * toolong); its tokens, without their blanks and numbered from 1, handed to
 * parse with the setting's parsed form (size bytes, zeroed), which sets the
 * error's detail and hint and returns false to refuse the setting.  The
 * parsed form (malloc'd, as GUC frees it) goes in *extra.
 */
static bool
check_list(char **newval, void **extra, size_t maxlen, const char *toolong,
		   Size size, bool (*parse) (char *tok, int n, void *parsed))
{
	void	   *parsed;
	char	   *copy;
	char	   *tok;
	char	   *save = NULL;
	int			n = 0;

	if (*newval == NULL)
		return true;
	if (strlen(*newval) > maxlen)
	{
		GUC_check_errdetail("%s", toolong);
		return false;
	}
	parsed = malloc(size);
	if (parsed == NULL)
		return false;
	memset(parsed, 0, size);
	copy = pstrdup(*newval);
	for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
	{
		if (!parse(trim_blanks(tok), ++n, parsed))
		{
			pfree(copy);
			free(parsed);
			return false;
		}
	}
	pfree(copy);
	*extra = parsed;
	return true;
}

/* check_list's parse of zklock.acl: entry n into the AclSetting */
static bool
acl_token(char *tok, int n, void *parsed)
{
	AclSetting *set = (AclSetting *) parsed;
	const char *why = NULL;
	char		shown[64];

	strlcpy(shown, tok, sizeof(shown));
	if (*tok == '\0')
		why = "it is empty";
	else if (set->n >= ZKLOCK_ACL_MAX)
		why = "an ACL has at most 16 entries";
	if (why != NULL || !parse_acl_entry(tok, set, &why))
	{
		GUC_check_errdetail("Entry %d of zklock.acl (\"%s\") is refused: %s.",
							n, shown, why);
		GUC_check_errhint("Write a comma-separated list of scheme:id:perms, such as \"auth::cdrwa,world:anyone:r\" or \"digest:user:base64digest:cdrwa\".");
		return false;
	}
	return true;
}

/*
 * GUC check hook of zklock.acl: parse and validate the entries into an
 * AclSetting
 */
bool
zk_check_acl(char **newval, void **extra, GucSource source)
{
	return check_list(newval, extra, ZKLOCK_ACL_MAX * (ZKLOCK_ACL_ID_MAX + 16),
					  "The ACL is too long.", sizeof(AclSetting), acl_token);
}

/* GUC assign hook of zklock.acl: keep the parsed setting */
void
zk_assign_acl(const char *newval, void *extra)
{
	acl_setting = (AclSetting *) extra;
}

/* check_list's parse of zklock.acl_world_read: a kind into the mask */
static bool
world_read_token(char *tok, int n, void *parsed)
{
	int			i;

	if (*tok == '\0')
		return true;
	for (i = 0; i < (int) lengthof(zk_acl_kinds); i++)
		if (strcmp(tok, zk_acl_kinds[i]) == 0)
			break;
	if (i == (int) lengthof(zk_acl_kinds))
	{
		GUC_check_errdetail("\"%s\" is not a kind of zklock node.", tok);
		GUC_check_errhint("List some of locks, elections, semaphores, leases, queues, barriers, gates, arrivals, comma separated, or nothing.");
		return false;
	}
	*(int *) parsed |= 1 << i;
	return true;
}

/*
 * GUC check hook of zklock.acl_world_read: a comma-separated list of kinds
 * of nodes (zk_acl_kinds), or empty; the mask goes in *extra
 */
bool
zk_check_acl_world_read(char **newval, void **extra, GucSource source)
{
	return check_list(newval, extra, 256, "The list is too long.", sizeof(int),
					  world_read_token);
}

/* GUC assign hook of zklock.acl_world_read: keep the mask */
void
zk_assign_acl_world_read(const char *newval, void *extra)
{
	if (extra != NULL)
		world_read_mask = *(int *) extra;
}

/*
 * GUC check hook of zklock.auth_file: the path's length only (the worker
 * reads the file)
 */
bool
zk_check_auth_file(char **newval, void **extra, GucSource source)
{
	if (*newval && strlen(*newval) >= MAXPGPATH)
	{
		GUC_check_errdetail("The path is longer than %d bytes.", MAXPGPATH - 1);
		return false;
	}
	return true;
}

/* ZooKeeper's permission bits for ACL letters (cdrwa) */
static int
perm_bits(const char *p)
{
	int			bits = 0;

	for (; *p; p++)
	{
		if (*p == 'c')
			bits |= ZOO_PERM_CREATE;
		else if (*p == 'd')
			bits |= ZOO_PERM_DELETE;
		else if (*p == 'r')
			bits |= ZOO_PERM_READ;
		else if (*p == 'w')
			bits |= ZOO_PERM_WRITE;
		else if (*p == 'a')
			bits |= ZOO_PERM_ADMIN;
	}
	return bits;
}

/* Append one entry to the ACL of the nodes the worker creates */
static void
acl_add(const char *scheme, const char *id, const char *perms)
{
	int			k = acl_vec.count;

	strlcpy(acl_schemes[k], scheme, sizeof(acl_schemes[k]));
	strlcpy(acl_ids[k], id, sizeof(acl_ids[k]));
	strlcpy(acl_perms[k], perms, sizeof(acl_perms[k]));
	acl_entries[k].perms = perm_bits(perms);
	acl_entries[k].id.scheme = acl_schemes[k];
	acl_entries[k].id.id = acl_ids[k];
	acl_vec.count++;
}

/*
 * Build the ACLs creates use, from zklock.acl, zklock.acl_world_read and
 * whether the worker has credentials.  Worker only, at every session it
 * opens and reload.  Says in the server log what the ACL is when it
 * changes, with a WARNING when the nodes are open to every client.
 */
void
zk_acl_build(bool have_creds)
{
	char		desc[sizeof(acl_logged)];
	bool		uses_auth = false;
	bool		world_read = false;
	int			i;

	acl_vec.count = 0;
	acl_vec.data = acl_entries;
	if (acl_setting != NULL && acl_setting->n > 0)
	{
		for (i = 0; i < acl_setting->n; i++)
		{
			acl_add(acl_setting->e[i].scheme, acl_setting->e[i].id,
					acl_setting->e[i].perms);
			if (strcmp(acl_setting->e[i].scheme, "auth") == 0)
				uses_auth = true;
		}
	}
	else if (have_creds)
	{
		acl_add("auth", "", "cdrwa");
		world_read = (world_read_mask != 0);
	}
	else
		acl_add("world", "anyone", "cdrwa");

	/* the public vector: the same, plus world:anyone:r by default */
	memcpy(acl_pub_entries, acl_entries, sizeof(struct ACL) * acl_vec.count);
	acl_pub_vec.data = acl_pub_entries;
	acl_pub_vec.count = acl_vec.count;
	if (world_read)
	{
		static char world[] = "world";
		static char anyone[] = "anyone";

		acl_pub_entries[acl_pub_vec.count].perms = ZOO_PERM_READ;
		acl_pub_entries[acl_pub_vec.count].id.scheme = world;
		acl_pub_entries[acl_pub_vec.count].id.id = anyone;
		acl_pub_vec.count++;
	}
	acl_built = true;

	desc[0] = '\0';
	for (i = 0; i < acl_vec.count; i++)
	{
		char		one[ZKLOCK_ACL_ID_MAX + 32];

		snprintf(one, sizeof(one), "%s%s:%s:%s", i ? "," : "",
				 acl_schemes[i], acl_ids[i], acl_perms[i]);
		strlcat(desc, one, sizeof(desc));
	}
	if (world_read)
	{
		strlcat(desc, " (with world:anyone:r under ", sizeof(desc));
		for (i = 0; i < (int) lengthof(zk_acl_kinds); i++)
			if (world_read_mask & (1 << i))
			{
				strlcat(desc, zk_acl_kinds[i], sizeof(desc));
				strlcat(desc, ",", sizeof(desc));
			}
		desc[strlen(desc) - 1] = ')';
	}
	if (!have_creds)
		strlcat(desc, " (no credentials)", sizeof(desc));
	zk_acl_check_request();		/* nodes found there: read their ACLs again */
	if (strcmp(desc, acl_logged) == 0)
		return;
	strlcpy(acl_logged, desc, sizeof(acl_logged));

	if (!have_creds && (acl_setting == NULL || acl_setting->n == 0))
		ereport(WARNING,
				(errmsg("zklock: the nodes zklock creates in zookeeper are open to every zookeeper client"),
				 errdetail("zklock.auth_file and zklock.acl are empty, so the nodes get the ACL world:anyone:cdrwa: any client that reaches ZooKeeper can delete a lock holder's node or take a queue's items."),
				 errhint("Set zklock.auth_file to a file holding user:password (and, if needed, zklock.acl); see doc/security.md, section \"ZooKeeper authentication and ACLs\".")));
	else if (!have_creds && uses_auth)
		ereport(WARNING,
				(errmsg("zklock: zklock.acl names the scheme auth but the worker has no zookeeper credentials"),
				 errdetail("ZooKeeper refuses such an ACL from an unauthenticated session (invalid ACL), so every create fails."),
				 errhint("Set zklock.auth_file, or name the identities in zklock.acl (digest:user:base64digest:perms).")));
	else
		ereport(LOG,
				(errmsg("zklock: nodes are created with the ACL %s", desc)));
}

/* The private ACL: of every node that names no world-readable kind */
struct ACL_vector *
zk_acl(void)
{
	if (!acl_built)
		zk_acl_build(zk_ctl->auth_state == ZKA_DIGEST);
	return &acl_vec;
}

/*
 * The ACL of a node at path: the public one (world read too) under a kind
 * zklock.acl_world_read names, and on the root and its ancestors when it
 * names any; the private one everywhere else
 */
struct ACL_vector *
zk_acl_path(const char *path)
{
	size_t		rl = strlen(zk_root);
	const char *kind;
	size_t		klen;
	int			i;

	if (!acl_built)
		zk_acl_build(zk_ctl->auth_state == ZKA_DIGEST);
	if (acl_pub_vec.count == acl_vec.count || path == NULL)
		return &acl_vec;
	if (strncmp(path, zk_root, rl) != 0 || path[rl] == '\0')
		return &acl_pub_vec;	/* the root, or above it */
	if (path[rl] != '/')
		return &acl_vec;
	kind = path + rl + 1;
	klen = strcspn(kind, "/");
	for (i = 0; i < (int) lengthof(zk_acl_kinds); i++)
		if ((world_read_mask & (1 << i)) && strlen(zk_acl_kinds[i]) == klen &&
			strncmp(kind, zk_acl_kinds[i], klen) == 0)
			return &acl_pub_vec;
	return &acl_vec;
}

/*
 * May the ACL entry scheme:id be another identity's than this cluster's?
 * Ours: an entry of the ACL zklock creates with, "auth" standing for the
 * digest id of the worker's credentials.
 */
bool
zk_acl_id_foreign(const char *scheme, const char *id)
{
	int			i;

	if (!acl_built)
		zk_acl_build(zk_ctl->auth_state == ZKA_DIGEST);
	for (i = 0; i < acl_vec.count; i++)
	{
		if (strcmp(acl_schemes[i], "auth") == 0)
		{
			if (strcmp(scheme, "digest") == 0 && own_digest[0] != '\0' &&
				strcmp(id, own_digest) == 0)
				return false;
		}
		else if (strcmp(acl_schemes[i], scheme) == 0 && strcmp(acl_ids[i], id) == 0)
			return false;
	}
	return true;
}

/*
 * Does the ACL entry a let another identity than this cluster's do any of
 * perms?  An entry without a scheme or an id lets nobody.
 */
bool
zk_acl_entry_foreign(const struct ACL *a, int perms)
{
	return (a->perms & perms) != 0 &&
		a->id.scheme != NULL && a->id.id != NULL &&
		zk_acl_id_foreign(a->id.scheme, a->id.id);
}

/*
 * The first entry of acl (none when NULL) that lets another identity do
 * any of perms (zk_acl_entry_foreign), by its index; -1 when none does
 */
int
zk_acl_first_foreign(const struct ACL_vector *acl, int perms)
{
	int			i;

	for (i = 0; acl != NULL && i < acl->count; i++)
		if (zk_acl_entry_foreign(&acl->data[i], perms))
			return i;
	return -1;
}

/* Is zklock.acl_repair's work possible: is there an ACL to set? */
bool
zk_acl_have_own(void)
{
	return own_digest[0] != '\0' || (acl_setting != NULL && acl_setting->n > 0);
}

/*
 * The digest id ZooKeeper's DigestAuthenticationProvider gives credentials
 * user:password: user:base64(sha1(user:password)), into own_digest
 */
static void
own_digest_set(const char *cred)
{
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	static ResourceOwner digest_owner = NULL;
	ResourceOwner save = CurrentResourceOwner;
	pg_cryptohash_ctx *ctx;
	uint8		sum[20];
	const char *colon = strchr(cred, ':');
	char	   *out;
	bool		ok;
	int			i;

	own_digest[0] = '\0';
	if (colon == NULL)
		return;
	/* the context is remembered in CurrentResourceOwner: the worker has none */
	if (save == NULL)
	{
		if (digest_owner == NULL)
			digest_owner = ResourceOwnerCreate(NULL, "zklock digest");
		CurrentResourceOwner = digest_owner;
	}
	ctx = pg_cryptohash_create(PG_SHA1);
	ok = ctx != NULL &&
		pg_cryptohash_init(ctx) == 0 &&
		pg_cryptohash_update(ctx, (const uint8 *) cred, strlen(cred)) == 0 &&
		pg_cryptohash_final(ctx, sum, sizeof(sum)) == 0;
	if (ctx != NULL)
		pg_cryptohash_free(ctx);
	CurrentResourceOwner = save;
	if (!ok)
		return;
	if ((size_t) (colon - cred) + 1 + 28 + 1 > sizeof(own_digest))
		return;
	memcpy(own_digest, cred, colon - cred + 1);
	out = own_digest + (colon - cred + 1);
	for (i = 0; i < 20; i += 3)
	{
		uint32		v = (uint32) sum[i] << 16;

		if (i + 1 < 20)
			v |= (uint32) sum[i + 1] << 8;
		if (i + 2 < 20)
			v |= sum[i + 2];
		*out++ = b64[(v >> 18) & 63];
		*out++ = b64[(v >> 12) & 63];
		*out++ = (i + 1 < 20) ? b64[(v >> 6) & 63] : '=';
		*out++ = (i + 2 < 20) ? b64[v & 63] : '=';
	}
	*out = '\0';
	explicit_bzero(sum, sizeof(sum));
}

/* ---- zklock.auth_file ---- */

/*
 * Read the credentials into cred (NUL-terminated, never logged).  Returns
 * ZKA_NONE when zklock.auth_file is empty, ZKA_DIGEST when cred holds
 * "user:password", ZKA_REFUSED (after a WARNING, unless the same one was
 * the last said) when the file may not or cannot be used.  Worker only,
 * without the lock.
 */
int
zk_auth_load(char *cred, size_t credlen)
{
	static char last_why[256] = "";
	char		path[MAXPGPATH];
	char		buf[ZKLOCK_AUTH_FILE_MAX + 1];
	char		why[256];
	const char *hint = NULL;
	struct stat st;
	int			fd;
	ssize_t		got = 0;
	size_t		linelen;
	char	   *nl;
	char	   *rest;
	char	   *colon;
	int			save_errno;

	memset(cred, 0, credlen);
	if (zk_auth_file == NULL || zk_auth_file[0] == '\0')
	{
		last_why[0] = '\0';
		own_digest[0] = '\0';
		return ZKA_NONE;
	}
	if (is_absolute_path(zk_auth_file))
		strlcpy(path, zk_auth_file, sizeof(path));
	else
		snprintf(path, sizeof(path), "%s/%s", DataDir, zk_auth_file);

	why[0] = '\0';
	fd = open(path, O_RDONLY | PG_BINARY, 0);
	if (fd < 0)
	{
		save_errno = errno;
		snprintf(why, sizeof(why), "It cannot be opened: %s.", strerror(save_errno));
		hint = "Create it, readable by the server's user only (chmod 0600), holding one line user:password.";
	}
	else if (fstat(fd, &st) != 0)
	{
		save_errno = errno;
		snprintf(why, sizeof(why), "It cannot be examined: %s.", strerror(save_errno));
	}
	else if (!S_ISREG(st.st_mode))
		snprintf(why, sizeof(why), "It is not a regular file.");
	else if (st.st_uid != geteuid())
	{
		snprintf(why, sizeof(why), "It is not owned by the database server's user.");
		hint = "Make the server's user its owner (chown), and allow nobody else to read it (chmod 0600).";
	}
	else if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		snprintf(why, sizeof(why), "It has group or world access (mode %04o).",
				 (unsigned int) (st.st_mode & 07777));
		hint = "Allow only the server's user to read it: chmod 0600, as for ssl_key_file.";
	}
	else if (st.st_size > ZKLOCK_AUTH_FILE_MAX)
		snprintf(why, sizeof(why), "It is larger than %d bytes.", ZKLOCK_AUTH_FILE_MAX);
	else
	{
		got = read(fd, buf, ZKLOCK_AUTH_FILE_MAX + 1);
		if (got < 0)
		{
			save_errno = errno;
			snprintf(why, sizeof(why), "It cannot be read: %s.", strerror(save_errno));
			got = 0;
		}
		else if (got > ZKLOCK_AUTH_FILE_MAX)
			snprintf(why, sizeof(why), "It is larger than %d bytes.", ZKLOCK_AUTH_FILE_MAX);
	}
	if (fd >= 0)
		close(fd);

	if (why[0] == '\0')
	{
		buf[got] = '\0';
		nl = strchr(buf, '\n');
		rest = nl ? nl + 1 : buf + got;
		linelen = nl ? (size_t) (nl - buf) : (size_t) got;
		if (linelen > 0 && buf[linelen - 1] == '\r')
			linelen--;
		buf[linelen] = '\0';
		colon = strchr(buf, ':');
		if (memchr(buf, '\0', linelen) != NULL)
			snprintf(why, sizeof(why), "Its first line holds a NUL byte.");
		else if (linelen >= credlen || linelen >= ZKLOCK_CRED_MAX)
			snprintf(why, sizeof(why), "Its line is longer than %d bytes.",
					 (int) Min(credlen, ZKLOCK_CRED_MAX) - 1);
		else if (colon == NULL || colon == buf)
			snprintf(why, sizeof(why), "Its first line is not user:password.");
		else if (strspn(rest, " \t\r\n") != strlen(rest))
			snprintf(why, sizeof(why), "It holds more than one line.");
		else
			memcpy(cred, buf, linelen + 1);
		if (why[0] != '\0')
			hint = "Write one line user:password, for ZooKeeper's digest scheme.";
	}
	explicit_bzero(buf, sizeof(buf));

	if (why[0] == '\0')
	{
		last_why[0] = '\0';
		own_digest_set(cred);
		return ZKA_DIGEST;
	}
	own_digest[0] = '\0';
	memset(cred, 0, credlen);
	if (strcmp(why, last_why) != 0)
	{
		strlcpy(last_why, why, sizeof(last_why));
		ereport(WARNING,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("zklock: refusing the zookeeper credentials file \"%s\" (zklock.auth_file)",
						path),
				 errdetail("%s The worker opens no ZooKeeper session without the credentials it was told to use.",
						   why),
				 hint ? errhint("%s", hint) : 0));
	}
	return ZKA_REFUSED;
}
