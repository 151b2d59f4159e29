/*-------------------------------------------------------------------------
 *
 * names.c
 *	  Names and ZooKeeper paths: checking what users give, encoding a name
 *	  into exactly one path component, namespaces, and the root.  Pure
 *	  functions (but the namespace's lookup), run by backends and the
 *	  worker.  What a recipe's own nodes are is in its folder
 *	  (lock/lock_names.c, queue/queue_nodes.c).
 *
 *	  Names are converted from the database encoding to UTF-8 first, so the
 *	  same text names the same lock from a UTF8, a LATIN1 or any other
 *	  database.  A plain name (letters, digits, '_', '.', '-') maps to
 *	  itself, so that other ZooKeeper clients such as kazoo can use the same
 *	  path.  Every other byte of the UTF-8 form, and every byte of the names
 *	  "." and "..", is written as %XX.  '%' is never plain, so the mapping is
 *	  one to one, and the result never holds '/', so no name reaches outside
 *	  <root>/locks.
 *
 *	  Namespaces (zklock.namespace): a backend qualifies every name it hands
 *	  the worker with its namespace (zk_qualify_name: 0xFF, namespace, 0xFF,
 *	  name; UTF-8 never holds 0xFF, so nothing a user writes looks
 *	  qualified), and the encoding of a qualified name is one component
 *	  "<namespace>:<name>".  ':' is never plain, so the first ':' of a
 *	  component always ends its namespace.  Names of the root namespace
 *	  ("") are not qualified: their paths are kazoo's plain ones.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"

#include <ctype.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_db_role_setting.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

/* May byte c stand for itself in a path component (letters, digits, _ . -)? */
static bool
plain_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

/*
 * The UTF-8 form of a name in the database encoding (the name itself when
 * the database is UTF8 or SQL_ASCII).  Raises the usual conversion error
 * for characters UTF-8 cannot hold.
 */
char *
zk_name_to_utf8(const char *name, int len, int *outlen)
{
	char	   *u;

	if (GetDatabaseEncoding() == PG_UTF8 || GetDatabaseEncoding() == PG_SQL_ASCII)
	{
		/*
		 * A SQL_ASCII database takes any byte; 0xFF, which UTF-8 never
		 * holds, marks a name qualified with its namespace
		 * (zk_qualify_name), so a name holding it could reach another
		 * namespace.
		 */
		if (memchr(name, ZKLOCK_NS_MARK, len) != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("zklock name must not contain the byte 0xff"),
					 errdetail("The byte 0xff is never part of a name in UTF-8; zklock uses it to mark namespaces."),
					 errhint("Use another character; in a SQL_ASCII database, names are taken as UTF-8 bytes.")));
		*outlen = len;
		return (char *) name;
	}
	u = (char *) pg_do_encoding_conversion((unsigned char *) name, len,
										   GetDatabaseEncoding(), PG_UTF8);
	*outlen = (u == name) ? len : (int) strlen(u);
	return u;
}

/*
 * A UTF-8 string (a name, node data) in the database encoding, for
 * display; characters the database cannot show are replaced by their
 * \xNN bytes.  Never raises for bad input.
 */
char *
zk_utf8_to_server_noerror(const char *utf8, int len)
{
	int			enc = GetDatabaseEncoding();
	StringInfoData buf;
	int			i = 0;

	if (enc == PG_UTF8 || enc == PG_SQL_ASCII)
	{
		if (enc == PG_SQL_ASCII || pg_verifymbstr(utf8, len, true))
			return pnstrdup(utf8, len);
	}
	initStringInfo(&buf);
	while (i < len)
	{
		int			l = pg_utf_mblen((const unsigned char *) utf8 + i);
		char	   *conv = NULL;

		if (i + l <= len && pg_utf8_islegal((const unsigned char *) utf8 + i, l))
		{
			if (enc == PG_UTF8)
				conv = pnstrdup(utf8 + i, l);
			else
			{
				unsigned char out[MAX_CONVERSION_GROWTH * 4 + 1];
				Oid			proc = FindDefaultConversionProc(PG_UTF8, enc);
				int			used;

				if (OidIsValid(proc))
				{
					used = pg_do_encoding_conversion_buf(proc, PG_UTF8, enc,
														 (unsigned char *) utf8 + i, l,
														 out, sizeof(out), true);
					if (used == l)
						conv = pstrdup((char *) out);
				}
			}
		}
		else
			l = 1;
		if (conv)
			appendStringInfoString(&buf, conv);
		else
		{
			int			j;

			for (j = 0; j < l && i + j < len; j++)
				appendStringInfo(&buf, "\\x%02X", (unsigned char) utf8[i + j]);
		}
		i += l;
	}
	return buf.data;
}

