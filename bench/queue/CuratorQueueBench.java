/*
 * CuratorQueueBench.java - one queue benchmark case for bench/queue/run.sh:
 * P producers and N consumers on Apache Curator's DistributedQueue in its
 * lock-safe mode (QueueBuilder.lockPath), each with its own CuratorFramework
 * client (own ZooKeeper session), all threads of this one JVM.
 *
 *   java -cp <build dir>:<curator, zookeeper, guava, slf4j jars> CuratorQueueBench \
 *        PORT PATH CONSUMERS SECONDS WARMUP_SECONDS BACKLOG DRAIN_SECONDS [PRODUCERS]
 *
 * Queue items live in PATH/items, the consumers' locks in PATH/locks.
 * The producers put 100-byte payloads starting with
 * "seq=<12 digits>;t=<16 digits>;" (a number 0, 1, 2, ... from one counter
 * shared by the producers, and the wall-clock time of the put in
 * microseconds), synchronously (putInBackground(false)), and wait while
 * BACKLOG items are put and not yet consumed.  A consumer counts an item in
 * consumeMessage(), where it also takes the enqueue-to-dequeue latency of
 * the items that count in the timed window; in lock-safe mode Curator deletes
 * the item node right after consumeMessage returns, in the same thread.
 *
 * Timeline as in queue_bench.py: connect; WARMUP_SECONDS of work that is not
 * counted (the JIT compiles meanwhile); the timed window framed by two mntr
 * requests (zk_packets_received); the producer stops and the consumers drain
 * the queue until PATH/items and PATH/locks are empty (at most DRAIN_SECONDS);
 * every client is closed; a fresh client reads what ZooKeeper still holds and
 * the consumed sequence numbers are checked: none lost, none consumed twice,
 * none consumed and still present.  Prints one line in queue_bench.py's
 * format; exit status 0 when verify=ok.
 */

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;

public class CuratorQueueBench
{
	static final int PAYLOAD_LEN = 100;

	static final int WAIT = 0, RUN = 1, DRAIN = 2, STOP = 3;

	static final AtomicInteger phase = new AtomicInteger(WAIT);
	static final AtomicLong produced = new AtomicLong();
	static final AtomicLong nextSeq = new AtomicLong();
	static volatile boolean window = false;
	static final AtomicLong consumed = new AtomicLong();
	static final ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();
	/* one permit per item put and not yet consumed; set in run() */
	static Semaphore slots;

	static byte[] payload(long seq)
	{
		byte[] b = new byte[PAYLOAD_LEN];
		java.util.Arrays.fill(b, (byte) '.');
		byte[] head = String.format("seq=%012d;t=%016d;", seq, nowMicros()).getBytes(StandardCharsets.US_ASCII);
		System.arraycopy(head, 0, b, 0, head.length);
		return b;
	}

	/* wall-clock time in microseconds since the epoch */
	static long nowMicros()
	{
		java.time.Instant i = java.time.Instant.now();
		return i.getEpochSecond() * 1000000L + i.getNano() / 1000;
	}

	/* the put's time in a payload, -1 if none */
	static long parseT(byte[] data)
	{
		String s = new String(data, StandardCharsets.ISO_8859_1);
		int i = s.indexOf(";t=");
		if (i < 0 || s.length() < i + 19)
			return -1;
		String d = s.substring(i + 3, i + 19);
		for (int k = 0; k < d.length(); k++)
			if (!Character.isDigit(d.charAt(k)))
				return -1;
		return Long.parseLong(d);
	}

	/* sequence number in a payload (or in Curator's serialized node data), -1 if none */
	static long parseSeq(byte[] data)
	{
		String s = new String(data, StandardCharsets.ISO_8859_1);
		int i = s.indexOf("seq=");
		if (i < 0 || s.length() < i + 16)
			return -1;
		String d = s.substring(i + 4, i + 16);
		for (int k = 0; k < d.length(); k++)
			if (!Character.isDigit(d.charAt(k)))
				return -1;
		return Long.parseLong(d);
	}

	static CuratorFramework client(int port) throws Exception
	{
		CuratorFramework c = CuratorFrameworkFactory.newClient("127.0.0.1:" + port, 10000, 10000,
															   new RetryNTimes(3, 100));
		c.start();
		if (!c.blockUntilConnected(15, TimeUnit.SECONDS))
			throw new RuntimeException("Curator client not connected after 15 s");
		return c;
	}

