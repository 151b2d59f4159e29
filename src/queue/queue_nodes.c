/*-------------------------------------------------------------------------
 *
 * queue_nodes.c
 *	  What the queue's nodes are, at the bottom of its stack (README): the
 *	  path of a queue, the names and ids of its items, and the seals (MACs)
 *	  of its transaction nodes and of the records it keeps of published
 *	  ones.  Pure functions, run by backends and the worker.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "queue.h"
#include "trust.h"

/* <root>/queues/<encoded name> for a UTF-8 name */
void
zk_queue_path(const char *name, char *out, size_t outlen)
{
	char		ename[ZKLOCK_ENAME_MAX + 1];

	zk_encode_name(name, strlen(name), ename);
	snprintf(out, outlen, "%s/queues/%s", zk_root, ename);
}

/*
 * Is this child of a queue's entries an item, "entry-PPP-<seq>" (kazoo's
 * LockingQueue), and of which priority?  Anything else another client put
 * there is not ours to take.
 */
bool
zk_queue_node_priority(const char *child, int *priority)
{
	int			i;
	size_t		len = strlen(child);

	if (len < 11 || len >= ZKQ_NODE_MAX || strncmp(child, "entry-", 6) != 0 ||
		child[9] != '-')
		return false;
	for (i = 6; i < 9; i++)
		if (child[i] < '0' || child[i] > '9')
			return false;
	for (i = 10; i < (int) len; i++)
		if (!((child[i] >= '0' && child[i] <= '9') || (i == 10 && child[i] == '-')))
			return false;
	*priority = (child[6] - '0') * 100 + (child[7] - '0') * 10 + (child[8] - '0');
	return true;
}

/*
 * An item's msg_id: 2^62 + czxid * 1024 + seq, where seq is the number in
 * the item's name (entry-PPP-<seq>).
 *
 * Within one incarnation of a queue's entries node the number of an item
 * grows with its creation: ZooKeeper names a sequential child after its
 * parent's count of child changes, and a transaction's (multi's) items in
 * one queue get consecutive numbers (zklock's own names past the counter's
 * end are handed out in commit order too).  So of two items the later one
 * has the larger czxid (another transaction) or the same czxid and a
 * larger number, and czxid * 1024 + seq is strictly larger: unique within
 * the queue for any producer, whatever the size of one multi (kazoo's
 * put_all of more than 1,024 items included).
 *
 * The 2^62 keeps these ids apart from the earlier definition, (czxid <<
 * 10) | (seq & 1023), which is below 2^62 for every epoch below 2^20: an id
 * an application stored before an upgrade never equals a new one, and new
 * ids are larger.  The arithmetic stays below 2^62 while the czxid's epoch
 * is below 2^20 (a million leader elections); beyond that it wraps within
 * the 62 bits.  A number printed negative (ZooKeeper's counter past 2^31)
 * counts from 2^32.
 */
#define ZKQ_MSG_ID_BASE		(UINT64CONST(1) << 62)

/* The id of the item node named node, created at czxid (the rule above) */
int64
zk_queue_msg_id(int64 czxid, const char *node)
{
	int64		seq = 0;
	uint64		v;

	if (strlen(node) > 10)
		seq = strtoll(node + 10, NULL, 10);
	if (seq < 0)
		seq += INT64CONST(4294967296);
	v = (uint64) czxid * 1024 + (uint64) seq;
	return (int64) (ZKQ_MSG_ID_BASE | (v & (ZKQ_MSG_ID_BASE - 1)));
}

/* ---- seals: the header's mac, over the blob with it zeroed ---- */

/* Sign a transaction node's blob for path: its header's mac, over it zeroed */
void
zk_txn_sign(const char *path, char *blob, size_t len)
{
	ZkTxnHeader *h = (ZkTxnHeader *) blob;

	memset(h->mac, 0, ZK_MAC_LEN);
	zk_mac(path, blob, len, h->mac);
}

/*
 * blob: the node's data widened to the current header (queue_settle.c);
 * had_mac: it was written with one.
 */
ZkMacCheck
zk_txn_verify(const char *path, const char *blob, size_t len, bool had_mac)
{
	ZkTxnHeader h;
	uint8		mac[ZK_MAC_LEN];

	if (!had_mac)
		return zk_mac_unsigned_ok() ? ZKM_UNSIGNED_OK : ZKM_UNSIGNED;
	memcpy(&h, blob, sizeof(h));
	memset(h.mac, 0, ZK_MAC_LEN);
	zk_mac_parts(path, &h, sizeof(h), blob + sizeof(h), len - sizeof(h), mac);
	return zk_mac_equal(mac, ((const ZkTxnHeader *) blob)->mac) ? ZKM_VERIFIED : ZKM_FORGED;
}

/* a kept published node (queue.h): sign it in place; check one */
/* a kept published node: sign it in place; check one */
void
zk_kept_sign(const char *path, ZkTxnKept *k)
{
	memset(k->mac, 0, ZK_MAC_LEN);
	zk_mac(path, k, sizeof(*k), k->mac);
}

bool
zk_kept_verify(const char *path, const ZkTxnKept *k)
{
	ZkTxnKept	c = *k;
	uint8		mac[ZK_MAC_LEN];

	memset(c.mac, 0, ZK_MAC_LEN);
	zk_mac(path, &c, sizeof(c), mac);
	return zk_mac_equal(mac, k->mac);
}