/*
 * Refuse a name of len bytes in UTF-8 that is empty or longer than
 * ZKLOCK_NAME_MAX (22023, invalid parameter value); "what" names it in the
 * messages ("lock name", "queue name", ...).
 */
void
zk_check_name(const char *what, int len)
{
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock %s must not be empty", what),
				 errhint("The %s must have 1 to %d bytes.", what, ZKLOCK_NAME_MAX)));
	if (len > ZKLOCK_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock %s is too long", what),
				 errdetail("It has %d bytes in UTF-8; the limit is %d bytes.", len, ZKLOCK_NAME_MAX),
				 errhint("Use a shorter %s.", what)));
}

/* Append the bytes of s, each plain byte as itself and any other as %XX */
static char *
encode_bytes(const char *s, int len, bool dots, char *p)
{
	static const char hex[] = "0123456789ABCDEF";
	int			i;

	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (plain_byte(c) && !dots)
			*p++ = (char) c;
		else
		{
			*p++ = '%';
			*p++ = hex[c >> 4];
			*p++ = hex[c & 0xF];
		}
	}
	return p;
}

/*
 * Encode a checked name into one ZooKeeper path component.  A name in a
 * namespace (ZKLOCK_NS_MARK, see zk_qualify_name) becomes
 * "<namespace>:<name>", each part encoded: ':' is never plain, so no name
 * of the root namespace (and no other namespace) can produce it.
 * "out" must hold ZKLOCK_ENAME_MAX + 1 bytes.
 */
void
zk_encode_name(const char *name, int len, char *out)
{
	const char *sep = NULL;
	char	   *p = out;

	if (len > 1 && name[0] == ZKLOCK_NS_MARK)
		sep = memchr(name + 1, ZKLOCK_NS_MARK, len - 1);
	if (sep != NULL)
	{
		p = encode_bytes(name + 1, sep - (name + 1), false, p);
		*p++ = ':';
		p = encode_bytes(sep + 1, len - (sep + 1 - name), false, p);
	}
	else
	{
		bool		dots = (len == 1 && name[0] == '.') ||
			(len == 2 && name[0] == '.' && name[1] == '.');

		p = encode_bytes(name, len, dots, p);
	}
	*p = '\0';
}

/* ---- namespaces ---- */

/*
 * zklock.namespace, as this backend last expanded it (UTF-8; "" is the
 * root namespace).  "$database" stands for the name recorded for this
 * database in the extension's table zk_database_namespace (below).
 */
static char ns_cache[ZKLOCK_NS_MAX + 1];
static bool ns_cached = false;

/*
 * Did ns_cache come from zk_database_namespace (so the registry of claims
 * must give it to this database, nsclaim.c)?  And the namespace the
 * registry gave this database (checked once per session).
 */
static bool ns_recorded = false;
static bool ns_configured = false;	/* ... or from ALTER DATABASE ... SET */
static char ns_verified[ZKLOCK_NS_MAX + 1];
static bool ns_verified_set = false;

/* zklock.namespace was set (its assign hook): expand it again when used */
void
zk_namespace_changed(void)
{
	ns_cached = false;
}

/*
 * zklock's row of pg_extension: the schema it is installed in (InvalidOid
 * when it is not installed) and, unless version is NULL, its version
 * (NULL if unknown)
 */
Oid
zk_extension_schema(char **version)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	Oid			nsp = InvalidOid;

	if (version)
		*version = NULL;
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("zklock"));
	rel = table_open(ExtensionRelationId, AccessShareLock);
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d;

		nsp = ((Form_pg_extension) GETSTRUCT(tup))->extnamespace;
		d = heap_getattr(tup, Anum_pg_extension_extversion, RelationGetDescr(rel), &isnull);
		if (version && !isnull)
			*version = TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return nsp;
}