	static final QueueSerializer<byte[]> BYTES = new QueueSerializer<byte[]>()
	{
		@Override
		public byte[] serialize(byte[] item)
		{
			return item;
		}

		@Override
		public byte[] deserialize(byte[] bytes)
		{
			return bytes;
		}
	};

	static class Consumer implements QueueConsumer<byte[]>
	{
		final List<Long> seqs = new ArrayList<>();
		final List<Long> lats = new ArrayList<>();

		@Override
		public void consumeMessage(byte[] item)
		{
			long now = nowMicros();
			synchronized (seqs)
			{
				seqs.add(parseSeq(item));
				if (window)
				{
					long t = parseT(item);
					lats.add(t < 0 ? -1 : now - t);
				}
			}
			consumed.incrementAndGet();
			slots.release();
		}

		@Override
		public void stateChanged(CuratorFramework c, ConnectionState newState)
		{
			if (newState != ConnectionState.CONNECTED && newState != ConnectionState.RECONNECTED)
				errors.add("consumer session state " + newState);
		}
	}

	static long pct(long[] sorted, double q)
	{
		if (sorted.length == 0)
			return 0;
		int i = (int) Math.ceil(q * sorted.length) - 1;
		return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
	}

	static int childCount(CuratorFramework c, String path) throws Exception
	{
		return c.checkExists().forPath(path) == null ? 0 : c.getChildren().forPath(path).size();
	}

	public static void main(String[] argv)
	{
		int rc;
		try
		{
			rc = run(argv);
		}
		catch (Throwable e)
		{
			e.printStackTrace();
			rc = 1;
		}
		/* exits even while some client thread still runs */
		System.exit(rc);
	}

