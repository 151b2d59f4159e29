/*-------------------------------------------------------------------------
 *
 * trust.h
 *	  What the worker trusts of what it finds in ZooKeeper (trust.c): the
 *	  cluster's key, the MACs of its durable nodes, and rate-limited log
 *	  lines about what it refused.
 *
 *	  $PGDATA/zklock.key holds 32 random bytes, made at the first start
 *	  that lacks it (0600 whatever the umask) and copied into shared memory
 *	  at every start of it.  Every transaction node, claim and heir this
 *	  cluster writes carries HMAC-SHA256(key, path under the root, NUL,
 *	  content): a node whose MAC does not verify is not acted on, however
 *	  truly it names a committed transaction of this cluster.  A copy of the
 *	  data directory (base backup, clone, standby) has the same key, so it
 *	  settles what its original left.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_TRUST_H
#define ZKLOCK_TRUST_H

#include "zklock.h"

#define ZK_KEY_FILE			"zklock.key"
#define ZK_KEY_LEN			32
#define ZK_MAC_LEN			32	/* HMAC-SHA256 */
#define ZK_MAC_HEX			(2 * ZK_MAC_LEN)

/* a claim's data ends with ,"mac":"<64 hex>"} */
#define ZK_CLAIM_MAC_KEY	",\"mac\":\""
#define ZK_CLAIM_MAC_TAIL	(sizeof(ZK_CLAIM_MAC_KEY) - 1 + ZK_MAC_HEX + 2)

/* what the MAC of a node's data says */
typedef enum ZkMacCheck
{
	ZKM_VERIFIED,				/* written by a holder of this cluster's key */
	ZKM_UNSIGNED_OK,			/* no MAC (an older version's), accepted in
								 * the run that made the key */
	ZKM_UNSIGNED,				/* no MAC, refused */
	ZKM_FORGED					/* a MAC that does not verify */
} ZkMacCheck;

extern bool zk_write_private_file(const char *path, const char *tmp,
								  const void *data, int len, bool durable);

/* postmaster: load (or make) the key into shared memory */
extern void zk_key_startup(void);

extern void zk_mac(const char *path, const void *data, size_t len, uint8 *out);
extern void zk_mac_parts(const char *path, const void *p1, size_t l1,
						 const void *p2, size_t l2, uint8 *out);
extern void zk_mac_hex(const uint8 *mac, char *out);
extern bool zk_mac_equal(const uint8 *a, const uint8 *b);
extern bool zk_mac_unsigned_ok(void);
extern void zk_mac_unsigned_done(void);
extern const char *zk_mac_relpath(const char *path);

/* claims: the data to create at path; what a claim's data says */
extern void zk_claim_sign(const char *path, const char *body, char *out, size_t outlen);
extern ZkMacCheck zk_claim_verify(const char *path, const char *value, int value_len);

/* heirs: "<run>:<mac>" */
extern void zk_heir_sign(const char *path, const char *run, char *out, size_t outlen);
extern bool zk_heir_verify(const char *path, const char *run, const char *value,
						   int value_len);


/* rate-limited log lines: one static ZkLogLimit per call site */
typedef struct ZkLogLimit
{
	TimestampTz window_start;
	int			lines;
	int			suppressed;
} ZkLogLimit;

#define ZK_LOG_LIMIT_LINES		10	/* lines per call site ... */
#define ZK_LOG_LIMIT_WINDOW_MS	60000	/* ... per minute */

extern bool zk_log_limited(ZkLogLimit *l, const char *what);

#endif							/* ZKLOCK_TRUST_H */