/*
 * What "$database" stands for in this database: the row of MyDatabaseId in
 * the table zk_database_namespace of the extension's schema.  CREATE
 * EXTENSION (a superuser: the extension is not trusted) fills it with the
 * database's name at that moment, and only a superuser changes it
 * (zk_set_database_namespace); the table belongs to the superuser who
 * created the extension and PUBLIC has no privilege on it, so neither a
 * role with CREATEDB renaming its database (ALTER DATABASE ... RENAME) nor
 * the database's owner can choose the namespace.  Found by the schema's
 * OID, not its name, and read without the caller's privileges.
 *
 * Returns NULL when the extension is at 1.0, which had no table: such a
 * database keeps 1.0's meaning (its current name) until ALTER EXTENSION
 * zklock UPDATE.  Raises 55000 when the table has no row for this
 * database (a copy of a template that had the extension: the row names
 * the template's OID).  *cacheable is false when the row was written by
 * the current transaction (it may still roll back).
 */
static char *
recorded_namespace(bool *cacheable)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	Oid			nsp;
	Oid			relid;
	char	   *version;
	char	   *result = NULL;
	bool		found = false;
	char	   *dbname;

	*cacheable = true;
	if (!IsTransactionState())
		elog(ERROR, "zklock namespace \"$database\" read outside a transaction");

	nsp = zk_extension_schema(&version);

	relid = OidIsValid(nsp) ? get_relname_relid("zk_database_namespace", nsp) : InvalidOid;
	if (!OidIsValid(relid) && version != NULL && strcmp(version, "1.0") == 0)
		return NULL;
	if (OidIsValid(relid))
	{
		rel = table_open(relid, AccessShareLock);
		if (RelationGetDescr(rel)->natts < 2 ||
			TupleDescAttr(RelationGetDescr(rel), 0)->atttypid != OIDOID ||
			TupleDescAttr(RelationGetDescr(rel), 1)->atttypid != TEXTOID)
			elog(ERROR, "zklock's table zk_database_namespace has an unexpected layout");
		ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_OIDEQ,
					ObjectIdGetDatum(MyDatabaseId));
		scan = systable_beginscan(rel, InvalidOid, false, NULL, 1, &key);
		tup = systable_getnext(scan);
		if (HeapTupleIsValid(tup))
		{
			bool		isnull;
			Datum		d = heap_getattr(tup, 2, RelationGetDescr(rel), &isnull);

			found = !isnull;
			if (found)
				result = TextDatumGetCString(d);
			if (TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(tup->t_data)))
				*cacheable = false;
		}
		systable_endscan(scan);
		table_close(rel, AccessShareLock);
	}
	if (found)
		return result;

	dbname = get_database_name(MyDatabaseId);
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("zklock has no namespace recorded for database \"%s\"",
					dbname ? dbname : "?"),
			 errdetail("zklock.namespace is \"$database\", the name recorded when CREATE EXTENSION zklock ran in this database; "
					   "this database is a copy of another one (its template), whose record does not apply to it."),
			 errhint("As a superuser, record this database's namespace with SELECT zk_set_database_namespace('name') "
					 "(schema-qualified), or set one with ALTER DATABASE ... SET zklock.namespace = 'name'.")));
	return NULL;				/* not reached */
}

/*
 * Is v (server encoding) the zklock.namespace that ALTER DATABASE ... SET
 * gave this database for every role (pg_db_role_setting)?  Such a
 * namespace is this database's by a superuser's choice (the setting is
 * superuser-only): it is entered in the registry of claims, so that a
 * database whose recorded name is the same cannot walk into it.
 */
