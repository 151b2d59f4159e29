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
	if (len == ZKQ_GROUPED_NAME_LEN && child[20] == 'g')
	{
		/* a message group's item: entry-PPP-<10 digits>g<10 digits> */
		for (i = 10; i < (int) len; i++)
			if (i != 20 && (child[i] < '0' || child[i] > '9'))
				return false;
	}
	else
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

	/*
	 * A message group's item (queue_delay.c): its own multi created it, so
	 * its czxid alone tells it apart; bit 61 keeps these ids apart from the
	 * others (below 2^61 while the czxid's epoch is below 2^19)
	 */
	if (strlen(node) == ZKQ_GROUPED_NAME_LEN && node[20] == 'g')
		return (int64) (ZKQ_MSG_ID_BASE | (UINT64CONST(1) << 61) |
						((uint64) czxid & ((UINT64CONST(1) << 61) - 1)));
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

/*
 * ---- dead letters: the data of an item a policy moved aside ----
 *
 * An item a dead-letter policy moves (queue_claim.c, "Dead letters") keeps
 * its payload and gains a header in front of it, so that the move is one
 * multi and the item carries where it came from in its own data:
 *
 *	ZKQ_DL_MAGIC (20 bytes, beginning with a zero byte: never text)
 *	uint32	attempts	hand-outs at the origin that ended without a consume
 *	int64	msg_id		its msg_id at the origin
 *	uint16	origin_len	then the origin queue's name (UTF-8, without
 *						its namespace: the same as the dead-letter queue's)
 *	the payload
 *
 * All in network byte order.  zklock shows the payload without the header
 * and the header in zk_message's origin columns; kazoo sees the data as it
 * is.  zk_enqueue refuses a payload that begins with the magic, so a
 * producer through zklock cannot forge one.
 */
static void
put_be(char *p, uint64 v, int n)
{
	int			i;

	for (i = n - 1; i >= 0; i--)
	{
		p[i] = (char) (v & 0xFF);
		v >>= 8;
	}
}

static uint64
get_be(const char *p, int n)
{
	uint64		v = 0;
	int			i;

	for (i = 0; i < n; i++)
		v = (v << 8) | (unsigned char) p[i];
	return v;
}

/* Does data begin with the dead-letter magic? */
bool
zk_q_dl_is_wrapped(const char *data, Size len)
{
	return len >= ZKQ_DL_MAGIC_LEN && memcmp(data, ZKQ_DL_MAGIC, ZKQ_DL_MAGIC_LEN) == 0;
}

/*
 * The header of an item of origin (olen bytes, at most ZKLOCK_NAME_MAX)
 * into out (at least ZKQ_DL_HEADER_MAX bytes); returns its length
 */
Size
zk_q_dl_header(char *out, const char *origin, int olen, int32 attempts, int64 msg_id)
{
	olen = Min(Max(olen, 0), ZKLOCK_NAME_MAX);
	memcpy(out, ZKQ_DL_MAGIC, ZKQ_DL_MAGIC_LEN);
	put_be(out + ZKQ_DL_MAGIC_LEN, (uint64) (uint32) Max(attempts, 0), 4);
	put_be(out + ZKQ_DL_MAGIC_LEN + 4, (uint64) msg_id, 8);
	put_be(out + ZKQ_DL_MAGIC_LEN + 12, (uint64) olen, 2);
	memcpy(out + ZKQ_DL_FIXED_LEN, origin, olen);
	return ZKQ_DL_FIXED_LEN + olen;
}

/*
 * Read the header of an item's data: false (dl untouched) when data is
 * not a well-formed dead letter, which is then an ordinary payload
 */
bool
zk_q_dl_unwrap(const char *data, Size len, ZkDeadLetter *dl)
{
	Size		olen;

	if (!zk_q_dl_is_wrapped(data, len) || len < ZKQ_DL_FIXED_LEN)
		return false;
	olen = (Size) get_be(data + ZKQ_DL_MAGIC_LEN + 12, 2);
	if (olen == 0 || olen > ZKLOCK_NAME_MAX || len < ZKQ_DL_FIXED_LEN + olen)
		return false;
	dl->attempts = (int32) Min(get_be(data + ZKQ_DL_MAGIC_LEN, 4), (uint64) PG_INT32_MAX);
	dl->msg_id = (int64) get_be(data + ZKQ_DL_MAGIC_LEN + 4, 8);
	dl->origin = data + ZKQ_DL_FIXED_LEN;
	dl->origin_len = (int) olen;
	dl->payload = data + ZKQ_DL_FIXED_LEN + olen;
	dl->plen = len - ZKQ_DL_FIXED_LEN - olen;
	return true;
}
