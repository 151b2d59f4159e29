/*-------------------------------------------------------------------------
 *
 * names.c
 *	  Lock names and ZooKeeper paths: checking what users give, encoding a
 *	  name into exactly one path component, and reading contender nodes.
 *	  Pure functions, run by backends (names) and the worker (nodes).
 *
 *	  A plain name (letters, digits, '_', '.', '-') maps to itself, so that
 *	  other ZooKeeper clients such as kazoo can use the same path.  Every
 *	  other byte, and every byte of the names "." and "..", is written as
 *	  %XX.  '%' is never plain, so the mapping is one to one, and the result
 *	  never holds '/', so no name reaches outside <root>/locks.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"

#include <ctype.h>

static bool
plain_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

/*
 * Refuse names that cannot be locks.  Raises 22023 (invalid parameter value).
 */
void
zk_check_name(const char *name, int len)
{
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock lock name must not be empty"),
				 errhint("Give a name of 1 to %d bytes.", ZKLOCK_NAME_MAX)));
	if (len > ZKLOCK_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock lock name is too long"),
				 errdetail("The name has %d bytes; the limit is %d bytes.",
						   len, ZKLOCK_NAME_MAX),
				 errhint("Use a shorter name, for example a hash of the long one.")));
}

/*
 * Encode a checked name into one ZooKeeper path component.
 * "out" must hold ZKLOCK_ENAME_MAX + 1 bytes.
 */
void
zk_encode_name(const char *name, int len, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	bool		dots = (len == 1 && name[0] == '.') ||
		(len == 2 && name[0] == '.' && name[1] == '.');
	int			i;
	char	   *p = out;

	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) name[i];

		if (plain_byte(c) && !dots)
			*p++ = (char) c;
		else
		{
			*p++ = '%';
			*p++ = hex[c >> 4];
			*p++ = hex[c & 0xF];
		}
	}
	*p = '\0';
}

/*
 * Is this an acceptable zklock.root?  An absolute path of printable ASCII,
 * not "/", without empty, "." or ".." components, not a trailing slash, and
 * outside ZooKeeper's own /zookeeper tree.
 */
bool
zk_valid_root(const char *root, const char **why)
{
	const char *p;
	const char *comp;

	if (root == NULL || root[0] != '/')
	{
		*why = "The root must be an absolute path starting with \"/\".";
		return false;
	}
	if (strlen(root) > ZKLOCK_ROOT_MAX)
	{
		*why = "The root is longer than 200 bytes.";
		return false;
	}
	if (root[1] == '\0')
	{
		*why = "The root must not be \"/\" itself.";
		return false;
	}
	for (p = root; *p; p++)
	{
		if (!isascii((unsigned char) *p) || iscntrl((unsigned char) *p))
		{
			*why = "The root must be printable ASCII.";
			return false;
		}
	}
	comp = root + 1;
	for (p = root + 1;; p++)
	{
		if (*p == '/' || *p == '\0')
		{
			int			clen = p - comp;

			if (clen == 0)
			{
				*why = "The root must not hold empty components or end with \"/\".";
				return false;
			}
			if ((clen == 1 && comp[0] == '.') ||
				(clen == 2 && comp[0] == '.' && comp[1] == '.'))
			{
				*why = "The root must not hold \".\" or \"..\" components.";
				return false;
			}
			if (comp == root + 1 && clen == 9 && strncmp(comp, "zookeeper", 9) == 0)
			{
				*why = "The root must not be inside ZooKeeper's reserved /zookeeper tree.";
				return false;
			}
			if (*p == '\0')
				break;
			comp = p + 1;
		}
	}
	return true;
}

/*
 * Is a child of a lock node a contender, kazoo's way: "...__lock__NNNNNNNNNN"
 * (exclusive) or "...__rlock__NNNNNNNNNN" (shared)?
 */
bool
zk_node_is_contender(const char *child, bool *shared)
{
	size_t		len = strlen(child);
	int			i;

	if (len < 10 + 8)
		return false;
	for (i = 0; i < 10; i++)
		if (!isdigit((unsigned char) child[len - 10 + i]))
			return false;
	if (len >= 10 + 9 && strncmp(child + len - 10 - 9, "__rlock__", 9) == 0)
	{
		*shared = true;
		return true;
	}
	if (strncmp(child + len - 10 - 8, "__lock__", 8) == 0)
	{
		*shared = false;
		return true;
	}
	return false;
}

/*
 * The sequence number of a contender node (its last ten digits).
 */
int
zk_node_seq(const char *child)
{
	size_t		len = strlen(child);

	if (len < 10)
		return -1;
	return (int) strtol(child + len - 10, NULL, 10);
}