static bool
database_configured(const char *v)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key[2];
	HeapTuple	tup;
	bool		match = false;
	const char *gname = "zklock.namespace";
	size_t		glen = strlen(gname);

	if (!IsTransactionState() || !OidIsValid(MyDatabaseId))
		return false;
	ScanKeyInit(&key[0], Anum_pg_db_role_setting_setdatabase, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(MyDatabaseId));
	ScanKeyInit(&key[1], Anum_pg_db_role_setting_setrole, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(InvalidOid));
	rel = table_open(DbRoleSettingRelationId, AccessShareLock);
	scan = systable_beginscan(rel, DbRoleSettingDatidRolidIndexId, true, NULL, 2, key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_db_role_setting_setconfig,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
		{
			ArrayType  *a = DatumGetArrayTypeP(d);
			Datum	   *elems;
			bool	   *nulls;
			int			n;
			int			i;

			deconstruct_array(a, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
			for (i = 0; i < n && !match; i++)
			{
				char	   *item;

				if (nulls[i])
					continue;
				item = TextDatumGetCString(elems[i]);
				if (strlen(item) > glen && item[glen] == '=' &&
					pg_strncasecmp(item, gname, glen) == 0 &&
					strcmp(item + glen + 1, v) == 0)
					match = true;
				pfree(item);
			}
		}
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return match;
}

/*
 * A namespace recorded for this database must be this database's in the
 * registry of claims (nsclaim.c): asked once per session, raises 55000
 * when another database of this cluster has it.  One set for this database
 * by ALTER DATABASE ... SET joins the claim (a superuser chose it; two
 * databases set to one namespace share it on purpose).
 */
static void
check_recorded(void)
{
	if ((!ns_recorded && !ns_configured) ||
		(ns_verified_set && strcmp(ns_verified, ns_cache) == 0))
		return;
	if (ns_recorded)
		zk_namespace_verify(ns_cache);
	else
		zk_namespace_join_configured(ns_cache);
	strlcpy(ns_verified, ns_cache, sizeof(ns_verified));
	ns_verified_set = true;
}

/*
 * This backend's namespace in UTF-8 ("" for the root one), "$database"
 * expanded; cached until the setting changes (a "$database" record changed
 * by a superuser applies to sessions that start afterwards).  Raises 22023
 * or 22021 for a namespace that cannot be one, 55000 when "$database" has
 * no record for this database or the registry gives the recorded one to
 * another database of this cluster.
 */
const char *
zk_current_namespace(void)
{
	const char *ns = zk_current_namespace_unchecked();

	check_recorded();
	return ns;
}

/*
 * zk_current_namespace without asking the registry (zk_path: it sends
 * nothing to ZooKeeper)
 */
const char *
zk_current_namespace_unchecked(void)
{
	const char *v = zk_namespace ? zk_namespace : "";
	char	   *dbname = NULL;
	char	   *u;
	int			len;
	bool		cacheable = true;
	bool		recorded = false;
	bool		configured = false;

	if (ns_cached)
		return ns_cache;
	if (strcmp(v, "$database") == 0)
	{
		if (!OidIsValid(MyDatabaseId))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock.namespace \"$database\" needs a database"),
					 errhint("Set zklock.namespace to a name for this session.")));
		dbname = recorded_namespace(&cacheable);
		recorded = (dbname != NULL);
		/* zklock 1.0's table-less catalog: the database's current name */
		if (dbname == NULL && (dbname = get_database_name(MyDatabaseId)) == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("zklock.namespace \"$database\" needs a database"),
					 errhint("Set zklock.namespace to a name for this session.")));
		v = dbname;
	}
	else if (v[0] != '\0')
		configured = database_configured(v);
	len = strlen(v);
	u = pg_server_to_any(v, len, PG_UTF8);
	if (u != v)
		len = strlen(u);
	if (len > ZKLOCK_NS_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("zklock namespace \"%s\" is too long", v),
				 errdetail("It has %d bytes in UTF-8; the limit is %d.", len, ZKLOCK_NS_MAX),
				 errhint("Set zklock.namespace to a shorter name (ALTER DATABASE ... SET zklock.namespace).")));
	if (memchr(u, ZKLOCK_NS_MARK, len) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("zklock namespace must not contain the byte 0xff"),
				 errdetail("zklock uses the byte 0xff to mark namespaces."),
				 errhint("Set zklock.namespace to another name (ALTER DATABASE ... SET zklock.namespace).")));
	memcpy(ns_cache, u, len);
	ns_cache[len] = '\0';
	ns_cached = cacheable;
	ns_recorded = recorded;
	ns_configured = configured;
	if (u != v)
		pfree(u);
	if (dbname)
		pfree(dbname);
	return ns_cache;
}

/*
 * A checked UTF-8 name in this backend's namespace: the name itself in
 * the root namespace, otherwise ZKLOCK_NS_MARK, the namespace,
 * ZKLOCK_NS_MARK, the name.  UTF-8 never holds the byte 0xFF, so a name
 * the user wrote can never look qualified; a qualified name stays as it is.
 */
char *
zk_qualify_name(const char *name, int len, int *qlen)
{
	return zk_qualify_name_ext(name, len, qlen, true);
}

/*
 * zk_qualify_name, asking the registry of claims (check) or not (zk_path,
 * which sends nothing to ZooKeeper)
 */
char *
zk_qualify_name_ext(const char *name, int len, int *qlen, bool check)
{
	const char *ns;
	int			nslen;
	char	   *q;

	if (len == 0 || name[0] == ZKLOCK_NS_MARK)
	{
		*qlen = len;
		return pnstrdup(name, len);
	}
	ns = check ? zk_current_namespace() : zk_current_namespace_unchecked();
	nslen = strlen(ns);
	if (nslen == 0)
	{
		*qlen = len;
		return pnstrdup(name, len);
	}
	*qlen = nslen + len + 2;
	q = palloc(*qlen + 1);
	q[0] = ZKLOCK_NS_MARK;
	memcpy(q + 1, ns, nslen);
	q[nslen + 1] = ZKLOCK_NS_MARK;
	memcpy(q + nslen + 2, name, len);
	q[*qlen] = '\0';
	return q;
}

