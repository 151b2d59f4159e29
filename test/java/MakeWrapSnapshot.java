/*
 * MakeWrapSnapshot.java - write a ZooKeeper 3.8 data directory whose lock
 * parent, or queue's entries parent, is close to the end of its sequence
 * numbers.
 *
 * usage: java -cp <zookeeper jars>:<classes> MakeWrapSnapshot DATADIR [CVERSION [PARENT [NEXTQ:VERSION]]]
 *
 * Writes DATADIR/version-2/snapshot.<zxid> holding
 *   /zklock                  persistent
 *   /zklock/locks            persistent
 *   PARENT                   container (default /zklock/locks/wrap)
 * or, when PARENT is /zklock/queues/<name>/entries,
 *   /zklock/queues, /zklock/queues/<name>, /zklock/queues/<name>/taken
 *   PARENT                   persistent
 * and in both cases
 *   PARENT/keeper            persistent, not a lock contender: the parent is
 *                            never empty, so ZooKeeper never removes it
 * with PARENT's cversion (the counter that names sequential children) set
 * to CVERSION (default 2^31 - 5).  NEXTQ:VERSION (a queue path, e.g.
 * /zklock/queues/vq:2147483645) adds a second queue, NEXTQ with entries and
 * taken, whose next (the number zklock names its items from once a queue's
 * counter has run out) holds 2147483648 at the given version.  A ZooKeeper started on DATADIR (dataDir
 * in zoo.cfg) loads it; its next sequential children under PARENT are named
 * ...2147483643, ...44, ...45, ...46, ...47 and then wrap.
 *
 * Used by test/t/220_lock_sequence_wrap.pl and 335_queue_wrap.pl: 2^31 creates cannot run in a test.
 * Only ZooKeeper's own public classes are used (DataTree, FileTxnSnapLog),
 * the way the server itself builds and saves its tree.  Prints the path of
 * the snapshot written.
 */

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.server.DataNode;
import org.apache.zookeeper.server.DataTree;
import org.apache.zookeeper.server.persistence.FileTxnSnapLog;

public class MakeWrapSnapshot
{
	/* ZooKeeper marks container nodes with this ephemeral owner */
	private static final long CONTAINER_OWNER = Long.MIN_VALUE;

	public static void main(String[] args) throws Exception
	{
		if (args.length < 1 || args.length > 4)
		{
			System.err.println("usage: MakeWrapSnapshot DATADIR [CVERSION [PARENT [NEXTQ:VERSION]]]");
			System.exit(2);
		}
		File dataDir = new File(args[0]);
		int cversion = args.length > 1 ? Integer.parseInt(args[1]) : Integer.MAX_VALUE - 4;
		String parent = args.length > 2 ? args[2] : "/zklock/locks/wrap";

		boolean queue = parent.startsWith("/zklock/queues/") && parent.endsWith("/entries") &&
			parent.indexOf('/', 15) == parent.length() - 8 && parent.length() > 23;

		if (!queue && (!parent.startsWith("/zklock/locks/") || parent.indexOf('/', 14) >= 0))
		{
			System.err.println("PARENT must be /zklock/locks/<name> or /zklock/queues/<name>/entries");
			System.exit(2);
		}
		if (!dataDir.isDirectory() && !dataDir.mkdirs())
		{
			System.err.println("cannot create " + dataDir);
			System.exit(1);
		}

		DataTree tree = new DataTree();
		long now = System.currentTimeMillis();
		long zxid = 0;

		/* -1: the parent's cversion is bumped the usual way */
		tree.createNode("/zklock", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
						0, -1, ++zxid, now);
		if (queue)
		{
			String		qpath = parent.substring(0, parent.length() - 8);

			tree.createNode("/zklock/queues", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
							0, -1, ++zxid, now);
			tree.createNode(qpath, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
							0, -1, ++zxid, now);
			tree.createNode(qpath + "/taken", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
							0, -1, ++zxid, now);
			tree.createNode(parent, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
							0, -1, ++zxid, now);
		}
		else
		{
			tree.createNode("/zklock/locks", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
							0, -1, ++zxid, now);
			tree.createNode(parent, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
							CONTAINER_OWNER, -1, ++zxid, now);
		}
		/* a given parentCVersion larger than the current one is taken as is */
		tree.createNode(parent + "/keeper",
						"not a lock contender, nor a queue item".getBytes(StandardCharsets.UTF_8),
						ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, cversion, ++zxid, now);
		if (args.length > 3)
		{
			int			colon = args[3].lastIndexOf(':');
			String		nq = colon > 0 ? args[3].substring(0, colon) : "";

			if (!queue || !nq.startsWith("/zklock/queues/") || nq.indexOf('/', 15) >= 0 ||
				nq.length() == 15 || nq.equals(parent.substring(0, parent.length() - 8)))
			{
				System.err.println("NEXTQ:VERSION needs a queue PARENT and another /zklock/queues/<name>");
				System.exit(2);
			}
			tree.createNode(nq, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, -1, ++zxid, now);
			tree.createNode(nq + "/entries", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
							0, -1, ++zxid, now);
			tree.createNode(nq + "/taken", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
							0, -1, ++zxid, now);
			tree.createNode(nq + "/next", "2147483648".getBytes(StandardCharsets.UTF_8),
							ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, -1, ++zxid, now);
			tree.getNode(nq + "/next").stat.setVersion(Integer.parseInt(args[3].substring(colon + 1)));
		}
		tree.lastProcessedZxid = zxid;

		/*
		 * The persisted cversion counts creates and names the next
		 * sequential child.  (Clients see 2 * it - number of children, in
		 * 32 bits: -11 here.)
		 */
		DataNode node = tree.getNode(parent);
		if (node.stat.getCversion() != cversion || node.getChildren().size() != 1)
		{
			System.err.println("unexpected stat of " + parent + ": cversion "
							   + node.stat.getCversion() + ", children "
							   + node.getChildren().size());
			System.exit(1);
		}

		FileTxnSnapLog log = new FileTxnSnapLog(dataDir, dataDir);
		log.save(tree, new ConcurrentHashMap<Long, Integer>(), true);
		log.close();

		File snap = new File(new File(dataDir, "version-2"),
							 "snapshot." + Long.toHexString(zxid));
		if (!snap.isFile())
		{
			System.err.println("snapshot " + snap + " was not written");
			System.exit(1);
		}
		System.out.println(snap.getPath());
	}
}