	static int run(String[] argv) throws Exception
	{
		if (argv.length != 7 && argv.length != 8)
		{
			System.err.println("usage: CuratorQueueBench PORT PATH CONSUMERS SECONDS WARMUP_SECONDS BACKLOG DRAIN_SECONDS [PRODUCERS]");
			return 2;
		}
		final int port = Integer.parseInt(argv[0]);
		final String base = argv[1];
		final int nConsumers = Integer.parseInt(argv[2]);
		final double seconds = Double.parseDouble(argv[3]);
		final double warmup = Double.parseDouble(argv[4]);
		final long backlog = Long.parseLong(argv[5]);
		final double drainSeconds = Double.parseDouble(argv[6]);
		final int nProducers = argv.length > 7 ? Integer.parseInt(argv[7]) : 1;
		slots = new Semaphore((int) backlog);
		final String items = base + "/items";
		final String locks = base + "/locks";

		List<CuratorFramework> clients = new ArrayList<>();
		List<DistributedQueue<byte[]>> queues = new ArrayList<>();
		List<Consumer> consumers = new ArrayList<>();
		CuratorFramework checker = client(port);
		clients.add(checker);

		/* producers: a queue without a consumer only puts */
		List<DistributedQueue<byte[]>> producerQueues = new ArrayList<>();
		for (int i = 0; i < nProducers; i++)
		{
			CuratorFramework pc = client(port);
			clients.add(pc);
			DistributedQueue<byte[]> pq =
				QueueBuilder.builder(pc, null, BYTES, items).lockPath(locks).putInBackground(false).buildQueue();
			pq.start();
			queues.add(pq);
			producerQueues.add(pq);
		}

		for (int i = 0; i < nConsumers; i++)
		{
			CuratorFramework cc = client(port);
			clients.add(cc);
			Consumer cons = new Consumer();
			consumers.add(cons);
			DistributedQueue<byte[]> q = QueueBuilder.builder(cc, cons, BYTES, items).lockPath(locks).buildQueue();
			q.start();
			queues.add(q);
		}
		/* both parents exist before the window (start() creates them) */
		for (int i = 0; i < 500 && (checker.checkExists().forPath(items) == null ||
									checker.checkExists().forPath(locks) == null); i++)
			Thread.sleep(10);

		List<Thread> producers = new ArrayList<>();
		for (int i = 0; i < nProducers; i++)
		{
			final DistributedQueue<byte[]> producerQueue = producerQueues.get(i);
			final int idx = i;
			Thread producer = new Thread(() ->
			{
				try
				{
					while (phase.get() == WAIT)
						LockSupport.parkNanos(200_000);
					while (phase.get() == RUN)
					{
						if (!slots.tryAcquire(100, TimeUnit.MILLISECONDS))
							continue;
						producerQueue.put(payload(nextSeq.getAndIncrement()));
						produced.incrementAndGet();
					}
				}
				catch (Exception e)
				{
					errors.add("producer " + idx + ": " + e);
				}
			}, "producer-" + i);
			producer.setDaemon(true);
			producer.start();
			producers.add(producer);
		}

		phase.set(RUN);
		Thread.sleep((long) (warmup * 1000));
		long pk0 = BenchUtil.mntrPackets(port);
		long c0 = consumed.get();
		long t0 = System.nanoTime();
		window = true;
		Thread.sleep((long) (seconds * 1000));
		window = false;
		long cWin = consumed.get() - c0;
		long t1 = System.nanoTime();
		long pk1 = BenchUtil.mntrPackets(port);
		phase.set(DRAIN);
		for (Thread producer : producers)
		{
			producer.join(30000);
			if (producer.isAlive())
				errors.add(producer.getName() + " did not stop");
		}

		/* drain: every produced item consumed and its node (and lock) gone */
		long deadline = System.nanoTime() + (long) (drainSeconds * 1e9);
		boolean drained = false;
		while (System.nanoTime() < deadline)
		{
			if (consumed.get() >= produced.get() && childCount(checker, items) == 0 &&
				childCount(checker, locks) == 0)
			{
				drained = true;
				break;
			}
			Thread.sleep(20);
		}
		phase.set(STOP);
		for (DistributedQueue<byte[]> q : queues)
			q.close();
		for (CuratorFramework c : clients)
			c.close();

		/* what ZooKeeper holds now, read by a fresh session */
		List<Long> left = new ArrayList<>();
		int claims;
		try (CuratorFramework v = client(port))
		{
			if (v.checkExists().forPath(items) != null)
				for (String n : v.getChildren().forPath(items))
				{
					try
					{
						left.add(parseSeq(v.getData().forPath(items + "/" + n)));
					}
					catch (org.apache.zookeeper.KeeperException.NoNodeException e)
					{
						/* deleted meanwhile */
					}
				}
			claims = childCount(v, locks);
		}

		long nProd = nextSeq.get();
		List<Long> cons = new ArrayList<>();
		List<Long> latList = new ArrayList<>();
		for (Consumer c : consumers)
			synchronized (c.seqs)
			{
				cons.addAll(c.seqs);
				latList.addAll(c.lats);
			}
		long[] lats = new long[latList.size()];
		for (int i = 0; i < lats.length; i++)
			lats[i] = latList.get(i);
		java.util.Arrays.sort(lats);
		if (lats.length > 0 && lats[0] < 0)
			errors.add("consumed payload(s) without a time");
		Set<Long> cset = new HashSet<>(cons);
		Set<Long> lset = new HashSet<>(left);
		long duplicated = (cons.size() - cset.size()) + (left.size() - lset.size());
		long consumedNotGone = 0, lost = 0, unknown = 0;
		for (Long s : cset)
			if (lset.contains(s))
				consumedNotGone++;
		for (long s = 0; s < nProd; s++)
			if (!cset.contains(s) && !lset.contains(s))
				lost++;
		Set<Long> all = new HashSet<>(cset);
		all.addAll(lset);
		for (Long s : all)
			if (s < 0 || s >= nProd)
				unknown++;
		boolean bad = duplicated != 0 || consumedNotGone != 0 || lost != 0 || unknown != 0 || claims != 0 ||
			!errors.isEmpty() || (drained && !left.isEmpty());
		double elapsed = (t1 - t0) / 1e9;
		long pk = pk1 - pk0 - 1;
		System.out.printf("driver=curator producers=%d consumers=%d seconds=%.3f consumed=%d items_per_sec=%.1f zk_packets=%d " +
						  "packets_per_item=%s produced_total=%d consumed_total=%d drained=%d remaining=%d " +
						  "claims_left=%d lost=%d duplicated=%d consumed_not_gone=%d unknown=%d errors=%d verify=%s path=%s " +
						  "lat_p50_us=%d lat_p99_us=%d lat_max_us=%d%n",
						  nProducers, nConsumers, elapsed, cWin, cWin / elapsed, pk,
						  cWin > 0 ? String.format("%.2f", (double) pk / cWin) : "-", nProd, cons.size(),
						  drained ? 1 : 0, left.size(), claims, lost, duplicated, consumedNotGone, unknown,
						  errors.size(), bad ? "FAILED" : "ok", base,
						  pct(lats, 0.50), pct(lats, 0.99), lats.length > 0 ? lats[lats.length - 1] : 0);
		int k = 0;
		for (String e : errors)
			if (k++ < 10)
				System.err.println("error: " + e);
		System.out.flush();
		return bad ? 1 : 0;
	}
}