/* The name a qualified name carries, without its namespace */
const char *
zk_name_part(const char *qname)
{
	const char *sep;

	if (qname[0] != ZKLOCK_NS_MARK || (sep = strchr(qname + 1, ZKLOCK_NS_MARK)) == NULL)
		return qname;
	return sep + 1;
}

/*
 * A qualified name for the server log: "<namespace>:<name>", as its node
 * is named (without the escapes).  A static buffer: one per message.
 */
const char *
zk_log_name(const char *qname)
{
	static char buf[ZKLOCK_QNAME_MAX + 1];
	const char *sep;

	if (qname[0] != ZKLOCK_NS_MARK || (sep = strchr(qname + 1, ZKLOCK_NS_MARK)) == NULL)
		return qname;
	snprintf(buf, sizeof(buf), "%.*s:%s", (int) (sep - qname - 1), qname + 1, sep + 1);
	return buf;
}

/* Is a qualified name one of namespace ns ("" the root)? */
bool
zk_name_in_namespace(const char *qname, const char *ns)
{
	const char *sep;

	if (qname[0] != ZKLOCK_NS_MARK || (sep = strchr(qname + 1, ZKLOCK_NS_MARK)) == NULL)
		return ns[0] == '\0';
	return (size_t) (sep - qname - 1) == strlen(ns) &&
		memcmp(qname + 1, ns, sep - qname - 1) == 0;
}

/*
 * The namespace of a qualified name ("" for the root one), into out (at
 * least ZKLOCK_NS_MAX + 1 bytes; a longer one is cut there)
 */
void
zk_qname_namespace(const char *qname, char *out, size_t outlen)
{
	const char *sep;

	if (qname[0] != ZKLOCK_NS_MARK || (sep = strchr(qname + 1, ZKLOCK_NS_MARK)) == NULL)
		out[0] = '\0';
	else
		strlcpy(out, qname + 1, Min(outlen, (size_t) (sep - qname)));
}

/*
 * Is a child of a directory every namespace shares (<root>/queues,
 * <root>/leases), as ZooKeeper names it, a name of namespace ns ("" the
 * root)?  The answer zk_name_in_namespace gives for what zk_decode_qname
 * makes of it, cut at ZKLOCK_ENAME_MAX bytes as the readers of such
 * listings cut it, so the worker keeps exactly the rows the backend shows.
 */
bool
zk_child_in_namespace(const char *enc, const char *ns)
{
	char		cut[ZKLOCK_ENAME_MAX + 1];
	char		name[ZKLOCK_ENAME_MAX + 2];

	strlcpy(cut, enc, sizeof(cut));
	zk_decode_qname(cut, name, sizeof(name));
	return zk_name_in_namespace(name, ns);
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
 * The value of "key" in a flat JSON object written by zklock (or a kazoo
 * client): a string up to its closing quote, or a bare number.  Returns
 * false when the key is absent or its value empty.  Escapes are not
 * decoded; a value longer than outlen is cut.
 */
bool
zk_json_field(const char *data, int len, const char *key, char *out, size_t outlen)
{
	char		pat[64];
	const char *p;
	const char *end = data + len;
	size_t		i = 0;
	size_t		plen;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	plen = strlen(pat);
	p = data;
	for (;;)
	{
		const char *q;

		if (p >= end)
			return false;
		q = memchr(p, '"', end - p);
		if (q == NULL || end - q < (long) plen)
			return false;
		if (memcmp(q, pat, plen) == 0)
		{
			p = q + plen;
			break;
		}
		p = q + 1;
	}
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	if (p < end && *p == '"')
	{
		p++;
		while (p < end && *p != '"' && i < outlen - 1)
		{
			if (*p == '\\' && p + 1 < end)
				p++;
			out[i++] = *p++;
		}
	}
	else
		while (p < end && *p != ',' && *p != '}' && *p != ' ' && i < outlen - 1)
			out[i++] = *p++;
	out[i] = '\0';
	return i > 0;
}

/*
 * The inverse of zk_encode_name for a component that may name a namespace
 * ("<namespace>:<name>", the first ':' as itself): the qualified name.
 */
int
zk_decode_qname(const char *enc, char *out, int outlen)
{
	const char *colon = strchr(enc, ':');
	int			n;
	char		ns[ZKLOCK_ENAME_MAX + 1];

	if (colon == NULL || colon == enc || outlen < 4)
		return zk_decode_name(enc, out, outlen);
	memcpy(ns, enc, colon - enc);
	ns[colon - enc] = '\0';
	out[0] = ZKLOCK_NS_MARK;
	n = 1 + zk_decode_name(ns, out + 1, outlen - 2);
	out[n++] = ZKLOCK_NS_MARK;
	n += zk_decode_name(colon + 1, out + n, outlen - n);
	return n;
}

/* The inverse of zk_encode_name (and lenient with names others wrote) */
int
zk_decode_name(const char *enc, char *out, int outlen)
{
	int			n = 0;

	while (*enc && n < outlen - 1)
	{
		if (enc[0] == '%' && isxdigit((unsigned char) enc[1]) &&
			isxdigit((unsigned char) enc[2]))
		{
			char		h[3] = {enc[1], enc[2], 0};

			out[n++] = (char) strtol(h, NULL, 16);
			enc += 3;
		}
		else
			out[n++] = *enc++;
	}
	out[n] = '\0';
	return n;
}

/* ---- the top-level fields of a JSON object (zk_json_top_fields) ---- */

typedef struct TopFields
{
	int			depth;			/* objects and arrays we are in: ours are
								 * at 1, in the top object */
	const char *field;			/* the top-level field being read */
	const char *const *names;
	int			n;
	bool		skip_null;
	char	  **values;
	JsonTokenType *types;
} TopFields;

/* JSON parser callback: into an object or array */
static ZK_JSON_CB
tf_in(void *state)
{
	((TopFields *) state)->depth++;
	ZK_JSON_RETURN;
}

/* JSON parser callback: out of an object or array */
static ZK_JSON_CB
tf_out(void *state)
{
	((TopFields *) state)->depth--;
	ZK_JSON_RETURN;
}

/* JSON parser callback: remember the name of a top-level field */
static ZK_JSON_CB
tf_field_start(void *state, char *fname, bool isnull)
{
	TopFields  *tf = state;

	tf->field = tf->depth == 1 ? pstrdup(fname) : NULL;
	ZK_JSON_RETURN;
}

/* JSON parser callback: keep a top-level scalar if it is one of the names */
static ZK_JSON_CB
tf_scalar(void *state, char *token, JsonTokenType type)
{
	TopFields  *tf = state;
	int			i;

	if (tf->field == NULL || tf->depth != 1 ||
		(tf->skip_null && type == JSON_TOKEN_NULL))
		ZK_JSON_RETURN;
	for (i = 0; i < tf->n; i++)
		if (strcmp(tf->field, tf->names[i]) == 0)
		{
			tf->values[i] = pstrdup(token);
			tf->types[i] = type;
		}
	ZK_JSON_RETURN;
}

/*
 * The top-level scalar fields "names" (n of them) of a JSON object that
 * zklock or another client wrote into a node: values[i], types[i] for
 * names[i] (the last one when repeated), NULL when absent, or null with
 * skip_null.  A field whose value is an object or array is absent.  False
 * when data is not a UTF-8 JSON object.  Never raises on bad data.
 */
bool
zk_json_top_fields(const char *data, int len, const char *const *names, int n,
				   bool skip_null, char **values, JsonTokenType *types)
{
	TopFields	tf;
	JsonLexContext *lex;
	JsonSemAction sem;

	memset(values, 0, sizeof(char *) * n);
	memset(types, 0, sizeof(JsonTokenType) * n);
	if (len < 2 || data[0] != '{' || memchr(data, '\0', len) != NULL ||
		!pg_verify_mbstr(PG_UTF8, data, len, true))
		return false;
	memset(&tf, 0, sizeof(tf));
	tf.names = names;
	tf.n = n;
	tf.skip_null = skip_null;
	tf.values = values;
	tf.types = types;
	lex = zk_json_lexer(data, len);
	memset(&sem, 0, sizeof(sem));
	sem.semstate = &tf;
	sem.object_start = tf_in;
	sem.object_end = tf_out;
	sem.array_start = tf_in;
	sem.array_end = tf_out;
	sem.object_field_start = tf_field_start;
	sem.scalar = tf_scalar;
	return pg_parse_json(lex, &sem) == JSON_SUCCESS;
}
